/**
 * Against gguf-py itself (the reference Python's `gguf` 0.19.0, fixtures/reference_gguf.py): for
 * the same keys and tensors in the same order, our writer's file is GGUFWriter's byte for byte,
 * single and as a split set (`split_max_size`); GGUFReader reads what we write from a plain
 * checkpoint (string metadata) as we meant it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { MemorySink, type TensorEntry, createMetadata, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { RECORD_KEY, planSplitSet, readGguf, writeGguf } from "@st-convert/gguf";
import { Random, describeGgml, describeInterop, runPython, toHex } from "@st-convert/testing";

const dir = mkdtempSync(join(tmpdir(), "gguf-interop-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type SpecKey = [key: string, type: string, value: unknown, itemType?: string];
type SpecTensor = [name: string, ggmlType: string, shape: number[], hex: string, how?: "quantize"];

const KEYS: SpecKey[] = [
  ["general.name", "STRING", "interop ✓"],
  ["t.u8", "UINT8", 200],
  ["t.i8", "INT8", -5],
  ["t.u16", "UINT16", 60000],
  ["t.i16", "INT16", -300],
  ["t.u32", "UINT32", 4000000000],
  ["t.i32", "INT32", -70000],
  ["t.f32", "FLOAT32", 1.5],
  ["t.bool", "BOOL", true],
  ["t.u64", "UINT64", "18446744073709551615"],
  ["t.i64", "INT64", "-5"],
  ["t.f64", "FLOAT64", 0.1],
  ["t.tokens", "ARRAY", ["<s>", "</s>", "héllo"], "STRING"],
  ["t.scores", "ARRAY", [0.25, -1], "FLOAT32"],
  ["t.ids", "ARRAY", ["1", "2"], "UINT64"],
];

const random = new Random(20261206);
const BYTES: Record<string, number> = { F32: 4, F16: 2, BF16: 2, F64: 8, I8: 1, I16: 2, I32: 4, I64: 8 };
/** Q8_0 and Q4_K blocks of valid scales (f16 1/128 where a block has scales), random elsewhere. */
function blocks(type: "Q8_0" | "Q4_K", rows: number, perRow: number): Uint8Array {
  const [block, size] = type === "Q8_0" ? [32, 34] : [256, 144];
  const out = random.bytes((rows * perRow * size) / block);
  for (let at = 0; at < out.byteLength; at += size) {
    out.set([0x00, 0x20], at);
    if (type === "Q4_K") out.set([0x00, 0x20], at + 2);
  }
  return out;
}

function tensors(): SpecTensor[] {
  const plain: [string, string, number[]][] = [
    ["tok_embd.weight", "F32", [3, 8]],
    ["norm.weight", "F16", [8]],
    ["bf", "BF16", [2, 2]],
    ["f64", "F64", [2]],
    ["i8", "I8", [3]],
    ["i16", "I16", [1, 2]],
    ["i32", "I32", [2, 1, 1]],
    ["i64", "I64", [1]],
  ];
  return [
    ...plain.map(([name, type, shape]): SpecTensor => [name, type, shape, toHex(random.bytes(BYTES[type]! * shape.reduce((a, b) => a * b, 1)))]),
    ["blk.0.q8", "Q8_0", [2, 64], toHex(blocks("Q8_0", 2, 64))],
    ["blk.0.q4k", "Q4_K", [1, 256], toHex(blocks("Q4_K", 1, 256))],
  ];
}

const fromHex = (hex: string) => new Uint8Array(hex.match(/../g)?.map((b) => Number.parseInt(b, 16)) ?? []);

/** The same checkpoint as our tensor model gives it: typed metadata entries, quantized blocks as kept U8 tensors. */
function source(arch: string, keys: SpecKey[], spec: SpecTensor[]) {
  const metadata = createMetadata([
    ["gguf.general.architecture", JSON.stringify({ type: "STRING", value: arch })],
    ...keys.map(([key, type, value, itemType]): [string, string] => [
      `gguf.${key}`,
      JSON.stringify(type === "ARRAY" ? { type, itemType, value } : { type, value }),
    ]),
  ]);
  const types: Record<string, string> = {};
  const entries: TensorEntry[] = spec.map(([name, type, shape, hex]) => {
    const bytes = fromHex(hex);
    if (type in BYTES) return tensorFromBytes({ name, dtype: type as "F32", shape }, bytes);
    types[name] = type;
    const [block, size] = type === "Q8_0" ? [32, 34] : [256, 144];
    return tensorFromBytes({ name, dtype: "U8", shape: [...shape.slice(0, -1), (shape[shape.length - 1]! / block) * size] }, bytes);
  });
  metadata[RECORD_KEY] = JSON.stringify({ keys: [], tensors: [], types });
  return { metadata, tensors: entries };
}

