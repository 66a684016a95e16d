/**
 * What `np.dtype(text)` makes of a string, which is how `np.load` reads an npy header's `descr`
 * (`descr_to_dtype` hands a string to `numpy.dtype`). Follows numpy 2.4 on Linux x86-64:
 * `_convert_from_str` and `_check_for_commastring` in `numpy/_core/src/multiarray/descriptor.c`,
 * `_commastring` in `numpy/_core/_internal.py`, `_convert_from_tuple` for the `(base, repeats)`
 * items it returns, and the names of `np.sctypeDict` (plus those ml_dtypes registers once imported).
 *
 * numpy reads far more than the `dtype.str` it writes: a byte order and a type code (`'>f'`),
 * a kind and a size with C `strtol` spacing and signs (`'f 4'`, `'f+4'`, `'f04'`), type names
 * (`'float'`, `'long'`), and "comma strings" that build subarray and structured dtypes
 * (`'1f4'`, `'(2,3)i2'`, `'()f4'`, `'f4,i2'`). Platform-dependent names follow Linux x86-64,
 * where C `long` and `intp` are 64 bits: `'l'`, `'long'`, `'int'`, `'intp'` are int64.
 */
import { type Dtype, StConvertError } from "@st-convert/core";
import { MAX_RANK } from "./NpyHeader.js";
import { type PyValue, parsePythonLiteral } from "./parsePythonLiteral.js";

/** A dtype as numpy builds it from a string, reduced to what st-convert needs to know. */
export type NumpyDtype =
  /** A dtype with a safetensors equivalent; `bigEndian` only for multi-byte types. */
  | { readonly kind: "scalar"; readonly dtype: Dtype; readonly itemSize: number; readonly bigEndian: boolean }
  /**
   * Raw void (`V2`). numpy keeps no byte order for void; `bigEndian` records a `>` the string
   * gave (ml_dtypes writes big-endian bfloat16 as `>V2`), so that the reader can refuse it.
   */
  | { readonly kind: "void"; readonly itemSize: number; readonly bigEndian: boolean }
  /** Bytes (`S`) or unicode (`U`) strings; `itemSize` 0 is numpy's "unsized" prototype. */
  | { readonly kind: "string"; readonly char: "S" | "U"; readonly itemSize: number }
  /** A valid numpy dtype with no safetensors equivalent, named for messages. */
  | { readonly kind: "other"; readonly what: string; readonly itemSize: number }
  /** A structured dtype (a comma string such as `'f4,i2'`). */
  | { readonly kind: "structured" }
  /** A subarray dtype: each element is an array of `shape` of `base`. */
  | { readonly kind: "subarray"; readonly base: NumpyDtype; readonly shape: readonly number[]; readonly itemSize: number };

/** numpy's `NPY_MAX_INT`: item sizes and subarray dimensions must fit in a C int. */
const INT_MAX = 2 ** 31 - 1;

const scalar = (dtype: Dtype, itemSize: number): NumpyDtype => ({ kind: "scalar", dtype, itemSize, bigEndian: false });
const other = (what: string, itemSize: number): NumpyDtype => ({ kind: "other", what, itemSize });

const COMPLEX128 = other("complex128", 16);
const LONGDOUBLE = other("longdouble", 16);
const CLONGDOUBLE = other("clongdouble (complex256)", 32);
const OBJECT = other("Python objects (O), stored as a pickle that st-convert never unpickles", 8);
const DATETIME = other("datetime64", 8);
const TIMEDELTA = other("timedelta64", 8);
const STRINGDTYPE = other("numpy.dtypes.StringDType (T)", 16);

