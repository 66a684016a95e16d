// A long fuzz run of every reader (the CI suite runs a short, seeded one):
//   pnpm fuzz [--runs N] [--seed S] [--minutes M] [--project core|npy|flax|json|torch|gguf]  (torch includes the DCP folders: fuzzDcp.test.ts)
// With --minutes, it repeats rounds with fresh seeds until the time is up. Each failure prints the
// seed and the shrunk input, to be added to the hostile fixtures.
//
// The differential mode runs mutants of the reference-made fixtures through our readers and the
// reference Python's (packages/cli/test/differential.test.ts), then the writers' property:
//   pnpm fuzz --differential [--minutes M] [--format safetensors,npy,npz,flax,torch,json] [--seed S] [--mutants N]
// --minutes M gives each format M minutes (and each writer up to one); without it, N mutants per
// format (default 5000). A failure prints its seed, the mutant's index and the file, kept in a
// temporary folder. GGUF's differential reference is ggml's loader, run by the gguf project's own
// fuzz rounds (packages/gguf/test/fuzzLoader.test.ts: 4 × FUZZ_RUNS mutants, with libggml-base).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "20000" },
    seed: { type: "string" },
    minutes: { type: "string" },
    project: { type: "string" },
    differential: { type: "boolean", default: false },
    format: { type: "string" },
    mutants: { type: "string", default: "5000" },
  },
});
const root = fileURLToPath(new URL("..", import.meta.url));
const vitest = fileURLToPath(new URL("../node_modules/.bin/vitest", import.meta.url));
if (values.differential) {
  const seed = values.seed ?? String(Math.floor(Math.random() * 2 ** 31));
  console.log(`differential fuzz: FUZZ_SEED=${seed}${values.minutes === undefined ? ` ${values.mutants} mutants` : ` ${values.minutes} min`} per format`);
  const run = spawnSync(vitest, ["run", "--project", "cli", "test/differential.test.ts"], {
    cwd: root,
    stdio: "inherit",
    env: {
      ...process.env,
      FUZZ_SEED: seed,
      ST_CONVERT_REQUIRE_REF: "1",
      ST_CONVERT_DIFF_MUTANTS: values.mutants,
      ST_CONVERT_DIFF_SETS: String(Math.max(60, Math.floor(Number(values.mutants) / 10))),
      ...(values.minutes === undefined ? {} : { ST_CONVERT_DIFF_MINUTES: values.minutes }),
      ...(values.format === undefined ? {} : { ST_CONVERT_DIFF_FORMAT: values.format }),
    },
  });
  if (run.status !== 0)
    console.log(
      `differential fuzz: failure with FUZZ_SEED=${seed} (rerun: pnpm fuzz --differential --seed ${seed}${values.format ? ` --format ${values.format}` : ""})`,
    );
  process.exit(run.status ?? 1);
}
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
