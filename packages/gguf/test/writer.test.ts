/**
 * The writer's rules: what it refuses and how it says so, `general.architecture` and the metadata
 * from any input, quantized blocks passed through, `--quantize` eligibility, split sets.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MemorySink, type TensorEntry, type TensorSource, createMetadata, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { KV_PREFIX, RECORD_KEY, planSplitSet, readGguf, writeGguf } from "@st-convert/gguf";
import { errorCode, fixturePath, toHex } from "@st-convert/testing";
import { quantizeQ8_0 } from "../src/quants/legacy.js";
import { hasQ8_0Simd } from "../src/quants/simdQ8_0.js";

const f32 = (name: string, shape: number[], values?: number[]): TensorEntry => {
  const n = shape.reduce((a, b) => a * b, 1);
  return tensorFromBytes(
    { name, dtype: "F32", shape },
    new Uint8Array(new Float32Array(values ?? Array.from({ length: n }, (_, i) => Math.sin(i) * 3)).buffer),
  );
};
const write = async (source: TensorSource, quantize: string[] = [], warnings: string[] = []) => {
  const sink = new MemorySink();
  await writeGguf(source, sink, { quantize, onWarning: (m) => warnings.push(m) });
  return sink.bytes();
};
const keys = (metadata: Record<string, string> | null) =>
  Object.fromEntries(
    Object.entries(metadata ?? {})
      .filter(([k]) => k.startsWith(KV_PREFIX))
      .map(([k, v]) => [k.slice(KV_PREFIX.length), JSON.parse(v)]),
  );

describe("GGUF writer", () => {
  it("writes general.architecture first, 'unknown' by default, and other metadata as STRING keys", async () => {
    const file = await readGguf(await write({ metadata: createMetadata([["format", "pt"]]), tensors: [f32("w", [2])] }));
    expect(keys(file.metadata)).toEqual({ "general.architecture": { type: "STRING", value: "unknown" }, format: { type: "STRING", value: "pt" } });
    const given = await readGguf(
      await write({
        metadata: createMetadata([
          ["a", "1"],
          ["general.architecture", "llama"],
        ]),
        tensors: [],
      }),
    );
    expect(Object.keys(keys(given.metadata))).toEqual(["a", "general.architecture"]);
  });

  it("a plain key given beside a typed one of the same name replaces it, in its place", async () => {
    const metadata = createMetadata([
      ["gguf.general.architecture", '{"type":"STRING","value":"llama"}'],
      ["gguf.general.name", '{"type":"STRING","value":"old"}'],
      ["gguf.x", '{"type":"UINT32","value":1}'],
      ["general.name", "new"],
    ]);
    const file = await readGguf(await write({ metadata, tensors: [] }));
    expect(keys(file.metadata)).toEqual({
      "general.architecture": { type: "STRING", value: "llama" },
      "general.name": { type: "STRING", value: "new" },
      x: { type: "UINT32", value: 1 },
    });
  });

  it("refuses a dtype GGUF has no type for, naming the tensor and the cast that helps", async () => {
    const u8 = tensorFromBytes({ name: "mask", dtype: "U8", shape: [2] }, new Uint8Array(2));
    await expect(write({ metadata: null, tensors: [u8] })).rejects.toThrow(/tensor "mask": GGUF has no type for U8; cast it first, e.g\. --cast U8=I16/);
    const f8 = tensorFromBytes({ name: "q", dtype: "F8_E4M3", shape: [2] }, new Uint8Array(2));
    expect(await errorCode(write({ metadata: null, tensors: [f8] }))).toBe("Unsupported");
  });

  it("refuses what ggml's loader would refuse: names of 64 bytes, 5 dimensions, a bad alignment, a bad value", async () => {
    expect(await errorCode(write({ metadata: null, tensors: [f32("n".repeat(64), [1])] }))).toBe("InvalidName");
    expect(await errorCode(write({ metadata: null, tensors: [f32("w", [1, 1, 1, 1, 2])] }))).toBe("Unsupported");
    expect(await errorCode(write({ metadata: createMetadata([["general.alignment", "64"]]), tensors: [] }))).toBe("InvalidMetadata");
    expect(await errorCode(write({ metadata: createMetadata([["gguf.x", '{"type":"UINT8","value":256}']]), tensors: [] }))).toBe("InvalidMetadata");
    expect(await errorCode(write({ metadata: createMetadata([["gguf.x", '{"type":"INT64","value":1}']]), tensors: [] }))).toBe("InvalidMetadata");
    expect(await errorCode(write({ metadata: createMetadata([[RECORD_KEY, "[]"]]), tensors: [] }))).toBe("InvalidMetadata");
  });

  it("puts kept blocks back by the type the metadata records, renamed or not", async () => {
    const original = new Uint8Array(readFileSync(fixturePath("gguf", "quant.gguf")));
    const kept = await readGguf(original, { keepQuantized: true });
    // Renamed: the entry is a new object whose extent still leads to the blocks.
    const renamed = kept.tensors.map(
      (t): TensorEntry => ({
        name: `x.${t.name}`,
        dtype: t.dtype,
        shape: t.shape,
        byteLength: t.byteLength,
        chunks: (o) => t.chunks(o),
        extent: () => t.extent!(),
      }),
    );
    const again = await readGguf(await write({ metadata: kept.metadata, tensors: renamed }), { keepQuantized: true });
    expect(again.tensors.map((t) => [t.name, t.ggmlType, t.shape])).toEqual(kept.tensors.map((t) => [`x.${t.name}`, t.ggmlType, t.shape]));
    for (const [i, t] of again.tensors.entries()) expect(toHex(await readTensorBytes(t))).toBe(toHex(await readTensorBytes(kept.tensors[i]!)));
  });

  it("writes headers past the first 64 KiB buffer (a tokenizer's arrays), and reads them back the same", async () => {
    const tokens = Array.from({ length: 30000 }, (_, i) => `tok${i}é`);
    const metadata = createMetadata([
      ["general.architecture", "llama"],
      ["gguf.tokenizer.ggml.tokens", JSON.stringify({ type: "ARRAY", itemType: "STRING", value: tokens })],
      ["gguf.tokenizer.ggml.scores", JSON.stringify({ type: "ARRAY", itemType: "FLOAT32", value: tokens.map((_, i) => i / 4) })],
      ["gguf.x.ids", JSON.stringify({ type: "ARRAY", itemType: "UINT64", value: tokens.map((_, i) => String(i)) })],
    ]);
    const bytes = await write({ metadata, tensors: [f32("w", [2, 2])] });
    expect(bytes.byteLength).toBeGreaterThan(600_000);
    const file = await readGguf(bytes);
    expect(JSON.parse(file.metadata!["gguf.tokenizer.ggml.tokens"]!).value).toEqual(tokens);
    expect(toHex(await write(file))).toBe(toHex(bytes));
  });

  it("restores the recorded order of keys and tensors after a format that sorts them", async () => {
    const original = new Uint8Array(readFileSync(fixturePath("gguf", "plain.gguf")));
    const file = await readGguf(original);
    const sorted = createMetadata(Object.entries(file.metadata!).sort(([a], [b]) => (a < b ? -1 : 1)));
    const tensors = [...file.tensors].sort((a, b) => (a.name < b.name ? -1 : 1));
    expect(toHex(await write({ metadata: sorted, tensors }))).toBe(toHex(original));
  });
});

describe("--quantize", () => {
  const model = (): TensorSource => ({
    metadata: null,
    tensors: [
      f32("blk.0.w", [4, 64]),
      f32("blk.0.b", [64]),
      f32("odd", [2, 48]),
      tensorFromBytes({ name: "ids", dtype: "I32", shape: [2, 32] }, new Uint8Array(256)),
    ],
  });

  it("Q8_0 read and written in the kernel's own memory: the JavaScript kernel's blocks, NaN and tiny blocks too, tensor after tensor", async () => {
    expect(hasQ8_0Simd()).toBe(true);
    // Over two batches of 4 Mi values, read straight from a file-like source, so that both batch
    // slots and the block slot are used, then given back and taken again by the next tensor.
    const rows = 1100;
    const values = new Float32Array(rows * 4096);
    let seed = 7;
    for (let i = 0; i < values.length; i++) {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      values[i] = (seed / 2 ** 32 - 0.5) * (1 + (i % 9));
    }
    values.fill(Number.NaN, 4096 * 1000 + 64, 4096 * 1000 + 70); // blocks holding a NaN go to JavaScript
    values.fill(1e-45, 4096 * 1030, 4096 * 1030 + 32); // a d too small to invert
    values.fill(0, 4096 * 1040, 4096 * 1040 + 32);
    const bytes = new Uint8Array(values.buffer);
    const source = {
      name: "values",
      size: bytes.byteLength,
      read: async (offset: number, length: number) => bytes.slice(offset, offset + length),
      readInto: async (offset: number, target: Uint8Array) => target.set(bytes.subarray(offset, offset + target.byteLength)),
    };
    const tensor = (name: string): TensorEntry => ({
      ...tensorFromBytes({ name, dtype: "F32", shape: [rows, 4096] }, bytes),
      extent: () => ({ source, offset: 0 }),
    });
    const want = new Uint8Array((values.length / 32) * 34);
    quantizeQ8_0(values, want, values.length / 32);
    const file = await readGguf(await write({ metadata: null, tensors: [tensor("a"), tensor("b")] }, ["Q8_0"]), { keepQuantized: true });
    for (const t of file.tensors) expect(Buffer.from(await readTensorBytes(t)).equals(Buffer.from(want)), t.name).toBe(true);
  });

  it("a read that fails while the batch before it is quantized fails the write with its own error", async () => {
    // 3 batches of 4 MiB of F32 read straight from a source whose second read fails.
    const bytes = new Uint8Array(3 * 4 * 1024 * 1024);
    let reads = 0;
    const source = {
      name: "flaky",
      size: bytes.byteLength,
      read: async (offset: number, length: number) => bytes.slice(offset, offset + length),
      readInto: async (offset: number, target: Uint8Array) => {
        if (++reads === 2) throw new Error("the disk went away");
        target.set(bytes.subarray(offset, offset + target.byteLength));
      },
    };
    const t = tensorFromBytes({ name: "w", dtype: "F32", shape: [3 * 1024, 1024] }, bytes);
    const tensor: TensorEntry = { ...t, extent: () => ({ source, offset: 0 }) };
    await expect(write({ metadata: null, tensors: [tensor] }, ["Q8_0"])).rejects.toThrow(/the disk went away/);
    expect(reads).toBe(2);
  });

  it("quantizes every eligible tensor and says which others keep their dtype", async () => {
    const warnings: string[] = [];
    const file = await readGguf(await write(model(), ["Q8_0"], warnings), { keepQuantized: true });
    expect(file.tensors.map((t) => [t.name, t.ggmlType])).toEqual([
      ["blk.0.w", "Q8_0"],
      ["blk.0.b", "F32"],
      ["odd", "F32"],
      ["ids", "I32"],
    ]);
    expect(warnings).toEqual([
      'kept as they are, not quantized: "blk.0.b" (1 dimension (quantized tensors have 2 or more)); "odd" (rows of 48 are not whole Q8_0 blocks of 32); "ids" (I32 is not F32, F16 or BF16)',
    ]);
  });

  it("groups the tensors kept as they are by why, so a model's many norms are one reason and their names", async () => {
    const warnings: string[] = [];
    const source: TensorSource = { metadata: null, tensors: [f32("a.norm", [64]), f32("w", [2, 64]), f32("b.norm", [64]), f32("odd", [2, 48])] };
    await write(source, ["Q8_0"], warnings);
    expect(warnings).toEqual([
      'kept as they are, not quantized: "a.norm", "b.norm" (1 dimension (quantized tensors have 2 or more)); "odd" (rows of 48 are not whole Q8_0 blocks of 32)',
    ]);
  });

  it("answers llama-quantize's mix names (Q4_K_M) with the type and rules to type instead", async () => {
    await expect(write(model(), ["Q4_K_M"])).rejects.toThrow(
      /"Q4_K_M": the type is not one of .*\(Q4_K_M is llama-quantize's mix, mostly Q4_K, .*--quantize Q4_K, and NAME_REGEX:TYPE rules/,
    );
    // A name that is no mix of a type made here gets no such hint.
    await expect(write(model(), ["IQ4_XS"])).rejects.toThrow(/the type is not one of [^(]*$/);
  });

  it("says which NAME_REGEX:TYPE rule matches no tensor, and tells each quantized tensor's stored bytes", async () => {
    const warnings: string[] = [];
    const stored: [string, number][] = [];
    const sink = new MemorySink();
    await writeGguf(model(), sink, {
      quantize: ["blk\\.0\\.w:Q8_0", "blk\\.9\\..*:Q4_K", "blk\\.0\\.w:Q4_0"],
      onWarning: (m) => warnings.push(m),
      onStored: (name, bytes) => stored.push([name, bytes]),
    });
    // The first rule matched (then the last overrode it): only the second is said.
    expect(warnings).toEqual(["--quantize blk\\.9\\..*:Q4_K: no tensor's name matches blk\\.9\\..*"]);
    const file = await readGguf(sink.bytes(), { keepQuantized: true });
    const w = file.tensors.find((t) => t.name === "blk.0.w")!;
    expect(w.ggmlType).toBe("Q4_0");
    // Q4_0: 18 bytes per block of 32 values; blk.0.w is [4, 64], 8 blocks, which the file holds.
    expect(stored).toEqual([["blk.0.w", 8 * 18]]);
    expect(w.byteLength).toBe(8 * 18);
  });

  it("NAME_REGEX:TYPE rules, the last that applies deciding; a tensor a rule names that cannot be quantized is an error", async () => {
    const file = await readGguf(await write(model(), ["Q8_0", "blk\\.0\\.w:Q4_0"]), { keepQuantized: true });
    expect(file.tensors[0]!.ggmlType).toBe("Q4_0");
    await expect(write(model(), ["odd:Q8_0"])).rejects.toThrow(
      /tensor "odd": --quantize odd:Q8_0 names it, but it cannot be quantized: rows of 48 are not whole Q8_0 blocks of 32/,
    );
    expect(await errorCode(write(model(), ["Q9_9"]))).toBe("InvalidOption");
    expect(await errorCode(write(model(), ["(:Q8_0"]))).toBe("InvalidOption");
  });

  it("widens F16 and BF16 exactly before quantizing: the blocks are those of the same values in F32", async () => {
    const values = Array.from({ length: 256 }, (_, i) => Math.fround((i - 128) / 16));
    const f16 = new Uint16Array(values.map((v) => toF16(v)));
    const bf16 = new Uint16Array(values.map((v) => new Uint32Array(new Float32Array([v]).buffer)[0]! >>> 16));
    const blocksOf = async (entry: TensorEntry) => {
      const file = await readGguf(await write({ metadata: null, tensors: [entry] }, ["Q4_K"]), { keepQuantized: true });
      return toHex(await readTensorBytes(file.tensors[0]!));
    };
    const reference = await blocksOf(f32("w", [1, 256], values));
    expect(await blocksOf(tensorFromBytes({ name: "w", dtype: "F16", shape: [1, 256] }, new Uint8Array(f16.buffer)))).toBe(reference);
    expect(await blocksOf(tensorFromBytes({ name: "w", dtype: "BF16", shape: [1, 256] }, new Uint8Array(bf16.buffer)))).toBe(reference);
  });

  it("splits by the quantized sizes (blk.0.w: 272 bytes of Q8_0, not 1,024 of F32)", async () => {
    const files = await planSplitSet(model(), 600, "m.gguf", { quantize: ["Q8_0"] });
    expect(files.map((f) => [f.name, f.tensors.map((t) => t.name)])).toEqual([
      ["m-00001-of-00003.gguf", ["blk.0.w", "blk.0.b"]],
      ["m-00002-of-00003.gguf", ["odd"]],
      ["m-00003-of-00003.gguf", ["ids"]],
    ]);
  });
});

/** An F16 bit pattern for values exact in F16 (the test's values are multiples of 1/16 below 8). */
function toF16(value: number): number {
  if (value === 0) return Object.is(value, -0) ? 0x8000 : 0;
  const sign = value < 0 ? 0x8000 : 0;
  const abs = Math.abs(value);
  const exponent = Math.floor(Math.log2(abs));
  const mantissa = Math.round((abs / 2 ** exponent - 1) * 1024);
  return sign | ((exponent + 15) << 10) | mantissa;
}