describeInterop("gguf-py", (python) => {
  const gguf = (spec: object, name: string): string[] => {
    const specPath = join(dir, `${name}.json`);
    writeFileSync(specPath, JSON.stringify(spec));
    return JSON.parse(runPython(python, "reference_gguf.py", ["write", specPath, join(dir, name)])) as string[];
  };

  it("GGUFWriter and our writer make the same bytes for the same keys and tensors", async () => {
    const spec = tensors();
    const [file] = gguf({ arch: "llama", keys: KEYS, tensors: spec }, "same.gguf");
    const sink = new MemorySink();
    await writeGguf(source("llama", KEYS, spec), sink);
    expect(toHex(sink.bytes())).toBe(toHex(readFileSync(file!)));
  });

  it("and for a header of a tokenizer's size (past the writer's first buffer)", async () => {
    const keys: SpecKey[] = [
      ["tokenizer.ggml.tokens", "ARRAY", Array.from({ length: 20000 }, (_, i) => `▁tok${i}`), "STRING"],
      ["tokenizer.ggml.scores", "ARRAY", Array.from({ length: 20000 }, (_, i) => -i / 8), "FLOAT32"],
      ["tokenizer.ggml.token_type", "ARRAY", Array.from({ length: 20000 }, (_, i) => i % 3), "INT32"],
    ];
    const spec = tensors().slice(0, 2);
    const [file] = gguf({ arch: "llama", keys, tensors: spec }, "tokenizer.gguf");
    const sink = new MemorySink();
    await writeGguf(source("llama", keys, spec), sink);
    expect(toHex(sink.bytes())).toBe(toHex(readFileSync(file!)));
  });

  it("with a custom alignment too", async () => {
    const spec = tensors().slice(0, 3);
    const [file] = gguf({ arch: "gpt2", alignment: 64, keys: [], tensors: spec }, "aligned.gguf");
    const sink = new MemorySink();
    const src = source("gpt2", [["general.alignment", "UINT32", 64]], spec);
    await writeGguf(src, sink);
    expect(toHex(sink.bytes())).toBe(toHex(readFileSync(file!)));
  });

  it("a split set as GGUFWriter(split_max_size=…) makes it: names, keys, layout", async () => {
    const spec = tensors();
    const files = gguf({ arch: "llama", keys: KEYS, tensors: spec, split_max_size: 100 }, "model.gguf");
    expect(files.length).toBeGreaterThan(2);
    const ours = await planSplitSet(source("llama", KEYS, spec), 100, "model.gguf");
    expect(ours.map((f) => f.name)).toEqual(files.map((f) => f.slice(f.lastIndexOf("/") + 1)));
    for (const [i, file] of ours.entries()) {
      const sink = new MemorySink();
      await file.write(sink);
      expect(toHex(sink.bytes())).toBe(toHex(readFileSync(files[i]!)));
    }
  });

  it("GGUFReader reads what we write from a checkpoint with string metadata", async () => {
    const bytes = random.bytes(24);
    const path = join(dir, "ours.gguf");
    const sink = new MemorySink();
    await writeGguf({ metadata: createMetadata([["format", "pt"]]), tensors: [tensorFromBytes({ name: "w", dtype: "F32", shape: [2, 3] }, bytes)] }, sink);
    writeFileSync(path, sink.bytes());
    const read = JSON.parse(runPython(python, "reference_gguf.py", ["read", path]));
    expect(read.keys).toEqual({ "general.architecture": { type: "STRING", value: "unknown" }, format: { type: "STRING", value: "pt" } });
    expect(read.tensors).toEqual([{ name: "w", type: "F32", shape: [2, 3], stored_shape: [2, 3], bytes: toHex(bytes) }]);
  });
});

/** F32 rows of a normal-ish spread, with an outlier and zeros, as the quantizers meet them. */
function rows(n: number): Float32Array {
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) values[i] = (random.uint32() / 2 ** 32 - 0.5) * 4 * Math.cos(i);
  values[7] = 40;
  values.fill(0, 64, 96);
  return values;
}

describeInterop("--quantize against gguf-py", (python) => {
  it.each(["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])("%s: the file GGUFWriter writes for gguf.quants.quantize's blocks", async (type) => {
    const values = rows(4 * 256);
    const hex = toHex(new Uint8Array(values.buffer));
    const specPath = join(dir, `q-${type}.json`);
    writeFileSync(specPath, JSON.stringify({ arch: "llama", keys: [], tensors: [["w", type, [4, 256], hex, "quantize"]] }));
    const [file] = JSON.parse(runPython(python, "reference_gguf.py", ["write", specPath, join(dir, `q-${type}.gguf`)])) as string[];
    const sink = new MemorySink();
    const metadata = createMetadata([["general.architecture", "llama"]]);
    await writeGguf({ metadata, tensors: [tensorFromBytes({ name: "w", dtype: "F32", shape: [4, 256] }, new Uint8Array(values.buffer))] }, sink, {
      quantize: [type],
    });
    expect(toHex(sink.bytes())).toBe(toHex(readFileSync(file!)));
  });
});

describeGgml("--quantize against ggml's C", (oracle) => {
  it.each([
    ["Q2_K", 10],
    ["Q3_K", 11],
    ["Q4_K", 12],
    ["Q5_K", 13],
    ["Q6_K", 14],
    ["TQ1_0", 34],
    ["TQ2_0", 35],
    ["MXFP4", 39],
  ] as const)("%s: the blocks ggml_quantize_chunk makes", async (type, id) => {
    const values = rows(3 * 512);
    const sink = new MemorySink();
    await writeGguf({ metadata: null, tensors: [tensorFromBytes({ name: "w", dtype: "F32", shape: [3, 512] }, new Uint8Array(values.buffer))] }, sink, {
      quantize: [type],
    });
    const file = await readGguf(sink.bytes(), { keepQuantized: true });
    expect(file.tensors[0]!.ggmlType).toBe(type);
    expect(toHex(await readTensorBytes(file.tensors[0]!))).toBe(toHex(oracle.quantize(id, values, 512)));
  });
});
