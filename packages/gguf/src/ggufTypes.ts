/**
 * The two type tables of GGUF: metadata value types (`gguf_type`) and tensor types (`ggml_type`),
 * and the error codes of the package. Spec: ggml's `include/gguf.h` and `include/ggml.h`,
 * gguf-py's `constants.py` (`GGUFValueType`, `GGMLQuantizationType`).
 */
import type { CommonErrorCode, Dtype } from "@st-convert/core";

/** Codes of GGUF refusals besides the common ones (`UnexpectedEof`, `LimitExceeded`, `Unsupported`, `InvalidMetadata`…). */
export type GgufErrorCode =
  | CommonErrorCode
  /** The file does not start with `GGUF`. */
  | "BadMagic"
  /** A version other than 2 or 3 (1 is GGUFv1, which ggml no longer reads). */
  | "UnsupportedVersion"
  /** A tensor or key/value count that ggml refuses, or that the file cannot hold. */
  | "InvalidCount"
  /** An empty key, or a key that appears twice. */
  | "InvalidKey"
  /** A metadata value type that is not one of GGUF's 13. */
  | "InvalidValueType"
  /** A string longer than ggml reads (1 GiB), or than the rest of the file; an array of more than 2^30 elements. */
  | "InvalidLength"
  /** `general.alignment` that is not a UINT32 power of two. */
  | "InvalidAlignment"
  /** A tensor name of 64 bytes or more (ggml's `GGML_MAX_NAME`), not UTF-8, or given twice. */
  | "InvalidTensorName"
  /** More than 4 dimensions, a negative one, or a shape whose element count or byte size overflows. */
  | "InvalidShape"
  /** A ggml type id that is not one ggml knows, or a row that is not whole blocks of it. */
  | "InvalidTensorType"
  /** A tensor that does not sit where the layout puts it (the previous one's end padded to the alignment), or data past the end of the file. */
  | "InvalidOffset"
  /** A split set whose files disagree (numbering, counts, names). */
  | "InvalidSplit";

/** `gguf_type`: metadata value types, by id. */
export const VALUE_TYPES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"] as const;
export type ValueTypeName = (typeof VALUE_TYPES)[number];
export const VALUE_TYPE_ID: Readonly<Record<ValueTypeName, number>> = Object.fromEntries(VALUE_TYPES.map((name, id) => [name, id])) as Record<
  ValueTypeName,
  number
>;
/** Bytes of a fixed-size value type (0 for STRING and ARRAY). */
export const VALUE_TYPE_SIZE: readonly number[] = [1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8];

/** `GGML_TYPE_COUNT` of ggml at d99724f: ids from this on are refused. */
export const GGML_TYPE_COUNT = 43;

/** The ggml types that hold plain elements, and the dtype whose bytes they share. */
export const PLAIN_TYPES: ReadonlyMap<number, Dtype> = new Map<number, Dtype>([
  [0, "F32"],
  [1, "F16"],
  [24, "I8"],
  [25, "I16"],
  [26, "I32"],
  [27, "I64"],
  [28, "F64"],
  [30, "BF16"],
]);
/** The inverse of {@link PLAIN_TYPES}: the ggml type a dtype is written as. */
export const TYPE_OF_DTYPE: ReadonlyMap<Dtype, number> = new Map([...PLAIN_TYPES].map(([id, dtype]) => [dtype, id]));

/** ggml's `GGML_MAX_NAME`: a tensor name takes fewer bytes than this. */
export const MAX_NAME_BYTES = 64;
/** ggml's `GGML_MAX_DIMS`. */
export const MAX_DIMS = 4;
/** ggml's `GGUF_MAX_STRING_LENGTH` and `GGUF_MAX_ARRAY_ELEMENTS`. */
export const MAX_STRING_LENGTH = 1024 * 1024 * 1024;
export const MAX_ARRAY_ELEMENTS = 1024 * 1024 * 1024;
/** ggml's `GGUF_DEFAULT_ALIGNMENT`. */
export const DEFAULT_ALIGNMENT = 32;
