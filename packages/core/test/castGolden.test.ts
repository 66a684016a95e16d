/**
 * Our casts against torch's `Tensor.to` (fixtures/casts, made by fixtures/gen_casts.py): every bit
 * pattern of each 8- and 16-bit float, seeded float32 and float64 sets of every class of value,
 * and the range edges of every integer dtype. Bit for bit; no Python here. The float casts run
 * twice: through the JavaScript loops, and through the native module's (`kernels.castFloats`).
 */
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Dtype, INTEGER_RANGES, castTensor, dtypeInfo, isStConvertError, kernels, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import "@st-convert/core/node";
import { fixturePath } from "@st-convert/testing";

interface Pair {
  from: Dtype;
  to: Dtype;
  input: string | null;
  output?: string;
  count?: number;
  reference: string;
  composedOf?: string[];
}

const manifest = JSON.parse(readFileSync(fixturePath("casts", "manifest.json"), "utf8")) as { torch: string; pairs: Pair[] };
const width = (dtype: Dtype) => dtypeInfo(dtype).bits / 8;
const read = (name: string) => new Uint8Array(readFileSync(fixturePath("casts", name)));

/** Every bit pattern of an 8- or 16-bit dtype, in order, little-endian. */
function allPatterns(dtype: Dtype): Uint8Array {
  const n = width(dtype) === 2 ? 0x10000 : 0x100;
  const bytes = new Uint8Array(n * width(dtype));
  for (let x = 0; x < n; x++) {
    bytes[x * width(dtype)] = x & 0xff;
    if (width(dtype) === 2) bytes[x * 2 + 1] = x >>> 8;
  }
  return bytes;
}

const inputOf = (pair: Pair) => (pair.input === null ? allPatterns(pair.from) : read(pair.input));

async function cast(from: Dtype, to: Dtype, bytes: Uint8Array): Promise<Uint8Array> {
  const n = bytes.byteLength / width(from);
  return readTensorBytes(castTensor(tensorFromBytes({ name: "x", dtype: from, shape: [n] }, bytes), to));
}

const hex = (bytes: Uint8Array, at: number, size: number) =>
  [...bytes.subarray(at * size, (at + 1) * size)]
    .reverse()
    .map((b) => b.toString(16).padStart(2, "0"))
    .join("");

/** Fails naming the first few elements where ours and torch's differ, in hex. */
function expectSameBits(input: Uint8Array, from: Dtype, expected: Uint8Array, actual: Uint8Array, to: Dtype): void {
  expect(actual.byteLength).toBe(expected.byteLength);
  if (Buffer.compare(actual, expected) !== 0) expect(differences(input, from, expected, actual, to)).toEqual([]);
}

/** The first few elements where ours and torch's differ, in hex: readable when a test fails. */
function differences(input: Uint8Array, from: Dtype, expected: Uint8Array, actual: Uint8Array, to: Dtype): string[] {
  const found: string[] = [];
  const n = expected.byteLength / width(to);
  for (let i = 0; i < n && found.length < 8; i++) {
    const e = hex(expected, i, width(to));
    const a = hex(actual, i, width(to));
    if (e !== a) found.push(`#${i} ${from} 0x${hex(input, i, width(from))}: torch 0x${e}, ours 0x${a}`);
  }
  return found;
}

const floatPairs = manifest.pairs.filter((p) => !INTEGER_RANGES[p.from as keyof typeof INTEGER_RANGES]);
const integerPairs = manifest.pairs.filter((p) => INTEGER_RANGES[p.from as keyof typeof INTEGER_RANGES]);

