/**
 * Bytes in and out. Readers and writers see only these two interfaces, so they run wherever a
 * `Uint8Array`, a `Blob` or a file descriptor can serve ranges (the Node file implementations
 * live in the `@st-convert/core/node` entry point).
 */
import { StConvertError } from "./StConvertError.js";

/** Random-access bytes: a file, an in-memory array, a Blob, later an HTTP resource. */
export interface ByteSource {
  /** Total length in bytes. */
  readonly size: number;
  /** A label for messages, such as the file path. */
  readonly name?: string;
  /**
   * Exactly `length` bytes from `offset`. The result may be a view of memory the source owns
   * (do not write to it) but stays valid after later reads.
   * @throws StConvertError `UnexpectedEof` when the range ends past `size`.
   */
  read(offset: number, length: number): Promise<Uint8Array>;
  /**
   * Fills `target` with the bytes from `offset` (optional: sources whose `read` already costs no
   * copy, such as in-memory ones, leave it out). Lets a streaming copy reuse its buffers.
   * @throws StConvertError `UnexpectedEof` when the range ends past `size`.
   */
  readInto?(offset: number, target: Uint8Array): Promise<void>;
  /**
   * `readInto`, synchronously (optional: only where a synchronous read is cheap and safe, such as
   * a local file). Gathers of many small ranges (a Fortran-order transpose) use it to avoid the
   * per-call cost of asynchronous I/O, which dwarfs a 4 KiB copy.
   * @throws StConvertError `UnexpectedEof` when the range ends past `size`.
   */
  readIntoSync?(offset: number, target: Uint8Array): void;
}

/** Sequential output. A writer calls `write`; whoever opened the sink calls `close` or `abort`. */
export interface ByteSink {
  /** A label for messages, such as the target path. */
  readonly name?: string;
  /** Appends `chunk`. The sink does not keep a reference after the promise settles. */
  write(chunk: Uint8Array): Promise<void>;
  /**
   * Overwrites bytes the sink has already been given, `position` bytes from its first (a zip
   * writer fills in a member's CRC-32 after its data, as CPython's zipfile does on a seekable
   * file). Only on sinks that can seek: a file sink's temporary file, memory; not a pipe.
   */
  patch?(position: number, bytes: Uint8Array): Promise<void>;
  /**
   * Appends `length` bytes of `source` from `offset` without them passing through this process
   * (a file sink and a local file, under Node on Linux with the native module: `copy_file_range`),
   * or returns undefined at once, having written nothing, where this sink cannot do that for this
   * source: the caller then copies through memory. Optional.
   * @throws StConvertError `UnexpectedEof` when the source ends early, `Io` when the copy fails.
   */
  copyFrom?(source: ByteSource, offset: number, length: number): Promise<void> | undefined;
  /**
   * {@link copyFrom} that also takes the CRC-32 of the bytes it copies, continued from `previous`,
   * as it reads them (the native module's buffered copy), so that a check of those bytes needs no
   * read of its own; resolves to the CRC. Undefined at once, having written nothing, where this
   * sink cannot (the caller then copies as it would otherwise). Optional.
   * @throws StConvertError as {@link copyFrom} does.
   */
  copyFromCrc32?(source: ByteSource, offset: number, length: number, previous: number): Promise<number> | undefined;
  /**
   * Where {@link copyFrom} cannot (no native module, another file system): appends `length` bytes
   * of a local regular file from `offset` through memory, read ahead on the thread pool and written
   * by synchronous writes (a file sink, under Node: fewer trips through the pool than reading the
   * bytes as chunks and writing them); else undefined at once, having written nothing. For bytes
   * that need no check of their own, which would read them a second time. Optional.
   * @throws StConvertError as {@link copyFrom} does.
   */
  copyFromFile?(source: ByteSource, offset: number, length: number): Promise<void> | undefined;
  /** Everything was written: make it visible (a file sink renames its temporary file into place). */
  close(): Promise<void>;
  /** Something failed: leave nothing behind. Safe to call more than once, and after `close` failed. */
  abort(): Promise<void>;
}

/**
 * The promise a sink's `write()` returns for a chunk it took at once (copied into a buffer): settled
 * already, so a caller that sees it has nothing to wait for and no failure to watch (a write of
 * 50,000 tiny tensors waited 50,000 times for nothing).
 */
export const WRITTEN: Promise<void> = Promise.resolve();

/**
 * Room for bytes that must be read back out of order (a temporary file under Node: core/node's
 * `createScratchFile`). Written once from the start, then read at random; gone after `dispose()`.
 */
export interface ScratchSpace {
  /** A label for messages, such as the file path. */
  readonly name?: string;
  /** Appends `chunk`. */
  write(chunk: Uint8Array): Promise<void>;
  /** The bytes written so far, for random access. Valid until `dispose()`. */
  source(): ByteSource;
  /** Releases the space and its bytes. Safe to call more than once. */
  dispose(): Promise<void>;
}

