/**
 * The npy header: reading it as numpy reads it, writing it byte for byte as numpy writes it.
 *
 * Spec: `numpy/lib/_format_impl.py` (numpy 2.4): the module docstring and `read_magic`,
 * `_read_array_header`, `_write_array_header`, `_wrap_header`, `_wrap_header_guess_version`.
 * Layout: `\x93NUMPY`, major and minor version bytes, the header length (u16 LE for 1.0, u32 LE
 * for 2.0 and 3.0), then the header: a Python dict literal padded with spaces and ended by `\n`,
 * latin1 for 1.0/2.0 and UTF-8 for 3.0. The array data follows.
 */
import { StConvertError } from "@st-convert/core";
import { type PyValue, parsePythonLiteral } from "./parsePythonLiteral.js";

/** The 6 bytes every npy file starts with. */
export const NPY_MAGIC: Uint8Array = Uint8Array.of(0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59);

/**
 * Longest header text read, in characters: numpy's read-side default (`_MAX_HEADER_SIZE`), beyond
 * which `np.load` refuses a header as possibly unsafe to parse. It bounds what a header can make
 * us read and parse before any data is touched.
 */
export const MAX_NPY_HEADER_SIZE = 10_000;

/**
 * Most dimensions an array may have: numpy's `NPY_MAXDIMS` (64 since numpy 2.0). np.load refuses a
 * header with more ("maximum supported dimension for an ndarray is currently 64"), empty or not.
 */
export const MAX_RANK = 64;

/** Data starts on a multiple of this many bytes in files numpy writes (`ARRAY_ALIGN`). */
const ARRAY_ALIGN = 64;
/** Spaces numpy reserves so the growth axis can reach 21 digits (`GROWTH_AXIS_MAX_DIGITS`). */
const GROWTH_AXIS_MAX_DIGITS = 21;

/** An npy format version: `[1, 0]`, `[2, 0]` or `[3, 0]`. */
export type NpyVersion = readonly [1 | 2 | 3, 0];

/** The three fields of an npy header, as the file states them. */
export interface NpyHeader {
  /**
   * The dtype string (`'<f4'`, `'|b1'`, `'<V2'`…), or for a `(base, shape)` tuple descr a Python
   * rendering of it. Structured descrs (lists) are refused when parsed.
   */
  readonly descr: string;
  /** The descr as written when it is a `(base, shape)` tuple rather than a string (numpy never writes one). */
  readonly descrTuple?: PyValue;
  /** True when the data is in Fortran (column-major) order. */
  readonly fortranOrder: boolean;
  /** Dimensions, outermost first; each fits in int64 and is not negative. */
  readonly shape: readonly bigint[];
}

/** Options of {@link parseNpyHeader} and {@link readNpyHeader}. */
export interface NpyHeaderOptions {
  /** Longest header accepted, in characters. Default {@link MAX_NPY_HEADER_SIZE}. */
  maxHeaderSize?: number;
  /** Receives notices, such as a header that needed Python 2 clean-up. */
  onWarning?: (message: string) => void;
}

const INT64_MAX = (1n << 63n) - 1n;

/**
 * Interprets the header text as numpy's `_read_array_header` does: a Python literal (retried
 * without Python 2 `L` suffixes for versions 1.0 and 2.0), which must be a dict with exactly the
 * keys `descr`, `fortran_order` and `shape` (a key given twice: the last one wins, as in Python);
 * `shape` a tuple of ints, `fortran_order` a bool, `descr` a string.
 *
 * Stricter than numpy, which would fail later: a bool as a dimension, negative dimensions and
 * dimensions past int64 are refused here (`InvalidShape`), as are more than {@link MAX_RANK}
 * dimensions (numpy refuses them when it makes the array).
 * @throws StConvertError `HeaderTooLarge`, `InvalidHeader`, `InvalidHeaderKeys`, `InvalidShape`,
 *   `InvalidFortranOrder`, `InvalidDescr`, `UnsupportedDtype` (structured descrs).
 */
