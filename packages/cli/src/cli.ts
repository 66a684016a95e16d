#!/usr/bin/env node
/** The `st-convert` executable: wires the process to `main()`. */
import { main } from "./main.js";

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

const status = await main(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  signal: controller.signal,
  stderrIsTTY: process.stderr.isTTY === true,
  columns: process.stderr.columns,
});
process.exitCode = interrupted ? process.exitCode : status;
