// One command, timed (wall clock) with its peak resident set size from /usr/bin/time where the
// machine has it. Shared by the benchmarks and the hostile-corpus check.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

const timeBin = existsSync("/usr/bin/time") ? "/usr/bin/time" : undefined;

/**
 * Runs `command args` and returns its exit status, output, seconds and peak RSS in MiB (NaN
 * without /usr/bin/time). `scratch` is a folder for /usr/bin/time's report.
 */
export function measure(command, args, scratch, options = {}) {
  const timeFile = join(scratch, ".time");
  const argv = timeBin ? [timeBin, "-f", "%M", "-o", timeFile, command, ...args] : [command, ...args];
  const start = process.hrtime.bigint();
  const run = spawnSync(argv[0], argv.slice(1), { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...options });
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const rssMiB = timeBin ? Number(readFileSync(timeFile, "utf8").trim().split("\n").pop()) / 1024 : NaN;
  return { status: run.status, stdout: run.stdout, stderr: run.stderr, seconds, rssMiB };
}
