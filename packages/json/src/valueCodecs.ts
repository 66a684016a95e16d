/**
 * Values ⇄ little-endian bytes, per dtype: the writer formats elements as JSON text straight into
 * a byte buffer (no string per value on the hot paths), the reader stores parsed leaves into a
 * block of elements. The two sides are paired here so that "reads back to the same bits" is
 * decided by the very code that reads.
 */
import { type Dtype, kernels } from "@st-convert/core";
import { type MinifloatCodec, OVERFLOW, minifloat } from "./minifloats.js";
import { type Decimal, decimalText, shortestDecimal, shortestFloat32Of, writeDecimal } from "./shortestDecimal.js";

/** Kinds of leaves in a `data` array, as bit flags. */
export const Leaf = {
  Integer: 1,
  Float: 2,
  NaN: 4,
  Infinity: 8,
  NegativeInfinity: 16,
  True: 32,
  False: 64,
  /** A number token below zero (set together with Integer or Float; not for `-0`). */
  Negative: 128,
} as const;

/** A refused value; the caller adds the path and the tensor. */
export class ValueError extends Error {
  constructor(
    readonly code: "ValueOutOfRange" | "InvalidValue",
    readonly rule: string,
  ) {
    super(rule);
  }
}

/** Block-wise formatting and parsing of one dtype's elements. */
export interface ValueCodec {
  readonly dtype: Dtype;
  /** Bytes per element. */
  readonly elementBytes: number;
  /** JSON leaves per element (2 for C64's `[re, im]`). */
  readonly leavesPerElement: number;
  /** Leaf kinds a `data` array of this dtype may hold (magnitudes are checked when parsing). */
  readonly allowedLeaves: number;
  /**
   * True when every element of `block` reads back to the same bits from the text {@link format}
   * writes. False only for NaNs other than the dtype's canonical one and BOOL bytes other than 0/1.
   */
  lossless(block: Uint8Array): boolean;
  /** True when no bit pattern of the dtype can fail {@link lossless} (integers, the F8 types with one NaN). */
  alwaysLossless(): boolean;
  /**
   * Formats elements from `cursor.index` up to `end` of `block` (aligned, little-endian) into `out`
   * from `cursor.pos`, each preceded by `", "` unless it is element 0 of the tensor (`first`),
   * stopping once `cursor.pos` passes `limit`. Advances the cursor.
   */
  format(block: Uint8Array, end: number, out: Uint8Array, limit: number, cursor: FormatCursor, first: boolean): void;
  /**
   * Stores leaf `leaf` (0 or 1 within its element for C64) of element `index` of `block`: a
   * number token `text[start, end)` or a literal kind.
   * @throws ValueError for a value out of the dtype's range or of a kind the dtype refuses.
   */
  store(block: Uint8Array, index: number, leaf: number, kind: number, text: Uint8Array, start: number, end: number): void;
}

/** Where {@link ValueCodec.format} is: the next element and the next output byte. */
export interface FormatCursor {
  index: number;
  pos: number;
}

const ascii = (text: string) => Uint8Array.from(text, (c) => c.charCodeAt(0));
const TEXT_NAN = ascii('"NaN"');
const TEXT_INF = ascii('"Infinity"');
const TEXT_NEG_INF = ascii('"-Infinity"');
const TEXT_NEG_ZERO = ascii("-0.0");
const TEXT_TRUE = ascii("true");
const TEXT_FALSE = ascii("false");

function put(out: Uint8Array, pos: number, text: Uint8Array): number {
  for (let i = 0; i < text.length; i++) out[pos + i] = text[i]!;
  return pos + text.length;
}

function separator(out: Uint8Array, pos: number): number {
  out[pos] = 0x2c;
  out[pos + 1] = 0x20;
  return pos + 2;
}

const INT_DIGITS = new Uint8Array(24);

/** Writes an integer |v| < 2^53 in decimal. */
function writeInteger(out: Uint8Array, pos: number, v: number): number {
  if (v < 0) {
    out[pos++] = 0x2d;
    v = -v;
  }
  if (v < 10) {
    out[pos] = 0x30 + v;
    return pos + 1;
  }
  let n = 0;
  while (v > 0) {
    const q = Math.floor(v / 10);
    INT_DIGITS[n++] = 0x30 + (v - q * 10);
    v = q;
  }
  while (n > 0) out[pos++] = INT_DIGITS[--n]!;
  return pos;
}

function writeAscii(out: Uint8Array, pos: number, text: string): number {
  for (let i = 0; i < text.length; i++) out[pos + i] = text.charCodeAt(i);
  return pos + text.length;
}

// ---- number tokens -------------------------------------------------------------------------

// Exact powers of ten for Clinger's fast path.
const EXACT_POW10 = Array.from({ length: 23 }, (_, i) => Number(`1e${i}`));

function tokenText(text: Uint8Array, start: number, end: number): string {
  return String.fromCharCode.apply(null, text.subarray(start, end) as unknown as number[]);
}

