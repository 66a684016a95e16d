/**
 * The header of a GGUF file (magic, version, counts, key/value pairs, tensor infos), read from a
 * source in windows and held to the rules of ggml's own loader (`gguf_init_from_file` in ggml's
 * `src/gguf.cpp`, whose checks llama.cpp applies): what it refuses is refused here, with a code
 * and one line, and what it reads is read with the same tensors. Two deliberate differences: a
 * big-endian file is read (gguf-py's reader reads both byte orders; ggml only its host's), and so
 * is an array of arrays (gguf-py reads and writes them; ggml refuses the file).
 */
import { type ByteSource, StConvertError, quoteName } from "@st-convert/core";
import {
  DEFAULT_ALIGNMENT,
  GGML_TYPE_COUNT,
  type GgufErrorCode,
  MAX_ARRAY_ELEMENTS,
  MAX_DIMS,
  MAX_NAME_BYTES,
  MAX_STRING_LENGTH,
  VALUE_TYPES,
  VALUE_TYPE_SIZE,
  type ValueTypeName,
} from "./ggufTypes.js";
import { ggmlTypeInfo } from "./quants/ggmlTypes.js";

/**
 * A metadata value, in the JSON-ready form the package's metadata encoding uses (README): integers
 * up to 32 bits and finite floats as numbers (but -0), 64-bit integers as decimal strings, -0,
 * infinities and NaNs as the hex of their bits (`"0x7fc00000"`), booleans as booleans, strings as
 * strings (`{"hex": …}` when the bytes are not UTF-8). An array has its item type and its items,
 * an array of arrays items of the form `{itemType, value}`.
 */
export interface GgufValue {
  readonly type: ValueTypeName;
  readonly itemType?: ValueTypeName;
  readonly value: unknown;
}

/** One key/value pair, in file order. */
export interface GgufKv extends GgufValue {
  readonly key: string;
}

/** One tensor info. */
export interface GgufTensorInfo {
  readonly name: string;
  /** ggml's `ne`, fastest-varying first (numpy's shape reversed), `n_dims` of them. */
  readonly ne: readonly number[];
  /** The ggml type id. */
  readonly type: number;
  /** Offset from the start of the data section. */
  readonly offset: number;
  /** Bytes the tensor's data takes (whole blocks). */
  readonly byteLength: number;
}

export interface GgufHeader {
  readonly version: number;
  readonly littleEndian: boolean;
  readonly kvs: readonly GgufKv[];
  readonly tensors: readonly GgufTensorInfo[];
  readonly alignment: number;
  /** Where the data section starts in the file. */
  readonly dataOffset: number;
  /** Bytes of the data section the tensors take, each padded to the alignment. */
  readonly dataSize: number;
}

/** Header bytes read at a time. */
const WINDOW = 1024 * 1024;
/** Largest string a JavaScript string can hold comfortably, and the most one key/value or name may take. */
export const MAX_HEADER_STRING = 256 * 1024 * 1024;
/**
 * Most array items the metadata of one file may hold in all (a tokenizer's tokens, scores and merges
 * come to a few hundred thousand): each becomes a JavaScript value and JSON text, several times its
 * bytes in the file.
 */
export const MAX_METADATA_ITEMS = 16 * 1024 * 1024;
/** Fewest bytes a key/value pair takes (8-byte length, 1-byte key, type, 1-byte value) and a tensor info (empty name, n_dims, type, offset). */
const MIN_KV_BYTES = 14;
const MIN_TENSOR_INFO_BYTES = 24;

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** A forward reader over a source, a window of bytes at a time. */
class Cursor {
  #window: Uint8Array = new Uint8Array(0);
  #view: DataView = new DataView(this.#window.buffer);
  #start = 0;
  pos = 0;
  littleEndian = true;
  /** Array items read so far (see {@link MAX_METADATA_ITEMS}). */
  items = 0;

  constructor(
    readonly source: ByteSource,
    readonly file: string | undefined,
  ) {}

  get remaining(): number {
    return this.source.size - this.pos;
  }

  /** Bytes from the position to the end of the window. */
  get buffered(): number {
    return this.#start + this.#window.byteLength - this.pos;
  }

