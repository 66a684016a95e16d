// A long fuzz run of every reader (the CI suite runs a short, seeded one):
//   pnpm fuzz [--runs N] [--seed S] [--minutes M] [--project core|npy|flax|json|torch]
// With --minutes, it repeats rounds with fresh seeds until the time is up. Each failure prints the
// seed and the shrunk input, to be added to the hostile fixtures.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: { runs: { type: "string", default: "20000" }, seed: { type: "string" }, minutes: { type: "string" }, project: { type: "string" } },
});
const root = fileURLToPath(new URL("..", import.meta.url));
const vitest = fileURLToPath(new URL("../node_modules/.bin/vitest", import.meta.url));
const deadline = values.minutes === undefined ? 0 : Date.now() + Number(values.minutes) * 60_000;
let round = 0;
do {
  const seed = values.seed ?? String(Math.floor(Math.random() * 2 ** 31));
  console.log(`fuzz round ${++round}: FUZZ_RUNS=${values.runs} FUZZ_SEED=${seed}`);
  const run = spawnSync(vitest, ["run", "fuzz", ...(values.project === undefined ? [] : ["--project", values.project])], {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, FUZZ_RUNS: values.runs, FUZZ_SEED: seed },
  });
  if (run.status !== 0) {
    console.log(`fuzz: failure with FUZZ_SEED=${seed} (rerun: pnpm fuzz --seed ${seed} --runs ${values.runs})`);
    process.exit(1);
  }
} while (Date.now() < deadline);
console.log(`fuzz: ${round} round(s), no failure`);
