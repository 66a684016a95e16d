/**
 * Decimal text ⇄ dtype bits: the reader rounds decimals as numpy does (golden cases made by numpy
 * and ml_dtypes), decodes the small floats as ml_dtypes does, and the writer's decimals are the
 * shortest that read back.
 */
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import type { Dtype } from "@st-convert/core";
import { fixturePath } from "@st-convert/testing";
import { minifloat } from "../src/minifloats.js";
import { compareToHalfway, decimalText, shortestDecimal, shortestFloat32 } from "../src/shortestDecimal.js";
import { parseFloat32Token } from "../src/valueCodecs.js";
import { bytesFor, failure, readAll, toJson, tensor, text } from "./helpers.js";

type Outcome = number | string;
const decimals = JSON.parse(readFileSync(fixturePath("json", "decimals.json"), "utf8")) as Record<Dtype, [string, Outcome][]>;
const decoded = JSON.parse(readFileSync(fixturePath("json", "decoded.json"), "utf8")) as Record<Dtype, [number, string][]>;

function bitsOf(dtype: Dtype, bytes: Uint8Array, i: number): string {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === "F64")
    return view
      .getBigUint64(8 * i, true)
      .toString(16)
      .padStart(16, "0");
  if (dtype === "F32") return String(view.getUint32(4 * i, true));
  if (dtype === "F16" || dtype === "BF16") return String(view.getUint16(2 * i, true));
  return String(bytes[i]);
}

describe("decimal → dtype rounding equals numpy's (fixtures/json/decimals.json)", () => {
  it.each(Object.keys(decimals) as Dtype[])("%s", async (dtype) => {
    const cases = decimals[dtype];
    const accepted = cases.filter(([, r]) => r !== "refused");
    expect(accepted.length).toBeGreaterThan(600);
    const { tensors } = await readAll(`{"x": {"dtype": "${dtype}", "shape": [${accepted.length}], "data": [${accepted.map(([s]) => s).join(", ")}]}}`);
    const mismatches = accepted.map(([s, r], i) => [s, String(r), bitsOf(dtype, tensors[0]!.bytes, i)]).filter(([, want, got]) => want !== got);
    expect(mismatches).toEqual([]);
    // Where numpy silently overflows to infinity (or NaN), the reader refuses, naming the value.
    for (const [s] of cases.filter(([, r]) => r === "refused")) {
      const refusal = await failure(readAll(`{"x": {"dtype": "${dtype}", "shape": [2], "data": [1, ${s}]}}`));
      expect(refusal).toMatchObject({ code: "ValueOutOfRange", tensor: "x" });
      expect(refusal.message).toContain("x.data[1]: ");
    }
  });
});

/** A Python `float.hex()` string as a number. */
function fromPythonHex(hex: string): number {
  if (hex === "inf" || hex === "-inf") return hex === "inf" ? Infinity : -Infinity;
  const m = /^(-?)0x([01])\.([0-9a-f]+)p([+-]\d+)$/.exec(hex);
  if (m === null) throw new Error(`not a float.hex: ${hex}`);
  const fraction = Number.parseInt(m[3]!, 16) / 16 ** m[3]!.length;
  return (m[1] === "-" ? -1 : 1) * (Number(m[2]) + fraction) * 2 ** Number(m[4]);
}

describe("decoding the small floats equals ml_dtypes (fixtures/json/decoded.json)", () => {
  it.each(Object.keys(decoded) as Dtype[])("%s", (dtype) => {
    const codec = minifloat(dtype)!;
    for (const [bits, hex] of decoded[dtype]) {
      const ours = codec.decode(bits);
      if (hex === "nan") expect(ours).toBeNaN();
      else expect(Object.is(ours, fromPythonHex(hex)) || ours === fromPythonHex(hex)).toBe(true);
      if (hex === "-0x0.0p+0") expect(Object.is(ours, -0)).toBe(true);
    }
  });
});

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const fromBits = (bits: number) => ((u32[0] = bits), f32[0]!);
const toBits = (value: number) => ((f32[0] = value), u32[0]!);