  /** Makes the next `n` bytes readable, or refuses a file that ends before them. */
  async need(n: number, what: string): Promise<void> {
    if (this.pos + n <= this.#start + this.#window.byteLength) return;
    if (n > this.remaining) {
      throw fail("UnexpectedEof", `the file ends at byte ${this.source.size}, inside ${what} (byte ${this.pos} + ${n})`, this.file);
    }
    const length = Math.min(this.remaining, Math.max(n, WINDOW));
    const bytes = await this.source.read(this.pos, length);
    this.#window = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.#start = this.pos;
  }

  #at(n: number): number {
    const at = this.pos - this.#start;
    this.pos += n;
    return at;
  }
  u8(): number {
    return this.#view.getUint8(this.#at(1));
  }
  i8(): number {
    return this.#view.getInt8(this.#at(1));
  }
  u16(): number {
    return this.#view.getUint16(this.#at(2), this.littleEndian);
  }
  i16(): number {
    return this.#view.getInt16(this.#at(2), this.littleEndian);
  }
  u32(): number {
    return this.#view.getUint32(this.#at(4), this.littleEndian);
  }
  i32(): number {
    return this.#view.getInt32(this.#at(4), this.littleEndian);
  }
  u64(): bigint {
    return this.#view.getBigUint64(this.#at(8), this.littleEndian);
  }
  /** A u64 below 2^32 as a number, else undefined (the 8 bytes are consumed either way). */
  u64Small(): number | undefined {
    const at = this.#at(8);
    const low = this.#view.getUint32(this.littleEndian ? at : at + 4, this.littleEndian);
    const high = this.#view.getUint32(this.littleEndian ? at + 4 : at, this.littleEndian);
    return high === 0 ? low : undefined;
  }
  i64(): bigint {
    return this.#view.getBigInt64(this.#at(8), this.littleEndian);
  }
  f32bits(): number {
    return this.#view.getUint32(this.#at(4), this.littleEndian);
  }
  f32(): number {
    return this.#view.getFloat32(this.#at(4), this.littleEndian);
  }
  f64(): number {
    return this.#view.getFloat64(this.#at(8), this.littleEndian);
  }
  f64bits(): bigint {
    return this.#view.getBigUint64(this.#at(8), this.littleEndian);
  }
  bytes(n: number): Uint8Array {
    const at = this.#at(n);
    return this.#window.subarray(at, at + n);
  }
}

function fail(code: GgufErrorCode, rule: string, file: string | undefined, tensor?: string): StConvertError<GgufErrorCode> {
  return new StConvertError<GgufErrorCode>(code, rule, { file, tensor });
}

/**
 * Reads and checks the header of the GGUF file in `source`; tensor data is not read, only its
 * extent checked against the file's size.
 * @throws StConvertError with a {@link GgufErrorCode}.
 */
