/**
 * Faster versions of hot loops that a runtime may install, for the browser-safe code to use when
 * they are there: under Node, `@st-convert/core/node` installs the native module's CRC-32 when it
 * loads (`@st-convert/native`). Everything has a portable path; these only change its speed.
 */
import type { ByteSource } from "./ByteSource.js";
import { StConvertError, endedEarly } from "./StConvertError.js";

export interface Kernels {
  /** CRC-32 (ISO-HDLC, as zip uses it) of `bytes`, continuing from `previous` (default 0). */
  crc32?: (bytes: Uint8Array, previous?: number) => number;
  /**
   * CRC-32 of `length` bytes of the file open as `fd` from `offset`, continuing from `previous`,
   * read off the main thread through a buffer that stays in the CPU's cache. Rejects with
   * `errno` (0: the file ended) and `copied` (the bytes read before).
   */
  crc32Range?: (fd: number, offset: number, length: number, previous: number) => Promise<number>;
  /**
   * The JSON form's three F32 loops, element for element what the json package's JavaScript
   * does (its tests compare them): the writer's `formatFloat32s`, the reader's
   * `storeFloat32Run` and the scanner's `numberRun`. Each returns a position and leaves its
   * other result in `state[0]`; the json package documents their arguments.
   */
  formatFloat32s?: (words: Uint32Array, index: number, end: number, out: Uint8Array, pos: number, limit: number, first: boolean, state: Float64Array) => number;
  storeFloat32Run?: (
    buf: Uint8Array,
    i: number,
    final: boolean,
    floats: Float32Array,
    base: number,
    leaf: number,
    endLeaf: number,
    state: Float64Array,
  ) => number;
  numberRun?: (buf: Uint8Array, i: number, count: number, dim: number, kinds: number, maxLength: number, state: Float64Array) => number;
}

/** The kernels installed in this runtime (a module-wide registry: one per process or worker). */
export const kernels: Kernels = {};

/** Ranges from this size go to {@link Kernels.crc32Range}: below it, the trip to the thread pool costs more than a read here. */
export const CRC_RANGE_FROM = 1024 * 1024;

/**
 * The CRC-32 of `length` bytes of `source` from `offset`, continuing from `previous`, through
 * {@link Kernels.crc32Range} when it is installed, the source is a file open as a descriptor
 * (core/node's `FileSource.fd`) and the range is at least {@link CRC_RANGE_FROM}; undefined
 * otherwise, and the caller reads the bytes itself.
 * @throws StConvertError `UnexpectedEof` naming the source when the file ends early, `Io` when a read fails.
 */
export function crc32FileRange(source: ByteSource, offset: number, length: number, previous: number): Promise<number> | undefined {
  const fd = (source as { fd?: unknown }).fd;
  const range = kernels.crc32Range;
  if (typeof fd !== "number" || range === undefined || length < CRC_RANGE_FROM) return undefined;
  return range(fd, offset, length, previous).catch((error: unknown) => {
    const { errno, copied, message } = error as { errno?: number; copied?: number; message?: string };
    if (errno === 0) throw endedEarly(offset + (copied ?? 0), offset + length, source.name);
    throw new StConvertError("Io", `read failed: ${message ?? String(error)}`, { file: source.name });
  });
}
