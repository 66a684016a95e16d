/**
 * Dequantization of the K-quants (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, in gguf-py's
 * order of operations (the sub-block scale d·sc is rounded to float32 first, then d·sc·q, then − dmin·m).
 */
import { halfToFloatTable } from "./floatBits.js";

const fr = Math.fround;

/** Q2_K: scales[16] (low nibble scale, high nibble min), qs[64] (2 bits), f16 d, f16 dmin. */
export function dequantizeQ2_K(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 84, o += 256) {
    const d = half[src[s + 80]! | (src[s + 81]! << 8)]!;
    const dmin = half[src[s + 82]! | (src[s + 83]! << 8)]!;
    for (let g = 0; g < 16; g++) {
      const sc = src[s + g]!;
      const dl = fr(d * (sc & 15));
      const ml = fr(dmin * (sc >> 4));
      // element e = 128·n + 32·j + l sits at qs[32·n + l] >> 2j
      const e0 = g * 16;
      const n = e0 >> 7;
      const shift = ((e0 >> 5) & 3) * 2;
      const q0 = s + 16 + n * 32 + (e0 & 31);
      for (let l = 0; l < 16; l++) dst[o + e0 + l] = fr(dl * ((src[q0 + l]! >> shift) & 3)) - ml;
    }
  }
}

/** Q3_K: hmask[32], qs[64], scales[12] (6-bit, offset 32), f16 d. */
export function dequantizeQ3_K(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 110, o += 256) {
    const d = half[src[s + 108]! | (src[s + 109]! << 8)]!;
    for (let g = 0; g < 16; g++) {
      const low = g < 8 ? src[s + 96 + g]! & 15 : src[s + 96 + g - 8]! >> 4;
      const high = (src[s + 104 + (g & 3)]! >> (2 * (g >> 2))) & 3;
      const dl = fr(d * ((low | (high << 4)) - 32));
      const e0 = g * 16;
      const n = e0 >> 7;
      const shift = ((e0 >> 5) & 3) * 2;
      const hshift = e0 >> 5;
      const q0 = s + 32 + n * 32 + (e0 & 31);
      const h0 = s + (e0 & 31);
      for (let l = 0; l < 16; l++) {
        // the high bit set means no offset: q = low2 − 4·(1 − hbit)
        const q = ((src[q0 + l]! >> shift) & 3) - ((((src[h0 + l]! >> hshift) & 1) ^ 1) << 2);
        dst[o + e0 + l] = dl * q;
      }
    }
  }
}

/** The 6-bit scale and min of sub-block j (0–7) of a Q4_K/Q5_K `scales[12]` at `at`. */
function scaleMin(src: Uint8Array, at: number, j: number, out: Int32Array): void {
  if (j < 4) {
    out[0] = src[at + j]! & 63;
    out[1] = src[at + j + 4]! & 63;
  } else {
    out[0] = (src[at + j + 4]! & 15) | ((src[at + j - 4]! >> 6) << 4);
    out[1] = (src[at + j + 4]! >> 4) | ((src[at + j]! >> 6) << 4);
  }
}

const sm = new Int32Array(2);

/** Q4_K: f16 d, f16 dmin, scales[12] (eight 6-bit scales and mins), qs[128] (nibbles, 64 elements per 32 bytes). */
export function dequantizeQ4_K(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 144, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    const dmin = half[src[s + 2]! | (src[s + 3]! << 8)]!;
    for (let c = 0; c < 4; c++) {
      scaleMin(src, s + 4, 2 * c, sm);
      const d0 = fr(d * sm[0]!);
      const m0 = fr(dmin * sm[1]!);
      scaleMin(src, s + 4, 2 * c + 1, sm);
      const d1 = fr(d * sm[0]!);
      const m1 = fr(dmin * sm[1]!);
      const q = s + 16 + 32 * c;
      const e = o + 64 * c;
      for (let l = 0; l < 32; l++) {
        const byte = src[q + l]!;
        dst[e + l] = fr(d0 * (byte & 15)) - m0;
        dst[e + 32 + l] = fr(d1 * (byte >> 4)) - m1;
      }
    }
  }
}

/** Q5_K: as Q4_K with qh[32] (bit k of qh[l] is the fifth bit of element 32·k + l) before qs[128]. */
export function dequantizeQ5_K(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 176, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    const dmin = half[src[s + 2]! | (src[s + 3]! << 8)]!;
    for (let c = 0; c < 4; c++) {
      scaleMin(src, s + 4, 2 * c, sm);
      const d0 = fr(d * sm[0]!);
      const m0 = fr(dmin * sm[1]!);
      scaleMin(src, s + 4, 2 * c + 1, sm);
      const d1 = fr(d * sm[0]!);
      const m1 = fr(dmin * sm[1]!);
      const q = s + 48 + 32 * c;
      const e = o + 64 * c;
      for (let l = 0; l < 32; l++) {
        const byte = src[q + l]!;
        const h = src[s + 16 + l]!;
        dst[e + l] = fr(d0 * ((byte & 15) | (((h >> (2 * c)) & 1) << 4))) - m0;
        dst[e + 32 + l] = fr(d1 * ((byte >> 4) | (((h >> (2 * c + 1)) & 1) << 4))) - m1;
      }
    }
  }
}

/** Q6_K: ql[128] (low nibbles), qh[64] (high 2 bits), scales[16] (int8), f16 d; q − 32. */
export function dequantizeQ6_K(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 210, o += 256) {
    const d = half[src[s + 208]! | (src[s + 209]! << 8)]!;
    for (let g = 0; g < 16; g++) {
      const dl = fr(d * ((src[s + 192 + g]! << 24) >> 24));
      for (let l = 0; l < 16; l++) {
        const e = g * 16 + l;
        const n = e >> 7;
        const r = e & 127;
        const low = (src[s + n * 64 + (r & 63)]! >> (4 * (r >> 6))) & 15;
        const high = (src[s + 128 + n * 32 + (r & 31)]! >> (2 * (r >> 5))) & 3;
        dst[o + e] = dl * ((low | (high << 4)) - 32);
      }
    }
  }
}
