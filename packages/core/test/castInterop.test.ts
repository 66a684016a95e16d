/**
 * Casts against live torch: a few million float32 and float64 values drawn in Python from a seed
 * (every class of value, and uniform random bits: NaN payloads, subnormals, overflow), cast by
 * torch's `Tensor.to` to every float dtype and by ours, compared bit for bit.
 *
 * torch's CPU kernels differ in the NaNs they write (fixtures/gen_casts.py says how): ours must
 * equal, bit for bit, the capability st-convert follows for the target (the scalar `default`
 * for BF16, the native one for the others), and equal the other capability everywhere except
 * where both wrote a NaN.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type Dtype, FLOAT_CAST_DTYPES, castTensor, dtypeInfo, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { describeInterop, makeTempDir, runPython } from "@st-convert/testing";

/** Seed of the values; ST_CONVERT_CAST_SEED draws another set. */
const SEED = Number(process.env.ST_CONVERT_CAST_SEED ?? 14);
/** Uniform random values, and as many random ones in the small targets' exponents, per source dtype (besides the fixed classes). */
const RANDOM_COUNT = 1_500_000;

const width = (dtype: Dtype) => dtypeInfo(dtype).bits / 8;

/** Whether element `i` of `bytes` (little-endian `dtype`) is a NaN. */
function isNaNAt(dtype: Dtype, bytes: Uint8Array, i: number): boolean {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (dtype) {
    case "F64":
      return Number.isNaN(view.getFloat64(i * 8, true));
    case "F32":
      return Number.isNaN(view.getFloat32(i * 4, true));
    case "F16": {
      const b = view.getUint16(i * 2, true);
      return (b & 0x7c00) === 0x7c00 && (b & 0x3ff) !== 0;
    }
    case "BF16": {
      const b = view.getUint16(i * 2, true);
      return (b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0;
    }
    case "F8_E4M3":
      return (bytes[i]! & 0x7f) === 0x7f;
    case "F8_E5M2":
      return (bytes[i]! & 0x7c) === 0x7c && (bytes[i]! & 3) !== 0;
    case "F8_E8M0":
      return bytes[i] === 0xff;
    default:
      return bytes[i] === 0x80;
  }
}

function differsAt(a: Uint8Array, b: Uint8Array, i: number, size: number): boolean {
  for (let k = i * size; k < (i + 1) * size; k++) if (a[k] !== b[k]) return true;
  return false;
}

const hexAt = (bytes: Uint8Array, i: number, size: number) =>
  [...bytes.subarray(i * size, (i + 1) * size)]
    .reverse()
    .map((b) => b.toString(16).padStart(2, "0"))
    .join("");

describeInterop(`casts equal torch's Tensor.to on millions of seeded values (seed ${SEED})`, (python) => {
  const { dir, cleanup } = makeTempDir("st-convert-casts-");
  afterAll(cleanup);
  let capabilities: { native: string; default: string } = { native: "", default: "" };
  beforeAll(() => {
    const out = runPython(python, "gen_casts.py", ["interop", String(SEED), String(RANDOM_COUNT), dir])
      .trim()
      .split("\n");
    capabilities = (JSON.parse(out.at(-1)!) as { capabilities: typeof capabilities }).capabilities;
  }, 600_000);

  const pairs = (["F32", "F64"] as const).flatMap((from) => FLOAT_CAST_DTYPES.filter((to) => to !== from).map((to) => [from, to] as const));

  it.each(pairs)("%s -> %s", async (from, to) => {
    const input = new Uint8Array(readFileSync(join(dir, `${from}.bin`)));
    const n = input.byteLength / width(from);
    expect(n).toBeGreaterThan(3_000_000);
    const ours = await readTensorBytes(castTensor(tensorFromBytes({ name: "x", dtype: from, shape: [n] }, input), to));
    const followed = to === "BF16" ? "default" : "native";
    const other = followed === "default" ? "native" : "default";
    const reference = new Uint8Array(readFileSync(join(dir, followed, `${from}-${to}.bin`)));
    const second = new Uint8Array(readFileSync(join(dir, other, `${from}-${to}.bin`)));
    const size = width(to);
    const mismatches: string[] = [];
    if (Buffer.compare(ours, reference) !== 0) {
      for (let i = 0; i < n && mismatches.length < 8; i++) {
        if (differsAt(ours, reference, i, size)) {
          mismatches.push(
            `#${i} ${from} 0x${hexAt(input, i, width(from))}: torch (${capabilities[followed]}) 0x${hexAt(reference, i, size)}, ours 0x${hexAt(ours, i, size)}`,
          );
        }
      }
    }
    expect(mismatches).toEqual([]);
    // The other capability: the same bits, but where both wrote a NaN (possibly another one).
    if (Buffer.compare(ours, second) !== 0) {
      const unexplained: string[] = [];
      for (let i = 0; i < n && unexplained.length < 8; i++) {
        if (differsAt(ours, second, i, size) && !(isNaNAt(to, ours, i) && isNaNAt(to, second, i))) {
          unexplained.push(
            `#${i} ${from} 0x${hexAt(input, i, width(from))}: torch (${capabilities[other]}) 0x${hexAt(second, i, size)}, ours 0x${hexAt(ours, i, size)}`,
          );
        }
      }
      expect(unexplained).toEqual([]);
    }
  });
});
