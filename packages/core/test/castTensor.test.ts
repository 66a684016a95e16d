/**
 * castTensor as a stream: chunks of any length and alignment (elements split between chunks),
 * the chunk-size and reuse contracts of `chunks()`, integer refusals naming the tensor and the
 * element, laziness, and sources that lie about their length. Expected bytes come from torch
 * (fixtures/casts) or are written out in the test.
 */
import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type ChunkOptions, type Dtype, type TensorEntry, castTensor, dtypeInfo, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { errorCode, fixturePath, pseudoRandomBytes } from "@st-convert/testing";

const golden = (name: string) => new Uint8Array(readFileSync(fixturePath("casts", name)));

/**
 * A tensor whose source hands its bytes in pieces of the given lengths (cycled), each piece in
 * its own buffer at an odd byte offset, so that no typed array can view it in place.
 */
function choppy(
  dtype: Dtype,
  shape: number[],
  bytes: Uint8Array,
  lengths: readonly number[],
  log: { asked: ChunkOptions[]; closed: number } = { asked: [], closed: 0 },
): TensorEntry {
  return {
    name: "w",
    dtype,
    shape,
    byteLength: bytes.byteLength,
    async *chunks(options = {}) {
      log.asked.push(options);
      try {
        for (let at = 0, k = 0; at < bytes.byteLength; k++) {
          const n = Math.min(lengths[k % lengths.length]!, bytes.byteLength - at);
          const piece = new Uint8Array(n + 1);
          piece.set(bytes.subarray(at, at + n), 1);
          at += n;
          yield piece.subarray(1);
        }
      } finally {
        log.closed++;
      }
    },
  };
}

async function collect(entry: TensorEntry, options?: ChunkOptions): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for await (const chunk of entry.chunks(options)) out.push(chunk.slice());
  return out;
}

const concat = (parts: Uint8Array[]) => new Uint8Array(Buffer.concat(parts));

describe("chunks of any length", () => {
  const cases: [Dtype, Dtype, readonly number[]][] = [
    ["F32", "BF16", [1]],
    ["F32", "BF16", [3, 5, 2]],
    ["F32", "F16", [7, 4096, 1, 9]],
    ["F64", "F16", [5, 11, 8, 3]],
    ["F64", "F8_E4M3", [13]],
    ["F32", "F64", [6, 1, 1, 9]],
    ["F16", "F32", [1, 2, 3]],
    ["BF16", "F16", [65537]],
    ["F8_E5M2", "F64", [3, 2]],
    ["F16", "F64", [3, 2]],
  ];
  it.each(cases)("%s -> %s from pieces of %j bytes equals torch", async (from, to, lengths) => {
    const input = from === "F32" || from === "F64" ? golden(`${from}.bin`) : patterns(from);
    // F16/BF16 -> F64 have no file of their own (see castGolden.test.ts): compared with the unsplit cast.
    const expected = existsSync(fixturePath("casts", `${from}-${to}.bin`)) ? golden(`${from}-${to}.bin`) : undefined;
    const n = input.byteLength / (dtypeInfo(from).bits / 8);
    const cast = castTensor(choppy(from, [n], input, lengths), to);
    expect(cast).toMatchObject({ name: "w", dtype: to, shape: [n], byteLength: (n * dtypeInfo(to).bits) / 8 });
    const bytes = await readTensorBytes(cast);
    if (expected !== undefined) expect(Buffer.compare(bytes, expected)).toBe(0);
    else expect(Buffer.compare(bytes, await readTensorBytes(castTensor(tensorFromBytes({ name: "w", dtype: from, shape: [n] }, input), to)))).toBe(0);
  });

  it("every output chunk holds chunkSize / element size elements but the last, for every chunk size", async () => {
    const input = golden("F32.bin").subarray(0, 4 * 1001);
    for (const chunkSize of [1, 2, 3, 4, 6, 64, 1000, 5000]) {
      for (const to of ["BF16", "F64", "F8_E4M3"] as const) {
        const size = dtypeInfo(to).bits / 8;
        const chunks = await collect(castTensor(choppy("F32", [1001], input, [3, 17]), to), { chunkSize });
        const lengths = chunks.map((c) => c.byteLength);
        expect(lengths.reduce((a, b) => a + b, 0)).toBe(1001 * size);
        if (chunkSize < size) {
          // Each element in slices of at most chunkSize bytes.
          expect(Math.max(...lengths)).toBeLessThanOrEqual(chunkSize);
          expect(lengths.length).toBe(1001 * Math.ceil(size / chunkSize));
        } else {
          const full = Math.floor(chunkSize / size) * size;
          expect(lengths.slice(0, -1).every((l) => l === full)).toBe(true);
          expect(lengths.at(-1)!).toBeLessThanOrEqual(full);
        }
      }
    }
  });

  it("asks the source for whole output buffers' worth of input, with reuse", async () => {
    const log = { asked: [] as ChunkOptions[], closed: 0 };
    await collect(castTensor(choppy("F32", [1000], new Uint8Array(4000), [4000], log), "BF16"), { chunkSize: 100 });
    // 100 bytes of BF16 = 50 elements = 200 bytes of F32; the source's chunks are consumed before the next is asked for.
    expect(log.asked).toEqual([{ chunkSize: 200, reuse: true }]);
    expect(log.closed).toBe(1);
  });
});

