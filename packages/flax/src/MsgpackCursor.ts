/**
 * A msgpack header scanner over a {@link ByteSource}: it reads one value header at a time from a
 * small window of the file and skips payloads by offset, so the structure of a file of any size is
 * walked in constant memory. It decodes only what the flax reader needs (keys, dtype names, ints,
 * floats); strings, bins and ext payloads are skipped or handed back as offsets.
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

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The broken rule of a malformed file, coded with msgpack-python's word for it. */
function formatError(rule: string, file: string | undefined): StConvertError {
  return new StConvertError("FormatError", rule, { file });
}

/**
 * Reads msgpack headers sequentially from a source. After {@link next}, the fields `tag`, `length`
 * (count of a map/array, byte length of a str/bin/ext payload), `extType`, `int`, `float` and
 * `bool` describe the value; for str/bin/ext the payload starts at {@link position}.
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
   * inside is being read ({@link within}); counts and lengths past it are refused.
   */
  #end: number;
  #endRule: { code: string; what: string } = { code: "UnexpectedEof", what: "the file" };

  #window: Uint8Array = new Uint8Array(0);
  #view: DataView = new DataView(new ArrayBuffer(0));
  /** File offset of `#window[0]`. */
  #windowAt = 0;

  constructor(source: ByteSource) {
    this.source = source;
    this.#end = source.size;
  }

  /**
   * Reads the inside of an ext payload that ends at `end`: a count or length reaching past it is
   * refused with `code` (the payload is malformed, not the file truncated).
   */
  async within<T>(end: number, code: string, read: () => Promise<T>): Promise<T> {
    const [savedEnd, savedRule] = [this.#end, this.#endRule];
    this.#end = end;
    this.#endRule = { code, what: "its ext payload" };
    try {
      return await read();
    } finally {
      this.#end = savedEnd;
      this.#endRule = savedRule;
    }
  }

  /** Bytes between the position and the end of the source. */
  get remaining(): number {
    return this.source.size - this.position;
  }

  /**
   * Makes `n` bytes from the position available in the window.
   * @throws StConvertError `UnexpectedEof` when the source ends first (the file is truncated).
   */
  async #need(n: number): Promise<void> {
    const have = this.#windowAt + this.#window.byteLength - this.position;
    if (this.position >= this.#windowAt && have >= n) return;
    if (this.remaining < n) {
      throw new StConvertError(
        "UnexpectedEof",
        `truncated: a value at byte ${this.headerAt} needs ${n} bytes from byte ${this.position}, but the file ends at byte ${this.source.size}`,
        { file: this.source.name },
      );
    }
    const length = Math.min(Math.max(n, WINDOW_SIZE), this.remaining);
    this.#window = await this.source.read(this.position, length);
    this.#windowAt = this.position;
    this.#view = new DataView(this.#window.buffer, this.#window.byteOffset, this.#window.byteLength);
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

  /**
   * Reads the next header. Lengths and counts are checked against the bytes left in the source
   * before anything else happens, so a declared size past the end is refused without allocating.
   * @throws StConvertError `UnexpectedEof` (truncated or a length past the end), `FormatError`
   *   (the reserved byte 0xc1).
   */
  async next(): Promise<Tag> {
    this.headerAt = this.position;
    // Every header fits in 9 bytes (a 0xcf/0xd3/0xcb tag and 8 bytes, or a 0xc9 tag, u32 and type).
    if (this.#windowAt + this.#window.byteLength - this.position < 9 || this.position < this.#windowAt) {
      await this.#need(Math.min(9, Math.max(1, this.remaining)));
    }
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
        return this.#setPayload(Tag.Bin, await this.#lengthField(byte - 0xc4));
      case 0xc7:
      case 0xc8:
      case 0xc9: {
        const length = await this.#lengthField(byte - 0xc7);
        await this.#need(1);
        this.extType = (this.#u8() << 24) >> 24;
        return this.#setPayload(Tag.Ext, length);
      }
      case 0xca:
      case 0xcb: {
        const width = byte === 0xca ? 4 : 8;
        await this.#need(width);
        const at = this.position - this.#windowAt;
        this.float = width === 4 ? this.#view.getFloat32(at) : this.#view.getFloat64(at);
        this.position += width;
        this.tag = Tag.Float;
        return Tag.Float;
      }
      case 0xcc:
        await this.#need(1);
        return this.#setInt(this.#u8());
      case 0xcd:
        await this.#need(2);
        return this.#setInt(this.#u16());
      case 0xce:
        await this.#need(4);
        return this.#setInt(this.#u32());
      case 0xcf:
        await this.#need(8);
        return this.#setInt64(this.#view.getBigUint64(this.position - this.#windowAt));
      case 0xd0:
        await this.#need(1);
        return this.#setInt((this.#u8() << 24) >> 24);
      case 0xd1:
        await this.#need(2);
        return this.#setInt((this.#u16() << 16) >> 16);
      case 0xd2:
        await this.#need(4);
        return this.#setInt(this.#u32() | 0);
      case 0xd3:
        await this.#need(8);
        return this.#setInt64(this.#view.getBigInt64(this.position - this.#windowAt));
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        await this.#need(1);
        this.extType = (this.#u8() << 24) >> 24;
        return this.#setPayload(Tag.Ext, 1 << (byte - 0xd4));
      case 0xd9:
      case 0xda:
      case 0xdb:
        return this.#setPayload(Tag.Str, await this.#lengthField(byte - 0xd9));
      case 0xdc:
      case 0xdd:
        await this.#need(byte === 0xdc ? 2 : 4);
        return this.#setCount(Tag.Array, byte === 0xdc ? this.#u16() : this.#u32());
      case 0xde:
      case 0xdf:
        await this.#need(byte === 0xde ? 2 : 4);
        return this.#setCount(Tag.Map, byte === 0xde ? this.#u16() : this.#u32());
      default:
        throw formatError(`invalid msgpack: byte 0x${byte.toString(16)} at ${this.headerAt} is reserved and starts no value`, this.source.name);
    }
  }

  /** Reads a 1-, 2- or 4-byte length (`width` 0, 1, 2). */
  async #lengthField(width: number): Promise<number> {
    await this.#need(1 << width);
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
    const left = this.#end - this.position;
    if (needed > left) {
      throw new StConvertError(
        this.#endRule.code,
        `${this.#endRule.code === "UnexpectedEof" ? "truncated: " : ""}the ${tag === Tag.Map ? "map" : "array"} at byte ${this.headerAt} declares ${count} entries, but only ${Math.max(0, left)} bytes of ${this.#endRule.what} follow`,
        { file: this.source.name },
      );
    }
    this.tag = tag;
    this.length = count;
    return tag;
  }

  #setPayload(tag: typeof Tag.Str | typeof Tag.Bin | typeof Tag.Ext, length: number): Tag {
    const left = this.#end - this.position;
    if (length > left) {
      const what = tag === Tag.Str ? "string" : tag === Tag.Bin ? "bin" : "ext";
      throw new StConvertError(
        this.#endRule.code,
        `${this.#endRule.code === "UnexpectedEof" ? "truncated: " : ""}the ${what} at byte ${this.headerAt} declares ${length} bytes, but only ${Math.max(0, left)} bytes of ${this.#endRule.what} follow`,
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

  /**
   * Decodes the `n`-byte UTF-8 payload at the position (a key or a dtype name) and moves past it.
   * @throws StConvertError `FormatError` for invalid UTF-8 (msgpack-python raises UnicodeDecodeError).
   */
  async string(n: number): Promise<string> {
    await this.#need(n);
    const at = this.position - this.#windowAt;
    this.position += n;
    try {
      return utf8.decode(this.#window.subarray(at, at + n));
    } catch {
      throw formatError(`invalid UTF-8 in the string at byte ${this.headerAt}`, this.source.name);
    }
  }

  /**
   * Checks that the `n`-byte payload at the position is UTF-8 without keeping it, one window at a
   * time, and moves past it.
   * @throws StConvertError `FormatError`.
   */
  async checkUtf8(n: number): Promise<void> {
    const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    const at = this.headerAt;
    try {
      let left = n;
      while (left > 0) {
        const step = Math.min(left, WINDOW_SIZE);
        await this.#need(step);
        const from = this.position - this.#windowAt;
        decoder.decode(this.#window.subarray(from, from + step), { stream: true });
        this.position += step;
        left -= step;
      }
      decoder.decode();
    } catch (error) {
      if (error instanceof TypeError) throw formatError(`invalid UTF-8 in the string at byte ${at}`, this.source.name);
      throw error;
    }
  }
}
