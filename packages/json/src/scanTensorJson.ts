/**
 * The first pass of the JSON reader: one streaming scan of the whole document that validates it
 * and records, per tensor, its dtype, shape and where its data lies, without keeping any value.
 *
 * The scanner is a tokenizer of our own, not `JSON.parse`: it reads the source in windows, tells
 * integer tokens from float tokens, keeps big integers exact, refuses duplicate keys at every
 * level (the format's own rule, as in safetensors' README), bounds nesting by a limit and uses no
 * recursion. Keys may come in any order, so `data` may precede the `dtype` and `shape` it is
 * checked against: the scan records the nested structure and the kinds of values it saw, and
 * checks them when the tensor's object closes.
 */
import {
  type ByteSource,
  DEFAULT_CHUNK_SIZE,
  DTYPES,
  type Dtype,
  NameIndex,
  StConvertError,
  checkShapeOverflow,
  createMetadata,
  isDtype,
  kernels,
  quoteName,
  tensorByteLength,
  withContext,
} from "@st-convert/core";
import { BASE64_VALUE } from "./base64.js";
import { BAD_LEAF, BAD_NUMBER, ByteWindow, NEED_MORE, isWhitespace, leafEnd, leafToken, numberEnd, numberToken, startsWith } from "./ByteWindow.js";
import { Leaf, NATIVE_RUN_FROM, type ValueCodec, valueCodec } from "./valueCodecs.js";

/**
 * Deepest nesting of objects and arrays accepted. A tensor of rank r nests r + 2 levels (the
 * document, the tensor, then r arrays; one more for C64 pairs); serde_json's limit is 128.
 */
export const MAX_JSON_DEPTH = 128;

/**
 * Most bytes the document may spend outside `data` and `data_base64` values (names, metadata,
 * shapes, whitespace). The same bound as a safetensors header (`MAX_HEADER_SIZE`), which has to
 * hold all of it; it caps what the scan keeps in memory.
 */
export const MAX_JSON_HEADER_SIZE = 100_000_000;

/**
 * Longest number token accepted, in bytes. The exact decimal expansion of any float64 fits
 * (at most 767 significant digits plus zeros and an exponent); it bounds what a token can buffer.
 */
export const MAX_NUMBER_LENGTH = 4096;

/** Where the native `numberRun` leaves its count. */
const RUN_STATE = new Float64Array(1);

/** Error codes of the JSON form, besides the shared ones from core. */
export type JsonErrorCode =
  /** Not JSON: syntax, invalid UTF-8, a lone surrogate escape, content after the object. */
  | "InvalidJson"
  /** A tensor entry that is not `{"dtype", "shape", "data" | "data_base64"}`. */
  | "InvalidTensor"
  /** `data` whose nesting or value count does not match the shape. */
  | "ShapeMismatch"
  /** A value of a kind the dtype does not take (a float for an integer dtype, a boolean for F32, null). */
  | "InvalidValue"
  /** A value beyond the dtype's range: 300 for U8, 1e5 for F16, "Infinity" for F8_E4M3. */
  | "ValueOutOfRange"
  /** `data_base64` that is not standard padded base64. */
  | "InvalidBase64"
  | "DuplicateKey"
  | "UnknownDtype"
  | "InvalidMetadata"
  | "ByteLengthMismatch"
  | "MisalignedSlice"
  /** A shape whose dims overflow u64 before a 0 empties it, which a safetensors header cannot hold. */
  | "ValidationOverflow"
  | "Unsupported"
  | "LimitExceeded";

/** Options of the scan (and of `readTensorJson`). */
export interface ScanOptions {
  /** Deepest nesting accepted. Default {@link MAX_JSON_DEPTH}. */
  maxDepth?: number;
  /** Most bytes outside tensor data. Default {@link MAX_JSON_HEADER_SIZE}. */
  maxHeaderSize?: number;
  /** Bytes read from the source at a time. Default `DEFAULT_CHUNK_SIZE` (2 MiB). */
  windowSize?: number;
}

/** What the scan learnt about one tensor. */
export interface ScannedTensor {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly byteLength: number;
  readonly encoding: "values" | "base64";
  /** Absolute byte range of the value: the whole JSON value for `data`, the string's content for `data_base64`. */
  readonly start: number;
  readonly end: number;
  /** `data`: the dims of the value as written (flat, nested or bare), which locate a leaf in messages. */
  readonly dims: readonly number[];
  /** `data_base64`: whether the string holds escapes (`\/`, `\u0041`), which the fast decoder skips. */
  readonly escaped: boolean;
}

/**
 * Makes the record of a scanned tensor from the fields of {@link ScannedTensor}, in their order:
 * positional, so that the scan builds each record once (500,000 of them, no intermediate object).
 */
export type MakeTensor<T> = (
  name: string,
  dtype: Dtype,
  shape: readonly number[],
  byteLength: number,
  encoding: "values" | "base64",
  start: number,
  end: number,
  dims: readonly number[],
  escaped: boolean,
) => T;

/** The whole document, scanned: its tensors as `make` made them. */
export interface ScannedDocument<T = ScannedTensor> {
  readonly metadata: Record<string, string> | null;
  readonly tensors: readonly T[];
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Spells a tensor name in a path: plain names as they are, others quoted. */
export function pathName(name: string): string {
  return /^[A-Za-z0-9_][A-Za-z0-9_.\-/:]*$/.test(name) ? name : quoteName(name);
}

/** The path of leaf `leaf` (in row-major order) of a `data` value written with `dims`. */
export function leafPath(tensorPath: string, dims: readonly number[], leaf: number): string {
  const index: number[] = [];
  let rest = leaf;
  for (let level = dims.length - 1; level >= 0; level--) {
    const dim = dims[level]!;
    index.unshift(dim === 0 ? 0 : rest % dim);
    rest = dim === 0 ? 0 : Math.floor(rest / dim);
  }
  return `${tensorPath}.data${index.map((i) => `[${i}]`).join("")}`;
}

function describeByte(c: number): string {
  if (c < 0) return "the end of the input";
  if (c >= 0x21 && c < 0x7f) return `'${String.fromCharCode(c)}'`;
  return `byte 0x${c.toString(16).padStart(2, "0")}`;
}

function describeValueStart(c: number): string {
  if (c === 0x7b) return "an object";
  if (c === 0x5b) return "an array";
  if (c === 0x22) return "a string";
  if (c === 0x74 || c === 0x66) return "a boolean";
  if (c === 0x6e) return "null";
  if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return "a number";
  return describeByte(c);
}

/** The position of a one-bit flag. */
function bitIndex(bit: number): number {
  return 31 - Math.clz32(bit);
}

const LEAF_BITS = [Leaf.Integer, Leaf.Float, Leaf.NaN, Leaf.Infinity, Leaf.NegativeInfinity, Leaf.True, Leaf.False, Leaf.Negative];

/**
 * The structure of one `data` value, scanned incrementally: a synchronous state machine fed the
 * bytes at hand, which stops before a token the bytes end in. Arrays must be regular (every array
 * at one level has the same length, values only at the deepest level): their lengths are `dims`.
 */
class DataScan {
  depth = 0;
  /** Elements started so far in the open array at each level. */
  readonly counts: number[] = [];
  /** Length of every array at each level, fixed by the first one closed (−1 before). */
  readonly dims: number[] = [];
  /** Nesting depth of the values (−1 before the first). */
  leafDepth = -1;
  /** Deepest level at which an array was opened. */
  maxArrayLevel = -1;
  expectValue = true;
  justOpened = false;
  leaves = 0;
  kinds = 0;
  /** Leaf index where each kind bit first appeared (by the bit's position), −1 before. */
  readonly firstLeaf: number[] = [-1, -1, -1, -1, -1, -1, -1, -1];
  /** Levels of `counts` and `dims` in use (the arrays are kept from tensor to tensor). */
  levels = 0;
  done = false;
  private name = "";
  /** Arrays that may still be opened below the enclosing objects. */
  private maxArrays = 0;
  private fail: (code: JsonErrorCode, rule: string) => never = () => {
    throw new Error("DataScan used before reset");
  };