export async function parseGguf(source: ByteSource, file = source.name): Promise<GgufHeader> {
  const c = new Cursor(source, file);
  await c.need(4, "the magic");
  const magic = c.bytes(4);
  if (magic[0] !== 0x47 || magic[1] !== 0x47 || magic[2] !== 0x55 || magic[3] !== 0x46) {
    throw fail("BadMagic", `not a GGUF file: it starts with ${printable(magic)}, not "GGUF"`, file);
  }
  await c.need(4, "the version");
  let version = c.u32();
  if (version !== 0 && (version & 0xffff) === 0) {
    // Read as little-endian, a big-endian file's version is huge (3 → 0x03000000), as gguf-py tells them apart.
    c.littleEndian = false;
    version = ((version >>> 24) | ((version >>> 8) & 0xff00) | ((version << 8) & 0xff0000) | (version << 24)) >>> 0;
  }
  if (version === 1) throw fail("UnsupportedVersion", "GGUF version 1 (GGUFv1) is no longer supported by ggml; convert it with a current llama.cpp", file);
  if (version !== 2 && version !== 3) throw fail("UnsupportedVersion", `GGUF version ${version} is not one of 2 and 3`, file);
  await c.need(16, "the counts");
  const tensorCount = c.i64();
  const kvCount = c.i64();
  if (tensorCount < 0n || kvCount < 0n) throw fail("InvalidCount", `negative count (${tensorCount} tensors, ${kvCount} key/value pairs)`, file);
  // Each takes a few bytes at least: a count the rest of the file cannot hold is refused before any loop.
  if (kvCount * BigInt(MIN_KV_BYTES) + tensorCount * BigInt(MIN_TENSOR_INFO_BYTES) > BigInt(c.remaining)) {
    throw fail("InvalidCount", `${kvCount} key/value pairs and ${tensorCount} tensor infos cannot fit in the ${c.remaining} bytes left`, file);
  }

  const kvs: GgufKv[] = [];
  const keys = new Set<string>();
  for (let i = 0; i < Number(kvCount); i++) {
    const key = await readString(c, `key ${i}`);
    if (typeof key !== "string") throw fail("InvalidKey", `key ${i} is not UTF-8`, file);
    if (key === "") throw fail("InvalidKey", `key ${i} is empty`, file);
    if (keys.has(key)) throw fail("InvalidKey", `key ${quoteName(key)} appears twice`, file);
    keys.add(key);
    await c.need(4, `the type of key ${quoteName(key)}`);
    const type = c.u32();
    const name = VALUE_TYPES[type];
    if (name === undefined) throw fail("InvalidValueType", `key ${quoteName(key)} has value type ${type}, not one of GGUF's 13`, file);
    kvs.push({ key, ...(await readValue(c, name, key)) });
  }

  let alignment = DEFAULT_ALIGNMENT;
  const alignmentKv = kvs.find((kv) => kv.key === "general.alignment");
  if (alignmentKv !== undefined) {
    if (alignmentKv.type !== "UINT32") throw fail("InvalidAlignment", `general.alignment is ${alignmentKv.type}, not UINT32`, file);
    alignment = alignmentKv.value as number;
    if (alignment === 0 || (alignment & (alignment - 1)) !== 0) throw fail("InvalidAlignment", `general.alignment ${alignment} is not a power of two`, file);
  }

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < Number(tensorCount); i++) tensors.push(await readTensorInfo(c, i, names));

  let dataOffset = c.pos;
  if (tensors.length > 0) {
    dataOffset = pad(c.pos, alignment);
    if (dataOffset > source.size) throw fail("UnexpectedEof", `the data section would start at byte ${dataOffset}, past the end of the file`, file);
  }
  let dataSize = 0;
  for (const t of tensors) {
    if (t.offset !== dataSize) {
      throw fail(
        "InvalidOffset",
        `data at offset ${t.offset}, but the layout puts it at ${dataSize} (each tensor right after the previous one, padded to ${alignment})`,
        file,
        t.name,
      );
    }
    dataSize += pad(t.byteLength, alignment);
  }
  if (dataOffset + dataSize > source.size) {
    throw fail(
      "UnexpectedEof",
      `the data section needs bytes ${dataOffset}..${dataOffset + dataSize} (padding included), but the file holds ${source.size}`,
      file,
    );
  }
  return { version, littleEndian: c.littleEndian, kvs, tensors, alignment, dataOffset, dataSize };
}

