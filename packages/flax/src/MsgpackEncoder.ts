/**
 * The msgpack encodings msgpack-python's packer chooses (what flax writes through `msgpack.packb`
 * with `use_bin_type=True`): the smallest int, str, bin, map and array header that fits, and
 * fixext for ext payloads of exactly 1, 2, 4, 8 or 16 bytes. Structure bytes are gathered in a
 * small buffer and flushed to the sink before large payloads, which go to the sink as they are.
 *
 * Spec: https://github.com/msgpack/msgpack/blob/master/spec.md; msgpack-python `_packer.pyx`
 * (observed choices in `docs/formats.md` §3.3).
 */
import { type ByteSink, StConvertError, type TensorEntry, pipeTensor } from "@st-convert/core";

/** Structure bytes gathered before a write to the sink; payloads up to this size are copied in too. */
const BUFFER_SIZE = 64 * 1024;

const utf8 = new TextEncoder();

/** Writes msgpack values to a {@link ByteSink}. Call {@link flush} when done. */
export class MsgpackEncoder {
  readonly #sink: ByteSink;
  #buffer = new Uint8Array(BUFFER_SIZE);
  #view = new DataView(this.#buffer.buffer);
  #length = 0;

  constructor(sink: ByteSink) {
    this.#sink = sink;
  }

  /** Room for `n` more bytes in the buffer (it grows for a long key; it is flushed before a payload). */
  #reserve(n: number): number {
    if (this.#length + n > this.#buffer.byteLength) {
      const grown = new Uint8Array(Math.max(2 * this.#buffer.byteLength, this.#length + n));
      grown.set(this.#buffer.subarray(0, this.#length));
      this.#buffer = grown;
      this.#view = new DataView(grown.buffer);
    }
    const at = this.#length;
    this.#length += n;
    return at;
  }

  #byte(value: number): void {
    // Reserve first: it may replace the buffer, which must not be read before.
    const at = this.#reserve(1);
    this.#buffer[at] = value;
  }

  /** A tag followed by a big-endian 1-, 2-, 4- or 8-byte number. */
  #tagged(tag: number, width: 1 | 2 | 4 | 8, value: number): void {
    const at = this.#reserve(1 + width);
    this.#buffer[at] = tag;
    if (width === 1) this.#buffer[at + 1] = value;
    else if (width === 2) this.#view.setUint16(at + 1, value);
    else if (width === 4) this.#view.setUint32(at + 1, value);
    else this.#view.setBigUint64(at + 1, BigInt(value));
  }

  /** A non-negative integer: positive fixint, uint8, uint16, uint32 or uint64. */
  uint(value: number): void {
    if (value <= 0x7f) this.#byte(value);
    else if (value <= 0xff) this.#tagged(0xcc, 1, value);
    else if (value <= 0xffff) this.#tagged(0xcd, 2, value);
    else if (value <= 0xffffffff) this.#tagged(0xce, 4, value);
    else this.#tagged(0xcf, 8, value);
  }

  /** Any integer from -2^63 to 2^64 - 1, in msgpack-python's smallest form. */
  int(value: number | bigint): void {
    if (value >= 0) {
      if (typeof value === "number") this.uint(value);
      else if (value <= 0xffffffffn) this.uint(Number(value));
      else this.#tagged64(0xcf, value);
      return;
    }
    const n = Number(value);
    if (n >= -32) this.#byte(n & 0xff);
    else if (n >= -128) this.#tagged(0xd0, 1, n & 0xff);
    else if (n >= -32768) this.#tagged(0xd1, 2, n & 0xffff);
    else if (n >= -(2 ** 31)) this.#tagged(0xd2, 4, n >>> 0);
    else this.#tagged64(0xd3, BigInt.asUintN(64, BigInt(value)));
  }

