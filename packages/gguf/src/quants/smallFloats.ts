/**
 * The ternary types (TQ1_0, TQ2_0) and the 4-bit float ones (MXFP4, NVFP4): dequantization as gguf-py,
 * quantization (TQ1_0, TQ2_0, MXFP4) as ggml's `quantize_row_*_ref`.
 */
import { bitsToFloat, floatToHalf, halfToFloatTable } from "./floatBits.js";

const fr = Math.fround;

/** E2M1 values, doubled (the scales carry the half). */
const KVALUES_FP4 = new Int8Array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]);
const POW3 = [1, 3, 9, 27, 81];

/** A base-3 digit packed into a byte as ggml packs five (or four) of them: ((q·3^n mod 256)·3) >> 8. */
function trit(byte: number, n: number): number {
  return ((((byte * POW3[n]!) & 0xff) * 3) >> 8) - 1;
}

/** TQ1_0: qs[48] (five trits a byte), qh[4] (four), f16 d. */
export function dequantizeTQ1_0(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 54, o += 256) {
    const d = half[src[s + 52]! | (src[s + 53]! << 8)]!;
    for (let n = 0; n < 5; n++) {
      for (let m = 0; m < 32; m++) dst[o + 32 * n + m] = d * trit(src[s + m]!, n);
      for (let m = 0; m < 16; m++) dst[o + 160 + 16 * n + m] = d * trit(src[s + 32 + m]!, n);
    }
    for (let n = 0; n < 4; n++) {
      for (let m = 0; m < 4; m++) dst[o + 240 + 4 * n + m] = d * trit(src[s + 48 + m]!, n);
    }
  }
}

/** TQ2_0: qs[64] (four 2-bit values a byte, 0..2 meaning −1..1), f16 d. */
export function dequantizeTQ2_0(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 66, o += 256) {
    const d = half[src[s + 64]! | (src[s + 65]! << 8)]!;
    for (let e = 0; e < 256; e++) {
      const byte = src[s + 32 * (e >> 7) + (e & 31)]!;
      dst[o + e] = d * (((byte >> (2 * ((e >> 5) & 3))) & 3) - 1);
    }
  }
}

/** E8M0 exponent e as a float32 halved: 2^(e − 128), subnormal for e < 2. */
function e8m0Half(e: number): number {
  return bitsToFloat(e < 2 ? 0x00200000 << e : (e - 1) << 23);
}

/** MXFP4: an E8M0 exponent, 16 bytes of E2M1 nibbles. */
export function dequantizeMXFP4(src: Uint8Array, dst: Float32Array, blocks: number): void {
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 17, o += 32) {
    const d = e8m0Half(src[s]!);
    for (let j = 0; j < 16; j++) {
      const q = src[s + 1 + j]!;
      dst[o + j] = d * KVALUES_FP4[q & 15]!;
      dst[o + j + 16] = d * KVALUES_FP4[q >> 4]!;
    }
  }
}

/** An unsigned E4M3 scale (bias 7) halved as gguf-py decodes it; 0 and 0x7F give 0, the sign bit is ignored. */
function ue4m3Half(x: number): number {
  if (x === 0 || x === 0x7f) return 0;
  const exponent = (x >> 3) & 15;
  const mantissa = x & 7;
  const raw = exponent === 0 ? mantissa * 2 ** -9 : (1 + mantissa / 8) * 2 ** (exponent - 7);
  return raw * 0.5;
}

/** NVFP4: four UE4M3 scales, then per 16 values 8 bytes of E2M1 nibbles (low nibbles first). */
export function dequantizeNVFP4(src: Uint8Array, dst: Float32Array, blocks: number): void {
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 36, o += 64) {
    for (let sub = 0; sub < 4; sub++) {
      const d = ue4m3Half(src[s + sub]!);
      const q = s + 4 + 8 * sub;
      const at = o + 16 * sub;
      for (let j = 0; j < 8; j++) {
        const byte = src[q + j]!;
        dst[at + j] = d * KVALUES_FP4[byte & 15]!;
        dst[at + j + 8] = d * KVALUES_FP4[byte >> 4]!;
      }
    }
  }
}