/** `n` rounded up to a multiple of `alignment` (a power of two). */
export function pad(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

/** A string's bytes, decoded: a string, or `{hex}` when the bytes are not UTF-8. */
async function readString(c: Cursor, what: string): Promise<string | { hex: string }> {
  await c.need(8, what);
  const n = stringLength(c, what);
  await c.need(n, what);
  return decodeString(c.bytes(n));
}

/** A string's length field, checked (the 8 bytes are there). */
function stringLength(c: Cursor, what: string): number {
  // Below 2^32 and within the window (nearly every string): no BigInt.
  const small = c.u64Small();
  if (small !== undefined && small <= c.remaining && small <= MAX_HEADER_STRING) return small;
  c.pos -= 8;
  const length = c.u64();
  if (length > BigInt(MAX_STRING_LENGTH))
    throw fail("InvalidLength", `${what}: string of ${length} bytes, more than ggml reads (${MAX_STRING_LENGTH})`, c.file);
  if (length > BigInt(c.remaining)) throw fail("InvalidLength", `${what}: string of ${length} bytes, more than the ${c.remaining} left in the file`, c.file);
  if (length > BigInt(MAX_HEADER_STRING))
    throw fail("LimitExceeded", `${what}: string of ${length} bytes, more than st-convert holds (${MAX_HEADER_STRING})`, c.file);
  return Number(length);
}

/**
 * Strings while they lie whole in the cursor's window, read without a promise each (a tokenizer
 * has 150,000): how many of `out` from `from` on were filled.
 */
function readStringsInWindow(c: Cursor, out: unknown[], from: number, what: string): number {
  let i = from;
  while (i < out.length && c.buffered >= 8) {
    const start = c.pos;
    const n = stringLength(c, what);
    if (c.buffered < n) {
      c.pos = start;
      break;
    }
    out[i++] = decodeString(c.bytes(n));
  }
  return i - from;
}

/** UTF-8 text, or `{hex}` when the bytes are not UTF-8; short ASCII without the decoder. */
function decodeString(bytes: Uint8Array): string | { hex: string } {
  if (bytes.byteLength <= 24) {
    let text = "";
    let k = 0;
    for (; k < bytes.byteLength && bytes[k]! < 0x80; k++) text += String.fromCharCode(bytes[k]!);
    if (k === bytes.byteLength) return text;
  }
  try {
    return utf8.decode(bytes);
  } catch {
    return { hex: toHex(bytes) };
  }
}

function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/** A float as the metadata encoding spells it: a number, or the hex of its bits for -0, infinities and NaNs. */
function floatValue(value: number, bits: () => string): number | string {
  return Number.isFinite(value) && !Object.is(value, -0) ? value : bits();
}

/** One scalar of a fixed-size type (the bytes are there). */
function readScalar(c: Cursor, type: ValueTypeName): unknown {
  switch (type) {
    case "UINT8":
      return c.u8();
    case "INT8":
      return c.i8();
    case "UINT16":
      return c.u16();
    case "INT16":
      return c.i16();
    case "UINT32":
      return c.u32();
    case "INT32":
      return c.i32();
    case "FLOAT32": {
      const at = c.pos;
      const value = c.f32();
      return floatValue(value, () => {
        c.pos = at;
        return `0x${c.f32bits().toString(16).padStart(8, "0")}`;
      });
    }
    case "BOOL":
      // ggml reads a bool as a byte that is not 0.
      return c.u8() !== 0;
    case "UINT64":
      return c.u64().toString();
    case "INT64":
      return c.i64().toString();
    case "FLOAT64": {
      const at = c.pos;
      const value = c.f64();
      return floatValue(value, () => {
        c.pos = at;
        return `0x${c.f64bits().toString(16).padStart(16, "0")}`;
      });
    }
    default:
      throw new Error(`readScalar: ${type}`);
  }
}

/** `out.length` items of a fixed-size type (the bytes are in the window), the type's case chosen once. */
function readItems(c: Cursor, type: ValueTypeName, out: unknown[]): void {
  const n = out.length;
  switch (type) {
    case "UINT8":
      for (let i = 0; i < n; i++) out[i] = c.u8();
      return;
    case "INT32":
      for (let i = 0; i < n; i++) out[i] = c.i32();
      return;
    case "UINT32":
      for (let i = 0; i < n; i++) out[i] = c.u32();
      return;
    case "FLOAT32":
      for (let i = 0; i < n; i++) {
        const value = c.f32();
        // Only -0, infinities and NaNs take the slow way (the hex of their bits).
        if (Number.isFinite(value) && !Object.is(value, -0)) out[i] = value;
        else {
          c.pos -= 4;
          out[i] = readScalar(c, type);
        }
      }
      return;
    default:
      for (let i = 0; i < n; i++) out[i] = readScalar(c, type);
  }
}

async function readValue(c: Cursor, type: ValueTypeName, key: string): Promise<GgufValue> {
  const what = `the value of ${quoteName(key)}`;
  if (type === "STRING") return { type, value: await readString(c, what) };
  if (type !== "ARRAY") {
    await c.need(VALUE_TYPE_SIZE[VALUE_TYPES.indexOf(type)]!, what);
    return { type, value: readScalar(c, type) };
  }
  const { itemType, value } = await readArray(c, key, what);
  return { type, itemType, value };
}

async function readArray(c: Cursor, key: string, what: string): Promise<{ itemType: ValueTypeName; value: unknown[] }> {
  await c.need(12, what);
  const typeId = c.u32();
  const itemType = VALUE_TYPES[typeId];
  if (itemType === undefined) throw fail("InvalidValueType", `key ${quoteName(key)}: array of value type ${typeId}, not one of GGUF's 13`, c.file);
  const count = c.u64();
  if (count > BigInt(MAX_ARRAY_ELEMENTS))
    throw fail("InvalidLength", `key ${quoteName(key)}: array of ${count} elements, more than ggml reads (${MAX_ARRAY_ELEMENTS})`, c.file);
  const size = VALUE_TYPE_SIZE[typeId]!;
  // ggml's bound: each element takes its size, a string at least its 8-byte length (an array its 12-byte head).
  const least = size > 0 ? size : itemType === "STRING" ? 8 : 12;
  if (count * BigInt(least) > BigInt(c.remaining)) {
    throw fail("InvalidLength", `key ${quoteName(key)}: array of ${count} ${itemType} elements cannot fit in the ${c.remaining} bytes left`, c.file);
  }
  const n = Number(count);
  c.items += n;
  if (c.items > MAX_METADATA_ITEMS) {
    throw fail(
      "LimitExceeded",
      `key ${quoteName(key)}: the metadata's arrays hold more than ${MAX_METADATA_ITEMS} items in all, more than st-convert holds`,
      c.file,
    );
  }
  const value: unknown[] = new Array(n);
  if (size > 0) {
    // Fixed-size items: one window for all of them (at most the rest of the file, checked above).
    await c.need(n * size, what);
    readItems(c, itemType, value);
  } else if (itemType === "STRING") {
    for (let i = 0; i < n; ) {
      i += readStringsInWindow(c, value, i, what);
      if (i < n) value[i++] = await readString(c, what);
    }
  } else {
    for (let i = 0; i < n; i++) value[i] = await readArray(c, key, what);
  }
  return { itemType, value };
}

/** One tensor info, checked as ggml checks it. */
async function readTensorInfo(c: Cursor, i: number, names: Set<string>): Promise<GgufTensorInfo> {
  const raw = await readString(c, `the name of tensor ${i}`);
  if (typeof raw !== "string") throw fail("InvalidTensorName", `the name of tensor ${i} is not UTF-8 (0x${raw.hex})`, c.file);
  const bytes = new TextEncoder().encode(raw).byteLength;
  if (bytes >= MAX_NAME_BYTES) throw fail("InvalidTensorName", `name of ${bytes} bytes; ggml's limit is ${MAX_NAME_BYTES - 1}`, c.file, raw);
  // ggml keeps a name as a C string: up to its first NUL byte.
  const name = raw.split("\0")[0]!;
  if (names.has(name)) throw fail("InvalidTensorName", "name given to two tensors", c.file, name);
  names.add(name);
  await c.need(4, `the dimensions of tensor ${quoteName(name)}`);
  const dims = c.u32();
  if (dims > MAX_DIMS) throw fail("InvalidShape", `${dims} dimensions; ggml allows at most ${MAX_DIMS}`, c.file, name);
  await c.need(8 * dims + 12, `the info of tensor ${quoteName(name)}`);
  const ne: bigint[] = [];
  for (let j = 0; j < dims; j++) {
    const n = c.i64();
    if (n < 0n) throw fail("InvalidShape", `dimension ${j} (ggml order) is ${n}, negative`, c.file, name);
    ne.push(n);
  }
  const all = [...ne, 1n, 1n, 1n, 1n].slice(0, MAX_DIMS);
  const elements = all.reduce((a, b) => a * b, 1n);
  const I64_MAX = (1n << 63n) - 1n;
  if (elements > 0n && (I64_MAX / all[1]! <= all[0]! || I64_MAX / all[2]! <= all[0]! * all[1]! || I64_MAX / all[3]! <= all[0]! * all[1]! * all[2]!)) {
    throw fail("InvalidShape", `ne [${ne.join(", ")}] holds 2^63 elements or more`, c.file, name);
  }
  const type = c.i32();
  const info = type >= 0 && type < GGML_TYPE_COUNT ? ggmlTypeInfo(type) : undefined;
  if (info === undefined) throw fail("InvalidTensorType", `ggml type ${type} is not one ggml knows`, c.file, name);
  if (all[0]! % BigInt(info.blockSize) !== 0n) {
    throw fail("InvalidTensorType", `${info.name} rows of ${all[0]} elements are not whole blocks of ${info.blockSize}`, c.file, name);
  }
  const byteLength = (elements / BigInt(info.blockSize)) * BigInt(info.typeSize);
  // ggml's bound is 2^64 bytes; past 2^53 no file holds it either, and numbers stay exact below.
  if (byteLength > BigInt(Number.MAX_SAFE_INTEGER))
    throw fail("InvalidShape", `ne [${ne.join(", ")}] of ${info.name} takes ${byteLength} bytes, past any file`, c.file, name);
  const offset = c.u64();
  if (offset > BigInt(Number.MAX_SAFE_INTEGER)) throw fail("InvalidOffset", `data at offset ${offset}, past any file`, c.file, name);
  return { name, ne: ne.map(Number), type, offset: Number(offset), byteLength: Number(byteLength) };
}

function printable(bytes: Uint8Array): string {
  return JSON.stringify(String.fromCharCode(...bytes));
}
