/**
 * numpy `descr` strings ↔ safetensors dtypes, and the declarations that say what a raw void
 * dtype holds.
 *
 * numpy writes `dtype.str`: a byte-order character (`<` little, `>` big, `|` not applicable), a
 * kind and a size in bytes (`<f4`, `|b1`, `>i8`). numpy + ml_dtypes save bfloat16 as `<V2` and
 * the float8 types as `<V1` (raw void: `np.load` gives bytes without a type), and
 * float8_e5m2 as `<f1`, which `np.load` cannot read at all (formats.md §2.4).
 */
import { type Dtype, DTYPES, StConvertError, dtypeFromNumpyName, dtypeInfo, isDtype } from "@st-convert/core";
import { MAX_RANK } from "./NpyHeader.js";
import { type NumpyDtype, numpyTupleDtype, parseNumpyDtype } from "./parseNumpyDtype.js";
import type { PyValue } from "./parsePythonLiteral.js";

/** A descr as st-convert reads it. */
export type ParsedDescr =
  /** A dtype with a safetensors equivalent; `swapUnit` > 1 when the bytes are big-endian and must be swapped in units of that many bytes. */
  | { readonly kind: "dtype"; readonly dtype: Dtype; readonly itemSize: number; readonly swapUnit: number; readonly subarray?: readonly number[] }
  /**
   * Raw void of `itemSize` bytes per element: what it holds must be declared. `swapUnit` -1 when
   * the descr marks it big-endian (`>V2`), which numpy ignores and the reader refuses past one byte.
   */
  | { readonly kind: "void"; readonly itemSize: number; readonly swapUnit: 1 | -1; readonly subarray?: readonly number[] };

// `subarray`: the shape each element of a subarray dtype holds (`'(2,3)<f4'`, `'1f4'`,
// `('<f4', (1,))`), outermost first; numpy reads such an npy only when it holds one element per
// item, or no item at all (see openNpyArray). `itemSize` is then the base type's.

function unsupported(what: string, descr: string): never {
  throw new StConvertError("UnsupportedDtype", `dtype ${quoteDescr(descr)} (${what}) has no safetensors equivalent`);
}

function quoteDescr(descr: string): string {
  return `'${descr.length > 40 ? `${descr.slice(0, 40)}…` : descr}'`;
}

/**
 * What a descr string holds, read as `np.load` reads it (`np.dtype(descr)`, see
 * `parseNumpyDtype`): what numpy writes (`<f4`, `>i8`, `|b1`, `<V2`), any byte order (`=`, `|`
 * and none are native, little-endian), type codes (`f`, `d`, `?`), kinds and sizes in C `strtol`
 * spelling (`f 4`, `f08`), type names (`float`, `double`, `long`, `bool_`; ml_dtypes' `bfloat16`),
 * and comma strings (`()f4`; `1f4` is a subarray of one float32 per item). numpy's names for C
 * types follow Linux x86-64: `long`, `int`, `intp`, `l`, `p` are int64. ml_dtypes' `<f1`
 * (float8_e5m2, which np.load cannot read) is read as F8_E5M2.
 * @throws StConvertError `UnsupportedDtype` for dtypes numpy knows and safetensors cannot hold
 *   (complex128, longdouble, strings, bytes, objects, datetimes, structured dtypes, void of 0
 *   bytes, ml_dtypes' other types), `InvalidDescr` for the strings numpy refuses.
 */
export function parseDescr(descr: string): ParsedDescr {
  let parsed = parsedDescrs.get(descr);
  if (parsed === undefined) {
    parsed = describeDtype(parseNumpyDtype(descr), descr);
    if (parsedDescrs.size >= MAX_PARSED_DESCRS) parsedDescrs.clear();
    parsedDescrs.set(descr, parsed);
  }
  return parsed;
}

/**
 * Descrs already parsed (results are immutable): an archive's members share a handful, and
 * 50,000 of them would otherwise parse the same string 50,000 times. Refusals are not kept.
 */
const parsedDescrs = new Map<string, ParsedDescr>();
/** Distinct descrs remembered before the memory is cleared: far more than any file uses, a bound on what one can make us keep. */
const MAX_PARSED_DESCRS = 256;

