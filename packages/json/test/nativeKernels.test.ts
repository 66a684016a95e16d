/**
 * The native module's F32 loops (core's `kernels`, installed by `@st-convert/core/node`) against
 * their JavaScript twins: the same text written, the same floats stored, the same counts and the
 * same stops, element for element, and the same files and errors through the whole reader.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type Kernels, kernels, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import "@st-convert/core/node";
import { readTensorJson, serializeTensorJson, writeTensorJson } from "@st-convert/json";
import { pseudoRandomBytes } from "@st-convert/testing";
import {
  NATIVE_RUN_FROM,
  formatFloat32s,
  formattedUpTo,
  portableFloat32Lossless,
  portableFormatFloat32s,
  portableStoreFloat32Run,
  storeFloat32Run,
  storedUpTo,
} from "../src/valueCodecs.js";
import { MAX_NUMBER_LENGTH, countedUpTo, portableNumberRun } from "../src/scanTensorJson.js";
import { failure, utf8 } from "./helpers.js";

const present = kernels.formatFloat32s !== undefined && kernels.storeFloat32Run !== undefined && kernels.numberRun !== undefined;
if (!present && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error("the native module's JSON kernels are required here");
const withNative = present ? describe : describe.skip;

/** Runs `body` with the native JSON kernels removed from the registry, then puts them back. */
async function portably<T>(body: () => Promise<T> | T): Promise<T> {
  const saved: Kernels = {
    formatFloat32s: kernels.formatFloat32s,
    formatFloat32sAsync: kernels.formatFloat32sAsync,
    storeFloat32Run: kernels.storeFloat32Run,
    numberRun: kernels.numberRun,
    float32Lossless: kernels.float32Lossless,
  };
  delete kernels.float32Lossless;
  delete kernels.formatFloat32s;
  delete kernels.formatFloat32sAsync;
  delete kernels.storeFloat32Run;
  delete kernels.numberRun;
  try {
    return await body();
  } finally {
    Object.assign(kernels, saved);
  }
}

/** What reading `document` gives: each tensor's name, shape and bytes (hex), or the refusal (code, message, tensor). */
async function outcome(document: Uint8Array): Promise<unknown> {
  const result = (async () => {
    const file = await readTensorJson(document);
    return Promise.all(file.tensors.map(async (t) => [t.name, [...t.shape], Buffer.from(await readTensorBytes(t)).toString("hex")]));
  })();
  try {
    return await result;
  } catch {
    return failure(result);
  }
}

/** float32 bit patterns: every exponent field with edge and random mantissas, the specials, and random words. */
function patterns(randomCount: number): Uint32Array {
  const words: number[] = [];
  const random = new Uint32Array(pseudoRandomBytes(41, 4 * (randomCount + 256 * 40)).buffer);
  let r = 0;
  for (let exp = 0; exp < 256; exp++) {
    for (const mant of [0, 1, 2, 0x7fffff, 0x7ffffe, 0x400000, 0x3fffff]) words.push(((exp << 23) | mant) >>> 0, ((1 << 31) | (exp << 23) | mant) >>> 0);
    for (let i = 0; i < 40; i++) words.push(((random[r++]! & 0x807fffff) | (exp << 23)) >>> 0);
  }
  for (let i = 0; i < randomCount; i++) words.push(random[r++]!);
  // Decimal-looking values, whose shortest forms are short: where ties and interval ends sit.
  for (let i = 0; i < 2000; i++) words.push(new Uint32Array(new Float32Array([i / 8, i * 0.1, 2 ** 24 + i, 1e-6 * i, 3.4e38 - i * 1e31]).buffer)[i % 5]!);
  return Uint32Array.from(words);
}

function formatAll(format: typeof formatFloat32s, words: Uint32Array, limit: number, first: boolean, index = 0): { text: Uint8Array; upTo: number } {
  const out = new Uint8Array(limit + 64);
  const pos = format(words, index, words.length, out, 0, limit, first);
  return { text: out.slice(0, pos), upTo: formattedUpTo };
}

