// Runs every vitest project in one process and ends with the plain summary line CI reads:
//   tests: N passed, N failed, N skipped
// Exits non-zero on a failed test, a test file that failed to load, a run where nothing passed, or
// a process warning printed during the run (a file descriptor closed on garbage collection, a
// deprecation): such a warning is a defect (an unclosed source, an outdated call), so it fails the
// run like a failed test, and is counted as one.
import { spawn } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const vitest = fileURLToPath(new URL("../node_modules/.bin/vitest", import.meta.url));
const report = fileURLToPath(new URL("../.vitest-ci.json", import.meta.url)); // gitignored
rmSync(report, { force: true });

/** Node's own warning lines, as `process.emitWarning` prints them: `(node:123) [DEP0137] DeprecationWarning: …`. */
const NODE_WARNING = /^\(node:\d+\) (?:\[[A-Z0-9_]+\] )?\w*Warning: .*/;

/**
 * The run's environment, less `NODE_EXTRA_CA_CERTS`. Where it is set (this project's machines set
 * it), every Node process parses the whole certificate file before its first line: about 40 ms
 * on an idle machine, 0.6–0.7 s while the test suite keeps both cores busy (`node -e 0`, 5 runs
 * each, against 0.11–0.19 s without), paid by every `st-convert` process the CLI tests start
 * (cli/test/flax.test.ts alone took 44 s with it, 28 s without). No test speaks TLS: the remote
 * tests' servers are plain HTTP on 127.0.0.1.
 */
const env = { ...process.env };
delete env.NODE_EXTRA_CA_CERTS;

const warnings = [];
const child = spawn(vitest, ["run", "--reporter=default", "--reporter=json", `--outputFile=${report}`, ...process.argv.slice(2)], {
  stdio: ["ignore", "pipe", "pipe"],
  cwd: root,
  env,
});
for (const [stream, out] of [
  [child.stdout, process.stdout],
  [child.stderr, process.stderr],
]) {
  let pending = "";
  stream.setEncoding("utf8");
  stream.on("data", (text) => {
    out.write(text);
    const lines = (pending + text).split("\n");
    pending = lines.pop() ?? "";
    for (const line of lines) if (NODE_WARNING.test(line)) warnings.push(line);
  });
  stream.on("end", () => {
    if (NODE_WARNING.test(pending)) warnings.push(pending);
  });
}
const status = await new Promise((resolve) => child.on("close", (code) => resolve(code ?? 1)));

let passed = 0;
let failed = 0;
let skipped = 0;
try {
  const result = JSON.parse(readFileSync(report, "utf8"));
  passed = result.numPassedTests ?? 0;
  failed = result.numFailedTests ?? 0;
  if (failed === 0) failed = result.numFailedTestSuites ?? 0; // a file that failed to load
  skipped = (result.numPendingTests ?? 0) + (result.numTodoTests ?? 0);
} catch {
  failed += 1; // no report: vitest itself failed
}
if (warnings.length > 0) {
  console.log(`\n${warnings.length} process warning(s) during the run, each a defect to fix:`);
  for (const line of warnings) console.log(`  ${line}`);
  failed += warnings.length;
}
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(status !== 0 ? status : failed > 0 || passed === 0 ? 1 : 0);