  constructor(private readonly position: (i: number) => number) {}

  /** Ready for the `data` value of the tensor at `path` (one instance serves every tensor in turn). */
  reset(name: string, maxArrays: number, fail: (code: JsonErrorCode, rule: string) => never): void {
    this.name = name;
    this.maxArrays = maxArrays;
    this.fail = fail;
    this.depth = 0;
    this.levels = 0;
    this.leafDepth = -1;
    this.maxArrayLevel = -1;
    this.expectValue = true;
    this.justOpened = false;
    this.leaves = 0;
    if (this.kinds !== 0) {
      const firstLeaf = this.firstLeaf;
      for (let k = 0; k < firstLeaf.length; k++) firstLeaf[k] = -1;
    }
    this.kinds = 0;
    this.done = false;
  }

  /**
   * A flat list of plain numbers (`[1.5, -2, 3e-7]`, or `[]`) lying whole in `buf` from `i`, on
   * its `[`: the state {@link reset} then {@link run} leave after it, made in one loop over locals,
   * for the many small tensors of a checkpoint. Returns the end of the list, or −1 for anything
   * else (nesting, strings, a number that is malformed or cut by the end of `buf`), which `run`
   * then reads from the start and refuses where it must.
   */
  flat(buf: Uint8Array, i: number, name: string, maxArrays: number, fail: (code: JsonErrorCode, rule: string) => never): number {
    if (maxArrays < 1) return -1;
    const n = buf.length;
    const firstLeaf = this.firstLeaf;
    if (this.kinds !== 0) {
      for (let k = 0; k < firstLeaf.length; k++) firstLeaf[k] = -1;
      this.kinds = 0;
    }
    let kinds = 0;
    let count = 0;
    let j = i + 1;
    while (j < n && isWhitespace(buf[j]!)) j++;
    if (j >= n) return -1;
    if (buf[j] === 0x5d) j++;
    else {
      for (;;) {
        // The grammar of numberEnd, inline, as in numberRun.
        const d = buf[j]!;
        let k = d === 0x2d ? j + 1 : j;
        if (k >= n) return -1;
        let e = buf[k]!;
        let nonZero = e !== 0x30;
        if (e === 0x30) k++;
        else if (e >= 0x31 && e <= 0x39) for (k++; k < n && (buf[k]! - 0x30) >>> 0 < 10; k++);
        else return -1;
        let float = false;
        if (k < n && buf[k] === 0x2e) {
          float = true;
          const fraction = ++k;
          for (; k < n && (e = buf[k]! - 0x30) >>> 0 < 10; k++) if (e !== 0) nonZero = true;
          if (k === fraction) return -1;
        }
        if (k < n && (buf[k] === 0x65 || buf[k] === 0x45)) {
          float = true;
          k++;
          if (k < n && (buf[k] === 0x2b || buf[k] === 0x2d)) k++;
          const exponent = k;
          while (k < n && (buf[k]! - 0x30) >>> 0 < 10) k++;
          if (k === exponent) return -1;
        }
        if (k - j > MAX_NUMBER_LENGTH) return -1;
        const kind = (float ? Leaf.Float : Leaf.Integer) | (d === 0x2d && nonZero ? Leaf.Negative : 0);
        if ((kinds & kind) !== kind) {
          for (const bit of LEAF_BITS) if (kind & bit && !(kinds & bit)) firstLeaf[bitIndex(bit)] = count;
          kinds |= kind;
        }
        count++;
        j = k;
        while (j < n && isWhitespace(buf[j]!)) j++;
        if (j >= n) return -1;
        const c = buf[j]!;
        if (c === 0x5d) {
          j++;
          break;
        }
        if (c !== 0x2c) return -1;
        j++;
        while (j < n && isWhitespace(buf[j]!)) j++;
        if (j >= n) return -1;
      }
    }
    this.name = name;
    this.maxArrays = maxArrays;
    this.fail = fail;
    this.depth = 0;
    this.levels = 1;
    this.counts[0] = count;
    this.dims[0] = count;
    this.leafDepth = count > 0 ? 1 : -1;
    this.maxArrayLevel = 0;
    this.expectValue = false;
    this.justOpened = false;
    this.leaves = count;
    this.kinds = kinds;
    this.done = true;
    return j;
  }

  /**
   * The path of the current element: the last one started, or with `pending` the one about to
   * start; with `levels`, the enclosing array at that depth instead.
   */
  where(pending = false, levels = this.depth): string {
    let path = `${pathName(this.name)}.data`;
    for (let level = 0; level < levels; level++) {
      const count = this.counts[level]!;
      path += `[${pending && level === levels - 1 ? count : Math.max(0, count - 1)}]`;
    }
    return path;
  }

  syntax(message: string, i: number, pending = false): never {
    return this.fail("InvalidJson", `${this.where(pending)}: ${message} at byte ${this.position(i)}`);
  }

  private startElement(): void {
    if (this.depth === 0) return;
    const level = this.depth - 1;
    const count = ++this.counts[level]!;
    const dim = this.dims[level]!;
    if (dim !== -1 && count > dim) {
      this.fail("ShapeMismatch", `${this.where()}: arrays at this level hold ${dim} elements, this one holds more (arrays must be regular)`);
    }
  }

  /** Scans `buf` from `i`; returns where it stopped (at a token cut by the end of `buf`, or after the value). */
  run(buf: Uint8Array, i: number, final: boolean): number {
    const n = buf.length;
    while (i < n) {
      const c = buf[i]!;
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
        i++;
        continue;
      }
      if (c === 0x2c) {
        if (this.expectValue) this.syntax("unexpected ','", i);
        this.expectValue = true;
        this.justOpened = false;
        i++;
        continue;
      }
      if (c === 0x5d) {
        if (this.expectValue && !this.justOpened) this.syntax("a ']' right after ','", i);
        const level = this.depth - 1;
        const count = this.counts[level]!;
        const dim = this.dims[level]!;
        if (dim === -1) this.dims[level] = count;
        else if (count !== dim) {
          this.fail(
            "ShapeMismatch",
            `${this.where(false, level)}: arrays at this level hold ${dim} elements, this one holds ${count} (arrays must be regular)`,
          );
        }
        this.depth--;
        this.expectValue = false;
        this.justOpened = false;
        i++;
        if (this.depth === 0) {
          this.done = true;
          return i;
        }
        continue;
      }
      if (!this.expectValue) this.syntax(`expected ',' or ']', found ${describeByte(c)}`, i);
      if (c === 0x5b) {
        const level = this.depth;
        if (this.leafDepth !== -1 && level >= this.leafDepth) {
          this.fail("ShapeMismatch", `${this.where(true)}: an array where the other elements at this level are values (arrays must be regular)`);
        }
        if (level >= this.maxArrays) {
          this.fail("LimitExceeded", `${this.where(true)}: nesting deeper than ${this.maxArrays + 2} levels (the limit is maxDepth)`);
        }
        this.startElement();
        this.counts[level] = 0;
        if (level === this.levels) {
          this.dims[level] = -1;
          this.levels++;
        }
        if (level > this.maxArrayLevel) this.maxArrayLevel = level;
        this.depth++;
        this.justOpened = true;
        i++;
        continue;
      }
      const end = leafEnd(buf, i, final);
      if (end === NEED_MORE) return this.cut(buf, i);
      if (end === BAD_LEAF) this.badLeaf(buf, i);
      if (end - i > MAX_NUMBER_LENGTH) this.fail("LimitExceeded", `${this.where(true)}: a number longer than ${MAX_NUMBER_LENGTH} characters`);
      const kind = leafToken.kind;
      if (this.leafDepth !== this.depth) {
        if (this.leafDepth !== -1 || this.depth <= this.maxArrayLevel) {
          this.fail("ShapeMismatch", `${this.where(true)}: a value where the other elements at this level are arrays (arrays must be regular)`);
        }
        this.leafDepth = this.depth;
      }
      this.startElement();
      if ((this.kinds & kind) !== kind) {
        for (const bit of LEAF_BITS) if (kind & bit && this.firstLeaf[bitIndex(bit)] === -1) this.firstLeaf[bitIndex(bit)] = this.leaves;
        this.kinds |= kind;
      }
      this.leaves++;
      i = end;
      this.expectValue = false;
      this.justOpened = false;
      if (this.depth === 0) {
        this.done = true;
        return i;
      }
      i = this.numberRun(buf, i);
    }
    if (final) this.syntax("unexpected end of input inside data", i);
    return i;
  }