const nativeCasts = kernels.castFloats;
if (nativeCasts === undefined && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error("the native module's cast loops are required here");
const loops = nativeCasts === undefined ? ["JavaScript"] : ["JavaScript", "native"];

describe.each(loops)(`float casts equal torch ${manifest.torch}'s, bit for bit (%s loops)`, (loop) => {
  // The JavaScript run takes the native loops out of the registry for its tests, and puts them back.
  beforeAll(() => {
    if (loop === "JavaScript") delete kernels.castFloats;
  });
  afterAll(() => {
    if (nativeCasts !== undefined) kernels.castFloats = nativeCasts;
  });

  it("has every pair of the nine float dtypes", () => expect(floatPairs.length).toBe(72));

  it.each(floatPairs.filter((p) => p.output !== undefined).map((p) => [`${p.from} -> ${p.to}`, p] as const))("%s", async (_, pair) => {
    const input = inputOf(pair);
    const expected = read(pair.output!);
    expect(expected.byteLength / width(pair.to)).toBe(input.byteLength / width(pair.from));
    const actual = await cast(pair.from, pair.to, input);
    expectSameBits(input, pair.from, expected, actual, pair.to);
  });

  // Spared files (512 KiB each): gen_casts.py checked that torch's F16/BF16 -> F64 is its -> F32
  // followed by its F32 -> F64; ours must be the same composition, on torch's -> F32 output.
  it.each(floatPairs.filter((p) => p.composedOf !== undefined).map((p) => [`${p.from} -> ${p.to}`, p] as const))("%s (as -> F32 -> F64)", async (_, pair) => {
    const input = inputOf(pair);
    const viaF32 = read(`${pair.from}-F32.bin`);
    const expected = await cast("F32", "F64", viaF32);
    const actual = await cast(pair.from, "F64", input);
    expectSameBits(input, pair.from, expected, actual, "F64");
  });
});

/** The values of a little-endian integer array, as BigInts. */
function integers(dtype: Dtype, bytes: Uint8Array): bigint[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = bytes.byteLength / width(dtype);
  const out: bigint[] = [];
  for (let i = 0; i < n; i++) {
    const at = i * width(dtype);
    const signed = dtype.startsWith("I");
    switch (width(dtype)) {
      case 1:
        out.push(BigInt(signed ? view.getInt8(at) : view.getUint8(at)));
        break;
      case 2:
        out.push(BigInt(signed ? view.getInt16(at, true) : view.getUint16(at, true)));
        break;
      case 4:
        out.push(BigInt(signed ? view.getInt32(at, true) : view.getUint32(at, true)));
        break;
      default:
        out.push(signed ? view.getBigInt64(at, true) : view.getBigUint64(at, true));
    }
  }
  return out;
}

function select(bytes: Uint8Array, size: number, keep: readonly number[]): Uint8Array {
  const out = new Uint8Array(keep.length * size);
  keep.forEach((i, k) => out.set(bytes.subarray(i * size, (i + 1) * size), k * size));
  return out;
}

describe("integer casts: exact where the value fits (as torch), refused where it does not", () => {
  it("has every pair of the nine integer dtypes", () => expect(integerPairs.length).toBe(72));

  it.each(integerPairs.map((p) => [`${p.from} -> ${p.to}`, p] as const))("%s", async (_, pair) => {
    const input = read(pair.input!);
    const torch = read(pair.output!);
    const values = integers(pair.from, input);
    const [lo, hi] = INTEGER_RANGES[pair.to as keyof typeof INTEGER_RANGES];
    const fits = values.map((v, i) => [v >= lo && v <= hi, i] as const);
    const fitting = fits.filter(([ok]) => ok).map(([, i]) => i);
    expect(fitting.length).toBeGreaterThan(0);
    const ours = await cast(pair.from, pair.to, select(input, width(pair.from), fitting));
    expect(ours).toEqual(select(torch, width(pair.to), fitting));
    const firstBad = fits.findIndex(([ok]) => !ok);
    if (firstBad < 0) {
      expect(await cast(pair.from, pair.to, input)).toEqual(torch);
      return;
    }
    const error = await cast(pair.from, pair.to, input).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isStConvertError(error)).toBe(true);
    expect(error).toMatchObject({ code: "CastOutOfRange", tensor: "x" });
    expect((error as Error).message).toContain(`element ${firstBad} is ${values[firstBad]}`);
  });
});
