/**
 * A msgpack header scanner over a {@link ByteSource}: it reads one value header at a time from a
 * small window of the file and skips payloads by offset, so the structure of a file of any size is
 * walked in constant memory. It decodes only what the flax reader needs (keys, dtype names, ints,
 * floats); strings, bins and ext payloads are skipped or handed back as offsets.
 *
 * Parsing is synchronous over the window; only refilling it is asynchronous ({@link ensure},
 * {@link headerReady}), so a caller awaits only when the window runs out, not once per value
 * (a promise per header costs more than the header).
 *
 * Spec: https://github.com/msgpack/msgpack/blob/master/spec.md ("Formats"). Multi-byte numbers
 * are big-endian.
 */
import { type ByteSource, StConvertError } from "@st-convert/core";

/** What a header announced. Payload bytes (str, bin, ext) follow the header at `cursor.position`. */
export const Tag = {
  Nil: 0,
  Bool: 1,
  /** `int` is a number when exact, a bigint for 64-bit values past ±2^53. */
  Int: 2,
  Float: 3,
  Str: 4,
  Bin: 5,
  Ext: 6,
  Array: 7,
  Map: 8,
} as const;
/** One of the {@link Tag} values. */
export type Tag = (typeof Tag)[keyof typeof Tag];

/**
 * Bytes read from the source at a time while walking the structure. Large enough that a file of
 * many small arrays costs few reads; small enough to be negligible beside the 2 MiB copy buffers.
 */
const WINDOW_SIZE = 64 * 1024;

/** The longest header: a 0xcf/0xd3/0xcb tag and 8 bytes, or a 0xc9 tag, u32 and type. */
const MAX_HEADER = 9;

/** Strings up to this many bytes are decoded by hand when they are ASCII (faster than a TextDecoder call). */
const SHORT_STRING = 32;

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
/** One array of char codes per short length, reused (setting an array's length costs more than the decoding). */
const CODES = Array.from({ length: SHORT_STRING + 1 }, (_, n) => new Array<number>(n).fill(0));

/** The broken rule of a malformed file, coded with msgpack-python's word for it. */
function formatError(rule: string, file: string | undefined): StConvertError {
  return new StConvertError("FormatError", rule, { file });
}

/** Where the value being read must end, and the words for a count or length past it. */
interface Limit {
  readonly end: number;
  readonly code: string;
  readonly what: string;
}

/**
 * Reads msgpack headers sequentially from a source. After {@link nextSync}, the fields `tag`,
 * `length` (count of a map/array, byte length of a str/bin/ext payload), `extType`, `int`,
 * `float` and `bool` describe the value; for str/bin/ext the payload starts at {@link position}.
 */
export class MsgpackCursor {
  readonly source: ByteSource;
  /** Absolute offset of the next unread byte. */
  position = 0;
  tag: Tag = Tag.Nil;
  length = 0;
  extType = 0;
  int: number | bigint = 0;
  float = 0;
  bool = false;
  /** Offset where the last header began (for messages). */
  headerAt = 0;
  /**
   * Where the value being read must end: the source's size, or the end of an ext payload whose
   * inside is being read ({@link limit}); counts and lengths past it are refused.
   */
  #limit: Limit;

  #window: Uint8Array = new Uint8Array(0);
  #view: DataView = new DataView(new ArrayBuffer(0));
  /** File offset of `#window[0]`, and of the byte after its last (the position never leaves the window backwards). */
  #windowAt = 0;
  #windowEnd = 0;

  constructor(source: ByteSource) {
    this.source = source;
    this.#limit = { end: source.size, code: "UnexpectedEof", what: "the file" };
  }

  /**
   * From now until {@link unlimit}, the value being read is the inside of an ext payload that
   * ends at `end`: a count or length reaching past it is refused with `code` (the payload is
   * malformed, not the file truncated). Returns what {@link unlimit} restores.
   */
  limit(end: number, code: string): Limit {
    const saved = this.#limit;
    this.#limit = { end, code, what: "its ext payload" };
    return saved;
  }

