/**
 * Hostile and malformed flax files, built byte by byte and named after the attack: each gives one
 * StConvertError with the code of the broken rule, without allocating what the file did not earn.
 */
import { describe, expect, it } from "vitest";
import { type ByteSource, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { FLAX_TREE_KEY, type FlaxReadOptions, MAX_DEPTH, readFlax, serializeFlax } from "@st-convert/flax";
import { dims, hostileCases as cases, nest, pieces } from "./hostileCases.js";
import { arr, cat, ext, f32, map, ndarray, str } from "./msgpackBytes.js";
import { errorCode, recordHostileCases, toHex } from "@st-convert/testing";

// Cases that need non-default options test an overridden limit, not the command's behaviour.
recordHostileCases(
  "flax",
  ".msgpack",
  cases.filter(([, , , , options]) => options === undefined),
);

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

const outcome = (bytes: Uint8Array | ByteSource, options?: FlaxReadOptions): Promise<string> =>
  errorCode(
    (async () => {
      const file = await readFlax(bytes, options);
      for (const t of file.tensors) await readTensorBytes(t);
    })(),
  );

describe("hostile flax files", () => {
  it.each(cases.map(([attack, bytes, code, , options]) => ({ attack, bytes, code, options })))("$attack → $code", async ({ bytes, code, options }) => {
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

  it("says why: a shape that is not a list (flax-shape-not-a-list), a numpy scalar key (flax-ext-map-keys)", async () => {
    const bareInt = cat(map(1), str("w"), [0xc7, 0x0c, 0x01, 0x93, 0x02], str("uint8"), [0xc4, 0x02, 1, 2]);
    await expect(readFlax(bareInt)).rejects.toThrow(/the shape is a bare integer .*, not a list of dimensions as flax writes it/);
    await expect(readFlax(cat(map(1), ndarray([], "int16", [1, 0], 3), [0x01]))).rejects.toThrow(/is a numpy scalar \(ext 3\).*cannot tell which keys repeat/);
  });

  it("refuses a declared length past the end at once, not after a long loop", async () => {
    const start = performance.now();
    expect(await outcome(cat([0xdf, 0xff, 0xff, 0xff, 0xff]))).toBe("UnexpectedEof");
    expect(performance.now() - start).toBeLessThan(1000);
  });
});

const read = async (bytes: Uint8Array, options: FlaxReadOptions = {}) => {
  const warnings: string[] = [];
  const file = await readFlax(bytes, { ...options, onWarning: (m) => warnings.push(m) });
  return { file, warnings, names: file.tensors.map((t) => t.name) };
};

/** The tree the file's flax.tree record holds. */
const tree = (file: { metadata: Readonly<Record<string, string>> | null }): unknown => JSON.parse(file.metadata![FLAX_TREE_KEY]!).tree;

describe("unusual but valid input, accepted like the reference", () => {
  it("fixext 1/2/4/8 values of unknown ext types and a timestamp ext are recorded in the tree, with no notice", async () => {
    const bytes = cat(
      map(5),
      str("a"),
      [0xd4, 0x07, 0x00],
      str("b"),
      [0xd5, 0x07, 0, 0],
      str("c"),
      [0xd6, 0xff, 0, 0, 0, 0],
      str("d"),
      [0xd7, 0x07, 0, 0, 0, 0, 0, 0, 0, 0],
      str("w"),
      ndarray([], "uint8", [9]),
    );
    const { file, names, warnings } = await read(bytes);
    expect(names).toEqual(["w"]);
    expect(warnings).toEqual([]);
    expect(file.skipped).toBe(4);
    expect(tree(file)).toEqual(["a", { x: [7, "00"] }, "b", { x: [7, "0000"] }, "c", { x: [-1, "00000000"] }, "d", { x: [7, "0000000000000000"] }, "w", 1]);
  });

  it("flax-ext-map-keys: timestamp, complex and ext keys are kept in the tree, and written back byte for byte", async () => {
    const float64 = (value: number) => {
      const bytes = new Uint8Array(8);
      new DataView(bytes.buffer).setFloat64(0, value);
      return [0xcb, ...bytes];
    };
    const bytes = cat(
      map(4),
      [0xd6, 0xff, 0, 0, 0, 1],
      [0x01],
      [0xc7, 0x13, 0x02, 0x92, ...float64(1), ...float64(2)],
      [0x02],
      [0xd4, 0x7f, 0x00],
      [0xc0],
      str("w"),
      [0xc7, 0x0c, 0x01, 0x93, 0x91, 0x01],
      str("uint8"),
      [0xc4, 0x01, 0x2a],
    );
    const { file, names, warnings } = await read(bytes);
    expect(names).toEqual(["w"]);
    expect(warnings).toEqual([]);
    expect(file.skipped).toBe(3);
    expect(tree(file)).toEqual([{ x: [-1, "00000001"] }, { i: 1 }, { c: [1, 2] }, { i: 2 }, { x: [127, "00"] }, null, "w", 1]);
    expect(toHex(await serializeFlax(file))).toBe(toHex(bytes));
  });

  it("without room for the tree, the leaves are skipped with a notice each", async () => {
    const bytes = cat(map(3), str("a"), [0xd4, 0x07, 0x00], str("c"), [0xd6, 0xff, 0, 0, 0, 0], str("w"), ndarray([], "uint8", [9]));
    const { file, warnings } = await read(bytes, { maxTreeBytes: 8 });
    expect(file.metadata).toBeNull();
    expect(warnings).toEqual([
      expect.stringMatching(/^the tree is not recorded in the metadata \(flax\.tree\): .*; its values that are not arrays are skipped$/),
      'skipped "a": an ext value of type 7, which flax does not write is not an array',
      'skipped "c": an ext value of type -1, which flax does not write is not an array',
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
    const bytes = cat(
      map(1),
      str("w"),
      map(3),
      str("shape"),
      dims(3),
      str("chunks"),
      pieces(ndarray([2], "uint8", [1, 2]), ndarray([1], "uint8", [3])),
      str("__msgpack_chunked_array__"),
      [0xc2],
    );
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

  it("integer and None keys are fine where no array needs them as a name, and recorded", async () => {
    const { file, names, warnings } = await read(cat(map(3), [0x05], [0x01], [0xc0], [0xc2], str("w"), ndarray([1], "uint8", [1])));
    expect(names).toEqual(["w"]);
    expect(warnings).toEqual([]);
    expect(tree(file)).toEqual([{ i: 5 }, { i: 1 }, null, false, "w", 1]);
  });

  it("reports at most maxWarnings skipped leaves one by one, then a count, when the tree is not recorded", async () => {
    const bytes = cat(map(5), ...["a", "b", "c", "d", "e"].flatMap((k) => [str(k), [0xc0]]));
    const { warnings, file } = await read(bytes, { maxWarnings: 2, maxTreeBytes: 4 });
    expect(warnings).toEqual([
      expect.stringMatching(/^the tree is not recorded/),
      'skipped "a": None is not an array',
      'skipped "b": None is not an array',
      "skipped 3 more leaves that are not arrays (5 in all)",
    ]);
    expect(file.skipped).toBe(5);
    // With room, they are all in the tree and nothing is lost.
    const recorded = await read(bytes, { maxWarnings: 2 });
    expect(recorded.warnings).toEqual([]);
    expect(tree(recorded.file)).toEqual(["a", null, "b", null, "c", null, "d", null, "e", null]);
  });

  it("a key that holds the separator is kept whole in the tree; without the tree, a notice says so once", async () => {
    const bytes = cat(map(2), str("a.b"), ndarray([1], "uint8", [1]), str("c.d"), ndarray([1], "uint8", [1]));
    const { file, names, warnings } = await read(bytes);
    expect(names).toEqual(["a.b", "c.d"]);
    expect(warnings).toEqual([]);
    expect(tree(file)).toEqual(["a.b", 1, "c.d", 1]);
    const unrecorded = await read(bytes, { maxTreeBytes: 0 });
    expect(unrecorded.warnings).toHaveLength(2);
    expect(unrecorded.warnings[1]).toMatch(/"a\.b" has a key that holds the separator/);
    expect((await read(cat(map(1), str("a.b"), ndarray([1], "uint8", [1])), { sep: "/" })).file.metadata).toBeNull();
  });

  it("an empty dict, an empty list and an empty file-level map hold no tensors", async () => {
    expect((await read(cat(map(2), str("d"), map(0), str("l"), arr(0)))).names).toEqual([]);
    expect((await read(cat(map(0)))).names).toEqual([]);
  });
});

describe("kept scalars", () => {
  it("obey the name-length limit like arrays do", async () => {
    // Found in review: --keep-scalars added a scalar without checking its name's length.
    const file = cat(map(1), str("a".repeat(12)), [0x01]);
    expect(await errorCode(readFlax(file, { keepScalars: true, maxNameLength: 8 }))).toBe("LimitExceeded");
    expect(await errorCode(readFlax(file, { keepScalars: true, maxNameLength: 12 }))).toBe("ok");
  });
});

describe("a numpy bool scalar holding 0x55", () => {
  // flax's `ar[()]` makes np.True_, which holds 0x01, and `msgpack_serialize` writes that back.
  const scalar = (byte: number) => cat(map(1), str("b"), [0xc7, 0x0a, 0x03, 0x93, 0x90], str("bool"), [0xc4, 0x01, byte]);

  it("reads as True (0x01), as flax restores it, and is written back as 0x01", async () => {
    const file = await readFlax(scalar(0x55));
    const [t] = file.tensors;
    expect([t!.dtype, t!.shape, [...(await readTensorBytes(t!))]]).toEqual(["BOOL", [], [1]]);
    expect(t!.ranges).toEqual([]);
    expect(toHex(await serializeFlax(file))).toBe(toHex(scalar(0x01)));
  });

  it("is written as 0x01 by the writer at a numpy scalar's place, whatever the tensor holds", async () => {
    const tensors = [tensorFromBytes({ name: "b", dtype: "BOOL", shape: [] }, Uint8Array.of(0x55))];
    const metadata = { [FLAX_TREE_KEY]: JSON.stringify({ version: 1, sep: ".", tree: ["b", 3] }) };
    expect(toHex(await serializeFlax({ metadata, tensors }))).toBe(toHex(scalar(0x01)));
  });

  it("in a 0-d ndarray (ext 1) keeps its byte, as numpy's array does", async () => {
    const file = await readFlax(cat(map(1), str("b"), [0xc7, 0x0a, 0x01, 0x93, 0x90], str("bool"), [0xc4, 0x01, 0x55]));
    expect([...(await readTensorBytes(file.tensors[0]!))]).toEqual([0x55]);
  });
});
