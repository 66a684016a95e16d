/**
 * Dequantization of the IQ types (lattice grids with sign masks, and the non-linear 4-bit ones), in
 * gguf-py's order of operations: the group scale first (d·(0.5 + s)·¼ and so on), then scale·grid, then
 * the sign (exact). The grids come from iqGrids.ts, unpacked on first use.
 */
import { halfToFloatTable } from "./floatBits.js";
import { IQ1_S_GRID, IQ2_S_GRID, IQ2_XS_GRID, IQ2_XXS_GRID, IQ3_S_GRID, IQ3_XXS_GRID, type PackedGrid } from "./iqGrids.js";

const fr = Math.fround;

const unpacked = new Map<PackedGrid, Float32Array>();

/** A grid as rows·width float32 values. */
function grid(packed: PackedGrid): Float32Array {
  let out = unpacked.get(packed);
  if (out !== undefined) return out;
  const raw = atob(packed.data);
  out = new Float32Array(packed.rows * packed.width);
  const mask = (1 << packed.bits) - 1;
  let acc = 0;
  let have = 0;
  let at = 0;
  for (let i = 0; i < out.length; i++) {
    while (have < packed.bits) {
      acc |= raw.charCodeAt(at++) << have;
      have += 8;
    }
    out[i] = packed.levels[acc & mask]!;
    acc >>>= packed.bits;
    have -= packed.bits;
  }
  unpacked.set(packed, out);
  return out;
}

/**
 * The 128 sign masks of IQ2/IQ3: seven sign bits chosen freely, the eighth making the count of
 * negatives even (i | parity(i) << 7).
 */
const KSIGNS = (() => {
  const out = new Uint8Array(128);
  for (let i = 0; i < 128; i++) {
    let parity = 0;
    for (let b = i; b !== 0; b >>= 1) parity ^= b & 1;
    out[i] = i | (parity << 7);
  }
  return out;
})();

/** IQ4_NL's and IQ4_XS's sixteen levels. */
const KVALUES_IQ4 = new Int8Array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]);

function u32(src: Uint8Array, at: number): number {
  return (src[at]! | (src[at + 1]! << 8) | (src[at + 2]! << 16) | (src[at + 3]! << 24)) >>> 0;
}

/** Writes 8 values db·row·sign: `signs` bit k negates value k. */
function put8(dst: Float32Array, o: number, db: number, g: Float32Array, row: number, signs: number): void {
  for (let k = 0; k < 8; k++) {
    const v = fr(db * g[row + k]!);
    dst[o + k] = (signs >> k) & 1 ? -v : v;
  }
}

/** IQ2_XXS: f16 d, then per 32 values a u32 of four grid bytes and a u32 of 4×7 sign bits and a 4-bit scale. */
export function dequantizeIQ2_XXS(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  const g = grid(IQ2_XXS_GRID);
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 66, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let ib = 0; ib < 8; ib++) {
      const q = s + 2 + 8 * ib;
      const aux = u32(src, q + 4);
      const db = fr(fr(d * (0.5 + (aux >>> 28))) * 0.25);
      for (let l = 0; l < 4; l++) put8(dst, o + 32 * ib + 8 * l, db, g, src[q + l]! * 8, KSIGNS[(aux >>> (7 * l)) & 127]!);
    }
  }
}

/** IQ2_XS: f16 d, 32 u16 (9-bit grid index, 7-bit sign index), 8 bytes of two 4-bit scales. */
export function dequantizeIQ2_XS(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  const g = grid(IQ2_XS_GRID);
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 74, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let e = 0; e < 32; e++) {
      const sc = (src[s + 66 + (e >> 2)]! >> (4 * ((e >> 1) & 1))) & 15;
      const db = fr(fr(d * (0.5 + sc)) * 0.25);
      const q = src[s + 2 + 2 * e]! | (src[s + 3 + 2 * e]! << 8);
      put8(dst, o + 8 * e, db, g, (q & 511) * 8, KSIGNS[q >> 9]!);
    }
  }
}

/** IQ2_S: f16 d, qs[32] (low 8 index bits), signs[32], qh[8] (2 high index bits each), scales[8]. */
export function dequantizeIQ2_S(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  const g = grid(IQ2_S_GRID);
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 82, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let e = 0; e < 32; e++) {
      const sc = (src[s + 74 + (e >> 2)]! >> (4 * ((e >> 1) & 1))) & 15;
      const db = fr(fr(d * (0.5 + sc)) * 0.25);
      const index = src[s + 2 + e]! | (((src[s + 66 + (e >> 2)]! >> (2 * (e & 3))) & 3) << 8);
      put8(dst, o + 8 * e, db, g, index * 8, src[s + 34 + e]!);
    }
  }
}

/** IQ3_XXS: f16 d, qs[64] (grid bytes, 4 values each), then per 32 values a u32 of 4×7 sign bits and a 4-bit scale. */
export function dequantizeIQ3_XXS(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  const g = grid(IQ3_XXS_GRID);
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 98, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let ib = 0; ib < 8; ib++) {
      const aux = u32(src, s + 66 + 4 * ib);
      const db = fr(fr(d * (0.5 + (aux >>> 28))) * 0.5);
      for (let l = 0; l < 4; l++) {
        const signs = KSIGNS[(aux >>> (7 * l)) & 127]!;
        const at = o + 32 * ib + 8 * l;
        const q = s + 2 + 8 * ib + 2 * l;
        for (let k = 0; k < 8; k++) {
          const v = fr(db * g[src[q + (k >> 2)]! * 4 + (k & 3)]!);
          dst[at + k] = (signs >> k) & 1 ? -v : v;
        }
      }
    }
  }
}

