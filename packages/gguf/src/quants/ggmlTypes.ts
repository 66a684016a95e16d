/**
 * ggml's type ids and block geometry, as ggml's own table (`ggml_get_type_traits`) gives them:
 * a row of `n` elements of a type takes `n / blockSize * typeSize` bytes.
 */

/** The block geometry of one ggml type. */
export interface GgmlTypeInfo {
  /** gguf-py's name (`GGMLQuantizationType`), e.g. `Q4_K`. */
  name: string;
  /** Elements per block (1 for the plain types). */
  blockSize: number;
  /** Bytes per block. */
  typeSize: number;
}

/** Ids of the types the kernels name in code. */
export const GgmlType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ1_S: 19,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  IQ1_M: 29,
  BF16: 30,
  TQ1_0: 34,
  TQ2_0: 35,
  MXFP4: 39,
  NVFP4: 40,
  Q1_0: 41,
  Q2_0: 42,
} as const;

/** [id, name, block size, bytes per block]; ids 4, 5, 31–33 and 36–38 were removed from the format. */
const TABLE: readonly (readonly [number, string, number, number])[] = [
  [0, "F32", 1, 4],
  [1, "F16", 1, 2],
  [2, "Q4_0", 32, 18],
  [3, "Q4_1", 32, 20],
  [6, "Q5_0", 32, 22],
  [7, "Q5_1", 32, 24],
  [8, "Q8_0", 32, 34],
  // gguf-py's table says 40 bytes (an old layout with F32 scales); ggml's loader, which decides, uses 36
  [9, "Q8_1", 32, 36],
  [10, "Q2_K", 256, 84],
  [11, "Q3_K", 256, 110],
  [12, "Q4_K", 256, 144],
  [13, "Q5_K", 256, 176],
  [14, "Q6_K", 256, 210],
  [15, "Q8_K", 256, 292],
  [16, "IQ2_XXS", 256, 66],
  [17, "IQ2_XS", 256, 74],
  [18, "IQ3_XXS", 256, 98],
  [19, "IQ1_S", 256, 50],
  [20, "IQ4_NL", 32, 18],
  [21, "IQ3_S", 256, 110],
  [22, "IQ2_S", 256, 82],
  [23, "IQ4_XS", 256, 136],
  [24, "I8", 1, 1],
  [25, "I16", 1, 2],
  [26, "I32", 1, 4],
  [27, "I64", 1, 8],
  [28, "F64", 1, 8],
  [29, "IQ1_M", 256, 56],
  [30, "BF16", 1, 2],
  [34, "TQ1_0", 256, 54],
  [35, "TQ2_0", 256, 66],
  [39, "MXFP4", 32, 17],
  [40, "NVFP4", 64, 36],
  [41, "Q1_0", 128, 18],
  [42, "Q2_0", 64, 18],
];

const BY_ID = new Map<number, GgmlTypeInfo>(TABLE.map(([id, name, blockSize, typeSize]) => [id, Object.freeze({ name, blockSize, typeSize })]));

/** The geometry of ggml type `type`, or undefined for an id ggml does not know (or removed). */
export function ggmlTypeInfo(type: number): GgmlTypeInfo | undefined {
  return BY_ID.get(type);
}

/**
 * The types `dequantizeRows` (quants/index.ts) converts: every type gguf-py dequantizes, and F32,
 * F16 and BF16. Here, not there, so that reading a GGUF whose tensors need none of the kernels
 * loads none of them (about 4 ms of start-up).
 */
const DEQUANTIZABLE = new Set<number>([
  GgmlType.F32,
  GgmlType.F16,
  GgmlType.BF16,
  GgmlType.Q4_0,
  GgmlType.Q4_1,
  GgmlType.Q5_0,
  GgmlType.Q5_1,
  GgmlType.Q8_0,
  GgmlType.Q2_K,
  GgmlType.Q3_K,
  GgmlType.Q4_K,
  GgmlType.Q5_K,
  GgmlType.Q6_K,
  GgmlType.IQ2_XXS,
  GgmlType.IQ2_XS,
  GgmlType.IQ2_S,
  GgmlType.IQ3_XXS,
  GgmlType.IQ3_S,
  GgmlType.IQ1_S,
  GgmlType.IQ1_M,
  GgmlType.IQ4_NL,
  GgmlType.IQ4_XS,
  GgmlType.TQ1_0,
  GgmlType.TQ2_0,
  GgmlType.MXFP4,
  GgmlType.NVFP4,
]);

/** Whether `dequantizeRows` converts type `type` (every type gguf-py dequantizes, and F32/F16/BF16). */
export function canDequantize(type: number): boolean {
  return DEQUANTIZABLE.has(type);
}