  /**
   * The run of numbers that follows a value in its array (`, 1.5, -2, 3e-7`): what {@link run}
   * does with them, in a loop of its own over locals. Stops, leaving the token to `run`, at
   * anything else: a `]`, a string, a number cut by the end of `buf` or malformed, one more than
   * the level's length, or a kind of number not seen before in this value (whose first leaf `run`
   * records).
   */
  private numberRun(buf: Uint8Array, i: number): number {
    const n = buf.length;
    const level = this.depth - 1;
    const counts = this.counts;
    let count = counts[level]!;
    const dim = this.dims[level]!;
    const kinds = this.kinds;
    const start = count;
    const native = kernels.numberRun;
    if (native !== undefined && n - i >= NATIVE_RUN_FROM && (dim === -1 || dim - count >= NATIVE_RUN_FROM)) {
      const at = native(buf, i, count, dim, kinds, MAX_NUMBER_LENGTH, RUN_STATE);
      count = RUN_STATE[0]!;
      if (count !== start) {
        this.leaves += count - start;
        counts[level] = count;
      }
      return at;
    }
    const at = portableNumberRun(buf, i, count, dim, kinds, MAX_NUMBER_LENGTH);
    count = countedUpTo;
    if (count !== start) {
      this.leaves += count - start;
      counts[level] = count;
    }
    // From after the last value taken: `run` reads on from there (its whitespace, its comma).
    return at;
  }

  private cut(buf: Uint8Array, i: number): number {
    if (buf.length - i > MAX_NUMBER_LENGTH) this.fail("LimitExceeded", `${this.where(true)}: a number longer than ${MAX_NUMBER_LENGTH} characters`);
    return i;
  }

  /** Refuses what {@link leafEnd} found at `buf[i]`, saying why. */
  private badLeaf(buf: Uint8Array, i: number): never {
    const c = buf[i]!;
    switch (leafToken.problem) {
      case "number":
        return this.syntax(`invalid number (${numberToken.reason})`, i, true);
      case "string": {
        const end = leafToken.shownEnd;
        let shown: string;
        try {
          shown = utf8.decode(buf.subarray(i, end));
        } catch {
          shown = "with invalid UTF-8";
        }
        const cut = buf[end - 1] === 0x22 && end - i > 1 ? "" : "…";
        return this.fail(
          "InvalidValue",
          `${this.where(true)}: the string ${shown}${cut} is not a value; strings in data are "NaN", "Infinity" and "-Infinity" only`,
        );
      }
      case "unterminated":
        return this.syntax("unterminated string", i, true);
      case "null":
        return this.fail("InvalidValue", `${this.where(true)}: null is not a value`);
      case "object":
        return this.fail("InvalidValue", `${this.where(true)}: an object is not a value`);
      case "bare": {
        const word = c === 0x4e ? "NaN" : "Infinity";
        return this.syntax(`bare ${word} is not JSON; write the string "${word}"`, i, true);
      }
      case "literal":
        return this.syntax("invalid literal", i, true);
      default:
        return this.syntax(`unexpected ${describeByte(c)}`, i, true);
    }
  }

  /**
   * The dims of the value as written: the array lengths, then nothing (values at the deepest
   * level). `shape` or `last` itself when equal to either (the common cases: nested as the shape,
   * or flat like the tensor before), so that 500,000 small tensors keep no array each for it.
   */
  writtenDims(shape: readonly number[], last: readonly number[]): readonly number[] {
    const n = this.leafDepth === -1 ? this.levels : this.leafDepth;
    if (sameDims(this.dims, n, shape)) return shape;
    if (sameDims(this.dims, n, last)) return last;
    return this.dims.slice(0, n);
  }
}

/** The count {@link portableNumberRun} reached, as the native `numberRun` leaves it in its state. */
export let countedUpTo = 0;

/**
 * The scanner's run of numbers after a value, in JavaScript (the native module's `numberRun` is its
 * twin): from `buf[i]`, just past a value in an array, the numbers that follow, each after a comma,
 * counted from `count` while under `dim` (-1: no bound), each at most `maxLength` bytes and followed
 * by a delimiter before the buffer's end, of a kind among `kinds`. Returns the end of the last one
 * counted (i when none was); {@link countedUpTo} the count.
 */
export function portableNumberRun(buf: Uint8Array, i: number, count: number, dim: number, kinds: number, maxLength: number): number {
  let at = i;
  const n = buf.length;
  while (i < n) {
    const c = buf[i]!;
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
      i++;
      continue;
    }
    if (c !== 0x2c) break;
    let j = i + 1;
    while (j < n && isWhitespace(buf[j]!)) j++;
    if (j >= n) break;
    const d = buf[j]!;
    if (d !== 0x2d && (d < 0x30 || d > 0x39)) break;
    if (dim !== -1 && count >= dim) break;
    // The number's grammar, inline (numberEnd's, for the tokens it accepts and a delimiter
    // after them; anything else is left to `run`, which says what is wrong).
    let k = d === 0x2d ? j + 1 : j;
    if (k >= n) break;
    let e = buf[k]!;
    let nonZero = e !== 0x30;
    if (e === 0x30) k++;
    else if (e >= 0x31 && e <= 0x39) for (k++; k < n && (buf[k]! - 0x30) >>> 0 < 10; k++);
    else break;
    let float = false;
    if (k < n && buf[k] === 0x2e) {
      float = true;
      const fraction = ++k;
      for (; k < n && (e = buf[k]! - 0x30) >>> 0 < 10; k++) if (e !== 0) nonZero = true;
      if (k === fraction) break;
    }
    if (k < n && (buf[k] === 0x65 || buf[k] === 0x45)) {
      float = true;
      k++;
      if (k < n && (buf[k] === 0x2b || buf[k] === 0x2d)) k++;
      const exponent = k;
      while (k < n && (buf[k]! - 0x30) >>> 0 < 10) k++;
      if (k === exponent) break;
    }
    if (k >= n || k - j > maxLength) break;
    e = buf[k]!;
    if (!(e === 0x2c || e === 0x5d || e === 0x20 || e === 0x0a || e === 0x0d || e === 0x09)) break;
    const kind = (float ? Leaf.Float : Leaf.Integer) | (d === 0x2d && nonZero ? Leaf.Negative : 0);
    if ((kinds & kind) !== kind) break;
    count++;
    i = k;
    at = k;
  }
  countedUpTo = count;
  return at;
}

/** True when `dims[0..n)` are the numbers of `other`. */
function sameDims(dims: readonly number[], n: number, other: readonly number[]): boolean {
  if (other.length !== n) return false;
  for (let k = 0; k < n; k++) if (dims[k] !== other[k]) return false;
  return true;
}

/**
 * `shape[0..n)` as an array of its own, exactly that long (a pushed-to array keeps room for 16
 * more), or `last` when equal to it: runs of same-shaped tensors share one array (read-only, as
 * every reader's shapes are).
 */
function exactShape(shape: readonly number[], n: number, last: readonly number[]): readonly number[] {
  if (sameDims(shape, n, last)) return last;
  if (n === 0) return [];
  if (n === 1) return [shape[0]!];
  if (n === 2) return [shape[0]!, shape[1]!];
  return shape.slice(0, n);
}

/** The result of scanning a `data_base64` string. */
interface Base64Scan {
  start: number;
  end: number;
  /** Bytes it decodes to. */
  decoded: number;
  escaped: boolean;
}

/**
 * Returned by the scanner's synchronous helpers when the bytes at hand end before their token
 * and the source has more: the calling generator yields, the driver reads on, the helper runs
 * again from where the cursor stayed.
 */
const NEED = -9;

