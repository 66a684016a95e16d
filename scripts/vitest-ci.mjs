// Runs every vitest project in one process and ends with the plain summary line CI reads:
//   tests: N passed, N failed, N skipped
// Exits non-zero on a failed test, a test file that failed to load, or a run where nothing passed.
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const vitest = fileURLToPath(new URL("../node_modules/.bin/vitest", import.meta.url));
const report = fileURLToPath(new URL("../.vitest-ci.json", import.meta.url)); // gitignored
rmSync(report, { force: true });

const run = spawnSync(vitest, ["run", "--reporter=default", "--reporter=json", `--outputFile=${report}`, ...process.argv.slice(2)], {
  stdio: "inherit",
  cwd: root,
});

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
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
const status = run.status ?? 1;
process.exit(status !== 0 ? status : failed > 0 || passed === 0 ? 1 : 0);
