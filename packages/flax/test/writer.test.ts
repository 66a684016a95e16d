/**
 * The writer: names split into nested dicts, clashes refused, chunking as flax chunks, bytes
 * streamed in order, and what it writes reads back as the same tensors.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type ByteSink, DTYPES, type Dtype, type TensorEntry, readTensorBytes, tensorByteLength, tensorFromBytes } from "@st-convert/core";
import { type FlaxWriteOptions, MAX_DEPTH, readFlax, serializeFlax, writeFlax } from "@st-convert/flax";
import { errorCode as code, fuzzRuns, fuzzSeed, toHex } from "@st-convert/testing";
import { cat, map, str } from "./msgpackBytes.js";

const u8 = (name: string, ...bytes: number[]) => tensorFromBytes({ name, dtype: "U8", shape: [bytes.length] }, Uint8Array.from(bytes));
const write = (tensors: TensorEntry[], options?: FlaxWriteOptions) => serializeFlax({ metadata: null, tensors }, options);

/** A tensor whose chunks are produced on demand, in runs of `run` bytes, `total` bytes in all. */
function lazyTensor(name: string, total: number, run: number, declared = total): TensorEntry {
  return {
    name,
    dtype: "U8",
    shape: [declared],
    byteLength: declared,
    async *chunks() {
      for (let at = 0; at < total; at += run) yield Uint8Array.from({ length: Math.min(run, total - at) }, (_, i) => (at + i) % 251);
    },
  };
}

describe("names to nested dicts", () => {
  it("splits on the separator, keeps integer segments as string keys, sorts keys by code point", async () => {
    const bytes = await write([u8("blocks.10.w", 1), u8("blocks.2.w", 2), u8("😀", 3), u8("\uffff", 4)]);
    const expected = cat(
      map(3),
      str("blocks"),
      map(2),
      str("10"), // "10" < "2", as Python sorts strings
      map(1),
      str("w"),
      "c7 0c 01 93 91 01 a5 75696e7438 c4 01 01",
      str("2"),
      map(1),
      str("w"),
      "c7 0c 01 93 91 01 a5 75696e7438 c4 01 02",
      str("\uffff"), // U+FFFF before U+1F600 (JavaScript's UTF-16 order would put it after)
      "c7 0c 01 93 91 01 a5 75696e7438 c4 01 04",
      str("😀"),
      "c7 0c 01 93 91 01 a5 75696e7438 c4 01 03",
    );
    expect(toHex(bytes)).toBe(toHex(expected));
  });

  it("writes no tensors as an empty map", async () => {
    expect(toHex(await write([]))).toBe("80");
  });

  it("uses another separator when told, keeping dots inside keys", async () => {
    const bytes = await write([u8("a.b/c", 1)], { sep: "/" });
    expect(toHex(bytes)).toBe(toHex(cat(map(1), str("a.b"), map(1), str("c"), "c7 0c 01 93 91 01 a5 75696e7438 c4 01 01")));
    expect((await readFlax(bytes, { sep: "/" })).tensors.map((t) => t.name)).toEqual(["a.b/c"]);
  });

  it.each([
    ["a beside a.b", ["a", "a.b"]],
    ["a.b beside a", ["a.b", "a"]],
    ["a.b.c beside a.b", ["a.b.c", "a.b"]],
  ])("refuses a clash: %s", async (_case, names) => {
    const promise = write(names.map((n) => u8(n, 1)));
    await expect(promise).rejects.toMatchObject({ code: "InvalidName" });
    await expect(write(names.map((n) => u8(n, 1)))).rejects.toThrow(/is an array, but .* needs it to be a dict/);
  });

  it("refuses two tensors of one name", async () => {
    expect(await code(write([u8("a", 1), u8("a", 2)]))).toBe("DuplicateKey");
  });

  it("refuses a lone surrogate, which UTF-8 cannot encode", async () => {
    expect(await code(write([u8("a\ud800", 1)]))).toBe("InvalidName");
  });

  it("refuses nesting deeper than flax's reader accepts, counting the chunk dicts", async () => {
    const deep = (n: number) => Array.from({ length: n }, () => "k").join(".");
    expect(await code(write([u8(deep(MAX_DEPTH), 1)]))).toBe("ok");
    expect(await code(write([u8(deep(MAX_DEPTH + 1), 1)]))).toBe("LimitExceeded");
    expect(await code(write([u8(deep(MAX_DEPTH - 1), 1, 2)], { maxChunkSize: 1 }))).toBe("LimitExceeded");
    expect(await code(write([u8(deep(MAX_DEPTH - 2), 1, 2)], { maxChunkSize: 1 }))).toBe("ok");
  });

  it("refuses an empty separator and a chunk size out of range", async () => {
    expect(await code(write([u8("a", 1)], { sep: "" }))).toBe("InvalidArgument");
    expect(await code(write([u8("a", 1)], { maxChunkSize: 0 }))).toBe("InvalidArgument");
    expect(await code(write([u8("a", 1)], { maxChunkSize: 2 ** 31 }))).toBe("InvalidArgument");
  });
});

describe("dtypes and metadata", () => {
  it("refuses F4 and F6, which no numpy dtype holds byte for byte", async () => {
    for (const dtype of ["F4", "F6_E2M3", "F6_E3M2"] as const) {
      const shape = [dtype === "F4" ? 2 : 4];
      expect(await code(write([tensorFromBytes({ name: "x", dtype, shape }, new Uint8Array(tensorByteLength(dtype, shape)))]))).toBe("Unsupported");
    }
  });

  it("drops metadata with a warning, and writes the same bytes as without it", async () => {
    const warnings: string[] = [];
    const tensors = [u8("a", 1)];
    const withMetadata = await serializeFlax({ metadata: { format: "flax" }, tensors }, { onWarning: (m) => warnings.push(m) });
    expect(toHex(withMetadata)).toBe(toHex(await write(tensors)));
    expect(warnings).toEqual([expect.stringMatching(/^metadata dropped \(format\): flax msgpack has no place for it/)]);
  });
});

