// Runs turbo with its telemetry off (no banner on a first run, no lookup of its telemetry host),
// on every platform: an environment prefix in a package.json script would need a POSIX shell.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const turbo = fileURLToPath(new URL("../node_modules/turbo/bin/turbo", import.meta.url));
const run = spawnSync(process.execPath, [turbo, ...process.argv.slice(2)], {
  stdio: "inherit",
  env: { ...process.env, TURBO_TELEMETRY_DISABLED: "1", DO_NOT_TRACK: "1" },
});
process.exit(run.status ?? 1);