describe("the shortest float32 decimals", () => {
  it("the fast method equals the exact search over 300,000 random patterns and every exponent's edges", () => {
    const patterns: number[] = [];
    for (let e = 0; e < 255; e++) for (const m of [0, 1, 2, 3, 0x7fffff, 0x7ffffe, 0x400000, 0x3fffff]) patterns.push((e << 23) | m);
    const random = new Uint32Array(bytesFor(99, 4 * 300_000).buffer);
    for (const w of random) patterns.push(w & 0x7fffffff);
    for (let i = 1; i < 20_000; i++) patterns.push(toBits(i / 1000), toBits(i * 1e10));
    const out = { k: 0, e: 0 };
    const mismatches: string[] = [];
    for (const bits of patterns) {
      const x = fromBits(bits);
      if (!(x > 0) || x === Infinity) continue;
      shortestFloat32(bits, out);
      const exact = shortestDecimal(x, (y) => Math.fround(y) === x);
      if (exact.k !== out.k || exact.e !== out.e) mismatches.push(`${bits.toString(16)}: ${out.k}e${out.e} vs ${exact.k}e${exact.e}`);
    }
    expect(mismatches.slice(0, 5)).toEqual([]);
  });

  it("reads back through float64 and has at most 9 significant digits", () => {
    const out = { k: 0, e: 0 };
    for (const w of new Uint32Array(bytesFor(7, 4 * 50_000).buffer)) {
      const bits = w & 0x7fffffff;
      const x = fromBits(bits);
      if (!(x > 0) || x === Infinity) continue;
      shortestFloat32(bits, out);
      expect(Math.fround(Number(decimalText(false, out)))).toBe(x);
      expect(String(out.k).length).toBeLessThanOrEqual(9);
    }
  });

  it("resolves exact ties between two shortest candidates to the even one", () => {
    // 2097151.75 lies exactly between 2097151.7 and 2097151.8; 0.000244140625 (2^-12) between …062 and …063.
    expect(compareToHalfway(2097151.75, 20971517, -1)).toBe(0);
    const out = { k: 0, e: 0 };
    shortestFloat32(0x49fffffe, out);
    expect(out).toEqual({ k: 20971518, e: -1 });
    shortestFloat32(0x39800000, out);
    expect(out).toEqual({ k: 24414062, e: -11 });
  });
});

describe("F32 tokens read without Number()", () => {
  const ascii = (token: string) => Uint8Array.from(token, (c) => c.charCodeAt(0));
  /** What the token must read as: the float64 nearest to it, then the float32 nearest to that. */
  const expected = (token: string) => Math.fround(Number(token));
  /** The fast reading, or the exact one where it gives up (NaN), as the reader does. */
  const wrong: string[] = [];
  const check = (token: string): boolean => {
    const fast = parseFloat32Token(ascii(token), 0, token.length);
    if (fast !== fast) return false;
    if (!Object.is(fast, expected(token))) wrong.push(token);
    return true;
  };
  afterEach(() => {
    expect(wrong.splice(0)).toEqual([]);
  });

  it("equals fround(Number(token)) for Python's 17 digits, the writer's 9 and random long decimals; gives up on few", () => {
    const words = new Uint32Array(bytesFor(11, 4 * 100_000).buffer);
    let fast = 0;
    let total = 0;
    for (const w of words) {
      const x = new Float32Array(new Uint32Array([w & 0xff7fffff]).buffer)[0]!; // finite
      for (const token of [String(x), x.toPrecision(9), x.toExponential(16), x.toExponential(19)]) {
        if (token.includes("Infinity") || token.includes("NaN")) continue;
        total++;
        if (check(token.replace("e+", "e"))) fast++;
      }
    }
    expect(fast / total).toBeGreaterThan(0.99);
  });

  it("is exact at and next to the midpoints between float32 neighbours (double rounding honoured)", () => {
    const words = new Uint32Array(bytesFor(12, 4 * 20_000).buffer);
    for (const w of words) {
      const bits = w & 0x7f7fffff;
      const [a, b] = new Float32Array(new Uint32Array([bits, bits + 1]).buffer) as unknown as [number, number];
      const mid = (a + b) / 2; // exact in float64
      for (const digits of [17, 18, 19, 20, 21]) {
        const token = mid.toPrecision(digits);
        check(token);
        // One unit either side in the last digit.
        const [mantissa, exponent = "0"] = mid.toExponential(digits - 1).split("e");
        const k = BigInt(mantissa!.replace(".", ""));
        for (const j of [k - 1n, k + 1n]) check(`${j}e${Number(exponent) - (digits - 1)}`);
      }
    }
  });

  it("reads the extremes, zeros and exponents as Number() does, and leaves overflow to the exact route", () => {
    for (const token of [
      "0",
      "-0",
      "0.0",
      "-0.0e5",
      "1e-46",
      "7e-46",
      "1.401298464324817e-45",
      "1.1754943508222875e-38",
      "3.4028234663852886e38",
      "1E2",
      "25e-1",
    ])
      expect(check(token), token).toBe(true);
    expect(check("-1e-400")).toBe(true);
    for (const token of ["3.4028236e38", "1e39", "1e400", "-1e400"]) expect(parseFloat32Token(ascii(token), 0, token.length)).toBeNaN();
  });
});