withNative("the native JSON loops in use", () => {
  it("are the widest this CPU runs, or those ST_CONVERT_JSON_SIMD asks for (the suite runs this file at each level)", () => {
    const flags = process.arch === "x64" ? readFileSync("/proc/cpuinfo", "utf8") : "";
    const has = (flag: string) => new RegExp(`\\b${flag}\\b`).test(flags);
    const widest = has("avx2") ? 2 : has("sse4_1") ? 1 : 0;
    const asked = process.env.ST_CONVERT_JSON_SIMD;
    expect(kernels.jsonSimd!()).toBe(asked === "0" || asked === "1" ? Math.min(widest, Number(asked)) : widest);
  });
});

withNative("the native F32 writer loop", () => {
  it("finds a NaN other than the canonical one where the JavaScript check does, wherever it lies", () => {
    const check = kernels.float32Lossless!;
    const words = patterns(100_000).filter((w) => portableFloat32Lossless(Uint32Array.of(w)));
    expect(words.length).toBeGreaterThan(100_000);
    expect(words).toContain(0x7fc00000);
    expect(check(words)).toBe(true);
    // Every other NaN: sign, quiet or signalling, smallest and largest payloads.
    const odd = [0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0xffffffff, 0x7fc00001, 0x7fa00000];
    for (const nan of odd) {
      // At the first word, inside the first piece of 4096, at a piece's edges, at the last word.
      for (const at of [0, 17, 4095, 4096, 8191, words.length - 1]) {
        const copy = words.slice();
        copy[at] = nan;
        expect([nan.toString(16), at, check(copy)]).toEqual([nan.toString(16), at, portableFloat32Lossless(copy)]);
        expect(check(copy)).toBe(false);
      }
    }
    expect(check(new Uint32Array(0))).toBe(true);
    // Infinities are values ("Infinity"), not NaNs.
    expect(check(Uint32Array.of(0x7f800000, 0xff800000, 0x7fc00000))).toBe(true);
  });

  it("writes what the JavaScript loop writes, for every exponent field, the specials and a million random patterns", () => {
    const words = patterns(1_000_000);
    const native = formatAll(formatFloat32s, words, 64 * words.length, true);
    const portable = formatAll(portableFormatFloat32s, words, 64 * words.length, true);
    expect(native.upTo).toBe(words.length);
    expect(portable.upTo).toBe(words.length);
    // Buffer.equals: vitest's deep equality takes seconds over megabytes.
    expect(Buffer.from(native.text).equals(portable.text)).toBe(true);
  });

  it("stops where the JavaScript loop stops: past the limit, and resumes after an element with its separator", () => {
    const words = patterns(5000);
    for (const limit of [0, 1, 700, 4096, 33_333]) {
      for (const [first, index] of [
        [true, 0],
        [false, 0],
        [false, 17],
      ] as const) {
        const native = formatAll(formatFloat32s, words, limit, first, index);
        const portable = formatAll(portableFormatFloat32s, words, limit, first, index);
        expect([native.upTo, Buffer.from(native.text).equals(portable.text)]).toEqual([portable.upTo, true]);
      }
    }
  });

  it("leaves fewer than NATIVE_RUN_FROM elements to JavaScript, with the same text", () => {
    const words = patterns(0).subarray(0, NATIVE_RUN_FROM - 1);
    const native = formatAll(formatFloat32s, words, 1 << 20, true);
    expect(Buffer.from(native.text).equals(formatAll(portableFormatFloat32s, words, 1 << 20, true).text)).toBe(true);
  });
});

/** `words` as one F32 tensor, its NaNs made canonical so that it is written as values, not base64. */
function f32Tensor(words: Uint32Array) {
  const bits = words.map((w) => ((w & 0x7f800000) === 0x7f800000 && (w & 0x7fffff) !== 0 ? 0x7fc00000 : w));
  return { metadata: null, tensors: [tensorFromBytes({ name: "w", dtype: "F32", shape: [bits.length] }, new Uint8Array(bits.buffer))] };
}

/** Bytes of the one-core text of `words[0, index)`, the first element without a separator. */
function textLength(words: Uint32Array, index: number): number {
  const out = new Uint8Array(20 * index + 64);
  return formatFloat32s(words, 0, index, out, 0, out.length - 64, true);
}

