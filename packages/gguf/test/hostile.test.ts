/**
 * Hostile and malformed GGUF files, built field by field and named after the attack: each gives one
 * StConvertError with the code of the broken rule, without reading what the file did not earn.
 */
import { describe, expect, it } from "vitest";
import { type ByteSource, readTensorBytes } from "@st-convert/core";
import { readGguf } from "@st-convert/gguf";
import { errorCode, recordHostileCases } from "@st-convert/testing";
import { cat, gguf, kv, u32, u64 } from "./ggufBytes.js";
import { hostileCases } from "./hostileCases.js";

recordHostileCases("gguf", ".gguf", hostileCases);

/** A source that records every read, to check that nothing big is requested. */
function recording(bytes: Uint8Array): { source: ByteSource; reads: [number, number][] } {
  const reads: [number, number][] = [];
  const source: ByteSource = {
    size: bytes.byteLength,
    name: "hostile.gguf",
    async read(offset, length) {
      reads.push([offset, length]);
      if (offset + length > bytes.byteLength) throw new Error(`read past the end: ${offset}+${length}`);
      return bytes.subarray(offset, offset + length);
    },
  };
  return { source, reads };
}

describe("hostile GGUF files", () => {
  it.each(hostileCases.map(([attack, bytes, code]) => ({ attack, bytes, code })))("$attack → $code", async ({ bytes, code }) => {
    const { source, reads } = recording(bytes);
    const outcome = await errorCode(
      (async () => {
        const file = await readGguf(source, { fileName: "hostile.gguf" });
        for (const t of file.tensors) await readTensorBytes(t);
      })(),
    );
    expect(outcome).toBe(code);
    // Never more than the file holds, whatever it declares.
    for (const [offset, length] of reads) expect(offset + length).toBeLessThanOrEqual(bytes.byteLength);
  });

  it("holds the metadata's arrays to 2^24 items in all, counted before they are read", async () => {
    const bytes = gguf({
      kvs: [kv("a", 9, cat(u32(0), u64(2 ** 23), new Uint8Array(2 ** 23))), kv("b", 9, cat(u32(0), u64(2 ** 23 + 1), new Uint8Array(2 ** 23 + 1)))],
    });
    const { source, reads } = recording(bytes);
    expect(await errorCode(readGguf(source))).toBe("LimitExceeded");
    // The second array is refused before its items are read.
    expect(reads.filter(([offset]) => offset > 2 ** 23).every(([, length]) => length <= 1024 * 1024)).toBe(true);
  });

  it("lists a tensor of a type it cannot dequantize, keeps its blocks when asked, and refuses its values", async () => {
    const [, bytes] = hostileCases.find(([attack]) => attack === "a Q8_1 tensor, dequantized")!;
    const file = await readGguf(bytes, { fileName: "q8_1.gguf" });
    expect(file.tensors.map((t) => [t.name, t.ggmlType, t.dtype, t.shape])).toEqual([["w", "Q8_1", "F32", [32]]]);
    await expect(readTensorBytes(file.tensors[0]!)).rejects.toThrow(
      /^q8_1\.gguf: tensor "w": Q8_1 blocks cannot be dequantized .*--keep-quantized keeps them as blocks$/,
    );
    const kept = await readGguf(bytes, { keepQuantized: true });
    expect((await readTensorBytes(kept.tensors[0]!)).byteLength).toBe(36);
  });

  it("names the file, the tensor and the rule in one line", async () => {
    const [, bytes] = hostileCases.find(([attack]) => attack === "a gap between two tensors")!;
    await expect(readGguf(bytes, { fileName: "model.gguf" })).rejects.toThrow(
      /^model\.gguf: tensor "b": data at offset 64, but the layout puts it at 32 \(each tensor right after the previous one, padded to 32\)$/,
    );
    const [, v1] = hostileCases.find(([attack]) => attack === "version 1 (GGUFv1)")!;
    await expect(readGguf(v1, { fileName: "old.gguf" })).rejects.toThrow(/^old\.gguf: GGUF version 1 \(GGUFv1\) is no longer supported/);
  });

  it("reads a 0-d tensor as shape [] and a name up to its NUL byte, as ggml does", async () => {
    const scalar = await readGguf(hostileCases.find(([attack]) => attack === "a 0-d tensor")![1]);
    expect(scalar.tensors.map((t) => [t.name, t.shape])).toEqual([["s", []]]);
    const cut = await readGguf(hostileCases.find(([attack]) => attack === "a tensor name cut by a NUL byte")![1]);
    expect(cut.tensors.map((t) => t.name)).toEqual(["w"]);
  });
});
