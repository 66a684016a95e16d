/**
 * Sharded checkpoints with tied weights, as huggingface_hub writes them (`save_torch_state_dict`:
 * a .bin shard holds the tied tensor under both names and the index lists both; the safetensors
 * form keeps one name and records the other in the index's metadata). The index given as the
 * input and the model folder form must both read them, and each must read what the other writes,
 * and huggingface_hub's loader must read what either writes.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { describeInterop, makeTempDir, runCli, runPython } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

interface Report {
  metadata: Record<string, string> | null;
  tensors: { name: string; dtype: string; shape: number[] }[];
}

function info(path: string): Report {
  const run = runCli(["info", path, "--json"]);
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as Report;
}

function convert(args: string[]): string {
  const run = runCli(args);
  expect(run.status, run.stderr).toBe(0);
  return run.stderr;
}

const weightMap = (path: string) => (JSON.parse(readFileSync(path, "utf8")) as { weight_map: Record<string, string> }).weight_map;

describeInterop("tied weights in sharded checkpoints", (python) => {
  // What huggingface_hub's loader reads from its own .bin shards: the values, tied.
  const loaded = (folder: string) => JSON.parse(runPython(python, "reference_shards.py", ["loadtied", folder])) as Record<string, unknown>;

  it("huggingface_hub's .bin shards convert through the index and as a folder, its metadata kept, the tie kept", () => {
    const hub = join(dir, "hub");
    runPython(python, "reference_shards.py", ["hubtied", hub, "0"]);
    expect(Object.keys(weightMap(join(hub, "pytorch_model.bin.index.json"))).sort()).toEqual(["b", "embed.weight", "lm_head.weight"]);
    const reference = loaded(hub);
    expect(reference.tied).toBe(true);

    // The index named: one file, with the index's own metadata (note) beside the tie.
    const merged = join(dir, "merged.safetensors");
    convert([join(hub, "pytorch_model.bin.index.json"), merged, "-q"]);
    const mergedInfo = info(merged);
    expect(mergedInfo.metadata).toEqual({ format: "pt", "lm_head.weight": "embed.weight", note: "hub" });
    expect(mergedInfo.tensors.map((t) => t.name).sort()).toEqual(["b", "embed.weight"]);

    // The folder: shard for shard, which huggingface_hub's loader reads back with the same values.
    const folder = join(dir, "st");
    convert([hub, folder, "--to", "safetensors", "-q"]);
    expect(readdirSync(folder).sort()).toEqual(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]);
    expect(loaded(folder)).toEqual({ ...reference, format: "safetensors", missing: ["lm_head.weight"] });
    // Merged from the folder's output: the same checkpoint as merged from huggingface_hub's.
    const again = join(dir, "again.safetensors");
    convert([join(folder, "model.safetensors.index.json"), again, "-q"]);
    const againInfo = info(again);
    expect(againInfo.metadata).toEqual(mergedInfo.metadata);
    expect(againInfo.tensors).toEqual(mergedInfo.tensors);
  });

  it("each form reads what the other writes, both ways, and huggingface_hub's loader reads both", () => {
    const hub = join(dir, "hub");
    runPython(python, "reference_shards.py", ["hubtied", hub, "1"]);
    const reference = loaded(hub);
    expect(reference).toMatchObject({ format: "safetensors", tied: true });

    // Folder form to .bin shards: the tied name is back in its tensor's shard and in the index.
    const bins = join(dir, "bins");
    const warnings = convert([hub, bins, "--to", "torch"]);
    expect(warnings).not.toMatch(/lm_head/);
    // The note is kept in each shard's state dict (its _metadata), so nothing is dropped.
    expect(warnings).not.toMatch(/dropped/);
    const binIndex = join(bins, "pytorch_model.bin.index.json");
    const map = weightMap(binIndex);
    expect(map["lm_head.weight"]).toBe(map["embed.weight"]);
    expect(loaded(bins)).toEqual({ ...reference, format: "torch", missing: [] });
    // …which the index form reads.
    expect(info(binIndex).metadata).toEqual({ note: expect.any(String), format: "pt", "lm_head.weight": "embed.weight" });

    // The index form with --max-shard-size: no alias reported dropped, an index that both forms read.
    const merged = join(dir, "merged.safetensors");
    convert([join(hub, "model.safetensors.index.json"), merged, "-q"]);
    const resharded = join(dir, "resharded");
    const stderr = convert([merged, resharded, "--to", "torch", "--max-shard-size", "1KB"]);
    expect(stderr).not.toMatch(/dropped.*lm_head/);
    const reshardedIndex = join(resharded, "pytorch_model.bin.index.json");
    expect(Object.keys(weightMap(reshardedIndex)).sort()).toEqual(["b", "embed.weight", "lm_head.weight"]);
    expect(
      info(reshardedIndex)
        .tensors.map((t) => t.name)
        .sort(),
    ).toEqual(["b", "embed.weight"]);
    expect(loaded(resharded)).toEqual({ ...reference, format: "torch", missing: [] });
    const back = join(dir, "back");
    convert([resharded, back, "--to", "safetensors", "-q"]);
    expect(loaded(back)).toEqual(reference);
  });

  it("a transformers GPT-2 (tied embeddings) in .bin shards converts as a folder, and from_pretrained loads the result", () => {
    const model = join(dir, "gpt2");
    const whole = join(dir, "state_dict.bin");
    runPython(python, "reference_shards.py", ["gpt2bin", model, whole]);
    expect(readdirSync(model).filter((f) => f.endsWith(".bin")).length).toBeGreaterThan(2);
    const out = join(dir, "gpt2-st");
    convert([model, out, "--to", "safetensors", "--copy-other-files", "-q"]);
    expect(runPython(python, "reference_shards.py", ["loadtorch", out, whole]).trim()).toBe("ok");
  });
});