export function parseNpyHeader(text: string, version: NpyVersion = [1, 0], options: NpyHeaderOptions = {}): NpyHeader {
  const maxHeaderSize = options.maxHeaderSize ?? MAX_NPY_HEADER_SIZE;
  const canonical = text.length <= maxHeaderSize ? CANONICAL.exec(text) : null;
  // numpy counts Python characters, i.e. code points (a canonical header is ASCII: its length).
  const length = canonical !== null ? text.length : countCodePoints(text);
  if (length > maxHeaderSize) {
    throw new StConvertError("HeaderTooLarge", `header is ${length} characters long, more than the limit of ${maxHeaderSize} (numpy's max_header_size)`);
  }
  if (canonical !== null) {
    // What np.save writes (and st-convert): read without the general parser, to the same result.
    const [, descr, fortranOrder, one, many] = canonical as unknown as [string, string, string, string | undefined, string | undefined];
    const dims = one !== undefined ? [one] : many === undefined ? [] : many.split(", ");
    return { descr, fortranOrder: fortranOrder === "True", shape: checkedShape(dims.map(BigInt), () => `(${dims.join(", ")}${dims.length === 1 ? "," : ""})`) };
  }
  let value: PyValue;
  try {
    value = parsePythonLiteral(text);
  } catch (error) {
    if (version[0] > 2) throw error;
    // Headers written by Python 2 may hold `2L` (or blanks after the last newline); numpy retries
    // versions 1.0 and 2.0 through _filter_header.
    value = parsePythonLiteral(text, { allowLongSuffix: true });
    options.onWarning?.(
      "the npy header needed numpy's clean-up of headers written by Python 2 (an L suffix, blanks after the last newline); numpy reads it the same way",
    );
  }
  if (value.kind !== "dict") throw new StConvertError("InvalidHeader", `header is not a dictionary but a ${value.kind}`);

  const fields = new Map<string, PyValue>();
  let otherKeys = false;
  for (const [key, item] of value.entries) {
    if (key.kind === "str") fields.set(key.value, item);
    else otherKeys = true;
  }
  const expected = ["descr", "fortran_order", "shape"];
  if (otherKeys || fields.size !== expected.length || !expected.every((k) => fields.has(k))) {
    const found = [...fields.keys()].sort().map((k) => JSON.stringify(k));
    if (otherKeys) found.push("(keys that are not strings)");
    throw new StConvertError(
      "InvalidHeaderKeys",
      `header does not contain the correct keys: expected descr, fortran_order, shape; found ${found.join(", ") || "none"}`,
    );
  }

  const shapeValue = fields.get("shape")!;
  if (shapeValue.kind !== "tuple" || !shapeValue.items.every((d) => d.kind === "int")) {
    throw new StConvertError("InvalidShape", `shape is not valid: ${pyRepr(shapeValue)} is not a tuple of integers`);
  }
  const shape = checkedShape(
    shapeValue.items.map((d) => (d as { value: bigint }).value),
    () => pyRepr(shapeValue),
  );

  const fortran = fields.get("fortran_order")!;
  if (fortran.kind !== "bool") throw new StConvertError("InvalidFortranOrder", `fortran_order is not a valid bool: ${pyRepr(fortran)}`);

  const descr = fields.get("descr")!;
  if (descr.kind === "list") {
    throw new StConvertError("UnsupportedDtype", "the array has a structured dtype (a list of fields), which has no safetensors equivalent");
  }
  if (descr.kind === "tuple") return { descr: pyRepr(descr), descrTuple: descr, fortranOrder: fortran.value, shape };
  if (descr.kind !== "str") throw new StConvertError("InvalidDescr", `descr is not a valid dtype descriptor: ${pyRepr(descr)}`);
  return { descr: descr.value, fortranOrder: fortran.value, shape };
}

/**
 * The header text `np.save` writes: the three keys in order, a descr of plain characters, decimal
 * dimensions (a 1-tuple with its comma), then spaces and a newline. Anything else takes the
 * general parser.
 */
