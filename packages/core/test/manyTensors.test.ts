/**
 * Files of many small tensors: reading them costs a few reads in all, not one per tensor; reading
 * them out of order reads no more than asked; names are indexed; and the writer refuses, by name,
 * the shapes the reference reader refuses.
 */
import { describe, expect, it } from "vitest";
import {
  type ByteSource,
  MemorySink,
  NameIndex,
  type TensorEntry,
  isStConvertError,
  layoutSafetensors,
  parseSafetensorsHeader,
  readAheadSource,
  readSafetensors,
  readTensorBytes,
  serializeSafetensors,
  tensorFromBytes,
  writeSafetensors,
} from "@st-convert/core";

/** `count` F32[2] tensors holding 2k and 2k + 1. */
function smallTensors(count: number): TensorEntry[] {
  return Array.from({ length: count }, (_, k) =>
    tensorFromBytes(
      { name: `model.layers.${k >> 4}.block.${k & 15}.weight`, dtype: "F32", shape: [2] },
      new Uint8Array(new Float32Array([2 * k, 2 * k + 1]).buffer),
    ),
  );
}

/** A source over `bytes` that records every read. */
function countingSource(bytes: Uint8Array): ByteSource & { reads: [number, number][] } {
  const reads: [number, number][] = [];
  return {
    size: bytes.byteLength,
    reads,
    async read(offset: number, length: number) {
      reads.push([offset, length]);
      return bytes.slice(offset, offset + length);
    },
  };
}

async function failure(run: () => unknown): Promise<{ code: string; tensor: string | undefined } | "ok"> {
  try {
    await run();
    return "ok";
  } catch (error) {
    if (!isStConvertError(error)) throw error;
    return { code: error.code, tensor: error.tensor };
  }
}

describe("many small tensors", () => {
  it("copies 5,000 tensors in file order with a handful of reads of the source, not one per tensor", async () => {
    const bytes = await serializeSafetensors({ metadata: null, tensors: smallTensors(5000) });
    const source = countingSource(bytes);
    const file = await readSafetensors(source);
    const sink = new MemorySink();
    await writeSafetensors(file, sink);
    expect(Buffer.from(sink.bytes()).equals(bytes)).toBe(true);
    // The length, the header, then windows that double while the tensors come in file order.
    expect(source.reads.length).toBeLessThan(40);
    expect(source.reads.slice(2).every(([, length]) => length <= 1024 * 1024)).toBe(true);
  });

  it("reads tensors asked for out of file order one by one, and no byte more than asked", async () => {
    const tensors = smallTensors(300);
    const bytes = await serializeSafetensors({ metadata: null, tensors });
    const source = countingSource(bytes);
    const file = await readSafetensors(source);
    const headerReads = source.reads.length;
    const order = file.tensors.map((_, k) => (k * 7) % file.tensors.length);
    for (const k of order) {
      const t = file.tensors[k]!;
      expect([...new Float32Array((await readTensorBytes(t)).buffer)]).toEqual([
        ...new Float32Array((await readTensorBytes(tensors.find((x) => x.name === t.name)!)).buffer),
      ]);
    }
    // Each asked-for tensor alone: a read of its 8 bytes.
    const dataReads = source.reads.slice(headerReads);
    expect(dataReads.length).toBe(300);
    expect(dataReads.every(([, length]) => length === 8)).toBe(true);
  });

  it("keeps chunks valid after later tensors were read from other windows", async () => {
    const bytes = await serializeSafetensors({ metadata: null, tensors: smallTensors(1000) });
    const file = await readSafetensors(bytes);
    const first: Uint8Array[] = [];
    for await (const chunk of file.tensors[0]!.chunks()) first.push(chunk);
    for (const t of file.tensors.slice(500)) await readTensorBytes(t);
    expect([...new Float32Array(first[0]!.slice().buffer)]).toEqual([0, 1]);
  });

  it("finds every tensor by name, and shares one frozen shape array among tensors of one shape", async () => {
    const file = await readSafetensors(await serializeSafetensors({ metadata: null, tensors: smallTensors(2000) }));
    for (const t of file.tensors) expect(file.tensor(t.name)).toBe(t);
    expect(file.tensors[0]!.shape).toBe(file.tensors[1999]!.shape);
    expect(Object.isFrozen(file.tensors[0]!.shape)).toBe(true);
    expect(file.tensors[3]!.dataOffsets).toEqual([file.tensors[3]!.dataOffsets[0], file.tensors[3]!.dataOffsets[0] + 8]);
  });

  it("parses a header given as bytes or as text alike", () => {
    const text = '{"__metadata__":{"k":"v"},"é":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}';
    const fromText = parseSafetensorsHeader(text);
    expect(parseSafetensorsHeader(new TextEncoder().encode(text))).toEqual(fromText);
    expect(fromText.tensors).toEqual([{ name: "é", dtype: "U8", shape: [1n], begin: 0n, end: 1n }]);
  });

  it("refuses invalid UTF-8 anywhere in the header as InvalidHeader, even after a JSON error (the reference checks UTF-8 first)", () => {
    const bytes = Uint8Array.from([...new TextEncoder().encode('{"a":[1,]} "'), 0xff, 0x22]);
    expect(() => parseSafetensorsHeader(bytes)).toThrow(expect.objectContaining({ code: "InvalidHeader" }));
  });
});

