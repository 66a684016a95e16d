/** The `st-convert` executable: wires the process to `main()` (bin.ts calls {@link run}). */
import { fstatSync } from "node:fs";
import { main } from "./main.js";
import { createDescriptorSink } from "@st-convert/core/node";
import { STDOUT_NAME, openStdinSource } from "./stdio.js";

/** Runs the command of `process.argv`, setting `process.exitCode` once it is done. */
export function run(): void {
  const controller = new AbortController();
  let interrupted = false;
  const stop = (signal: NodeJS.Signals, status: number) => () => {
    // First signal: stop at the next chunk so that temporary outputs are removed; a second one exits now.
    if (interrupted) process.exit(status);
    interrupted = true;
    process.exitCode = status;
    controller.abort(new Error(`stopped by ${signal}`));
  };
  process.on("SIGINT", stop("SIGINT", 130));
  process.on("SIGTERM", stop("SIGTERM", 143));
  // A closed terminal or ssh session: like Ctrl-C, so that no temporary output is left behind.
  process.on("SIGHUP", stop("SIGHUP", 129));

  // A reader that went away (`st-convert info big.safetensors | head -3`): stop writing, quietly.
  // A data output on stdout reports it through its sink (exit 141); a listing just ends. The stream
  // is made on the first listing's write, not before: making it costs a conversion 1–2 ms of start-up.
  let stdoutClosed = false;
  let stdout: NodeJS.WriteStream | undefined;
  const writeStdout = (text: string): void => {
    if (stdout === undefined) {
      stdout = process.stdout;
      stdout.on("error", (error: NodeJS.ErrnoException) => {
        if (error.code !== "EPIPE") throw error;
        stdoutClosed = true;
      });
    }
    if (!stdoutClosed) stdout.write(text);
  };

  const stderrIsTTY = stderrIsTerminal();
  // Not a top-level await: the bundle is CommonJS (scripts/bundle.mjs).
  void main(process.argv.slice(2), {
    stdout: writeStdout,
    stderr: (text) => process.stderr.write(text),
    signal: controller.signal,
    stderrIsTTY,
    columns: stderrIsTTY ? process.stderr.columns : undefined,
    term: process.env.TERM,
    openStdin: () => openStdinSource(process.stdin),
    // Descriptor 1 itself, written with gathered writes; a reader that left fails a write with BrokenPipe.
    stdoutSink: () => createDescriptorSink(1, STDOUT_NAME),
  }).then((status) => {
    process.exitCode = interrupted ? process.exitCode : status;
  });
}

/**
 * Whether descriptor 2 is a terminal. A pipe or a file cannot be one, and is told without making
 * `process.stderr`, which costs a conversion about 3 ms of start-up (a `--quiet` one writes nothing
 * there); only a character device is asked through the stream.
 */
function stderrIsTerminal(): boolean {
  try {
    if (!fstatSync(2).isCharacterDevice()) return false;
  } catch {
    return false;
  }
  return process.stderr.isTTY === true;
}