describe("the text the writer spells", () => {
  const cases: [Dtype, number[], string][] = [
    // value bits (little-endian words) → the data array
    [
      "F32",
      [0x3dcccccd, 0x80000000, 0x7fc00000, 0x7f800000, 0xff800000, 0x00000001, 0x7f7fffff],
      '[0.1, -0.0, "NaN", "Infinity", "-Infinity", 1e-45, 3.4028235e+38]',
    ],
    // 123456789 is not a float32: the nearest is 123456792, whose shortest decimal is 123456790.
    ["F32", [0x4ceb79a3, 0x5368d4a5, 0x4b800000, 0x358637bd, 0x3f800000, 0xbfc00000], "[123456790, 1000000000000, 16777216, 0.000001, 1, -1.5]"],
    // Integers of 1e15 and beyond in exponent form, so that Python reads a float, not an int.
    ["F32", [0x58635fa9, 0x5a5e0b6b], "[1e+15, 1.5625e+16]"],
    ["F16", [0x3c00, 0x7bff, 0x0001, 0x8000, 0x3555, 0x7e00], '[1, 65500, 6e-8, -0.0, 0.3333, "NaN"]'],
    ["BF16", [0x3f80, 0x7f7f, 0x3eab, 0x4049], "[1, 3.39e+38, 0.334, 3.14]"],
    // The largest values have short neighbours too: 65504 reads back from 65500, 448 from 450.
    ["F8_E4M3", [0x7e, 0x01, 0x38, 0xfe], "[450, 0.002, 1, -450]"],
    // 2^-127 (5.877e-39) is 5e-39, not 6e-39: ml_dtypes rounds anything above 2^-127 up to 2^-126.
    ["F8_E8M0", [0x00, 0x7f, 0x80, 0xfe, 0xff], '[5e-39, 1, 2, 2e+38, "NaN"]'],
    ["F8_E4M3FNUZ", [0x00, 0x80, 0x7f], '[0, "NaN", 240]'],
  ];
  it.each(cases)("%s %j", async (dtype, words, expected) => {
    const width = dtype === "F32" ? 4 : dtype === "F16" || dtype === "BF16" ? 2 : 1;
    const bytes = new Uint8Array(words.length * width);
    const view = new DataView(bytes.buffer);
    words.forEach((w, i) => (width === 4 ? view.setUint32(4 * i, w, true) : width === 2 ? view.setUint16(2 * i, w, true) : (bytes[i] = w)));
    const { json } = await toJson({ metadata: null, tensors: [tensor("v", dtype, [words.length], bytes)] });
    expect(text(json)).toBe(`{\n  "v": {"dtype": "${dtype}", "shape": [${words.length}], "data": ${expected}}\n}\n`);
  });

  it("F64 as ECMAScript's shortest round trip, -0 as -0.0", async () => {
    const values = [0.1, -0, 5e-324, 1.7976931348623157e308, 1e21, 123456789012345680000, -2.5];
    const { json } = await toJson({ metadata: null, tensors: [tensor("d", "F64", [values.length], new Uint8Array(new Float64Array(values).buffer))] });
    expect(text(json)).toContain('"data": [0.1, -0.0, 5e-324, 1.7976931348623157e+308, 1e+21, 123456789012345680000, -2.5]');
  });
});
