/**
 * Fortran-order (column-major) arrays repacked to C order on the fly, slab by slab, without ever
 * holding the whole array.
 *
 * A Fortran-order array of shape (d0, …, dn-1) is stored as the C-order array of the reversed
 * shape (dn-1, …, d0), so C order is a reversal of the stored axes. The output is produced in
 * slabs: consecutive ranges of output elements that form a box, a range [a, b) on one "split"
 * axis p and every index of the axes after it (with a fixed index on the axes before it, when
 * even one index of axis 0 is larger than the slab budget). In storage, a box is a set of runs at
 * a uniform stride; they are gathered (merging runs whose gaps are small into one read, issuing
 * the others concurrently) into a buffer that holds the box in stored order, whose axes are then
 * reversed in memory by cache-blocked 2-D transposes.
 */
import { readRange } from "@st-convert/core";
import { settleAll } from "./settleAll.js";

/**
 * Bytes of one slab (a box of output elements gathered and transposed at once). The repack holds
 * two slabs; 64 MiB keeps runs of at least 4 KiB for matrices of up to 16,384 columns, where the
 * per-read cost stops dominating. Overridable (`fortranSlabSize`).
 */
export const FORTRAN_SLAB_SIZE = 64 * 1024 * 1024;

/**
 * Bytes of one slab when the source reads synchronously (a local file, `readIntoSync`): short runs
 * then cost about 2 µs each, so 16 MiB slabs are as fast as 64 MiB ones (measured: 2.6–2.8 s for a
 * 1 GiB 16,384² float32 array either way) and keep peak memory near 170 MB instead of 250 MB.
 */
export const FORTRAN_SLAB_SIZE_SYNC = 16 * 1024 * 1024;

/**
 * Runs closer than this are read as one span: a read call costs about as much as copying 8–50 KB
 * (measured: 5 µs per read when 32 are in flight, 35 µs one at a time, against ~1.5 GB/s).
 */
const COALESCE_GAP = 16 * 1024;
/** Largest single read while gathering. */
const SPAN = 4 * 1024 * 1024;
/** Scattered reads in flight at once on a random-access source. */
const READS_IN_FLIGHT = 32;
/** Edge of the square tiles of the in-memory transpose (best of 8/16/32/64 measured on Node 20). */
const TILE = 16;

/** Where the stored (Fortran-order) bytes come from; offsets are relative to the first element. */
export interface RangeReader {
  /** Exactly `length` bytes at `offset` (may be a view of memory the reader owns: not written to). */
  read(offset: number, length: number): Promise<Uint8Array>;
  /** True when reads may run concurrently, in any order; false for a forward-only stream (it restarts on a backward read). */
  readonly random: boolean;
  /**
   * Fills `target` from `offset` synchronously, where that is cheap (a local file): scattered
   * small runs are then read straight into the slab, about 2 µs each instead of 5–35 µs for an
   * asynchronous read (measured on Node 20). The event loop waits for one slab at most.
   */
  readonly readIntoSync?: ((offset: number, target: Uint8Array) => void) | undefined;
}

/** Options of {@link fortranToC}. */
export interface FortranToCOptions {
  /** Bytes per slab. Default {@link FORTRAN_SLAB_SIZE_SYNC} for a synchronous reader, else {@link FORTRAN_SLAB_SIZE}. */
  slabSize?: number;
  /** Largest chunk yielded. */
  chunkSize: number;
}

/**
 * The C-order bytes of a Fortran-order array, in chunks of at most `chunkSize`. Each chunk is a
 * fresh buffer the caller may modify (to swap bytes in place, for one).
 */