/** One-character type codes `PyArray_DescrFromType` accepts, on Linux x86-64 (`a` is only a name). */
const TYPE_CODES: Readonly<Record<string, NumpyDtype>> = {
  "?": scalar("BOOL", 1),
  b: scalar("I8", 1),
  B: scalar("U8", 1),
  h: scalar("I16", 2),
  H: scalar("U16", 2),
  i: scalar("I32", 4),
  I: scalar("U32", 4),
  l: scalar("I64", 8),
  L: scalar("U64", 8),
  q: scalar("I64", 8),
  Q: scalar("U64", 8),
  n: scalar("I64", 8),
  N: scalar("U64", 8),
  p: scalar("I64", 8),
  P: scalar("U64", 8),
  e: scalar("F16", 2),
  f: scalar("F32", 4),
  d: scalar("F64", 8),
  F: scalar("C64", 8),
  g: LONGDOUBLE,
  D: COMPLEX128,
  G: CLONGDOUBLE,
  S: { kind: "string", char: "S", itemSize: 0 },
  c: { kind: "string", char: "S", itemSize: 1 },
  U: { kind: "string", char: "U", itemSize: 0 },
  V: { kind: "void", itemSize: 0, bigEndian: false },
  O: OBJECT,
  M: DATETIME,
  m: TIMEDELTA,
  T: STRINGDTYPE,
};

/**
 * `PyArray_DescrFromType` takes a type number as readily as a type code, and numpy hands it the
 * byte of a one-character string: `'\t'` is type 9, int64. Type numbers 0–23, in order.
 */
const TYPE_NUMBERS: readonly NumpyDtype[] = [
  TYPE_CODES["?"]!,
  TYPE_CODES.b!,
  TYPE_CODES.B!,
  TYPE_CODES.h!,
  TYPE_CODES.H!,
  TYPE_CODES.i!,
  TYPE_CODES.I!,
  TYPE_CODES.l!,
  TYPE_CODES.L!,
  TYPE_CODES.q!,
  TYPE_CODES.Q!,
  TYPE_CODES.f!,
  TYPE_CODES.d!,
  LONGDOUBLE,
  TYPE_CODES.F!,
  COMPLEX128,
  CLONGDOUBLE,
  OBJECT,
  TYPE_CODES.S!,
  TYPE_CODES.U!,
  TYPE_CODES.V!,
  DATETIME,
  TIMEDELTA,
  TYPE_CODES.e!,
];

/** Kind and size (`PyArray_TypestrConvert`) for the kinds other than S, a, U and V. */
const TYPESTR: Readonly<Record<string, Readonly<Record<number, NumpyDtype>>>> = {
  b: { 1: scalar("BOOL", 1) },
  i: { 1: scalar("I8", 1), 2: scalar("I16", 2), 4: scalar("I32", 4), 8: scalar("I64", 8) },
  u: { 1: scalar("U8", 1), 2: scalar("U16", 2), 4: scalar("U32", 4), 8: scalar("U64", 8) },
  f: { 2: scalar("F16", 2), 4: scalar("F32", 4), 8: scalar("F64", 8), 16: LONGDOUBLE },
  c: { 8: scalar("C64", 8), 16: COMPLEX128, 32: CLONGDOUBLE },
  O: { 4: OBJECT, 8: OBJECT },
  M: { 8: DATETIME },
  m: { 8: TIMEDELTA },
};

/**
 * `np.sctypeDict` (numpy 2.4, Linux x86-64), looked up with the whole string, byte order
 * included (so `'<float32'` is not a name), plus the names ml_dtypes adds when it is imported.
 */