/** Indices of `words` where the native loop stops for the exact route. */
function exactRouteStops(words: Uint32Array): number[] {
  const stops: number[] = [];
  const out = new Uint8Array(64 * words.length + 64);
  const state = new Float64Array(1);
  for (let index = 0, pos = 0; index < words.length; ) {
    pos = kernels.formatFloat32s!(words, index, words.length, out, pos, out.length - 64, true, state);
    index = state[0]!;
    if (index < words.length) stops.push(index++);
  }
  return stops;
}

const withAsync = present && kernels.formatFloat32sAsync !== undefined ? describe : describe.skip;

withAsync("the F32 writer on two cores (formatFloat32sAsync)", () => {
  it("writes the bytes of the one-core writer and of the JavaScript one, with exact-route elements in both halves of a piece", async () => {
    const words = patterns(700_000);
    const hard = exactRouteStops(words).map((i) => words[i]!);
    expect(hard.length).toBeGreaterThan(2);
    // The first element (no separator), in the pool's half of the first piece, in the half formatted
    // here, at the end of the pool's half, and first and fourth in the second 2 MiB block (a separator).
    for (const [k, at] of [0, 1000, 64 * 1024 + 5, 64 * 1024 - 1, 512 * 1024, 512 * 1024 + 3].entries()) words[at] = hard[k % hard.length]!;
    // More than the pool's half has gaps for (1024), together, in the second piece's pool half.
    for (let k = 0; k < 1500; k++) words[128 * 1024 + 7 + k] = hard[k % hard.length]!;
    const source = f32Tensor(words);
    const parallel = await serializeTensorJson(source);
    expect(Buffer.from(parallel.subarray(0, 200)).toString()).toContain('"data": [');
    const saved = kernels.formatFloat32sAsync;
    delete kernels.formatFloat32sAsync;
    let oneCore: Uint8Array;
    try {
      oneCore = await serializeTensorJson(source);
    } finally {
      kernels.formatFloat32sAsync = saved;
    }
    const portable = await portably(() => serializeTensorJson(source));
    expect(Buffer.from(parallel).equals(oneCore)).toBe(true);
    expect(Buffer.from(parallel).equals(portable)).toBe(true);
    // And it reads back to the same bits.
    const back = await readTensorJson(parallel);
    expect(Buffer.from(await readTensorBytes(back.tensors[0]!)).equals(Buffer.from(await readTensorBytes(source.tensors[0]!)))).toBe(true);
  });

  it("leaves a gap for each element of the exact route, and records it, until its gaps run out", async () => {
    const words = patterns(4000);
    const n = words.length;
    const hard = exactRouteStops(words);
    expect(hard.length).toBeGreaterThan(1);
    const out = new Uint8Array(20 * n + 64);
    const state = new Float64Array(2);
    const stops = new Float64Array(2 * 1024);
    const end = await kernels.formatFloat32sAsync!(words, 0, n, out, 0, out.length - 64, true, state, stops, 20);
    expect([state[0], state[1]]).toEqual([n, hard.length]);
    // Each gap of 20 bytes begins where the one-core text before its element ends, shifted by the gaps before it
    // less their elements' text.
    let shift = 0;
    for (let k = 0; k < hard.length; k++) {
      expect(stops[2 * k]).toBe(hard[k]);
      expect(stops[2 * k + 1]).toBe(textLength(words, hard[k]!) + shift);
      shift += 20 - (textLength(words, hard[k]! + 1) - textLength(words, hard[k]!));
    }
    expect(end).toBe(textLength(words, n) + shift);
    // With one gap, it stops at the second element of the exact route.
    const one = new Float64Array(2);
    await kernels.formatFloat32sAsync!(words, 0, n, out, 0, out.length - 64, true, state, one, 20);
    expect([state[0], state[1], one[0]]).toEqual([hard[1], 1, hard[0]]);
    // A gap shorter than an element's longest text is refused.
    expect(() => kernels.formatFloat32sAsync!(words, 0, n, out, 0, out.length - 64, true, state, stops, 19)).toThrow("formatFloat32sAsync(");
  });

  it("reports a write that fails, without leaving a job or a rejection behind", async () => {
    const source = f32Tensor(patterns(300_000));
    let taken = 0;
    const sink = {
      name: "failing",
      async write(chunk: Uint8Array) {
        taken += chunk.byteLength;
        if (taken > 3_000_000) throw new Error("disk full");
      },
      async close() {},
      async abort() {},
    };
    await expect(writeTensorJson(source, sink)).rejects.toThrow("disk full");
  });
});