export async function* fortranToC(reader: RangeReader, shape: readonly number[], itemSize: number, options: FortranToCOptions): AsyncGenerator<Uint8Array> {
  const slabSize = Math.max(itemSize, options.slabSize ?? (reader.readIntoSync !== undefined ? FORTRAN_SLAB_SIZE_SYNC : FORTRAN_SLAB_SIZE));
  // Axes of length 1 place no element differently in either order.
  const dims = shape.filter((d) => d !== 1);
  if (dims.includes(0)) return;
  const n = dims.length;
  const total = dims.reduce((a, d) => a * d, 1) * itemSize;
  if (n <= 1) {
    // A copy by constructor (a Node Buffer's slice() would be a view): the caller may modify it.
    for (let at = 0; at < total; at += options.chunkSize) yield new Uint8Array(await reader.read(at, Math.min(options.chunkSize, total - at)));
    return;
  }
  // f[k]: stored stride of axis k, in elements. rowSize[p]: elements of one index of axis p.
  const f = [1];
  for (let k = 1; k < n; k++) f.push(f[k - 1]! * dims[k - 1]!);
  const rowSize = dims.map((_, p) => dims.slice(p + 1).reduce((a, d) => a * d, 1));
  let p = 0;
  while (rowSize[p]! * itemSize > slabSize) p++;
  const per = Math.min(dims[p]!, Math.max(1, Math.floor(slabSize / (rowSize[p]! * itemSize))));
  const maxBytes = per * rowSize[p]! * itemSize;
  let staged: Uint8Array | undefined;
  let spare: Uint8Array | undefined;

  // Odometer over the axes before p (the last one fastest), then ranges of axis p.
  const index = new Array<number>(p).fill(0);
  for (;;) {
    const base = index.reduce((sum, i, q) => sum + i * f[q]!, 0);
    for (let a = 0; a < dims[p]!; a += per) {
      const count = Math.min(per, dims[p]! - a);
      const bytes = count * rowSize[p]! * itemSize;
      staged ??= new Uint8Array(maxBytes);
      spare ??= new Uint8Array(maxBytes);
      const box = staged.subarray(0, bytes);
      await gather(
        reader,
        { start: base + a * f[p]!, runs: rowSize[p]!, runStride: p + 1 < n ? f[p + 1]! : 0, runLength: count, elemStride: f[p]! },
        itemSize,
        box,
      );
      const storedShape = [...dims.slice(p + 1).reverse(), count];
      const result = reverseAxes(box, spare.subarray(0, bytes), storedShape, itemSize);
      // The yielded buffer belongs to the consumer from now on.
      if (result.buffer === staged.buffer) staged = undefined;
      else spare = undefined;
      for (let at = 0; at < bytes; at += options.chunkSize) yield result.subarray(at, Math.min(at + options.chunkSize, bytes));
    }
    let q = p - 1;
    while (q >= 0 && ++index[q]! === dims[q]!) index[q--] = 0;
    if (q < 0) return;
  }
}

/** Stored positions of a box, in elements: `runs` runs at `start + k·runStride`, each `runLength` elements `elemStride` apart. */
interface GatherPlan {
  readonly start: number;
  readonly runs: number;
  readonly runStride: number;
  readonly runLength: number;
  readonly elemStride: number;
}

/** Copies the elements a plan names, in order, into `dst`. */
async function gather(reader: RangeReader, plan: GatherPlan, itemSize: number, dst: Uint8Array): Promise<void> {
  const { start, runs, runStride, runLength, elemStride } = plan;
  if (elemStride !== 1) return gatherElements(reader, plan, itemSize, dst);
  const runBytes = runLength * itemSize;
  const strideBytes = runStride * itemSize;
  const first = start * itemSize;
  if (runs === 1 || strideBytes === runBytes) {
    // One contiguous range, in spans, the next read (one at most, so forward-only readers too) in flight while a span is copied.
    const length = runs * runBytes;
    let at = 0;
    for await (const span of readRange({ size: first + length, read: (offset, n) => reader.read(offset, n) }, first, length, { chunkSize: SPAN })) {
      dst.set(span, at);
      at += span.byteLength;
    }
    return;
  }
  const gap = strideBytes - runBytes;
  if (reader.readIntoSync !== undefined && gap > COALESCE_GAP) {
    for (let k = 0; k < runs; k++) reader.readIntoSync(first + k * strideBytes, dst.subarray(k * runBytes, (k + 1) * runBytes));
    return;
  }
  if (!reader.random) {
    for (let k = 0; k < runs; k++) dst.set(await reader.read(first + k * strideBytes, runBytes), k * runBytes);
    return;
  }
  if (gap > COALESCE_GAP) {
    for (let k0 = 0; k0 < runs; k0 += READS_IN_FLIGHT) {
      const batch: Promise<void>[] = [];
      for (let k = k0; k < Math.min(runs, k0 + READS_IN_FLIGHT); k++) {
        batch.push(reader.read(first + k * strideBytes, runBytes).then((run) => dst.set(run, k * runBytes)));
      }
      await settleAll(batch);
    }
    return;
  }
  // Close runs: one read covers several, the gaps between them are read and dropped.
  const group = Math.max(1, Math.floor((SPAN - runBytes) / strideBytes) + 1);
  const spans = Math.ceil(runs / group);
  const spanRead = (s: number) => {
    const k0 = s * group;
    const k1 = Math.min(runs, k0 + group);
    return reader.read(first + k0 * strideBytes, (k1 - k0 - 1) * strideBytes + runBytes);
  };
  let next = spanRead(0);
  for (let s = 0; s < spans; s++) {
    const span = await next;
    if (s + 1 < spans) {
      next = spanRead(s + 1);
      next.catch(() => {});
    }
    const k0 = s * group;
    const k1 = Math.min(runs, k0 + group);
    for (let k = k0; k < k1; k++) {
      const from = (k - k0) * strideBytes;
      dst.set(span.subarray(from, from + runBytes), k * runBytes);
    }
  }
}

