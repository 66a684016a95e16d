/**
 * The 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. Dequantization follows gguf-py's
 * `dequantize_blocks` operation by operation; quantization follows ggml's `quantize_row_*_ref`
 * (which gguf-py's `quantize_blocks` equals), every float32 operation rounded as C rounds it.
 */
import { floatToHalf, halfToFloatTable } from "./floatBits.js";

const fr = Math.fround;

/** Q4_0: f16 d, 16 bytes of nibbles (low nibbles are elements 0–15, high 16–31); x = d·(q − 8). */
export function dequantizeQ4_0(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 18, o += 32) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const q = src[s + 2 + j]!;
      dst[o + j] = d * ((q & 15) - 8);
      dst[o + j + 16] = d * ((q >> 4) - 8);
    }
  }
}

/** Q4_1: f16 d, f16 m, nibbles as Q4_0; x = d·q + m. */
export function dequantizeQ4_1(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 20, o += 32) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    const m = half[src[s + 2]! | (src[s + 3]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const q = src[s + 4 + j]!;
      dst[o + j] = fr(d * (q & 15)) + m;
      dst[o + j + 16] = fr(d * (q >> 4)) + m;
    }
  }
}

/** Q5_0: f16 d, u32 of fifth bits (bit j for element j), nibbles as Q4_0; x = d·(q − 16). */
export function dequantizeQ5_0(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 22, o += 32) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    const qh = src[s + 2]! | (src[s + 3]! << 8) | (src[s + 4]! << 16) | (src[s + 5]! << 24);
    for (let j = 0; j < 16; j++) {
      const q = src[s + 6 + j]!;
      dst[o + j] = d * (((q & 15) | (((qh >>> j) & 1) << 4)) - 16);
      dst[o + j + 16] = d * (((q >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16);
    }
  }
}

/** Q5_1: f16 d, f16 m, u32 of fifth bits, nibbles; x = d·q + m. */
export function dequantizeQ5_1(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 24, o += 32) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    const m = half[src[s + 2]! | (src[s + 3]! << 8)]!;
    const qh = src[s + 4]! | (src[s + 5]! << 8) | (src[s + 6]! << 16) | (src[s + 7]! << 24);
    for (let j = 0; j < 16; j++) {
      const q = src[s + 8 + j]!;
      dst[o + j] = fr(d * ((q & 15) | (((qh >>> j) & 1) << 4))) + m;
      dst[o + j + 16] = fr(d * ((q >> 4) | (((qh >>> (j + 16)) & 1) << 4))) + m;
    }
  }
}

/** Q8_0: f16 d, 32 int8; x = q·d. */
export function dequantizeQ8_0(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 34, o += 32) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let j = 0; j < 32; j++) dst[o + j] = ((src[s + 2 + j]! << 24) >> 24) * d;
  }
}

/** C's `(int8_t)` of a float in range: truncation toward zero (the callers keep it in range but for NaN). */
function truncInt8(x: number): number {
  return (Math.trunc(x) << 24) >> 24;
}

/** ggml's absolute maximum and the value that has it (the first of equal magnitudes). */
function signedMax(src: Float32Array, at: number, n: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < n; j++) {
    const v = src[at + j]!;
    const a = Math.abs(v);
    if (amax < a) {
      amax = a;
      max = v;
    }
  }
  return max;
}

/** `quantize_row_q4_0_ref`. */
export function quantizeQ4_0(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, i = 0, o = 0; b < blocks; b++, i += 32, o += 18) {
    const d = fr(signedMax(src, i, 32) / -8);
    const id = d !== 0 ? fr(1 / d) : 0;
    const h = floatToHalf(d);
    dst[o] = h & 0xff;
    dst[o + 1] = h >> 8;
    for (let j = 0; j < 16; j++) {
      const x0 = fr(src[i + j]! * id);
      const x1 = fr(src[i + 16 + j]! * id);
      const q0 = Math.min(15, truncInt8(fr(x0 + 8.5)));
      const q1 = Math.min(15, truncInt8(fr(x1 + 8.5)));
      dst[o + 2 + j] = (q0 & 0xff) | ((q1 << 4) & 0xff);
    }
  }
}