/** Where {@link Scanner.plainMembers} stopped. */
const MEMBERS_END = 0;
const AFTER_MEMBER = 1;
const AT_KEY = 2;
const AT_VALUE = 3;

/** Fields of a tensor entry, as bits of a set. */
const DTYPE_SEEN = 1;
const SHAPE_SEEN = 2;
const DATA_SEEN = 4;
const BASE64_SEEN = 8;

/**
 * Scans a whole document; see the module comment. The grammar is a synchronous generator over
 * the bytes at hand that yields only when they run out (once per window), so that a document of
 * 500,000 small tensors costs no promise per token; its helpers return {@link NEED} there, and
 * leave the cursor where they can start again.
 */
class Scanner<T> {
  private readonly w: ByteWindow;
  /** Bytes inside data values so far, which do not count against `maxHeaderSize`. */
  private dataBytes = 0;
  private readonly maxDepth: number;
  private readonly maxHeaderSize: number;
  /** One `data` scan, reset for each tensor (a tensor has one `data` field at most), and the range of the last. */
  private readonly data: DataScan;
  private dataStart = 0;
  private dataEnd = 0;
  /** One `data_base64` scan, likewise. */
  private readonly base64: Base64Scanner;
  /** The key `plainMembers` stopped after. */
  private pendingKey = "";
  /** The tensor being read, and a refusal naming it (made once, not per tensor). */
  private tensorName = "";
  private readonly tensorFail = (code: JsonErrorCode, rule: string): never => this.fail(code, rule, this.tensorName);
  /** The string cut by the last window, by its absolute position: how far it was scanned, and whether it holds escapes. */
  private cutStringAt = -1;
  private cutStringScanned = 0;
  private cutStringEscaped = false;
  /** The shape and the written dims of the last tensor, which the next may share (see {@link exactShape}). */
  private lastShape: readonly number[] = [];
  private lastDims: readonly number[] = [];
  /** Dims of the shape being read by {@link tensorFast}. */
  private readonly shapeScratch: number[] = [];

  constructor(
    private readonly source: ByteSource,
    options: ScanOptions,
    private readonly make: MakeTensor<T>,
  ) {
    // The scan keeps offsets and decoded strings, never a view of the window: its memory is reused.
    this.w = new ByteWindow(source, 0, source.size, options.windowSize ?? DEFAULT_CHUNK_SIZE, true);
    this.maxDepth = options.maxDepth ?? MAX_JSON_DEPTH;
    this.maxHeaderSize = options.maxHeaderSize ?? MAX_JSON_HEADER_SIZE;
    this.data = new DataScan((i) => this.w.base + i);
    this.base64 = new Base64Scanner(this.tensorFail);
  }

  async scan(): Promise<ScannedDocument<T>> {
    const document = this.document();
    for (;;) {
      const step = document.next();
      if (step.done === true) return step.value;
      // The helpers return NEED only while the source has more.
      if (!(await this.w.more())) this.syntax("unexpected end of input");
    }
  }

  private fail(code: JsonErrorCode, rule: string, tensor?: string): never {
    throw new StConvertError(code, rule, { file: this.source.name, tensor });
  }

  private syntax(message: string, path = ""): never {
    return this.fail("InvalidJson", `${path === "" ? "" : `${path}: `}${message} at byte ${this.w.position}`);
  }

  private checkBudget(at: number): void {
    if (at - this.dataBytes > this.maxHeaderSize) {
      this.fail("LimitExceeded", `more than ${this.maxHeaderSize} bytes outside tensor data (names, metadata, shapes, whitespace; the limit is maxHeaderSize)`);
    }
  }

  /** The next byte that is not whitespace (the cursor moves onto it), −1 at the end, or NEED. */
  private peek(): number {
    const w = this.w;
    const buf = w.buf;
    let i = w.i;
    while (i < buf.length && isWhitespace(buf[i]!)) i++;
    w.i = i;
    if (i < buf.length) return buf[i]!;
    this.checkBudget(w.position);
    return w.drained ? -1 : NEED;
  }

  /** 1 when `n` bytes are at the cursor, 0 when the input has fewer, or NEED. */
  private have(n: number): number {
    if (this.w.buf.length - this.w.i >= n) return 1;
    return this.w.drained ? 0 : NEED;
  }

  /** Consumes `c` after whitespace (0), or NEED. */
  private expect(c: number, what: string, path = ""): number {
    const found = this.peek();
    if (found === NEED) return NEED;
    if (found !== c) this.syntax(`expected ${what}, found ${describeByte(found)}`, path);
    this.w.i++;
    return 0;
  }

  /** A string token at the cursor (which is on its `"`), decoded; undefined when it is cut (the scan so far is kept). */
  private readString(base: string, suffix = ""): string | undefined {
    const path = suffix === "" ? base : `${base}${suffix}`;
    const w = this.w;
    const buf = w.buf;
    const start = w.i;
    const at = w.base + start;
    let j = start + 1;
    let escaped = false;
    if (this.cutStringAt === at) {
      j = start + this.cutStringScanned;
      escaped = this.cutStringEscaped;
    }
    while (j < buf.length) {
      const c = buf[j]!;
      if (c === 0x22) {
        const text = this.decodeString(buf, start + 1, j, escaped, base, suffix);
        w.i = j + 1;
        this.cutStringAt = -1;
        return text;
      }
      if (c === 0x5c) {
        if (j + 1 >= buf.length) break;
        escaped = true;
        j += 2;
        continue;
      }
      if (c < 0x20) {
        w.i = j;
        this.syntax("a raw control character inside a string (it must be escaped)", path);
      }
      j++;
    }
    this.checkBudget(w.base + j);
    if (w.drained) {
      w.i = buf.length;
      this.syntax("unterminated string", path);
    }
    this.cutStringAt = at;
    this.cutStringScanned = j - start;
    this.cutStringEscaped = escaped;
    return undefined;
  }

  private decodeRaw(buf: Uint8Array, from: number, to: number, path: string): string {
    try {
      return utf8.decode(buf.subarray(from, to));
    } catch {
      return this.syntax("invalid UTF-8 in a string", path);
    }
  }

  /** The text of a string's bytes `buf[from..to)`; `base` + `suffix` is its path, for messages. */
  private decodeString(buf: Uint8Array, from: number, to: number, escaped: boolean, base: string, suffix: string): string {
    if (!escaped) return this.decodeRaw(buf, from, to, suffix === "" ? base : `${base}${suffix}`);
    const path = `${base}${suffix}`;
    const raw = (a: number, b: number): string => this.decodeRaw(buf, a, b, path);
    let out = "";
    let segment = from;
    let k = from;
    while (k < to) {
      if (buf[k] !== 0x5c) {
        k++;
        continue;
      }
      out += raw(segment, k);
      const e = buf[k + 1]!;
      const simple = SIMPLE_ESCAPES.get(e);
      if (simple !== undefined) {
        out += simple;
        k += 2;
      } else if (e === 0x75) {
        const unit = hex4(buf, k + 2, to);
        if (unit < 0) this.syntax("an invalid \\u escape", path);
        k += 6;
        if (unit >= 0xd800 && unit <= 0xdbff) {
          const low = buf[k] === 0x5c && buf[k + 1] === 0x75 ? hex4(buf, k + 2, to) : -1;
          if (low < 0xdc00 || low > 0xdfff) this.syntax("a lone surrogate in a \\u escape (not Unicode text)", path);
          out += String.fromCharCode(unit, low);
          k += 6;
        } else if (unit >= 0xdc00 && unit <= 0xdfff) {
          this.syntax("a lone surrogate in a \\u escape (not Unicode text)", path);
        } else out += String.fromCharCode(unit);
      } else {
        this.syntax(`an invalid escape \\${String.fromCharCode(e)}`, path);
      }
      segment = k;
    }
    return out + raw(segment, to);
  }