  unlimit(saved: Limit): void {
    this.#limit = saved;
  }

  /** Bytes between the position and the end of the source. */
  get remaining(): number {
    return this.source.size - this.position;
  }

  /** Bytes from the position that the window holds. */
  #available(): number {
    return this.#windowEnd - this.position;
  }

  /**
   * Makes `n` bytes from the position available in the window: undefined when they already are,
   * else a promise that reads them.
   * @throws StConvertError `UnexpectedEof` (rejects) when the source ends first (the file is truncated).
   */
  ensure(n: number): Promise<void> | undefined {
    if (this.#available() >= n) return undefined;
    return this.#fill(n);
  }

  /** Makes the next header available: {@link ensure} of as many bytes as the longest header, or the rest of the file. */
  headerReady(): Promise<void> | undefined {
    return this.ensure(Math.min(MAX_HEADER, Math.max(1, this.remaining)));
  }

  async #fill(n: number): Promise<void> {
    if (this.remaining < n) throw this.#truncated(n);
    const length = Math.min(Math.max(n, WINDOW_SIZE), this.remaining);
    this.#window = await this.source.read(this.position, length);
    this.#windowAt = this.position;
    this.#windowEnd = this.position + this.#window.byteLength;
    this.#view = new DataView(this.#window.buffer, this.#window.byteOffset, this.#window.byteLength);
  }

  #truncated(n: number): StConvertError {
    return new StConvertError(
      "UnexpectedEof",
      `truncated: a value at byte ${this.headerAt} needs ${n} bytes from byte ${this.position}, but the file ends at byte ${this.source.size}`,
      { file: this.source.name },
    );
  }

  /** Checks that a header field of `n` bytes is in the window; it is unless the file ends first. */
  #field(n: number): void {
    if (this.position + n > this.#windowEnd) throw this.#truncated(n);
  }

  #u8(): number {
    return this.#window[this.position++ - this.#windowAt]!;
  }

  #u16(): number {
    const value = this.#view.getUint16(this.position - this.#windowAt);
    this.position += 2;
    return value;
  }

  #u32(): number {
    const value = this.#view.getUint32(this.position - this.#windowAt);
    this.position += 4;
    return value;
  }

  /** Reads the next header: {@link headerReady}, then {@link nextSync}. */
  async next(): Promise<Tag> {
    await this.headerReady();
    return this.nextSync();
  }

  /**
   * Reads the next header from the window, which must hold it ({@link headerReady}). Lengths and
   * counts are checked against the bytes left in the source (or the payload being read) before
   * anything else happens, so a declared size past the end is refused without allocating.
   * @throws StConvertError `UnexpectedEof` (truncated or a length past the end), `FormatError`
   *   (the reserved byte 0xc1).
   */
  nextSync(): Tag {
    this.headerAt = this.position;
    this.#field(1);
    const byte = this.#u8();
    if (byte <= 0x7f) return this.#setInt(byte);
    if (byte >= 0xe0) return this.#setInt(byte - 0x100);
    if (byte <= 0x8f) return this.#setCount(Tag.Map, byte & 0x0f);
    if (byte <= 0x9f) return this.#setCount(Tag.Array, byte & 0x0f);
    if (byte <= 0xbf) return this.#setPayload(Tag.Str, byte & 0x1f);
    switch (byte) {
      case 0xc0:
        this.tag = Tag.Nil;
        return Tag.Nil;
      case 0xc2:
      case 0xc3:
        this.tag = Tag.Bool;
        this.bool = byte === 0xc3;
        return Tag.Bool;
      case 0xc4:
      case 0xc5:
      case 0xc6:
        return this.#setPayload(Tag.Bin, this.#lengthField(byte - 0xc4));
      case 0xc7:
      case 0xc8:
      case 0xc9: {
        const length = this.#lengthField(byte - 0xc7);
        this.#field(1);
        this.extType = (this.#u8() << 24) >> 24;
        return this.#setPayload(Tag.Ext, length);
      }
      case 0xca:
      case 0xcb: {
        const width = byte === 0xca ? 4 : 8;
        this.#field(width);
        const at = this.position - this.#windowAt;
        this.float = width === 4 ? this.#view.getFloat32(at) : this.#view.getFloat64(at);
        this.position += width;
        this.tag = Tag.Float;
        return Tag.Float;
      }
      case 0xcc:
        this.#field(1);
        return this.#setInt(this.#u8());
      case 0xcd:
        this.#field(2);
        return this.#setInt(this.#u16());
      case 0xce:
        this.#field(4);
        return this.#setInt(this.#u32());
      case 0xcf:
        this.#field(8);
        return this.#setInt64(this.#view.getBigUint64(this.position - this.#windowAt));
      case 0xd0:
        this.#field(1);
        return this.#setInt((this.#u8() << 24) >> 24);
      case 0xd1:
        this.#field(2);
        return this.#setInt((this.#u16() << 16) >> 16);
      case 0xd2:
        this.#field(4);
        return this.#setInt(this.#u32() | 0);
      case 0xd3:
        this.#field(8);
        return this.#setInt64(this.#view.getBigInt64(this.position - this.#windowAt));
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        this.#field(1);
        this.extType = (this.#u8() << 24) >> 24;
        return this.#setPayload(Tag.Ext, 1 << (byte - 0xd4));
      case 0xd9:
      case 0xda:
      case 0xdb:
        return this.#setPayload(Tag.Str, this.#lengthField(byte - 0xd9));
      case 0xdc:
      case 0xdd:
        this.#field(byte === 0xdc ? 2 : 4);
        return this.#setCount(Tag.Array, byte === 0xdc ? this.#u16() : this.#u32());
      case 0xde:
      case 0xdf:
        this.#field(byte === 0xde ? 2 : 4);
        return this.#setCount(Tag.Map, byte === 0xde ? this.#u16() : this.#u32());
      default:
        throw formatError(`invalid msgpack: byte 0x${byte.toString(16)} at ${this.headerAt} is reserved and starts no value`, this.source.name);
    }
  }

  /** Reads a 1-, 2- or 4-byte length (`width` 0, 1, 2). */
  #lengthField(width: number): number {
    this.#field(1 << width);
    return width === 0 ? this.#u8() : width === 1 ? this.#u16() : this.#u32();
  }

  #setInt(value: number): Tag {
    this.tag = Tag.Int;
    this.int = value;
    return Tag.Int;
  }

  #setInt64(value: bigint): Tag {
    this.position += 8;
    this.tag = Tag.Int;
    this.int = value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(value) : value;
    return Tag.Int;
  }

  #setCount(tag: typeof Tag.Map | typeof Tag.Array, count: number): Tag {
    // Like msgpack-python's unpackb (max_map_len = len/2, max_array_len = len): every entry needs
    // at least one byte per key and value, so a count the rest of the file cannot hold is refused here.
    const needed = tag === Tag.Map ? 2 * count : count;
    const left = this.#limit.end - this.position;
    if (needed > left) {
      const { code, what } = this.#limit;
      throw new StConvertError(
        code,
        `${code === "UnexpectedEof" ? "truncated: " : ""}the ${tag === Tag.Map ? "map" : "array"} at byte ${this.headerAt} declares ${count} entries, but only ${Math.max(0, left)} bytes of ${what} follow`,
        { file: this.source.name },
      );
    }
    this.tag = tag;
    this.length = count;
    return tag;
  }

  #setPayload(tag: typeof Tag.Str | typeof Tag.Bin | typeof Tag.Ext, length: number): Tag {
    const left = this.#limit.end - this.position;
    if (length > left) {
      const { code, what: where } = this.#limit;
      const what = tag === Tag.Str ? "string" : tag === Tag.Bin ? "bin" : "ext";
      throw new StConvertError(
        code,
        `${code === "UnexpectedEof" ? "truncated: " : ""}the ${what} at byte ${this.headerAt} declares ${length} bytes, but only ${Math.max(0, left)} bytes of ${where} follow`,
        { file: this.source.name },
      );
    }
    this.tag = tag;
    this.length = length;
    return tag;
  }

  /** Moves past `n` payload bytes (already checked against the source's size by the header). */
  skip(n: number): void {
    this.position += n;
  }

  /** The `n`-byte UTF-8 payload at the position: {@link ensure}, then {@link stringSync}. */
  async string(n: number): Promise<string> {
    await this.ensure(n);
    return this.stringSync(n);
  }

  /**
   * Decodes the `n`-byte UTF-8 payload at the position (a key or a dtype name), which the window
   * must hold ({@link ensure}), and moves past it.
   * @throws StConvertError `FormatError` for invalid UTF-8 (msgpack-python raises UnicodeDecodeError).
   */
  stringSync(n: number): string {
    const at = this.position - this.#windowAt;
    const window = this.#window;
    this.position += n;
    if (n <= SHORT_STRING) {
      const codes = CODES[n]!;
      let ascii = true;
      for (let i = 0; i < n; i++) {
        const byte = window[at + i]!;
        if (byte >= 0x80) {
          ascii = false;
          break;
        }
        codes[i] = byte;
      }
      if (ascii) return String.fromCharCode.apply(null, codes);
    }
    try {
      return utf8.decode(window.subarray(at, at + n));
    } catch {
      throw formatError(`invalid UTF-8 in the string at byte ${this.headerAt}`, this.source.name);
    }
  }

  /**
   * Checks that the `n`-byte payload at the position is UTF-8, one window at a time, and moves
   * past it; with `keep`, returns the text (the caller bounds `n`), else an empty string.
   * @throws StConvertError `FormatError`.
   */
  async utf8(n: number, keep: boolean): Promise<string> {
    const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    const at = this.headerAt;
    const parts: string[] = [];
    try {
      let left = n;
      while (left > 0) {
        const step = Math.min(left, WINDOW_SIZE);
        await this.ensure(step);
        const from = this.position - this.#windowAt;
        const text = decoder.decode(this.#window.subarray(from, from + step), { stream: true });
        if (keep) parts.push(text);
        this.position += step;
        left -= step;
      }
      parts.push(decoder.decode());
    } catch (error) {
      if (error instanceof TypeError) throw formatError(`invalid UTF-8 in the string at byte ${at}`, this.source.name);
      throw error;
    }
    return keep ? parts.join("") : "";
  }

  /** A copy of the `n` payload bytes at the position (the caller bounds `n`); moves past them. */
  async bytes(n: number): Promise<Uint8Array> {
    return this.readInto(new Uint8Array(n));
  }

  /** Fills `out` with the payload bytes at the position, one window at a time, and moves past them. */
  async readInto(out: Uint8Array): Promise<Uint8Array> {
    const n = out.byteLength;
    for (let done = 0; done < n; ) {
      const step = Math.min(n - done, WINDOW_SIZE);
      await this.ensure(step);
      this.#copy(out, done, step);
      done += step;
    }
    return out;
  }

  /** {@link readInto} when the window holds all of `out` (true), else nothing is read (false). */
  readIntoSync(out: Uint8Array): boolean {
    if (this.#available() < out.byteLength) return false;
    this.#copy(out, 0, out.byteLength);
    return true;
  }

  #copy(out: Uint8Array, to: number, n: number): void {
    const from = this.position - this.#windowAt;
    const window = this.#window;
    if (n <= 16) for (let i = 0; i < n; i++) out[to + i] = window[from + i]!;
    else out.set(window.subarray(from, from + n), to);
    this.position += n;
  }
}
