/**
 * Hostile and malformed flax files, built byte by byte and named after the attack: each gives one
 * StConvertError with the code of the broken rule, without allocating what the file did not earn.
 */
import { describe, expect, it } from "vitest";
import { type ByteSource, isStConvertError, readTensorBytes } from "@st-convert/core";
import { type FlaxReadOptions, MAX_DEPTH, readFlax } from "@st-convert/flax";
import { arr, bin, cat, ext, f32, map, ndarray, payload, str, uint } from "./msgpackBytes.js";

const ok = cat(map(1), str("w"), ndarray([2], "float32", f32(1, 2)));
const chunkDict = (shape: Uint8Array, chunks: Uint8Array, marker = cat(str("__msgpack_chunked_array__"), [0xc3])) =>
  cat(map(1), str("w"), map(3), marker, str("shape"), shape, str("chunks"), chunks);
const dims = (...values: number[]) => cat(map(values.length), ...values.flatMap((d, i) => [str(String(i)), uint(d)]));
const pieces = (...arrays: Uint8Array[]) => cat(map(arrays.length), ...arrays.flatMap((a, i) => [str(String(i)), a]));
const nest = (depth: number, kind: "map" | "array") => cat(...Array.from({ length: depth - 1 }, () => (kind === "map" ? cat(map(1), str("a")) : arr(1))), kind === "map" ? map(0) : arr(0));