  /**
   * A tensor field's key and its `:`, as its bit (`DTYPE_SEEN`…), without decoding it when it
   * holds no escape; 0 for any other key, with the cursor left on it; or NEED.
   */
  private readField(path: string): number {
    const w = this.w;
    const c = this.peek();
    if (c === NEED) return NEED;
    if (c !== 0x22) this.syntax(`expected a key (a string), found ${describeByte(c)}`, path);
    const buf = w.buf;
    const start = w.i;
    let j = start + 1;
    while (j < buf.length && buf[j] !== 0x22 && buf[j] !== 0x5c && j - start <= 12) j++;
    if (buf[j] !== 0x22) return j >= buf.length && !w.drained ? NEED : 0;
    const bit = fieldBit(buf, start + 1, j);
    if (bit === 0) return 0;
    w.i = j + 1;
    if (this.expect(0x3a, "':'", path) === NEED) {
      w.i = start;
      return NEED;
    }
    return bit;
  }

  /** The dtype of the plain string at the cursor, matched byte by byte (the cursor moves past it); null for any other string; undefined for NEED. */
  private plainDtype(): Dtype | null | undefined {
    const w = this.w;
    const buf = w.buf;
    const start = w.i + 1;
    let j = start;
    while (j < buf.length && buf[j] !== 0x22 && buf[j] !== 0x5c && j - start <= 11) j++;
    if (buf[j] !== 0x22) return j >= buf.length && !w.drained ? undefined : null;
    const code = dtypeAt(buf, start, j);
    if (code === undefined) return null;
    w.i = j + 1;
    return code;
  }

  /** A key and its `:`; undefined when the bytes at hand end first (the cursor stays on the key). */
  private readKey(path: string): string | undefined {
    const c = this.peek();
    if (c === NEED) return undefined;
    if (c !== 0x22) this.syntax(`expected a key (a string), found ${describeByte(c)}`, path);
    const start = this.w.i;
    const key = this.readString(path);
    if (key === undefined) return undefined;
    if (this.expect(0x3a, "':'", path) === NEED) {
      // Read again from its quote once more bytes are at hand.
      this.w.i = start;
      return undefined;
    }
    return key;
  }

  /** After a member: 1 for `,` (another follows), 0 for the closing `}`, or NEED. */
  private nextMember(path: string): number {
    const c = this.peek();
    if (c === NEED) return NEED;
    this.w.i++;
    if (c === 0x2c) return 1;
    if (c === 0x7d) return 0;
    this.w.i--;
    return this.syntax(`expected ',' or '}', found ${describeByte(c)}`, path);
  }

  private *document(): Generator<void, ScannedDocument<T>, void> {
    const w = this.w;
    let bom: number;
    while ((bom = this.have(3)) === NEED) yield;
    if (bom === 1 && w.buf[0] === 0xef && w.buf[1] === 0xbb && w.buf[2] === 0xbf) w.i = 3; // a UTF-8 BOM
    let first: number;
    while ((first = this.peek()) === NEED) yield;
    if (first !== 0x7b) {
      this.syntax(first < 0 ? "no JSON object (the input is empty)" : `expected '{' (the document is an object of tensors), found ${describeByte(first)}`);
    }
    w.i++;
    let metadata: Record<string, string> | null = null;
    let sawMetadata = false;
    const tensors: T[] = [];
    const names = new NameIndex();
    let c: number;
    while ((c = this.peek()) === NEED) yield;
    if (c === 0x7d) w.i++;
    else {
      for (;;) {
        const state = this.plainMembers(tensors, names);
        if (state === MEMBERS_END) break;
        if (state !== AFTER_MEMBER) {
          // One member the general way: at its key, or at the value of `pendingKey`.
          let key: string | undefined = this.pendingKey;
          if (state === AT_KEY) while ((key = this.readKey("")) === undefined) yield;
          if (key === "__metadata__") {
            if (sawMetadata) this.fail("DuplicateKey", "__metadata__ appears twice (the format forbids duplicate keys)");
            sawMetadata = true;
            metadata = yield* this.readMetadata();
          } else {
            if (state === AT_KEY && !names.add(key)) this.duplicate(key);
            tensors.push(yield* this.readTensor(key, pathName(key)));
          }
        }
        let more: number;
        while ((more = this.nextMember("")) === NEED) yield;
        if (more === 0) break;
      }
    }
    let after: number;
    while ((after = this.peek()) === NEED) yield;
    if (after !== -1) this.syntax(`content after the document's object: ${describeByte(after)}`);
    return { metadata, tensors };
  }

  private duplicate(key: string): never {
    return this.fail("DuplicateKey", `${pathName(key)}: the tensor name appears twice (the format forbids duplicate keys)`, key);
  }

  /**
   * Members from the cursor (on a key), as many as lie whole in the bytes at hand and are plain
   * tensors, outside the generator: V8 optimizes a long loop in a plain method, not in a
   * generator. Returns where it stopped: {@link MEMBERS_END} after the document's `}`,
   * {@link AFTER_MEMBER} after a member whose `,` or `}` is not at hand, {@link AT_KEY} on a key
   * not at hand, or {@link AT_VALUE} after the key `pendingKey` and its `:` (metadata, or a tensor
   * entry for `readTensor`; a tensor's name is in `names` already).
   */
  private plainMembers(tensors: T[], names: NameIndex): number {
    for (;;) {
      const key = this.readKey("");
      if (key === undefined) return AT_KEY;
      this.pendingKey = key;
      if (key === "__metadata__") return AT_VALUE;
      if (!names.add(key)) this.duplicate(key);
      const tensor = this.tensorFast(key);
      if (tensor === undefined) return AT_VALUE;
      tensors.push(tensor);
      const more = this.nextMember("");
      if (more === NEED) return AFTER_MEMBER;
      if (more === 0) return MEMBERS_END;
    }
  }

  private *readMetadata(): Generator<void, Record<string, string> | null, void> {
    const w = this.w;
    let c: number;
    while ((c = this.peek()) === NEED) yield;
    if (c === 0x6e) {
      let enough: number;
      while ((enough = this.have(4)) === NEED) yield;
      if (!(enough === 1 && startsWith(w.buf, w.i, "null"))) this.syntax("invalid literal", "__metadata__");
      w.i += 4;
      return null;
    }
    if (c !== 0x7b) this.fail("InvalidMetadata", `__metadata__ must be an object mapping strings to strings (or null), found ${describeValueStart(c)}`);
    w.i++;
    const metadata = createMetadata();
    while ((c = this.peek()) === NEED) yield;
    if (c === 0x7d) {
      w.i++;
      return metadata;
    }
    let more: number;
    do {
      let key: string | undefined;
      while ((key = this.readKey("__metadata__")) === undefined) yield;
      const path = `__metadata__.${pathName(key)}`;
      let v: number;
      while ((v = this.peek()) === NEED) yield;
      if (v !== 0x22) this.fail("InvalidMetadata", `${path}: the value is ${describeValueStart(v)}, not a string`);
      let value: string | undefined;
      while ((value = this.readString(path)) === undefined) yield;
      // `metadata` has no prototype: `in` sees only keys already read.
      if (key in metadata) this.fail("DuplicateKey", `${path}: the metadata key appears twice (the format forbids duplicate keys)`);
      metadata[key] = value;
      while ((more = this.nextMember("__metadata__")) === NEED) yield;
    } while (more === 1);
    return metadata;
  }