const NAMES: Readonly<Record<string, NumpyDtype>> = {
  bool: scalar("BOOL", 1),
  bool_: scalar("BOOL", 1),
  int8: scalar("I8", 1),
  byte: scalar("I8", 1),
  uint8: scalar("U8", 1),
  ubyte: scalar("U8", 1),
  int16: scalar("I16", 2),
  short: scalar("I16", 2),
  uint16: scalar("U16", 2),
  ushort: scalar("U16", 2),
  int32: scalar("I32", 4),
  intc: scalar("I32", 4),
  uint32: scalar("U32", 4),
  uintc: scalar("U32", 4),
  int64: scalar("I64", 8),
  long: scalar("I64", 8),
  longlong: scalar("I64", 8),
  intp: scalar("I64", 8),
  int_: scalar("I64", 8),
  int: scalar("I64", 8),
  uint64: scalar("U64", 8),
  ulong: scalar("U64", 8),
  ulonglong: scalar("U64", 8),
  uintp: scalar("U64", 8),
  uint: scalar("U64", 8),
  float16: scalar("F16", 2),
  half: scalar("F16", 2),
  float32: scalar("F32", 4),
  single: scalar("F32", 4),
  float64: scalar("F64", 8),
  double: scalar("F64", 8),
  float: scalar("F64", 8),
  complex64: scalar("C64", 8),
  csingle: scalar("C64", 8),
  longdouble: LONGDOUBLE,
  float128: LONGDOUBLE,
  complex128: COMPLEX128,
  cdouble: COMPLEX128,
  complex: COMPLEX128,
  clongdouble: CLONGDOUBLE,
  complex256: CLONGDOUBLE,
  bytes_: { kind: "string", char: "S", itemSize: 0 },
  bytes: { kind: "string", char: "S", itemSize: 0 },
  a: { kind: "string", char: "S", itemSize: 0 },
  str_: { kind: "string", char: "U", itemSize: 0 },
  str: { kind: "string", char: "U", itemSize: 0 },
  unicode: { kind: "string", char: "U", itemSize: 0 },
  void: { kind: "void", itemSize: 0, bigEndian: false },
  object_: OBJECT,
  object: OBJECT,
  datetime64: DATETIME,
  timedelta64: TIMEDELTA,
  // ml_dtypes, once imported: the types safetensors shares...
  bfloat16: scalar("BF16", 2),
  float8_e4m3fn: scalar("F8_E4M3", 1),
  float8_e5m2: scalar("F8_E5M2", 1),
  float8_e8m0fnu: scalar("F8_E8M0", 1),
  float8_e4m3fnuz: scalar("F8_E4M3FNUZ", 1),
  float8_e5m2fnuz: scalar("F8_E5M2FNUZ", 1),
  // ...and those it does not: other float8 encodings, sub-byte types ml_dtypes keeps one per
  // byte (safetensors packs F4/F6), complex32.
  float8_e3m4: other("float8_e3m4 (ml_dtypes)", 1),
  float8_e4m3: other("float8_e4m3 (ml_dtypes; not float8_e4m3fn)", 1),
  float8_e4m3b11fnuz: other("float8_e4m3b11fnuz (ml_dtypes)", 1),
  float6_e2m3fn: other("float6_e2m3fn (ml_dtypes: one value per byte, where safetensors packs F6)", 1),
  float6_e3m2fn: other("float6_e3m2fn (ml_dtypes: one value per byte, where safetensors packs F6)", 1),
  float4_e2m1fn: other("float4_e2m1fn (ml_dtypes: one value per byte, where safetensors packs F4)", 1),
  int1: other("int1 (ml_dtypes)", 1),
  uint1: other("uint1 (ml_dtypes)", 1),
  int2: other("int2 (ml_dtypes)", 1),
  uint2: other("uint2 (ml_dtypes)", 1),
  int4: other("int4 (ml_dtypes)", 1),
  uint4: other("uint4 (ml_dtypes)", 1),
  bcomplex32: other("bcomplex32 (ml_dtypes)", 4),
  complex32: other("complex32 (ml_dtypes)", 4),
};

/** The failure numpy reports for a string it does not understand, or any other failure of its parser. */
class NotUnderstood extends Error {}

const fail = (why = "not understood"): never => {
  throw new NotUnderstood(why);
};

const isByteOrder = (c: string | undefined) => c === "<" || c === ">" || c === "|" || c === "=";
const isDigit = (c: string | undefined) => c !== undefined && c >= "0" && c <= "9";
/** C `isspace` in the C locale, which `strtol` skips. */
const isCSpace = (c: string | undefined) => c === " " || c === "\t" || c === "\n" || c === "\v" || c === "\f" || c === "\r";