/** Makes a {@link ScratchSpace}; what readers take so that they can work on any runtime. */
export type ScratchFactory = () => Promise<ScratchSpace>;

/**
 * Chunk size for streaming copies: large enough that per-call overhead vanishes (64 KiB chunks copy
 * at a fifth of `cp` speed, 1 MiB ones cost a little more user time), small enough to stay clear
 * of what larger writes trigger in the kernel. Measured on Node 20, Linux 6.18 (ext4, a VM), 1 GiB
 * to safetensors, medians of 9–11 runs: 2 MiB chunks took 1.10–1.37× `cp` on every path, 4 MiB
 * ones 2.0–2.3×, most runs spending 2–3× the system time in page-cache writes (docs/benchmarks.md).
 */
export const DEFAULT_CHUNK_SIZE = 2 * 1024 * 1024;

/** Checks a requested range against a source's size. */
export function checkRange(source: Pick<ByteSource, "size" | "name">, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
    throw new StConvertError("InvalidArgument", `invalid byte range: offset ${offset}, length ${length}`, {
      file: source.name,
    });
  }
  if (offset + length > source.size) {
    throw new StConvertError("UnexpectedEof", `unexpected end of data: needs bytes ${offset}..${offset + length} but the source holds ${source.size}`, {
      file: source.name,
    });
  }
}

/** A source over bytes already in memory; reads are zero-copy views. */
export function bytesSource(bytes: Uint8Array | ArrayBuffer, name?: string): ByteSource {
  const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const source = {
    size: view.byteLength,
    name,
    async read(offset: number, length: number): Promise<Uint8Array> {
      checkRange(source, offset, length);
      return view.subarray(offset, offset + length);
    },
  };
  return source;
}

/** A source over a `Blob` or `File` (browsers, `fetch` responses, Node's `Blob`). */
export function blobSource(blob: Blob, name?: string): ByteSource {
  const source = {
    size: blob.size,
    name,
    async read(offset: number, length: number): Promise<Uint8Array> {
      checkRange(source, offset, length);
      const bytes = new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
      if (bytes.byteLength !== length) {
        throw new StConvertError("UnexpectedEof", `blob returned ${bytes.byteLength} of ${length} bytes`, { file: name });
      }
      return bytes;
    },
  };
  return source;
}

/** Anything the entry points accept as input: the one byte gate. */
export type ByteInput = Uint8Array | ArrayBuffer | ByteSource;

/** Normalizes a {@link ByteInput} to a {@link ByteSource}. */
export function toByteSource(input: ByteInput, name?: string): ByteSource {
  if (input instanceof Uint8Array || input instanceof ArrayBuffer) return bytesSource(input, name);
  return input;
}

/** How a range is read by {@link readRange}. */
export interface ReadRangeOptions {
  /** Largest chunk, in bytes. Default {@link DEFAULT_CHUNK_SIZE}. */
  chunkSize?: number;
  /**
   * The consumer is done with each chunk by the time it asks for the chunk two after it (as
   * `pipeTensor` is: it writes a chunk before asking for the one after next), so chunks may share
   * a ring of three buffers filled with `readInto`. Saves the kernel from zeroing fresh pages for
   * every chunk: about a third of the system time of a large copy. Default false: every chunk is
   * fresh memory that stays valid.
   */
  reuse?: boolean;
  /**
   * With `reuse`, the ring's buffers are SharedArrayBuffers (where the runtime has them), which a
   * worker thread reads without a copy (the CRC thread of a stored zip member). Default false.
   */
  shared?: boolean;
}

/**
 * Reads `[offset, offset + length)` of a source in chunks of at most `chunkSize` bytes, the next
 * chunk's read in flight while the consumer works on the current one, so that reading overlaps
 * writing or computing. Nothing is read before the consumer asks for the first chunk.
 * @throws StConvertError `UnexpectedEof` (and what the source throws).
 */
export async function* readRange(source: ByteSource, offset: number, length: number, options: ReadRangeOptions = {}): AsyncGenerator<Uint8Array> {
  checkRange(source, offset, length);
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  const end = offset + length;
  const shared = options.shared === true && typeof SharedArrayBuffer !== "undefined";
  const ring =
    options.reuse === true && source.readInto !== undefined && length > chunkSize
      ? [0, 1, 2].map(() => new Uint8Array(shared ? new SharedArrayBuffer(chunkSize) : new ArrayBuffer(chunkSize)))
      : undefined;
  let index = 0;
  const read = async (at: number): Promise<Uint8Array> => {
    const size = Math.min(chunkSize, end - at);
    if (ring === undefined) return source.read(at, size);
    const target = ring[index++ % ring.length]!.subarray(0, size);
    await source.readInto!(at, target);
    return target;
  };
  let next = offset < end ? read(offset) : undefined;
  try {
    for (let at = offset; at < end; at += chunkSize) {
      const chunk = await next!;
      next = at + chunkSize < end ? read(at + chunkSize) : undefined;
      // Marked handled now: a failing read-ahead is reported when awaited, not as an unhandled rejection.
      next?.catch(() => {});
      yield chunk;
    }
  } finally {
    // A read still in flight when the consumer stops is awaited, so none outlives the generator.
    await next?.catch(() => {});
  }
}

