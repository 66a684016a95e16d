import { copyFileSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { convertMany } from "st-convert";
import { fixturePath, makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const mixed = fixturePath("safetensors", "mixed.safetensors");

/** A folder of checkpoints: two good files in a nested layout, one broken, one that is not a tensor file. */
function makeTree(): string {
  const root = join(dir, "in");
  mkdirSync(join(root, "run1", "ckpt"), { recursive: true });
  copyFileSync(mixed, join(root, "run1", "model.safetensors"));
  copyFileSync(fixturePath("safetensors", "names_order.safetensors"), join(root, "run1", "ckpt", "step100.safetensors"));
  writeFileSync(join(root, "broken.safetensors"), safetensorsFile('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}', 8));
  writeFileSync(join(root, "notes.txt"), "not a tensor file");
  return root;
}

function listFiles(root: string): string[] {
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(root.length + 1))
    .sort();
}

describe("batch conversion", () => {
  it("converts every file below a folder, keeps the layout, names the broken one and exits 1", () => {
    const root = makeTree();
    const out = join(dir, "out");
    const run = runCli([root, "--out-dir", out, "--to", "safetensors"]);
    expect(run.status).toBe(1);
    expect(listFiles(out)).toEqual(["run1/ckpt/step100.safetensors", "run1/model.safetensors"]);
    expect(readFileSync(join(out, "run1", "model.safetensors")).equals(readFileSync(mixed))).toBe(true);
    expect(run.stderr).toMatch(/failed: .*broken\.safetensors: tensor "w": .*\[TensorInvalidInfo\]/);
    expect(run.stderr).toMatch(/converted 2, skipped 0, failed 1 \(of 3 files\)/);
  });

  it("exits 0 when every file converts, and skips existing outputs unless --force", () => {
    const root = join(dir, "in");
    mkdirSync(root);
    copyFileSync(mixed, join(root, "a.safetensors"));
    copyFileSync(mixed, join(root, "b.safetensors"));
    const out = join(dir, "out");
    expect(runCli([root, "-O", out, "--to", "safetensors", "--jobs", "1"]).status).toBe(0);
    writeFileSync(join(out, "a.safetensors"), "keep me");
    const again = runCli([root, "-O", out, "--to", "safetensors"]);
    expect(again.status).toBe(0);
    expect(again.stderr).toMatch(/skipped: .*a\.safetensors.*exists/);
    expect(readFileSync(join(out, "a.safetensors"), "utf8")).toBe("keep me");
    expect(runCli([root, "-O", out, "--to", "safetensors", "--force"]).status).toBe(0);
    expect(readFileSync(join(out, "a.safetensors")).equals(readFileSync(mixed))).toBe(true);
  });

  it("into a folder it makes, a file that another process puts at an output meanwhile is kept, or with force replaced; a link there is refused", async () => {
    const root = join(dir, "in");
    mkdirSync(root);
    for (const name of ["a", "b", "c"]) copyFileSync(mixed, join(root, `${name}.safetensors`));
    const run = (out: string, force: boolean, plant: (path: string) => void) =>
      convertMany([root], {
        outDir: out,
        to: "safetensors",
        force,
        jobs: 1,
        // Just before job b writes anything: after the batch made its folder and planned b's output.
        onEvent: (event) => {
          if (event.type === "start" && event.job.output.endsWith("b.safetensors")) plant(event.job.output);
        },
      });
    const kept = await run(join(dir, "out1"), false, (path) => writeFileSync(path, "theirs"));
    expect(kept.skipped.map((s) => s.output)).toEqual([join(dir, "out1", "b.safetensors")]);
    expect(readFileSync(join(dir, "out1", "b.safetensors"), "utf8")).toBe("theirs");
    expect(readdirSync(join(dir, "out1")).sort()).toEqual(["a.safetensors", "b.safetensors", "c.safetensors"]);

    const replaced = await run(join(dir, "out2"), true, (path) => writeFileSync(path, "theirs"));
    expect(replaced.converted).toHaveLength(3);
    expect(readFileSync(join(dir, "out2", "b.safetensors")).equals(readFileSync(mixed))).toBe(true);
    expect(readdirSync(join(dir, "out2")).sort()).toEqual(["a.safetensors", "b.safetensors", "c.safetensors"]);

    writeFileSync(join(dir, "elsewhere"), "keep");
    const linked = await run(join(dir, "out3"), true, (path) => symlinkSync(join(dir, "elsewhere"), path));
    expect(linked.failed.map((f) => f.output)).toEqual([join(dir, "out3", "b.safetensors")]);
    expect(linked.failed[0]!.message).toMatch(/became another kind of file/);
    expect(lstatSync(join(dir, "out3", "b.safetensors")).isSymbolicLink()).toBe(true);
    expect(readFileSync(join(dir, "elsewhere"), "utf8")).toBe("keep");
    expect(readdirSync(join(dir, "out3")).sort()).toEqual(["a.safetensors", "b.safetensors", "c.safetensors"]);
  });

  it("--dry-run writes nothing and says what it would do", () => {
    const root = makeTree();
    const out = join(dir, "out");
    const run = runCli([root, "--out-dir", out, "--to", "safetensors", "--dry-run"]);
    expect(existsSync(out)).toBe(false);
    expect(run.stderr).toMatch(/would convert: .*model\.safetensors -> .*out\/run1\/model\.safetensors/);
    expect(run.status).toBe(0);
  });

  it("--json prints a summary with the failure's code and message", () => {
    const root = makeTree();
    const run = runCli([root, "--out-dir", join(dir, "out"), "--to", "safetensors", "--json"]);
    const summary = JSON.parse(run.stdout) as { ok: boolean; files: { input: { file: string }; status: string; error: { code: string } | null }[] };
    expect(summary.ok).toBe(false);
    expect(summary.files.filter((f) => f.status === "converted")).toHaveLength(2);
    expect(summary.files.filter((f) => f.status === "failed")).toEqual([
      expect.objectContaining({
        input: { file: join(root, "broken.safetensors"), format: null },
        error: expect.objectContaining({ code: "TensorInvalidInfo" }),
      }),
    ]);
  });

  it("takes files and folders together; a missing input is a failure, the others still convert", () => {
    const root = makeTree();
    const run = runCli([join(root, "run1", "model.safetensors"), join(dir, "missing"), "--out-dir", join(dir, "out"), "--to", "safetensors"]);
    expect(run.status).toBe(1);
    expect(listFiles(join(dir, "out"))).toEqual(["model.safetensors"]);
    expect(run.stderr).toMatch(/failed: .*missing: no such file/);
  });

  it("refuses two inputs that would write the same output", async () => {
    const a = join(dir, "a");
    const b = join(dir, "b");
    mkdirSync(a);
    mkdirSync(b);
    copyFileSync(mixed, join(a, "m.safetensors"));
    copyFileSync(mixed, join(b, "m.safetensors"));
    const summary = await convertMany([a, b], { outDir: join(dir, "out"), to: "safetensors" });
    expect(summary.converted).toHaveLength(1);
    expect(summary.failed[0]?.message).toMatch(/same output/);
  });

  it("does not descend into the output folder when it lies inside an input folder", async () => {
    const root = join(dir, "in");
    mkdirSync(join(root, "converted"), { recursive: true });
    copyFileSync(mixed, join(root, "m.safetensors"));
    copyFileSync(mixed, join(root, "converted", "old.safetensors"));
    const summary = await convertMany([root], { outDir: join(root, "converted"), to: "safetensors", force: true });
    expect(summary.converted.map((c) => c.input)).toEqual([join(root, "m.safetensors")]);
  });

  it("reports progress events and applies transforms to every file", async () => {
    const root = makeTree();
    const events: string[] = [];
    const summary = await convertMany([join(root, "run1")], {
      outDir: join(dir, "out"),
      to: "safetensors",
      filter: [/weight/],
      metadata: { source: "batch" },
      onEvent: (e) => events.push(e.type),
    });
    expect(summary.failed).toEqual([]);
    expect(events).toContain("planned");
    // ckpt/step100 holds no weight: skipped, not failed (a single conversion would refuse it).
    expect(events.filter((e) => e === "converted")).toHaveLength(1);
    expect(summary.skipped).toEqual([
      expect.objectContaining({ input: expect.stringMatching(/step100\.safetensors$/), reason: expect.stringMatching(/keeps none/) }),
    ]);
    expect(events).toContain("progress");
    const info = runCli(["info", join(dir, "out", "model.safetensors"), "--json"]);
    const report = JSON.parse(info.stdout) as { metadata: Record<string, string>; tensors: { name: string }[] };
    expect(report.metadata).toEqual({ format: "pt", source: "batch" });
    expect(report.tensors.every((t) => t.name.includes("weight"))).toBe(true);
    expect(report.tensors).toHaveLength(5);
  });

  it("ignores JSON files in a folder that are not tensor JSON (config.json), but converts tensor JSON", () => {
    const root = join(dir, "model");
    mkdirSync(root);
    writeFileSync(join(root, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], hidden_size: 8 }));
    writeFileSync(join(root, "tokenizer.json"), JSON.stringify({ version: "1.0", model: { type: "BPE" } }));
    writeFileSync(join(root, "weights.json"), JSON.stringify({ w: { dtype: "F32", shape: [2], data: [1.5, "NaN"] } }));
    const run = runCli([root, "--out-dir", join(dir, "out"), "--to", "safetensors"]);
    expect(run.status, run.stderr).toBe(0);
    expect(listFiles(join(dir, "out"))).toEqual(["weights.safetensors"]);
    expect(run.stderr).toMatch(/ignored 2 files whose content is not a tensor file/);
    // Named explicitly, a non-tensor JSON is attempted and refused.
    expect(runCli([join(root, "config.json"), "--out-dir", join(dir, "out2"), "--to", "safetensors"]).status).toBe(1);
  });

  it("--out-dir without --to, or --jobs without --out-dir, is a usage error", () => {
    expect(runCli([mixed, "--out-dir", dir]).status).toBe(2);
    expect(runCli([mixed, join(dir, "x.safetensors"), "--jobs", "2"]).status).toBe(2);
    expect(runCli([mixed, "--out-dir", dir, "--to", "safetensors", "--jobs", "zero"]).status).toBe(2);
  });
});