  private *readTensor(name: string, path: string): Generator<void, T, void> {
    const w = this.w;
    this.tensorName = name;
    const fail = this.tensorFail;
    let c: number;
    while ((c = this.peek()) === NEED) yield;
    if (c !== 0x7b) {
      fail("InvalidTensor", `${path}: a tensor is an object {"dtype", "shape", "data" or "data_base64"}, found ${describeValueStart(c)}${hint(name)}`);
    }
    w.i++;
    let dtype: Dtype | undefined;
    let shape: number[] | undefined;
    let values = false;
    let base64: Base64Scan | undefined;
    let seen = 0;
    while ((c = this.peek()) === NEED) yield;
    if (c === 0x7d) w.i++;
    else {
      let more: number;
      do {
        let bit: number;
        while ((bit = this.readField(path)) === NEED) yield;
        if (bit === 0) {
          // Another key, or a field name spelled with escapes.
          let field: string | undefined;
          while ((field = this.readKey(path)) === undefined) yield;
          bit = FIELD_BITS.get(field) ?? 0;
          if (bit === 0) {
            const why = field === "data_offsets" ? ' (data_offsets belong to a safetensors header; this form carries "data" or "data_base64")' : hint(name);
            fail("InvalidTensor", `${path}: unknown field ${quoteName(field)}; a tensor has "dtype", "shape" and "data" or "data_base64"${why}`);
          }
        }
        if (seen & bit) fail("DuplicateKey", `${path}: the field ${quoteName(FIELD_NAMES[bit]!)} appears twice (the format forbids duplicate keys)`);
        seen |= bit;
        let v: number;
        while ((v = this.peek()) === NEED) yield;
        if (bit === DTYPE_SEEN) {
          if (v !== 0x22) fail("InvalidTensor", `${path}.dtype: must be a string, found ${describeValueStart(v)}`);
          let known: Dtype | null | undefined;
          while ((known = this.plainDtype()) === undefined) yield;
          if (known === null) {
            let text: string | undefined;
            while ((text = this.readString(path, ".dtype")) === undefined) yield;
            if (!isDtype(text))
              fail("UnknownDtype", `${path}.dtype: unknown dtype ${quoteName(text)}; expected one of ${DTYPES.map((d) => d.code).join(", ")}`);
            known = text as Dtype;
          }
          dtype = known;
        } else if (bit === SHAPE_SEEN) {
          shape = yield* this.readShape(path, fail);
        } else if (bit === DATA_SEEN) {
          yield* this.scanData(fail);
          values = true;
        } else {
          if (v !== 0x22) fail("InvalidTensor", `${path}.data_base64: must be a string, found ${describeValueStart(v)}`);
          base64 = yield* this.scanBase64(path);
        }
        while ((more = this.nextMember(path)) === NEED) yield;
      } while (more === 1);
    }
    if (dtype === undefined) return fail("InvalidTensor", `${path}: no "dtype"`);
    if (shape === undefined) return fail("InvalidTensor", `${path}: no "shape"`);
    if (values && base64 !== undefined) return fail("InvalidTensor", `${path}: both "data" and "data_base64"; give one`);
    if (!values && base64 === undefined) return fail("InvalidTensor", `${path}: no "data" or "data_base64"`);
    return this.finishTensor(name, dtype, shape, shape.length, base64);
  }

  /**
   * The record of a tensor whose entry has been read: `base64` for a `data_base64` one, else its
   * `data` was the last scanned (`data`, `dataStart`, `dataEnd`).
   */
  private finishTensor(name: string, dtype: Dtype, readShape: readonly number[], rank: number, base64: Base64Scan | undefined): T {
    const fail = this.tensorFail;
    const shape = exactShape(readShape, rank, this.lastShape);
    this.lastShape = shape;
    let byteLength: number;
    try {
      byteLength = tensorByteLength(dtype, shape);
      // Only an empty shape can overflow before its 0 (see checkShapeOverflow).
      if (byteLength === 0) checkShapeOverflow({ name, dtype, shape });
    } catch (error) {
      throw withContext(error, { file: this.source.name, tensor: name });
    }
    if (base64 !== undefined) {
      if (base64.decoded !== byteLength) {
        fail("ByteLengthMismatch", `${pathName(name)}.data_base64: decodes to ${base64.decoded} bytes, ${dtype} [${shape.join(", ")}] needs ${byteLength}`);
      }
      return this.make(name, dtype, shape, byteLength, "base64", base64.start, base64.end, NO_DIMS, base64.escaped);
    }
    const codec = valueCodec(dtype);
    if (codec === undefined) {
      return fail(
        "Unsupported",
        `${pathName(name)}.data: ${dtype} has no values form (safetensors does not define how its values pack into bytes); use data_base64`,
      );
    }
    const scan = this.data;
    const dims = scan.writtenDims(shape, this.lastDims);
    this.lastDims = dims;
    checkDims(name, dtype, shape, dims, scan.leaves, fail);
    checkKinds(name, codec, scan, dims, fail);
    return this.make(name, dtype, shape, byteLength, "values", this.dataStart, this.dataEnd, dims, false);
  }

  /**
   * The entry of tensor `name` when it lies whole in the bytes at hand and is spelled the plain
   * way (keys without escapes; `dtype`, `shape`, then `data` or `data_base64`; any whitespace):
   * what {@link readTensor} makes of it, without a generator or a promise. Undefined, with the
   * cursor back where it was, for anything else, which `readTensor` then reads, and refuses
   * where it must. (What it refuses itself, inside a value, is what `readTensor` would refuse.)
   */
  private tensorFast(name: string): T | undefined {
    const w = this.w;
    const buf = w.buf;
    const start = w.i;
    const dataBytes = this.dataBytes;
    this.tensorName = name;
    let i = skipWhitespace(buf, start);
    if (buf[i] !== 0x7b) return undefined;
    i = matchKey(buf, skipWhitespace(buf, i + 1), FIELD_BYTES_OF_DTYPE);
    if (i < 0) return undefined;
    i = skipWhitespace(buf, i);
    if (buf[i] !== 0x22) return undefined;
    let j = i + 1;
    while (j < buf.length && buf[j] !== 0x22 && j - i <= 12) j++;
    const dtype = buf[j] === 0x22 ? dtypeAt(buf, i + 1, j) : undefined;
    if (dtype === undefined) return undefined;
    i = skipWhitespace(buf, j + 1);
    if (buf[i] !== 0x2c) return undefined;
    i = matchKey(buf, skipWhitespace(buf, i + 1), FIELD_BYTES_OF_SHAPE);
    if (i < 0) return undefined;
    i = skipWhitespace(buf, i);
    if (buf[i] !== 0x5b) return undefined;
    const shape = this.shapeScratch;
    let rank = 0;
    i = skipWhitespace(buf, i + 1);
    if (buf[i] === 0x5d) i++;
    else {
      for (;;) {
        // Plain dims only: 0, or up to 15 digits without a leading zero.
        let k = i;
        while (k < buf.length && buf[k]! >= 0x30 && buf[k]! <= 0x39 && k - i <= 15) k++;
        if (k === i || k - i > 15 || (buf[i] === 0x30 && k - i > 1)) return undefined;
        shape[rank++] = digitsValue(buf, i, k);
        i = skipWhitespace(buf, k);
        if (buf[i] === 0x5d) {
          i++;
          break;
        }
        if (buf[i] !== 0x2c) return undefined;
        i = skipWhitespace(buf, i + 1);
      }
    }
    i = skipWhitespace(buf, i);
    if (buf[i] !== 0x2c) return undefined;
    i = skipWhitespace(buf, i + 1);
    let base64: Base64Scan | undefined;
    let after = matchKey(buf, i, FIELD_BYTES_OF_DATA);
    if (after >= 0) {
      i = skipWhitespace(buf, after);
      if (i >= buf.length) return undefined;
      const scan = this.data;
      this.dataStart = w.base + i;
      const end = buf[i] === 0x5b ? scan.flat(buf, i, name, this.maxDepth - 2, this.tensorFail) : -1;
      if (end >= 0) i = end;
      else {
        scan.reset(name, this.maxDepth - 2, this.tensorFail);
        i = scan.run(buf, i, w.drained);
        if (!scan.done) return undefined;
      }
      this.dataEnd = w.base + i;
      this.dataBytes += this.dataEnd - this.dataStart;
    } else {
      after = matchKey(buf, i, FIELD_BYTES_OF_BASE64);
      if (after < 0) return undefined;
      i = skipWhitespace(buf, after);
      if (buf[i] !== 0x22) return undefined;
      const state = this.base64;
      state.reset(w.base + i + 1, name);
      i = state.run(buf, i + 1, w.base);
      if (!state.done) {
        this.dataBytes = dataBytes;
        return undefined;
      }
      this.dataBytes += state.end - state.start;
      base64 = state.result();
    }
    i = skipWhitespace(buf, i);
    if (buf[i] !== 0x7d) {
      this.dataBytes = dataBytes;
      return undefined;
    }
    w.i = i + 1;
    return this.finishTensor(name, dtype, shape, rank, base64);
  }