/** A text of number leaves: plain, long, exponent, zero and malformed tokens, among separators and brackets. */
function numberText(seed: number, count: number, malformed = true): Uint8Array {
  const random = pseudoRandomBytes(seed, 4 * count);
  const parts: string[] = [];
  const pick = (i: number, n: number) => random[4 * i + 1]! % n;
  for (let i = 0; i < count; i++) {
    const kind = random[4 * i]! % 20;
    const digits = String(1 + ((random[4 * i + 2]! << 8) | random[4 * i + 3]!) * 37);
    let token: string;
    if (kind < 8) token = `${pick(i, 2) ? "-" : ""}${digits.slice(0, 1)}.${digits.slice(1)}`;
    else if (kind < 10) token = `${digits}e${pick(i, 2) ? "-" : "+"}${pick(i, 30)}`;
    else if (kind < 11) token = `0.${"0".repeat(pick(i, 30))}${digits}`;
    else if (kind < 12)
      token = `${digits}${digits}${digits}.5`; // past 15 digits
    else if (kind < 13 && !malformed) token = ["0", "-0", "-0.0", "0e5", "1e-50", "3.4e38"][pick(i, 6)]!;
    else if (kind < 13) token = ["0", "-0", "-0.0", "0e5", "00", "1.", "-", "1e", "1e+", "1.5x", '"NaN"', "true"][pick(i, 12)]!;
    // Past ±22 (off the fast path); positive ones overflow F32 when malformed ones are welcome.
    else if (kind < 14) token = `${digits}e${pick(i, 2) || !malformed ? "-" : ""}${20 + pick(i, 40)}`;
    else token = `${pick(i, 2) ? "-" : ""}${digits}`;
    parts.push(token);
  }
  const separators = [", ", ",", " , ", ",\n  ", "], [", ",\t"];
  let text = "[";
  for (let i = 0; i < parts.length; i++) text += (i === 0 ? "" : separators[random[4 * i]! % separators.length]!) + parts[i]!;
  return utf8.encode(`${text}]`);
}

withNative("the native F32 reader loop", () => {
  it("stores and stops as the JavaScript loop does, over random runs of numbers, cut or whole", () => {
    for (let seed = 0; seed < 40; seed++) {
      const text = numberText(seed, 3000);
      for (const cut of [text.length, Math.floor(text.length / 2), 101]) {
        const buf = text.subarray(0, cut);
        for (const final of [true, false]) {
          let i = 1;
          let leaf = 0;
          const native = new Float32Array(4000);
          const portable = new Float32Array(4000);
          // Leaf by leaf as the reader goes: a run, then one leaf or byte stepped over by the general path.
          for (let step = 0; step < 400 && i < buf.length; step++) {
            const nativeEnd = storeFloat32Run(buf, i, final, native, 0, leaf, 4000);
            const nativeLeaf = storedUpTo;
            const portableEnd = portableStoreFloat32Run(buf, i, final, portable, 0, leaf, 4000);
            expect([nativeEnd, nativeLeaf]).toEqual([portableEnd, storedUpTo]);
            i = nativeEnd + 1;
            leaf = nativeLeaf + 1;
          }
          expect(Buffer.from(native.buffer).equals(Buffer.from(portable.buffer))).toBe(true);
        }
      }
    }
  });
});

