/**
 * Faster versions of hot loops that a runtime may install, for the browser-safe code to use when
 * they are there: under Node, `@st-convert/core/node` installs the native module's CRC-32 when it
 * loads (`@st-convert/native`). Everything has a portable path; these only change its speed.
 */
import type { NativeIo } from "@st-convert/native";
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
   * Reads `count * run` bytes of the file open as `fd` from `offset` off the main thread, straight
   * into `count` runs of `run` bytes `stride` apart in `target` from `targetOffset`, and resolves
   * to their CRC-32 continued from `previous` (the native module documents it). Rejects as
   * {@link crc32Range} does.
   */
  readRuns?: NativeIo["readRuns"];
  /**
   * The JSON form's three F32 loops, element for element what the json package's JavaScript
   * does (its tests compare them): the writer's `formatFloat32s`, the reader's
   * `storeFloat32Run` and the scanner's `numberRun`. Each returns a position and leaves its
   * other result in `state[0]`; the json package documents their arguments.
   */
  formatFloat32s?: (words: Uint32Array, index: number, end: number, out: Uint8Array, pos: number, limit: number, first: boolean, state: Float64Array) => number;
  /** `formatFloat32s` on Node's thread pool, going on past elements of the exact route (the native module documents it). */
  formatFloat32sAsync?: NativeIo["formatFloat32sAsync"];
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
  /** The JSON writer's check that F32 values carry a tensor's exact bits (no NaN but the canonical one). */
  float32Lossless?: (words: Uint32Array) => boolean;
  /** How many runs of the two reader loops went on two cores so far (the native module documents it). */
  readerSplits?: NativeIo["readerSplits"];
  /** Which of the JSON loops run (the native module documents it). For tests. */
  jsonSimd?: NativeIo["jsonSimd"];
  /**
   * The float casts' element loops, bit for bit what castKernels.ts's JavaScript does (core's
   * tests compare them): `count` elements of `src` (native-endian, any alignment) cast into
   * `dst` by `op`, one of {@link CAST_OPS}; the table ops take castKernels' pattern table.
   */
  castFloats?: (op: number, src: Uint8Array, dst: Uint8Array, count: number, table?: Uint8Array) => void;
}

/** {@link Kernels.castFloats}' operations. */
export const CAST_OPS = {
  /** float32 → BF16, c10's round to nearest even; NaN gives 0x7FC0. */
  f32ToBf16: 0,
  /** float32 → F16, as F16C's `vcvtps2ph`. */
  f32ToF16: 1,
  /** float64 → float32, to nearest even; a NaN keeps its sign and top payload bits, quieted. */
  f64ToF32: 2,
  /** float32 → float64, exact; a NaN keeps its sign and payload, quieted. */
  f32ToF64: 3,
  /** BF16 → float32: a shift. */
  bf16ToF32: 4,
  /** float32 → an 8-bit float through a 0x20000-entry table (top 16 bits, low 16 bits nonzero). */
  f32ToByte: 5,
  /** An 8-bit pattern through a table of 256 entries of 1, 2, 4 or 8 bytes. */
  byteTable: 6,
  /** A 16-bit pattern through a table of 65,536 entries of 1, 2, 4 or 8 bytes. */
  halfTable: 7,
} as const;

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
    throw nativeReadError(error, source, offset, offset + length);
  });
}

/**
 * What a native read of `[offset, end)` of `source` that rejected means: `UnexpectedEof` where the
 * file ended (errno 0, after `copied` bytes), else `Io` with the system's message.
 */
function nativeReadError(error: unknown, source: ByteSource, offset: number, end: number): StConvertError {
  const { errno, copied, message } = error as { errno?: number; copied?: number; message?: string };
  if (errno === 0) return endedEarly(offset + (copied ?? 0), end, source.name);
  return new StConvertError("Io", `read failed: ${message ?? String(error)}`, { file: source.name });
}

/** Reads runs of a source into place, as {@link Kernels.readRuns} does, with the source's offsets. */
export type RunReader = (
  offset: number,
  target: Uint8Array,
  targetOffset: number,
  run: number,
  stride: number,
  count: number,
  previous: number,
) => Promise<number>;

/**
 * {@link Kernels.readRuns} over `source`, when it is installed and the source is a file open as a
 * descriptor (core/node's `FileSource.fd`); undefined otherwise, and the caller reads through
 * the source and places the bytes itself.
 * @throws StConvertError (the reader's promise) `UnexpectedEof` naming the source when the file ends early, `Io` when a read fails.
 */
export function fileRunReader(source: ByteSource): RunReader | undefined {
  const fd = (source as { fd?: unknown }).fd;
  const readRuns = kernels.readRuns;
  if (typeof fd !== "number" || readRuns === undefined) return undefined;
  return (offset, target, targetOffset, run, stride, count, previous) =>
    readRuns(fd, offset, target, targetOffset, run, stride, count, previous).catch((error: unknown) => {
      throw nativeReadError(error, source, offset, offset + run * count);
    });
}
