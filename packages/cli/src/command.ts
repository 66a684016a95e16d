/**
 * What every command of `st-convert` shares: the interface `main` dispatches to, the context a
 * command runs in (its output streams, warnings, progress line and JSON report), and the mapping
 * of failures to exit statuses.
 */
import { type ByteSink, type FormatOption, type TensorFormat, isStConvertError } from "@st-convert/core";
import { type OptionTable, type ParsedCommandLine, UsageError } from "./cliOptions.js";
import type { ProgressLine } from "./progress.js";
import { type Report, describeError, reportError } from "./report.js";
import type { ClosableSource } from "./stdio.js";

/** Exit status: success. */
export const EXIT_OK = 0;
/** Exit status: an input was refused or a conversion failed. */
export const EXIT_FAILURE = 1;
/** Exit status: the command line was wrong. */
export const EXIT_USAGE = 2;
/** Exit status when the reader of a data output on stdout went away (as for a process killed by SIGPIPE). */
export const EXIT_BROKEN_PIPE = 141;

/** Where the command reads and writes; the real process or a test's buffers. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** Stops a running conversion (wired to SIGINT/SIGTERM/SIGHUP by the bin). */
  signal?: AbortSignal;
  /** Whether stderr is a terminal: progress is drawn only there. */
  stderrIsTTY?: boolean;
  /** Terminal width for the progress line. */
  columns?: number;
  /** The terminal type (`TERM`): `dumb` terminals cannot redraw a line, so get no progress line. */
  term?: string;
  /** Opens stdin as a source (`-` as the input); absent: `-` is refused. */
  openStdin?: () => Promise<ClosableSource>;
  /** A sink over stdout (`-` as the output); absent: `-` is refused. */
  stdoutSink?: () => ByteSink;
}

/** Everything a command needs while it runs. */
export interface CommandContext {
  readonly io: CliIo;
  readonly formats: readonly TensorFormat[];
  readonly formatOptions: readonly FormatOption[];
  readonly json: boolean;
  readonly quiet: boolean;
  /** The progress line, when stderr is a terminal that can draw one and `--quiet` is off. */
  readonly progress: ProgressLine | undefined;
  /** The report `--json` prints; the command fills it as it goes. */
  report: Report;
  /** Where the JSON report goes: stdout, unless stdout carries the converted data (`-o -`). */
  reportTo: "stdout" | "stderr";
  /** Records a notice in the report and prints it on stderr (unless `--quiet`). */
  warn(file: string, message: string): void;
}

/** One command of the command line. */
export interface Command {
  readonly name: "convert" | "info" | "batch" | "hash" | "stats" | "diff" | "help";
  /** One line for the general help. */
  readonly summary: string;
  /** Its own options (the global ones and the formats' are added by `main`). */
  readonly options: OptionTable;
  /** Whether the formats' options (`--sep`, `--compress`…) apply. */
  readonly takesFormatOptions: boolean;
  /** Its help text. */
  help(formats: readonly TensorFormat[], formatOptions: readonly FormatOption[]): string;
  /** Runs it; resolves to the exit status. Failures may throw: `main` reports them. */
  run(parsed: ParsedCommandLine, context: CommandContext): Promise<number>;
}

/** The exit status for a failure: usage mistakes 2, a broken stdout 141, everything else 1. */
export function exitStatusOf(error: unknown): number {
  if (error instanceof UsageError) return EXIT_USAGE;
  if (isStConvertError(error)) {
    if (error.code === "UnknownFormat" || error.code === "InvalidOption") return EXIT_USAGE;
    if (error.code === "InvalidArgument" && error.file === undefined) return EXIT_USAGE;
    if (error.code === "BrokenPipe") return EXIT_BROKEN_PIPE;
  }
  return EXIT_FAILURE;
}

/**
 * One line for a failure: the error's own message (file, tensor, rule) and its code; messages
 * written for library callers are put in the command line's words.
 */
export function describeFailure(error: unknown): string {
  if (isStConvertError(error)) {
    // The library's message also names the API's option; the command line has only --force.
    if (error.code === "OutputExists") return `${error.message.replace(" (or { force: true })", "")} [OutputExists]`;
    if (error.code === "NothingToWrite")
      return `${error.message.replace("allow an empty output to write one anyway", "pass --allow-empty to write one anyway")} [NothingToWrite]`;
  }
  return describeError(error);
}

/** Prints the failure (stderr, and the report with `--json`) and returns the exit status. */
export function reportFailure(error: unknown, context: Pick<CommandContext, "io" | "json" | "report" | "reportTo">, debug: boolean, command: string): number {
  const status = exitStatusOf(error);
  if (status === EXIT_BROKEN_PIPE) return status; // the reader left; nobody is there to tell
  context.report.ok = false;
  context.report.error = reportError(error);
  context.report.error.message = describeFailure(error).replace(/ \[\w+\]$/, "");
  if (context.json) printReport(context);
  const help = command === "convert" ? "st-convert --help" : `st-convert ${command} --help`;
  if (status === EXIT_USAGE) {
    context.io.stderr(`st-convert: ${error instanceof Error ? error.message : String(error)}\nTry '${help}'.\n`);
    return status;
  }
  context.io.stderr(`st-convert: ${describeFailure(error)}${isStConvertError(error) ? "" : "; rerun with --debug for details"}\n`);
  if (debug && error instanceof Error && error.stack !== undefined) context.io.stderr(`${error.stack}\n`);
  return status;
}

/** Prints the JSON report: one object, one line. */
export function printReport(context: Pick<CommandContext, "io" | "report" | "reportTo">): void {
  const line = `${JSON.stringify(context.report)}\n`;
  if (context.reportTo === "stdout") context.io.stdout(line);
  else context.io.stderr(line);
}