withNative("the reader and writer with and without the native loops", () => {
  it("read the same tensors from documents of mixed numbers, nested and flat, and refuse the same ones with the same message", async () => {
    for (let seed = 0; seed < 30; seed++) {
      // One in three with a malformed token somewhere (refused), the others well formed (read).
      const data = new TextDecoder().decode(numberText(seed, 500 + seed * 37, seed % 3 === 0));
      for (const shape of ["[-1]", "null"]) {
        const count = (data.match(/\],\s?\[/g)?.length ?? 0) + 1;
        const document = utf8.encode(
          `{"a": {"dtype": "F32", "shape": ${shape === "null" ? "[1]" : `[${count}, 0]`}, "data": ${data}}, "b": {"dtype": "F32", "shape": [3], "data": [1.5, -2, 3e-7]}}`,
        );
        expect(await outcome(document)).toEqual(await portably(() => outcome(document)));
      }
    }
  });

  it("count nested rows the same: rows as long as the first, one longer, one shorter, kinds first seen late", async () => {
    const rows = 5;
    const columns = 3 * NATIVE_RUN_FROM;
    for (let seed = 0; seed < 12; seed++) {
      const tokens = new TextDecoder()
        .decode(numberText(100 + seed, rows * columns + 1, false))
        .slice(1, -1)
        .split(/\]?,\s*\[?/);
      for (const change of [0, 1, -1]) {
        const lines: string[] = [];
        for (let r = 0; r < rows; r++) {
          const length = r === 3 ? columns + change : columns;
          // Integers only in the first row, so that a float (a new kind of number) first comes later.
          const row = tokens.slice(r * columns, r * columns + length).map((t) => (r === 0 ? String(Math.trunc(Number(t)) || 1) : t));
          lines.push(`[${row.join(", ")}]`);
        }
        const document = utf8.encode(`{"a": {"dtype": "F32", "shape": [${rows}, ${columns}], "data": [${lines.join(",\n ")}]}}`);
        const native = await outcome(document);
        expect(native).toEqual(await portably(() => outcome(document)));
        // The well-formed one is read, the others refused: the comparison saw both outcomes.
        expect(Array.isArray(native)).toBe(change === 0);
      }
    }
  });

  it("find the same first leaf of a kind seen late in a long run (a negative, a float, a number too long), for integer dtypes", async () => {
    const length = 4 * NATIVE_RUN_FROM;
    const outcomes = new Set<string>();
    for (const dtype of ["U8", "I32", "F32"]) {
      for (const late of ["-7", "-0", "2.5", "3e2", "1".repeat(5000), `-${"9".repeat(5000)}`]) {
        for (const at of [1, NATIVE_RUN_FROM + 3, length - 1]) {
          const values = Array.from({ length }, (_, i) => String(i % 100));
          values[at] = late;
          const document = utf8.encode(`{"a": {"dtype": "${dtype}", "shape": [${length}], "data": [${values.join(", ")}]}}`);
          const native = await outcome(document);
          expect(native).toEqual(await portably(() => outcome(document)));
          outcomes.add(Array.isArray(native) ? "read" : (native as { code: string }).code);
        }
      }
    }
    // Both outcomes were compared: files read, and refusals (their messages name the leaf).
    expect([...outcomes].sort()).toEqual(expect.arrayContaining(["read", "InvalidValue"]));
  });

  it("read a long flat F32 array of every kind of number the same, and write the same text for it", async () => {
    const values = new Float32Array(new Uint32Array(patterns(200_000).filter((w) => (w & 0x7f800000) !== 0x7f800000)).buffer);
    const source = { metadata: null, tensors: [tensorFromBytes({ name: "w", dtype: "F32", shape: [values.length] }, new Uint8Array(values.buffer))] };
    const json = await serializeTensorJson(source);
    expect(Buffer.from(json).equals(await portably(() => serializeTensorJson(source)))).toBe(true);
    const bytes = async () => Buffer.from(await readTensorBytes((await readTensorJson(json)).tensors[0]!));
    const native = await bytes();
    expect(native.equals(await portably(bytes))).toBe(true);
    expect(native.equals(Buffer.from(values.buffer))).toBe(true);
  });
});

/**
 * Long runs of plain numbers as real files hold them (", " between them, up to 15 digits), the
 * native loops' 64-byte blocks, broken at random places by a token the blocks do not take
 * (exponents, leading zeros, a point without digits, other separators, too many digits).
 */