/** Every pattern of an 8- or 16-bit dtype, in order. */
function patterns(dtype: Dtype): Uint8Array {
  if (dtypeInfo(dtype).bits === 8) return Uint8Array.from({ length: 256 }, (_, i) => i);
  return new Uint8Array(Uint16Array.from({ length: 0x10000 }, (_, i) => i).buffer);
}

describe("the reuse contract of chunks()", () => {
  const input = golden("F32.bin").subarray(0, 4 * 3000);
  const expected = golden("F32-BF16.bin").subarray(0, 2 * 3000);

  it("with reuse, a chunk stays intact until the chunk two after it is asked for, and buffers are recycled", async () => {
    const chunks: Uint8Array[] = [];
    const copies: Uint8Array[] = [];
    const buffers = new Set<ArrayBufferLike>();
    for await (const chunk of castTensor(choppy("F32", [3000], input, [999]), "BF16").chunks({ chunkSize: 256, reuse: true })) {
      // The previous chunk must still hold what it held when it was handed over.
      if (chunks.length > 0) expect(chunks.at(-1)).toEqual(copies.at(-1));
      chunks.push(chunk);
      copies.push(chunk.slice());
      buffers.add(chunk.buffer);
    }
    expect(Buffer.compare(concat(copies), expected)).toBe(0);
    expect(chunks.length).toBeGreaterThan(20);
    expect(buffers.size).toBe(2);
  });

  it("without reuse, every chunk is fresh memory that stays valid", async () => {
    const chunks: Uint8Array[] = [];
    for await (const chunk of castTensor(choppy("F32", [3000], input, [999]), "BF16").chunks({ chunkSize: 256 })) chunks.push(chunk);
    expect(new Set(chunks.map((c) => c.buffer)).size).toBe(chunks.length);
    expect(Buffer.compare(concat(chunks), expected)).toBe(0);
  });
});

/** Little-endian bytes of 64-bit integers. */
const i64 = (values: bigint[]) => new Uint8Array(new BigInt64Array(values).buffer);