  #tagged64(tag: number, value: bigint): void {
    const at = this.#reserve(9);
    this.#buffer[at] = tag;
    this.#view.setBigUint64(at + 1, BigInt.asUintN(64, value));
  }

  /** A float64 (0xcb, what msgpack-python writes for every float) from its 8 big-endian bytes. */
  float64(bits: Uint8Array): void {
    const at = this.#reserve(9);
    this.#buffer[at] = 0xcb;
    this.#buffer.set(bits, at + 1);
  }

  nil(): void {
    this.#byte(0xc0);
  }

  /** A bin with its bytes (small values; array bytes stream through {@link raw}). */
  bin(bytes: Uint8Array): void {
    this.binHeader(bytes.byteLength);
    const at = this.#reserve(bytes.byteLength);
    this.#buffer.set(bytes, at);
  }

  /** An ext value with its payload (small values). */
  ext(type: number, data: Uint8Array): void {
    this.extHeader(type, data.byteLength);
    const at = this.#reserve(data.byteLength);
    this.#buffer.set(data, at);
  }

  bool(value: boolean): void {
    this.#byte(value ? 0xc3 : 0xc2);
  }

  mapHeader(count: number): void {
    if (count <= 15) this.#byte(0x80 | count);
    else if (count <= 0xffff) this.#tagged(0xde, 2, count);
    else this.#tagged(0xdf, 4, count);
  }

  arrayHeader(count: number): void {
    if (count <= 15) this.#byte(0x90 | count);
    else if (count <= 0xffff) this.#tagged(0xdc, 2, count);
    else this.#tagged(0xdd, 4, count);
  }

  /** A UTF-8 string (the caller has checked it is well-formed: no lone surrogates). */
  str(text: string): void {
    const length = text.length;
    if (length <= 31) {
      // Short ASCII (keys, dtype names): written by hand, no encoder call.
      const at = this.#reserve(1 + length);
      const buffer = this.#buffer;
      let i = 0;
      for (; i < length; i++) {
        const code = text.charCodeAt(i);
        if (code >= 0x80) break;
        buffer[at + 1 + i] = code;
      }
      if (i === length) {
        buffer[at] = 0xa0 | length;
        return;
      }
      this.#length = at;
    }
    const bytes = utf8.encode(text);
    const n = bytes.byteLength;
    // str8 (0xd9) exists because flax packs with use_bin_type=True.
    if (n <= 31) this.#byte(0xa0 | n);
    else if (n <= 0xff) this.#tagged(0xd9, 1, n);
    else if (n <= 0xffff) this.#tagged(0xda, 2, n);
    else this.#tagged(0xdb, 4, n);
    const at = this.#reserve(n);
    this.#buffer.set(bytes, at);
  }

  binHeader(length: number): void {
    if (length <= 0xff) this.#tagged(0xc4, 1, length);
    else if (length <= 0xffff) this.#tagged(0xc5, 2, length);
    else this.#tagged(0xc6, 4, length);
  }

  /** An ext header for a payload of `length` bytes. */
  extHeader(type: number, length: number): void {
    const fixed = length === 1 ? 0xd4 : length === 2 ? 0xd5 : length === 4 ? 0xd6 : length === 8 ? 0xd7 : length === 16 ? 0xd8 : 0;
    if (fixed !== 0) this.#byte(fixed);
    else if (length <= 0xff) this.#tagged(0xc7, 1, length);
    else if (length <= 0xffff) this.#tagged(0xc8, 2, length);
    else if (length <= 0xffffffff) this.#tagged(0xc9, 4, length);
    else throw new StConvertError("Unsupported", `an ext payload of ${length} bytes is past msgpack's 2^32 - 1`);
    this.#byte(type & 0xff);
  }

  /**
   * The ext header and the payload's head for an array of `byteLength` bytes: flax's
   * `packb((shape, dtype.name, bytes), use_bin_type=True)` inside `ExtType(1, …)`, or
   * `ExtType(3, …)` for a numpy scalar. The caller writes the `byteLength` raw bytes next.
   */
  ndarrayHeader(shape: readonly number[], dtypeName: string, byteLength: number, type: 1 | 3 = 1): void {
    // The ext header's size depends on the head's: the head is written after room for the largest
    // ext header (ext32, 6 bytes), then moved down behind the header that fits.
    const start = this.#reserve(6);
    const headAt = this.#length;
    this.arrayHeader(3);
    this.arrayHeader(shape.length);
    for (const dim of shape) this.uint(dim);
    this.str(dtypeName);
    this.binHeader(byteLength);
    const headLength = this.#length - headAt;
    this.#length = start;
    this.extHeader(type, headLength + byteLength);
    this.#buffer.copyWithin(this.#length, headAt, headAt + headLength);
    this.#length += headLength;
  }

  /** Raw bytes (array data): copied into the buffer when small, else written straight to the sink. */
  async raw(bytes: Uint8Array): Promise<void> {
    if (this.#length + bytes.byteLength <= BUFFER_SIZE) {
      const at = this.#reserve(bytes.byteLength);
      this.#buffer.set(bytes, at);
      if (this.#length === BUFFER_SIZE) await this.flush();
      return;
    }
    await this.flush();
    await this.#sink.write(bytes);
  }

  /**
   * A tensor's bytes as raw bytes, after what the buffer holds: straight to the sink by
   * `pipeTensor`, which copies them in the kernel where the sink can (a large array from a file).
   */
  async pipe(tensor: TensorEntry, chunkSize: number): Promise<void> {
    await this.flush();
    await pipeTensor(tensor, this.#sink, chunkSize);
  }

  /** Flushes once the buffer holds {@link BUFFER_SIZE} bytes or more, so that structure never piles up. */
  async flushIfFull(): Promise<void> {
    if (this.#length >= BUFFER_SIZE) await this.flush();
  }

  /** Writes what the buffer holds to the sink. */
  async flush(): Promise<void> {
    if (this.#length === 0) return;
    // A copy is not needed: the sink keeps no reference after the write settles, and the
    // buffer is only reused after that.
    await this.#sink.write(this.#buffer.subarray(0, this.#length));
    this.#length = 0;
    if (this.#buffer.byteLength > BUFFER_SIZE) {
      this.#buffer = new Uint8Array(BUFFER_SIZE);
      this.#view = new DataView(this.#buffer.buffer);
    }
  }
}