/** Options of {@link readAheadSource}. */
export interface ReadAheadOptions {
  /** Reads up to this many bytes are served from a window. Default {@link SMALL_READ}. */
  smallRead?: number;
  /** Largest window. Default {@link MAX_READ_AHEAD}. */
  maxReadAhead?: number;
}

/** Default `smallRead`: a small tensor's bytes or text. */
export const SMALL_READ = 64 * 1024;
/** Default `maxReadAhead`: the most memory one window holds. */
export const MAX_READ_AHEAD = 1024 * 1024;

/**
 * A source whose small reads come from a window read ahead of them: while reads move forward
 * through the source (as a writer pulls 50,000 small tensors in file order), one read of up to
 * `maxReadAhead` bytes serves many of them, where each would otherwise pay an asynchronous read
 * (tens of µs). The window doubles with every forward step and starts again from the bytes asked
 * for when a read jumps back or far ahead, so random access reads no more than it asks for.
 * Larger reads pass through. Windows are never written again: the views handed out stay valid.
 */
export function readAheadSource(source: ByteSource, options: ReadAheadOptions = {}): ByteSource {
  const small = options.smallRead ?? SMALL_READ;
  const max = Math.max(small, options.maxReadAhead ?? MAX_READ_AHEAD);
  let windowStart = 0;
  let window: Uint8Array | undefined;
  let ahead = 0;
  const wrapped: ByteSource = {
    size: source.size,
    name: source.name,
    async read(offset: number, length: number): Promise<Uint8Array> {
      checkRange(wrapped, offset, length);
      if (length > small) return source.read(offset, length);
      if (window !== undefined && offset >= windowStart && offset + length <= windowStart + window.byteLength) {
        return window.subarray(offset - windowStart, offset - windowStart + length);
      }
      const forward = window !== undefined && offset >= windowStart && offset <= windowStart + window.byteLength + small;
      ahead = forward ? Math.min(max, Math.max(2 * ahead, 2 * length)) : length;
      const bytes = await source.read(offset, Math.min(source.size - offset, Math.max(length, ahead)));
      windowStart = offset;
      window = bytes;
      return bytes.subarray(0, length);
    },
  };
  return wrapped;
}

/**
 * A sink that writes into `out` from its first byte on, for outputs whose size is known before
 * writing (no copy beyond the one into `out`).
 * @throws StConvertError `ByteLengthMismatch` on a write past the end of `out`.
 */
export function arraySink(out: Uint8Array): ByteSink {
  let at = 0;
  return {
    write(chunk) {
      if (at + chunk.byteLength > out.byteLength) {
        return Promise.reject(new StConvertError("ByteLengthMismatch", `write past the ${out.byteLength} bytes of the output`));
      }
      out.set(chunk, at);
      at += chunk.byteLength;
      return WRITTEN;
    },
    async close() {},
    async abort() {},
  };
}

/**
 * A sink that keeps everything in memory; for tests, small files and browsers.
 * `bytes()` concatenates what was written (at most 4 GiB, a Node `Buffer` limit).
 */
export class MemorySink implements ByteSink {
  readonly name: string | undefined;
  #chunks: Uint8Array[] = [];
  #length = 0;
  #state: "open" | "closed" | "aborted" = "open";

  constructor(name?: string) {
    this.name = name;
  }

  async write(chunk: Uint8Array): Promise<void> {
    if (this.#state !== "open") throw new StConvertError("Io", `write to a ${this.#state} sink`, { file: this.name });
    // A copy, because the caller may reuse its buffer once the promise settles. Not `chunk.slice()`:
    // on a Node Buffer that is a view of the same memory.
    this.#chunks.push(new Uint8Array(chunk));
    this.#length += chunk.byteLength;
  }

  async close(): Promise<void> {
    if (this.#state === "aborted") throw new StConvertError("Io", "close of an aborted sink", { file: this.name });
    this.#state = "closed";
  }

  async abort(): Promise<void> {
    this.#state = "aborted";
    this.#chunks = [];
    this.#length = 0;
  }

  /** Bytes written so far. */
  get length(): number {
    return this.#length;
  }

  /** A copy of everything written, as one array. */
  bytes(): Uint8Array {
    const out = new Uint8Array(this.#length);
    let at = 0;
    for (const chunk of this.#chunks) {
      out.set(chunk, at);
      at += chunk.byteLength;
    }
    return out;
  }
}
