/**
 * A tensor's elements as float64 numbers, in blocks: what `tensorStats()` and `diffTensors()`
 * compute on. Every float dtype converts exactly (core's casts to F64, bit-exact with torch); the
 * integers convert as numpy's `astype(float64)` does (I64/U64 past 2^53 round to the nearest double).
 */
import { DEFAULT_CHUNK_SIZE } from "./ByteSource.js";
import { castKernel, isFloatCastDtype } from "./castKernels.js";
import type { Dtype } from "./dtypes.js";
import { withContext } from "./StConvertError.js";
import { LITTLE_ENDIAN, swapBytesInPlace } from "./swapBytes.js";
import { type TensorEntry, exactChunks } from "./Tensor.js";

/**
 * Bytes of a block: large enough that a block's cost is its loop, small enough that the values
 * decoded from it (8 bytes each) stay in the CPU's cache.
 */
export const BLOCK_BYTES = 256 * 1024;

/**
 * Bytes of a block compared as bytes (exact diffs), read as chunks of this size, so that blocks
 * are the reader's chunks, uncopied: twice core's default, half the reads of a file.
 */
export const BYTE_BLOCK_BYTES = 2 * DEFAULT_CHUNK_SIZE;

/** Bytes per element of the dtypes whose values are read as numbers; undefined for the packed F4/F6 and complex C64. */
export function valueWidth(dtype: Dtype): number | undefined {
  switch (dtype) {
    case "BOOL":
    case "U8":
    case "I8":
    case "F8_E5M2":
    case "F8_E4M3":
    case "F8_E8M0":
    case "F8_E4M3FNUZ":
    case "F8_E5M2FNUZ":
      return 1;
    case "I16":
    case "U16":
    case "F16":
    case "BF16":
      return 2;
    case "I32":
    case "U32":
    case "F32":
      return 4;
    case "F64":
    case "I64":
    case "U64":
      return 8;
    default:
      return undefined;
  }
}

/** Whether a dtype's elements can be NaN or infinite. */
export function isFloatDtype(dtype: Dtype): boolean {
  return isFloatCastDtype(dtype);
}

/**
 * Reads `count` elements of `dtype` from `bytes` (little-endian, aligned to 8: a block's own
 * buffer) into `out` as float64.
 */
export type ValueDecoder = (bytes: Uint8Array, count: number, out: Float64Array) => void;

/** The decoder of a dtype, or undefined when its elements are not read as numbers (F4, F6, C64). */
export function valueDecoder(dtype: Dtype): ValueDecoder | undefined {
  const width = valueWidth(dtype);
  if (width === undefined) return undefined;
  const swap = (bytes: Uint8Array, count: number): void => {
    if (!LITTLE_ENDIAN && width > 1) swapBytesInPlace(bytes.subarray(0, count * width), width);
  };
  const viaView =
    <A extends ArrayLike<number | bigint>>(View: new (buffer: ArrayBufferLike, offset: number, length: number) => A): ValueDecoder =>
    (bytes, count, out) => {
      swap(bytes, count);
      const view = new View(bytes.buffer, bytes.byteOffset, count);
      for (let i = 0; i < count; i++) out[i] = Number(view[i]);
    };
  switch (dtype) {
    case "F64":
      return (bytes, count, out) => {
        swap(bytes, count);
        out.set(new Float64Array(bytes.buffer, bytes.byteOffset, count));
      };
    case "F32":
      return (bytes, count, out) => {
        swap(bytes, count);
        out.set(new Float32Array(bytes.buffer, bytes.byteOffset, count));
      };
    case "BOOL":
      // numpy reads any non-zero byte of a bool array as True.
      return (bytes, count, out) => {
        for (let i = 0; i < count; i++) out[i] = bytes[i] === 0 ? 0 : 1;
      };
    case "U8":
      return viaView(Uint8Array);
    case "I8":
      return viaView(Int8Array);
    case "U16":
      return viaView(Uint16Array);
    case "I16":
      return viaView(Int16Array);
    case "U32":
      return viaView(Uint32Array);
    case "I32":
      return viaView(Int32Array);
    case "U64":
      return viaView(BigUint64Array);
    case "I64":
      return viaView(BigInt64Array);
    default: {
      // F16, BF16 and the F8 family: core's casts, exact in F64.
      const cast = castKernel(dtype, "F64");
      return (bytes, count, out) => {
        swap(bytes, count);
        cast(bytes, new Uint8Array(out.buffer, out.byteOffset, count * 8), count);
      };
    }
  }
}