function plainRuns(seed: number, count: number, malformed = true): Uint8Array {
  const random = pseudoRandomBytes(seed, 8 * count);
  const valid = ["1.5e3", "-2E-7", "-0", "-0.0", "1234567890123456", "0.1234567890123456", "12345678901234567.5", "7", "-7"];
  // Each malformed one breaks one rule the count's 64-byte windows check at once (native count_window).
  const odd = malformed ? [...valid, "01.5", "1.", "-", "0.", "00", "1.2.3", "0.5.", ".5", "-.5", "1-2", "--1", "1 2", "+1"] : valid;
  let text = "[";
  for (let i = 0; i < count; i++) {
    const r = (k: number) => random[8 * i + k]!;
    let token: string;
    if (r(0) % 50 === 0) token = odd[r(1) % odd.length]!;
    else {
      const int = r(1) % 3 === 0 ? String(1 + (r(2) % 9)) + String((r(3) << 8) | r(4)).slice(0, r(5) % 8) : "0";
      const fraction = String((r(3) << 16) | (r(4) << 8) | r(5)).padStart(8, "0") + String((r(6) << 8) | r(7));
      token = `${r(2) % 2 ? "-" : ""}${int}${r(6) % 20 === 0 ? "" : `.${fraction.slice(0, 1 + (r(7) % 14))}`}`;
    }
    const separators = malformed ? [",\n  ", "], [", " , ", ",,", ",  "] : [",\n  ", " , ", ",  "];
    const separator = r(0) % 37 === 1 ? separators[r(1) % separators.length]! : r(0) % 3 === 0 ? "," : ", ";
    text += (i === 0 ? "" : separator) + token;
  }
  return utf8.encode(`${text}]`);
}

withNative("the native F32 reader loops' blocks of plain numbers", () => {
  it("store and stop as the JavaScript loop does, over long runs broken at random places", () => {
    for (let seed = 0; seed < 30; seed++) {
      const text = plainRuns(200 + seed, 4000);
      for (const cut of [text.length, Math.floor(text.length / 3) + seed]) {
        const buf = text.subarray(0, cut);
        const native = new Float32Array(5000);
        const portable = new Float32Array(5000);
        let i = 1;
        let leaf = 0;
        let steps = 0;
        for (; i < buf.length && steps < 2000; steps++) {
          const nativeEnd = storeFloat32Run(buf, i, true, native, 0, leaf, 5000);
          const nativeLeaf = storedUpTo;
          const portableEnd = portableStoreFloat32Run(buf, i, true, portable, 0, leaf, 5000);
          expect([nativeEnd, nativeLeaf]).toEqual([portableEnd, storedUpTo]);
          i = nativeEnd + 1;
          leaf = nativeLeaf + 1;
        }
        expect(Buffer.from(native.buffer).equals(Buffer.from(portable.buffer))).toBe(true);
        // Most leaves were stored by the runs, not leaf by leaf: the blocks did the work compared.
        expect(leaf).toBeGreaterThan(2 * steps);
      }
    }
  });

  it("count and read the same, and refuse the same leaf, through the whole reader, for float and integer dtypes", async () => {
    const outcomes = new Set<string>();
    for (let seed = 0; seed < 12; seed++) {
      // Well formed, but for one document in four: those are refused where the odd token is.
      const floats = new TextDecoder().decode(plainRuns(300 + seed, 3000, seed % 4 === 3));
      // The same without fractions or exponents: integers, the first negative one refused by U64 at its leaf.
      const integers = floats.replace(/\.\d+|[eE][-+]?\d+/g, "");
      for (const [dtype, data] of [
        ["F32", floats],
        ["F64", floats],
        ["I32", floats],
        ["I32", integers],
        ["U64", integers],
      ] as const) {
        const document = utf8.encode(`{"a": {"dtype": "${dtype}", "shape": [3000], "data": ${data}}, "b": {"dtype": "F32", "shape": [1], "data": [1]}}`);
        const native = await outcome(document);
        expect(native).toEqual(await portably(() => outcome(document)));
        outcomes.add(Array.isArray(native) ? "read" : (native as { code: string }).code);
      }
    }
    // Read as floats, refused as integers (and where malformed): both outcomes were compared.
    expect([...outcomes].sort()).toEqual(expect.arrayContaining(["read", "InvalidValue"]));
  });

  it("count and stop as the JavaScript scanner does, from every comma, for every set of kinds already seen", () => {
    const numberRun = kernels.numberRun!;
    const state = new Float64Array(1);
    let counted = 0;
    for (let seed = 0; seed < 12; seed++) {
      const text = plainRuns(400 + seed, 1500, seed % 2 === 0);
      for (const [kinds, dim, maxLength] of [
        [1 | 2 | 128, -1, MAX_NUMBER_LENGTH],
        [1 | 2, -1, MAX_NUMBER_LENGTH],
        [1 | 128, -1, MAX_NUMBER_LENGTH],
        [1 | 2 | 128, 700, 11],
      ] as const) {
        for (let i = 1; i < text.length; i++) {
          if (text[i] !== 0x2c || i % 3 !== seed % 3) continue;
          const count = i % 5;
          const nativeAt = numberRun(text, i, count, dim, kinds, maxLength, state);
          const portableAt = portableNumberRun(text, i, count, dim, kinds, maxLength);
          expect([nativeAt, state[0]]).toEqual([portableAt, countedUpTo]);
          counted += countedUpTo - count;
        }
      }
    }
    // Long runs were counted, not only single numbers.
    expect(counted).toBeGreaterThan(1_000_000);
  });
});