function notANumber(text: Uint8Array, start: number, end: number): never {
  throw new ValueError("InvalidValue", `${tokenText(text, start, end)} is not a JSON number`);
}

/**
 * The float64 nearest to a JSON number token, correctly rounded like `Number()` and Python's
 * `float()`. Checks the token's syntax as it goes (the scan did too; this guards a file changed
 * in between). Up to 15 significant digits with a decimal exponent within ±22 take Clinger's
 * fast path (both operands exact, one rounding); anything else goes through `Number()`.
 * @throws ValueError `InvalidValue` for a malformed token.
 */
export function parseNumberToken(text: Uint8Array, start: number, end: number): number {
  let i = start;
  const negative = text[i] === 0x2d;
  if (negative) i++;
  let mantissa = 0;
  let digits = 0;
  let exp10 = 0;
  let exact = true;
  let c = 0;
  const intStart = i;
  for (; i < end; i++) {
    c = text[i]!;
    const d = c - 0x30;
    if (d < 0 || d > 9) break;
    if (digits < 15) {
      mantissa = mantissa * 10 + d;
      if (mantissa !== 0) digits++;
    } else {
      exp10++;
      if (d !== 0) exact = false;
    }
  }
  if (i === intStart || (text[intStart] === 0x30 && i - intStart > 1)) notANumber(text, start, end);
  if (i < end && c === 0x2e) {
    const fracStart = ++i;
    for (; i < end; i++) {
      c = text[i]!;
      const d = c - 0x30;
      if (d < 0 || d > 9) break;
      if (digits < 15) {
        mantissa = mantissa * 10 + d;
        exp10--;
        if (mantissa !== 0) digits++;
      } else if (d !== 0) exact = false;
    }
    if (i === fracStart) notANumber(text, start, end);
  }
  if (i < end && (c === 0x65 || c === 0x45)) {
    i++;
    let expNegative = false;
    if (i < end && (text[i] === 0x2b || text[i] === 0x2d)) expNegative = text[i++] === 0x2d;
    const expStart = i;
    let exp = 0;
    for (; i < end; i++) {
      const d = text[i]! - 0x30;
      if (d < 0 || d > 9) break;
      if (exp < 1e8) exp = exp * 10 + d; // far beyond any double either way
    }
    if (i === expStart) notANumber(text, start, end);
    exp10 += expNegative ? -exp : exp;
  }
  if (i !== end) notANumber(text, start, end);
  if (!exact) return Number(tokenText(text, start, end));
  if (mantissa === 0) return negative ? -0 : 0;
  let value: number;
  if (exp10 >= 0 && exp10 <= 22) value = mantissa * EXACT_POW10[exp10]!;
  else if (exp10 < 0 && exp10 >= -22) value = mantissa / EXACT_POW10[-exp10]!;
  else return Number(tokenText(text, start, end));
  return negative ? -value : value;
}

/** 10^0 … 10^308, each the double nearest to it (exact up to 10^22). */
const POW10 = Array.from({ length: 309 }, (_, i) => Number(`1e${i}`));
/**
 * Relative distance around an approximate decimal value within which its correctly rounded
 * float64 surely lies: at most 4 roundings of 2^-53 in {@link parseFloat32Token} plus the
 * rounding of the decimal to float64 itself, about 5.6e-16, with room to spare.
 */
const F32_SLACK = 1e-15;

/**
 * A JSON number token read as F32 values are (the nearest float64, then the nearest float32),
 * for a finite result; NaN when the token needs the exact route ({@link parseNumberToken}, then
 * rounding to float32): an overflow, or the rare value whose float64 could lie on either side of
 * a float32 rounding boundary. Checks the syntax as {@link parseNumberToken} does.
 *
 * Why it is exact: the float64 of the token lies within {@link F32_SLACK} of the value computed
 * here from up to 19 significant digits, and rounding to float32 is monotone, so when both ends
 * of that range round to the same float32, so does the float64. Most tokens of up to 15 digits
 * and a small exponent are exact doubles already (Clinger's fast path), the rest, such as the 17
 * digits Python writes for a float32 as a float64, end here without a string or `Number()`.
 * @throws ValueError `InvalidValue` for a malformed token.
 */
