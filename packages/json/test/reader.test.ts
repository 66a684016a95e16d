/** What the reader accepts, as the README documents it. */
import { describe, expect, it } from "vitest";
import { type ByteSource, StConvertError, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { readTensorJson, serializeTensorJson } from "@st-convert/json";
import { failure, readAll, readAllFrom, utf8 } from "./helpers.js";

const f32 = (...values: number[]) => [...new Uint8Array(new Float32Array(values).buffer)];
const one = async (doc: string) => [...(await readAll(doc)).tensors[0]!.bytes];

describe("data: nested, flat or bare", () => {
  it("reads nested arrays matching the shape, and the flat list, to the same bytes", async () => {
    expect(await one('{"w": {"dtype": "F32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}}')).toEqual(f32(1, 2, 3, 4));
    expect(await one('{"w": {"dtype": "F32", "shape": [2, 2], "data": [1, 2, 3, 4]}}')).toEqual(f32(1, 2, 3, 4));
  });

  it("reads a 0-d tensor as a bare value or a one-element list", async () => {
    expect(await one('{"s": {"dtype": "F32", "shape": [], "data": 2.5}}')).toEqual(f32(2.5));
    expect(await one('{"s": {"dtype": "F32", "shape": [], "data": [2.5]}}')).toEqual(f32(2.5));
    expect(await one('{"s": {"dtype": "BOOL", "shape": [], "data": true}}')).toEqual([1]);
    expect(await one('{"s": {"dtype": "F32", "shape": [], "data": "-Infinity"}}')).toEqual(f32(-Infinity));
  });

  it("reads C64 as [re, im] pairs: flat, nested, or one bare pair for 0-d", async () => {
    expect(await one('{"z": {"dtype": "C64", "shape": [2], "data": [[1, -1], [0.5, "NaN"]]}}')).toEqual(f32(1, -1, 0.5, NaN));
    expect(await one('{"z": {"dtype": "C64", "shape": [1, 2], "data": [[[1, 2], [3, 4]]]}}')).toEqual(f32(1, 2, 3, 4));
    expect(await one('{"z": {"dtype": "C64", "shape": [], "data": [7, 8]}}')).toEqual(f32(7, 8));
  });

  it("reads empty tensors flat, nested, or nested up to their first zero dimension", async () => {
    for (const data of ["[]", "[[], []]"]) expect(await one(`{"e": {"dtype": "F32", "shape": [2, 0], "data": ${data}}}`)).toEqual([]);
    expect(await one('{"e": {"dtype": "F32", "shape": [2, 0, 5], "data": [[], []]}}')).toEqual([]);
    expect(await one('{"e": {"dtype": "F32", "shape": [0, 3], "data": []}}')).toEqual([]);
  });
});

describe("the document", () => {
  it("takes the fields of a tensor in any order (data before dtype and shape)", async () => {
    const { tensors } = await readAll(
      '{"w": {"data": [[1, 2, 3]], "shape": [1, 3], "dtype": "U8"}, "v": {"data_base64": "AQI=", "dtype": "U8", "shape": [2]}}',
    );
    expect(tensors.map((t) => [t.name, t.dtype, t.shape, t.encoding, [...t.bytes]])).toEqual([
      ["w", "U8", [1, 3], "values", [1, 2, 3]],
      ["v", "U8", [2], "base64", [1, 2]],
    ]);
  });

  it("keeps metadata as a null-prototype string map; null or absent metadata is null", async () => {
    const file = await readTensorJson(utf8.encode('{"__metadata__": {"__proto__": "x", "caf\\u00e9": "\\ud83d\\ude00\\n"}}'));
    expect(Object.getPrototypeOf(file.metadata)).toBe(null);
    expect(Object.entries(file.metadata!)).toEqual([
      ["__proto__", "x"],
      ["café", "😀\n"],
    ]);
    expect((await readAll('{"__metadata__": null}')).metadata).toBe(null);
    expect((await readAll("{}")).metadata).toBe(null);
    expect((await readAll('{"__metadata__": {}}')).metadata).toEqual({});
  });

  it("accepts any JSON whitespace and a UTF-8 byte order mark", async () => {
    const doc = Uint8Array.from([0xef, 0xbb, 0xbf, ...utf8.encode('\r\n\t{ "w" :\n{"dtype":"U8","shape":[ 2 ],"data":[ 1 ,\t2 ]} }\n\n')]);
    expect([...(await readAll(doc)).tensors[0]!.bytes]).toEqual([1, 2]);
  });

  it("reads odd names: empty, escaped, non-ASCII", async () => {
    const { tensors } = await readAll(
      '{"": {"dtype": "U8", "shape": [], "data": 1}, "a\\"b\\u0000": {"dtype": "U8", "shape": [], "data": 2}, "😀é": {"dtype": "U8", "shape": [], "data": 3}}',
    );
    expect(tensors.map((t) => t.name)).toEqual(["", 'a"b\u0000', "😀é"]);
  });

  it("finds a tensor by name, and says which is missing", async () => {
    const file = await readTensorJson(utf8.encode('{"w": {"dtype": "U8", "shape": [], "data": 1}}'));
    expect(file.tensor("w").dtype).toBe("U8");
    expect(() => file.tensor("nope")).toThrow(/tensor "nope": tensor not found/);
  });
});

describe("values", () => {
  it("keeps integers exact past 2^53, and reads -0 as zero in integer dtypes", async () => {
    const { tensors } = await readAll(
      '{"u": {"dtype": "U64", "shape": [3], "data": [18446744073709551615, 9007199254740993, 0]}, "i": {"dtype": "I64", "shape": [2], "data": [-9223372036854775808, -0]}}',
    );
    const big = (bytes: Uint8Array, signed: boolean) => [...(signed ? new BigInt64Array(bytes.slice().buffer) : new BigUint64Array(bytes.slice().buffer))];
    expect(big(tensors[0]!.bytes, false)).toEqual([18446744073709551615n, 9007199254740993n, 0n]);
    expect(big(tensors[1]!.bytes, true)).toEqual([-9223372036854775808n, 0n]);
  });

  it("reads -0, -0.0 and a negative underflow as negative zero in float dtypes", async () => {
    const bytes = await one('{"z": {"dtype": "F32", "shape": [4], "data": [-0, -0.0, -1e-400, 0]}}');
    expect(bytes).toEqual(f32(-0, -0, -0, 0));
    expect(bytes.slice(0, 4)).toEqual([0, 0, 0, 0x80]);
  });

  it("rounds values that are not representable to nearest, ties to even, like numpy", async () => {
    // 1 + 2^-11 is halfway between two float16 values: ties to the even 1.0; a hair above rounds up.
    const bytes = await one('{"h": {"dtype": "F16", "shape": [3], "data": [1.00048828125, 1.000488281250001, 0.1]}}');
    expect(bytes).toEqual([0x00, 0x3c, 0x01, 0x3c, 0x66, 0x2e]);
  });

  it("rounds BF16 through float32 first, as ml_dtypes does", async () => {
    // 1 + 2^-8 + 2^-40: float32 drops the 2^-40 and leaves a tie, which goes to even (1.0).
    expect(await one('{"b": {"dtype": "BF16", "shape": [1], "data": [1.00390625000000090949]}}')).toEqual([0x80, 0x3f]);
  });

  it("refuses decimals for integer dtypes, even integral ones", async () => {
    expect((await failure(readAll('{"i": {"dtype": "I32", "shape": [1], "data": [1e3]}}'))).code).toBe("InvalidValue");
  });
});

describe("reading bytes", () => {
  it("reads only the tensor's range, and each chunks() call starts again", async () => {
    const doc = utf8.encode('{"a": {"dtype": "U8", "shape": [3], "data": [1, 2, 3]}, "b": {"dtype": "U16", "shape": [2], "data_base64": "AQACAA=="}}');
    const reads: [number, number][] = [];
    const source = { size: doc.length, read: async (offset: number, length: number) => (reads.push([offset, length]), doc.subarray(offset, offset + length)) };
    const file = await readTensorJson(source);
    reads.length = 0;
    const b = file.tensor("b");
    expect([...(await readTensorBytes(b))]).toEqual([1, 0, 2, 0]);
    expect([...(await readTensorBytes(b))]).toEqual([1, 0, 2, 0]);
    const text = new TextDecoder().decode(doc);
    const start = text.indexOf("AQAC");
    expect(reads.every(([offset, length]) => offset >= start && offset + length <= start + 8)).toBe(true);
  });
});

describe("many small tensors", () => {
  const small = (count: number) =>
    Array.from({ length: count }, (_, k) =>
      tensorFromBytes({ name: `layers.${k}.w`, dtype: "F32", shape: [2] }, new Uint8Array(new Float32Array([k, -k]).buffer)),
    );

  it("reads 3,000 small tensors in document order with a few reads of the source, not one per tensor", async () => {
    const tensors = small(3000);
    const doc = await serializeTensorJson({ metadata: null, tensors });
    const reads: [number, number][] = [];
    const source = { size: doc.length, read: async (offset: number, length: number) => (reads.push([offset, length]), doc.slice(offset, offset + length)) };
    const file = await readTensorJson(source);
    reads.length = 0;
    for (const [k, t] of file.tensors.entries()) expect([...new Float32Array((await readTensorBytes(t)).buffer)]).toEqual([k, -k]);
    expect(reads.length).toBeLessThan(30);
  });

  it("reads 30,000 small tensors sorted by name (as a safetensors writer takes them) with a few reads; a failed read is tried again", async () => {
    const tensors = Array.from({ length: 30_000 }, (_, k) =>
      tensorFromBytes(
        { name: `model.layers.${Math.floor(k / 10)}.block.${k % 10}.weight`, dtype: "F32", shape: [2] },
        new Uint8Array(new Float32Array([k, -k]).buffer),
      ),
    );
    const doc = await serializeTensorJson({ metadata: null, tensors });
    const reads: number[] = [];
    let failed = true;
    const source = {
      size: doc.length,
      read: async (offset: number, length: number) => {
        reads.push(offset);
        if (offset >= 1 << 20 && !failed) {
          failed = true;
          throw new Error("EIO once");
        }
        return doc.slice(offset, offset + length);
      },
    };
    const file = await readTensorJson(source);
    reads.length = 0;
    failed = false;
    const sorted = file.tensors.map((t, k) => [t, k] as const).sort(([a], [b]) => (a.name < b.name ? -1 : 1));
    let errors = 0;
    for (const [t, k] of sorted) {
      const bytes = await readTensorBytes(t).catch(() => {
        errors++;
        return readTensorBytes(t);
      });
      expect([...new Float32Array(bytes.buffer, bytes.byteOffset, 2)]).toEqual([k, -k]);
    }
    expect(errors).toBe(1);
    // The document is 3.6 MB: 16 reads as asked, then each of its 1 MiB blocks once (the failed one twice).
    expect(reads.length).toBeLessThanOrEqual(16 + 5);
  });

  it("reads field names and dtypes spelled with escapes, whatever the window", async () => {
    const doc = '{"a": {"dt\\u0079pe": "F\\u00332", "sh\\u0061pe": [1], "d\\u0061ta": [1.5]}, "b": {"dtype": "U8", "shape": [1], "data": [7]}}';
    for (const windowSize of [undefined, 1, 3, 17]) {
      const { tensors } = await readAll(doc, { windowSize });
      expect(tensors.map((t) => [t.name, t.dtype, t.shape, [...t.bytes]])).toEqual([
        ["a", "F32", [1], [0, 0, 0xc0, 0x3f]],
        ["b", "U8", [1], [7]],
      ]);
    }
  });

  it("reads the same tensors whatever the windows cut, plain entries and others alike", async () => {
    const plain = new TextDecoder().decode(await serializeTensorJson({ metadata: { k: "v" }, tensors: small(200) }, { base64: false }));
    // Every fifth entry spelled otherwise: fields out of order, nested data, base64, odd spacing.
    const doc = plain
      .split("\n")
      .map((line, k) =>
        k % 5 === 1
          ? line.replace(/\{"dtype": "F32", "shape": \[2\], "data": \[(.*)\]\}/, '{ "shape" : [ 2 ] ,"data":[$1],  "dtype":"F32"}')
          : k % 5 === 2
            ? line.replace(/"data": \[(.*), (.*)\]/, '"data": [[$1, $2]]').replace('"shape": [2]', '"shape": [1, 2]')
            : line,
      )
      .join("\n");
    const expected = await readAll(doc);
    expect(expected.tensors).toHaveLength(200);
    for (const windowSize of [5, 64, 1000, 4096]) expect(await readAll(doc, { windowSize })).toEqual(expected);
  });

  it("reads the same tensors when each window is read into the memory of the last (a source with readInto)", async () => {
    const plain = new TextDecoder().decode(await serializeTensorJson({ metadata: { "k\u00e9y": 'v"w' }, tensors: small(300) }, { base64: false }));
    // Long escaped names and base64 entries, cut by the windows anywhere.
    const doc = plain
      .split("\n")
      .map((line, k) =>
        k % 7 === 3
          ? line.replace(/^ {2}"([^"]+)"/, (_, name: string) => `  "${name}\\u00e9${"\\n".repeat(40)}${name}"`)
          : k % 7 === 5
            ? line.replace(
                /"data": \[(.*)\]/,
                (_, values: string) => `"data_base64": "${Buffer.from(Float32Array.from(values.split(", ").map(Number)).buffer).toString("base64")}"`,
              )
            : line,
      )
      .join("\n");
    const expected = await readAll(doc);
    expect(expected.tensors).toHaveLength(300);
    const bytes = new TextEncoder().encode(doc);
    for (const windowSize of [5, 64, 1000, 4096]) {
      let fills = 0;
      const source: ByteSource = {
        size: bytes.byteLength,
        read: async (offset, length) => bytes.slice(offset, offset + length),
        async readInto(offset, target) {
          fills++;
          // What was there before is gone: a view kept of an earlier window would read this.
          target.fill(0x7b);
          target.set(bytes.subarray(offset, offset + target.byteLength));
        },
      };
      expect(await readAllFrom(source, { windowSize })).toEqual(expected);
      expect(fills).toBeGreaterThan(bytes.byteLength / windowSize / 2);
    }
  });
});