/**
 * A `(base, shape)` tuple descr, read as numpy's `descr_to_dtype` reads it: `base` a descr string,
 * a tuple or a list (structured), `shape` an int or a tuple or list of ints (or an item size for an
 * unsized base: `('V', 2)` is `V2`). `shown` names it in messages.
 * @throws StConvertError as {@link parseDescr}; `UnsupportedDtype` for a second item of another
 *   kind (a `(base, dtype)` union), which st-convert does not read.
 */
export function parseTupleDescr(value: PyValue, shown: string): ParsedDescr {
  return describeDtype(tupleDtype(value, shown, 0), shown);
}

/** Tuples nest at most this deep in a descr (the header literal itself stops at 200). */
const MAX_DESCR_NESTING = 32;

function tupleDtype(value: PyValue, shown: string, depth: number): NumpyDtype {
  if (depth > MAX_DESCR_NESTING) unsupported("a tuple descr nested too deep", shown);
  if (value.kind === "str") return parseNumpyDtype(value.value);
  if (value.kind === "list") return { kind: "structured" };
  if (value.kind !== "tuple") {
    throw new StConvertError("InvalidDescr", `descr is not a valid dtype descriptor: ${quoteDescr(shown)}`);
  }
  // numpy.dtype((descr_to_dtype(descr[0]), descr[1])): items past the second are ignored.
  if (value.items.length < 2)
    throw new StConvertError("InvalidDescr", `descr is not a valid dtype descriptor: ${quoteDescr(shown)} (a tuple of fewer than 2 items)`);
  const base = tupleDtype(value.items[0]!, shown, depth + 1);
  const second = value.items[1]!;
  const shape = second.kind === "list" && second.items.length > 0 ? { kind: "tuple" as const, items: second.items } : second;
  if (shape.kind !== "int" && !(shape.kind === "tuple" && shape.items.every((d) => d.kind === "int"))) {
    if (shape.kind === "str" || shape.kind === "list" || shape.kind === "dict") unsupported("a (base, dtype) tuple, which st-convert does not read", shown);
    throw new StConvertError("InvalidDescr", `descr is not a valid dtype descriptor: ${quoteDescr(shown)} (invalid shape in fixed-type tuple)`);
  }
  try {
    return numpyTupleDtype(base, shape);
  } catch (error) {
    throw new StConvertError(
      "InvalidDescr",
      `descr is not a valid dtype descriptor: ${quoteDescr(shown)} (${error instanceof Error ? error.message : String(error)})`,
    );
  }
}

function describeDtype(d: NumpyDtype, descr: string, subarray: readonly number[] = []): ParsedDescr {
  const withSubarray = subarray.length === 0 ? {} : { subarray };
  switch (d.kind) {
    case "scalar": {
      // complex64 is two float32s: each swaps on its own.
      const unit = d.dtype === "C64" ? 4 : d.itemSize;
      return { kind: "dtype", dtype: d.dtype, itemSize: d.itemSize, swapUnit: d.bigEndian && unit > 1 ? unit : 1, ...withSubarray };
    }
    case "void":
      if (d.itemSize === 0) unsupported("void of 0 bytes", descr);
      return { kind: "void", itemSize: d.itemSize, swapUnit: d.bigEndian ? -1 : 1, ...withSubarray };
    case "string":
      return unsupported(d.char === "S" ? "bytes strings (S)" : "unicode strings (U)", descr);
    case "other":
      return unsupported(d.what, descr);
    case "structured":
      return unsupported("a structured dtype", descr);
    case "subarray":
      return describeDtype(d.base, descr, [...subarray, ...d.shape]);
  }
}

/**
 * The descr st-convert writes for a dtype: what `np.save` writes for the same numpy / ml_dtypes
 * array (`<f4`, `|b1`, `<V2` for BF16, `<V1` for the float8 types), except F8_E5M2, which is
 * written `<V1` like its siblings, because `np.save`'s `<f1` cannot be loaded by `np.load`.
 * @throws StConvertError `UnsupportedDtype` for F4 and the F6 types: ml_dtypes keeps them one
 *   value per byte while safetensors packs them, so no numpy array has their bytes.
 */
