import { describe, expect, it } from "vitest";
import {
  DTYPES,
  type Dtype,
  MemorySink,
  type TensorEntry,
  blobSource,
  bytesSource,
  compareCodePoints,
  dtypeInfo,
  layoutSafetensors,
  readSafetensors,
  readTensorBytes,
  serializeSafetensors,
  tensorByteLength,
  tensorFromBytes,
  writeSafetensors,
} from "@st-convert/core";

/** A small deterministic PRNG (mulberry32), so failures reproduce. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomTensors(seed: number): TensorEntry[] {
  const random = prng(seed);
  const count = Math.floor(random() * 12);
  const tensors: TensorEntry[] = [];
  const alphabet = ["a", "b", ".", "_", "0", "9", "é", "\uffff", "😀", "Z"];
  const names = new Set<string>();
  for (let i = 0; i < count; i++) {
    let name = "";
    const length = 1 + Math.floor(random() * 5);
    for (let k = 0; k < length; k++) name += alphabet[Math.floor(random() * alphabet.length)];
    if (names.has(name)) continue;
    names.add(name);
    const dtype = DTYPES[Math.floor(random() * DTYPES.length)]!.code as Dtype;
    const rank = Math.floor(random() * 4);
    const shape = Array.from({ length: rank }, () => Math.floor(random() * 4));
    // Sub-byte dtypes need whole bytes: F4 an even count, F6 a multiple of 4.
    const bits = dtypeInfo(dtype).bits;
    if (bits < 8) shape.push(bits === 4 ? 2 : 4);
    const bytes = new Uint8Array(tensorByteLength(dtype, shape)).map(() => Math.floor(random() * 256));
    tensors.push(tensorFromBytes({ name, dtype, shape }, bytes));
  }
  return tensors;
}

describe("safetensors round trip", () => {
  it.each(Array.from({ length: 40 }, (_, seed) => seed))("random tensors, seed %i", async (seed) => {
    const tensors = randomTensors(seed);
    const metadata = seed % 3 === 0 ? null : { seed: String(seed), "z\u0000": "é😀\n" };
    const bytes = await serializeSafetensors({ metadata, tensors });
    const file = await readSafetensors(bytes);
    expect(file.metadata === null ? null : { ...file.metadata }).toEqual(metadata);
    const expectedOrder = [...tensors].sort((a, b) => dtypeInfo(b.dtype).rank - dtypeInfo(a.dtype).rank || compareCodePoints(a.name, b.name));
    expect(file.tensors.map((t) => t.name)).toEqual(expectedOrder.map((t) => t.name));
    for (const original of tensors) {
      const read = file.tensor(original.name);
      expect([read.dtype, read.shape]).toEqual([original.dtype, original.shape]);
      expect(await readTensorBytes(read)).toEqual(await readTensorBytes(original));
    }
    // Writing what we read gives the same bytes again.
    expect(await serializeSafetensors(file)).toEqual(bytes);
  });

  it("streams through a sink in small chunks with the same bytes as in memory", async () => {
    const tensors = randomTensors(7);
    const whole = await serializeSafetensors({ metadata: null, tensors });
    const sink = new MemorySink();
    await writeSafetensors({ metadata: null, tensors }, sink, { chunkSize: 3 });
    await sink.close();
    expect(sink.bytes()).toEqual(whole);
  });

  it("reads one tensor's bytes without touching the others", async () => {
    const a = tensorFromBytes({ name: "a", dtype: "U8", shape: [1000] }, new Uint8Array(1000).fill(1));
    const b = tensorFromBytes({ name: "b", dtype: "U8", shape: [10] }, new Uint8Array(10).fill(2));
    const bytes = await serializeSafetensors({ metadata: null, tensors: [a, b] });
    const reads: [number, number][] = [];
    const inner = bytesSource(bytes);
    const file = await readSafetensors({ size: inner.size, read: (o, l) => (reads.push([o, l]), inner.read(o, l)) });
    const headerReads = reads.length;
    expect(await readTensorBytes(file.tensor("b"))).toEqual(new Uint8Array(10).fill(2));
    const dataStart = 8 + file.headerLength;
    expect(reads.slice(headerReads)).toEqual([[dataStart + 1000, 10]]);
  });

  it("reads from a Blob", async () => {
    const bytes = await serializeSafetensors({ metadata: { k: "v" }, tensors: randomTensors(3) });
    const file = await readSafetensors(blobSource(new Blob([bytes])));
    expect(await serializeSafetensors(file)).toEqual(bytes);
  });

  it("refuses a tensor whose reader delivers fewer bytes than declared", async () => {
    const liar: TensorEntry = {
      name: "liar",
      dtype: "U8",
      shape: [4],
      byteLength: 4,
      chunks: async function* () {
        yield new Uint8Array(3);
      },
    };
    await expect(serializeSafetensors({ metadata: null, tensors: [liar] })).rejects.toMatchObject({ code: "ByteLengthMismatch", tensor: "liar" });
  });

  it("refuses a tensor whose reader delivers more bytes than declared", async () => {
    const liar: TensorEntry = {
      name: "liar",
      dtype: "U8",
      shape: [4],
      byteLength: 4,
      chunks: async function* () {
        yield new Uint8Array(5);
      },
    };
    await expect(serializeSafetensors({ metadata: null, tensors: [liar] })).rejects.toMatchObject({ code: "ByteLengthMismatch" });
  });

  it("refuses a tensor whose declared byte length is not what its dtype and shape need, before writing it", async () => {
    // Found in review: the header is laid out from dtype and shape, so piping the declared length wrote a corrupt file.
    const liar: TensorEntry = {
      name: "w",
      dtype: "F32",
      shape: [1],
      byteLength: 8,
      chunks: async function* () {
        yield new Uint8Array(8);
      },
    };
    const sink = new MemorySink();
    await expect(writeSafetensors({ metadata: null, tensors: [liar] }, sink)).rejects.toMatchObject({ code: "ByteLengthMismatch", tensor: "w" });
    await expect(readTensorBytes(liar)).rejects.toMatchObject({ code: "ByteLengthMismatch" });
    expect(sink.length).toBe(layoutSafetensors([liar]).header.byteLength); // the header only: no tensor byte was written
  });

  it("refuses what it cannot write faithfully", async () => {
    const one = (name: string) => tensorFromBytes({ name, dtype: "U8", shape: [1] }, new Uint8Array(1));
    await expect(serializeSafetensors({ metadata: null, tensors: [one("x"), one("x")] })).rejects.toMatchObject({ code: "DuplicateKey" });
    await expect(serializeSafetensors({ metadata: null, tensors: [one("\ud800")] })).rejects.toMatchObject({ code: "InvalidName" });
    await expect(serializeSafetensors({ metadata: null, tensors: [one("__metadata__")] })).rejects.toMatchObject({ code: "InvalidName" });
    await expect(serializeSafetensors({ metadata: { a: 1 as unknown as string }, tensors: [] })).rejects.toMatchObject({ code: "InvalidMetadata" });
  });

  it("refuses a header past the 100 MB limit when writing", async () => {
    await expect(serializeSafetensors({ metadata: { big: "x".repeat(100_000_000) }, tensors: [] })).rejects.toMatchObject({ code: "HeaderTooLarge" });
  });
});

describe("MemorySink", () => {
  it("keeps a copy of each chunk, also of a Node Buffer whose slice() is a view", async () => {
    const sink = new MemorySink();
    const chunk = Buffer.from([1, 2, 3]);
    await sink.write(chunk);
    chunk.fill(9);
    await sink.close();
    expect([...sink.bytes()]).toEqual([1, 2, 3]);
  });
});
