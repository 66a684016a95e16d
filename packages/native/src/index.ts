/**
 * `@st-convert/native`: the optional native helpers of st-convert under Node on Linux, a kernel
 * copy between files (`copy_file_range`) and a fast CRC-32. {@link nativeIo} loads them once, or
 * says they are not there: every caller has a JavaScript path that gives the same bytes.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** What the native module offers. */
export interface NativeIo {
  /**
   * Copies `length` bytes from `inOffset` of the file open as `inFd` to `outOffset` of the file
   * open as `outFd` (-1: at its file position, which then advances), in the kernel, on Node's
   * thread pool. Resolves to the bytes copied: fewer than `length` only when the input ended.
   * Rejects with an Error whose `errno` is the system's error number and `copied` the bytes copied
   * before it (`EXDEV`, `EINVAL`, `EOPNOTSUPP`: this pair of files cannot be copied so; copy through memory).
   */
  copyRange(inFd: number, inOffset: number, outFd: number, outOffset: number, length: number): Promise<number>;
  /**
   * `copyRange` through the process's buffers (wherever the offsets lie), taking the CRC-32 of the
   * bytes as they are read, continued from `previous`: one read serves the copy and a check (or a
   * zip writer's record) that `copyRange` beside `crc32Range` would read twice. Ranges of 4 MiB or
   * more read ahead on a thread of their own, the CRC folded there. Resolves to the CRC; rejects as
   * `copyRange` does, and with `errno` 0 (and `copied`) when the input ends early.
   */
  copyRangeCrc32(inFd: number, inOffset: number, outFd: number, outOffset: number, length: number, previous: number): Promise<number>;
  /** CRC-32 (ISO-HDLC, as zip uses it) of `bytes`, continuing from `previous` (default 0). */
  crc32(bytes: Uint8Array, previous?: number): number;
  /**
   * Swaps what the paths `a` and `b` name, atomically (renameat2(2) with RENAME_EXCHANGE). Throws
   * an Error whose `errno` is the system's error number (EINVAL: this file system cannot swap;
   * ENOENT: one of them is missing), or a TypeError for a path that is not 1 to 4094 bytes
   * without NUL.
   */
  exchangePaths(a: string, b: string): void;
  /**
   * CRC-32 of `length` bytes of the file open as `fd` from `offset`, continuing from `previous`,
   * read on Node's thread pool through a 256 KiB buffer (it stays in the CPU's cache: 0.13 s/GiB
   * from the page cache, against 0.45 s through a 64 MiB one). Rejects as `copyRange` does, with
   * `copied` the bytes read; an input that ends early rejects with `errno` 0.
   */
  crc32Range(fd: number, offset: number, length: number, previous: number): Promise<number>;
  /**
   * Reads `count * run` bytes of the file open as `fd` from `offset`, on Node's thread pool,
   * straight into `count` runs of `run` bytes `stride` apart in `target` from `targetOffset`
   * (preadv(2), no buffer between), taking their CRC-32 in file order as they arrive, continued
   * from `previous`. Resolves to the CRC; rejects as `crc32Range` does (`copied`: the bytes read).
   * Until it settles the caller leaves `target` alone. Throws a TypeError for a bad argument or a
   * run past the end of `target`.
   */
  readRuns(fd: number, offset: number, target: Uint8Array, targetOffset: number, run: number, stride: number, count: number, previous: number): Promise<number>;
  /**
   * The JSON form's F32 writer loop: elements of `words` (float32 bits) from `index`, as the
   * json package's `formatFloat32s` writes them, while `index < end` and `pos <= limit`; returns
   * the output position, `state[0]` the next element. Stops early, before the element's
   * separator, at an element whose digits need the exact route, which the caller writes.
   */
  formatFloat32s(words: Uint32Array, index: number, end: number, out: Uint8Array, pos: number, limit: number, first: boolean, state: Float64Array): number;
  /**
   * `formatFloat32s` on a thread of Node's pool, which does not stop at an element whose digits
   * need the exact route: it leaves `gap` bytes for it, records (element, position) in `stops`,
   * and goes on; it ends at `end`, for want of room or when `stops` is full. Resolves to the output
   * position, with `state[0]` the next element and `state[1]` the number of gaps. Until then the
   * caller leaves `out`, `state` and `stops` alone (it may read `words`).
   */
  formatFloat32sAsync(
    words: Uint32Array,
    index: number,
    end: number,
    out: Uint8Array,
    pos: number,
    limit: number,
    first: boolean,
    state: Float64Array,
    stops: Float64Array,
    gap: number,
  ): Promise<number>;
  /** The JSON reader's F32 fast path, as the json package's `storeFloat32Run`; `state[0]` is the next leaf. */
  storeFloat32Run(buf: Uint8Array, i: number, final: boolean, floats: Float32Array, base: number, leaf: number, endLeaf: number, state: Float64Array): number;
  /** The JSON scanner's run of numbers after a value, as its `numberRun`; `state[0]` is the count. */
  numberRun(buf: Uint8Array, i: number, count: number, dim: number, kinds: number, maxLength: number, state: Float64Array): number;
  /** Whether no word of `words` (float32 bits) is a NaN other than 0x7fc00000, as the json package's `float32Lossless`. */
  float32Lossless(words: Uint32Array): boolean;
  /**
   * How many calls of `storeFloat32Run` and `numberRun` so far ran on two cores (a stretch of 256 KiB
   * or more, split at a comma past its middle, the second half on the module's helper thread, the
   * halves joined), and how many of those stores went on past the helper's last piece on the
   * calling thread (the stretch held more values than asked for): `[joined, resumed]`. For tests.
   */
  readerSplits(): [joined: number, resumed: number];
  /**
   * Which of the JSON loops run: 2 the AVX2 ones (with SSE4.1's where there are none), 1 SSE4.1's,
   * 0 the plain C. `ST_CONVERT_JSON_SIMD=1` or `0` lowers it, so that tests can compare each with the
   * JavaScript. For tests.
   */
  jsonSimd(): number;
  /**
   * The float casts' element loops, as core's castKernels.ts has them: `count` elements of `src`
   * cast into `dst` (Uint8Arrays, native-endian, any alignment) by `op` (core's `CAST_OPS`);
   * ops 5–7 read their results from `table`. Throws a TypeError for a bad argument or a count
   * past either array's end.
   */
  castFloats(op: number, src: Uint8Array, dst: Uint8Array, count: number, table?: Uint8Array): void;
  /** Whether the CRC-32 folds with carry-less multiplication (PCLMULQDQ) on this CPU, rather than using a table. */
  readonly crc32Folds: boolean;
  /**
   * How it folds: 0 by table, 1 PCLMULQDQ on 128-bit lanes, 2 VPCLMULQDQ on 256-bit registers
   * (with AVX2), 3 on 512-bit ones (AVX-512). `ST_CONVERT_CRC_FOLD=N` lowers it to N, for tests.
   */
  readonly crc32Fold: number;
}