export function descrOfDtype(dtype: Dtype): string {
  const info = dtypeInfo(dtype);
  if (info.bits < 8) {
    throw new StConvertError("UnsupportedDtype", `${dtype} has no numpy equivalent: safetensors packs ${info.bits}-bit values, ml_dtypes stores one per byte`);
  }
  const size = info.bits / 8;
  if (dtype === "BF16" || dtype.startsWith("F8_")) return `<V${size}`;
  const prefix = size === 1 ? "|" : "<";
  if (dtype === "BOOL") return "|b1";
  if (dtype === "C64") return "<c8";
  return `${prefix}${dtype[0] === "F" ? "f" : dtype[0] === "U" ? "u" : "i"}${size}`;
}

/** numpy's `NPY_MAX_INTP` on 64-bit platforms: the most bytes an array it makes may span. */
const NUMPY_MAX_BYTES = 2n ** 63n - 1n;

/**
 * Whether numpy can make an array of this shape and item size: it multiplies the non-zero
 * dimensions and the item size (at least 1) before any data is read, and refuses a product past
 * 2^63 − 1 ("array is too big", "cannot reshape"), even for an empty array: (2^32, 2^32, 0) is
 * not an array to numpy, nor [0, 2^32, 2^32] of bytes.
 */
export function numpyCanShape(shape: readonly (number | bigint)[], itemSize: number): boolean {
  let bytes = BigInt(Math.max(itemSize, 1));
  for (const dim of shape) if (BigInt(dim) !== 0n) bytes *= BigInt(dim);
  return bytes <= NUMPY_MAX_BYTES;
}

/**
 * Refuses, before anything is written, a tensor whose array `np.load` would refuse to make: more
 * than {@link MAX_RANK} dimensions, or too many bytes.
 * @throws StConvertError `Unsupported`.
 */
export function checkNumpyShape(dtype: Dtype, shape: readonly number[]): void {
  if (shape.length > MAX_RANK) {
    throw new StConvertError(
      "Unsupported",
      `${dtype} [${shape.join(", ")}] has ${shape.length} dimensions and cannot be written for numpy: np.load refuses more than ${MAX_RANK} (NPY_MAXDIMS)`,
    );
  }
  if (!numpyCanShape(shape, dtypeInfo(dtype).bits / 8)) {
    throw new StConvertError(
      "Unsupported",
      `${dtype} [${shape.join(", ")}] cannot be written for numpy: np.load refuses an array whose non-zero dimensions and item size multiply past 2^63 - 1 ("array is too big"), empty or not`,
    );
  }
}

/** True when {@link descrOfDtype} writes raw void for this dtype, losing what it is to a plain `np.load`. */
export function isVoidInNumpy(dtype: Dtype): boolean {
  return dtype === "BF16" || dtype.startsWith("F8_");
}

/** What raw void dtypes hold, as the user declared it (`V2=BF16`, `emb:V2=BF16`). */
export interface DtypeDeclarations {
  /** Void size in bytes → dtype, for every tensor. */
  readonly all: ReadonlyMap<number, Dtype>;
  /** Tensor name → (void size in bytes → dtype). */
  readonly byTensor: ReadonlyMap<string, ReadonlyMap<number, Dtype>>;
}

/** No declarations. */
const NO_DECLARATIONS: DtypeDeclarations = { all: new Map(), byTensor: new Map() };

/** `parseDtypeDeclarations` unless already parsed. */
export function declarationsOf(dtypes: readonly string[] | DtypeDeclarations | undefined): DtypeDeclarations {
  if (dtypes === undefined) return NO_DECLARATIONS;
  return "all" in dtypes ? dtypes : parseDtypeDeclarations(dtypes);
}

/**
 * Parses declarations such as `V2=BF16`, `V1=F8_E4M3` (for every tensor) and `emb:V2=BF16` (for
 * the tensor `emb` only; everything before the last `:` is the name). The dtype is a safetensors
 * code (any case) or a numpy / ml_dtypes name (`bfloat16`); its size must be the void's.
 * @throws StConvertError `InvalidOption` (an option's value: the CLI exits 2) for a malformed
 *   declaration, an unknown dtype, a size mismatch, F4/F6 (not byte-sized in safetensors), or two
 *   declarations that disagree.
 */
