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
  StConvertError,
  createMetadata,
  isDtype,
  quoteName,
  tensorByteLength,
  withContext,
} from "@st-convert/core";
import { BASE64_VALUE } from "./base64.js";
import { BAD_LEAF, BAD_NUMBER, ByteWindow, NEED_MORE, isWhitespace, leafEnd, leafToken, numberEnd, numberToken, startsWith } from "./ByteWindow.js";
import { Leaf, type ValueCodec, valueCodec } from "./valueCodecs.js";

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
  /** How the tensor is spelled in messages: its name (quoted unless plain), e.g. `w` or `"a b"`. */
  readonly path: string;
  readonly encoding: "values" | "base64";
  /** Absolute byte range of the value: the whole JSON value for `data`, the string's content for `data_base64`. */
  readonly start: number;
  readonly end: number;
  /** `data`: the dims of the value as written (flat, nested or bare), which locate a leaf in messages. */
  readonly dims: readonly number[];
  /** `data_base64`: whether the string holds escapes (`\/`, `\u0041`), which the fast decoder skips. */
  readonly escaped: boolean;
}

/** The whole document, scanned. */
export interface ScannedDocument {
  readonly metadata: Record<string, string> | null;
  readonly tensors: readonly ScannedTensor[];
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
  /** Leaf index where each kind bit first appeared. */
  readonly firstLeaf = new Map<number, number>();
  done = false;

  constructor(
    private readonly path: string,
    /** Arrays that may still be opened below the enclosing objects. */
    private readonly maxArrays: number,
    private readonly fail: (code: JsonErrorCode, rule: string) => never,
    private readonly position: (i: number) => number,
  ) {}

  /**
   * The path of the current element: the last one started, or with `pending` the one about to
   * start; with `levels`, the enclosing array at that depth instead.
   */
  where(pending = false, levels = this.depth): string {
    let path = `${this.path}.data`;
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
        if (level === this.counts.length) {
          this.counts.push(0);
          this.dims.push(-1);
        } else this.counts[level] = 0;
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
        for (const bit of LEAF_BITS) if (kind & bit && !this.firstLeaf.has(bit)) this.firstLeaf.set(bit, this.leaves);
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
    }
    if (final) this.syntax("unexpected end of input inside data", i);
    return i;
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

  /** The dims of the value as written: the array lengths, then nothing (values at the deepest level). */
  writtenDims(): number[] {
    return this.leafDepth === -1 ? [...this.dims] : this.dims.slice(0, this.leafDepth);
  }
}

/** The result of scanning a `data_base64` string. */
interface Base64Scan {
  start: number;
  end: number;
  /** Bytes it decodes to. */
  decoded: number;
  escaped: boolean;
}

/** Scans a whole document; see the module comment. */
class Scanner {
  private readonly w: ByteWindow;
  /** Bytes inside data values so far, which do not count against `maxHeaderSize`. */
  private dataBytes = 0;
  private readonly maxDepth: number;
  private readonly maxHeaderSize: number;