/**
 * A clean run of about `bytes` bytes of plain numbers (", " or "," between them), as a big
 * tensor's text holds them: long enough for the native loops to split it between two cores.
 */
function longRun(seed: number, bytes: number): Uint8Array {
  const random = pseudoRandomBytes(seed, bytes);
  let text = "[";
  for (let i = 0; text.length < bytes; i++) {
    const r = (k: number) => random[(8 * i + k) % random.length]!;
    const fraction = String((r(3) << 16) | (r(4) << 8) | r(5)).padStart(8, "0");
    const token = `${r(2) % 2 ? "-" : ""}${r(1) % 3 === 0 ? 1 + (r(1) % 9) : 0}.${fraction.slice(0, 1 + (r(7) % 8))}`;
    text += (i === 0 ? "" : r(0) % 2 ? ", " : ",") + token;
  }
  return utf8.encode(`${text}]`);
}

/** Where the native loops split [i, n): the first comma at or past the middle. */
function splitComma(buf: Uint8Array, i: number, n: number): number {
  return buf.indexOf(0x2c, i + Math.floor((n - i) / 2));
}

/**
 * The edits made around the split comma `s` (in place, the same length, so the split stays where
 * it was): each makes one half stop where the other does not, or the join meet whitespace.
 */
const SPLIT_EDITS: readonly ((buf: Uint8Array, s: number) => void)[] = [
  () => {},
  // Not a value right after the comma: the second half takes nothing.
  (buf, s) => {
    buf[buf[s + 1] === 0x20 ? s + 2 : s + 1] = 0x78;
  },
  // A space before the comma: the first half ends on it, the halves still join.
  (buf, s) => {
    if (buf[s - 2] !== 0x2e && buf[s - 2] !== 0x2c && buf[s - 2] !== 0x20) buf[s - 1] = 0x20;
  },
  // Both: the first half ends on the space, the second takes nothing, and the run ends after the last value.
  (buf, s) => {
    if (buf[s - 2] !== 0x2e && buf[s - 2] !== 0x2c && buf[s - 2] !== 0x20) buf[s - 1] = 0x20;
    buf[buf[s + 1] === 0x20 ? s + 2 : s + 1] = 0x78;
  },
  // An exponent a few values on: the second half leaves its blocks for the general path.
  (buf, s) => {
    const point = buf.indexOf(0x2e, s + 40);
    if (buf[point - 1] !== 0x2d) buf[point] = 0x65;
  },
  // Something malformed before the middle: the first half stops short, and the second half's work is dropped.
  (buf, s) => {
    buf[buf.lastIndexOf(0x2c, s - 5000) + 1] = 0x78;
  },
  // A bracket right after the comma: stepped over by the store, a stop for the count.
  (buf, s) => {
    buf[s + 1] = 0x5d;
  },
];