export function parseDtypeDeclarations(values: readonly string[]): DtypeDeclarations {
  const all = new Map<number, Dtype>();
  const byTensor = new Map<string, Map<number, Dtype>>();
  for (const value of values) {
    const m = /^(?:([\s\S]*):)?[<>|=]?[Vv](\d+)=([\w-]+)$/.exec(value);
    if (m === null) {
      throw new StConvertError("InvalidOption", `dtype declaration ${JSON.stringify(value)} is not of the form V2=BF16 or TENSOR:V2=BF16`);
    }
    const [, tensor, digits, name] = m as unknown as [string, string | undefined, string, string];
    const size = Number(digits);
    const dtype = isDtype(name.toUpperCase()) ? (name.toUpperCase() as Dtype) : dtypeFromNumpyName(name.toLowerCase())?.code;
    if (dtype === undefined) {
      throw new StConvertError(
        "InvalidOption",
        `dtype declaration ${JSON.stringify(value)}: unknown dtype ${JSON.stringify(name)}; expected one of ${DTYPES.map((d) => d.code).join(", ")}`,
      );
    }
    const bits = dtypeInfo(dtype).bits;
    if (bits < 8) {
      throw new StConvertError(
        "InvalidOption",
        `dtype declaration ${JSON.stringify(value)}: ${dtype} packs ${bits}-bit values in safetensors, while a numpy void holds whole bytes`,
      );
    }
    if (bits !== size * 8) {
      throw new StConvertError("InvalidOption", `dtype declaration ${JSON.stringify(value)}: ${dtype} has ${bits / 8} bytes per element, V${size} has ${size}`);
    }
    const target = tensor === undefined ? all : (byTensor.get(tensor) ?? byTensor.set(tensor, new Map()).get(tensor)!);
    const previous = target.get(size);
    if (previous !== undefined && previous !== dtype) {
      throw new StConvertError(
        "InvalidOption",
        `dtype declarations disagree: V${size} is declared both ${previous} and ${dtype}${tensor === undefined ? "" : ` for ${JSON.stringify(tensor)}`}`,
      );
    }
    target.set(size, dtype);
  }
  return { all, byTensor };
}

/** Dtypes with this many bytes per element, for the hint in an undeclared-void error. */
function candidates(size: number): Dtype[] {
  return DTYPES.filter((d) => d.bits === size * 8).map((d) => d.code);
}

/**
 * The dtype of a void member: the tensor's own declaration, else what the file records (the npz
 * archive comment), else a declaration for every tensor.
 * @throws StConvertError `UndeclaredVoidDtype` saying how to declare it; `InvalidMetadata` when the
 *   recorded dtype's size is not the void's.
 */
export function resolveVoid(descr: string, itemSize: number, tensor: string, declarations: DtypeDeclarations, recorded: Dtype | undefined): Dtype {
  // A record that cannot describe these bytes makes the comment wrong, whoever else declares them.
  if (recorded !== undefined && dtypeInfo(recorded).bits !== itemSize * 8) {
    const bits = dtypeInfo(recorded).bits;
    throw new StConvertError(
      "InvalidMetadata",
      `the archive comment records ${recorded} (${bits % 8 === 0 ? `${bits / 8} byte${bits === 8 ? "" : "s"}` : `${bits} bits`} per element) for a raw void array of ${itemSize} byte${itemSize === 1 ? "" : "s"} per element (${quoteDescr(descr)})`,
    );
  }
  const declared = declarations.byTensor.get(tensor)?.get(itemSize) ?? recorded ?? declarations.all.get(itemSize);
  if (declared !== undefined) return declared;
  const options = candidates(itemSize);
  const example = itemSize === 2 ? "BF16" : itemSize === 1 ? "F8_E4M3" : options[0];
  const hint =
    example === undefined
      ? "no safetensors dtype has that many bytes per element"
      : `declare what it holds with --dtype V${itemSize}=${example} (or --dtype '${tensor}:V${itemSize}=${example}' for this tensor alone; formatOptions: { dtype: "V${itemSize}=${example}" } in the library); candidates: ${options.join(", ")}`;
  throw new StConvertError(
    "UndeclaredVoidDtype",
    `dtype ${quoteDescr(descr)} is raw void (${itemSize} byte${itemSize === 1 ? "" : "s"} per element), which is how numpy saves ml_dtypes types such as bfloat16 (V2) and float8 (V1); ${hint}`,
  );
}
