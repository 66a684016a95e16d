/**
 * Raw DEFLATE and CRC-32, through `node:zlib` when it is there (Node: 2–3× faster than fflate to
 * inflate, more to deflate) and through fflate elsewhere (browsers). This file is the only place
 * that knows which one runs. Both are imported dynamically: bundles for browsers never need
 * `node:zlib`, and Node never loads fflate (about 5 ms of start-up on every conversion).
 */
import type * as NodeZlib from "node:zlib";
import { StConvertError, kernels } from "@st-convert/core";

/** Inflate, deflate and CRC-32 behind one interface. */
export interface Codec {
  /** `"node:zlib"` or `"fflate"`. */
  readonly name: string;
  /** CRC-32 (ISO-HDLC, as zip uses it) of `data`, continuing from `previous` (default 0). */
  crc32(data: Uint8Array, previous?: number): number;
  /**
   * Inflates a raw DEFLATE stream (no zlib or gzip wrapper), pulling input only as output is
   * consumed, so that memory stays bounded whatever the compression ratio.
   * @throws StConvertError `BadZipFile` when the stream is invalid or ends early.
   */
  inflateRaw(input: AsyncIterable<Uint8Array>, options?: InflateOptions): AsyncGenerator<Uint8Array>;
  /**
   * Inflates a whole raw DEFLATE stream at once, for small members held in memory: the output, or
   * undefined as soon as it passes `maxOutput` bytes (so a bomb costs at most about that much).
   * Optional: absent, callers use {@link inflateRaw}.
   * @throws StConvertError `BadZipFile` when the stream is invalid or ends early.
   */
  inflateRawSync?(input: Uint8Array, maxOutput: number): Uint8Array | undefined;
  /** Deflates to a raw DEFLATE stream at zlib `level` (6 is zlib's default, what `np.savez_compressed` uses). */
  deflateRaw(input: AsyncIterable<Uint8Array>, level: number): AsyncGenerator<Uint8Array>;
}

/** Options of {@link Codec.inflateRaw}. */
export interface InflateOptions {
  /** Size of the output buffers where the codec has them (`node:zlib`). Default 1 MiB. */
  chunkSize?: number;
}

/** Output buffer of `node:zlib` streams: large, so per-chunk overhead vanishes. */
const ZLIB_CHUNK = 1024 * 1024;

/**
 * Input fed to fflate per call. fflate inflates all it is given at once, and DEFLATE expands at
 * most 1032:1, so 16 KiB of input bounds one call's output to about 16 MiB.
 */
const FFLATE_PIECE = 16 * 1024;

let nodeCodec: Promise<Codec | undefined> | undefined;

/**
 * The fastest codec this runtime offers: `node:zlib` under Node, fflate elsewhere.
 * Pass `"fflate"` to force the portable one (tests use it to exercise the browser path).
 */
export async function loadCodec(prefer?: "fflate"): Promise<Codec> {
  if (prefer === "fflate") return loadFflateCodec();
  nodeCodec ??= importNodeZlib().then((zlib) => (zlib === undefined ? undefined : makeNodeCodec(zlib)));
  return (await nodeCodec) ?? loadFflateCodec();
}

let fflateCodec: Promise<Codec> | undefined;

function loadFflateCodec(): Promise<Codec> {
  fflateCodec ??= import("fflate").then(({ Deflate, Inflate }) => makeFflateCodec(Deflate, Inflate));
  return fflateCodec;
}

async function importNodeZlib(): Promise<typeof NodeZlib | undefined> {
  const versions = (globalThis as { process?: { versions?: { node?: string } } }).process?.versions;
  if (versions?.node === undefined) return undefined;
  try {
    // Not import(): bundlers keep an import of a node: module in a browser bundle, even through a constant (rolldown folds it into a literal).
    return (globalThis as { process?: { getBuiltinModule?(id: string): unknown } }).process?.getBuiltinModule?.("node:zlib") as typeof NodeZlib | undefined;
  } catch {
    return undefined;
  }
}

