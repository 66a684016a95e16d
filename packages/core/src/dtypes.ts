/**
 * The safetensors dtype table, the lingua franca of every st-convert adapter.
 *
 * Spec: the `Dtype` enum of huggingface/safetensors `tensor.rs`. Its declaration order is the
 * writer's sort key ("rank"); sizes are in bits because F4 and F6 pack several values per byte.
 */
import { StConvertError } from "./StConvertError.js";

/** A safetensors dtype code, exactly as it is spelled in a header. */
export type Dtype =
  | "BOOL"
  | "F4"
  | "F6_E2M3"
  | "F6_E3M2"
  | "U8"
  | "I8"
  | "F8_E5M2"
  | "F8_E4M3"
  | "F8_E8M0"
  | "F8_E4M3FNUZ"
  | "F8_E5M2FNUZ"
  | "I16"
  | "U16"
  | "F16"
  | "BF16"
  | "I32"
  | "U32"
  | "F32"
  | "C64"
  | "F64"
  | "I64"
  | "U64";

/** What st-convert knows of one dtype. */
export interface DtypeInfo {
  readonly code: Dtype;
  /** Bits per element: 4 or 6 for the packed sub-byte types, else 8 × bytes. */
  readonly bits: number;
  /** Position in the reference enum; the safetensors writer orders tensors by it, descending. */
  readonly rank: number;
  /**
   * The numpy / ml_dtypes `dtype.name` with the same bytes per element (what flax writes and
   * `safetensors.numpy` maps), or undefined for F4/F6: ml_dtypes keeps those one value per byte,
   * while safetensors packs them, so no numpy dtype shares their bytes.
   */
  readonly numpyName: string | undefined;
}

const table: readonly (readonly [Dtype, number, string | undefined])[] = [
  ["BOOL", 8, "bool"],
  ["F4", 4, undefined],
  ["F6_E2M3", 6, undefined],
  ["F6_E3M2", 6, undefined],
  ["U8", 8, "uint8"],
  ["I8", 8, "int8"],
  ["F8_E5M2", 8, "float8_e5m2"],
  ["F8_E4M3", 8, "float8_e4m3fn"],
  ["F8_E8M0", 8, "float8_e8m0fnu"],
  ["F8_E4M3FNUZ", 8, "float8_e4m3fnuz"],
  ["F8_E5M2FNUZ", 8, "float8_e5m2fnuz"],
  ["I16", 16, "int16"],
  ["U16", 16, "uint16"],
  ["F16", 16, "float16"],
  ["BF16", 16, "bfloat16"],
  ["I32", 32, "int32"],
  ["U32", 32, "uint32"],
  ["F32", 32, "float32"],
  ["C64", 64, "complex64"],
  ["F64", 64, "float64"],
  ["I64", 64, "int64"],
  ["U64", 64, "uint64"],
];

/** All 22 dtypes in rank order (the reference enum's declaration order). */
export const DTYPES: readonly DtypeInfo[] = table.map(([code, bits, numpyName], rank) => Object.freeze({ code, bits, rank, numpyName }));

const byNumpyName = new Map<string, DtypeInfo>(DTYPES.filter((d) => d.numpyName !== undefined).map((d) => [d.numpyName!, d]));

/**
 * The dtype whose bytes a numpy / ml_dtypes dtype of this `name` has (`"float32"` → F32,
 * `"bfloat16"` → BF16, `"float8_e4m3fn"` → F8_E4M3), or undefined.
 */
export function dtypeFromNumpyName(name: string): DtypeInfo | undefined {
  return byNumpyName.get(name);
}

const byCode = new Map<string, DtypeInfo>(DTYPES.map((info) => [info.code, info]));

/** True when `value` is one of the 22 dtype codes (case-sensitive, like the reference). */
export function isDtype(value: string): value is Dtype {
  return byCode.has(value);
}

/**
 * The table entry of a dtype code.
 * @throws StConvertError `UnknownDtype` for anything but the 22 codes.
 */
export function dtypeInfo(code: string): DtypeInfo {
  const info = byCode.get(code);
  if (info === undefined) {
    throw new StConvertError("UnknownDtype", `unknown dtype ${JSON.stringify(code)}; expected one of ${DTYPES.map((d) => d.code).join(", ")}`);
  }
  return info;
}

/**
 * Bytes in a tensor of this dtype and shape.
 * @throws StConvertError `MisalignedSlice` when a sub-byte tensor does not end on a byte boundary,
 *   `Unsupported` when the length is past `Number.MAX_SAFE_INTEGER`.
 */
export function tensorByteLength(dtype: Dtype, shape: readonly number[]): number {
  const { bits } = dtypeInfo(dtype);
  // Doubles are exact while every dim and product stays at or below 2^53 − 1; BigInt past that.
  let product = bits;
  for (let k = 0; k < shape.length && product <= Number.MAX_SAFE_INTEGER; k++) {
    const dim = shape[k]!;
    product = Number.isSafeInteger(dim) ? product * dim : Number.NaN;
  }
  const exact = product <= Number.MAX_SAFE_INTEGER;
  const total = exact ? product : shapeProduct(shape) * BigInt(bits);
  if (exact ? product % 8 !== 0 : (total as bigint) % 8n !== 0n) {
    throw new StConvertError("MisalignedSlice", `${dtype} tensor of shape [${shape.join(", ")}] holds ${total} bits, which does not end on a byte boundary`);
  }
  return exact ? product / 8 : toSafeNumber((total as bigint) / 8n, "tensor byte length");
}

/** Elements in a tensor of this shape (1 for a 0-d tensor). */
export function elementCount(shape: readonly number[]): number {
  return toSafeNumber(shapeProduct(shape), "element count");
}

/** The product of the dims, exact (a product of numbers could pass 2^53 and round). */
function shapeProduct(shape: readonly number[]): bigint {
  let elements = 1n;
  for (const dim of shape) elements *= BigInt(dim);
  return elements;
}

/**
 * A u64 or i64 read through BigInt, converted once.
 * @throws StConvertError `Unsupported` past `Number.MAX_SAFE_INTEGER`, where a JS number would round.
 */
export function toSafeNumber(value: bigint, what: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw new StConvertError("Unsupported", `${what} ${value} is past 2^53 - 1, the largest integer st-convert handles exactly`);
  }
  return Number(value);
}
