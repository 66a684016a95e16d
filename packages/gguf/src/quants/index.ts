// TEMPORARY stub so the container code compiles until branch gguf-kernels lands its kernels here
// (merge takes theirs). Sizes from the ggml type table; the kernels refuse.
const SIZES: Record<number, [string, number, number]> = {
  0: ["F32", 1, 4],
  1: ["F16", 1, 2],
  2: ["Q4_0", 32, 18],
  3: ["Q4_1", 32, 20],
  6: ["Q5_0", 32, 22],
  7: ["Q5_1", 32, 24],
  8: ["Q8_0", 32, 34],
  9: ["Q8_1", 32, 40],
  10: ["Q2_K", 256, 84],
  11: ["Q3_K", 256, 110],
  12: ["Q4_K", 256, 144],
  13: ["Q5_K", 256, 176],
  14: ["Q6_K", 256, 210],
  15: ["Q8_K", 256, 292],
  16: ["IQ2_XXS", 256, 66],
  17: ["IQ2_XS", 256, 74],
  18: ["IQ3_XXS", 256, 98],
  19: ["IQ1_S", 256, 50],
  20: ["IQ4_NL", 32, 18],
  21: ["IQ3_S", 256, 110],
  22: ["IQ2_S", 256, 82],
  23: ["IQ4_XS", 256, 136],
  24: ["I8", 1, 1],
  25: ["I16", 1, 2],
  26: ["I32", 1, 4],
  27: ["I64", 1, 8],
  28: ["F64", 1, 8],
  29: ["IQ1_M", 256, 56],
  30: ["BF16", 1, 2],
  34: ["TQ1_0", 256, 54],
  35: ["TQ2_0", 256, 66],
  39: ["MXFP4", 32, 17],
  40: ["NVFP4", 64, 36],
};
export function ggmlTypeInfo(type: number): { name: string; blockSize: number; typeSize: number } | undefined {
  const s = SIZES[type];
  return s === undefined ? undefined : { name: s[0], blockSize: s[1], typeSize: s[2] };
}
export function dequantizeRows(type: number, src: Uint8Array, dst: Float32Array): void {
  if (type === 8) {
    // Q8_0 only, for the container tests until the kernels land.
    const view = new DataView(src.buffer, src.byteOffset, src.byteLength);
    for (let b = 0; b < src.byteLength / 34; b++) {
      const h = view.getUint16(b * 34, true);
      const e = (h >> 10) & 31,
        m = h & 1023;
      const d = (h & 0x8000 ? -1 : 1) * (e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (1 + m / 1024) * 2 ** (e - 15));
      for (let i = 0; i < 32; i++) dst[b * 32 + i] = Math.fround(d * view.getInt8(b * 34 + 2 + i));
    }
    return;
  }
  throw new Error(`dequantizeRows: type ${type} not in the stub`);
}
export function quantizeRows(type: number, _src: Float32Array, _dst: Uint8Array): void {
  throw new Error(`quantizeRows: type ${type} not in the stub`);
}