function minMax(src: Float32Array, at: number, n: number, out: Float64Array): void {
  let min = 3.4028234663852886e38;
  let max = -3.4028234663852886e38;
  for (let j = 0; j < n; j++) {
    const v = src[at + j]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  out[0] = min;
  out[1] = max;
}

const range = new Float64Array(2);

/** `quantize_row_q4_1_ref`. */
export function quantizeQ4_1(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, i = 0, o = 0; b < blocks; b++, i += 32, o += 20) {
    minMax(src, i, 32, range);
    const min = range[0]!;
    const d = fr(fr(range[1]! - min) / 15);
    const id = d !== 0 ? fr(1 / d) : 0;
    const hd = floatToHalf(d);
    const hm = floatToHalf(min);
    dst[o] = hd & 0xff;
    dst[o + 1] = hd >> 8;
    dst[o + 2] = hm & 0xff;
    dst[o + 3] = hm >> 8;
    for (let j = 0; j < 16; j++) {
      const x0 = fr(fr(src[i + j]! - min) * id);
      const x1 = fr(fr(src[i + 16 + j]! - min) * id);
      const q0 = Math.min(15, truncInt8(fr(x0 + 0.5)));
      const q1 = Math.min(15, truncInt8(fr(x1 + 0.5)));
      dst[o + 4 + j] = (q0 & 0xff) | ((q1 << 4) & 0xff);
    }
  }
}

/** `quantize_row_q5_0_ref`. */
export function quantizeQ5_0(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, i = 0, o = 0; b < blocks; b++, i += 32, o += 22) {
    const d = fr(signedMax(src, i, 32) / -16);
    const id = d !== 0 ? fr(1 / d) : 0;
    const h = floatToHalf(d);
    dst[o] = h & 0xff;
    dst[o + 1] = h >> 8;
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const x0 = fr(src[i + j]! * id);
      const x1 = fr(src[i + 16 + j]! * id);
      const q0 = Math.min(31, truncInt8(fr(x0 + 16.5))) & 0xff;
      const q1 = Math.min(31, truncInt8(fr(x1 + 16.5))) & 0xff;
      dst[o + 6 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    dst[o + 2] = qh & 0xff;
    dst[o + 3] = (qh >>> 8) & 0xff;
    dst[o + 4] = (qh >>> 16) & 0xff;
    dst[o + 5] = qh >>> 24;
  }
}

/** `quantize_row_q5_1_ref`. */
export function quantizeQ5_1(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, i = 0, o = 0; b < blocks; b++, i += 32, o += 24) {
    minMax(src, i, 32, range);
    const min = range[0]!;
    const d = fr(fr(range[1]! - min) / 31);
    const id = d !== 0 ? fr(1 / d) : 0;
    const hd = floatToHalf(d);
    const hm = floatToHalf(min);
    dst[o] = hd & 0xff;
    dst[o + 1] = hd >> 8;
    dst[o + 2] = hm & 0xff;
    dst[o + 3] = hm >> 8;
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = Math.trunc(fr(fr(fr(src[i + j]! - min) * id) + 0.5)) & 0xff;
      const q1 = Math.trunc(fr(fr(fr(src[i + 16 + j]! - min) * id) + 0.5)) & 0xff;
      dst[o + 8 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    dst[o + 4] = qh & 0xff;
    dst[o + 5] = (qh >>> 8) & 0xff;
    dst[o + 6] = (qh >>> 16) & 0xff;
    dst[o + 7] = qh >>> 24;
  }
}

/** `quantize_row_q8_0_ref`: d = amax / 127, q = roundf(x / d) (as x · (1/d)). */
export function quantizeQ8_0(src: Float32Array, dst: Uint8Array, blocks: number): void {
  for (let b = 0, i = 0, o = 0; b < blocks; b++, i += 32, o += 34) {
    let amax = 0;
    for (let j = 0; j < 32; j++) {
      const a = Math.abs(src[i + j]!);
      // biome-ignore lint/complexity/useMathMinMax: C's MAX(amax, a): a NaN takes over, and the next number replaces it
      amax = amax > a ? amax : a;
    }
    const d = fr(amax / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    const h = floatToHalf(d);
    dst[o] = h & 0xff;
    dst[o + 1] = h >> 8;
    for (let j = 0; j < 32; j++) {
      // roundf, half away from zero: floor(v + ½) (exact in double) but one lower for a negative tie;
      // no branch on the sign, which random data mispredicts half the time (NaN gives 0, as C's conversion)
      const v = fr(src[i + j]! * id);
      let r = Math.floor(v + 0.5);
      if (r - v === 0.5 && v < 0) r -= 1;
      dst[o + 2 + j] = r | 0;
    }
  }
}