const cases: [attack: string, bytes: Uint8Array, code: string, options?: FlaxReadOptions][] = [
  ["empty file", new Uint8Array(0), "UnexpectedEof"],
  ["truncated map16 count", cat([0xde, 0x00]), "UnexpectedEof"],
  ["truncated inside a key", ok.subarray(0, 2), "UnexpectedEof"],
  ["truncated inside the array bytes", ok.subarray(0, ok.byteLength - 1), "UnexpectedEof"],
  ["a trailing byte after the top-level map", cat(ok, [0x00]), "ExtraData"],
  ["a second top-level value", cat(ok, ok), "ExtraData"],
  ["the reserved byte 0xc1 as a value", cat(map(1), str("a"), [0xc1]), "FormatError"],
  ["the reserved byte 0xc1 as a key", cat(map(1), [0xc1], [0x00]), "FormatError"],
  ["maps nested 1025 deep", nest(MAX_DEPTH + 1, "map"), "LimitExceeded"],
  ["arrays nested 1025 deep", nest(MAX_DEPTH + 1, "array"), "LimitExceeded"],
  ["nesting past an overridden depth", nest(4, "map"), "LimitExceeded", { maxDepth: 3 }],
  ["map32 declaring 2^32 - 1 entries in a 10-byte file", cat([0xdf, 0xff, 0xff, 0xff, 0xff], str("a"), [1, 2, 3]), "UnexpectedEof"],
  ["array32 declaring 2^32 - 1 items", cat(map(1), str("a"), [0xdd, 0xff, 0xff, 0xff, 0xff], [0]), "UnexpectedEof"],
  ["str32 key declaring 4 GiB", cat(map(1), [0xdb, 0xff, 0xff, 0xff, 0xff], "00"), "UnexpectedEof"],
  ["a 1 MiB key, past the name limit", cat(map(1), [0xdb, 0x00, 0x10, 0x00, 0x00], new Uint8Array(2 ** 20).fill(0x61), [0x01]), "LimitExceeded"],
  ["str32 leaf declaring 4 GiB", cat(map(1), str("a"), [0xdb, 0xff, 0xff, 0xff, 0xff], "00"), "UnexpectedEof"],
  ["bin32 leaf declaring 4 GiB", cat(map(1), str("a"), bin(0xffffffff), "00"), "UnexpectedEof"],
  ["ext32 declaring 4 GiB past the end", cat(map(1), str("a"), ext(1, 0xfffffff0), payload([1], "uint8", [7])), "UnexpectedEof"],
  ["ndarray bin declaring more than its ext holds", cat(map(1), str("a"), ext(1, 20), arr(3), arr(1), [1], str("uint8"), bin(1000), new Uint8Array(1000)), "InvalidArray"],
  ["bytes after the array data inside the payload", cat(map(1), str("a"), ext(1, 17), payload([1], "uint8", [7]), [0, 0]), "InvalidArray"],
  ["payload bytes not matching shape × itemsize", cat(map(1), str("w"), ndarray([2, 2], "float32", f32(1, 2, 3))), "ByteLengthMismatch"],
  ["payload bytes not a multiple of itemsize", cat(map(1), str("w"), ndarray([1], "float32", [0, 0, 0])), "ByteLengthMismatch"],
  ["a numpy scalar (ext 3) with too few bytes", cat(map(1), str("w"), ndarray([], "int64", [1, 2, 3, 4], 3)), "ByteLengthMismatch"],
  ["an unknown dtype name", cat(map(1), str("w"), ndarray([1], "float33", [0, 0, 0, 0])), "UnknownDtype"],
  ["the str64 name flax writes for <U2 arrays", cat(map(1), str("w"), ndarray([1], "str64", new Uint8Array(8))), "UnknownDtype"],
  ["complex128, which safetensors cannot hold", cat(map(1), str("w"), ndarray([1], "complex128", new Uint8Array(16))), "UnknownDtype"],
  ["int4, kept one value per byte by ml_dtypes", cat(map(1), str("w"), ndarray([2], "int4", [1, 2])), "UnknownDtype"],
  ["a numpy spelling flax never writes ('>i4')", cat(map(1), str("w"), ndarray([1], ">i4", [0, 0, 0, 1])), "UnknownDtype"],
  ["a 1000-byte dtype name", cat(map(1), str("w"), ext(1, 1011), arr(3), arr(0), [0xda, 0x03, 0xe8], new Uint8Array(1000).fill(0x61), bin(1), [0]), "UnknownDtype"],
  ["a negative dimension", cat(map(1), str("w"), ext(1, 15), arr(3), arr(1), [0xff], str("uint8"), bin(1), [0]), "InvalidArray"],
  ["65 dimensions", cat(map(1), str("w"), ndarray(new Array(65).fill(1), "uint8", [0])), "InvalidArray"],
  ["a dimension past 2^53 (beside a zero)", cat(map(1), str("w"), ext(1, 23), arr(3), arr(2), [0], [0xcf, 0, 0x40, 0, 0, 0, 0, 0, 0], str("uint8"), bin(0)), "Unsupported"],
  ["a payload that is not an array of three", cat(map(1), str("w"), ext(1, 5), arr(2), arr(0), str("i8")), "InvalidArray"],
  ["an empty ext 1 payload", cat(map(1), str("w"), ext(1, 0)), "InvalidArray"],
  ["a one-byte ext 1 payload (fixext1)", cat(map(1), str("w"), [0xd4, 0x01, 0x93]), "InvalidArray"],
  ["a dtype name that is an int", cat(map(1), str("w"), ext(1, 9), arr(3), arr(0), [5], bin(1), [0]), "InvalidArray"],
  ["array bytes as a str, not a bin", cat(map(1), str("w"), ext(1, 11), arr(3), arr(1), [1], str("uint8"), [0xa1, 0x41]), "InvalidArray"],
  ["a shape that is a map", cat(map(1), str("w"), ext(1, 14), arr(3), map(0), str("uint8"), bin(1), [0]), "InvalidArray"],
  ["chunks that do not add up to the shape", chunkDict(dims(2, 3), pieces(ndarray([4], "float32", f32(1, 2, 3, 4)))), "InvalidChunkedArray"],
  ["chunks with more elements than the shape", chunkDict(dims(1), pieces(ndarray([2], "float32", f32(1, 2)))), "InvalidChunkedArray"],
  ["a chunk dict without chunks", cat(map(1), str("w"), map(2), str("__msgpack_chunked_array__"), [0xc3], str("shape"), dims(1)), "InvalidChunkedArray"],
  ["a chunk dict without shape", cat(map(1), str("w"), map(2), str("__msgpack_chunked_array__"), [0xc3], str("chunks"), pieces(ndarray([1], "uint8", [1]))), "InvalidChunkedArray"],
  ["a chunk dict whose shape is a list", chunkDict(cat(arr(1), [1]), pieces(ndarray([1], "uint8", [1]))), "InvalidChunkedArray"],
  ["a chunk dict with a negative dimension", chunkDict(cat(map(1), str("0"), [0xff]), pieces(ndarray([1], "uint8", [1]))), "InvalidChunkedArray"],
  ["chunk keys 0 and 2, not 0 and 1", chunkDict(dims(2), cat(map(2), str("0"), ndarray([1], "uint8", [1]), str("2"), ndarray([1], "uint8", [2]))), "InvalidChunkedArray"],
  ["chunks with integer keys", chunkDict(dims(1), cat(map(1), [0], ndarray([1], "uint8", [1]))), "InvalidChunkedArray"],
  ["chunks of two dtypes (the reference promotes, we refuse)", chunkDict(dims(5), pieces(ndarray([1], "uint8", [1]), ndarray([1], "float32", f32(2)))), "InvalidChunkedArray"],
  ["a 2-d chunk", chunkDict(dims(2, 2), pieces(ndarray([2, 2], "uint8", [1, 2, 3, 4]))), "InvalidChunkedArray"],
  ["a chunk that is not an array", chunkDict(dims(1), cat(map(1), str("0"), [0x01])), "InvalidChunkedArray"],
  ["a chunk dict with no chunks", chunkDict(dims(0), map(0)), "InvalidChunkedArray"],
  ["an integer key above an array", cat(map(1), [0x05], map(1), str("w"), ndarray([1], "uint8", [1])), "InvalidName"],
  ["a None key holding an array", cat(map(1), [0xc0], ndarray([1], "uint8", [1])), "InvalidName"],
  ["a dict as a key (unhashable in Python)", cat(map(1), map(0), [0x01]), "FormatError"],
  ["a list as a key", cat(map(1), arr(0), [0x01]), "FormatError"],
  ["invalid UTF-8 in a key", cat(map(1), [0xa2, 0xc3, 0x28], [0x01]), "FormatError"],
  ["invalid UTF-8 in a string leaf", cat(map(1), str("s"), [0xa2, 0xff, 0xfe]), "FormatError"],
  ["a repeated key (the reference keeps the last, we refuse)", cat(map(2), str("w"), ndarray([1], "uint8", [1]), str("w"), ndarray([1], "uint8", [2])), "DuplicateKey"],
  ["a key holding the separator beside the same path nested", cat(map(2), str("a.b"), ndarray([1], "uint8", [1]), str("a"), map(1), str("b"), ndarray([1], "uint8", [2])), "DuplicateKey"],
  ["a name past an overridden length limit", cat(map(1), str("x".repeat(20)), ndarray([1], "uint8", [1])), "LimitExceeded", { maxNameLength: 10 }],
  ["more arrays than an overridden limit", cat(map(3), ...["a", "b", "c"].flatMap((k) => [str(k), ndarray([1], "uint8", [1])])), "LimitExceeded", { maxArrays: 2 }],
  ["an empty separator", ok, "InvalidArgument", { sep: "" }],
];