  private *readShape(path: string, fail: (code: JsonErrorCode, rule: string) => never): Generator<void, number[], void> {
    const w = this.w;
    let c: number;
    while ((c = this.peek()) === NEED) yield;
    if (c !== 0x5b) fail("InvalidTensor", `${path}.shape: must be an array of non-negative integers, found ${describeValueStart(c)}`);
    w.i++;
    const shape: number[] = [];
    while ((c = this.peek()) === NEED) yield;
    if (c === 0x5d) {
      w.i++;
      return shape;
    }
    for (;;) {
      let d: number;
      while ((d = this.peek()) === NEED) yield;
      if (d !== 0x2d && (d < 0x30 || d > 0x39))
        fail("InvalidTensor", `${shapeWhere(path, shape.length)}: must be a non-negative integer, found ${describeValueStart(d)}`);
      let end: number;
      while ((end = numberEnd(w.buf, w.i, w.drained)) === NEED_MORE) {
        if (w.buf.length - w.i > MAX_NUMBER_LENGTH)
          fail("LimitExceeded", `${shapeWhere(path, shape.length)}: a number longer than ${MAX_NUMBER_LENGTH} characters`);
        yield;
      }
      if (end === BAD_NUMBER) this.syntax(`invalid number (${numberToken.reason})`, shapeWhere(path, shape.length));
      if (numberToken.float || d === 0x2d)
        fail("InvalidTensor", `${shapeWhere(path, shape.length)}: must be a non-negative integer, found ${numberText(w.buf, w.i, end)}`);
      const value = end - w.i <= 15 ? digitsValue(w.buf, w.i, end) : Number.POSITIVE_INFINITY;
      if (value > Number.MAX_SAFE_INTEGER && (end - w.i > 16 || BigInt(numberText(w.buf, w.i, end)) > BigInt(Number.MAX_SAFE_INTEGER))) {
        fail(
          "Unsupported",
          `${shapeWhere(path, shape.length)}: ${numberText(w.buf, w.i, end)}${end - w.i > 64 ? "…" : ""} is past 2^53 - 1, the largest dimension st-convert handles exactly`,
        );
      }
      shape.push(value <= Number.MAX_SAFE_INTEGER ? value : Number(numberText(w.buf, w.i, end)));
      w.i = end;
      let next: number;
      while ((next = this.peek()) === NEED) yield;
      w.i++;
      if (next === 0x5d) return shape;
      if (next !== 0x2c) {
        w.i--;
        this.syntax(`expected ',' or ']', found ${describeByte(next)}`, `${path}.shape`);
      }
    }
  }

  /** Scans a `data` value into `data`, its range into `dataStart` and `dataEnd`. */
  private *scanData(fail: (code: JsonErrorCode, rule: string) => never): Generator<void, void, void> {
    const w = this.w;
    while (this.peek() === NEED) yield;
    this.dataStart = w.position;
    // The document and the tensor object are two levels already.
    const scan = this.data;
    scan.reset(this.tensorName, this.maxDepth - 2, fail);
    for (;;) {
      w.i = scan.run(w.buf, w.i, w.drained);
      if (scan.done) break;
      yield;
    }
    this.dataEnd = w.position;
    this.dataBytes += this.dataEnd - this.dataStart;
  }

  private *scanBase64(path: string): Generator<void, Base64Scan, void> {
    const w = this.w;
    w.i++; // the opening quote
    const state = this.base64;
    state.reset(w.position, this.tensorName);
    for (;;) {
      w.i = state.run(w.buf, w.i, w.base);
      if (state.done) break;
      if (w.drained) this.syntax("unterminated string", `${path}.data_base64`);
      yield;
    }
    this.dataBytes += state.end - state.start;
    return state.result();
  }
}

/** The scan of a `data_base64` string, resumable across windows. */
class Base64Scanner {
  start = 0;
  end = 0;
  done = false;
  private chars = 0;
  private pads = 0;
  private escaped = false;
  private name = "";

  constructor(private readonly fail: (code: JsonErrorCode, rule: string) => never) {}

  /** Ready for the string of tensor `name` whose content starts at absolute offset `start`. */
  reset(start: number, name: string): void {
    this.start = start;
    this.name = name;
    this.chars = 0;
    this.pads = 0;
    this.escaped = false;
    this.done = false;
  }

  private refuse(what: string): never {
    return this.fail(
      "InvalidBase64",
      `${pathName(this.name)}.data_base64: ${what} at character ${this.chars + this.pads} (standard base64 with '=' padding is expected)`,
    );
  }

  /** Scans `buf` from `i` (`buf[0]` is at absolute offset `base`); returns where it stopped: after the closing quote (then `done`), or at an escape cut by the end of `buf`. */
  run(buf: Uint8Array, i: number, base: number): number {
    const n = buf.length;
    while (i < n) {
      const c = buf[i]!;
      if (BASE64_VALUE[c] !== 255) {
        if (this.pads !== 0) this.refuse("a character after '=' padding");
        this.chars++;
        i++;
        continue;
      }
      if (c === 0x22) {
        this.end = base + i;
        this.done = true;
        if ((this.chars + this.pads) % 4 !== 0) {
          this.fail(
            "InvalidBase64",
            `${pathName(this.name)}.data_base64: ${this.chars + this.pads} characters, not a multiple of 4 (standard base64 with '=' padding is expected)`,
          );
        }
        return i + 1;
      }
      if (c === 0x3d) {
        if (++this.pads > 2) this.refuse("a third '='");
        i++;
        continue;
      }
      if (c === 0x5c) {
        // JSON allows any character escaped: "\/" (PHP writes it) or "\u0041".
        if (i + 1 >= n) break;
        let unit: number;
        if (buf[i + 1] === 0x75) {
          if (i + 6 > n) break;
          unit = hex4(buf, i + 2, n);
          i += 6;
        } else {
          unit = buf[i + 1] === 0x2f ? 0x2f : -1;
          i += 2;
        }
        this.escaped = true;
        if (unit === 0x3d) {
          if (++this.pads > 2) this.refuse("a third '='");
        } else if (unit >= 0 && unit < 128 && BASE64_VALUE[unit] !== 255) {
          if (this.pads !== 0) this.refuse("a character after '=' padding");
          this.chars++;
        } else this.refuse("an escape that is not a base64 character");
        continue;
      }
      this.refuse(`${describeByte(c)}, which is not base64,`);
    }
    return i;
  }

  result(): Base64Scan {
    return { start: this.start, end: this.end, decoded: ((this.chars + this.pads) / 4) * 3 - this.pads, escaped: this.escaped };
  }
}

/** The first byte from `i` that is not JSON whitespace. */
function skipWhitespace(buf: Uint8Array, i: number): number {
  while (i < buf.length && isWhitespace(buf[i]!)) i++;
  return i;
}

/** After `"word"` and its `:` at `buf[i]` (whitespace allowed before the colon), or -1. */
function matchKey(buf: Uint8Array, i: number, word: Uint8Array): number {
  if (buf[i] !== 0x22) return -1;
  const end = i + 1 + word.length;
  if (buf[end] !== 0x22 || !sameBytes(buf, i + 1, end, word)) return -1;
  const colon = skipWhitespace(buf, end + 1);
  return buf[colon] === 0x3a ? colon + 1 : -1;
}

/** Field names by their bit. */
const FIELD_NAMES: Record<number, string> = { [DTYPE_SEEN]: "dtype", [SHAPE_SEEN]: "shape", [DATA_SEEN]: "data", [BASE64_SEEN]: "data_base64" };
const FIELD_BITS = new Map(Object.entries(FIELD_NAMES).map(([bit, name]) => [name, Number(bit)]));
const FIELD_BYTES = Object.entries(FIELD_NAMES).map(([bit, name]) => [Number(bit), Uint8Array.from(name, (ch) => ch.charCodeAt(0))] as const);
const [FIELD_BYTES_OF_DTYPE, FIELD_BYTES_OF_SHAPE, FIELD_BYTES_OF_DATA, FIELD_BYTES_OF_BASE64] = FIELD_BYTES.map(([, bytes]) => bytes) as [
  Uint8Array,
  Uint8Array,
  Uint8Array,
  Uint8Array,
];
const DTYPE_BYTES = DTYPES.map((d) => [d.code, Uint8Array.from(d.code, (ch) => ch.charCodeAt(0))] as const);

