/**
 * The st-convert command with PyTorch checkpoints: pytorch_model.bin → safetensors (aliases in the
 * metadata), safetensors → .pt, info, --key, a sharded index, batch folders that take a .bin only
 * when its content is a checkpoint, a .bin that is safetensors read as such, and refusals as exit 1
 * with one line.
 */
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readSafetensors, readTensorBytes } from "@st-convert/core";
import { fixturePath, makeTempDir, runCli, expectOneLineRefusal as oneLineRefusal } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

interface Expected {
  tensors: { name: string; dtype: string; shape: number[]; sha256: string }[];
  aliases: Record<string, string>;
}
const manifest = JSON.parse(readFileSync(fixturePath("torch", "manifest.json"), "utf8")) as Record<string, Expected>;
const torch = (name: string) => fixturePath("torch", name);
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

async function view(path: string) {
  const file = await readSafetensors(readFileSync(path));
  return {
    metadata: file.metadata,
    tensors: await Promise.all(file.tensors.map(async (t) => [t.name, t.dtype, [...t.shape], sha256(await readTensorBytes(t))])),
  };
}

describe("st-convert with PyTorch checkpoints", () => {
  it("pytorch_model.bin → model.safetensors: torch.load's tensors, the tied one as a metadata alias", async () => {
    const out = join(dir, "model.safetensors");
    const run = runCli([torch("gpt2.bin"), out]);
    expect(run.status, run.stderr).toBe(0);
    const expected = manifest["gpt2.bin"]!;
    const ours = await view(out);
    expect(ours.metadata).toEqual({ format: "pt", "transformer.wte.weight": "lm_head.weight" });
    const want = expected.tensors.filter((t) => expected.aliases[t.name] === undefined).map((t) => [t.name, t.dtype, t.shape, t.sha256]);
    expect([...ours.tensors].sort()).toEqual([...want].sort());
  });

  it("model.safetensors → model.pt → model.safetensors gives the same file", () => {
    const first = join(dir, "a.safetensors");
    expect(runCli([torch("views.pt"), first]).status).toBe(0);
    expect(runCli([first, join(dir, "model.pt")]).status).toBe(0);
    expect(runCli([join(dir, "model.pt"), join(dir, "b.safetensors")]).status).toBe(0);
    expect(readFileSync(join(dir, "b.safetensors")).equals(readFileSync(first))).toBe(true);
  });

  it("info lists a checkpoint without converting it, the legacy format included", () => {
    const run = runCli(["info", torch("legacy.pt")]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/legacy\.pt: torch/);
    expect(run.stdout).toMatch(/wt\s+F32\s+\[4, 3\]/);
  });

  it("--key picks one entry; skipped values are warnings on stderr", async () => {
    const out = join(dir, "opt.safetensors");
    const run = runCli([torch("training_adam.pt"), out, "--key", "optimizer"]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).toMatch(/skipped "param_groups\.0\.lr": a float/);
    expect((await view(out)).tensors.map((t) => t[0])).toContain("state.0.exp_avg");
  });

  it("reads a sharded checkpoint through pytorch_model.bin.index.json", async () => {
    const out = join(dir, "merged.safetensors");
    const run = runCli([torch("hub_sharded/pytorch_model.bin.index.json"), out]);
    expect(run.status, run.stderr).toBe(0);
    expect((await view(out)).tensors.map((t) => t[0]).sort()).toEqual([
      "embed.weight",
      "layers.0.bias",
      "layers.0.weight",
      "layers.1.weight",
      "layers.2.weight",
    ]);
  });

  it("a batch folder takes the .bin that is a checkpoint and leaves the safetensors .bin and the LFS pointer alone", () => {
    const root = join(dir, "in");
    mkdirSync(root);
    copyFileSync(torch("gpt2.bin"), join(root, "pytorch_model.bin"));
    copyFileSync(torch("safetensors_named.bin"), join(root, "weights.bin"));
    copyFileSync(torch("lfs_pointer.bin"), join(root, "pointer.bin"));
    copyFileSync(torch("legacy.pt"), join(root, "legacy.pt"));
    const out = join(dir, "out");
    const run = runCli([root, "--out-dir", out, "--to", "safetensors"]);
    expect(run.status, run.stderr).toBe(0);
    expect(readdirSync(out).sort()).toEqual(["legacy.safetensors", "pytorch_model.safetensors"]);
  });

  it("a named .bin that is safetensors reads as safetensors; --from torch, an LFS pointer, complex128 are refused in one line", () => {
    const info = runCli(["info", torch("safetensors_named.bin")]);
    expect(info.status, info.stderr).toBe(0);
    expect(info.stdout).toMatch(/safetensors_named\.bin: safetensors/);
    expect(oneLineRefusal([torch("safetensors_named.bin"), join(dir, "x.safetensors"), "--from", "torch"], "NotACheckpoint")).toMatch(
      /this is a safetensors file/,
    );
    expect(oneLineRefusal([torch("lfs_pointer.bin"), join(dir, "x.safetensors")], "NotACheckpoint")).toMatch(/Git LFS pointer/);
    expect(oneLineRefusal([torch("complex128.pt"), join(dir, "x.safetensors")], "UnsupportedDtype")).toMatch(/tensor "z": torch.complex128/);
    expect(existsSync(join(dir, "x.safetensors"))).toBe(false);
  });

  it("recognises a checkpoint by its content when the name says nothing", () => {
    copyFileSync(torch("views_p4.pt"), join(dir, "checkpoint"));
    copyFileSync(torch("legacy.pt"), join(dir, "old"));
    expect(runCli(["info", join(dir, "checkpoint")]).stdout).toMatch(/: torch/);
    expect(runCli(["info", join(dir, "old")]).stdout).toMatch(/: torch/);
  });
});