/** A source that records every read, to check that nothing big is requested. */
function recording(bytes: Uint8Array): { source: ByteSource; reads: [number, number][] } {
  const reads: [number, number][] = [];
  const source: ByteSource = {
    size: bytes.byteLength,
    async read(offset, length) {
      reads.push([offset, length]);
      if (offset + length > bytes.byteLength) throw new Error(`read past the end: ${offset}+${length}`);
      return bytes.subarray(offset, offset + length);
    },
  };
  return { source, reads };
}

async function outcome(bytes: Uint8Array | ByteSource, options?: FlaxReadOptions): Promise<string> {
  try {
    const file = await readFlax(bytes, options);
    for (const t of file.tensors) await readTensorBytes(t);
    return "ok";
  } catch (error) {
    if (!isStConvertError(error)) throw error;
    return error.code;
  }
}

describe("hostile flax files", () => {
  it.each(cases.map(([attack, bytes, code, options]) => ({ attack, bytes, code, options })))("$attack → $code", async ({ bytes, code, options }) => {
    const { source, reads } = recording(bytes);
    expect(await outcome(source, options)).toBe(code);
    // Nothing past the 64 KiB window is ever requested, whatever the file declares.
    for (const [, length] of reads) expect(length).toBeLessThanOrEqual(64 * 1024);
  });

  it("accepts nesting exactly 1024 deep, as msgpack-python does", async () => {
    expect(await outcome(nest(MAX_DEPTH, "map"))).toBe("ok");
    expect(await outcome(nest(MAX_DEPTH, "array"))).toBe("ok");
  });

  it("names the file, the tensor and the rule in one message", async () => {
    const bytes = cat(map(1), str("layer"), map(1), str("w"), ndarray([2, 2], "float32", f32(1, 2, 3)));
    await expect(readFlax(bytes)).rejects.toThrow(/tensor "layer\.w": float32 shape \[2, 2\] needs 16 bytes, the payload holds 12/);
    const named = { size: bytes.byteLength, name: "model.msgpack", read: async (o: number, n: number) => bytes.subarray(o, o + n) };
    await expect(readFlax(named)).rejects.toThrow(/^model\.msgpack: tensor "layer\.w": /);
  });

  it("refuses a declared length past the end at once, not after a long loop", async () => {
    const start = performance.now();
    expect(await outcome(cat([0xdf, 0xff, 0xff, 0xff, 0xff]))).toBe("UnexpectedEof");
    expect(performance.now() - start).toBeLessThan(1000);
  });
});

