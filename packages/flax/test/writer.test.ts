/**
 * The writer: names split into nested dicts, clashes refused, chunking as flax chunks, bytes
 * streamed in order, and what it writes reads back as the same tensors.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type ByteSink, DTYPES, type Dtype, type TensorEntry, readTensorBytes, tensorByteLength, tensorFromBytes } from "@st-convert/core";
import { FLAX_TREE_KEY, type FlaxWriteOptions, MAX_DEPTH, readFlax, serializeFlax, writeFlax } from "@st-convert/flax";
import { errorCode as code, fuzzRuns, fuzzSeed, toHex } from "@st-convert/testing";
import { arr, cat, map, str } from "./msgpackBytes.js";

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

  it("writers-rank-past-64: refuses a tensor of 65 dimensions before the first byte, naming it; writes 64", async () => {
    const written: number[] = [];
    const sink: ByteSink = { write: async (chunk) => void written.push(chunk.byteLength), close: async () => {}, abort: async () => {} };
    const ones = (n: number) => tensorFromBytes({ name: "deep", dtype: "U8", shape: new Array<number>(n).fill(1) }, Uint8Array.of(7));
    await expect(writeFlax({ metadata: null, tensors: [u8("a", 1), ones(65)] }, sink)).rejects.toMatchObject({ code: "Unsupported", tensor: "deep" });
    expect(written).toEqual([]);
    const back = await readFlax(await write([ones(64)]));
    expect(back.tensors[0]!.shape).toHaveLength(64);
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

describe("the flax.tree record", () => {
  const record = (tree: unknown, sep = ".") => ({ [FLAX_TREE_KEY]: JSON.stringify({ version: 1, sep, tree }) });
  const withRecord = (tree: unknown, tensors: TensorEntry[], options?: FlaxWriteOptions & { sep?: string }) =>
    serializeFlax({ metadata: record(tree), tensors }, options);
  const i32 = (name: string, value: number) => tensorFromBytes({ name, dtype: "I32", shape: [] }, new Uint8Array(new Int32Array([value]).buffer));
  const u8ext = (byte: number) => cat("c7 0c 01 93 91 01 a5 75696e7438 c4 01", [byte]);

  it("puts every recorded value back in its place and order, with msgpack-python's encodings", async () => {
    const tree = [
      "step",
      { i: 3 },
      "params",
      ["w", 1],
      "opt",
      ["0", ["count", 3], "1", []],
      "l",
      {
        l: [
          null,
          true,
          { f: 1.5 },
          "s",
          { b: "0001" },
          { c: [1, "8000000000000000"] },
          { x: [7, "ff"] },
          { i: "18446744073709551615" },
          { i: -129 },
          { l: [] },
        ],
      },
    ];
    const bytes = await withRecord(tree, [i32("opt.0.count", 7), u8("params.w", 1)]);
    const expected = cat(
      map(4),
      str("step"),
      [0x03],
      str("params"),
      map(1),
      str("w"),
      u8ext(1),
      str("opt"),
      map(2),
      str("0"),
      map(1),
      str("count"),
      "c7 0e 03 93 90 a5 696e743332 c4 04 07000000", // ext 3: a numpy scalar, as flax writes np.int32(7)
      str("1"),
      map(0),
      str("l"),
      "9a c0 c3 cb 3ff8000000000000", // fixarray 10, None, True, 1.5
      str("s"),
      "c4 02 0001",
      "c7 13 02 92 cb 3ff0000000000000 cb 8000000000000000", // complex(1, -0.0): flax's ext 2
      "d4 07 ff", // ExtType(7, b"\xff"): fixext 1
      "cf ffffffffffffffff d1 ff7f 90", // 2^64 - 1, -129, []
    );
    expect(toHex(bytes)).toBe(toHex(expected));
  });

  it("places tensors the record does not name by their names, after the recorded keys, in code-point order", async () => {
    const bytes = await withRecord(["z", null, "b", ["y", 1]], [u8("b.x", 2), u8("a", 3), u8("b.y", 1), u8("\uffff", 5), u8("😀", 4)]);
    const expected = cat(
      map(5),
      str("z"),
      [0xc0],
      str("b"),
      map(2),
      str("y"),
      u8ext(1),
      str("x"),
      u8ext(2),
      str("a"),
      u8ext(3),
      str("\uffff"),
      u8ext(5),
      str("😀"),
      u8ext(4),
    );
    expect(toHex(bytes)).toBe(toHex(expected));
  });

  it("leaves out the recorded arrays no tensor fills, with a warning", async () => {
    const warnings: string[] = [];
    const bytes = await withRecord(["a", 1, "b", ["c", 1, "d", 1], "l", { l: [1, 1, null] }], [u8("b.d", 1), u8("l.1", 2)], {
      onWarning: (m) => warnings.push(m),
    });
    expect(toHex(bytes)).toBe(toHex(cat(map(2), str("b"), map(1), str("d"), u8ext(1), str("l"), arr(2), u8ext(2), [0xc0])));
    expect(warnings).toEqual(['3 arrays of the recorded tree (flax.tree) are not among the tensors and left out: "l.0", "b.c", "a"']);
    // A dict that held only arrays left out goes too; one recorded empty stays.
    const emptied = await withRecord(["params", ["w", 1, "b", ["c", 1]], "step", { i: 1 }, "e", []], []);
    expect(toHex(emptied)).toBe(toHex(cat(map(2), str("step"), [0x01], str("e"), map(0))));
  });

  it("matches tensors to recorded places by the record's separator, and splits the rest on the writer's", async () => {
    const bytes = await serializeFlax({ metadata: record(["a.b", ["c", 1]], "/"), tensors: [u8("a.b/c", 1), u8("x.y", 2)] });
    expect(toHex(bytes)).toBe(toHex(cat(map(2), str("a.b"), map(1), str("c"), u8ext(1), str("x"), map(1), str("y"), u8ext(2))));
  });

  it("writes a kept Python number back as the number, and a tensor of another dtype there as an array", async () => {
    const i64 = tensorFromBytes({ name: "step", dtype: "I64", shape: [] }, new Uint8Array(new BigInt64Array([-5n]).buffer));
    const f64 = tensorFromBytes({ name: "lr", dtype: "F64", shape: [] }, new Uint8Array(new Float64Array([0.5]).buffer));
    const flag = tensorFromBytes({ name: "on", dtype: "BOOL", shape: [] }, Uint8Array.of(1));
    const tree = ["step", { s: "int" }, "lr", { s: "float" }, "on", { s: "bool" }, "big", { s: "int" }];
    const big = tensorFromBytes({ name: "big", dtype: "U64", shape: [] }, new Uint8Array(new BigUint64Array([2n ** 64n - 1n]).buffer));
    expect(toHex(await withRecord(tree, [i64, f64, flag, big]))).toBe(
      toHex(cat(map(4), str("step"), [0xfb], str("lr"), "cb 3fe0000000000000", str("on"), [0xc3], str("big"), "cf ffffffffffffffff")),
    );
    const cast = tensorFromBytes({ name: "step", dtype: "I32", shape: [] }, Uint8Array.of(2, 0, 0, 0));
    expect(toHex(await withRecord(["step", { s: "int" }], [cast]))).toBe(toHex(cat(map(1), str("step"), "c7 0e 01 93 90 a5 696e743332 c4 04 02000000")));
  });

  it("chunks an array in the recorded chunk size, and a top-level array as a bare array", async () => {
    const five = tensorFromBytes({ name: "w", dtype: "U8", shape: [5] }, Uint8Array.of(1, 2, 3, 4, 5));
    const chunk = (...bytes: number[]) => cat([0xc7, 11 + bytes.length, 0x01, 0x93, 0x91, bytes.length], str("uint8"), [0xc4, bytes.length], bytes);
    const chunked = cat(
      map(1),
      str("w"),
      map(3),
      str("__msgpack_chunked_array__"),
      [0xc3],
      str("shape"),
      map(1),
      str("0"),
      [5],
      str("chunks"),
      map(3),
      str("0"),
      chunk(1, 2),
      str("1"),
      chunk(3, 4),
      str("2"),
      chunk(5),
    );
    expect(toHex(await withRecord(["w", { k: 2 }], [five]))).toBe(toHex(chunked));
    const top = await withRecord(1, [tensorFromBytes({ name: "anything", dtype: "U8", shape: [1] }, Uint8Array.of(9))]);
    expect(toHex(top)).toBe(toHex(u8ext(9)));
    expect(await code(withRecord(1, [u8("a", 1), u8("b", 2)]))).toBe("InvalidArgument");
    expect(await code(withRecord(1, []))).toBe("InvalidArgument");
  });

  it.each([
    ["a list has no such item", { l: [1] }, "l.1"],
    ["a name runs into a list by a key that is not an index", ["l", { l: [["w", 1]] }], "l.x.w"],
    ["a recorded value is where a dict is needed", ["step", { i: 1 }], "step.x"],
    ["a recorded value is where the array goes", ["step", { i: 1 }], "step"],
    ["a recorded top-level value", null, "w"],
    ["a recorded dict is where the array goes", ["d", []], "d"],
  ])("refuses a tensor when %s", async (_case, tree, name) => {
    expect(await code(withRecord(tree, [u8(name, 1)]))).toBe("InvalidName");
  });

  it.each([
    ["not JSON", "{"],
    ["a JSON array", "[]"],
    ["another version", '{"version":2,"sep":".","tree":[]}'],
    ["an empty separator", '{"version":1,"sep":"","tree":[]}'],
    ["no tree", '{"version":1,"sep":"."}'],
    ["a dict with a key and no value", ["a"]],
    ["an array slot 2", ["a", 2]],
    ["a chunk size of 0", ["a", { k: 0 }]],
    ["a kept scalar of an unknown kind", ["a", { s: "complex" }]],
    ["an int that is a float", ["a", { i: 1.5 }]],
    ["an int past 2^64 - 1", ["a", { i: "18446744073709551616" }]],
    ["an int below -2^63", ["a", { i: "-9223372036854775809" }]],
    ["a float that is not hex", ["a", { f: "xyz" }]],
    ["bytes of an odd length", ["a", { b: "abc" }]],
    ["an ext of type -2", ["a", { x: [-2, ""] }]],
    ["a timestamp of 5 bytes", ["a", { x: [-1, "0000000000"] }]],
    ["a timestamp with 10^9 nanoseconds", ["a", { x: [-1, "ee6b28000000000000000005"] }]],
    ["an ext 1 as a plain value", ["a", { x: [1, "00"] }]],
    ["a repeated key", ["a", null, "a", null]],
    ["keys 1 and True, one key in Python", [{ i: 1 }, null, true, null]],
    ["the chunk marker as a key in a dict", ["__msgpack_chunked_array__", true]],
    ["a lone surrogate in a key", ["\ud800", null]],
    ["a lone surrogate in a string", ["a", "\udc00"]],
    ["an array under an int key", [{ i: 1 }, 1]],
    ["two arrays of one name", ["a.b", 1, "a", ["b", 1]]],
    ["an unknown form", ["a", { z: 1 }]],
    ["a numpy scalar key (flax-ext-map-keys: refused when read)", [{ x: [3, "00"] }, null]],
    ["an ndarray key", [{ x: [1, "00"] }, null]],
    ["keys 1 and complex(1, 0), one key in Python", [{ i: 1 }, null, { c: [1, 0] }, null]],
    ["one time as two timestamp keys, one key in Python", [{ x: [-1, "00000009"] }, null, { x: [-1, "0000000000000009"] }, null]],
    ["an array under a timestamp key", [{ x: [-1, "00000009"] }, 1]],
    ["a list that is not an array", ["a", { l: 1 }]],
    ["nesting deeper than flax reads", JSON.parse(`${'["a",'.repeat(MAX_DEPTH)}[]${"]".repeat(MAX_DEPTH)}`)],
  ])("refuses a record st-convert does not write: %s", async (_case, tree) => {
    const metadata = typeof tree === "string" ? { [FLAX_TREE_KEY]: tree } : record(tree);
    expect(await code(serializeFlax({ metadata, tensors: [] }))).toBe("InvalidMetadata");
  });

  it("refuses a record past its size limit, and brackets nested past any tree flax reads, before parsing either", async () => {
    const huge = { [FLAX_TREE_KEY]: `{"version":1,"sep":".","tree":"${"x".repeat(32 * 1024 * 1024)}"}` };
    expect(await code(serializeFlax({ metadata: huge, tensors: [] }))).toBe("LimitExceeded");
    // 100,000 brackets deep: refused by counting, not by building it.
    const deep = { [FLAX_TREE_KEY]: `{"version":1,"sep":".","tree":${"[".repeat(100_000)}${"]".repeat(100_000)}}` };
    await expect(serializeFlax({ metadata: deep, tensors: [] })).rejects.toThrow(/nests deeper than 1024/);
  });

  it("takes nesting exactly as deep as flax reads", async () => {
    const deep = JSON.parse(`${'["a",'.repeat(MAX_DEPTH - 1)}[]${"]".repeat(MAX_DEPTH - 1)}`);
    expect(await code(withRecord(deep, []))).toBe("ok");
  });

  it("consumes the record silently, and drops other metadata with a warning naming only it", async () => {
    const warnings: string[] = [];
    await serializeFlax({ metadata: record(["a", null]), tensors: [] }, { onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual([]);
    await serializeFlax({ metadata: { ...record(["a", null]), format: "flax" }, tensors: [] }, { onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual([expect.stringMatching(/^metadata dropped \(format\): /)]);
  });
});

describe("tensors flax could not read back", () => {
  it("refuses up front, by name, an array numpy finds too big (U8 [0, 2^32, 2^32])", async () => {
    let written = 0;
    const sink: ByteSink = {
      async write(chunk) {
        written += chunk.byteLength;
      },
      async close() {},
      async abort() {},
    };
    const empty = tensorFromBytes({ name: "empty", dtype: "U8", shape: [0, 2 ** 32, 2 ** 32] }, new Uint8Array(0));
    await expect(writeFlax({ metadata: null, tensors: [u8("first", 1), empty] }, sink)).rejects.toMatchObject({ code: "Unsupported", tensor: "empty" });
    await expect(writeFlax({ metadata: null, tensors: [empty] }, sink)).rejects.toThrow(/array is too big/);
    expect(written).toBe(0);
    // 2^62 bytes of non-zero dimensions is what numpy still makes.
    const fine = tensorFromBytes({ name: "fine", dtype: "F32", shape: [0, 2 ** 31, 2 ** 29] }, new Uint8Array(0));
    expect(await code(write([fine]))).toBe("ok");
  });

  it("refuses a name with the chunk marker as a key of a dict, which flax would unchunk", async () => {
    expect(await code(write([u8("w.__msgpack_chunked_array__", 1)]))).toBe("InvalidName");
    expect(await code(write([u8("__msgpack_chunked_array__", 1)]))).toBe("InvalidName");
  });
});