  constructor(
    private readonly source: ByteSource,
    options: ScanOptions,
  ) {
    this.w = new ByteWindow(source, 0, source.size, options.windowSize ?? DEFAULT_CHUNK_SIZE);
    this.maxDepth = options.maxDepth ?? MAX_JSON_DEPTH;
    this.maxHeaderSize = options.maxHeaderSize ?? MAX_JSON_HEADER_SIZE;
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

  /** The next byte that is not whitespace (the cursor stays on it), or −1 at the end. */
  private async peek(): Promise<number> {
    const w = this.w;
    for (;;) {
      const buf = w.buf;
      let i = w.i;
      while (i < buf.length && isWhitespace(buf[i]!)) i++;
      w.i = i;
      if (i < buf.length) return buf[i]!;
      this.checkBudget(w.position);
      if (!(await w.more())) return -1;
    }
  }

  /** Makes `n` bytes available at the cursor if the input has them. */
  private async have(n: number): Promise<boolean> {
    while (this.w.buf.length - this.w.i < n) if (!(await this.w.more())) return false;
    return true;
  }

  private async expect(c: number, what: string, path = ""): Promise<void> {
    const found = await this.peek();
    if (found !== c) this.syntax(`expected ${what}, found ${describeByte(found)}`, path);
    this.w.i++;
  }

  /** A string token at the cursor (which is on its `"`), decoded. */
  private async readString(path: string): Promise<string> {
    const w = this.w;
    let scanned = 1;
    let escaped = false;
    for (;;) {
      const buf = w.buf;
      const start = w.i;
      let j = start + scanned;
      while (j < buf.length) {
        const c = buf[j]!;
        if (c === 0x22) {
          const text = this.decodeString(buf, start + 1, j, escaped, path);
          w.i = j + 1;
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
      scanned = j - start;
      this.checkBudget(w.base + j);
      if (!(await w.more(start))) {
        w.i = w.buf.length;
        this.syntax("unterminated string", path);
      }
    }
  }

  private decodeString(buf: Uint8Array, from: number, to: number, escaped: boolean, path: string): string {
    const raw = (a: number, b: number): string => {
      try {
        return utf8.decode(buf.subarray(a, b));
      } catch {
        return this.syntax("invalid UTF-8 in a string", path);
      }
    };
    if (!escaped) return raw(from, to);
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

  private async readKey(path: string): Promise<string> {
    const c = await this.peek();
    if (c !== 0x22) this.syntax(`expected a key (a string), found ${describeByte(c)}`, path);
    const key = await this.readString(path);
    await this.expect(0x3a, "':'", path);
    return key;
  }

  /** After a member: true for `,` (another follows), false for the closing `}`. */
  private async nextMember(path: string): Promise<boolean> {
    const c = await this.peek();
    this.w.i++;
    if (c === 0x2c) return true;
    if (c === 0x7d) return false;
    this.w.i--;
    return this.syntax(`expected ',' or '}', found ${describeByte(c)}`, path);
  }

  async scan(): Promise<ScannedDocument> {
    const w = this.w;
    if ((await this.have(3)) && w.buf[0] === 0xef && w.buf[1] === 0xbb && w.buf[2] === 0xbf) w.i = 3; // a UTF-8 BOM
    const first = await this.peek();
    if (first !== 0x7b) {
      this.syntax(first < 0 ? "no JSON object (the input is empty)" : `expected '{' (the document is an object of tensors), found ${describeByte(first)}`);
    }
    w.i++;
    let metadata: Record<string, string> | null = null;
    let sawMetadata = false;
    const tensors: ScannedTensor[] = [];
    const names = new Set<string>();
    if ((await this.peek()) === 0x7d) w.i++;
    else {
      do {
        const key = await this.readKey("");
        if (key === "__metadata__") {
          if (sawMetadata) this.fail("DuplicateKey", "__metadata__ appears twice (the format forbids duplicate keys)");
          sawMetadata = true;
          metadata = await this.readMetadata();
        } else {
          if (names.has(key)) this.fail("DuplicateKey", `${pathName(key)}: the tensor name appears twice (the format forbids duplicate keys)`, key);
          names.add(key);
          tensors.push(await this.readTensor(key));
        }
      } while (await this.nextMember(""));
    }
    const after = await this.peek();
    if (after !== -1) this.syntax(`content after the document's object: ${describeByte(after)}`);
    return { metadata, tensors };
  }

  private async readMetadata(): Promise<Record<string, string> | null> {
    const c = await this.peek();
    if (c === 0x6e) {
      if (!((await this.have(4)) && startsWith(this.w.buf, this.w.i, "null"))) this.syntax("invalid literal", "__metadata__");
      this.w.i += 4;
      return null;
    }
    if (c !== 0x7b) this.fail("InvalidMetadata", `__metadata__ must be an object mapping strings to strings (or null), found ${describeValueStart(c)}`);
    this.w.i++;
    const metadata = createMetadata();
    if ((await this.peek()) === 0x7d) {
      this.w.i++;
      return metadata;
    }
    do {
      const key = await this.readKey("__metadata__");
      const path = `__metadata__.${pathName(key)}`;
      const v = await this.peek();
      if (v !== 0x22) this.fail("InvalidMetadata", `${path}: the value is ${describeValueStart(v)}, not a string`);
      const value = await this.readString(path);
      // `metadata` has no prototype: `in` sees only keys already read.
      if (key in metadata) this.fail("DuplicateKey", `${path}: the metadata key appears twice (the format forbids duplicate keys)`);
      metadata[key] = value;
    } while (await this.nextMember("__metadata__"));
    return metadata;
  }

  private async readTensor(name: string): Promise<ScannedTensor> {
    const path = pathName(name);
    const fail = (code: JsonErrorCode, rule: string): never => this.fail(code, rule, name);
    const c = await this.peek();
    if (c !== 0x7b) {
      fail("InvalidTensor", `${path}: a tensor is an object {"dtype", "shape", "data" or "data_base64"}, found ${describeValueStart(c)}${hint(name)}`);
    }
    this.w.i++;
    let dtype: Dtype | undefined;
    let shape: number[] | undefined;
    let values: { scan: DataScan; start: number; end: number } | undefined;
    let base64: Base64Scan | undefined;
    const seen = new Set<string>();
    if ((await this.peek()) === 0x7d) this.w.i++;
    else {
      do {
        const field = await this.readKey(path);
        if (seen.has(field)) fail("DuplicateKey", `${path}: the field ${quoteName(field)} appears twice (the format forbids duplicate keys)`);
        seen.add(field);
        const v = await this.peek();
        if (field === "dtype") {
          if (v !== 0x22) fail("InvalidTensor", `${path}.dtype: must be a string, found ${describeValueStart(v)}`);
          const text = await this.readString(`${path}.dtype`);
          if (!isDtype(text)) fail("UnknownDtype", `${path}.dtype: unknown dtype ${quoteName(text)}; expected one of ${DTYPES.map((d) => d.code).join(", ")}`);
          dtype = text as Dtype;
        } else if (field === "shape") {
          shape = await this.readShape(path, fail);
        } else if (field === "data") {
          values = await this.scanData(path, fail);
        } else if (field === "data_base64") {
          if (v !== 0x22) fail("InvalidTensor", `${path}.data_base64: must be a string, found ${describeValueStart(v)}`);
          base64 = await this.scanBase64(path, fail);
        } else {
          const why = field === "data_offsets" ? ' (data_offsets belong to a safetensors header; this form carries "data" or "data_base64")' : hint(name);
          fail("InvalidTensor", `${path}: unknown field ${quoteName(field)}; a tensor has "dtype", "shape" and "data" or "data_base64"${why}`);
        }
      } while (await this.nextMember(path));
    }
    if (dtype === undefined) return fail("InvalidTensor", `${path}: no "dtype"`);
    if (shape === undefined) return fail("InvalidTensor", `${path}: no "shape"`);
    if (values !== undefined && base64 !== undefined) return fail("InvalidTensor", `${path}: both "data" and "data_base64"; give one`);
    let byteLength: number;
    try {
      byteLength = tensorByteLength(dtype, shape);
    } catch (error) {
      throw withContext(error, { file: this.source.name, tensor: name });
    }
    const common = { name, dtype, shape, byteLength, path };
    if (base64 !== undefined) {
      if (base64.decoded !== byteLength) {
        fail("ByteLengthMismatch", `${path}.data_base64: decodes to ${base64.decoded} bytes, ${dtype} [${shape.join(", ")}] needs ${byteLength}`);
      }
      return { ...common, encoding: "base64", start: base64.start, end: base64.end, dims: [], escaped: base64.escaped };
    }
    if (values === undefined) return fail("InvalidTensor", `${path}: no "data" or "data_base64"`);
    const codec = valueCodec(dtype);
    if (codec === undefined) {
      return fail("Unsupported", `${path}.data: ${dtype} has no values form (safetensors does not define how its values pack into bytes); use data_base64`);
    }
    const dims = values.scan.writtenDims();
    checkDims(path, dtype, shape, dims, values.scan.leaves, fail);
    checkKinds(path, codec, values.scan, dims, fail);
    return { ...common, encoding: "values", start: values.start, end: values.end, dims, escaped: false };
  }

  private async readShape(path: string, fail: (code: JsonErrorCode, rule: string) => never): Promise<number[]> {
    const w = this.w;
    const c = await this.peek();
    if (c !== 0x5b) fail("InvalidTensor", `${path}.shape: must be an array of non-negative integers, found ${describeValueStart(c)}`);
    w.i++;
    const shape: number[] = [];
    if ((await this.peek()) === 0x5d) {
      w.i++;
      return shape;
    }
    for (;;) {
      const where = `${path}.shape[${shape.length}]`;
      const d = await this.peek();
      if (d !== 0x2d && (d < 0x30 || d > 0x39)) fail("InvalidTensor", `${where}: must be a non-negative integer, found ${describeValueStart(d)}`);
      let end: number;
      while ((end = numberEnd(w.buf, w.i, w.drained)) === NEED_MORE) {
        if (w.buf.length - w.i > MAX_NUMBER_LENGTH) fail("LimitExceeded", `${where}: a number longer than ${MAX_NUMBER_LENGTH} characters`);
        await w.more();
      }
      if (end === BAD_NUMBER) this.syntax(`invalid number (${numberToken.reason})`, where);
      const text = String.fromCharCode(...w.buf.subarray(w.i, Math.min(end, w.i + 64)));
      if (numberToken.float || d === 0x2d) fail("InvalidTensor", `${where}: must be a non-negative integer, found ${text}`);
      if (end - w.i > 16 || BigInt(text) > BigInt(Number.MAX_SAFE_INTEGER)) {
        fail("Unsupported", `${where}: ${text}${end - w.i > 64 ? "…" : ""} is past 2^53 - 1, the largest dimension st-convert handles exactly`);
      }
      shape.push(Number(text));
      w.i = end;
      const next = await this.peek();
      w.i++;
      if (next === 0x5d) return shape;
      if (next !== 0x2c) {
        w.i--;
        this.syntax(`expected ',' or ']', found ${describeByte(next)}`, `${path}.shape`);
      }
    }
  }

  private async scanData(path: string, fail: (code: JsonErrorCode, rule: string) => never): Promise<{ scan: DataScan; start: number; end: number }> {
    const w = this.w;
    await this.peek();
    const start = w.position;
    // The document and the tensor object are two levels already.
    const scan = new DataScan(path, this.maxDepth - 2, fail, (i) => w.base + i);
    for (;;) {
      w.i = scan.run(w.buf, w.i, w.drained);
      if (scan.done) break;
      await w.more();
    }
    const end = w.position;
    this.dataBytes += end - start;
    return { scan, start, end };
  }

  private async scanBase64(path: string, fail: (code: JsonErrorCode, rule: string) => never): Promise<Base64Scan> {
    const w = this.w;
    w.i++; // the opening quote
    const start = w.position;
    let chars = 0;
    let pads = 0;
    let escaped = false;
    const refuse = (what: string): never =>
      fail("InvalidBase64", `${path}.data_base64: ${what} at character ${chars + pads} (standard base64 with '=' padding is expected)`);
    for (;;) {
      const buf = w.buf;
      const n = buf.length;
      let i = w.i;
      while (i < n) {
        const c = buf[i]!;
        if (BASE64_VALUE[c] !== 255) {
          if (pads !== 0) refuse("a character after '=' padding");
          chars++;
          i++;
          continue;
        }
        if (c === 0x22) {
          w.i = i + 1;
          const end = w.base + i;
          this.dataBytes += end - start;
          if ((chars + pads) % 4 !== 0) {
            fail("InvalidBase64", `${path}.data_base64: ${chars + pads} characters, not a multiple of 4 (standard base64 with '=' padding is expected)`);
          }
          return { start, end, decoded: ((chars + pads) / 4) * 3 - pads, escaped };
        }
        if (c === 0x3d) {
          if (++pads > 2) refuse("a third '='");
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
          escaped = true;
          if (unit === 0x3d) {
            if (++pads > 2) refuse("a third '='");
          } else if (unit >= 0 && unit < 128 && BASE64_VALUE[unit] !== 255) {
            if (pads !== 0) refuse("a character after '=' padding");
            chars++;
          } else refuse("an escape that is not a base64 character");
          continue;
        }
        refuse(`${describeByte(c)}, which is not base64,`);
      }
      w.i = i;
      if (!(await w.more())) this.syntax("unterminated string", `${path}.data_base64`);
    }
  }
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
  path: string,
  dtype: Dtype,
  shape: readonly number[],
  dims: readonly number[],
  leaves: number,
  fail: (code: JsonErrorCode, rule: string) => never,
): void {
  const pair = dtype === "C64";
  const expected = pair ? [...shape, 2] : [...shape];
  let count = 1;
  for (const d of shape) count *= d;
  const same = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((v, i) => v === b[i]);
  if (same(dims, expected)) return;
  if (same(dims, pair ? [count, 2] : [count])) return;
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
function checkKinds(path: string, codec: ValueCodec, scan: DataScan, dims: readonly number[], fail: (code: JsonErrorCode, rule: string) => never): void {
  const bad = scan.kinds & ~codec.allowedLeaves;
  if (bad === 0) return;
  let bit = 0;
  let first = Infinity;
  for (const b of LEAF_BITS) {
    const at = scan.firstLeaf.get(b);
    if (bad & b && at !== undefined && at < first) {
      first = at;
      bit = b;
    }
  }
  const where = leafPath(path, dims, first);
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
export function scanTensorJson(source: ByteSource, options: ScanOptions = {}): Promise<ScannedDocument> {
  return new Scanner(source, options).scan();
}