export function parseFloat32Token(text: Uint8Array, start: number, end: number): number {
  let i = start;
  const negative = text[i] === 0x2d;
  if (negative) i++;
  // Significant digits: the first 15 in `hi` (exact), up to 4 more in `lo`.
  let hi = 0;
  let lo = 0;
  let loDigits = 0;
  let digits = 0;
  let exp10 = 0;
  let c = 0;
  const intStart = i;
  for (; i < end; i++) {
    c = text[i]!;
    const d = c - 0x30;
    if (d < 0 || d > 9) break;
    if (digits < 15) {
      hi = hi * 10 + d;
      if (hi !== 0) digits++;
    } else if (digits < 19) {
      lo = lo * 10 + d;
      loDigits++;
      digits++;
    } else exp10++;
  }
  if (i === intStart || (text[intStart] === 0x30 && i - intStart > 1)) notANumber(text, start, end);
  if (i < end && c === 0x2e) {
    const fracStart = ++i;
    for (; i < end; i++) {
      c = text[i]!;
      const d = c - 0x30;
      if (d < 0 || d > 9) break;
      if (digits < 15) {
        hi = hi * 10 + d;
        exp10--;
        if (hi !== 0) digits++;
      } else if (digits < 19) {
        lo = lo * 10 + d;
        loDigits++;
        digits++;
        exp10--;
      }
    }
    if (i === fracStart) notANumber(text, start, end);
  }
  if (i < end && (c === 0x65 || c === 0x45)) {
    i++;
    let expNegative = false;
    if (i < end && (text[i] === 0x2b || text[i] === 0x2d)) expNegative = text[i++] === 0x2d;
    const expStart = i;
    let exp = 0;
    for (; i < end; i++) {
      const d = text[i]! - 0x30;
      if (d < 0 || d > 9) break;
      if (exp < 1e8) exp = exp * 10 + d;
    }
    if (i === expStart) notANumber(text, start, end);
    exp10 += expNegative ? -exp : exp;
  }
  if (i !== end) notANumber(text, start, end);
  if (hi === 0 && lo === 0) return negative ? -0 : 0;
  let value: number;
  if (loDigits === 0 && exp10 >= -22 && exp10 <= 22) {
    // Clinger: both operands exact, one rounding, the float64 itself.
    value = Math.fround(exp10 >= 0 ? hi * POW10[exp10]! : hi / POW10[-exp10]!);
  } else {
    const m = hi * POW10[loDigits]! + lo;
    // Below 10^-360 (m < 10^19) the float64 is far below half the least float32: a zero.
    if (exp10 < -360) return negative ? -0 : 0;
    if (exp10 > 300 || exp10 < -300) return NaN;
    const v = exp10 >= 0 ? m * POW10[exp10]! : m / POW10[-exp10]!;
    value = Math.fround(v);
    if (Math.fround(v * (1 - F32_SLACK)) !== value || Math.fround(v * (1 + F32_SLACK)) !== value) return NaN;
  }
  if (value === Infinity) return NaN;
  return negative ? -value : value;
}

/** Where the last {@link storeFloat32Run} stopped: the next leaf. */
export let storedUpTo = 0;

/**
 * The reader's fast path for F32 and C64 `data`: stores float leaves `leaf` up to `endLeaf` into
 * `floats` (leaf `leaf` goes to slot `leaf - base`) from `buf[i..]`, parsing each number as it
 * finds its end, for as long as the numbers are plain: up to 15 significant digits, a decimal
 * exponent within ±22 (then both operands are exact and one rounding makes the float64:
 * Clinger's fast path), and a finite float32. Returns where it stopped, with the next leaf in
 * {@link storedUpTo}: at the end of the bytes, before a number they cut (unless `final`), or at
 * any other leaf (a string, a longer number, a malformed one), which the general path then reads
 * (and refuses where it must).
 */
export function storeFloat32Run(buf: Uint8Array, i: number, final: boolean, floats: Float32Array, base: number, leaf: number, endLeaf: number): number {
  const native = kernels.storeFloat32Run;
  if (native !== undefined && endLeaf - leaf >= NATIVE_RUN_FROM && buf.length - i >= NATIVE_RUN_FROM) {
    const at = native(buf, i, final, floats, base, leaf, endLeaf, NATIVE_STATE);
    storedUpTo = NATIVE_STATE[0]!;
    return at;
  }
  return portableStoreFloat32Run(buf, i, final, floats, base, leaf, endLeaf);
}

/** {@link storeFloat32Run} in JavaScript: what the native kernel must equal (the tests compare them). */
export function portableStoreFloat32Run(buf: Uint8Array, i: number, final: boolean, floats: Float32Array, base: number, leaf: number, endLeaf: number): number {
  const n = buf.length;
  run: while (i < n && leaf < endLeaf) {
    let c = buf[i]!;
    if (c === 0x2c || c === 0x20 || c === 0x5b || c === 0x5d || c === 0x0a || c === 0x0d || c === 0x09) {
      i++;
      continue;
    }
    let j = i;
    const negative = c === 0x2d;
    if (negative) j++;
    if (j >= n) break;
    c = buf[j]!;
    if (c < 0x30 || c > 0x39) break;
    let m = c - 0x30;
    let digits = m === 0 ? 0 : 1;
    j++;
    if (m !== 0) {
      for (; j < n; j++) {
        c = buf[j]!;
        const d = c - 0x30;
        if (d < 0 || d > 9) break;
        m = m * 10 + d;
        if (++digits > 15) break run;
      }
    } else if (j < n) c = buf[j]!;
    let exp10 = 0;
    if (j < n && c === 0x2e) {
      const fraction = ++j;
      for (; j < n; j++) {
        c = buf[j]!;
        const d = c - 0x30;
        if (d < 0 || d > 9) break;
        m = m * 10 + d;
        exp10--;
        if (m !== 0 && ++digits > 15) break run;
      }
      if (j === fraction) break;
    }
    if (j < n && (c === 0x65 || c === 0x45)) {
      j++;
      let expNegative = false;
      if (j < n && (buf[j] === 0x2b || buf[j] === 0x2d)) expNegative = buf[j++] === 0x2d;
      const expStart = j;
      let exp = 0;
      for (; j < n; j++) {
        c = buf[j]!;
        const d = c - 0x30;
        if (d < 0 || d > 9) break;
        exp = exp * 10 + d;
        if (j - expStart > 3) break run;
      }
      if (j === expStart) break;
      exp10 += expNegative ? -exp : exp;
    }
    if (j >= n) {
      if (!final) break;
    } else if (!(c === 0x2c || c === 0x5d || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09)) break;
    if (exp10 > 22 || exp10 < -22) break;
    const value = Math.fround(exp10 >= 0 ? m * EXACT_POW10[exp10]! : m / EXACT_POW10[-exp10]!);
    if (value === Infinity) break;
    floats[leaf - base] = negative ? -value : value;
    leaf++;
    i = j;
  }
  storedUpTo = leaf;
  return i;
}

