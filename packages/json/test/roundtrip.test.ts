/**
 * safetensors → JSON → safetensors is byte-identical, for every dtype, in the values form and the
 * base64 form, metadata included; and the values form is used exactly when it is lossless.
 */
import { readFileSync, readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { DTYPES, type Dtype, type TensorEntry, readSafetensors, readTensorBytes, serializeSafetensors, tensorByteLength } from "@st-convert/core";
import { readTensorJson } from "@st-convert/json";
import { fixturePath } from "@st-convert/testing";
import { allPatterns, bytesFor, failure, readAll, tensor, toJson, utf8 } from "./helpers.js";

const goldens = readdirSync(fixturePath("safetensors")).filter((f) => f.endsWith(".safetensors"));

async function roundTrip(tensors: TensorEntry[], base64 = false) {
  const { json, warnings } = await toJson({ metadata: null, tensors }, { base64 });
  const file = await readTensorJson(json);
  const back = await Promise.all(file.tensors.map(async (t) => ({ name: t.name, encoding: t.encoding, bytes: await readTensorBytes(t) })));
  return { json, warnings, back };
}

describe("golden safetensors files through JSON and back", () => {
  it.each(
    goldens.flatMap((f) => [
      [f, "values"],
      [f, "base64"],
    ]),
  )("%s, %s form, is byte-identical", async (name, form) => {
    const original = readFileSync(fixturePath("safetensors", name));
    const file = await readSafetensors(original);
    const { json, warnings } = await toJson(file, { base64: form === "base64" });
    expect(warnings).toEqual([]);
    const back = await readTensorJson(json);
    expect(back.tensors.map((t) => t.encoding)).toEqual(
      file.tensors.map((t) => (form === "base64" || t.dtype === "F4" || t.dtype === "F6_E2M3" || t.dtype === "F6_E3M2" ? "base64" : "values")),
    );
    expect(Buffer.from(await serializeSafetensors(back)).equals(original)).toBe(true);
  });
});

/** Canonical NaN bits of each small float type: what numpy / ml_dtypes make of float("nan"). */
const CANONICAL_NAN: Partial<Record<Dtype, number>> = {
  F16: 0x7e00,
  BF16: 0x7fc0,
  F8_E5M2: 0x7e,
  F8_E4M3: 0x7f,
  F8_E4M3FNUZ: 0x80,
  F8_E5M2FNUZ: 0x80,
  F8_E8M0: 0xff,
};

/** Whether a pattern is a NaN, from each format's definition (not from the code under test). */
function isNaNPattern(dtype: Dtype, p: number): boolean {
  switch (dtype) {
    case "F16":
      return (p & 0x7c00) === 0x7c00 && (p & 0x3ff) !== 0;
    case "BF16":
      return (p & 0x7f80) === 0x7f80 && (p & 0x7f) !== 0;
    case "F8_E5M2":
      return (p & 0x7c) === 0x7c && (p & 3) !== 0;
    case "F8_E4M3":
      return (p & 0x7f) === 0x7f;
    case "F8_E8M0":
      return p === 0xff;
    default:
      return p === 0x80;
  }
}

describe("every bit pattern of the 8- and 16-bit floats", () => {
  const small = Object.keys(CANONICAL_NAN) as Dtype[];

  it.each(small)("%s: all patterns but other NaNs go through values and come back exact", async (dtype) => {
    const all = allPatterns(dtype);
    const wide = all.length > 256;
    const kept: number[] = [];
    for (let p = 0; p < (wide ? 65536 : 256); p++) if (!isNaNPattern(dtype, p) || p === CANONICAL_NAN[dtype]) kept.push(p);
    const bytes = new Uint8Array(kept.length * (wide ? 2 : 1));
    kept.forEach((p, i) => (wide ? new DataView(bytes.buffer).setUint16(2 * i, p, true) : (bytes[i] = p)));
    const { warnings, back } = await roundTrip([tensor("x", dtype, [kept.length], bytes)]);
    expect(warnings).toEqual([]);
    expect(back[0]!.encoding).toBe("values");
    expect(Buffer.from(back[0]!.bytes).equals(bytes)).toBe(true);
  });

  it.each(small)("%s: all patterns come back exact, as base64 when other NaNs are present", async (dtype) => {
    const bytes = allPatterns(dtype);
    const { warnings, back } = await roundTrip([tensor("x", dtype, [bytes.length / (bytes.length > 256 ? 2 : 1)], bytes)]);
    const hasOtherNaNs = dtype === "F16" || dtype === "BF16" || dtype === "F8_E5M2" || dtype === "F8_E4M3";
    expect(back[0]!.encoding).toBe(hasOtherNaNs ? "base64" : "values");
    expect(warnings).toEqual(
      hasOtherNaNs ? [expect.stringMatching(/tensor "x": written as data_base64, since it holds NaNs other than the canonical one/)] : [],
    );
    expect(Buffer.from(back[0]!.bytes).equals(bytes)).toBe(true);
  });
});

describe("random and extreme values of the wider types", () => {
  const F32_EDGES = [
    0, 0x80000000, 1, 0x80000001, 0x007fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x3f800000, 0x4b800001, 0x5a000000,
  ];

  it("F32 and C64: 200,000 random patterns plus edges (NaNs made canonical) come back exact through values", async () => {
    const words = new Uint32Array(200_000 + F32_EDGES.length);
    new Uint8Array(words.buffer).set(bytesFor(32, words.byteLength));
    words.set(F32_EDGES, 200_000);
    for (let i = 0; i < words.length; i++) if ((words[i]! & 0x7f800000) === 0x7f800000 && (words[i]! & 0x7fffff) !== 0) words[i] = 0x7fc00000;
    const bytes = new Uint8Array(words.buffer);
    const { warnings, back } = await roundTrip([tensor("f", "F32", [words.length], bytes), tensor("c", "C64", [words.length / 2], bytes)]);
    expect(warnings).toEqual([]);
    for (const t of back) {
      expect(t.encoding).toBe("values");
      expect(Buffer.from(t.bytes).equals(bytes)).toBe(true);
    }
  });

  it("F64: 100,000 random patterns plus edges come back exact through values", async () => {
    const words = new Uint32Array(2 * 100_010);
    new Uint8Array(words.buffer).set(bytesFor(64, words.byteLength));
    const edges = [
      0, 0, 0, 0x80000000, 1, 0, 0xffffffff, 0x7fefffff, 0, 0x7ff00000, 0, 0xfff00000, 0, 0x7ff80000, 0, 0x00100000, 0xffffffff, 0x000fffff, 0, 0x43400000,
    ];
    words.set(edges, 2 * 100_000);
    for (let i = 0; i < words.length; i += 2) {
      const hi = words[i + 1]!;
      if ((hi & 0x7ff00000) === 0x7ff00000 && ((hi & 0xfffff) !== 0 || words[i] !== 0)) [words[i], words[i + 1]] = [0, 0x7ff80000];
    }
    const bytes = new Uint8Array(words.buffer);
    const { warnings, back } = await roundTrip([tensor("d", "F64", [words.length / 2], bytes)]);
    expect(warnings).toEqual([]);
    expect(back[0]!.encoding).toBe("values");
    expect(Buffer.from(back[0]!.bytes).equals(bytes)).toBe(true);
  });

  it.each(["U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"] as Dtype[])(
    "%s: random values and both extremes come back exact through values",
    async (dtype) => {
      const size = tensorByteLength(dtype, [1]);
      const bytes = bytesFor(size * 7, size * 20_000);
      bytes.fill(0xff, 0, size); // all ones: the maximum (unsigned) or -1
      bytes.fill(0, size, 2 * size);
      bytes.fill(0xff, 2 * size, 3 * size);
      bytes[3 * size - 1] = 0x7f; // the signed maximum
      bytes.fill(0, 3 * size, 4 * size);
      bytes[4 * size - 1] = 0x80; // the signed minimum
      const { json, warnings, back } = await roundTrip([tensor("i", dtype, [20_000], bytes)]);
      expect(warnings).toEqual([]);
      expect(back[0]!.encoding).toBe("values");
      expect(Buffer.from(back[0]!.bytes).equals(bytes)).toBe(true);
      if (dtype === "U64") expect(new TextDecoder().decode(json)).toContain('"data": [18446744073709551615, 0, 9223372036854775807, 9223372036854775808,');
      if (dtype === "I64") expect(new TextDecoder().decode(json)).toContain('"data": [-1, 0, 9223372036854775807, -9223372036854775808,');
    },
  );
});

describe("the values form is used exactly when it is lossless", () => {
  it("an F32 NaN with a payload, a negative NaN in F64 and a BOOL byte 2 force base64, with a warning each", async () => {
    const f32 = new Uint8Array(new Uint32Array([0x3f800000, 0x7fc00001]).buffer);
    const f64 = new Uint8Array(new Uint32Array([0, 0xfff80000]).buffer);
    const bool = Uint8Array.of(0, 1, 2);
    const fine = new Uint8Array(new Uint32Array([0x7fc00000, 0xff800000]).buffer);
    const { warnings, back } = await roundTrip([
      tensor("a", "F32", [2], f32),
      tensor("b", "F64", [1], f64),
      tensor("c", "BOOL", [3], bool),
      tensor("d", "F32", [2], fine),
    ]);
    expect(back.map((t) => t.encoding)).toEqual(["base64", "base64", "base64", "values"]);
    expect(warnings).toEqual([
      expect.stringContaining('tensor "a": written as data_base64'),
      expect.stringContaining('tensor "b": written as data_base64'),
      expect.stringMatching(/tensor "c": written as data_base64, since it holds bytes other than 0 and 1/),
    ]);
    expect(back.map((t) => [...t.bytes])).toEqual([[...f32], [...f64], [...bool], [...fine]]);
  });

  it("F4 and F6 are always base64, silently (they have no values form)", async () => {
    const { warnings, back } = await roundTrip([tensor("p", "F4", [2, 2], Uint8Array.of(0x12, 0xef)), tensor("q", "F6_E2M3", [4], Uint8Array.of(1, 2, 3))]);
    expect(warnings).toEqual([]);
    expect(back.map((t) => [t.encoding, ...t.bytes])).toEqual([
      ["base64", 0x12, 0xef],
      ["base64", 1, 2, 3],
    ]);
  });

  it("the base64 option writes every dtype as base64, bit-exact", async () => {
    const tensors = DTYPES.map((d, i) => {
      const shape = d.bits === 4 ? [2, 6] : d.bits === 6 ? [4, 3] : [3, 5];
      return tensor(`t${i}`, d.code, shape, bytesFor(i + 1, tensorByteLength(d.code, shape)));
    });
    const { warnings, back } = await roundTrip(tensors, true);
    expect(warnings).toEqual([]);
    expect(back.every((t) => t.encoding === "base64")).toBe(true);
    for (const [i, t] of back.entries()) expect([...t.bytes]).toEqual([...bytesFor(i + 1, t.bytes.length)]);
  });
});

describe("open:json-writer-empty-c64: empty C64 tensors", () => {
  it("are written as the flat list of no pairs, [], which the reader takes for every empty C64 shape", async () => {
    const shapes = [[0], [3, 0], [0, 2], [2, 0, 4]];
    const { json, back } = await roundTrip(shapes.map((shape, i) => tensor(`z${i}`, "C64", shape, new Uint8Array(0))));
    const lines = shapes.map((shape, i) => `  "z${i}": {"dtype": "C64", "shape": [${shape.join(", ")}], "data": []}`);
    expect(new TextDecoder().decode(json)).toBe(`{\n${lines.join(",\n")}\n}\n`);
    expect(back.map((t) => [t.name, t.encoding, t.bytes.length])).toEqual(shapes.map((_, i) => [`z${i}`, "values", 0]));
  });

  it("read from bytes built by hand: [] and the nested forms; [] is still refused for a C64 tensor that holds values", async () => {
    const doc = (shape: string, data: string) => `{"z": {"dtype": "C64", "shape": ${shape}, "data": ${data}}}`;
    for (const [shape, data] of [
      ["[3, 0]", "[]"],
      ["[3, 0]", "[[], [], []]"],
      ["[0, 3]", "[]"],
      ["[2, 0, 5]", "[[], []]"],
    ]) {
      const { tensors } = await readAll(utf8.encode(doc(shape!, data!)));
      expect([tensors[0]!.dtype, tensors[0]!.bytes.length]).toEqual(["C64", 0]);
    }
    expect(await failure(readAll(doc("[3, 1]", "[]")))).toMatchObject({ code: "ShapeMismatch" });
    expect(await failure(readAll(doc("[3, 0]", "[[]]")))).toMatchObject({ code: "ShapeMismatch" });
  });
});

describe("reading in any window and chunk size", () => {
  it("gives the same tensors with windows of 1, 2, 3, 7 and 64 bytes and chunks of 1, 3 and 5 bytes", async () => {
    const file = await readSafetensors(readFileSync(fixturePath("safetensors", "all_dtypes.safetensors")));
    const values = (await toJson(file)).json;
    const base64 = (await toJson(file, { base64: true })).json;
    // Escapes in a base64 string, as PHP writes them.
    const escaped = new TextEncoder().encode(
      new TextDecoder()
        .decode(base64)
        .replaceAll("/", "\\/")
        .replace(/"data_base64": "A/, '"data_base64": "\\u0041'),
    );
    const bytesOf = async (json: Uint8Array, windowSize?: number) =>
      (await readAll(json, { windowSize })).tensors.map((t) => [t.name, t.dtype, t.shape, t.bytes]);
    const expected = await readAll(values);
    const expectedBytes = await bytesOf(values);
    for (const json of [values, base64, escaped]) {
      for (const windowSize of [1, 2, 3, 7, 64]) expect(await bytesOf(json, windowSize)).toEqual(expectedBytes);
      const doc = await readTensorJson(json, { windowSize: 5 });
      for (const chunkSize of [1, 3, 5]) {
        for (const [i, t] of doc.tensors.entries()) {
          const parts: Uint8Array[] = [];
          for await (const chunk of t.chunks({ chunkSize })) {
            expect(chunk.byteLength).toBeLessThanOrEqual(chunkSize);
            parts.push(chunk.slice());
          }
          expect(Buffer.concat(parts).equals(expected.tensors[i]!.bytes)).toBe(true);
        }
      }
    }
  });

  it("writes the same document whatever the chunks the source delivers (elements split across chunks)", async () => {
    const file = await readSafetensors(readFileSync(fixturePath("safetensors", "all_dtypes.safetensors")));
    const reference = (await toJson(file)).json;
    const split = file.tensors.map((t) => ({
      ...t,
      async *chunks() {
        const bytes = await readTensorBytes(t);
        for (let at = 0; at < bytes.length; at += 3) yield bytes.subarray(at, at + 3);
      },
    }));
    expect(Buffer.from((await toJson({ metadata: null, tensors: split })).json).equals(reference)).toBe(true);
    expect(Buffer.from((await toJson({ metadata: null, tensors: split }, { base64: true })).json).equals((await toJson(file, { base64: true })).json)).toBe(
      true,
    );
  });
});
