/**
 * The safetensors header parser: JSON as serde_json reads it for the reference's
 * `{__metadata__?: map<str,str>, <name>: TensorInfo}` shape, straight from the header's bytes,
 * without a generic JSON tree.
 *
 * `JSON.parse` will not do: it keeps the last of duplicate keys, rounds integers past 2^53, cannot
 * tell `4` from `4.0` (serde refuses floats as dims), accepts numbers that overflow a float and has
 * no depth limit. This parser reproduces serde's accept/refuse decisions (probed against
 * safetensors 0.8.0) and is stricter in one place, where the format's README is: duplicate tensor
 * names and duplicate metadata keys are refused.
 *
 * It reads bytes, not a decoded string, and keeps what it finds column by column (typed arrays of
 * dtypes, offsets and dims; one string per name): a 100 MB header of 600,000 tensors then costs
 * its bytes, its names and a few bytes per tensor, instead of a second copy of the text, a
 * substring of it per name and a handful of objects and BigInts per tensor. A header of ASCII
 * text up to {@link SLICED_TEXT_MAX_BYTES} is also kept as text, its names slices of it: a decoder
 * call per name costs more than the text, and the entries the reference writer spells are then
 * read a regular expression at a time (what `info` of 10,000 tensors spends most of its time on).
 */
import { DTYPES, type Dtype } from "./dtypes.js";
import { NameIndex } from "./NameIndex.js";
import { StConvertError, quoteName } from "./StConvertError.js";
import { createMetadata } from "./Tensor.js";

/** Deepest nesting of `[`/`{` the reference accepts (serde_json's recursion limit of 128 refuses the 128th level). */
export const MAX_HEADER_DEPTH = 127;

/** One tensor as its header entry states it, before the layout is validated. */
export interface RawTensorInfo {
  readonly name: string;
  readonly dtype: Dtype;
  /** Dimensions as u64, exactly as written. */
  readonly shape: readonly bigint[];
  /** `data_offsets`, as u64, relative to the start of the byte buffer. */
  readonly begin: bigint;
  readonly end: bigint;
}

/** A header's content in the order the file lists it. */
export interface ParsedSafetensorsHeader {
  readonly metadata: Record<string, string> | null;
  readonly tensors: readonly RawTensorInfo[];
}

export interface ParseHeaderOptions {
  /** Deepest nesting accepted. Default {@link MAX_HEADER_DEPTH}. */
  maxDepth?: number;
}

/**
 * A parsed header, column by column, in header order: what `readSafetensors` validates. Offsets
 * and dims are exact doubles up to 2^53 − 1; a larger value is NaN in its column and exact in
 * `wideValues` (see {@link exactDim}, {@link exactBegin}, {@link exactEnd}).
 */
export interface HeaderTable {
  readonly metadata: Record<string, string> | null;
  readonly count: number;
  readonly names: readonly string[];
  /** Rank of each tensor's dtype (its index in `DTYPES`). */
  readonly dtypes: Uint8Array;
  readonly begins: Float64Array;
  readonly ends: Float64Array;
  /** Tensor i's dims are `dims[shapeStarts[i]]` up to `dims[shapeStarts[i + 1]]`. */
  readonly shapeStarts: Uint32Array;
  readonly dims: Float64Array;
  /** Exact values past 2^53 − 1: key `d<index into dims>`, `b<tensor>` or `e<tensor>`. */
  readonly wideValues: ReadonlyMap<string, bigint>;
  /**
   * Name → position in header order (`names` is its `names`); undefined when the names come in
   * strictly increasing order, as the reference writer sorts them, which makes them distinct
   * without a set: {@link indexNames} builds one then, if a lookup needs it.
   */
  readonly nameIndex: NameIndex | undefined;
}

/** An index of names known to be distinct (a table's, when the parser needed none); it keeps an array of them of its own. */
export function indexNames(names: readonly string[]): NameIndex {
  const index = new NameIndex();
  for (const name of names) index.add(name);
  return index;
}

/** Dim `j` (an index into `table.dims`), exactly. */
export function exactDim(table: HeaderTable, j: number): bigint {
  const d = table.dims[j]!;
  return Number.isNaN(d) ? table.wideValues.get(`d${j}`)! : BigInt(d);
}

/** `data_offsets[0]` of tensor `i`, exactly. */
export function exactBegin(table: HeaderTable, i: number): bigint {
  const v = table.begins[i]!;
  return Number.isNaN(v) ? table.wideValues.get(`b${i}`)! : BigInt(v);
}

/** `data_offsets[1]` of tensor `i`, exactly. */
export function exactEnd(table: HeaderTable, i: number): bigint {
  const v = table.ends[i]!;
  return Number.isNaN(v) ? table.wideValues.get(`e${i}`)! : BigInt(v);
}

/**
 * Parses a header (its N bytes, or text) into metadata and tensor entries, in header order.
 * @throws StConvertError `InvalidHeader` for bytes that are not UTF-8, `InvalidHeaderDeserialization`
 *   for anything serde_json would refuse, `DuplicateKey` for a repeated tensor name or metadata key.
 */
export function parseSafetensorsHeader(header: string | Uint8Array, options: ParseHeaderOptions = {}): ParsedSafetensorsHeader {
  const table = parseHeaderTable(typeof header === "string" ? new TextEncoder().encode(header) : header, options);
  const tensors: RawTensorInfo[] = [];
  for (let i = 0; i < table.count; i++) {
    const shape: bigint[] = [];
    for (let j = table.shapeStarts[i]!; j < table.shapeStarts[i + 1]!; j++) shape.push(exactDim(table, j));
    tensors.push({ name: table.names[i]!, dtype: DTYPES[table.dtypes[i]!]!.code, shape, begin: exactBegin(table, i), end: exactEnd(table, i) });
  }
  return { metadata: table.metadata, tensors };
}