// ---- codecs --------------------------------------------------------------------------------

function outOfRange(dtype: Dtype, text: Uint8Array, start: number, end: number, range: string): ValueError {
  return new ValueError("ValueOutOfRange", `${tokenText(text, start, end)} is out of range for ${dtype} (${range})`);
}

interface IntegerSpec {
  dtype: Dtype;
  bytes: 1 | 2 | 4;
  min: number;
  max: number;
  view: (buffer: ArrayBuffer, offset: number, length: number) => { [i: number]: number };
}

const INTEGERS: readonly IntegerSpec[] = [
  { dtype: "U8", bytes: 1, min: 0, max: 255, view: (b, o, n) => new Uint8Array(b, o, n) },
  { dtype: "I8", bytes: 1, min: -128, max: 127, view: (b, o, n) => new Int8Array(b, o, n) },
  { dtype: "U16", bytes: 2, min: 0, max: 65535, view: (b, o, n) => new Uint16Array(b, o, n) },
  { dtype: "I16", bytes: 2, min: -32768, max: 32767, view: (b, o, n) => new Int16Array(b, o, n) },
  { dtype: "U32", bytes: 4, min: 0, max: 4294967295, view: (b, o, n) => new Uint32Array(b, o, n) },
  { dtype: "I32", bytes: 4, min: -2147483648, max: 2147483647, view: (b, o, n) => new Int32Array(b, o, n) },
];

const INTEGER_LEAVES: number = Leaf.Integer | Leaf.Negative;
const FLOAT_LEAVES = Leaf.Integer | Leaf.Float | Leaf.Negative | Leaf.NaN | Leaf.Infinity | Leaf.NegativeInfinity;

/** Typed view of a block (blocks are aligned to their element size, see the callers). */
function view<T>(block: Uint8Array, make: (b: ArrayBuffer, o: number, n: number) => T, bytes: number): T {
  return make(block.buffer as ArrayBuffer, block.byteOffset, block.byteLength / bytes);
}

/** A view maker that reuses the view while the block stays the same (store() runs per value). */
function viewCache<T>(make: (b: ArrayBuffer, o: number, n: number) => T, bytes: number): (block: Uint8Array) => T {
  let last: Uint8Array | undefined;
  let cached: T | undefined;
  return (block) => {
    if (block !== last) {
      cached = view(block, make, bytes);
      last = block;
    }
    return cached!;
  };
}

/**
 * An integer token's exact value as a number when it has at most 15 digits, else undefined
 * (after checking that it is digits, with an optional `-`).
 * @throws ValueError `InvalidValue` for anything else (a fraction, an exponent).
 */
function smallInteger(dtype: Dtype, text: Uint8Array, start: number, end: number): number | undefined {
  const negative = text[start] === 0x2d;
  const first = negative ? start + 1 : start;
  let v = 0;
  for (let i = first; i < end; i++) {
    const d = text[i]! - 0x30;
    if (d < 0 || d > 9) throw new ValueError("InvalidValue", `${tokenText(text, start, end)} is not an integer (${dtype} takes integers only)`);
    v = v * 10 + d;
  }
  if (end === first) throw new ValueError("InvalidValue", `${tokenText(text, start, end)} is not an integer`);
  if (end - first > 15) return undefined;
  return negative ? -v : v;
}

function integerCodec(spec: IntegerSpec): ValueCodec {
  const { dtype, bytes, min, max } = spec;
  const range = `${min} to ${max}`;
  const typed = viewCache(spec.view, bytes);
  return {
    dtype,
    elementBytes: bytes,
    leavesPerElement: 1,
    allowedLeaves: min < 0 ? INTEGER_LEAVES : Leaf.Integer,
    lossless: () => true,
    alwaysLossless: () => true,
    format(block, end, out, limit, cursor, first) {
      const values = view(block, spec.view, bytes);
      let { index, pos } = cursor;
      for (; index < end && pos <= limit; index++) {
        if (index > 0 || !first) pos = separator(out, pos);
        pos = writeInteger(out, pos, values[index]!);
      }
      cursor.index = index;
      cursor.pos = pos;
    },
    store(block, index, _leaf, kind, text, start, end) {
      if (kind & Leaf.Float) throw new ValueError("InvalidValue", `${tokenText(text, start, end)} is not an integer (${dtype} takes integers only)`);
      const v = smallInteger(dtype, text, start, end);
      if (v === undefined || v < min || v > max) throw outOfRange(dtype, text, start, end, range);
      typed(block)[index] = v;
    },
  };
}