withNative("the native reader loops on two cores", () => {
  const splits = () => kernels.readerSplits!();

  it("store what the JavaScript loop stores, stopping where it stops, over long stretches split between cores", () => {
    const [joined0, resumed0] = splits();
    let cases = 0;
    for (let seed = 0; seed < 6; seed++) {
      const original = longRun(900 + seed, 300_000 + seed * 40_000);
      for (const edit of SPLIT_EDITS) {
        const buf = original.slice();
        // From the first value, from a comma, from the value after it.
        const comma = buf.indexOf(0x2c, 1000);
        const i = [1, comma, comma + 1][seed % 3]!;
        edit(buf, splitComma(buf, i, buf.length));
        // How many values the stretch holds, then asks that stop in either half, at and around the helper's pieces.
        const all = new Float32Array(200_000);
        portableStoreFloat32Run(buf, i, true, all, 0, 0, all.length);
        const total = storedUpTo;
        const firstHalf = portableStoreFloat32Run(buf.subarray(0, splitComma(buf, i, buf.length) + 1), i, false, all, 0, 0, all.length) && storedUpTo;
        for (const endLeaf of [
          all.length,
          total,
          total + 1,
          firstHalf - 3,
          firstHalf + 1,
          firstHalf + 8191,
          firstHalf + 8192,
          firstHalf + 8193,
          firstHalf + 20_000,
        ]) {
          for (const cut of [buf.length, buf.length - 7]) {
            if (endLeaf <= 0) continue;
            const text = buf.subarray(0, cut);
            const final = cut === buf.length;
            const native = new Float32Array(endLeaf + 16);
            const portable = new Float32Array(endLeaf + 16);
            const nativeEnd = storeFloat32Run(text, i, final, native, 0, 0, endLeaf);
            const nativeLeaf = storedUpTo;
            const portableEnd = portableStoreFloat32Run(text, i, final, portable, 0, 0, endLeaf);
            expect([nativeEnd, nativeLeaf]).toEqual([portableEnd, storedUpTo]);
            expect(Buffer.from(native.buffer).equals(Buffer.from(portable.buffer))).toBe(true);
            cases++;
          }
        }
      }
    }
    const [joined, resumed] = splits();
    // The two-core route ran, joined, and went on past the helper's pieces where asked to stop there.
    expect(joined - joined0).toBeGreaterThan(cases / 2);
    expect(resumed - resumed0).toBeGreaterThan(cases / 8);
  });

  it("count what the JavaScript scanner counts, stopping where it stops, over long stretches split between cores", () => {
    const numberRun = kernels.numberRun!;
    const state = new Float64Array(1);
    const [joined0] = splits();
    let cases = 0;
    for (let seed = 0; seed < 6; seed++) {
      const original = longRun(950 + seed, 300_000 + seed * 40_000);
      for (const edit of SPLIT_EDITS) {
        const buf = original.slice();
        // From a comma after a value, as the scanner calls it.
        const i = buf.indexOf(0x2c);
        edit(buf, splitComma(buf, i, buf.length));
        for (const [kinds, dim, count] of [
          [1 | 2 | 128, -1, 0],
          [1 | 2, -1, 3],
          [1 | 2 | 128, 10_000_000, 5],
          // A length the stretch may reach: not split, and still the same.
          [1 | 2 | 128, 20_000, 0],
        ] as const) {
          for (const cut of [buf.length, buf.length - 7]) {
            const text = buf.subarray(0, cut);
            const nativeAt = numberRun(text, i, count, dim, kinds, MAX_NUMBER_LENGTH, state);
            const portableAt = portableNumberRun(text, i, count, dim, kinds, MAX_NUMBER_LENGTH);
            expect([nativeAt, state[0]]).toEqual([portableAt, countedUpTo]);
            cases++;
          }
        }
      }
    }
    const [joined] = splits();
    expect(joined - joined0).toBeGreaterThan(cases / 4);
  });
});