function makeNodeCodec(zlib: typeof NodeZlib): Codec {
  // zlib's crc32 returns 0, not `previous`, for an empty buffer without a backing store.
  const zlibCrc32 =
    typeof zlib.crc32 === "function" ? (data: Uint8Array, previous = 0) => (data.byteLength === 0 ? previous : zlib.crc32(data, previous)) : tableCrc32;
  // The native module's, where core/node installed it (about 3× zlib's); looked up per call, since
  // it may be installed after this codec is made.
  const crc32 = (data: Uint8Array, previous = 0): number => (kernels.crc32 ?? zlibCrc32)(data, previous);
  return {
    name: "node:zlib",
    crc32,
    inflateRaw: (input, options = {}) => throughNodeStream(zlib.createInflateRaw({ chunkSize: options.chunkSize ?? ZLIB_CHUNK }), input),
    inflateRawSync(input, maxOutput) {
      if (input.byteLength === 0) throw new StConvertError("BadZipFile", "invalid DEFLATE data: unexpected end of file (no data)");
      try {
        // One byte past the limit tells an exact fit from a bomb.
        const out = zlib.inflateRawSync(input, { maxOutputLength: maxOutput + 1 });
        // A plain Uint8Array (slice() copies), over the Buffer's memory.
        return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
      } catch (error) {
        if ((error as { code?: string }).code === "ERR_BUFFER_TOO_LARGE") return undefined;
        throw new StConvertError("BadZipFile", `invalid DEFLATE data: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
      }
    },
    deflateRaw: (input, level) => throughNodeStream(zlib.createDeflateRaw({ chunkSize: ZLIB_CHUNK, level, memLevel: 8, windowBits: 15 }), input),
  };
}

/**
 * Pushes `input` through a zlib stream and yields its output. Input is written only while the
 * stream accepts it (backpressure), and output is pulled by the consumer, so neither side grows.
 */
async function* throughNodeStream(stream: NodeZlib.InflateRaw | NodeZlib.DeflateRaw, input: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  let inputError: { error: unknown } | undefined;
  const pump = (async () => {
    try {
      for await (const chunk of input) {
        if (stream.destroyed) return;
        if (!stream.write(chunk)) await drained(stream);
      }
      if (!stream.destroyed) stream.end();
    } catch (error) {
      inputError = { error };
      stream.destroy();
    }
  })();
  try {
    for await (const chunk of stream) yield chunk as Uint8Array;
  } catch (error) {
    if (inputError !== undefined) throw inputError.error;
    throw new StConvertError("BadZipFile", `invalid DEFLATE data: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  } finally {
    stream.destroy();
    await pump;
  }
  if (inputError !== undefined) throw inputError.error;
}

function drained(stream: NodeZlib.InflateRaw | NodeZlib.DeflateRaw): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      stream.off("drain", done);
      stream.off("close", done);
      resolve();
    };
    stream.on("drain", done);
    stream.on("close", done);
  });
}