describe("integer narrowing refuses what does not fit", () => {
  it("names the tensor, the element (flat and in the shape) and its value, across a chunk boundary", async () => {
    const values = Array.from({ length: 24 }, (_, i) => BigInt(i - 12));
    values[13] = 128n; // I8 holds -128..127
    values[20] = -129n;
    const source = choppy("I64", [4, 6], i64(values), [5, 3]); // element 13 is split between chunks
    const cast = castTensor(source, "I8");
    await expect(readTensorBytes(cast)).rejects.toMatchObject({
      code: "CastOutOfRange",
      tensor: "w",
      message: expect.stringContaining("element 13 (at [2, 1]) is 128, and I8 holds -128 to 127"),
    });
  });

  it("refuses negative values cast to unsigned, and values past the signed range cast to signed", async () => {
    const cases: [Dtype, Uint8Array, Dtype, string][] = [
      ["I64", i64([0n, -1n]), "U64", "element 1 is -1, and U64 holds 0 to 18446744073709551615"],
      ["U64", new Uint8Array(new BigUint64Array([1n, 2n ** 63n]).buffer), "I64", "element 1 is 9223372036854775808"],
      ["I32", new Uint8Array(new Int32Array([5, -7]).buffer), "U8", "element 1 is -7, and U8 holds 0 to 255"],
      ["U32", new Uint8Array(new Uint32Array([2 ** 31]).buffer), "I32", "element 0 is 2147483648, and I32 holds -2147483648 to 2147483647"],
      ["I64", i64([-(2n ** 31n) - 1n]), "I32", "element 0 is -2147483649"],
      ["I64", i64([2n ** 32n]), "U32", "element 0 is 4294967296"],
      ["U16", new Uint8Array(new Uint16Array([1, 0, 2]).buffer), "BOOL", "element 2 is 2, and BOOL holds 0 and 1"],
      ["BOOL", new Uint8Array([1, 0, 2]), "U8", "element 2 is the byte 2, which is not a BOOL (0 or 1)"],
      ["I8", new Uint8Array([0x80]), "U16", "element 0 is -128"],
    ];
    for (const [from, bytes, to, message] of cases) {
      const n = bytes.byteLength / (dtypeInfo(from).bits / 8);
      const cast = castTensor(tensorFromBytes({ name: `${from}>${to}`, dtype: from, shape: [n] }, bytes), to);
      await expect(readTensorBytes(cast), `${from} -> ${to}`).rejects.toMatchObject({
        code: "CastOutOfRange",
        tensor: `${from}>${to}`,
        message: expect.stringContaining(message),
      });
    }
  });

  it("casts fitting values exactly, at the edges of each range", async () => {
    const values = [
      0n,
      1n,
      -1n,
      127n,
      -128n,
      255n,
      32767n,
      -32768n,
      65535n,
      2n ** 31n - 1n,
      -(2n ** 31n),
      2n ** 32n - 1n,
      2n ** 62n,
      -(2n ** 63n),
      2n ** 63n - 1n,
    ];
    for (const to of ["I8", "U8", "I16", "U16", "I32", "U32", "U64", "BOOL"] as const) {
      const ranges: Record<string, readonly [bigint, bigint]> = {
        I8: [-128n, 127n],
        U8: [0n, 255n],
        I16: [-32768n, 32767n],
        U16: [0n, 65535n],
        I32: [-(2n ** 31n), 2n ** 31n - 1n],
        U32: [0n, 2n ** 32n - 1n],
        U64: [0n, 2n ** 64n - 1n],
        BOOL: [0n, 1n],
      };
      const [lo, hi] = ranges[to]!;
      const fitting = values.filter((v) => v >= lo && v <= hi);
      const bytes = await readTensorBytes(castTensor(tensorFromBytes({ name: "x", dtype: "I64", shape: [fitting.length] }, i64(fitting)), to));
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      const size = dtypeInfo(to).bits / 8;
      const read = (i: number): bigint => {
        const at = i * size;
        if (size === 8) return view.getBigUint64(at, true);
        if (size === 4) return BigInt(to === "I32" ? view.getInt32(at, true) : view.getUint32(at, true));
        if (size === 2) return BigInt(to === "I16" ? view.getInt16(at, true) : view.getUint16(at, true));
        return BigInt(to === "I8" ? view.getInt8(at) : view.getUint8(at));
      };
      expect(
        fitting.map((_, i) => read(i)),
        to,
      ).toEqual(fitting);
    }
  });

  it("widens exactly: U32 to I64 and I8 to I64 keep the value, sign included", async () => {
    const u32 = await readTensorBytes(
      castTensor(tensorFromBytes({ name: "x", dtype: "U32", shape: [2] }, new Uint8Array(new Uint32Array([2 ** 32 - 1, 7]).buffer)), "I64"),
    );
    expect([...new BigInt64Array(u32.slice().buffer)]).toEqual([2n ** 32n - 1n, 7n]);
    const i8 = await readTensorBytes(castTensor(tensorFromBytes({ name: "x", dtype: "I8", shape: [3] }, new Uint8Array([0x80, 0xff, 0x7f])), "I64"));
    expect([...new BigInt64Array(i8.slice().buffer)]).toEqual([-128n, -1n, 127n]);
  });
});

describe("what castTensor refuses or leaves alone", () => {
  const f32 = tensorFromBytes({ name: "w", dtype: "F32", shape: [2] }, new Uint8Array(8));

  it("refuses float <-> integer and dtypes it does not cast, naming the tensor", () => {
    for (const [from, to] of [
      ["F32", "I32"],
      ["I64", "F64"],
      ["BOOL", "F16"],
      ["C64", "F32"],
      ["F32", "C64"],
      ["F4", "F16"],
      ["F6_E2M3", "F8_E4M3"],
    ] as const) {
      const entry = { ...f32, dtype: from as Dtype };
      expect(() => castTensor(entry, to), `${from} -> ${to}`).toThrow(expect.objectContaining({ code: "InvalidArgument", tensor: "w" }));
    }
  });

  it("returns the entry itself for its own dtype", () => expect(castTensor(f32, "F32")).toBe(f32));

  it("reads nothing before the consumer asks", () => {
    const untouchable: TensorEntry = {
      ...f32,
      chunks: () => {
        throw new Error("read too early");
      },
    };
    expect(castTensor(untouchable, "BF16")).toMatchObject({ dtype: "BF16", byteLength: 4 });
  });

  it("closes the source when the consumer stops early", async () => {
    const log = { asked: [] as ChunkOptions[], closed: 0 };
    const cast = castTensor(choppy("F32", [1000], pseudoRandomBytes(1, 4000), [400], log), "F16");
    for await (const _ of cast.chunks({ chunkSize: 64 })) break;
    expect(log.closed).toBe(1);
  });

  it("an empty tensor has no chunks", async () => {
    const empty = castTensor(tensorFromBytes({ name: "e", dtype: "F32", shape: [0, 3] }, new Uint8Array(0)), "BF16");
    expect(empty).toMatchObject({ byteLength: 0, shape: [0, 3] });
    expect(await collect(empty)).toEqual([]);
  });

  it("a source that delivers fewer bytes than it declares (a split element left over) is refused", async () => {
    const short: TensorEntry = { ...choppy("F32", [4], new Uint8Array(14), [5]), byteLength: 16 };
    expect(await errorCode(readTensorBytes(castTensor(short, "BF16")))).toBe("ByteLengthMismatch");
    const long: TensorEntry = { ...choppy("F32", [4], new Uint8Array(20), [6]), byteLength: 16 };
    expect(await errorCode(readTensorBytes(castTensor(long, "BF16")))).toBe("ByteLengthMismatch");
    // A declared length that is not whole elements (7 bytes of BF16 for shape [3]).
    const ragged: TensorEntry = { ...choppy("BF16", [3], new Uint8Array(7), [7]), byteLength: 7 };
    expect(await errorCode(readTensorBytes({ ...castTensor(ragged, "F8_E4M3"), byteLength: 3 }))).toBe("ByteLengthMismatch");
  });
});

