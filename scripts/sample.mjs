// The README's sample conversion: a bundled fixture made by the reference tools, converted with
// the built command, then listed with `st-convert info`. Run by `pnpm sample`, from the repository's root
// (pnpm's working directory for a script), where it makes out/ for the README's examples.
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const cli = fileURLToPath(new URL("../packages/cli/dist/st-convert.cjs", import.meta.url));
const input = "fixtures/npy/sample_model.npz"; // written by numpy (fixtures/gen_npy.py)
const output = "out/sample.safetensors";

mkdirSync("out", { recursive: true });
for (const args of [
  [input, output, "--force"],
  ["info", output],
]) {
  console.log(`$ st-convert ${args.join(" ")}`);
  const run = spawnSync(process.execPath, [cli, ...args], { stdio: "inherit" });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