const TWO_32 = 2 ** 32;

function int64Codec(signed: boolean): ValueCodec {
  const dtype: Dtype = signed ? "I64" : "U64";
  const min = signed ? -(1n << 63n) : 0n;
  const max = signed ? (1n << 63n) - 1n : (1n << 64n) - 1n;
  const range = `${min} to ${max}`;
  const typedWords = viewCache((b, o, n) => new Uint32Array(b, o, n), 4);
  return {
    dtype,
    elementBytes: 8,
    leavesPerElement: 1,
    allowedLeaves: signed ? INTEGER_LEAVES : Leaf.Integer,
    lossless: () => true,
    alwaysLossless: () => true,
    format(block, end, out, limit, cursor, first) {
      const words = view(block, (b, o, n) => new Uint32Array(b, o, n), 4);
      let { index, pos } = cursor;
      for (; index < end && pos <= limit; index++) {
        if (index > 0 || !first) pos = separator(out, pos);
        const lo = words[2 * index]!;
        const hi = words[2 * index + 1]!;
        // Below 2^53 in magnitude the value is an exact double; beyond, BigInt.
        const high = signed ? hi | 0 : hi;
        if (high < 0x200000 && high >= -0x200000) pos = writeInteger(out, pos, high * TWO_32 + lo);
        else {
          const big = (BigInt(hi) << 32n) | BigInt(lo);
          pos = writeAscii(out, pos, (signed ? BigInt.asIntN(64, big) : big).toString());
        }
      }
      cursor.index = index;
      cursor.pos = pos;
    },
    store(block, index, _leaf, kind, text, start, end) {
      if (kind & Leaf.Float) throw new ValueError("InvalidValue", `${tokenText(text, start, end)} is not an integer (${dtype} takes integers only)`);
      const words = typedWords(block);
      const v = smallInteger(dtype, text, start, end);
      if (v !== undefined) {
        if (v < 0 && !signed) throw outOfRange(dtype, text, start, end, range);
        words[2 * index] = v >>> 0;
        words[2 * index + 1] = Math.floor(v / TWO_32) >>> 0;
        return;
      }
      // Past 15 digits: exact through BigInt (JSON has no leading zeros, so 21+ digits are out of range anyway).
      if (end - start > 21) throw outOfRange(dtype, text, start, end, range);
      const big = BigInt(tokenText(text, start, end));
      if (big < min || big > max) throw outOfRange(dtype, text, start, end, range);
      const bits = BigInt.asUintN(64, big);
      words[2 * index] = Number(bits & 0xffffffffn);
      words[2 * index + 1] = Number(bits >> 32n);
    },
  };
}

const boolCodec: ValueCodec = {
  dtype: "BOOL",
  elementBytes: 1,
  leavesPerElement: 1,
  allowedLeaves: Leaf.True | Leaf.False,
  alwaysLossless: () => false,
  lossless(block) {
    for (let i = 0; i < block.length; i++) if (block[i]! > 1) return false;
    return true;
  },
  format(block, end, out, limit, cursor, first) {
    let { index, pos } = cursor;
    for (; index < end && pos <= limit; index++) {
      if (index > 0 || !first) pos = separator(out, pos);
      pos = put(out, pos, block[index] === 0 ? TEXT_FALSE : TEXT_TRUE);
    }
    cursor.index = index;
    cursor.pos = pos;
  },
  store(block, index, _leaf, kind) {
    block[index] = kind === Leaf.True ? 1 : 0;
  },
};

// ---- floats --------------------------------------------------------------------------------

const F32_NAN = 0x7fc00000;
const DECIMAL: Decimal = { k: 0, e: 0 };

/** Writes one float32, given its bits, as the writer spells it. */
function writeFloat32(out: Uint8Array, pos: number, bits: number): number {
  const magnitude = bits & 0x7fffffff;
  if (magnitude >= 0x7f800000) {
    if (magnitude > 0x7f800000) return put(out, pos, TEXT_NAN);
    return put(out, pos, bits === magnitude ? TEXT_INF : TEXT_NEG_INF);
  }
  if (magnitude === 0) {
    if (bits !== 0) return put(out, pos, TEXT_NEG_ZERO);
    out[pos] = 0x30;
    return pos + 1;
  }
  shortestFloat32Of(magnitude >>> 23, magnitude & 0x7fffff, DECIMAL);
  return writeDecimal(out, pos, bits !== magnitude, DECIMAL.k, DECIMAL.e);
}

