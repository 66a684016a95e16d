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

/** A descr as st-convert reads it. */
export type ParsedDescr =
  /** A dtype with a safetensors equivalent; `swapUnit` > 1 when the bytes are big-endian and must be swapped in units of that many bytes. */
  | { readonly kind: "dtype"; readonly dtype: Dtype; readonly itemSize: number; readonly swapUnit: number }
  /** Raw void of `itemSize` bytes per element: what it holds must be declared. */
  | { readonly kind: "void"; readonly itemSize: number; readonly swapUnit: 1 | -1 };

const KIND_SIZES: Readonly<Record<string, Readonly<Record<number, Dtype>>>> = {
  b: { 1: "BOOL" },
  i: { 1: "I8", 2: "I16", 4: "I32", 8: "I64" },
  u: { 1: "U8", 2: "U16", 4: "U32", 8: "U64" },
  // `<f1` is how ml_dtypes writes float8_e5m2 (its char code is 'f'); numpy cannot load it, but
  // the file does say what it holds.
  f: { 1: "F8_E5M2", 2: "F16", 4: "F32", 8: "F64" },
  c: { 8: "C64" },
};

/**
 * numpy's one-character type codes (`np.dtype('f')`). `l`/`L` and `p`/`P` are 8 bytes, as numpy
 * reads them on 64-bit Linux and macOS.
 */
const TYPE_CODES: Readonly<Record<string, Dtype>> = {
  "?": "BOOL",
  b: "I8",
  B: "U8",
  h: "I16",
  H: "U16",
  i: "I32",
  I: "U32",
  l: "I64",
  L: "U64",
  q: "I64",
  Q: "U64",
  p: "I64",
  P: "U64",
  e: "F16",
  f: "F32",
  d: "F64",
  F: "C64",
};

/** Kinds and type codes numpy knows that safetensors cannot hold, by what a user would call them. */
const UNSUPPORTED_STRINGS_AND_OBJECTS: Readonly<Record<string, string>> = {
  S: "bytes strings (S)",
  U: "unicode strings (U)",
  O: "Python objects (O), stored as a pickle that st-convert never unpickles",
  M: "datetime64 (M)",
  m: "timedelta64 (m)",
};

/** Kinds of a typestr (`<U8`) that safetensors cannot hold. */
const UNSUPPORTED_KINDS: Readonly<Record<string, string>> = { ...UNSUPPORTED_STRINGS_AND_OBJECTS, a: "bytes strings (S)" };

/** One-character type codes (`D`) that safetensors cannot hold. */
const UNSUPPORTED_CODES: Readonly<Record<string, string>> = {
  ...UNSUPPORTED_STRINGS_AND_OBJECTS,
  D: "complex128",
  G: "complex256 (long double complex)",
  g: "longdouble",
  V: "void",
};

const UNSUPPORTED_NAMES = new Set([
  "complex128",
  "complex256",
  "clongdouble",
  "float128",
  "longdouble",
  "float96",
  "object",
  "str",
  "bytes",
  "datetime64",
  "timedelta64",
  "void",
]);

function unsupported(what: string, descr: string): never {
  throw new StConvertError("UnsupportedDtype", `dtype ${quoteDescr(descr)} (${what}) has no safetensors equivalent`);
}

function quoteDescr(descr: string): string {
  return `'${descr.length > 40 ? `${descr.slice(0, 40)}…` : descr}'`;
}

/**
 * What a descr string holds. Accepts what numpy writes (`<f4`, `>i8`, `|b1`, `<V2`), the other
 * byte-order characters numpy reads (`=` and none: native, taken as little-endian; `|` on a
 * multi-byte type), one-character type codes (`f`, `d`, `?`) and dtype names (`float32`,
 * `bfloat16`).
 * @throws StConvertError `UnsupportedDtype` for dtypes numpy knows and safetensors cannot hold
 *   (complex128, longdouble, strings, bytes, objects, datetimes), `InvalidDescr` for the rest.
 */