/** The error `copyRange` rejects with. */
export interface CopyRangeError extends Error {
  readonly errno: number;
  readonly copied: number;
}

/** Why {@link nativeIo} returned undefined, once it has been called. */
export let nativeAbsence: string | undefined;

let loaded: NativeIo | undefined | null;

/**
 * The native helpers, loaded on first call; undefined when they were not built for this machine
 * (no compiler at set-up, another platform or CPU) or `ST_CONVERT_NATIVE=0` turns them off.
 */
export function nativeIo(): NativeIo | undefined {
  if (loaded !== undefined) return loaded ?? undefined;
  loaded = load();
  return loaded ?? undefined;
}

function load(): NativeIo | null {
  if (process.env.ST_CONVERT_NATIVE === "0") return absent("turned off by ST_CONVERT_NATIVE=0");
  const built = new URL("./fastio.json", import.meta.url);
  let target: { platform?: string; arch?: string };
  try {
    target = JSON.parse(readFileSync(built, "utf8"));
  } catch {
    return absent("not built at set-up (no C compiler or no Node headers then)");
  }
  if (target.platform !== process.platform || target.arch !== process.arch) {
    return absent(`built for ${target.platform}-${target.arch}, this is ${process.platform}-${process.arch}`);
  }
  try {
    // process.dlopen, not require(): bundlers leave it alone, and the path is this file's neighbour wherever it lives.
    const module = { exports: {} as NativeIo };
    process.dlopen(module, fileURLToPath(new URL("./fastio.node", import.meta.url)));
    return module.exports;
  } catch (error) {
    return absent(`cannot load fastio.node: ${(error as Error).message}`);
  }
}

function absent(reason: string): null {
  nativeAbsence = reason;
  return null;
}