/**
 * Where the last {@link formatFloat32s} or {@link formatPairs} stopped. A module variable, not a
 * cursor's property: V8 compiles the long loop on stack (OSR) before it ever leaves it, and a
 * property store after the loop, compiled without type feedback, then deoptimized that code at
 * the end of every block (once per MiB of text, each time falling back to the interpreter).
 */
export let formattedUpTo = 0;

/**
 * Runs at least this long (elements, leaves, bytes) go to the native kernels where they are
 * installed (core's `kernels`): below it, a call into the module costs more than it saves.
 */
export const NATIVE_RUN_FROM = 64;

/** Where a native kernel leaves its second result. */
const NATIVE_STATE = new Float64Array(1);

/** F32 elements `index` up to `end` (see {@link ValueCodec.format}); returns the output position. */
export function formatFloat32s(words: Uint32Array, index: number, end: number, out: Uint8Array, pos: number, limit: number, first: boolean): number {
  const native = kernels.formatFloat32s;
  if (native === undefined || end - index < NATIVE_RUN_FROM) return portableFormatFloat32s(words, index, end, out, pos, limit, first);
  for (;;) {
    pos = native(words, index, end, out, pos, limit, first, NATIVE_STATE);
    index = NATIVE_STATE[0]!;
    if (index >= end || pos > limit) break;
    // An element the kernel left for the exact route (or for want of room): written here.
    if (index > 0 || !first) pos = separator(out, pos);
    pos = writeFloat32(out, pos, words[index]!);
    index++;
    if (index >= end || pos > limit) break;
  }
  formattedUpTo = index;
  return pos;
}

/**
 * Closes the gaps `kernels.formatFloat32sAsync` left in `out[start, end)`: `stops` holds `count`
 * pairs (element, position of its gap of `gap` bytes), in order. Each element is written (with
 * its separator) where its gap begins in the closed text, and the text after the gap moved up
 * behind it; returns the new end. Moves each byte once.
 */
export function fillFloat32Gaps(words: Uint32Array, out: Uint8Array, stops: Float64Array, count: number, end: number, first: boolean, gap: number): number {
  if (count === 0) return end;
  let pos = stops[1]!;
  for (let k = 0; k < count; k++) {
    const index = stops[2 * k]!;
    const gapEnd = stops[2 * k + 1]! + gap;
    const start = pos;
    if (index > 0 || !first) pos = separator(out, pos);
    pos = writeFloat32(out, pos, words[index]!);
    // The text is at most `gap` bytes and begins at or before its gap: it ends within it.
    if (pos - start > gap) throw new Error(`F32 element ${index} took ${pos - start} bytes, more than the gap of ${gap}`);
    const next = k + 1 < count ? stops[2 * k + 3]! : end;
    out.copyWithin(pos, gapEnd, next);
    pos += next - gapEnd;
  }
  return pos;
}

/** {@link formatFloat32s} in JavaScript: what the native kernel must equal (the tests compare them). */
export function portableFormatFloat32s(words: Uint32Array, index: number, end: number, out: Uint8Array, pos: number, limit: number, first: boolean): number {
  if (index === 0 && first && index < end && pos <= limit) {
    pos = writeFloat32(out, pos, words[0]!);
    index = 1;
  }
  for (; index < end && pos <= limit; index++) {
    out[pos] = 0x2c;
    out[pos + 1] = 0x20;
    pos = writeFloat32(out, pos + 2, words[index]!);
  }
  formattedUpTo = index;
  return pos;
}

/** C64 elements as `[re, im]` pairs, likewise. */
function formatPairs(words: Uint32Array, index: number, end: number, out: Uint8Array, pos: number, limit: number, first: boolean): number {
  for (; index < end && pos <= limit; index++) {
    if (index > 0 || !first) pos = separator(out, pos);
    out[pos++] = 0x5b;
    pos = writeFloat32(out, pos, words[2 * index]!);
    pos = separator(out, pos);
    pos = writeFloat32(out, pos, words[2 * index + 1]!);
    out[pos++] = 0x5d;
  }
  formattedUpTo = index;
  return pos;
}

/** Whether values carry these F32 words' exact bits: no NaN but the canonical one, which "NaN" reads back as. */
export function float32Lossless(words: Uint32Array): boolean {
  const native = kernels.float32Lossless;
  return native !== undefined && words.length >= NATIVE_RUN_FROM ? native(words) : portableFloat32Lossless(words);
}

/** {@link float32Lossless} in JavaScript: the native module's `float32Lossless` is its twin. */
export function portableFloat32Lossless(words: Uint32Array): boolean {
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    // A NaN (exponent all ones, mantissa non-zero) other than the canonical quiet NaN.
    if ((w & 0x7f800000) === 0x7f800000 && (w & 0x7fffff) !== 0 && w !== F32_NAN) return false;
  }
  return true;
}

function specialValue(kind: number): number {
  return kind === Leaf.NaN ? NaN : kind === Leaf.Infinity ? Infinity : -Infinity;
}

const NUMBER_KINDS = Leaf.Integer | Leaf.Float;