/**
 * {@link parseSafetensorsHeader}, keeping the result column by column.
 * @throws StConvertError as {@link parseSafetensorsHeader}.
 */
export function parseHeaderTable(bytes: Uint8Array, options: ParseHeaderOptions = {}): HeaderTable {
  const parser = new HeaderParser(bytes, options.maxDepth ?? MAX_HEADER_DEPTH);
  try {
    return parser.parse();
  } catch (error) {
    // The reference checks the whole header for UTF-8 before it parses any JSON.
    if (error instanceof StConvertError && error.code !== "InvalidHeader" && !isUtf8(bytes)) throw invalidUtf8();
    throw error;
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function invalidUtf8(): StConvertError {
  return new StConvertError("InvalidHeader", "invalid UTF-8 in header");
}

/** Bytes decoded at a time when checking a whole header for UTF-8 (the text is thrown away). */
const UTF8_CHECK_PIECE = 1 << 20;

function isUtf8(bytes: Uint8Array): boolean {
  const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  try {
    for (let at = 0; at < bytes.byteLength; at += UTF8_CHECK_PIECE) {
      decoder.decode(bytes.subarray(at, at + UTF8_CHECK_PIECE), { stream: true });
    }
    decoder.decode();
    return true;
  } catch {
    return false;
  }
}

const U64_MAX = (1n << 64n) - 1n;
const U64_MAX_DIV_10 = U64_MAX / 10n;
const I64_MIN_MAGNITUDE = 1n << 63n;
const I32_MAX = 2 ** 31 - 1;
const I32_MIN = -(2 ** 31);

/** serde_json's table of powers of ten (`POW10`), each the double nearest to it, as Rust's literals are. */
const POW10 = Float64Array.from({ length: 309 }, (_, k) => Number(`1e${k}`));

/** Number kinds. */
const UNSIGNED = 0;
const NEGATIVE = 1;
const FLOAT = 2;

/** Byte classes inside a string: 0 plain ASCII, 1 `"`, 2 `\`, 3 a control character, 4 a byte of a multi-byte character. */
const STRING_BYTE = Uint8Array.from({ length: 256 }, (_, c) => (c === 0x22 ? 1 : c === 0x5c ? 2 : c < 0x20 ? 3 : c >= 0x80 ? 4 : 0));

const asciiBytes = (text: string) => Uint8Array.from(text, (ch) => ch.charCodeAt(0));
const DTYPE_BYTES = DTYPES.map((d) => asciiBytes(d.code));
const DTYPE_CODES: readonly string[] = DTYPES.map((d) => d.code);
/** An integer as {@link HeaderParser.writerEntry} takes it: no leading zero, at most 15 digits (exact in a double). */
const WRITER_INTEGER = "(?:0|[1-9][0-9]{0,14})";
/**
 * `"name":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}` as the reference writer spells it, in
 * plain text (no quote, backslash or control character in a name): name, dtype, dims, begin, end.
 */
const WRITER_ENTRY = new RegExp(
  `"([^"]*)":\\{"dtype":"([A-Z0-9_]+)","shape":\\[(${WRITER_INTEGER}(?:,${WRITER_INTEGER})*)?\\],"data_offsets":\\[(${WRITER_INTEGER}),(${WRITER_INTEGER})\\]\\}`,
  "y",
);
/** What makes a header's text not plain (see `HeaderParser.plainText`). */
const ESCAPE_OR_CONTROL = /[\\\u0000-\u001f]/;

/** Tensor fields, as keys are classified. */
const OTHER_FIELD = 0;
const DTYPE_FIELD = 1;
const SHAPE_FIELD = 2;
const OFFSETS_FIELD = 3;
const DTYPE_PREFIX = asciiBytes('{"dtype":"');
const SHAPE_INFIX = asciiBytes('","shape":[');
const OFFSETS_INFIX = asciiBytes(',"data_offsets":[');
const DTYPE_BYTES_KEY = asciiBytes("dtype");
const SHAPE_BYTES_KEY = asciiBytes("shape");
const OFFSETS_BYTES_KEY = asciiBytes("data_offsets");

/** Growable columns of a {@link HeaderTable}. */
class Columns {
  count = 0;
  names: string[] = [];
  /** Made at the first name not greater than the one before: only then can a name repeat. */
  nameIndex: NameIndex | undefined;
  // Room for 8 tensors at first, doubled as needed: arrays this small live on V8's heap, where a
  // batch of 2,000 one-tensor files would otherwise allocate 10,000 buffers of a few KiB.
  dtypes = new Uint8Array(8);
  begins = new Float64Array(8);
  ends = new Float64Array(8);
  shapeStarts = new Uint32Array(9);
  dims = new Float64Array(8);
  dimCount = 0;
  readonly wideValues = new Map<string, bigint>();

  /** Adds a tensor's name; false (nothing added) if the header named it before. */
  addName(name: string): boolean {
    const names = this.names;
    const n = names.length;
    if (this.nameIndex === undefined) {
      if (n === 0 || name > names[n - 1]!) {
        names.push(name);
        return true;
      }
      this.nameIndex = indexNames(names);
      this.names = this.nameIndex.names;
    }
    return this.nameIndex.add(name);
  }

  /** Room for one more tensor. */
  reserve(): void {
    if (this.count < this.dtypes.length) return;
    const n = this.dtypes.length * 2;
    this.dtypes = grow(this.dtypes, new Uint8Array(n));
    this.begins = grow(this.begins, new Float64Array(n));
    this.ends = grow(this.ends, new Float64Array(n));
    this.shapeStarts = grow(this.shapeStarts, new Uint32Array(n + 1));
  }

  pushDim(value: number, wide: bigint | undefined): void {
    if (this.dimCount === this.dims.length) this.dims = grow(this.dims, new Float64Array(this.dims.length * 2));
    if (wide !== undefined) this.wideValues.set(`d${this.dimCount}`, wide);
    this.dims[this.dimCount++] = value;
  }
}

function grow<T extends Uint8Array | Uint32Array | Float64Array>(old: T, fresh: T): T {
  fresh.set(old as never);
  return fresh;
}

class HeaderParser {
  private pos = 0;
  private depth = 0;
  private readonly columns = new Columns();
  // The last number read (`number()` returns its kind): its value as a double (exact up to
  // 2^53 − 1, NaN past it), the exact integer past 2^53 − 1, and serde's float value (for messages).
  private numValue = 0;
  private numWide: bigint | undefined;
  private numFloat = 0;
  // Set by `key()`: whether the key's bytes hold an escape (then `keyText` is its decoded text).
  private keyEscaped = false;
  private keyText = "";
  private keyStart = 0;
  private keyEnd = 0;
  private lastDtype = 0;
  // The whole header as text when it is ASCII and at most SLICED_TEXT_MAX_BYTES: byte offsets are
  // then string offsets, and a name is a slice of it rather than a decoder call (about 1 µs each).
  private readonly text: string | undefined;
  // The text, when it holds no backslash and no control character: every `"` then ends a string,
  // found by `indexOf`, and a whole entry spelled as the writer spells it is matched by one
  // regular expression (compiled to machine code, where a loop over bytes runs cold in a
  // short-lived process and its optimization costs more than it saves at 10,000 tensors).
  private readonly plainText: string | undefined;
  // The shape text and dims of the last entry `writerTextEntry` read: neighbours usually share them.
  private lastShapeText: string | undefined;
  private lastShapeStart = 0;
  private lastShapeEnd = 0;

  constructor(
    private readonly buf: Uint8Array,
    private readonly maxDepth: number,
  ) {
    this.text = asciiText(buf);
    this.plainText = this.text !== undefined && !ESCAPE_OR_CONTROL.test(this.text) ? this.text : undefined;
  }

  parse(): HeaderTable {
    let metadata: Record<string, string> | null = null;
    let sawMetadata = false;
    const columns = this.columns;

    let c = this.peek();
    if (c !== 0x7b /* { */) this.typeError(c, "struct HashMetadata");
    this.enter();
    this.pos++;
    c = this.peek();
    if (c === 0x7d /* } */) this.pos++;
    else {
      const plain = this.plainText;
      for (;;) {
        if (plain !== undefined && this.writerTextEntry(plain)) {
          if (this.commaOr(0x7d, "object")) break;
          c = this.peek();
          continue;
        }
        if (c !== 0x22 /* " */) this.keyExpected(c);
        const key = this.string();
        this.colon();
        if (key === "__metadata__") {
          if (sawMetadata) this.fail("duplicate field `__metadata__`");
          sawMetadata = true;
          metadata = this.metadata();
        } else {
          if (!columns.addName(key)) {
            throw this.error(
              "DuplicateKey",
              `duplicate tensor name ${quoteName(key)} (the format forbids duplicate keys; the reference reader would silently keep the last)`,
            );
          }
          this.tensorInfo();
        }
        if (this.commaOr(0x7d, "object")) break;
        c = this.peek();
      }
    }
    this.leave();
    if (this.peek() !== -1) this.fail("trailing characters");
    const n = columns.count;
    return {
      metadata,
      count: n,
      names: columns.names,
      dtypes: columns.dtypes.subarray(0, n),
      begins: columns.begins.subarray(0, n),
      ends: columns.ends.subarray(0, n),
      shapeStarts: columns.shapeStarts.subarray(0, n + 1),
      dims: columns.dims.subarray(0, columns.dimCount),
      wideValues: columns.wideValues,
      nameIndex: columns.nameIndex,
    };
  }

  // ---- schema --------------------------------------------------------------------------

  private metadata(): Record<string, string> | null {
    let c = this.peek();
    if (c === 0x6e /* n */) {
      this.literal("null");
      return null;
    }
    if (c !== 0x7b) this.typeError(c, "a map");
    const metadata = createMetadata();
    this.enter();
    this.pos++;
    c = this.peek();
    if (c === 0x7d) this.pos++;
    else {
      for (;;) {
        if (c !== 0x22) this.keyExpected(c);
        const key = this.string();
        this.colon();
        // `metadata` has no prototype: `in` sees only keys already read.
        if (key in metadata) throw this.error("DuplicateKey", `duplicate metadata key ${quoteName(key)} (the format forbids duplicate keys)`);
        const v = this.peek();
        if (v !== 0x22) this.typeError(v, "a string");
        metadata[key] = this.string();
        if (this.commaOr(0x7d, "object")) break;
        c = this.peek();
      }
    }
    this.leave();
    return metadata;
  }

  /** The value of the entry of a tensor, whose name `nameIndex` has just taken. */
  private tensorInfo(): void {
    const columns = this.columns;
    columns.reserve();
    const i = columns.count;
    const shapeStart = columns.dimCount;
    let dtype = -1;
    let sawShape = false;
    let sawOffsets = false;
    let c = this.peek();
    const written = c === 0x7b ? this.writerEntry(i) : -1;
    if (written !== -1) dtype = written;
    else if (c === 0x5b /* [ */) {
      // serde builds a struct from a sequence of its fields in declaration order.
      this.enter();
      const at = this.pos;
      this.pos++;
      let count = 0;
      if (this.peek() === 0x5d /* ] */) this.pos++;
      else {
        for (;;) {
          if (count === 0) dtype = this.dtype();
          else if (count === 1) this.shape();
          else if (count === 2) this.offsets(i);
          else this.fail(`invalid length ${count + 1}, expected 3 elements in sequence`);
          count++;
          if (this.commaOr(0x5d, "array")) break;
        }
      }
      if (count < 3) this.fail(`invalid length ${count}, expected struct TensorInfo with 3 elements`, at);
      this.leave();
    } else if (c === 0x7b) {
      this.enter();
      this.pos++;
      c = this.peek();
      if (c === 0x7d) this.pos++;
      else {
        for (;;) {
          if (c !== 0x22) this.keyExpected(c);
          const field = this.field();
          this.colon();
          if (field === DTYPE_FIELD) {
            if (dtype !== -1) this.fail("duplicate field `dtype`");
            dtype = this.dtype();
          } else if (field === SHAPE_FIELD) {
            if (sawShape) this.fail("duplicate field `shape`");
            sawShape = true;
            this.shape();
          } else if (field === OFFSETS_FIELD) {
            if (sawOffsets) this.fail("duplicate field `data_offsets`");
            sawOffsets = true;
            this.offsets(i);
          } else {
            // Unknown fields are ignored by the reference, but must still be valid JSON within the depth limit.
            this.skipValue();
          }
          if (this.commaOr(0x7d, "object")) break;
          c = this.peek();
        }
      }
      this.leave();
      if (dtype === -1) this.fail("missing field `dtype`");
      if (!sawShape) this.fail("missing field `shape`");
      if (!sawOffsets) this.fail("missing field `data_offsets`");
    } else {
      this.typeError(c, "struct TensorInfo");
    }
    columns.dtypes[i] = dtype;
    columns.shapeStarts[i] = shapeStart;
    columns.count = i + 1;
    columns.shapeStarts[i + 1] = columns.dimCount;
  }

  /**
   * The entry at the cursor (on its `{`) when it is spelled as the reference writer spells it:
   * `{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}`, no whitespace, fields in that order,
   * integers of 1 to 15 digits without a leading zero. Returns the dtype's rank with the shape and
   * offsets stored, the cursor after the `}`; or -1 for any other spelling, nothing stored and the
   * cursor unmoved, for the general path to read. One loop without calls (a short-lived process
   * runs this code cold, where the general path's calls cost several µs a tensor), for headers
   * not read as plain text (see `writerTextEntry`). What it accepts, the general path reads to the
   * same result.
   */
  private writerEntry(i: number): number {
    if (this.depth + 2 > this.maxDepth) return -1;
    const buf = this.buf;
    const n = buf.length;
    const columns = this.columns;
    const shapeStart = columns.dimCount;
    let p = this.pos;
    if (!bytesAt(buf, p, DTYPE_PREFIX)) return -1;
    p += DTYPE_PREFIX.length;
    const codeStart = p;
    while (p < n && STRING_BYTE[buf[p]!] === 0) p++;
    if (buf[p] !== 0x22) return -1;
    const length = p - codeStart;
    let rank = -1;
    for (let r = -1; r < DTYPE_BYTES.length && rank === -1; r++) {
      const candidate = r === -1 ? this.lastDtype : r;
      const code = DTYPE_BYTES[candidate]!;
      if (code.length !== length) continue;
      let k = 0;
      while (k < length && code[k] === buf[codeStart + k]) k++;
      if (k === length) rank = candidate;
    }
    if (rank === -1 || !bytesAt(buf, p, SHAPE_INFIX)) return -1;
    p += SHAPE_INFIX.length;
    // Dims, then the two offsets: `count` numbers read, each followed by `,` or `]`.
    let begin = 0;
    let part = 0; // 0: dims, 1: begin, 2: end
    if (buf[p] === 0x5d) {
      p++;
      if (!bytesAt(buf, p, OFFSETS_INFIX)) return -1;
      p += OFFSETS_INFIX.length;
      part = 1;
    }
    for (;;) {
      const first = buf[p];
      if (first === undefined || first < 0x30 || first > 0x39) break;
      let v = first - 0x30;
      const digitsStart = p++;
      let c = buf[p];
      if (first !== 0x30) {
        while (c !== undefined && c >= 0x30 && c <= 0x39) {
          v = v * 10 + (c - 0x30);
          c = buf[++p];
        }
      }
      if (p - digitsStart > 15 || (c !== 0x2c && c !== 0x5d)) break;
      p++;
      if (part === 0) {
        columns.pushDim(v, undefined);
        if (c === 0x5d) {
          if (!bytesAt(buf, p, OFFSETS_INFIX)) break;
          p += OFFSETS_INFIX.length;
          part = 1;
        }
      } else if (part === 1) {
        if (c !== 0x2c) break;
        begin = v;
        part = 2;
      } else {
        if (c !== 0x5d || buf[p] !== 0x7d) break;
        columns.begins[i] = begin;
        columns.ends[i] = v;
        this.pos = p + 1;
        this.lastDtype = rank;
        return rank;
      }
    }
    columns.dimCount = shapeStart;
    return -1;
  }

  /**
   * The next `"name":{…}` of the top-level object, at the cursor, when `plain` (the header's
   * text, see `plainText`) spells it as the reference writer does ({@link writerEntry}) and the
   * name is a new tensor's: read and stored, the cursor after its `}`. False, with nothing stored
   * and the cursor unmoved, for anything else (metadata, another spelling, a repeated name), which
   * the general path then reads, and refuses where it must.
   */
  private writerTextEntry(plain: string): boolean {
    if (this.depth + 2 > this.maxDepth) return false;
    WRITER_ENTRY.lastIndex = this.pos;
    const m = WRITER_ENTRY.exec(plain);
    if (m === null) return false;
    // Indexed, not destructured: destructuring goes through the iterator protocol, slow in cold code.
    const name = m[1]!;
    const code = m[2]!;
    const shape: string | undefined = m[3];
    let rank = this.lastDtype;
    if (DTYPE_CODES[rank] !== code) rank = DTYPE_CODES.indexOf(code);
    const columns = this.columns;
    if (rank === -1 || name === "__metadata__" || !columns.addName(name)) return false;
    columns.reserve();
    const i = columns.count;
    const shapeStart = columns.dimCount;
    if (shape !== undefined && shape === this.lastShapeText) {
      for (let j = this.lastShapeStart; j < this.lastShapeEnd; j++) columns.pushDim(columns.dims[j]!, undefined);
    } else if (shape !== undefined) {
      let v = 0;
      for (let k = 0; k < shape.length; k++) {
        const digit = shape.charCodeAt(k) - 0x30;
        if (digit >= 0) v = v * 10 + digit;
        else {
          columns.pushDim(v, undefined); // a comma
          v = 0;
        }
      }
      columns.pushDim(v, undefined);
    }
    this.lastShapeText = shape;
    this.lastShapeStart = shapeStart;
    this.lastShapeEnd = columns.dimCount;
    // Up to 15 digits: Number() is exact.
    columns.begins[i] = Number(m[4]);
    columns.ends[i] = Number(m[5]);
    columns.dtypes[i] = rank;
    columns.shapeStarts[i] = shapeStart;
    columns.count = i + 1;
    columns.shapeStarts[i + 1] = columns.dimCount;
    this.lastDtype = rank;
    this.pos = WRITER_ENTRY.lastIndex;
    return true;
  }

  /** The dtype at the cursor, as its rank. */
  private dtype(): number {
    const c = this.peek();
    if (c === 0x22) return this.dtypeName();
    if (c !== 0x7b) this.typeError(c, "string or map");
    // serde's externally tagged form of a unit variant: {"F32": null}.
    this.enter();
    this.pos++;
    if (this.peek() !== 0x22) this.fail("invalid value: map, expected map with a single key");
    const rank = this.dtypeName();
    this.colon();
    const v = this.peek();
    if (v !== 0x6e) this.typeError(v, "unit");
    this.literal("null");
    if (this.peek() !== 0x7d) this.fail("invalid value: map, expected map with a single key");
    this.pos++;
    this.leave();
    return rank;
  }

  private dtypeName(): number {
    const at = this.pos;
    const buf = this.buf;
    const start = at + 1;
    let end = start;
    while (end < buf.length && STRING_BYTE[buf[end]!] === 0) end++;
    if (buf[end] === 0x22) {
      // The common case, a plain string: matched byte by byte, without decoding, the dtype of
      // the tensor before first (headers tend to hold runs of one dtype).
      const length = end - start;
      for (let r = -1; r < DTYPE_BYTES.length; r++) {
        const rank = r === -1 ? this.lastDtype : r;
        const code = DTYPE_BYTES[rank]!;
        if (code.length !== length) continue;
        let k = 0;
        while (k < length && code[k] === buf[start + k]) k++;
        if (k === length) {
          this.pos = end + 1;
          this.lastDtype = rank;
          return rank;
        }
      }
    }
    const name = this.string();
    const rank = DTYPES.findIndex((d) => d.code === name);
    if (rank === -1) this.fail(`unknown variant ${quoteName(name)}, expected one of the 22 safetensors dtypes`, at);
    return rank;
  }

  private shape(): void {
    const c = this.peek();
    if (c !== 0x5b) this.typeError(c, "a sequence");
    const columns = this.columns;
    this.enter();
    this.pos++;
    if (this.peek() === 0x5d) this.pos++;
    else {
      do {
        this.usize();
        columns.pushDim(this.numValue, this.numWide);
      } while (!this.commaOr(0x5d, "array"));
    }
    this.leave();
  }

  private offsets(i: number): void {
    const c = this.peek();
    if (c !== 0x5b) this.typeError(c, "a tuple of size 2");
    const columns = this.columns;
    this.enter();
    const at = this.pos;
    this.pos++;
    let count = 0;
    if (this.peek() === 0x5d) this.pos++;
    else {
      do {
        if (count === 2) this.fail("invalid length 3, expected 2 elements in sequence");
        this.usize();
        if (this.numWide !== undefined) columns.wideValues.set(`${count === 0 ? "b" : "e"}${i}`, this.numWide);
        (count === 0 ? columns.begins : columns.ends)[i] = this.numValue;
        count++;
      } while (!this.commaOr(0x5d, "array"));
    }
    if (count < 2) this.fail(`invalid length ${count}, expected a tuple of size 2`, at);
    this.leave();
  }

  /** A u64 at the cursor, left in `numValue` / `numWide`. */
  private usize(): void {
    const c = this.peek();
    if (c !== 0x2d /* - */ && !isDigit(c)) this.typeError(c, "usize");
    const at = this.pos;
    const kind = this.number();
    if (kind === FLOAT) this.fail(`invalid type: floating point \`${formatFloat(this.numFloat)}\`, expected usize`, at);
    if (kind === NEGATIVE) this.fail(`invalid value: integer \`${this.numText()}\`, expected usize`, at);
  }

  // ---- JSON lexing -----------------------------------------------------------------------

  /** Refuses what stands where a key should. */
  private keyExpected(c: number): never {
    if (c === -1) this.fail("EOF while parsing an object");
    this.fail("key must be a string");
  }

  /** A tensor field's key at the cursor, classified (plain keys are compared byte by byte). */
  private field(): number {
    this.key();
    if (this.keyEscaped) {
      const text = this.keyText;
      return text === "dtype" ? DTYPE_FIELD : text === "shape" ? SHAPE_FIELD : text === "data_offsets" ? OFFSETS_FIELD : OTHER_FIELD;
    }
    const buf = this.buf;
    const at = this.keyStart;
    const length = this.keyEnd - at;
    // "dtype", "shape", "data_offsets": told apart by length and first byte, then confirmed.
    const bytes =
      length === 5 ? (buf[at] === 0x64 ? DTYPE_BYTES_KEY : buf[at] === 0x73 ? SHAPE_BYTES_KEY : undefined) : length === 12 ? OFFSETS_BYTES_KEY : undefined;
    if (bytes === undefined) return OTHER_FIELD;
    // From the first byte: for length 12 it chose nothing yet (`tata_offsets` is another key).
    for (let k = 0; k < length; k++) if (bytes[k] !== buf[at + k]) return OTHER_FIELD;
    return length === 12 ? OFFSETS_FIELD : bytes === DTYPE_BYTES_KEY ? DTYPE_FIELD : SHAPE_FIELD;
  }

  /**
   * Reads a string whose text is needed only for comparison: its raw range when it holds no
   * escape (`keyStart`, `keyEnd`), else its decoded text (`keyText`). Either way it is checked.
   */
  private key(): void {
    const buf = this.buf;
    const start = this.pos + 1;
    const end = this.plainEnd(start);
    if (buf[end] === 0x22) {
      this.keyEscaped = false;
      this.keyStart = start;
      this.keyEnd = end;
      this.pos = end + 1;
      if (this.plainHasMultibyte) this.decode(start, end);
      return;
    }
    this.keyEscaped = true;
    this.keyText = this.string();
  }

  // Whether the run `plainEnd` last scanned holds bytes of multi-byte characters.
  private plainHasMultibyte = false;

  /** The end of the run of string bytes from `start` that need no escape handling. */
  private plainEnd(start: number): number {
    const buf = this.buf;
    const n = buf.length;
    let i = start;
    let multibyte = false;
    for (;;) {
      while (i < n && STRING_BYTE[buf[i]!] === 0) i++;
      if (i < n && buf[i]! >= 0x80) {
        multibyte = true;
        i++;
        continue;
      }
      this.plainHasMultibyte = multibyte;
      return i;
    }
  }

  /** The string at the cursor (on its opening quote), decoded. */
  private string(): string {
    const start = this.pos + 1;
    if (this.plainText !== undefined) {
      const end = this.plainText.indexOf('"', start);
      if (end !== -1) {
        this.pos = end + 1;
        return this.plainText.slice(start, end);
      }
    }
    const end = this.plainEnd(start);
    if (this.buf[end] === 0x22) {
      this.pos = end + 1;
      return this.decode(start, end);
    }
    return this.escapedString(start, end);
  }

  /** Bytes `[start, end)` as text. */
  private decode(start: number, end: number): string {
    if (this.text !== undefined) return this.text.slice(start, end);
    try {
      return utf8.decode(this.buf.subarray(start, end));
    } catch {
      throw invalidUtf8();
    }
  }

  /** The rest of a string from `end`, where `plainEnd` stopped: an escape, a control character or the end. */
  private escapedString(start: number, end: number): string {
    const buf = this.buf;
    let out = this.decode(start, end);
    let i = end;
    for (;;) {
      const c = buf[i];
      if (c === undefined) this.fail("EOF while parsing a string", i);
      if (c === 0x22) {
        this.pos = i + 1;
        return out;
      }
      if (c < 0x20) this.fail("control character (\\u0000-\\u001F) found while parsing a string", i);
      // c is a backslash: plainEnd stops at nothing else.
      const esc = buf[i + 1];
      i += 2;
      switch (esc) {
        case 0x22:
          out += '"';
          break;
        case 0x5c:
          out += "\\";
          break;
        case 0x2f:
          out += "/";
          break;
        case 0x62:
          out += "\b";
          break;
        case 0x66:
          out += "\f";
          break;
        case 0x6e:
          out += "\n";
          break;
        case 0x72:
          out += "\r";
          break;
        case 0x74:
          out += "\t";
          break;
        case 0x75: {
          const unit = this.hex4(i);
          i += 4;
          if (unit >= 0xdc00 && unit <= 0xdfff) this.fail("lone leading surrogate in hex escape", i);
          if (unit >= 0xd800 && unit <= 0xdbff) {
            if (buf[i] !== 0x5c || buf[i + 1] !== 0x75) this.fail("unexpected end of hex escape", i);
            const low = this.hex4(i + 2);
            i += 6;
            if (low < 0xdc00 || low > 0xdfff) this.fail("lone leading surrogate in hex escape", i);
            out += String.fromCharCode(unit, low);
          } else {
            out += String.fromCharCode(unit);
          }
          break;
        }
        default:
          this.fail(esc === undefined ? "EOF while parsing a string" : "invalid escape", i - 1);
      }
      const runEnd = this.plainEnd(i);
      out += this.decode(i, runEnd);
      i = runEnd;
    }
  }

  private hex4(at: number): number {
    let unit = 0;
    for (let k = at; k < at + 4; k++) {
      const c = this.buf[k];
      const d = c === undefined ? -1 : c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : c >= 0x41 && c <= 0x46 ? c - 0x37 : -1;
      if (d < 0) this.fail(c === undefined ? "EOF while parsing a string" : "invalid escape", k);
      unit = unit * 16 + d;
    }
    return unit;
  }

  /** After a value: consumes `,` (returns false) or the closing bracket (returns true). */
  private commaOr(close: number, what: "array" | "object"): boolean {
    const c = this.peek();
    if (c === 0x2c /* , */) {
      this.pos++;
      if (this.peek() === close) this.fail("trailing comma");
      return false;
    }
    if (c === close) {
      this.pos++;
      return true;
    }
    if (c === -1) this.fail(`EOF while parsing ${what === "array" ? "a list" : "an object"}`);
    this.fail(`expected \`,\` or \`${what === "array" ? "]" : "}"}\``);
  }

  private colon(): void {
    const c = this.peek();
    if (c !== 0x3a /* : */) this.fail(c === -1 ? "EOF while parsing an object" : "expected `:`");
    this.pos++;
  }

  private skipValue(): void {
    let c = this.peek();
    switch (c) {
      case 0x22:
        this.key(); // checked, not kept
        return;
      case 0x7b:
        this.enter();
        this.pos++;
        c = this.peek();
        if (c === 0x7d) this.pos++;
        else {
          for (;;) {
            if (c !== 0x22) this.keyExpected(c);
            this.key();
            this.colon();
            this.skipValue();
            if (this.commaOr(0x7d, "object")) break;
            c = this.peek();
          }
        }
        this.leave();
        return;
      case 0x5b:
        this.enter();
        this.pos++;
        if (this.peek() === 0x5d) this.pos++;
        else {
          do this.skipValue();
          while (!this.commaOr(0x5d, "array"));
        }
        this.leave();
        return;
      case 0x74:
        this.literal("true");
        return;
      case 0x66:
        this.literal("false");
        return;
      case 0x6e:
        this.literal("null");
        return;
      default:
        if (c === 0x2d || isDigit(c)) {
          this.number();
          return;
        }
        this.fail(c === -1 ? "EOF while parsing a value" : "expected value");
    }
  }

  private literal(word: string): void {
    for (let k = 0; k < word.length; k++) {
      if (this.buf[this.pos + k] !== word.charCodeAt(k)) this.fail("expected ident");
    }
    this.pos += word.length;
  }

  /**
   * The number at the cursor: its kind (u64, negative i64 or float, by serde's rules), its value
   * in the `num*` fields.
   * @throws StConvertError `InvalidHeaderDeserialization` for a malformed number, and for one that
   *   overflows a float as serde computes it ("number out of range"), wherever it stands, even in
   *   a field the reference ignores: it parses every value.
   */
  private number(): number {
    const buf = this.buf;
    const start = this.pos;
    let i = start;
    const negative = buf[i] === 0x2d;
    if (negative) i++;
    const intStart = i;
    const first = buf[i];
    if (first === 0x30) i++;
    else if (first !== undefined && first >= 0x31 && first <= 0x39) {
      i++;
      while (isDigit(buf[i])) i++;
    } else this.fail("invalid number", i);
    const intEnd = i;
    let fracStart = -1;
    let fracEnd = -1;
    if (buf[i] === 0x2e /* . */) {
      fracStart = ++i;
      while (isDigit(buf[i])) i++;
      if (i === fracStart) this.fail("invalid number", i);
      fracEnd = i;
    }
    let expStart = -1;
    let expEnd = -1;
    let expNegative = false;
    if (buf[i] === 0x65 || buf[i] === 0x45 /* e E */) {
      i++;
      if (buf[i] === 0x2b || buf[i] === 0x2d) expNegative = buf[i++] === 0x2d;
      expStart = i;
      while (isDigit(buf[i])) i++;
      if (i === expStart) this.fail("invalid number", i);
      expEnd = i;
    }
    // serde refuses leading zeros (`01`) and a `.` or exponent without digits (`1.`, `1e`).
    const after = buf[i];
    if (isDigit(after) || after === 0x2e || after === 0x65 || after === 0x45) this.fail("invalid number", i);
    this.pos = i;

    this.numWide = undefined;
    if (fracStart === -1 && expStart === -1) {
      const digits = intEnd - intStart;
      // Up to 15 digits a double holds the value exactly; up to 20, a u64 may.
      if (digits <= 15) {
        let v = 0;
        for (let k = intStart; k < intEnd; k++) v = v * 10 + (buf[k]! - 0x30);
        if (!negative) return this.integer(UNSIGNED, v, undefined);
        if (v !== 0) return this.integer(NEGATIVE, -v, undefined);
      } else if (digits <= 20) {
        const magnitude = BigInt(String.fromCharCode(...buf.subarray(intStart, intEnd)));
        if (!negative && magnitude <= U64_MAX) return this.integer(UNSIGNED, Number.NaN, magnitude);
        if (negative && magnitude <= I64_MIN_MAGNITUDE) return this.integer(NEGATIVE, Number.NaN, -magnitude);
      }
      // serde_json: `-0` and integers beyond u64 (i64 when negative) become floats.
    }
    const value = serdeFloat(buf, intStart, intEnd, fracStart, fracEnd, expStart, expEnd, expNegative);
    if (!Number.isFinite(value)) this.fail("number out of range", i);
    this.numFloat = negative ? -value : value;
    this.numValue = Number.NaN;
    return FLOAT;
  }

  private integer(kind: number, value: number, wide: bigint | undefined): number {
    if (wide !== undefined && wide >= -BigInt(Number.MAX_SAFE_INTEGER) && wide <= BigInt(Number.MAX_SAFE_INTEGER)) {
      this.numValue = Number(wide);
    } else {
      this.numValue = value;
      this.numWide = wide;
    }
    return kind;
  }

  /** The last integer read, as text. */
  private numText(): string {
    return this.numWide === undefined ? String(this.numValue) : String(this.numWide);
  }

  /** The next non-whitespace byte, -1 at the end; the cursor moves past the whitespace. */
  private peek(): number {
    const buf = this.buf;
    let i = this.pos;
    for (;;) {
      const c = buf[i];
      // JSON whitespace only: a form feed or NUL is not padding.
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else {
        this.pos = i;
        return c === undefined ? -1 : c;
      }
    }
  }

  private enter(): void {
    if (++this.depth > this.maxDepth) this.fail("recursion limit exceeded");
  }

  private leave(): void {
    this.depth--;
  }

  private typeError(c: number, expected: string): never {
    const found = c === 0x7b ? "map" : c === 0x5b ? "sequence" : c === 0x22 ? "string" : c === 0x6e ? "null" : c === 0x74 || c === 0x66 ? "boolean" : undefined;
    if (found !== undefined) this.fail(`invalid type: ${found}, expected ${expected}`);
    if (c === 0x2d || isDigit(c)) {
      const at = this.pos;
      const kind = this.number();
      const shown = kind === FLOAT ? `floating point \`${formatFloat(this.numFloat)}\`` : `integer \`${this.numText()}\``;
      this.fail(`invalid type: ${shown}, expected ${expected}`, at);
    }
    this.fail(c === -1 ? "EOF while parsing a value" : "expected value");
  }

  private fail(rule: string, at = this.pos): never {
    throw this.error("InvalidHeaderDeserialization", `invalid JSON in header: ${rule}`, at);
  }

  private error(code: "InvalidHeaderDeserialization" | "DuplicateKey", rule: string, at = this.pos): StConvertError {
    const { line, column } = lineAndColumn(this.buf, at);
    return new StConvertError(code, `${rule} at line ${line} column ${column}`);
  }
}

/** Whether `bytes` stand in `buf` at `at`. */
function bytesAt(buf: Uint8Array, at: number, bytes: Uint8Array): boolean {
  if (at + bytes.length > buf.length) return false;
  for (let k = 0; k < bytes.length; k++) if (buf[at + k] !== bytes[k]) return false;
  return true;
}

/**
 * Largest header whose text is kept whole while its names are in use (names are slices of it):
 * a 16 MiB header costs 16 MiB more this way, and a larger one is decoded name by name.
 */
const SLICED_TEXT_MAX_BYTES = 16 * 1024 * 1024;

/** The header as text when it is ASCII only (one byte a character) and not too large to keep, else undefined. */
function asciiText(buf: Uint8Array): string | undefined {
  if (buf.length > SLICED_TEXT_MAX_BYTES) return undefined;
  let text: string;
  try {
    text = utf8.decode(buf);
  } catch {
    return undefined; // not UTF-8: the parser says where
  }
  // Valid UTF-8 decodes to as many UTF-16 units as bytes only when every byte is ASCII.
  return text.length === buf.length ? text : undefined;
}

function isDigit(c: number | undefined): boolean {
  return c !== undefined && c >= 0x30 && c <= 0x39;
}

/**
 * The magnitude serde_json (without its `float_roundtrip` feature, as safetensors builds it) makes
 * of a number token, or Infinity where it reports "number out of range". Not the correctly rounded
 * value: serde folds up to 19–20 significant digits into a u64 (dropping the rest, counted in the
 * exponent), then multiplies or divides that by one power of ten, so `1.7976931348623158e308`,
 * which rounds to the largest double, overflows there, and is refused.
 */
function serdeFloat(
  buf: Uint8Array,
  intStart: number,
  intEnd: number,
  fracStart: number,
  fracEnd: number,
  expStart: number,
  expEnd: number,
  expNegative: boolean,
): number {
  // The significand: a double while exact, a BigInt past 2^53 − 1, refused past u64 (overflow!).
  let small = 0;
  let big: bigint | undefined;
  const push = (digit: number): boolean => {
    if (big === undefined) {
      const next = small * 10 + digit;
      if (next <= Number.MAX_SAFE_INTEGER) {
        small = next;
        return true;
      }
      big = BigInt(small);
    }
    if (big > U64_MAX_DIV_10 || (big === U64_MAX_DIV_10 && digit > 5)) return false;
    big = big * 10n + BigInt(digit);
    return true;
  };
  let exponent = 0;
  // parse_integer, then parse_long_integer: digits past the u64 count in the exponent.
  for (let k = intStart; k < intEnd; k++) {
    if (!push(buf[k]! - 0x30)) {
      exponent += intEnd - k;
      break;
    }
  }
  // parse_decimal: fraction digits join the significand until it would overflow; the rest is dropped.
  if (fracStart !== -1) {
    for (let k = fracStart; k < fracEnd; k++) {
      if (!push(buf[k]! - 0x30)) break;
      exponent--;
    }
  }
  const zero = big === undefined ? small === 0 : big === 0n;
  // parse_exponent: an i32, saturating when added; one past i32::MAX is out of range, or zero.
  if (expStart !== -1) {
    let e = 0;
    for (let k = expStart; k < expEnd; k++) {
      const digit = buf[k]! - 0x30;
      if (e > (I32_MAX - digit) / 10) return !zero && !expNegative ? Number.POSITIVE_INFINITY : 0;
      e = e * 10 + digit;
    }
    exponent = Math.min(I32_MAX, Math.max(I32_MIN, expNegative ? exponent - e : exponent + e));
  }
  // f64_from_parts: the u64 rounded to a double, then one multiplication or division by POW10.
  let f = big === undefined ? small : Number(big);
  for (;;) {
    const magnitude = Math.abs(exponent);
    if (magnitude <= 308) {
      if (exponent >= 0) f *= POW10[magnitude]!;
      else f /= POW10[magnitude]!;
      return f;
    }
    if (f === 0) return f;
    if (exponent >= 0) return Number.POSITIVE_INFINITY;
    f /= 1e308;
    exponent += 308;
  }
}

/** Rust's `{}` display of an f64 (`4.0`, `-0.0`, `1e20`), close enough to read like the reference. */
function formatFloat(value: number): string {
  if (Number.isInteger(value) && Math.abs(value) < 1e16) return Object.is(value, -0) ? "-0.0" : `${value}.0`;
  return String(value);
}

/** serde's position of a byte: 1-based line, and the column counted in bytes. */
function lineAndColumn(buf: Uint8Array, at: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  const end = Math.min(at, buf.length);
  for (let i = buf.indexOf(0x0a); i !== -1 && i < end; i = buf.indexOf(0x0a, i + 1)) {
    line++;
    lineStart = i + 1;
  }
  return { line, column: end - lineStart + 1 };
}
