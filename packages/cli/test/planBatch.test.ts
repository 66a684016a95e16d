/**
 * A batch's plan: the paths it shows and writes, whatever way the folders are spelled. The plan
 * builds thousands of paths by appending names to a folder normalized once; each must be what
 * `path.join` of the folder and the file's relative path gives, and the checks that compare
 * absolute paths (the output folder inside the input, the run's own outputs) must still hold.
 */
import { copyFileSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { planBatch } from "st-convert";
import { safetensorsFormat } from "@st-convert/core";
import { fixturePath, makeTempDir } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
let cwd: string;
beforeEach(() => {
  ({ dir, cleanup } = makeTempDir());
  cwd = process.cwd();
  process.chdir(dir);
});
afterEach(() => {
  process.chdir(cwd);
  cleanup();
});

const npy = fixturePath("npy", "dtype_f32.npy");
const npz = fixturePath("npy", "npz_c_order.npz");

/** in/a.npy, in/sub/B.NPZ, in/sub/deep/c.npy, and what a walk must leave out. */
function makeTree(): void {
  mkdirSync("in/sub/deep", { recursive: true });
  copyFileSync(npy, "in/a.npy");
  copyFileSync(npz, "in/sub/B.NPZ");
  copyFileSync(npy, "in/sub/deep/c.npy");
  copyFileSync(npy, "in/.hidden.npy");
  writeFileSync("in/config.json", '{"hidden_size": 8}');
  writeFileSync("in/model.safetensors.index.json", '{"metadata": {}, "weight_map": {}}');
  writeFileSync("in/notes.txt", "not a tensor file");
  symlinkSync("sub", "in/link-to-folder");
}

const RELATIVE = ["a", "sub/B", "sub/deep/c"];

describe("planBatch", () => {
  for (const input of ["in", "in/", "./in", "in//", "./in/./", `${"DIR"}/in`]) {
    for (const outDir of ["out", "out/", "./out", "out//x/..", `${"DIR"}/out`]) {
      it(`input ${JSON.stringify(input)}, --out-dir ${JSON.stringify(outDir)}: every path is path.join's`, async () => {
        makeTree();
        const from = input.replace("DIR", dir);
        const to = outDir.replace("DIR", dir);
        const { planned, problems, ignored } = await planBatch([from], to, safetensorsFormat);
        expect(problems).toEqual([]);
        expect(ignored).toEqual([join(from, "config.json")]);
        expect(planned).toEqual(
          RELATIVE.map((rel) => ({
            input: join(from, `${rel}${rel === "sub/B" ? ".NPZ" : ".npy"}`),
            output: join(to, `${rel}.safetensors`),
          })),
        );
      });
    }
  }

  it("the current folder as input and as output: the run's own outputs are not inputs, and paths have no ./", async () => {
    makeTree();
    process.chdir("in");
    copyFileSync(npy, "a.safetensors.npy");
    // a.safetensors exists from an earlier run: it is this run's output for a.npy, not an input.
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), "a.safetensors");
    const { planned, problems } = await planBatch(["."], ".", safetensorsFormat);
    expect(problems).toEqual([]);
    expect(planned.map((job) => [job.input, job.output])).toEqual([
      ["a.npy", "a.safetensors"],
      ["a.safetensors.npy", "a.safetensors.safetensors"],
      ["sub/B.NPZ", "sub/B.safetensors"],
      ["sub/deep/c.npy", "sub/deep/c.safetensors"],
    ]);
  });

  it("an output folder inside the input folder is not walked, however either is spelled", async () => {
    makeTree();
    mkdirSync("in/out", { recursive: true });
    copyFileSync(npy, "in/out/old.npy");
    for (const [input, outDir] of [
      ["in", "in/out"],
      ["./in/", join(dir, "in", "out")],
      [join(dir, "in"), "in/sub/../out/"],
    ] as const) {
      const { planned } = await planBatch([input], outDir, safetensorsFormat);
      expect(planned.map((job) => relative(dir, resolve(dir, job.input)))).toEqual(["in/a.npy", "in/sub/B.NPZ", "in/sub/deep/c.npy"]);
    }
  });

  it("a file named twice, once by name and once in its folder, is one output refused the second time", async () => {
    makeTree();
    const { planned, problems } = await planBatch(["in/a.npy", "./in"], "out", safetensorsFormat);
    expect(planned[0]).toEqual({ input: "in/a.npy", output: "out/a.safetensors" });
    expect(problems.map((p) => p.message)).toEqual([`in/a.npy: converts to the same output as in/a.npy (out/a.safetensors) [InvalidArgument]`]);
  });
});
