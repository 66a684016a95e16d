/**
 * gguf-py's own files (fixtures/gguf, written by GGUFWriter 0.19.0): our reader must see what
 * GGUFReader saw (manifest.json: every key with its type and value, each tensor's ggml type,
 * numpy shape and bytes, and gguf.quants.dequantize's F32 for quantized ones), and our writer
 * must give back every single-file fixture byte for byte from what the reader made of it.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MemorySink, bytesSource, readTensorBytes } from "@st-convert/core";
import { KV_PREFIX, RECORD_KEY, readGguf, writeGguf } from "@st-convert/gguf";
import { fixturePath, toHex } from "@st-convert/testing";

interface ManifestTensor {
  name: string;
  type: string;
  shape: number[];
  stored_shape: number[];
  bytes: string;
  f32?: string;
}
interface ManifestFile {
  endianness: "LITTLE" | "BIG";
  alignment: number;
  keys: Record<string, unknown>;
  tensors: ManifestTensor[];
}

const manifest = JSON.parse(readFileSync(fixturePath("gguf", "manifest.json"), "utf8")) as Record<string, ManifestFile>;
const read = (name: string) => new Uint8Array(readFileSync(fixturePath("gguf", name)));
const PLAIN = new Set(["F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"]);

/** The metadata a file's keys become, decoded back to the manifest's form. */
function decodedKeys(metadata: Record<string, string> | null): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(metadata ?? {})) if (key.startsWith(KV_PREFIX)) out[key.slice(KV_PREFIX.length)] = JSON.parse(value);
  return out;
}

describe("gguf-py's files, read", () => {
  for (const [name, expected] of Object.entries(manifest)) {
    // The second and third files of the split set are read through the first (split.test.ts).
    if (/-0000[23]-of-/.test(name)) continue;
    it(`${name}: every key with its type and value, every tensor's shape and bytes`, async () => {
      const file = await readGguf(read(name), { fileName: name, keepQuantized: true, openSibling: async (sibling) => bytesSource(read(sibling), sibling) });
      if (!name.startsWith("split")) {
        expect(decodedKeys(file.metadata)).toEqual(expected.keys);
        expect(file.header.alignment).toBe(expected.alignment);
        expect(file.header.littleEndian).toBe(expected.endianness === "LITTLE");
        const tensors = await Promise.all(
          file.tensors.map(async (t) => ({ name: t.name, type: t.ggmlType, shape: [...t.shape], bytes: toHex(await readTensorBytes(t)) })),
        );
        expect(tensors).toEqual(
          expected.tensors.map((t) => ({ name: t.name, type: t.type, shape: PLAIN.has(t.type) ? t.shape : t.stored_shape, bytes: t.bytes })),
        );
      }
    });
  }

  it("quantized tensors dequantize to gguf.quants.dequantize's F32, bit for bit", async () => {
    const file = await readGguf(read("quant.gguf"), { fileName: "quant.gguf" });
    const expected = manifest["quant.gguf"]!.tensors;
    expect(file.tensors.map((t) => t.ggmlType)).toEqual(["Q8_0", "Q4_0", "Q4_K", "Q6_K"]);
    for (const [i, t] of file.tensors.entries()) {
      expect(t.dtype).toBe("F32");
      expect(t.shape).toEqual(expected[i]!.shape);
      expect(toHex(await readTensorBytes(t))).toBe(expected[i]!.f32);
    }
  });

  it("records kept blocks' ggml types in the metadata, and only kept ones", async () => {
    const kept = await readGguf(read("quant.gguf"), { keepQuantized: true });
    const names = ["q8_0", "q4_0", "q4_k", "q6_k_3d"];
    expect(JSON.parse(kept.metadata![RECORD_KEY]!)).toEqual({
      keys: ["general.architecture", "general.quantization_version"],
      tensors: names,
      types: { q8_0: "Q8_0", q4_0: "Q4_0", q4_k: "Q4_K", q6_k_3d: "Q6_K" },
    });
    const dequantized = await readGguf(read("quant.gguf"));
    expect(JSON.parse(dequantized.metadata![RECORD_KEY]!)).toEqual({ keys: ["general.architecture", "general.quantization_version"], tensors: names });
  });

  it("reads the split set through its first file as one checkpoint, without the split keys", async () => {
    const file = await readGguf(read("split-00001-of-00003.gguf"), {
      fileName: "split-00001-of-00003.gguf",
      openSibling: async (sibling) => bytesSource(read(sibling), sibling),
    });
    expect(file.files).toEqual(["split-00001-of-00003.gguf", "split-00002-of-00003.gguf", "split-00003-of-00003.gguf"]);
    const parts = ["split-00001-of-00003.gguf", "split-00002-of-00003.gguf", "split-00003-of-00003.gguf"].flatMap((n) => manifest[n]!.tensors);
    expect(await Promise.all(file.tensors.map(async (t) => [t.name, toHex(await readTensorBytes(t))]))).toEqual(parts.map((t) => [t.name, t.bytes]));
    const keys = decodedKeys(file.metadata);
    const first = { ...manifest["split-00001-of-00003.gguf"]!.keys };
    for (const key of ["split.no", "split.count", "split.tensors.count"]) delete first[key];
    expect(keys).toEqual(first);
  });
});

describe("gguf-py's files, written back", () => {
  for (const name of ["plain.gguf", "quant.gguf", "align64.gguf", "no_tensors.gguf"]) {
    it(`${name}: read with its blocks kept and written again, byte for byte`, async () => {
      const bytes = read(name);
      const file = await readGguf(bytes, { keepQuantized: true });
      const sink = new MemorySink();
      await writeGguf(file, sink);
      expect(toHex(sink.bytes())).toBe(toHex(bytes));
    });
  }

  it("a big-endian file is written little-endian with the same keys and values", async () => {
    const file = await readGguf(read("big_endian.gguf"));
    const sink = new MemorySink();
    await writeGguf(file, sink);
    const again = await readGguf(sink.bytes());
    expect(again.header.littleEndian).toBe(true);
    expect(again.metadata).toEqual(file.metadata);
    for (const [i, t] of again.tensors.entries()) expect(toHex(await readTensorBytes(t))).toBe(manifest["big_endian.gguf"]!.tensors[i]!.bytes);
  });
});