/** The value of a float leaf, refusing finite text that overflows the float64 range. */
function floatLeaf(dtype: Dtype, kind: number, text: Uint8Array, start: number, end: number): number {
  if ((kind & NUMBER_KINDS) === 0) return specialValue(kind);
  const x = parseNumberToken(text, start, end);
  if (x === Infinity || x === -Infinity) throw new ValueError("ValueOutOfRange", `${tokenText(text, start, end)} overflows ${dtype}`);
  return x;
}

const f32Scratch = new Float32Array(1);

/** Stores a float64 into a float32 slot, refusing a finite value that rounds to infinity. */
function storeFloat32(floats: Float32Array, slot: number, x: number, dtype: Dtype, text: Uint8Array, start: number, end: number): void {
  f32Scratch[0] = x;
  const y = f32Scratch[0]!;
  if ((y === Infinity || y === -Infinity) && x !== y) {
    throw new ValueError("ValueOutOfRange", `${tokenText(text, start, end)} overflows ${dtype} (largest finite 3.4028235e+38)`);
  }
  floats[slot] = y;
}

const f64Slots = viewCache((b, o, n) => new Float64Array(b, o, n), 8);

/** F32, or C64 as pairs of F32 (real, imaginary) written `[re, im]`. */
function float32Codec(dtype: "F32" | "C64"): ValueCodec {
  const pairs = dtype === "C64";
  const leaves = pairs ? 2 : 1;
  const slots = viewCache((b, o, n) => new Float32Array(b, o, n), 4);
  return {
    dtype,
    elementBytes: 4 * leaves,
    leavesPerElement: leaves,
    allowedLeaves: FLOAT_LEAVES,
    alwaysLossless: () => false,
    lossless: (block) => float32Lossless(view(block, (b, o, n) => new Uint32Array(b, o, n), 4)),
    format(block, end, out, limit, cursor, first) {
      const words = view(block, (b, o, n) => new Uint32Array(b, o, n), 4);
      cursor.pos = (pairs ? formatPairs : formatFloat32s)(words, cursor.index, end, out, cursor.pos, limit, first);
      cursor.index = formattedUpTo;
    },
    store(block, index, leaf, kind, text, start, end) {
      if ((kind & NUMBER_KINDS) !== 0) {
        const y = parseFloat32Token(text, start, end);
        if (y === y) {
          slots(block)[leaves * index + leaf] = y;
          return;
        }
      }
      storeFloat32(slots(block), leaves * index + leaf, floatLeaf(dtype, kind, text, start, end), dtype, text, start, end);
    },
  };
}

const f64Codec: ValueCodec = {
  dtype: "F64",
  elementBytes: 8,
  leavesPerElement: 1,
  allowedLeaves: FLOAT_LEAVES,
  alwaysLossless: () => false,
  lossless(block) {
    const words = view(block, (b, o, n) => new Uint32Array(b, o, n), 4);
    for (let i = 0; i < words.length; i += 2) {
      const lo = words[i]!;
      const hi = words[i + 1]!;
      if ((hi & 0x7ff00000) === 0x7ff00000 && ((hi & 0xfffff) !== 0 || lo !== 0) && (hi !== 0x7ff80000 || lo !== 0)) return false;
    }
    return true;
  },
  format(block, end, out, limit, cursor, first) {
    const floats = view(block, (b, o, n) => new Float64Array(b, o, n), 8);
    let { index, pos } = cursor;
    for (; index < end && pos <= limit; index++) {
      if (index > 0 || !first) pos = separator(out, pos);
      const x = floats[index]!;
      if (x !== x) pos = put(out, pos, TEXT_NAN);
      else if (x === Infinity) pos = put(out, pos, TEXT_INF);
      else if (x === -Infinity) pos = put(out, pos, TEXT_NEG_INF);
      else if (x === 0 && 1 / x < 0) pos = put(out, pos, TEXT_NEG_ZERO);
      else pos = writeAscii(out, pos, String(x)); // ECMA-262 Number::toString: the shortest round trip
    }
    cursor.index = index;
    cursor.pos = pos;
  },
  store(block, index, _leaf, kind, text, start, end) {
    f64Slots(block)[index] = floatLeaf("F64", kind, text, start, end);
  },
};

/** Every bit pattern's text and whether it reads back to itself, for a 16- or 8-bit float. */
interface TextTable {
  /** Concatenated texts; pattern p is `bytes[offsets[p], offsets[p + 1])`. */
  bytes: Uint8Array;
  offsets: Uint32Array;
  lossless: Uint8Array;
}

/** The text the writer uses for a minifloat pattern: `"NaN"`, `"Infinity"`, `-0.0`, or the shortest decimal. */
export function minifloatText(codec: MinifloatCodec, bits: number): string {
  const x = codec.decode(bits);
  if (x !== x) return '"NaN"';
  if (x === Infinity) return '"Infinity"';
  if (x === -Infinity) return '"-Infinity"';
  if (x === 0) return 1 / x < 0 ? "-0.0" : "0";
  return decimalText(
    x < 0,
    shortestDecimal(x, (y) => codec.encode(y) === bits),
  );
}