/**
 * The rare case of a split axis past the first: elements are `elemStride` apart. Positions only
 * grow, so spans are read forward and each element is copied out.
 */
async function gatherElements(reader: RangeReader, plan: GatherPlan, itemSize: number, dst: Uint8Array): Promise<void> {
  const { start, runs, runStride, runLength, elemStride } = plan;
  let span: Uint8Array = new Uint8Array(0);
  let spanStart = 0;
  let out = 0;
  const last = (start + (runs - 1) * runStride + (runLength - 1) * elemStride) * itemSize + itemSize;
  for (let k = 0; k < runs; k++) {
    for (let j = 0; j < runLength; j++) {
      const pos = (start + k * runStride + j * elemStride) * itemSize;
      if (pos + itemSize > spanStart + span.byteLength) {
        spanStart = pos;
        span = await reader.read(pos, Math.min(SPAN, last - pos));
      }
      const from = pos - spanStart;
      for (let b = 0; b < itemSize; b++) dst[out++] = span[from + b]!;
    }
  }
}

/**
 * Reverses the axes of a C-order array: `src` has `shape`, the result has the reversed shape.
 * Works by n − 1 transposes ping-ponging between `src` and `scratch` (both are overwritten) and
 * returns whichever holds the result.
 */
export function reverseAxes(src: Uint8Array, scratch: Uint8Array, shape: readonly number[], itemSize: number): Uint8Array {
  let dims = shape.filter((d) => d !== 1);
  let element = itemSize;
  let from = src;
  let to = scratch;
  while (dims.length > 1) {
    const rows = dims[0]!;
    const cols = dims.slice(1).reduce((a, d) => a * d, 1);
    transpose(from, to, rows, cols, element);
    // `to` is (rest…, rows): the array of shape rest whose elements are `rows` old elements each.
    element *= rows;
    dims = dims.slice(1);
    [from, to] = [to, from];
  }
  return from;
}

/** `dst` (cols × rows) = transpose of `src` (rows × cols), elements of `element` bytes; both start aligned. */
function transpose(src: Uint8Array, dst: Uint8Array, rows: number, cols: number, element: number): void {
  const bytes = rows * cols * element;
  if (rows === 1 || cols === 1) {
    dst.set(src.subarray(0, bytes));
    return;
  }
  if (element > 32) {
    for (let r0 = 0; r0 < rows; r0 += TILE) {
      for (let c0 = 0; c0 < cols; c0 += TILE) {
        for (let r = r0; r < Math.min(rows, r0 + TILE); r++) {
          for (let c = c0; c < Math.min(cols, c0 + TILE); c++) {
            const from = (r * cols + c) * element;
            dst.set(src.subarray(from, from + element), (c * rows + r) * element);
          }
        }
      }
    }
    return;
  }
  const word = element % 4 === 0 ? 4 : element % 2 === 0 ? 2 : 1;
  const words = element / word;
  if (word === 4)
    transposeWords(new Uint32Array(src.buffer, src.byteOffset, bytes / 4), new Uint32Array(dst.buffer, dst.byteOffset, bytes / 4), rows, cols, words);
  else if (word === 2)
    transposeWords(new Uint16Array(src.buffer, src.byteOffset, bytes / 2), new Uint16Array(dst.buffer, dst.byteOffset, bytes / 2), rows, cols, words);
  else transposeWords(src, dst, rows, cols, words);
}

type Words = Uint8Array | Uint16Array | Uint32Array;

/** Tiled transpose of elements of `words` machine words each. */
function transposeWords(src: Words, dst: Words, rows: number, cols: number, words: number): void {
  const dstStride = rows * words;
  for (let r0 = 0; r0 < rows; r0 += TILE) {
    const r1 = Math.min(rows, r0 + TILE);
    for (let c0 = 0; c0 < cols; c0 += TILE) {
      const c1 = Math.min(cols, c0 + TILE);
      for (let r = r0; r < r1; r++) {
        let s = (r * cols + c0) * words;
        let d = (c0 * rows + r) * words;
        if (words === 1) {
          for (let c = c0; c < c1; c++) {
            dst[d] = src[s++]!;
            d += dstStride;
          }
        } else {
          for (let c = c0; c < c1; c++) {
            for (let w = 0; w < words; w++) dst[d + w] = src[s + w]!;
            s += words;
            d += dstStride;
          }
        }
      }
    }
  }
}