/**
 * C `strtol(text + from, &end, 10)`: leading C spaces, a sign, decimal digits. `end` is `from`
 * when no digit follows (no conversion); `overflow` is C's `ERANGE` (the value is clamped).
 */
function strtol(text: string, from: number): { value: number; end: number; overflow: boolean } {
  let at = from;
  while (isCSpace(text[at])) at++;
  let sign = 1;
  if (text[at] === "+" || text[at] === "-") {
    sign = text[at] === "-" ? -1 : 1;
    at++;
  }
  const digitsFrom = at;
  while (isDigit(text[at])) at++;
  if (at === digitsFrom) return { value: 0, end: from, overflow: false };
  // Up to 15 digits are exact as a number; longer ones go through BigInt for C's clamping.
  if (at - digitsFrom <= 15) return { value: sign * Number(text.slice(digitsFrom, at)), end: at, overflow: false };
  const magnitude = BigInt(text.slice(digitsFrom, at));
  const limit = sign > 0 ? 2n ** 63n - 1n : 2n ** 63n;
  const overflow = magnitude > limit;
  const clamped = overflow ? limit : magnitude;
  return { value: sign * Number(clamped), end: at, overflow };
}

/** `_check_for_commastring`: a leading digit (after an optional byte order), a leading `()`, or a comma outside brackets. */
function isCommaString(text: string): boolean {
  if (isDigit(text[0]) || (text.length > 1 && isByteOrder(text[0]) && isDigit(text[1]))) return true;
  if ((text.length > 1 && text[0] === "(" && text[1] === ")") || (text.length > 3 && isByteOrder(text[0]) && text[1] === "(" && text[2] === ")")) {
    return true;
  }
  let brackets = 0;
  for (const c of text) {
    if (c === "," && brackets === 0) return true;
    if (c === "[") brackets++;
    else if (c === "]") brackets--;
  }
  return false;
}

/** Units numpy's datetime parser knows (`μ` is U+03BC; U+00B5, the micro sign, is refused). */
const DATETIME_UNIT = /^(?:Y|M|W|D|h|m|s|ms|us|\u03bcs|ns|ps|fs|as|generic)$/;

/**
 * `parse_dtype_from_datetime_typestr` for `M8…`, `m8…`, `datetime64…`, `timedelta64…`: nothing,
 * or `[` multiplier (C `strtol`, not negative) unit (`/` denominator) `]`. Denominators are taken
 * as valid: numpy rejects some (`[s/3]`) and crashes on `[D/0]`; st-convert refuses every datetime anyway.
 */
function datetimeType(text: string): NumpyDtype {
  const timedelta = text[0] === "m" || text.startsWith("timedelta64");
  const meta = text.slice(text[1] === "8" ? 2 : timedelta ? 11 : 10);
  if (meta !== "") {
    if (meta.length < 3 || meta[0] !== "[" || !meta.endsWith("]")) fail("invalid datetime metadata");
    const inner = meta.slice(1, -1);
    const multiplier = strtol(inner, 0);
    if (multiplier.end > 0 && (multiplier.value < 0 || multiplier.overflow)) fail("invalid datetime multiplier");
    const rest = inner.slice(multiplier.end);
    const slash = rest.indexOf("/");
    const unit = slash < 0 ? rest : rest.slice(0, slash);
    if (!DATETIME_UNIT.test(unit)) fail("invalid datetime unit");
    if (slash >= 0) {
      const denominator = strtol(rest, slash + 1);
      if (denominator.end === slash + 1 || denominator.end !== rest.length) fail("invalid datetime denominator");
    }
  }
  return timedelta ? TIMEDELTA : DATETIME;
}

function isDatetimeTypestr(text: string): boolean {
  return (text.length >= 2 && text[1] === "8" && (text[0] === "M" || text[0] === "m")) || text.startsWith("datetime64") || text.startsWith("timedelta64");
}