describe("values written out by hand", () => {
  // Spot checks readable without the fixtures: torch's answers, as the issue and probes recorded them.
  const f32 = (bits: number[]) => tensorFromBytes({ name: "x", dtype: "F32", shape: [bits.length] }, new Uint8Array(new Uint32Array(bits).buffer));
  const u16 = async (entry: TensorEntry) => [...new Uint16Array((await readTensorBytes(entry)).slice().buffer)];
  const u8 = async (entry: TensorEntry) => [...(await readTensorBytes(entry))];

  it("F32 -> BF16: ties to even, overflow to inf, every NaN to 0x7FC0", async () => {
    expect(await u16(castTensor(f32([0x3f808000, 0x3f818000, 0x7f7fffff, 0xffc00001, 0x7f800001, 0x7f800800]), "BF16"))).toEqual([
      0x3f80, 0x3f82, 0x7f80, 0x7fc0, 0x7fc0, 0x7fc0,
    ]);
  });

  it("F32 -> F16: overflow to inf, NaN payload kept and quieted", async () => {
    // 65520 is the tie between 65504 and 65536: to even, inf. NaNs: sign, quiet bit, payload >> 13
    // (a payload below bit 13 is lost, the NaN stays a NaN).
    expect(await u16(castTensor(f32([0x477fefff, 0x477ff000, 0xff812345, 0x7f802000, 0x7f801fff]), "F16"))).toEqual([0x7bff, 0x7c00, 0xfe09, 0x7e01, 0x7e00]);
  });

  it("F32 -> F8_E4M3: saturates at 448 (464 ties down, 480 and inf saturate), NaN to 0x7F with the sign", async () => {
    // 448 = 0x43E00000, 464 = 0x43E80000, 470 = 0x43EB0000, inf, -inf, -NaN
    expect(await u8(castTensor(f32([0x43e00000, 0x43e80000, 0x43eb0000, 0x7f800000, 0xff800000, 0xffc00000]), "F8_E4M3"))).toEqual([
      0x7e, 0x7e, 0x7e, 0x7e, 0xfe, 0xff,
    ]);
  });

  it("F32 -> fnuz: overflow and NaN to 0x80, -0 to +0", async () => {
    // 240 = 0x43700000 (largest), 248 = 0x43780000 (ties up to 256: NaN), -0
    expect(await u8(castTensor(f32([0x43700000, 0x43780000, 0x80000000, 0x7fc00000]), "F8_E4M3FNUZ"))).toEqual([0x7f, 0x80, 0x00, 0x80]);
  });

  it("F64 -> F16 rounds twice, through float32, as torch does (numpy rounds once and gives 0x3C01)", async () => {
    const f64 = tensorFromBytes({ name: "x", dtype: "F64", shape: [2] }, new Uint8Array(new Float64Array([1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -11]).buffer));
    expect(await u16(castTensor(f64, "F16"))).toEqual([0x3c00, 0x3c00]);
  });

  it("F32 -> F8_E8M0: the sign dropped, 1.5 rounds up, 0 to 2^-127", async () => {
    // -1.0, 1.5, 1.25, 0
    expect(await u8(castTensor(f32([0xbf800000, 0x3fc00000, 0x3fa00000, 0]), "F8_E8M0"))).toEqual([0x7f, 0x80, 0x7f, 0x00]);
  });
});