function makeFflateCodec(Deflate: typeof import("fflate").Deflate, Inflate: typeof import("fflate").Inflate): Codec {
  return {
    name: "fflate",
    crc32: tableCrc32,
    async *inflateRaw(input) {
      const out: Uint8Array[] = [];
      let ended = false;
      let started = false;
      const inflater = new Inflate((chunk, final) => {
        if (chunk.byteLength > 0) out.push(chunk);
        if (final) ended = true;
      });
      const push = (piece: Uint8Array, final: boolean) => {
        try {
          inflater.push(piece, final);
        } catch (error) {
          throw new StConvertError("BadZipFile", `invalid DEFLATE data: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
        }
      };
      for await (const chunk of input) {
        started ||= chunk.byteLength > 0;
        for (let at = 0; at < chunk.byteLength && !ended; at += FFLATE_PIECE) {
          push(chunk.subarray(at, at + FFLATE_PIECE), false);
          while (out.length > 0) yield out.shift()!;
        }
        if (ended) break;
      }
      // fflate accepts an empty stream; DEFLATE has no empty encoding (an empty block is 2 bytes).
      if (!ended && !started) throw new StConvertError("BadZipFile", "invalid DEFLATE data: unexpected end of file (no data)");
      if (!ended) push(new Uint8Array(0), true);
      while (out.length > 0) yield out.shift()!;
    },
    inflateRawSync(input, maxOutput) {
      const out: Uint8Array[] = [];
      let total = 0;
      let ended = false;
      const inflater = new Inflate((chunk, final) => {
        if (chunk.byteLength > 0) out.push(chunk);
        total += chunk.byteLength;
        if (final) ended = true;
      });
      const push = (piece: Uint8Array, final: boolean) => {
        try {
          inflater.push(piece, final);
        } catch (error) {
          throw new StConvertError("BadZipFile", `invalid DEFLATE data: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
        }
      };
      if (input.byteLength === 0) throw new StConvertError("BadZipFile", "invalid DEFLATE data: unexpected end of file (no data)");
      // Pieces of FFLATE_PIECE bound each call's output, so a bomb is stopped soon after maxOutput.
      for (let at = 0; at < input.byteLength && !ended; at += FFLATE_PIECE) {
        push(input.subarray(at, at + FFLATE_PIECE), false);
        if (total > maxOutput) return undefined;
      }
      if (!ended) push(new Uint8Array(0), true);
      if (total > maxOutput) return undefined;
      const all = new Uint8Array(total);
      let at = 0;
      for (const chunk of out) {
        all.set(chunk, at);
        at += chunk.byteLength;
      }
      return all;
    },
    async *deflateRaw(input, level) {
      const out: Uint8Array[] = [];
      const deflater = new Deflate({ level: level as 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 }, (chunk) => {
        if (chunk.byteLength > 0) out.push(chunk);
      });
      for await (const chunk of input) {
        for (let at = 0; at < chunk.byteLength; at += FFLATE_PIECE) {
          deflater.push(chunk.subarray(at, at + FFLATE_PIECE), false);
          while (out.length > 0) yield out.shift()!;
        }
      }
      deflater.push(new Uint8Array(0), true);
      while (out.length > 0) yield out.shift()!;
    },
  };
}

/** CRC-32 tables for slicing by 8: T[k][b] is the CRC of byte b followed by k zero bytes. */
let tables: Uint32Array[] | undefined;

function crcTables(): Uint32Array[] {
  if (tables !== undefined) return tables;
  const t0 = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t0[n] = c >>> 0;
  }
  tables = [t0];
  for (let k = 1; k < 8; k++) {
    const prev = tables[k - 1]!;
    const t = new Uint32Array(256);
    for (let n = 0; n < 256; n++) t[n] = (t0[prev[n]! & 0xff]! ^ (prev[n]! >>> 8)) >>> 0;
    tables.push(t);
  }
  return tables;
}

/** CRC-32 in plain JavaScript (slicing by 8), for runtimes without `zlib.crc32`. */
export function tableCrc32(data: Uint8Array, previous = 0): number {
  const [t0, t1, t2, t3, t4, t5, t6, t7] = crcTables() as [
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
    Uint32Array,
  ];
  let crc = ~previous >>> 0;
  let i = 0;
  const n = data.byteLength;
  for (; i + 8 <= n; i += 8) {
    const lo = (crc ^ (data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24))) >>> 0;
    crc =
      t7[lo & 0xff]! ^
      t6[(lo >>> 8) & 0xff]! ^
      t5[(lo >>> 16) & 0xff]! ^
      t4[lo >>> 24]! ^
      t3[data[i + 4]!]! ^
      t2[data[i + 5]!]! ^
      t1[data[i + 6]!]! ^
      t0[data[i + 7]!]!;
  }
  for (; i < n; i++) crc = t0[(crc ^ data[i]!) & 0xff]! ^ (crc >>> 8);
  return ~crc >>> 0;
}
