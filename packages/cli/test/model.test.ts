/**
 * A whole model folder (`st-convert MODEL_DIR OUT_DIR --to FORMAT`): every checkpoint of it, sharded
 * as the source was, a rewritten index, the other files copied or listed, all-or-nothing.
 */
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { describeInterop, fixturePath, makeTempDir, runCli, runPython, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const hub = fixturePath("sharded", "hub");
const hubIndex = JSON.parse(readFileSync(join(hub, "model.safetensors.index.json"), "utf8")) as {
  weight_map: Record<string, string>;
  metadata: { total_size: number };
};

/** A model folder: huggingface_hub's sharded checkpoint, a config and a tokenizer file. */
function modelFolder(): string {
  const model = join(dir, "model");
  mkdirSync(model);
  for (const f of readdirSync(hub)) copyFileSync(join(hub, f), join(model, f));
  writeFileSync(join(model, "config.json"), '{"model_type": "llama"}\n');
  writeFileSync(join(model, "tokenizer.json"), '{"version": "1.0"}\n');
  return model;
}

describe("a model folder", () => {
  it("converts as the source was sharded: each shard into its namesake, the index rewritten, the other files listed", () => {
    const out = join(dir, "out");
    const run = runCli([modelFolder(), out, "--to", "safetensors", "--json"]);
    expect(run.status, run.stderr).toBe(0);
    expect(readdirSync(out).sort()).toEqual(readdirSync(hub).sort());
    // safetensors in, safetensors out: our writer's bytes are the reference's, shard by shard.
    for (const shard of new Set(Object.values(hubIndex.weight_map)))
      expect(readFileSync(join(out, shard)).equals(readFileSync(join(hub, shard))), shard).toBe(true);
    const index = JSON.parse(readFileSync(join(out, "model.safetensors.index.json"), "utf8")) as {
      weight_map: Record<string, string>;
      metadata: { total_size: number };
    };
    expect(index.weight_map).toEqual(hubIndex.weight_map);
    expect(index.metadata.total_size).toBe(hubIndex.metadata.total_size);
    const report = JSON.parse(run.stdout) as { ok: boolean; warnings: { file: string; message: string }[]; files: string[] };
    expect(report.ok).toBe(true);
    expect(report.warnings.map((w) => w.file).sort()).toEqual([join(dir, "model", "config.json"), join(dir, "model", "tokenizer.json")]);
    expect(report.files).toHaveLength(4);
  });

  it("--copy-other-files makes a usable folder: config and tokenizer copied", () => {
    const out = join(dir, "out");
    expect(runCli([modelFolder(), out, "--to", "safetensors", "--copy-other-files", "-q"]).status).toBe(0);
    expect(readFileSync(join(out, "config.json"), "utf8")).toBe('{"model_type": "llama"}\n');
    expect(readdirSync(out)).toContain("tokenizer.json");
  });

  it("reshards with --max-shard-size, and merges into one file for a format with no sharded form (with a warning)", () => {
    const resharded = join(dir, "resharded");
    expect(runCli([modelFolder(), resharded, "--to", "safetensors", "--max-shard-size", "2KB", "-q"]).status).toBe(0);
    expect(readdirSync(resharded)).toEqual(["model.safetensors"]);
    const npz = runCli([join(dir, "model"), join(dir, "npz"), "--to", "npz"]);
    expect(npz.status, npz.stderr).toBe(0);
    expect(npz.stderr).toMatch(/npz has no sharded form: the shards are merged into model\.npz/);
    expect(readdirSync(join(dir, "npz"))).toEqual(["model.npz"]);
  });

  it("refuses an existing output without --force and leaves nothing when a checkpoint fails", () => {
    const model = modelFolder();
    const out = join(dir, "out");
    mkdirSync(out);
    writeFileSync(join(out, "model-00002-of-00003.safetensors"), "keep");
    const refused = runCli([model, out, "--to", "safetensors"]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/model-00002-of-00003\.safetensors: the output exists; pass --force/);
    expect(readdirSync(out)).toEqual(["model-00002-of-00003.safetensors"]);
    // A broken single checkpoint beside the sharded one: the run fails, and out/ is as it was.
    writeFileSync(join(model, "extra.safetensors"), safetensorsFile('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', 4));
    const failed = runCli([model, out, "--to", "safetensors", "--force"]);
    expect(failed.status).toBe(1);
    expect(failed.stderr).toMatch(/extra\.safetensors: tensor "w"/);
    expect(readdirSync(out)).toEqual(["model-00002-of-00003.safetensors"]);
    expect(readFileSync(join(out, "model-00002-of-00003.safetensors"), "utf8")).toBe("keep");
  });

  it("a failed conversion removes the output folders it created, and never a folder that was there", () => {
    const model = modelFolder();
    writeFileSync(join(model, "extra.safetensors"), safetensorsFile('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', 4));
    const failed = runCli([model, join(dir, "new", "deeper", "out"), "--to", "safetensors"]);
    expect(failed.status).toBe(1);
    expect(failed.stderr).toMatch(/extra\.safetensors: tensor "w"/);
    expect(readdirSync(dir)).toEqual(["model"]);
    // An empty folder given as the output was there before: it stays.
    mkdirSync(join(dir, "empty-out"));
    expect(runCli([model, join(dir, "empty-out"), "--to", "safetensors"]).status).toBe(1);
    expect(readdirSync(dir).sort()).toEqual(["empty-out", "model"]);
    expect(readdirSync(join(dir, "empty-out"))).toEqual([]);
    // Created under a folder that was there: only the new part goes.
    mkdirSync(join(dir, "parent"));
    expect(runCli([model, join(dir, "parent", "a", "b"), "--to", "safetensors"]).status).toBe(1);
    expect(readdirSync(join(dir, "parent"))).toEqual([]);
  });

  it("needs --to, and names what it could not find", () => {
    expect(runCli([modelFolder(), join(dir, "o")])).toMatchObject({ status: 2, stderr: expect.stringMatching(/--to FORMAT/) });
    mkdirSync(join(dir, "empty"));
    expect(runCli([join(dir, "empty"), join(dir, "o"), "--to", "safetensors"]).stderr).toMatch(/holds no checkpoint/);
  });
});

describeInterop("a PyTorch model folder, as the Hub's conversion service would do it", (python) => {
  it("pytorch_model-0000k-of-0000n.bin + index become model-0000k-of-0000n.safetensors + index, tensor for tensor", () => {
    const source = fixturePath("torch", "hub_sharded");
    const out = join(dir, "st");
    const run = runCli([source, out, "--to", "safetensors", "-q"]);
    expect(run.status, run.stderr).toBe(0);
    expect(readdirSync(out).sort()).toEqual(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]);
    const pairs = ["00001", "00002"].flatMap((k) => [join(source, `pytorch_model-${k}-of-00002.bin`), join(out, `model-${k}-of-00002.safetensors`)]);
    runPython(python, "reference_torch.py", ["compare", ...pairs]);
    const index = JSON.parse(readFileSync(join(out, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
    const torchIndex = JSON.parse(readFileSync(join(source, "pytorch_model.bin.index.json"), "utf8")) as { weight_map: Record<string, string> };
    expect(Object.keys(index.weight_map).sort()).toEqual(Object.keys(torchIndex.weight_map).sort());
  });

  it("a transformers GPT-2 folder (.bin, tied embeddings) converts with its config, and from_pretrained loads the result", () => {
    const model = join(dir, "gpt2");
    runPython(python, "reference_shards.py", ["torchdir", model]);
    const out = join(dir, "gpt2-st");
    const run = runCli([model, out, "--to", "safetensors", "--copy-other-files", "-q"]);
    expect(run.status, run.stderr).toBe(0);
    expect(readdirSync(out)).toEqual(expect.arrayContaining(["config.json", "model.safetensors"]));
    expect(runPython(python, "reference_shards.py", ["loadtorch", out, join(model, "pytorch_model.bin")]).trim()).toBe("ok");
  });
});
