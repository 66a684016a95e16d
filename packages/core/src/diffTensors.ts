/**
 * Are two checkpoints' tensors the same? Exact by default (names, dtypes, shapes and bytes); with
 * tolerances, values compared as `torch.testing.assert_close` does, in float64. Browser-safe: the
 * command (`st-convert diff`, over files of any format) and the page use it.
 * Each tensor present on both sides is read once from each, in blocks, the two in step: memory
 * stays at two blocks whatever the files' sizes.
 */
import { type Metadata, type TensorEntry, type TensorSource, compareCodePoints } from "./Tensor.js";
import { BLOCK_BYTES, BYTE_BLOCK_BYTES, BlockReader, valueDecoder, valueWidth } from "./tensorValues.js";

/** Options of {@link diffTensors}: the rule. */
export interface DiffTensorsOptions {
  /**
   * Absolute tolerance. With `atol` or `rtol`, values are compared as `torch.testing.assert_close`
   * does: `|a − b| ≤ atol + rtol·|b|` (B is the expected side), NaN equal to NaN, an infinity only
   * to itself; dtypes may then differ, every value is compared in float64. Without either, the
   * comparison is exact: the same dtypes, shapes and bytes.
   */
  atol?: number;
  /** Relative tolerance (see `atol`). */
  rtol?: number;
  /** Count metadata differences against `same` (they are always reported). Default false. */
  compareMetadata?: boolean;
  /** Stops at the next block. */
  signal?: AbortSignal;
  /** Called as tensor bytes are read (both sides): bytes done so far and the total. */
  onProgress?: (done: number, total: number) => void;
}

/** How one tensor compares. */
export interface TensorDiff {
  name: string;
  /**
   * `same`; `onlyInA`/`onlyInB`; `dtype` (exact comparisons only) or `shape` when those differ, the
   * values then not compared; `values` when some elements differ.
   */
  status: "same" | "onlyInA" | "onlyInB" | "dtype" | "shape" | "values";
  dtype: { a: string | null; b: string | null };
  shape: { a: number[] | null; b: number[] | null };
  /** Elements that differ (bytes, for the packed F4/F6 dtypes); null when the values were not compared. */
  differing: number | null;
  /** Largest |a − b| over the differing elements that are not NaN; null when there is none or the dtype is not read as numbers. */
  maxAbsDiff: number | null;
  /** Largest |a − b| / |b| over the same elements (Infinity where b is 0). */
  maxRelDiff: number | null;
  /** C-order index of the first differing element (null for packed dtypes and when none differs). */
  firstIndex: number[] | null;
}

/** What {@link diffTensors} found. */
export interface TensorsDiff {
  /** Whether A and B are the same by the rule asked for (and their metadata, with `compareMetadata`). */
  same: boolean;
  /** The tolerances; null for an exact comparison. */
  tolerance: { atol: number; rtol: number } | null;
  /** Every name of either side, sorted in code-point order. */
  tensors: TensorDiff[];
  /** Metadata keys only in A, only in B, and with different values. */
  metadata: { onlyInA: string[]; onlyInB: string[]; differ: string[] };
  totals: { same: number; differ: number; onlyInA: number; onlyInB: number };
}

/** Elements per block: both sides' blocks hold the same elements. */
const BLOCK_ELEMENTS = BLOCK_BYTES / 8;

/**
 * Compares the tensors and metadata of `left` (A) with those of `right` (B), reading each tensor
 * present on both sides once (see {@link DiffTensorsOptions}).
 * @throws StConvertError naming the tensor when a reader fails.
 */
export async function diffTensors(left: TensorSource, right: TensorSource, options: DiffTensorsOptions = {}): Promise<TensorsDiff> {
  const tolerance = options.atol === undefined && options.rtol === undefined ? null : { atol: options.atol ?? 0, rtol: options.rtol ?? 0 };
  const inA = new Map(left.tensors.map((t) => [t.name, t]));
  const inB = new Map(right.tensors.map((t) => [t.name, t]));
  const names = [...new Set([...inA.keys(), ...inB.keys()])].sort(compareCodePoints);
  let total = 0;
  for (const name of names) if (inA.has(name) && inB.has(name)) total += inA.get(name)!.byteLength + inB.get(name)!.byteLength;
  let done = 0;
  const progress = (bytes: number) => {
    done += bytes;
    options.onProgress?.(done, total);
  };
  const tensors: TensorDiff[] = [];
  const totals = { same: 0, differ: 0, onlyInA: 0, onlyInB: 0 };
  for (const name of names) {
    const x = inA.get(name);
    const y = inB.get(name);
    const item =
      x === undefined
        ? blank(name, undefined, y, "onlyInB")
        : y === undefined
          ? blank(name, x, undefined, "onlyInA")
          : await compareTensors(x, y, tolerance, options.signal, progress);
    tensors.push(item);
    if (item.status === "same") totals.same++;
    else if (item.status === "onlyInA") totals.onlyInA++;
    else if (item.status === "onlyInB") totals.onlyInB++;
    else totals.differ++;
  }
  const metadata = compareMetadata(left.metadata, right.metadata);
  const metadataSame = metadata.onlyInA.length + metadata.onlyInB.length + metadata.differ.length === 0;
  return {
    same: totals.same === names.length && (options.compareMetadata !== true || metadataSame),
    tolerance,
    tensors,
    metadata,
    totals,
  };
}