/** Python `str.isspace`, which `\s` in numpy's comma-string patterns matches. */
const PY_SPACE = "[\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
/** `format_re` of `_commastring`: byte order, repeats, byte order, dtype. */
const FORMAT = /([<>|=]?)( *\(?[ ,0-9]*\)? *)([<>|=]?)([A-Za-z0-9.?]*(?:\[[a-zA-Z0-9,.]+\])?)/y;
const SEPARATOR = new RegExp(`${PY_SPACE}*,${PY_SPACE}*`, "y");
const TRAILING_SPACE = new RegExp(`${PY_SPACE}+$`, "y");

/** One item of `_commastring`'s result: a dtype string, or a dtype string with repeats. */
type CommaItem = { readonly dtype: string; readonly repeats?: PyValue };

/** `_commastring(text)`: a list of items, or one item (`islist` false). */
function commaString(text: string): { items: CommaItem[]; list: boolean } {
  const items: CommaItem[] = [];
  let list = false;
  let at = 0;
  while (at < text.length) {
    FORMAT.lastIndex = at;
    const m = FORMAT.exec(text)!;
    const [, order1, repeats, order2, dtype] = m as unknown as [string, string, string, string, string];
    at = FORMAT.lastIndex;
    if (at < text.length) {
      TRAILING_SPACE.lastIndex = at;
      if (TRAILING_SPACE.test(text)) at = text.length;
      else {
        SEPARATOR.lastIndex = at;
        if (!SEPARATOR.test(text)) fail(`format number ${items.length + 1} is not recognized`);
        at = SEPARATOR.lastIndex;
        list = true;
      }
    }
    let order: string;
    if (order2 === "") order = order1;
    else if (order1 === "") order = order2;
    else {
      const native = (o: string) => (o === "=" ? "<" : o);
      if (native(order1) !== native(order2)) fail(`inconsistent byte-order specification ${order1} and ${order2}`);
      order = native(order1);
    }
    if (order === "|" || order === "=" || order === "<") order = "";
    if (repeats === "") items.push({ dtype: order + dtype });
    else {
      // ast.literal_eval, which strips leading spaces and tabs first.
      let value: PyValue;
      try {
        value = parsePythonLiteral(repeats.replace(/^[ \t]+/, ""));
      } catch {
        return fail(`repeats ${JSON.stringify(repeats)} are not a Python literal`);
      }
      items.push({ dtype: order + dtype, repeats: value });
    }
  }
  return { items, list };
}

const itemSizeOf = (d: NumpyDtype) => (d.kind === "structured" ? 0 : d.itemSize);

/** `_convert_from_tuple((base, value))` for the ints and tuples of ints repeats and headers hold. */
export function numpyTupleDtype(base: NumpyDtype, value: PyValue): NumpyDtype {
  if (base.kind !== "structured" && base.itemSize === 0) {
    // Unsized (S0, U0, V0, PyDataType_ISUNSIZED): the number is an item size, '5S' is S5, '2V' is V2.
    if (value.kind !== "int") return fail("invalid itemsize in generic type tuple");
    let size = value.value;
    if (base.kind === "string" && base.char === "U") size = size > BigInt(Math.floor(INT_MAX / 4)) ? -1n : size * 4n;
    if (size < 0n || size > BigInt(INT_MAX)) fail("invalid itemsize in generic type tuple");
    return { ...base, itemSize: Number(size) };
  }
  let dims: bigint[];
  if (value.kind === "int") dims = [value.value];
  else if (value.kind === "tuple" && value.items.every((v) => v.kind === "int")) dims = value.items.map((v) => (v as { value: bigint }).value);
  else return fail("invalid shape in fixed-type tuple");
  if (dims.length > MAX_RANK) fail("invalid shape in fixed-type tuple");
  if (dims.length === 0 && value.kind === "tuple") return base;
  let items = 1n;
  for (const d of dims) {
    if (d < 0n || d > BigInt(INT_MAX)) fail("invalid shape in fixed-type tuple");
    items *= d;
  }
  const bytes = items * BigInt(itemSizeOf(base));
  if (items > BigInt(INT_MAX) || bytes > BigInt(INT_MAX)) fail("invalid shape in fixed-type tuple: dtype size in bytes must fit into a C int");
  return { kind: "subarray", base, shape: dims.map(Number), itemSize: Number(bytes) };
}