/** IQ3_S: f16 d, qs[64], qh[8] (ninth index bit), signs[32], scales[4] (two 4-bit scales, d·(1 + 2s)). */
export function dequantizeIQ3_S(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  const g = grid(IQ3_S_GRID);
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 110, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let ib = 0; ib < 8; ib++) {
      const sc = (src[s + 106 + (ib >> 1)]! >> (4 * (ib & 1))) & 15;
      const db = fr(d * (1 + 2 * sc));
      for (let l = 0; l < 4; l++) {
        const signs = src[s + 74 + 4 * ib + l]!;
        const at = o + 32 * ib + 8 * l;
        for (let k = 0; k < 8; k++) {
          const e = 8 * ib + 2 * l + (k >> 2);
          const index = src[s + 2 + e]! | (((src[s + 66 + (e >> 3)]! >> (e & 7)) & 1) << 8);
          const v = fr(db * g[index * 4 + (k & 3)]!);
          dst[at + k] = (signs >> k) & 1 ? -v : v;
        }
      }
    }
  }
}

/** IQ1_S: f16 d, qs[32] (low 8 index bits), qh u16[8] (4×3 high index bits, 3-bit scale, delta sign). */
export function dequantizeIQ1_S(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  const g = grid(IQ1_S_GRID);
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 50, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let ib = 0; ib < 8; ib++) {
      const qh = src[s + 34 + 2 * ib]! | (src[s + 35 + 2 * ib]! << 8);
      const dl = fr(d * (2 * ((qh >> 12) & 7) + 1));
      const delta = qh & 0x8000 ? -0.125 : 0.125;
      for (let l = 0; l < 4; l++) {
        const row = (src[s + 2 + 4 * ib + l]! | (((qh >> (3 * l)) & 7) << 8)) * 8;
        const at = o + 32 * ib + 8 * l;
        for (let k = 0; k < 8; k++) dst[at + k] = dl * (g[row + k]! + delta);
      }
    }
  }
}

/** IQ1_M: qs[32], qh[16] (3 high index bits and a delta sign per nibble), scales u16[4] (3-bit scales; f16 d in the top nibbles). */
export function dequantizeIQ1_M(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  const g = grid(IQ1_S_GRID);
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 56, o += 256) {
    const s0 = src[s + 48]! | (src[s + 49]! << 8);
    const s1 = src[s + 50]! | (src[s + 51]! << 8);
    const s2 = src[s + 52]! | (src[s + 53]! << 8);
    const s3 = src[s + 54]! | (src[s + 55]! << 8);
    const d = half[(s0 >> 12) | ((s1 >> 8) & 0xf0) | ((s2 >> 4) & 0xf00) | (s3 & 0xf000)]!;
    for (let e = 0; e < 32; e++) {
      const i = e >> 1; // the 3-bit scale of 16 values: u16[i >> 2] >> 3·(i & 3)
      const word = src[s + 48 + 2 * (i >> 2)]! | (src[s + 49 + 2 * (i >> 2)]! << 8);
      const dl = fr(d * (2 * ((word >> (3 * (i & 3))) & 7) + 1));
      const h = (src[s + 32 + (e >> 1)]! >> (4 * (e & 1))) & 15;
      const delta = h & 8 ? -0.125 : 0.125;
      const row = (src[s + e]! | ((h & 7) << 8)) * 8;
      for (let k = 0; k < 8; k++) dst[o + 8 * e + k] = dl * (g[row + k]! + delta);
    }
  }
}

/** IQ4_NL: f16 d, 16 bytes of nibbles indexing the non-linear levels. */
export function dequantizeIQ4_NL(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 18, o += 32) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const q = src[s + 2 + j]!;
      dst[o + j] = d * KVALUES_IQ4[q & 15]!;
      dst[o + j + 16] = d * KVALUES_IQ4[q >> 4]!;
    }
  }
}

/** IQ4_XS: f16 d, scales_h u16, scales_l[4], qs[128]; eight 6-bit scales (offset 32) over IQ4_NL's levels. */
export function dequantizeIQ4_XS(src: Uint8Array, dst: Float32Array, blocks: number): void {
  const half = halfToFloatTable();
  for (let b = 0, s = 0, o = 0; b < blocks; b++, s += 136, o += 256) {
    const d = half[src[s]! | (src[s + 1]! << 8)]!;
    const high = src[s + 2]! | (src[s + 3]! << 8);
    for (let ib = 0; ib < 8; ib++) {
      const low = (src[s + 4 + (ib >> 1)]! >> (4 * (ib & 1))) & 15;
      const dl = fr(d * ((low | (((high >> (2 * ib)) & 3) << 4)) - 32));
      const q = s + 8 + 16 * ib;
      const at = o + 32 * ib;
      for (let j = 0; j < 16; j++) {
        const byte = src[q + j]!;
        dst[at + j] = dl * KVALUES_IQ4[byte & 15]!;
        dst[at + j + 16] = dl * KVALUES_IQ4[byte >> 4]!;
      }
    }
  }
}