const CANONICAL =
  /^\{'descr': '([<>|=]?[A-Za-z][A-Za-z0-9]*)', 'fortran_order': (True|False), 'shape': \((?:(0|[1-9][0-9]*),|((?:0|[1-9][0-9]*)(?:, (?:0|[1-9][0-9]*))+))?\), \} *\n?$/;

/** Dimensions as numpy accepts them, or the stricter refusals st-convert applies at once. */
function checkedShape(shape: bigint[], shown: () => string): bigint[] {
  if (shape.length > MAX_RANK) {
    throw new StConvertError(
      "InvalidShape",
      `shape is not valid: ${shape.length} dimensions, more than numpy's maximum of ${MAX_RANK} (NPY_MAXDIMS: "maximum supported dimension for an ndarray")`,
    );
  }
  for (const dim of shape) {
    if (dim < 0n) throw new StConvertError("InvalidShape", `shape is not valid: negative dimensions are not allowed (${shown()})`);
    if (dim > INT64_MAX) throw new StConvertError("InvalidShape", `shape is not valid: dimension ${dim} does not fit in int64`);
  }
  return shape;
}

/** Where an npy header ends, and what it says. */
export interface NpyPreamble {
  readonly version: NpyVersion;
  readonly header: NpyHeader;
  /** Offset of the first data byte: magic, version, length field and header. */
  readonly dataOffset: number;
}

/**
 * Bytes asked for first: the magic, the length field and a header of up to this size in one read
 * (numpy's own headers are 118 or 182 bytes); a longer header costs one more read.
 */
const FIRST_READ = 1024;

/**
 * Reads and validates the magic, the version and the header of an npy file whose first bytes
 * `head(n)` returns (fewer than `n` when the file is shorter). At most
 * `12 + 4 × maxHeaderSize` bytes are requested, so a lying length field costs nothing.
 * @throws StConvertError `UnexpectedEof`, `BadMagic`, `UnsupportedVersion`, `HeaderTooLarge`,
 *   `InvalidHeader` (also: a version 3.0 header that is not UTF-8), and what {@link parseNpyHeader} throws.
 */
export async function readNpyHeader(head: (length: number) => Promise<Uint8Array>, options: NpyHeaderOptions = {}): Promise<NpyPreamble> {
  const first = await head(FIRST_READ);
  const result = parseNpyPreamble(first, first.byteLength < FIRST_READ, options);
  if (typeof result !== "number") return result;
  const bytes = await head(result);
  return parseNpyPreamble(bytes, true, options) as NpyPreamble;
}

/**
 * {@link readNpyHeader} on bytes already read: the preamble, or the number of bytes it needs
 * when `bytes` is a prefix that ends too early (`complete` false: more may follow).
 * @throws StConvertError as {@link readNpyHeader} (`UnexpectedEof` only when `complete`).
 */
