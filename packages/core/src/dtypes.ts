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
}

const table: readonly (readonly [Dtype, number])[] = [
  ["BOOL", 8],
  ["F4", 4],
  ["F6_E2M3", 6],
  ["F6_E3M2", 6],
  ["U8", 8],
  ["I8", 8],
  ["F8_E5M2", 8],
  ["F8_E4M3", 8],
  ["F8_E8M0", 8],
  ["F8_E4M3FNUZ", 8],
  ["F8_E5M2FNUZ", 8],
  ["I16", 16],
  ["U16", 16],
  ["F16", 16],
  ["BF16", 16],
  ["I32", 32],
  ["U32", 32],
  ["F32", 32],
  ["C64", 64],
  ["F64", 64],
  ["I64", 64],
  ["U64", 64],
];

/** All 22 dtypes in rank order (the reference enum's declaration order). */
export const DTYPES: readonly DtypeInfo[] = table.map(([code, bits], rank) => Object.freeze({ code, bits, rank }));

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
  let elements = 1n;
  for (const dim of shape) elements *= BigInt(dim);
  const bits = elements * BigInt(dtypeInfo(dtype).bits);
  if (bits % 8n !== 0n) {
    throw new StConvertError(
      "MisalignedSlice",
      `${dtype} tensor of shape [${shape.join(", ")}] holds ${bits} bits, which does not end on a byte boundary`,
    );
  }
  return toSafeNumber(bits / 8n, "tensor byte length");
}

/** Elements in a tensor of this shape (1 for a 0-d tensor). */
export function elementCount(shape: readonly number[]): number {
  let elements = 1n;
  for (const dim of shape) elements *= BigInt(dim);
  return toSafeNumber(elements, "element count");
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
