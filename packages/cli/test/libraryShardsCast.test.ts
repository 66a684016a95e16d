/**
 * The library API's `maxShardSize` and `cast` (`convert(…, { maxShardSize, cast })`): the same
 * files as the command's `--max-shard-size` and `--cast`, checked against what the references
 * write (transformers' `save_pretrained`, torch's `Tensor.to` + `save_file` through
 * reference_casts.py, which casts to BF16 with torch's scalar kernel), not against the CLI.
 */
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { describeInterop, makeTempDir, pseudoRandomBytes, runPython, safetensorsFile } from "@st-convert/testing";
import { convert } from "../src/index.js";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

/** A 64×64 F32 safetensors file of pseudo-random bit patterns (NaN payloads, subnormals, huge values). */
function randomF32(path: string): void {
  const bytes = pseudoRandomBytes(11, 64 * 64 * 4);
  writeFileSync(path, safetensorsFile(`{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[64,64],"data_offsets":[0,${bytes.byteLength}]}}`, bytes));
}

describeInterop("convert() with maxShardSize and cast, against transformers and torch", (python) => {
  it("maxShardSize writes save_pretrained's shards and index byte for byte, and reports every file", async () => {
    const work = join(dir, "model");
    runPython(python, "reference_shards.py", ["model", work, "20KB"]);
    const manifest = JSON.parse(readFileSync(join(work, "manifest.json"), "utf8")) as { files: Record<string, string> };
    const weights = Object.keys(manifest.files).filter((f) => f.startsWith("model"));
    expect(weights.length).toBeGreaterThan(2);
    const out = join(dir, "ours");
    const result = await convert(join(work, "state_dict.npz"), `${out}/`, { maxShardSize: "20KB", metadata: { format: "pt" } });
    expect(readdirSync(out).sort()).toEqual(weights.sort());
    expect(result.files.map((f) => f.slice(out.length + 1)).sort()).toEqual(weights.sort());
    for (const file of weights) expect(readFileSync(join(out, file)).equals(readFileSync(join(work, "hf", file))), file).toBe(true);
  });

  it("cast gives the bytes of torch's Tensor.to + save_file, with recordCast: false", async () => {
    const input = join(dir, "in.safetensors");
    randomF32(input);
    for (const to of ["BF16", "F16"]) {
      const ours = join(dir, `ours-${to}.safetensors`);
      await convert(input, ours, { cast: [`F32=${to}`], recordCast: false });
      const theirs = join(dir, `theirs-${to}.safetensors`);
      runPython(python, "reference_casts.py", ["cast", input, theirs, "F32", to]);
      expect(readFileSync(ours).equals(readFileSync(theirs)), to).toBe(true);
    }
  });

  it("both at once: each shard holds torch's cast bytes and records the cast beside the source's metadata", async () => {
    const input = join(dir, "two.safetensors");
    const a = pseudoRandomBytes(12, 64 * 64 * 4);
    const b = pseudoRandomBytes(13, 64 * 64 * 4);
    const header = `{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[64,64],"data_offsets":[0,${a.byteLength}]},"b":{"dtype":"F32","shape":[64,64],"data_offsets":[${a.byteLength},${2 * a.byteLength}]}}`;
    writeFileSync(input, safetensorsFile(header, Buffer.concat([a, b])));
    const theirs = join(dir, "theirs.safetensors");
    runPython(python, "reference_casts.py", ["cast", input, theirs, "F32", "BF16"]);
    const reference = readSafetensors(theirs).tensors;
    const out = join(dir, "sharded");
    // 8 KiB of BF16 each: two would pass 10,000 bytes, so one tensor to a shard.
    const result = await convert(input, `${out}/`, { cast: ["BF16"], maxShardSize: 10_000 });
    const shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    expect(result.files.map((f) => f.slice(out.length + 1)).sort()).toEqual([...shards, "model.safetensors.index.json"]);
    for (const [shard, name] of [
      [shards[0]!, "a"],
      [shards[1]!, "b"],
    ] as const) {
      const ours = readSafetensors(join(out, shard));
      expect(ours.metadata, shard).toEqual({ format: "pt", "st_convert.cast": "BF16" });
      expect(Object.keys(ours.tensors), shard).toEqual([name]);
      expect(ours.tensors[name]!.dtype).toBe("BF16");
      expect(ours.tensors[name]!.bytes.equals(reference[name]!.bytes), name).toBe(true);
    }
  });
});

/** A safetensors file's metadata and each tensor's dtype and bytes, read here (no reader of ours). */
function readSafetensors(path: string): { metadata: unknown; tensors: Record<string, { dtype: string; bytes: Buffer }> } {
  const file = readFileSync(path);
  const length = Number(file.readBigUInt64LE(0));
  const { __metadata__: metadata, ...entries } = JSON.parse(file.subarray(8, 8 + length).toString("utf8")) as Record<
    string,
    { dtype: string; data_offsets: [number, number] }
  >;
  const tensors = Object.fromEntries(
    Object.entries(entries).map(([name, t]) => [
      name,
      { dtype: t.dtype, bytes: file.subarray(8 + length + t.data_offsets[0], 8 + length + t.data_offsets[1]) },
    ]),
  );
  return { metadata, tensors };
}