export function parseNpyPreamble(bytes: Uint8Array, complete: boolean, options: NpyHeaderOptions = {}): NpyPreamble | number {
  const maxHeaderSize = options.maxHeaderSize ?? MAX_NPY_HEADER_SIZE;
  if (bytes.byteLength < 8) {
    if (!complete && isPrefixOfMagic(bytes)) return 12;
    if (bytes.byteLength < 6 || !startsWithMagic(bytes)) {
      throw new StConvertError(bytes.byteLength < 6 && isPrefixOfMagic(bytes) ? "UnexpectedEof" : "BadMagic", describeMagic(bytes));
    }
    throw new StConvertError("UnexpectedEof", `EOF reading the magic string: expected 8 bytes, got ${bytes.byteLength}`);
  }
  if (!startsWithMagic(bytes)) throw new StConvertError("BadMagic", describeMagic(bytes));
  const major = bytes[6]!;
  const minor = bytes[7]!;
  if (minor !== 0 || (major !== 1 && major !== 2 && major !== 3)) {
    throw new StConvertError("UnsupportedVersion", `npy format version ${major}.${minor} is not supported; numpy writes and reads 1.0, 2.0 and 3.0`);
  }
  const version: NpyVersion = [major as 1 | 2 | 3, 0];
  const fieldSize = major === 1 ? 2 : 4;
  if (bytes.byteLength < 8 + fieldSize) {
    if (!complete) return 12;
    throw new StConvertError("UnexpectedEof", `EOF reading the array header length: expected ${fieldSize} bytes, got ${bytes.byteLength - 8}`);
  }
  const headerLength = major === 1 ? bytes[8]! | (bytes[9]! << 8) : (bytes[8]! | (bytes[9]! << 8) | (bytes[10]! << 16) | (bytes[11]! << 24)) >>> 0;
  // latin1 is one byte per character; UTF-8 at most four.
  const maxBytes = major === 3 ? 4 * maxHeaderSize : maxHeaderSize;
  if (headerLength > maxBytes) {
    throw new StConvertError(
      "HeaderTooLarge",
      `header is ${headerLength} bytes long, more than the limit of ${maxHeaderSize} characters (numpy's max_header_size)`,
    );
  }
  const dataOffset = 8 + fieldSize + headerLength;
  if (bytes.byteLength < dataOffset) {
    if (!complete) return dataOffset;
    throw new StConvertError(
      "UnexpectedEof",
      `EOF reading the array header: expected ${headerLength} bytes, got ${Math.max(0, bytes.byteLength - 8 - fieldSize)}`,
    );
  }
  const raw = bytes.subarray(8 + fieldSize, dataOffset);
  let text: string;
  if (major === 3) {
    try {
      text = utf8.decode(raw);
    } catch {
      throw new StConvertError("InvalidHeader", "a version 3.0 header must be UTF-8, and this one is not");
    }
  } else {
    text = latin1(raw);
  }
  return { version, header: parseNpyHeader(text, version, options), dataOffset };
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

const NON_ASCII = /[^\x00-\x7f]/;

/** True when `bytes` start with {@link NPY_MAGIC} (false when they are shorter). */
export function startsWithMagic(bytes: Uint8Array): boolean {
  return bytes[0] === 0x93 && bytes[1] === 0x4e && bytes[2] === 0x55 && bytes[3] === 0x4d && bytes[4] === 0x50 && bytes[5] === 0x59;
}

function isPrefixOfMagic(bytes: Uint8Array): boolean {
  return [...bytes].every((b, i) => NPY_MAGIC[i] === b);
}

function describeMagic(bytes: Uint8Array): string {
  const shown = [...bytes.subarray(0, 6)].map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`)).join("");
  return `the magic string is not correct: expected \\x93NUMPY, got "${shown}"`;
}

/** Decodes bytes as latin1 (each byte is the code point of the same value), which never fails. */
function latin1(bytes: Uint8Array): string {
  // ASCII decodes alike in UTF-8 and latin1 (TextDecoder's "latin1" is windows-1252, wrong past
  // 0x7f): the native decoder first, the byte loop only when a byte past 0x7f shows.
  try {
    const text = utf8.decode(bytes);
    if (!NON_ASCII.test(text)) return text;
  } catch {
    // Not UTF-8, so not ASCII either.
  }
  let text = "";
  for (let at = 0; at < bytes.byteLength; at += 8192) text += String.fromCharCode(...bytes.subarray(at, at + 8192));
  return text;
}

function countCodePoints(text: string): number {
  let surrogatePairs = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        surrogatePairs++;
        i++;
      }
    }
  }
  return text.length - surrogatePairs;
}

/** A short Python-like rendering of a parsed value, for messages. */
function pyRepr(value: PyValue): string {
  switch (value.kind) {
    case "str":
      return `'${value.value.length > 40 ? `${value.value.slice(0, 40)}…` : value.value}'`;
    case "bytes":
      return "b'…'";
    case "int":
      return value.value.toString();
    case "float":
    case "complex":
      return value.text;
    case "bool":
      return value.value ? "True" : "False";
    case "none":
      return "None";
    case "ellipsis":
      return "Ellipsis";
    case "tuple": {
      const items = value.items.slice(0, 8).map(pyRepr);
      if (value.items.length > 8) items.push("…");
      return value.items.length === 1 ? `(${items[0]},)` : `(${items.join(", ")})`;
    }
    case "list":
      return `[${value.items.slice(0, 8).map(pyRepr).join(", ")}${value.items.length > 8 ? ", …" : ""}]`;
    case "set":
      return "{…}";
    case "dict":
      return "{…: …}";
  }
}

/** Options of {@link encodeNpyHeader}. */
export interface EncodeNpyHeaderOptions {
  /** Format version; default: the oldest that can hold the header, as `np.save` chooses (1.0, else 2.0). */
  version?: NpyVersion;
}

/**
 * The bytes `np.save` writes before the data of an array with this descr, order and shape:
 * the dict with sorted keys and `repr` values, growth-axis padding, spaces up to a multiple of
 * 64 bytes (1 to 64 of them, never 0) and `\n`; version 1.0 unless the header needs more than
 * 65,535 bytes.
 * @throws StConvertError `InvalidArgument` for a descr that is not printable ASCII (dtype strings
 *   always are), a negative or non-integer dimension, or a header too long for the version asked.
 */
export function encodeNpyHeader(
  header: { descr: string; fortranOrder?: boolean; shape: readonly (number | bigint)[] },
  options: EncodeNpyHeaderOptions = {},
): Uint8Array {
  const fortranOrder = header.fortranOrder ?? false;
  if (!/^[\x20-\x7e]*$/.test(header.descr)) {
    throw new StConvertError("InvalidArgument", `descr ${JSON.stringify(header.descr)} is not printable ASCII`);
  }
  const dims = header.shape.map((d) => {
    if (typeof d === "number" ? !Number.isSafeInteger(d) || d < 0 : d < 0n) {
      throw new StConvertError("InvalidArgument", `shape [${header.shape.join(", ")}] has a dimension that is not a non-negative integer`);
    }
    return d.toString();
  });
  const shapeRepr = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(", ")})`;
  let text = `{'descr': ${pythonStrRepr(header.descr)}, 'fortran_order': ${fortranOrder ? "True" : "False"}, 'shape': ${shapeRepr}, }`;
  if (dims.length > 0) text += " ".repeat(Math.max(0, GROWTH_AXIS_MAX_DIGITS - dims[fortranOrder ? dims.length - 1 : 0]!.length));
  const ascii = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) ascii[i] = text.charCodeAt(i);

  const wrap = (major: 1 | 2 | 3): Uint8Array | undefined => {
    const fieldSize = major === 1 ? 2 : 4;
    const hlen = ascii.byteLength + 1;
    const padlen = ARRAY_ALIGN - ((8 + fieldSize + hlen) % ARRAY_ALIGN);
    const total = hlen + padlen;
    if (major === 1 && total > 0xffff) return undefined;
    const out = new Uint8Array(8 + fieldSize + total).fill(0x20, 8 + fieldSize + ascii.byteLength);
    out.set(NPY_MAGIC);
    out[6] = major;
    out[7] = 0;
    const view = new DataView(out.buffer);
    if (major === 1) view.setUint16(8, total, true);
    else view.setUint32(8, total, true);
    out.set(ascii, 8 + fieldSize);
    out[out.byteLength - 1] = 0x0a;
    return out;
  };
  if (options.version !== undefined) {
    const out = wrap(options.version[0]);
    if (out === undefined) throw new StConvertError("InvalidArgument", `header of ${ascii.byteLength} bytes is too long for npy version 1.0`);
    return out;
  }
  // An ASCII header is latin1, so version 3.0 (UTF-8) is never needed.
  return wrap(1) ?? wrap(2)!;
}

/** Python's `repr` of a printable-ASCII str: single quotes unless it holds `'` and no `"`. */
function pythonStrRepr(value: string): string {
  const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
  let out = quote;
  for (const c of value) out += c === "\\" ? "\\\\" : c === quote ? `\\${c}` : c;
  return out + quote;
}