describe("windows read ahead (a source with readInto, windows of 256 KiB or more)", () => {
  /** A document of three F32 tensors whose text runs to about 3 MB, the values of varied lengths. */
  async function bigDocument(): Promise<Uint8Array> {
    const tensors = [0, 1, 2].map((k) => {
      const values = Float32Array.from({ length: 80_000 }, (_, i) => Math.sin(i * 0.37 + k) * 10 ** ((i % 9) - 4));
      return tensorFromBytes({ name: `layer.${k}`, dtype: "F32", shape: [400, 200] }, new Uint8Array(values.buffer));
    });
    return serializeTensorJson({ tensors, metadata: null });
  }

  /** A source over `bytes` whose readInto settles a turn later, as a read on Node's thread pool does. */
  function slowSource(bytes: Uint8Array, fail?: (offset: number) => boolean) {
    const counts = { ahead: 0, sync: 0 };
    const source: ByteSource = {
      size: bytes.byteLength,
      name: "doc.json",
      read: async (offset, length) => bytes.slice(offset, offset + length),
      readInto(offset, target) {
        counts.ahead++;
        // What was there before is gone at once: a window still parsed from this memory would read it.
        target.fill(0x7b);
        return new Promise((resolve, reject) =>
          setImmediate(() => {
            if (fail?.(offset)) reject(new StConvertError("Io", "read failed", { file: "doc.json" }));
            else {
              target.set(bytes.subarray(offset, offset + target.byteLength));
              resolve();
            }
          }),
        );
      },
      readIntoSync(offset, target) {
        counts.sync++;
        target.set(bytes.subarray(offset, offset + target.byteLength));
      },
    };
    return { source, counts };
  }

  it("reads the same tensors as from memory, with most windows read ahead, whatever the window's size", async () => {
    const bytes = await bigDocument();
    expect(bytes.byteLength).toBeGreaterThan(2_500_000);
    const expected = await readAll(bytes);
    for (const windowSize of [262_144, 300_007]) {
      const { source, counts } = slowSource(bytes);
      expect(await readAllFrom(source, { windowSize })).toEqual(expected);
      // The scan and each tensor's values go through the text window by window (about twice its
      // length in all); each of those four runs reads its first window, and a last one too short
      // to read ahead, at once; the others come read ahead.
      const windows = bytes.byteLength / windowSize;
      expect(counts.ahead).toBeGreaterThan(windows);
      expect(counts.sync).toBeLessThanOrEqual(8);
    }
  });

  it("reports a failed read where its window is needed, and drops one never needed", async () => {
    const bytes = await bigDocument();
    const windowSize = 300_007;
    const failing = slowSource(bytes, (offset) => offset >= 3 * windowSize);
    expect(await failure(readAllFrom(failing.source, { windowSize }))).toMatchObject({ code: "Io" });
    // Malformed early: the parse stops in the first window while the second is being read ahead, and fails.
    const broken = bytes.slice();
    broken[broken.indexOf(0x2c, 5000)] = 0x3b;
    const early = slowSource(broken, (offset) => offset >= windowSize);
    expect(await failure(readAllFrom(early.source, { windowSize }))).toMatchObject({ code: "InvalidJson" });
    expect(early.counts.ahead).toBeGreaterThan(0);
  });
});