/**
 * A tensor's bytes in blocks of a fixed size (the last one shorter), each aligned to 8 bytes,
 * read-only and valid until the next call (the reader's chunk itself where a block lies whole in
 * it, else a copy in memory of this reader's own). One pass; exactly the tensor's
 * byte length or a `ByteLengthMismatch` error naming it.
 */
export class BlockReader {
  readonly #blockBytes: number;
  /** Made at the first block that must be copied. */
  #buffer: Uint8Array | undefined;
  readonly #iterator: AsyncIterator<Uint8Array>;
  #chunk: Uint8Array | undefined;
  #at = 0;
  #left: number;

  /** `blockBytes`: a multiple of the element size (and of 8, for alignment). */
  constructor(
    readonly entry: TensorEntry,
    blockBytes: number,
  ) {
    this.#blockBytes = Math.max(8, Math.min(blockBytes, roundUp8(entry.byteLength)));
    // reuse: each chunk is copied out before the one after it is asked for.
    // Chunks at least as large as a block, so that a block is a chunk of the reader's, uncopied.
    this.#iterator = exactChunks(entry, { reuse: true, chunkSize: Math.max(DEFAULT_CHUNK_SIZE, this.#blockBytes) })[Symbol.asyncIterator]();
    this.#left = entry.byteLength;
  }

  /** Bytes not yet delivered. */
  get left(): number {
    return this.#left;
  }

  /** The next block, or undefined after the last. */
  async next(): Promise<Uint8Array | undefined> {
    if (this.#left === 0) {
      await this.#drain();
      return undefined;
    }
    const size = Math.min(this.#blockBytes, this.#left);
    let filled = 0;
    try {
      if (this.#chunk === undefined || this.#at === this.#chunk.byteLength) {
        const next = await this.#iterator.next();
        if (next.done === true) throw new Error("unreachable: exactChunks ends early only by throwing");
        this.#chunk = next.value;
        this.#at = 0;
      }
      // A block that lies whole and aligned in the reader's chunk is handed on as it is, not copied:
      // with chunks asked for with reuse, it stays valid until the chunk after next is asked for,
      // that is past the caller's next call. (Not on a big-endian machine, where decoding swaps bytes in place.)
      const chunk = this.#chunk;
      if (LITTLE_ENDIAN && chunk.byteLength - this.#at >= size && (chunk.byteOffset + this.#at) % 8 === 0) {
        const block = chunk.subarray(this.#at, this.#at + size);
        this.#at += size;
        this.#left -= size;
        return block;
      }
      this.#buffer ??= new Uint8Array(this.#blockBytes);
      while (filled < size) {
        if (this.#chunk === undefined || this.#at === this.#chunk.byteLength) {
          const next = await this.#iterator.next();
          if (next.done === true) throw new Error("unreachable: exactChunks ends early only by throwing");
          this.#chunk = next.value;
          this.#at = 0;
        }
        const take = Math.min(size - filled, this.#chunk.byteLength - this.#at);
        this.#buffer.set(this.#chunk.subarray(this.#at, this.#at + take), filled);
        this.#at += take;
        filled += take;
      }
    } catch (error) {
      throw withContext(error, { tensor: this.entry.name });
    }
    this.#left -= size;
    return this.#buffer.subarray(0, size);
  }

  /** Ends the pass: lets exactChunks check the length (and the reader its own checks, a CRC) when the bytes are done. */
  async #drain(): Promise<void> {
    try {
      for (;;) {
        const next = await this.#iterator.next();
        if (next.done === true) return;
        if (next.value.byteLength > 0) throw new Error("unreachable: exactChunks refuses extra bytes");
      }
    } catch (error) {
      throw withContext(error, { tensor: this.entry.name });
    }
  }

  /** Stops a pass before its end. */
  async close(): Promise<void> {
    await this.#iterator.return?.();
  }
}

function roundUp8(n: number): number {
  return Math.ceil(n / 8) * 8;
}