function buildTextTable(codec: MinifloatCodec): TextTable {
  const count = 1 << codec.width;
  const texts: string[] = [];
  const lossless = new Uint8Array(count);
  let total = 0;
  for (let bits = 0; bits < count; bits++) {
    const text = minifloatText(codec, bits);
    texts.push(text);
    total += text.length;
    // Decided by the reader's own rounding: only NaNs other than the canonical one fail.
    lossless[bits] = readBack(codec, text) === bits ? 1 : 0;
  }
  const bytes = new Uint8Array(total);
  const offsets = new Uint32Array(count + 1);
  let at = 0;
  texts.forEach((text, bits) => {
    offsets[bits] = at;
    at = writeAscii(bytes, at, text);
  });
  offsets[count] = at;
  return { bytes, offsets, lossless };
}

/** What the reader makes of a text the writer wrote for a minifloat. */
function readBack(codec: MinifloatCodec, text: string): number {
  const special = text === '"NaN"' ? NaN : text === '"Infinity"' ? Infinity : text === '"-Infinity"' ? -Infinity : undefined;
  return codec.encode(special ?? Number(text));
}

function largestFinite(codec: MinifloatCodec): string {
  let best = 0;
  for (let bits = 0; bits < 1 << codec.width; bits++) {
    const v = codec.decode(bits);
    if (v > codec.decode(best) && v !== Infinity) best = bits;
  }
  return minifloatText(codec, best);
}

function minifloatCodec(codec: MinifloatCodec): ValueCodec {
  let table: TextTable | undefined;
  const getTable = () => (table ??= buildTextTable(codec));
  // Asked once per tensor written: decided once, not by a scan of the whole table each time.
  let always: boolean | undefined;
  const wide = codec.width === 16;
  const { dtype } = codec;
  const words = (block: Uint8Array): { readonly [i: number]: number; readonly length: number } =>
    wide ? view(block, (b, o, n) => new Uint16Array(b, o, n), 2) : block;
  const slots16 = viewCache((b, o, n) => new Uint16Array(b, o, n), 2);
  let allowed = Leaf.Integer | Leaf.Float | Leaf.NaN;
  if (codec.signed) allowed |= Leaf.Negative;
  if (codec.hasInfinity) allowed |= Leaf.Infinity | Leaf.NegativeInfinity;
  return {
    dtype,
    elementBytes: codec.width / 8,
    leavesPerElement: 1,
    allowedLeaves: allowed,
    alwaysLossless: () => (always ??= getTable().lossless.every((ok) => ok === 1)),
    lossless(block) {
      const { lossless } = getTable();
      const w = words(block);
      for (let i = 0; i < w.length; i++) if (lossless[w[i]!] === 0) return false;
      return true;
    },
    format(block, end, out, limit, cursor, first) {
      const { bytes, offsets } = getTable();
      const w = words(block);
      let { index, pos } = cursor;
      for (; index < end && pos <= limit; index++) {
        if (index > 0 || !first) pos = separator(out, pos);
        const bits = w[index]!;
        for (let i = offsets[bits]!, stop = offsets[bits + 1]!; i < stop; i++) out[pos++] = bytes[i]!;
      }
      cursor.index = index;
      cursor.pos = pos;
    },
    store(block, index, _leaf, kind, text, start, end) {
      const x = floatLeaf(dtype, kind, text, start, end);
      const bits = codec.encode(x);
      if (bits < 0) {
        const what = (kind & NUMBER_KINDS) === 0 ? `"${tokenText(text, start, end)}"` : tokenText(text, start, end);
        throw new ValueError(
          "ValueOutOfRange",
          bits === OVERFLOW
            ? `${what} overflows ${dtype} (largest finite ${largestFinite(codec)})`
            : `${what} is not representable in ${dtype}, whose values are positive powers of two`,
        );
      }
      if (wide) slots16(block)[index] = bits;
      else block[index] = bits;
    },
  };
}

const CODECS = new Map<Dtype, ValueCodec>();

/**
 * The value codec of a dtype, or undefined for F4 and F6, which have no values form (safetensors
 * does not define how their values pack into bytes).
 */
export function valueCodec(dtype: Dtype): ValueCodec | undefined {
  let codec = CODECS.get(dtype);
  if (codec === undefined) {
    codec = makeCodec(dtype);
    if (codec !== undefined) CODECS.set(dtype, codec);
  }
  return codec;
}

function makeCodec(dtype: Dtype): ValueCodec | undefined {
  if (dtype === "BOOL") return boolCodec;
  if (dtype === "F32" || dtype === "C64") return float32Codec(dtype);
  if (dtype === "F64") return f64Codec;
  if (dtype === "I64" || dtype === "U64") return int64Codec(dtype === "I64");
  const integer = INTEGERS.find((s) => s.dtype === dtype);
  if (integer !== undefined) return integerCodec(integer);
  const small = minifloat(dtype);
  return small === undefined ? undefined : minifloatCodec(small);
}

/** True on little-endian platforms, where typed-array views read safetensors bytes as they are. */