describe("unusual but valid input, accepted like the reference", () => {
  const read = async (bytes: Uint8Array, options: FlaxReadOptions = {}) => {
    const warnings: string[] = [];
    const file = await readFlax(bytes, { ...options, onWarning: (m) => warnings.push(m) });
    return { file, warnings, names: file.tensors.map((t) => t.name) };
  };

  it("fixext 1/2/4/8 values of unknown ext types and the timestamp ext are skipped with a notice", async () => {
    const bytes = cat(map(5), str("a"), [0xd4, 0x07, 0x00], str("b"), [0xd5, 0x07, 0, 0], str("c"), [0xd6, 0xff, 0, 0, 0, 0], str("d"), [0xd7, 0x07, 0, 0, 0, 0, 0, 0, 0, 0], str("w"), ndarray([], "uint8", [9]));
    const { names, warnings } = await read(bytes);
    expect(names).toEqual(["w"]);
    expect(warnings).toEqual([
      'skipped "a": an ext value of type 7, which flax does not write is not an array',
      'skipped "b": an ext value of type 7, which flax does not write is not an array',
      'skipped "c": an ext value of type -1, which flax does not write is not an array',
      'skipped "d": an ext value of type 7, which flax does not write is not an array',
    ]);
  });

  it("an ext 1 in the fixext16 form and in the ext8 form read alike", async () => {
    const p = cat(arr(3), arr(0), str("float32"), [0xc4, 0x04], f32(2.5)); // 1 + 1 + 8 + 2 + 4 = 16 bytes
    expect(p.byteLength).toBe(16);
    for (const bytes of [cat(map(1), str("x"), [0xd8, 0x01], p), cat(map(1), str("x"), [0xc7, 0x10, 0x01], p)]) {
      const { file } = await read(bytes);
      expect(file.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual([["x", "F32", []]]);
    }
  });

  it("a dtype name given as bin, and the array header in array16 form (msgpack-python accepts both)", async () => {
    const bytes = cat(map(1), str("x"), ext(1, 15), [0xdc, 0, 3], arr(1), [1], [0xc4, 0x05], Buffer.from("uint8"), [0xc4, 0x01, 0x2a]);
    const { file } = await read(bytes);
    expect(file.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual([["x", "U8", [1]]]);
    expect([...(await readTensorBytes(file.tensors[0]!))]).toEqual([0x2a]);
  });

  it("a chunk marker after shape and chunks still makes one array; its value does not matter", async () => {
    const bytes = cat(map(1), str("w"), map(3), str("shape"), dims(3), str("chunks"), pieces(ndarray([2], "uint8", [1, 2]), ndarray([1], "uint8", [3])), str("__msgpack_chunked_array__"), [0xc2]);
    const { file, warnings } = await read(bytes);
    expect(file.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual([["w", "U8", [3]]]);
    expect([...(await readTensorBytes(file.tensors[0]!))]).toEqual([1, 2, 3]);
    expect(warnings).toEqual([]);
  });

  it("a chunk dict inside a list is left as a dict, as flax leaves it", async () => {
    const inner = cat(map(3), str("__msgpack_chunked_array__"), [0xc3], str("shape"), dims(1), str("chunks"), pieces(ndarray([1], "uint8", [5])));
    const { names } = await read(cat(map(1), str("l"), arr(1), inner));
    expect(names).toEqual(["l.0.chunks.0"]);
  });

  it("integer and None keys are fine where no array needs them as a name", async () => {
    const { names, warnings } = await read(cat(map(2), [0x05], [0x01], str("w"), ndarray([1], "uint8", [1])));
    expect(names).toEqual(["w"]);
    expect(warnings).toEqual(['skipped "[the integer key 5]": a Python int (1) is not an array']);
  });

  it("reports at most maxWarnings skipped leaves one by one, then a count", async () => {
    const bytes = cat(map(5), ...["a", "b", "c", "d", "e"].flatMap((k) => [str(k), [0xc0]]));
    const { warnings, file } = await read(bytes, { maxWarnings: 2 });
    expect(warnings).toEqual(['skipped "a": None is not an array', 'skipped "b": None is not an array', "skipped 3 more leaves that are not arrays (5 in all)"]);
    expect(file.skipped).toBe(5);
  });

  it("warns once when a key holds the separator", async () => {
    const { names, warnings } = await read(cat(map(2), str("a.b"), ndarray([1], "uint8", [1]), str("c.d"), ndarray([1], "uint8", [1])));
    expect(names).toEqual(["a.b", "c.d"]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/"a\.b" has a key that holds the separator/);
    expect((await read(cat(map(1), str("a.b"), ndarray([1], "uint8", [1])), { sep: "/" })).warnings).toEqual([]);
  });

  it("an empty dict, an empty list and an empty file-level map hold no tensors", async () => {
    expect((await read(cat(map(2), str("d"), map(0), str("l"), arr(0)))).names).toEqual([]);
    expect((await read(cat(map(0)))).names).toEqual([]);
  });
});