export function parseDescr(descr: string): ParsedDescr {
  const typestr = /^([<>|=]?)([a-zA-Z])(\d+)(\[\w+\])?$/.exec(descr);
  if (typestr !== null) {
    const [, order, kind, digits] = typestr as unknown as [string, string, string, string];
    const size = Number(digits);
    const bigEndian = order === ">";
    if (kind === "V") {
      if (size === 0) unsupported("void of 0 bytes", descr);
      return { kind: "void", itemSize: size, swapUnit: bigEndian ? -1 : 1 };
    }
    const known = KIND_SIZES[kind]?.[size];
    if (known !== undefined && typestr[4] === undefined) return dtypeResult(known, bigEndian);
    if (kind in UNSUPPORTED_KINDS) unsupported(UNSUPPORTED_KINDS[kind]!, descr);
    if (kind === "c" && (size === 16 || size === 32 || size === 24)) unsupported(size === 16 ? "complex128" : "long double complex", descr);
    if (kind === "f" && (size === 16 || size === 12)) unsupported("longdouble", descr);
    throw new StConvertError("InvalidDescr", `descr is not a valid dtype descriptor: ${quoteDescr(descr)}`);
  }
  const code = /^([<>|=]?)([?a-zA-Z])$/.exec(descr);
  if (code !== null) {
    const known = TYPE_CODES[code[2]!];
    if (known !== undefined) return dtypeResult(known, code[1] === ">");
    if (code[2]! in UNSUPPORTED_CODES) unsupported(UNSUPPORTED_CODES[code[2]!]!, descr);
  }
  const named = dtypeFromNumpyName(descr);
  if (named !== undefined) return dtypeResult(named.code, false);
  if (UNSUPPORTED_NAMES.has(descr) || /^(datetime64|timedelta64)\[\w+\]$/.test(descr)) unsupported(descr, descr);
  throw new StConvertError("InvalidDescr", `descr is not a valid dtype descriptor: ${quoteDescr(descr)}`);
}

function dtypeResult(dtype: Dtype, bigEndian: boolean): ParsedDescr {
  const itemSize = dtypeInfo(dtype).bits / 8;
  // complex64 is two float32s: each swaps on its own.
  const unit = dtype === "C64" ? 4 : itemSize;
  return { kind: "dtype", dtype, itemSize, swapUnit: bigEndian && unit > 1 ? unit : 1 };
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
 * @throws StConvertError `InvalidArgument` for a malformed declaration, an unknown dtype, a size
 *   mismatch, F4/F6 (not byte-sized in safetensors), or two declarations that disagree.
 */
export function parseDtypeDeclarations(values: readonly string[]): DtypeDeclarations {
  const all = new Map<number, Dtype>();
  const byTensor = new Map<string, Map<number, Dtype>>();
  for (const value of values) {
    const m = /^(?:([\s\S]*):)?[<>|=]?[Vv](\d+)=([\w-]+)$/.exec(value);
    if (m === null) {
      throw new StConvertError("InvalidArgument", `dtype declaration ${JSON.stringify(value)} is not of the form V2=BF16 or TENSOR:V2=BF16`);
    }
    const [, tensor, digits, name] = m as unknown as [string, string | undefined, string, string];
    const size = Number(digits);
    const dtype = isDtype(name.toUpperCase()) ? (name.toUpperCase() as Dtype) : dtypeFromNumpyName(name.toLowerCase())?.code;
    if (dtype === undefined) {
      throw new StConvertError(
        "InvalidArgument",
        `dtype declaration ${JSON.stringify(value)}: unknown dtype ${JSON.stringify(name)}; expected one of ${DTYPES.map((d) => d.code).join(", ")}`,
      );
    }
    const bits = dtypeInfo(dtype).bits;
    if (bits < 8) {
      throw new StConvertError(
        "InvalidArgument",
        `dtype declaration ${JSON.stringify(value)}: ${dtype} packs ${bits}-bit values in safetensors, while a numpy void holds whole bytes`,
      );
    }
    if (bits !== size * 8) {
      throw new StConvertError(
        "InvalidArgument",
        `dtype declaration ${JSON.stringify(value)}: ${dtype} has ${bits / 8} bytes per element, V${size} has ${size}`,
      );
    }
    const target = tensor === undefined ? all : (byTensor.get(tensor) ?? byTensor.set(tensor, new Map()).get(tensor)!);
    const previous = target.get(size);
    if (previous !== undefined && previous !== dtype) {
      throw new StConvertError(
        "InvalidArgument",
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
 * @throws StConvertError `UndeclaredVoidDtype` saying how to declare it.
 */
export function resolveVoid(descr: string, itemSize: number, tensor: string, declarations: DtypeDeclarations, recorded: Dtype | undefined): Dtype {
  const declared = declarations.byTensor.get(tensor)?.get(itemSize) ?? recorded ?? declarations.all.get(itemSize);
  if (declared !== undefined) return declared;
  const options = candidates(itemSize);
  const example = itemSize === 2 ? "BF16" : itemSize === 1 ? "F8_E4M3" : options[0];
  const hint =
    example === undefined
      ? "no safetensors dtype has that many bytes per element"
      : `declare what it holds with --dtype V${itemSize}=${example} (or --dtype '${tensor}:V${itemSize}=${example}' for this tensor alone; \`dtypes\` in the API); candidates: ${options.join(", ")}`;
  throw new StConvertError(
    "UndeclaredVoidDtype",
    `dtype ${quoteDescr(descr)} is raw void (${itemSize} byte${itemSize === 1 ? "" : "s"} per element), which is how numpy saves ml_dtypes types such as bfloat16 (V2) and float8 (V1); ${hint}`,
  );
}