function sameBytes(buf: Uint8Array, from: number, to: number, word: Uint8Array): boolean {
  if (to - from !== word.length) return false;
  for (let k = 0; k < word.length; k++) if (buf[from + k] !== word[k]) return false;
  return true;
}

/** The bit of the field named by `buf[from..to)`, or 0. */
function fieldBit(buf: Uint8Array, from: number, to: number): number {
  for (const [bit, name] of FIELD_BYTES) if (sameBytes(buf, from, to, name)) return bit;
  return 0;
}

/** The dtype found last: documents hold runs of one dtype. */
let lastDtype = 0;

/** The dtype named by `buf[from..to)`, or undefined. */
function dtypeAt(buf: Uint8Array, from: number, to: number): Dtype | undefined {
  for (let k = -1; k < DTYPE_BYTES.length; k++) {
    const entry = DTYPE_BYTES[k === -1 ? lastDtype : k]!;
    if (sameBytes(buf, from, to, entry[1])) {
      if (k !== -1) lastDtype = k;
      return entry[0];
    }
  }
  return undefined;
}

/** The path of dim `index` of a shape, for messages. */
function shapeWhere(path: string, index: number): string {
  return `${path}.shape[${index}]`;
}

/** No dims: what a `data_base64` tensor records. */
const NO_DIMS: readonly number[] = Object.freeze([]);

/** The value of the decimal digits `buf[from..to)` (at most 15, so exact). */
function digitsValue(buf: Uint8Array, from: number, to: number): number {
  let v = 0;
  for (let k = from; k < to; k++) v = v * 10 + (buf[k]! - 0x30);
  return v;
}

/** A number token's text, at most its first 64 characters. */
function numberText(buf: Uint8Array, from: number, to: number): string {
  return String.fromCharCode(...buf.subarray(from, Math.min(to, from + 64)));
}

const SIMPLE_ESCAPES = new Map<number, string>([
  [0x22, '"'],
  [0x5c, "\\"],
  [0x2f, "/"],
  [0x62, "\b"],
  [0x66, "\f"],
  [0x6e, "\n"],
  [0x72, "\r"],
  [0x74, "\t"],
]);

/** The code unit of 4 hex digits at `buf[i..i+4)`, or −1 (also when they pass `limit`). */
export function hex4(buf: Uint8Array, i: number, limit: number): number {
  if (i + 4 > limit) return -1;
  let v = 0;
  for (let k = i; k < i + 4; k++) {
    const c = buf[k]!;
    const d = c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

function hint(name: string): string {
  return name === "weight_map" || name === "metadata" ? " (a sharded checkpoint index such as model.safetensors.index.json is not a tensor file)" : "";
}

/**
 * Accepts `data` written as the shape says (nested), flat (one list of all values), or, for a 0-d
 * tensor, as a bare value; for C64 each value is an `[re, im]` pair. An empty tensor may also
 * stop nesting at its first zero dimension (`[[], []]` for shape [2, 0, 5]).
 */
function checkDims(
  name: string,
  dtype: Dtype,
  shape: readonly number[],
  dims: readonly number[],
  leaves: number,
  fail: (code: JsonErrorCode, rule: string) => never,
): void {
  const pair = dtype === "C64";
  let count = 1;
  for (const d of shape) count *= d;
  // The writer's form (flat) and the nested one, checked without allocating.
  if (dims.length === (pair ? 2 : 1) && dims[0] === count && (!pair || dims[1] === 2)) return;
  if (dims.length === shape.length + (pair ? 1 : 0) && shape.every((d, k) => dims[k] === d) && (!pair || dims[shape.length] === 2)) return;
  const path = pathName(name);
  const expected = pair ? [...shape, 2] : [...shape];
  const same = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((v, i) => v === b[i]);
  if (same(dims, expected)) return;
  if (same(dims, pair ? [count, 2] : [count])) return;
  // The flat list of no [re, im] pairs is `[]`, which has no level to show the pair: what the
  // writer writes for every empty C64 tensor ([0], [3, 0]).
  if (pair && count === 0 && dims.length === 1 && dims[0] === 0) return;
  if (count === 0 && leaves === 0 && dims.length > 0 && dims.length <= shape.length && dims[dims.length - 1] === 0 && same(dims, shape.slice(0, dims.length)))
    return;
  const written = dims.length === 0 ? "a bare value" : `arrays of dims [${dims.join(", ")}]`;
  const values = pair ? `${leaves / 2} [re, im] pairs` : `${leaves} values`;
  const needs = pair ? `${count} [re, im] pairs` : `${count} values`;
  if (leaves !== count * (pair ? 2 : 1)) {
    fail("ShapeMismatch", `${path}.data: ${values} (${written}), but ${dtype} shape [${shape.join(", ")}] needs ${needs}`);
  }
  fail("ShapeMismatch", `${path}.data: ${written} match neither shape [${shape.join(", ")}]${pair ? " (plus the pair)" : ""} nor a flat list of ${needs}`);
}

/** Refuses leaf kinds the dtype does not take, naming the first offending leaf. */
function checkKinds(name: string, codec: ValueCodec, scan: DataScan, dims: readonly number[], fail: (code: JsonErrorCode, rule: string) => never): void {
  const bad = scan.kinds & ~codec.allowedLeaves;
  if (bad === 0) return;
  let bit = 0;
  let first = Infinity;
  for (const b of LEAF_BITS) {
    const at = scan.firstLeaf[bitIndex(b)]!;
    if (bad & b && at !== -1 && at < first) {
      first = at;
      bit = b;
    }
  }
  const where = leafPath(pathName(name), dims, first);
  const { dtype } = codec;
  if (dtype === "BOOL" && bit & (Leaf.Integer | Leaf.Float | Leaf.Negative)) {
    fail("InvalidValue", `${where}: a number is not a BOOL value; BOOL takes true and false`);
  }
  if (bit === Leaf.Negative)
    fail("ValueOutOfRange", `${where}: a negative value is out of range for ${dtype}${dtype === "F8_E8M0" ? ", which holds positive powers of two" : ""}`);
  if (bit === Leaf.Infinity || bit === Leaf.NegativeInfinity) {
    const text = bit === Leaf.Infinity ? '"Infinity"' : '"-Infinity"';
    if (codec.allowedLeaves & Leaf.Float) fail("ValueOutOfRange", `${where}: ${text} is out of range for ${dtype}, which has no infinity`);
    fail("InvalidValue", `${where}: ${text} is not a ${dtype} value`);
  }
  if (bit === Leaf.NaN) fail("InvalidValue", `${where}: "NaN" is not a ${dtype} value`);
  if (bit === Leaf.Float) fail("InvalidValue", `${where}: not an integer (a number with a fraction or an exponent); ${dtype} takes integers only`);
  if (bit === Leaf.True || bit === Leaf.False) fail("InvalidValue", `${where}: ${bit === Leaf.True ? "true" : "false"} is not a ${dtype} value`);
  fail("InvalidValue", `${where}: not a ${dtype} value`);
}

/**
 * Scans a whole document: validates it and locates each tensor's data. Reads every byte once,
 * in windows; keeps names, metadata and shapes, never values.
 * @throws StConvertError with a {@link JsonErrorCode}.
 */
export function scanTensorJson<T = ScannedTensor>(
  source: ByteSource,
  options: ScanOptions = {},
  make: MakeTensor<T> = (name, dtype, shape, byteLength, encoding, start, end, dims, escaped) =>
    ({ name, dtype, shape, byteLength, encoding, start, end, dims, escaped }) as T,
): Promise<ScannedDocument<T>> {
  return new Scanner(source, options, make).scan();
}