/** `_convert_from_commastring`. */
function fromCommaString(text: string): NumpyDtype {
  const { items, list } = commaString(text);
  const convert = (item: CommaItem) => {
    const base = fromString(item.dtype);
    return item.repeats === undefined ? base : numpyTupleDtype(base, item.repeats);
  };
  if (!list) {
    // A single item is always a (dtype, repeats) tuple here; numpy raises on anything else.
    if (items.length !== 1 || items[0]!.repeats === undefined) fail("not a comma string numpy builds");
    return convert(items[0]!);
  }
  // `_convert_from_list`: a trailing empty string (from a trailing comma) is dropped.
  const fields = items.at(-1)?.dtype === "" && items.at(-1)?.repeats === undefined ? items.slice(0, -1) : items;
  if (fields.length === 0) fail("expected at least one field name");
  for (const field of fields) convert(field);
  return { kind: "structured" };
}

/**
 * `_convert_from_str`. `top`: the whole descr, where `f1` is read as float8_e5m2: not numpy's, but
 * how ml_dtypes writes it (`'<f1'`, which np.load cannot read), and the file does say what it holds.
 */
function fromString(text: string, top = false): NumpyDtype {
  if (text === "") return fail();
  if (isCommaString(text)) return fromCommaString(text);
  let order = "=";
  let type = text;
  if (isByteOrder(text[0])) {
    order = text[0] === "|" ? "=" : text[0]!;
    type = text.slice(1);
  }
  if (type === "") return fail();
  let found: NumpyDtype | undefined;
  if (isDatetimeTypestr(type)) found = datetimeType(type);
  // numpy measures the UTF-8 bytes: a single non-ASCII character is not a type code.
  else if (type.length === 1 && type.charCodeAt(0) < 0x80) found = TYPE_NUMBERS[type.charCodeAt(0)] ?? TYPE_CODES[type];
  else if (type.length > 1) {
    const size = strtol(type, 1);
    if (size.value > INT_MAX || size.value < 0) fail();
    if (!size.overflow && size.end === type.length) {
      const kind = type[0]!;
      if (kind === "S" || kind === "a") found = { kind: "string", char: "S", itemSize: size.value };
      else if (kind === "U") {
        if (size.value > Math.floor(INT_MAX / 4)) fail();
        found = { kind: "string", char: "U", itemSize: size.value * 4 };
      } else if (kind === "V") found = { kind: "void", itemSize: size.value, bigEndian: false };
      else if (size.value !== 0) found = TYPESTR[kind]?.[size.value] ?? (top && kind === "f" && size.value === 1 ? scalar("F8_E5M2", 1) : undefined);
    }
  }
  if (found === undefined) {
    // The name lookup uses the whole string and returns its dtype as is.
    if (Object.hasOwn(NAMES, text)) return NAMES[text]!;
    return fail();
  }
  if (order === "<" || order === "=") return found;
  // '>' on a type that has a byte order.
  if (found.kind === "scalar") return found.itemSize > 1 ? { ...found, bigEndian: true } : found;
  if (found.kind === "void") return { ...found, bigEndian: true };
  return found;
}

/**
 * What `np.dtype(text)` gives, on Linux x86-64.
 * @throws StConvertError `InvalidDescr` when numpy would raise (it does not understand the
 *   string, a repeat count is malformed, a subarray is too large…).
 */
export function parseNumpyDtype(text: string): NumpyDtype {
  try {
    return fromString(text, true);
  } catch (error) {
    if (!(error instanceof NotUnderstood)) throw error;
    const shown = text.length > 40 ? `${text.slice(0, 40)}…` : text;
    throw new StConvertError("InvalidDescr", `descr is not a valid dtype descriptor: ${JSON.stringify(shown)} (numpy: ${error.message})`);
  }
}
