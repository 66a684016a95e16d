/**
 * A batch makes each output folder once (not once per file) and looks for stale temporary files
 * only in output folders that existed before it: the layout must come out whole all the same.
 */
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { convertMany } from "st-convert";
import { fixturePath, makeTempDir } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const mixed = fixturePath("safetensors", "mixed.safetensors");

function listFiles(root: string): string[] {
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(root.length + 1))
    .sort();
}

describe("batch output folders", () => {
  it("makes every folder of the layout, two jobs at once, into an output folder that does not exist yet", async () => {
    const root = join(dir, "in");
    const expected: string[] = [];
    for (const folder of ["a", "a/deep/er", "b", ""]) {
      mkdirSync(join(root, folder), { recursive: true });
      for (let k = 0; k < 5; k++) {
        copyFileSync(mixed, join(root, folder, `m${k}.safetensors`));
        expected.push(join(folder, `m${k}.npz`));
      }
    }
    const out = join(dir, "not", "yet", "out");
    const summary = await convertMany([root], { outDir: out, to: "npz", jobs: 2 });
    expect(summary.failed).toEqual([]);
    expect(summary.converted).toHaveLength(20);
    expect(summary.warnings).toEqual([]);
    expect(listFiles(out)).toEqual(expected.sort());
    const first = readFileSync(join(out, "m0.npz"));
    for (const file of expected) expect(readFileSync(join(out, file)).equals(first)).toBe(true);
  });

  it("makes a folder again in a later batch after it was removed", async () => {
    const root = join(dir, "in");
    mkdirSync(join(root, "sub"), { recursive: true });
    copyFileSync(mixed, join(root, "sub", "m.safetensors"));
    const out = join(dir, "out");
    expect((await convertMany([root], { outDir: out, to: "npz" })).converted).toHaveLength(1);
    rmSync(join(out, "sub"), { recursive: true });
    expect((await convertMany([root], { outDir: out, to: "npz" })).converted).toHaveLength(1);
    expect(listFiles(out)).toEqual(["sub/m.npz"]);
  });

  it("removes a stale temporary file in a sub-folder of an existing output folder", async () => {
    const root = join(dir, "in");
    mkdirSync(join(root, "sub"), { recursive: true });
    copyFileSync(mixed, join(root, "sub", "m.safetensors"));
    const out = join(dir, "out");
    mkdirSync(join(out, "sub"), { recursive: true });
    const dead = join(out, "sub", ".m.npz.4194399-abc123.tmp");
    writeFileSync(dead, "partial");
    const summary = await convertMany([root], { outDir: out, to: "npz" });
    expect(summary.warnings.map((w) => w.file)).toEqual([dead]);
    expect(listFiles(out)).toEqual(["sub/m.npz"]);
  });
});