/** ggml's MAX(amax, |x|) over n values (a NaN takes over until the next number). */
function absMax(src: Float32Array, at: number, n: number): number {
  let amax = 0;
  for (let j = 0; j < n; j++) {
    const a = Math.abs(src[at + j]!);
    // biome-ignore lint/complexity/useMathMinMax: C's MAX macro, not Math.max: NaN handling differs
    amax = amax > a ? amax : a;
  }
  return amax;
}

/**
 * `(int)(lroundf(x·id) + 1)`: a ternary digit 0..2. For an infinite or NaN product (an all-subnormal
 * block makes id infinite), glibc's lroundf returns LONG_MIN (x86's conversion of an out-of-range
 * value), and LONG_MIN + 1 narrowed to int is 1.
 */
function ternary(x: number, id: number): number {
  const v = fr(x * id);
  // roundf as floor(v + ½), one lower for a negative tie: no branch on the sign
  let r = Math.floor(v + 0.5);
  if (r - v === 0.5 && v < 0) r -= 1;
  return Number.isFinite(r) ? r + 1 : 1;
}

/** `quantize_row_tq1_0_ref`. */
export function quantizeTQ1_0(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 256, o += 54) {
    const d = absMax(src, x, 256);
    const id = d !== 0 ? fr(1 / d) : 0;
    const h = floatToHalf(d);
    dst[o + 52] = h & 0xff;
    dst[o + 53] = h >> 8;
    for (let m = 0; m < 32; m++) {
      let q = 0;
      for (let n = 0; n < 5; n++) q = (q * 3 + ternary(src[x + m + 32 * n]!, id)) & 0xff;
      dst[o + m] = ((q * 256 + 242) / 243) & 0xff;
    }
    for (let m = 0; m < 16; m++) {
      let q = 0;
      for (let n = 0; n < 5; n++) q = (q * 3 + ternary(src[x + 160 + m + 16 * n]!, id)) & 0xff;
      dst[o + 32 + m] = ((q * 256 + 242) / 243) & 0xff;
    }
    for (let j = 0; j < 4; j++) {
      let q = 0;
      for (let m = 0; m < 4; m++) q = (q * 3 + ternary(src[x + 240 + j + 4 * m]!, id)) & 0xff;
      q = (q * 3) & 0xff;
      dst[o + 48 + j] = ((q * 256 + 242) / 243) & 0xff;
    }
  }
}

/** `quantize_row_tq2_0_ref`. */
export function quantizeTQ2_0(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 256, o += 66) {
    const d = absMax(src, x, 256);
    const id = d !== 0 ? fr(1 / d) : 0;
    const h = floatToHalf(d);
    dst[o + 64] = h & 0xff;
    dst[o + 65] = h >> 8;
    for (let j = 0; j < 2; j++) {
      for (let m = 0; m < 32; m++) {
        let q = 0;
        for (let n = 0; n < 4; n++) q += (ternary(src[x + 128 * j + m + 32 * n]!, id) & 3) << (2 * n);
        dst[o + 32 * j + m] = q & 0xff;
      }
    }
  }
}

/** ggml's `best_index_mxfp4`: the first level nearest x at scale e. */
function nearestFp4(x: number, e: number): number {
  let best = 0;
  let bestErr = Math.abs(fr(KVALUES_FP4[0]! * e - x));
  for (let i = 1; i < 16; i++) {
    const err = Math.abs(fr(fr(KVALUES_FP4[i]! * e) - x));
    if (err < bestErr) {
      best = i;
      bestErr = err;
    }
  }
  return best;
}

/** `quantize_row_mxfp4_ref`: exponent floor(log2 amax) − 2 (biased), levels by nearest error. */
export function quantizeMXFP4(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 32, o += 17) {
    let amax = 0;
    for (let j = 0; j < 32; j++) {
      const a = Math.abs(src[x + j]!);
      if (amax < a) amax = a;
    }
    // log2f rounded to float32 before the floor, as C's; (uint8_t) of a negative wraps as the x86 conversion does
    const e = amax > 0 ? Math.trunc(Math.floor(fr(Math.log2(amax))) - 2 + 127) & 0xff : 0;
    const d = e8m0Half(e);
    dst[o] = e;
    for (let j = 0; j < 16; j++) dst[o + 1 + j] = nearestFp4(src[x + j]!, d) | (nearestFp4(src[x + 16 + j]!, d) << 4);
  }
}