describe("NameIndex", () => {
  it("knows the position of each of 100,000 names and refuses a repeated one", () => {
    const index = new NameIndex();
    const names = Array.from({ length: 100_000 }, (_, k) => `layer.${k}.w`);
    expect(names.every((name) => index.add(name))).toBe(true);
    expect(index.add("layer.77.w")).toBe(false);
    expect(index.size).toBe(100_000);
    expect(names.every((name, k) => index.get(name) === k)).toBe(true);
    expect(index.get("layer.100000.w")).toBe(-1);
    expect(index.get("")).toBe(-1);
  });
});

describe("readAheadSource", () => {
  it("serves forward reads of small ranges from windows that double, and backward ones exactly", async () => {
    const bytes = Uint8Array.from({ length: 1 << 16 }, (_, i) => i & 255);
    const inner = countingSource(bytes);
    const source = readAheadSource(inner, { smallRead: 64, maxReadAhead: 4096 });
    for (let at = 0; at < 8192; at += 10) expect(await source.read(at, 10)).toEqual(bytes.subarray(at, at + 10));
    expect(inner.reads.length).toBeLessThan(12);
    expect(inner.reads.every(([, length]) => length <= 4096)).toBe(true);
    inner.reads.length = 0;
    for (let at = 8000; at > 0; at -= 500) expect(await source.read(at, 10)).toEqual(bytes.subarray(at, at + 10));
    expect(inner.reads.every(([, length]) => length === 10)).toBe(true);
    await expect(source.read(bytes.length - 5, 10)).rejects.toThrow(expect.objectContaining({ code: "UnexpectedEof" }));
  });
});

describe("shapes the reference reader refuses", () => {
  const t = (shape: number[]) => tensorFromBytes({ name: "empty", dtype: "U8", shape }, new Uint8Array(0));

  it("refuses, by name and before writing anything, dims that overflow u64 before a 0 empties the tensor", async () => {
    expect(await failure(() => layoutSafetensors([t([2 ** 32, 2 ** 32, 0])]))).toEqual({ code: "ValidationOverflow", tensor: "empty" });
    expect(await failure(() => layoutSafetensors([t([2 ** 52, 2 ** 12, 0, 3])]))).toEqual({ code: "ValidationOverflow", tensor: "empty" });
    const sink = new MemorySink();
    expect(await failure(() => writeSafetensors({ metadata: null, tensors: [...smallTensors(3), t([2 ** 32, 2 ** 32, 0])] }, sink))).toEqual({
      code: "ValidationOverflow",
      tensor: "empty",
    });
    expect(sink.length).toBe(0);
  });

  it("writes the same dims when the 0 comes first, or before the product passes u64, and reads them back", async () => {
    for (const shape of [
      [0, 2 ** 32, 2 ** 32],
      [2 ** 32, 2 ** 31, 0],
      [2 ** 53 - 1, 0],
    ]) {
      const file = await readSafetensors(await serializeSafetensors({ metadata: null, tensors: [t(shape)] }));
      expect(file.tensors[0]!.shape).toEqual(shape);
    }
  });
});