describe("chunking and streaming", () => {
  it("chunks as flax does: only over maxChunkSize, runs of int(max / itemsize) elements, the last shorter", async () => {
    const f32 = tensorFromBytes(
      { name: "w", dtype: "F32", shape: [2, 5] },
      new Uint8Array(40).map((_, i) => i),
    );
    const file = await readFlax(await write([f32], { maxChunkSize: 16 }));
    expect(file.tensors[0]!.ranges.map(([, n]) => n)).toEqual([16, 16, 8]);
    expect(toHex(await readTensorBytes(file.tensors[0]!))).toBe(toHex(new Uint8Array(40).map((_, i) => i)));
    // Exactly maxChunkSize bytes is not chunked; a chunk size below the itemsize gives one element per chunk.
    expect((await readFlax(await write([f32], { maxChunkSize: 40 }))).tensors[0]!.ranges).toHaveLength(1);
    expect((await readFlax(await write([f32], { maxChunkSize: 3 }))).tensors[0]!.ranges).toHaveLength(10);
  });

  it("splits a tensor's stream across chunks whatever sizes its chunks come in", async () => {
    const whole = await write([lazyTensor("x", 100, 100)], { maxChunkSize: 16 });
    for (const run of [1, 3, 16, 17, 64]) expect(toHex(await write([lazyTensor("x", 100, run)], { maxChunkSize: 16 }))).toBe(toHex(whole));
  });

  it("refuses a tensor that delivers fewer or more bytes than it declares", async () => {
    expect(await code(write([lazyTensor("x", 10, 4, 11)]))).toBe("ByteLengthMismatch");
    expect(await code(write([lazyTensor("x", 12, 4, 11)]))).toBe("ByteLengthMismatch");
    expect(await code(write([lazyTensor("x", 12, 4, 11)], { maxChunkSize: 4 }))).toBe("ByteLengthMismatch");
    await expect(write([lazyTensor("x", 10, 4, 11)])).rejects.toThrow(/tensor "x": the reader delivered only 10 of the 11 bytes/);
  });

  it("streams: no write to the sink is larger than a pulled chunk or the 64 KiB structure buffer", async () => {
    const sizes: number[] = [];
    let total = 0;
    const sink: ByteSink = {
      async write(chunk) {
        sizes.push(chunk.byteLength);
        total += chunk.byteLength;
      },
      async close() {},
      async abort() {},
    };
    const run = 1024 * 1024;
    await writeFlax({ metadata: null, tensors: [lazyTensor("big", 32 * run, run), u8("small", 1)] }, sink, { maxChunkSize: 5 * run, chunkSize: run });
    expect(Math.max(...sizes)).toBeLessThanOrEqual(run);
    expect(total).toBeGreaterThan(32 * run);
  });

  it("writes a map32 for more than 65535 keys, and reads it back", async () => {
    const tensors = Array.from({ length: 70_000 }, (_, i) => tensorFromBytes({ name: `t${i}`, dtype: "U8", shape: [0] }, new Uint8Array(0)));
    const bytes = await write(tensors);
    expect(toHex(bytes.subarray(0, 5))).toBe("df00011170");
    expect((await readFlax(bytes)).tensors).toHaveLength(70_000);
  });
});

describe("round trips", () => {
  const dtypes = DTYPES.map((d) => d.code).filter((c) => !c.startsWith("F4") && !c.startsWith("F6")) as Dtype[];
  const segment = fc.oneof(
    fc.constantFrom("params", "kernel", "bias", "0", "1", "10", "2", "é", "😀", ""),
    fc.string({ maxLength: 6 }).filter((s) => !s.includes(".")),
  );
  const tensor = fc.record({
    path: fc.array(segment, { minLength: 1, maxLength: 4 }),
    dtype: fc.constantFrom(...dtypes),
    shape: fc.array(fc.integer({ min: 0, max: 4 }), { maxLength: 3 }),
    seed: fc.nat(),
  });

  it("safetensors-like tensors → flax → the same tensors, chunked or not", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(tensor, { selector: (t) => t.path.join("."), maxLength: 8 }),
        fc.constantFrom(2 ** 30, 8, 3),
        async (specs, maxChunkSize) => {
          const names = specs.map((s) => s.path.join("."));
          // Skip sets with a clash (a name that is a prefix of another); the clash test covers them.
          fc.pre(!names.some((a) => names.some((b) => b.startsWith(`${a}.`))));
          const tensors = specs.map((s, i) => {
            const bytes = new Uint8Array(tensorByteLength(s.dtype, s.shape)).map((_, j) => (s.seed + j * 7) & 0xff);
            return tensorFromBytes({ name: names[i]!, dtype: s.dtype, shape: s.shape }, bytes);
          });
          const back = await readFlax(await write(tensors, { maxChunkSize }));
          const view = async (ts: readonly TensorEntry[]) =>
            (await Promise.all(ts.map(async (t) => `${t.name}|${t.dtype}|${t.shape.join(",")}|${toHex(await readTensorBytes(t))}`))).sort();
          expect(await view(back.tensors)).toEqual(await view(tensors));
        },
      ),
      { numRuns: fuzzRuns(), seed: fuzzSeed() },
    );
  });
});
