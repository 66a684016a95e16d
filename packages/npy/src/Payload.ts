/**
 * The bytes of one npy file, wherever they live: a whole file, a stored zip member (random
 * access, CRC-checked) or a deflated one (forward only, inflated on the fly, CRC-checked).
 */
import { type ByteSource, type ReadRangeOptions, StConvertError, type TensorExtent, readRange } from "@st-convert/core";
import type { RangeReader } from "./fortranToC.js";

/** One npy file's bytes. Methods are called on the payload (implementations may be classes). */
export interface Payload {
  /** Bytes it holds (a file's size; a member's uncompressed size). */
  readonly size: number;
  /** The first `min(length, size)` bytes. */
  head(length: number): Promise<Uint8Array>;
  /** {@link head}, synchronously, where the bytes are in memory (a small zip member kept when the archive was opened). */
  readonly headSync?: ((length: number) => Uint8Array) | undefined;
  /**
   * Bytes `[offset, offset + length)` at once, integrity checked, where they are in memory (with
   * {@link headSync}). A view: copy before modifying.
   * @throws StConvertError `UnexpectedEof` past the end; a container's integrity error.
   */
  readonly bytesSync?: ((offset: number, length: number) => Uint8Array) | undefined;
  /**
   * Bytes `[offset, offset + length)`, in chunks of exactly `chunkSize` bytes but the last
   * (`ReadRangeOptions`; `reuse` is honoured where the bytes pass through unchanged). After the
   * last chunk, whatever remains is read too when the container has an integrity check (a member's
   * CRC and size), which is then verified. Chunks may be views of memory the payload owns: copy
   * before modifying.
   * @throws StConvertError `UnexpectedEof` past the end; a container's integrity error.
   */
  range(offset: number, length: number, options: ReadRangeOptions & { chunkSize: number }): AsyncGenerator<Uint8Array>;
  /** Random access when the container allows it (a file, a stored member); undefined for a deflated member. */
  readonly random: ((offset: number, length: number) => Promise<Uint8Array>) | undefined;
  /** Random access into a buffer, synchronously, where the source offers it (`ByteSource.readIntoSync`). */
  readonly randomIntoSync?: ((offset: number, target: Uint8Array) => void) | undefined;
  /** Verifies the container's integrity check over all the bytes (a full pass for a zip member; nothing for a file). */
  verify(): Promise<void>;
  /**
   * Where bytes `[offset, offset + length)` lie as they are in the underlying source (a file, a
   * stored member), for a copy that does not read them (`TensorEntry.extent`), with the check to
   * run alongside (the member's CRC); undefined where they must be inflated or are in memory.
   */
  readonly extent?: ((offset: number, length: number) => TensorExtent) | undefined;
}

/** A whole {@link ByteSource} as a payload (a plain `.npy` file): nothing to verify. */
export function sourcePayload(source: ByteSource): Payload {
  return {
    size: source.size,
    head: (length) => source.read(0, Math.min(length, source.size)),
    range: (offset, length, options) => readRange(source, offset, length, options),
    random: (offset, length) => source.read(offset, length),
    randomIntoSync: source.readIntoSync === undefined ? undefined : (offset, target) => source.readIntoSync!(offset, target),
    verify: async () => {},
    extent: (offset) => ({ source, offset }),
  };
}

/**
 * Bytes already in memory as a payload (a small `.npy` read whole): views, served synchronously
 * too ({@link Payload.headSync}, {@link Payload.bytesSync}); nothing to verify.
 */
export function memoryPayload(bytes: Uint8Array): Payload {
  const bytesSync = (offset: number, length: number): Uint8Array => {
    if (offset + length > bytes.byteLength) {
      throw new StConvertError("UnexpectedEof", `unexpected end of data: needs bytes ${offset}..${offset + length} but the source holds ${bytes.byteLength}`);
    }
    return bytes.subarray(offset, offset + length);
  };
  return {
    size: bytes.byteLength,
    head: async (length) => bytes.subarray(0, Math.min(length, bytes.byteLength)),
    headSync: (length) => bytes.subarray(0, Math.min(length, bytes.byteLength)),
    bytesSync,
    async *range(offset, length, { chunkSize }) {
      const all = bytesSync(offset, length);
      for (let at = 0; at < length; at += chunkSize) yield all.subarray(at, Math.min(at + chunkSize, length));
    },
    random: async (offset, length) => bytesSync(offset, length),
    randomIntoSync: (offset, target) => target.set(bytesSync(offset, target.byteLength)),
    verify: async () => {},
  };
}

/**
 * Reads of a forward-only payload as a {@link RangeReader}: each read continues the current pass
 * (skipping what lies between); a read before the current position starts a new pass from the
 * first byte. `finish()` runs the current pass to its end, so the payload verifies itself.
 */
export class StreamCursor implements RangeReader {
  readonly random = false;
  readonly #open: () => AsyncGenerator<Uint8Array>;
  #pass: AsyncGenerator<Uint8Array> | undefined;
  #chunk: Uint8Array = new Uint8Array(0);
  #chunkStart = 0;

  /** `open()` starts a pass: chunks from offset 0 of the range to read. */
  constructor(open: () => AsyncGenerator<Uint8Array>) {
    this.#open = open;
  }

  async read(offset: number, length: number): Promise<Uint8Array> {
    if (this.#pass === undefined || offset < this.#chunkStart) {
      await this.#pass?.return(undefined);
      this.#pass = this.#open();
      this.#chunk = new Uint8Array(0);
      this.#chunkStart = 0;
    }
    let out: Uint8Array | undefined;
    let filled = 0;
    while (filled < length) {
      const position = offset + filled;
      const chunkEnd = this.#chunkStart + this.#chunk.byteLength;
      if (position >= chunkEnd) {
        const next = await this.#pass.next();
        if (next.done === true) throw new StConvertError("UnexpectedEof", `the data ended at byte ${chunkEnd}, before byte ${offset + length}`);
        this.#chunkStart = chunkEnd;
        this.#chunk = next.value;
        continue;
      }
      const from = position - this.#chunkStart;
      const take = Math.min(length - filled, this.#chunk.byteLength - from);
      if (filled === 0 && take === length) return this.#chunk.subarray(from, from + take);
      out ??= new Uint8Array(length);
      out.set(this.#chunk.subarray(from, from + take), filled);
      filled += take;
    }
    return out ?? new Uint8Array(0);
  }

  /** Runs the current pass (or a new one) to its end. */
  async finish(): Promise<void> {
    this.#pass ??= this.#open();
    for (;;) if ((await this.#pass.next()).done === true) break;
    this.#pass = undefined;
  }

  /** Stops the current pass. */
  async close(): Promise<void> {
    await this.#pass?.return(undefined);
    this.#pass = undefined;
  }
}