function blank(name: string, x: TensorEntry | undefined, y: TensorEntry | undefined, status: TensorDiff["status"]): TensorDiff {
  return {
    name,
    status,
    dtype: { a: x?.dtype ?? null, b: y?.dtype ?? null },
    shape: { a: x === undefined ? null : [...x.shape], b: y === undefined ? null : [...y.shape] },
    differing: null,
    maxAbsDiff: null,
    maxRelDiff: null,
    firstIndex: null,
  };
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Running record of the differing elements of one tensor. */
class Differences {
  count = 0;
  first = -1;
  maxAbs = Number.NEGATIVE_INFINITY;
  maxRel = Number.NEGATIVE_INFINITY;

  /** Element `index` differs; `a` and `b` its values (undefined when not read as numbers). */
  add(index: number, a: number | undefined, b: number | undefined): void {
    if (this.first < 0) this.first = index;
    this.count++;
    if (a === undefined || b === undefined || a !== a || b !== b) return;
    const abs = Math.abs(a - b);
    // An infinity against another value: |a − b| is infinite; two infinities of one sign never get here.
    // Infinite where b is 0 and a is not; 0 for 0 against −0 (bytes that differ, values that do not).
    const rel = abs === 0 ? 0 : abs / Math.abs(b);
    if (abs > this.maxAbs) this.maxAbs = abs;
    if (rel > this.maxRel) this.maxRel = rel;
  }
}

async function compareTensors(
  x: TensorEntry,
  y: TensorEntry,
  tolerance: TensorsDiff["tolerance"],
  signal: AbortSignal | undefined,
  progress: (bytes: number) => void,
): Promise<TensorDiff> {
  const item = blank(x.name, x, y, "same");
  if (!sameShape(x.shape, y.shape)) return { ...item, status: "shape" };
  const decodeX = valueDecoder(x.dtype);
  const decodeY = valueDecoder(y.dtype);
  const numeric = decodeX !== undefined && decodeY !== undefined;
  if (x.dtype !== y.dtype && (tolerance === null || !numeric)) return { ...item, status: "dtype" };
  const differences = new Differences();
  const widthX = valueWidth(x.dtype);
  const widthY = valueWidth(y.dtype);
  if (widthX === undefined || widthY === undefined || !numeric) await compareBytes(x, y, differences, signal, progress);
  else await compareValues(x, y, widthX, widthY, decodeX, decodeY, tolerance, differences, signal, progress);
  if (differences.count === 0) return { ...item, differing: 0 };
  const packed = widthX === undefined && x.dtype !== "C64";
  return {
    ...item,
    status: "values",
    differing: differences.count,
    maxAbsDiff: differences.maxAbs === Number.NEGATIVE_INFINITY ? null : differences.maxAbs,
    maxRelDiff: differences.maxRel === Number.NEGATIVE_INFINITY ? null : differences.maxRel,
    firstIndex: packed ? null : unravel(differences.first, x.shape),
  };
}

/** Same dtype, not read as numbers (F4, F6, C64): element by element for C64, byte by byte for the packed ones. */
async function compareBytes(
  x: TensorEntry,
  y: TensorEntry,
  differences: Differences,
  signal: AbortSignal | undefined,
  progress: (bytes: number) => void,
): Promise<void> {
  const unit = x.dtype === "C64" ? 8 : 1;
  const left = new BlockReader(x, BYTE_BLOCK_BYTES);
  const right = new BlockReader(y, BYTE_BLOCK_BYTES);
  let at = 0;
  try {
    for (;;) {
      const [p, q] = await Promise.all([left.next(), right.next()]);
      if (p === undefined || q === undefined) break;
      if (!equalBytes(p, q)) {
        for (let i = 0; i < p.byteLength; i += unit) {
          for (let k = 0; k < unit; k++) {
            if (p[i + k] !== q[i + k]) {
              differences.add(at + i / unit, undefined, undefined);
              break;
            }
          }
        }
      }
      at += p.byteLength / unit;
      progress(p.byteLength + q.byteLength);
      signal?.throwIfAborted();
    }
  } finally {
    await Promise.all([left.close(), right.close()]);
  }
}

async function compareValues(
  x: TensorEntry,
  y: TensorEntry,
  widthX: number,
  widthY: number,
  decodeX: NonNullable<ReturnType<typeof valueDecoder>>,
  decodeY: NonNullable<ReturnType<typeof valueDecoder>>,
  tolerance: TensorsDiff["tolerance"],
  differences: Differences,
  signal: AbortSignal | undefined,
  progress: (bytes: number) => void,
): Promise<void> {
  // Exact: bytes compared in the reader's own chunks, values decoded only where they differ.
  const elements = tolerance === null ? BYTE_BLOCK_BYTES / widthX : BLOCK_ELEMENTS;
  const left = new BlockReader(x, elements * widthX);
  const right = new BlockReader(y, elements * widthY);
  // The values, made at the first block that needs them (an exact comparison of equal tensors never does).
  const room = Math.min(elements, Math.ceil(x.byteLength / widthX));
  let a: Float64Array | undefined;
  let b: Float64Array | undefined;
  let at = 0;
  try {
    for (;;) {
      const [p, q] = await Promise.all([left.next(), right.next()]);
      if (p === undefined || q === undefined) break;
      const count = p.byteLength / widthX;
      if (tolerance === null) {
        // Exact: the bytes decide, element by element; the values only measure the difference.
        if (!equalBytes(p, q)) {
          a ??= new Float64Array(room);
          b ??= new Float64Array(room);
          decodeX(p, count, a);
          decodeY(q, count, b);
          for (let i = 0; i < count; i++) {
            for (let k = i * widthX; k < (i + 1) * widthX; k++) {
              if (p[k] !== q[k]) {
                differences.add(at + i, a[i], b[i]);
                break;
              }
            }
          }
        }
      } else {
        a ??= new Float64Array(room);
        b ??= new Float64Array(room);
        decodeX(p, count, a);
        decodeY(q, count, b);
        const { atol, rtol } = tolerance;
        for (let i = 0; i < count; i++) {
          const u = a[i]!;
          const v = b[i]!;
          if (u === v) continue; // equal values, infinities of one sign included
          if (u !== u && v !== v) continue; // NaN equals NaN
          // NaN against a number, an infinity against anything else, or too far apart.
          if (u !== u || v !== v || u - u !== 0 || v - v !== 0 || !(Math.abs(u - v) <= atol + rtol * Math.abs(v))) differences.add(at + i, u, v);
        }
      }
      at += count;
      progress(p.byteLength + q.byteLength);
      signal?.throwIfAborted();
    }
  } finally {
    await Promise.all([left.close(), right.close()]);
  }
}

/** A flat C-order index as one index per dim. */
function unravel(flat: number, shape: readonly number[]): number[] {
  const index = new Array<number>(shape.length).fill(0);
  for (let d = shape.length - 1; d >= 0; d--) {
    const size = shape[d]!;
    index[d] = flat % size;
    flat = Math.floor(flat / size);
  }
  return index;
}

function compareMetadata(a: Metadata | null, b: Metadata | null): TensorsDiff["metadata"] {
  const x = a ?? {};
  const y = b ?? {};
  const onlyInA = Object.keys(x)
    .filter((k) => !Object.hasOwn(y, k))
    .sort(compareCodePoints);
  const onlyInB = Object.keys(y)
    .filter((k) => !Object.hasOwn(x, k))
    .sort(compareCodePoints);
  const differ = Object.keys(x)
    .filter((k) => Object.hasOwn(y, k) && x[k] !== y[k])
    .sort(compareCodePoints);
  return { onlyInA, onlyInB, differ };
}

/** Whether two blocks hold the same bytes: 4 at a time where both are aligned (blocks are), then the tail. */
function equalBytes(p: Uint8Array, q: Uint8Array): boolean {
  const length = p.byteLength;
  if (length !== q.byteLength) return false;
  let i = 0;
  if (p.byteOffset % 4 === 0 && q.byteOffset % 4 === 0) {
    const words = length >>> 2;
    const x = new Int32Array(p.buffer, p.byteOffset, words);
    const y = new Int32Array(q.buffer, q.byteOffset, words);
    for (let k = 0; k < words; k++) if (x[k] !== y[k]) return false;
    i = words * 4;
  }
  for (; i < length; i++) if (p[i] !== q[i]) return false;
  return true;
}
