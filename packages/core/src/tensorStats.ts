/**
 * A tensor's statistics, as numpy's `nanmin`, `nanmax`, `nanmean` and `nanstd` compute them in
 * float64, and its counts of NaN, +Inf, −Inf and zeros, in one pass over blocks; and a histogram
 * of its values. Browser-safe: the command (`st-convert stats`) and the page both use it.
 *
 * Mean and std: each block's sum is compensated (Neumaier) and its squares are summed about the
 * block's own mean; blocks are merged by Chan et al.'s pairwise update. Within 1e-9 relative of
 * numpy's pairwise sums for any size (a naive running sum of 2^28 float32 values is off by ~1e-8).
 * An infinity makes the mean that infinity (NaN with both signs) and the std NaN, as in numpy.
 */
import type { TensorEntry } from "./Tensor.js";
import { BLOCK_BYTES, BlockReader, valueDecoder, valueWidth } from "./tensorValues.js";

/** One tensor's statistics (see {@link tensorStats}). */
export interface TensorStats {
  name: string;
  dtype: string;
  shape: number[];
  /** Elements that are not NaN. */
  count: number;
  /** Over the non-NaN elements; null when there is none, or when the dtype is not read as numbers (F4, F6, C64). */
  min: number | null;
  max: number | null;
  mean: number | null;
  /** Population standard deviation (numpy's default, ddof=0). */
  std: number | null;
  nan: number;
  posinf: number;
  neginf: number;
  /** Elements equal to zero (−0 included). */
  zeros: number;
}

/**
 * One tensor's statistics, reading it once.
 * @throws StConvertError naming the tensor when its reader fails.
 */
export async function tensorStats(entry: TensorEntry, signal?: AbortSignal, onBytes?: (bytes: number) => void): Promise<TensorStats> {
  const result: TensorStats = {
    name: entry.name,
    dtype: entry.dtype,
    shape: [...entry.shape],
    count: 0,
    min: null,
    max: null,
    mean: null,
    std: null,
    nan: 0,
    posinf: 0,
    neginf: 0,
    zeros: 0,
  };
  const decode = valueDecoder(entry.dtype);
  const width = valueWidth(entry.dtype);
  if (decode === undefined || width === undefined) return result;
  const moments = new Moments();
  const reader = new BlockReader(entry, BLOCK_BYTES);
  const values = new Float64Array(BLOCK_BYTES / width);
  for (let block = await reader.next(); block !== undefined; block = await reader.next()) {
    const count = block.byteLength / width;
    decode(block, count, values);
    moments.add(values, count);
    onBytes?.(block.byteLength);
    signal?.throwIfAborted();
  }
  return { ...result, ...moments.result() };
}

/** Running counts and moments over blocks of float64 values. */
export class Moments {
  nan = 0;
  posinf = 0;
  neginf = 0;
  zeros = 0;
  min = Number.POSITIVE_INFINITY;
  max = Number.NEGATIVE_INFINITY;
  /** Finite values so far, their mean and their sum of squared deviations from it. */
  n = 0;
  mean = 0;
  m2 = 0;

  /** Takes `values[0..count)`. */
  add(values: Float64Array, count: number): void {
    let min = this.min;
    let max = this.max;
    let zeros = 0;
    let nonFinite = 0;
    // Neumaier's compensated sum of the finite values.
    let sum = 0;
    let carry = 0;
    for (let i = 0; i < count; i++) {
      const x = values[i]!;
      if (x - x !== 0) {
        nonFinite++;
        continue;
      }
      if (x < min) min = x;
      if (x > max) max = x;
      if (x === 0) zeros++;
      const t = sum + x;
      carry += Math.abs(sum) >= Math.abs(x) ? sum - t + x : x - t + sum;
      sum = t;
    }
    if (nonFinite > 0) {
      for (let i = 0; i < count; i++) {
        const x = values[i]!;
        if (x !== x) this.nan++;
        else if (x === Number.POSITIVE_INFINITY) {
          this.posinf++;
          max = x;
        } else if (x === Number.NEGATIVE_INFINITY) {
          this.neginf++;
          min = x;
        }
      }
    }
    this.min = min;
    this.max = max;
    this.zeros += zeros;
    const finite = count - nonFinite;
    if (finite === 0) return;
    const blockMean = (sum + carry) / finite;
    let m2 = 0;
    if (nonFinite === 0) {
      for (let i = 0; i < count; i++) {
        const d = values[i]! - blockMean;
        m2 += d * d;
      }
    } else {
      for (let i = 0; i < count; i++) {
        const x = values[i]!;
        if (x - x !== 0) continue;
        const d = x - blockMean;
        m2 += d * d;
      }
    }
    // Chan, Golub and LeVeque's update for two sets' mean and sum of squared deviations.
    const n = this.n + finite;
    const delta = blockMean - this.mean;
    this.mean += (delta * finite) / n;
    this.m2 += m2 + ((delta * delta * this.n) / n) * finite;
    this.n = n;
  }

  /** The statistics as {@link TensorStats} has them. */
  result(): Pick<TensorStats, "count" | "min" | "max" | "mean" | "std" | "nan" | "posinf" | "neginf" | "zeros"> {
    const count = this.n + this.posinf + this.neginf;
    const counts = { count, nan: this.nan, posinf: this.posinf, neginf: this.neginf, zeros: this.zeros };
    if (count === 0) return { ...counts, min: null, max: null, mean: null, std: null };
    if (this.posinf > 0 || this.neginf > 0) {
      const mean = this.posinf > 0 && this.neginf > 0 ? Number.NaN : this.posinf > 0 ? Number.POSITIVE_INFINITY : Number.NEGATIVE_INFINITY;
      return { ...counts, min: this.min, max: this.max, mean, std: Number.NaN };
    }
    return { ...counts, min: this.min, max: this.max, mean: this.mean, std: Math.sqrt(this.m2 / this.n) };
  }
}

/** Options of {@link tensorHistogram}. */
export interface HistogramOptions {
  /** Bins between `min` and `max`. Default 64. */
  bins?: number;
  /** The range; default: the tensor's finite min and max, found in a first pass. */
  min?: number;
  max?: number;
  signal?: AbortSignal;
}

/** Counts of a tensor's finite values in equal bins from `min` to `max` (the last bin includes `max`). */
export interface Histogram {
  min: number;
  max: number;
  counts: number[];
}

/**
 * A histogram of a tensor's finite values (NaN and infinities are counted by {@link tensorStats}),
 * or undefined when it has none or its dtype is not read as numbers (F4, F6, C64).
 */
export async function tensorHistogram(entry: TensorEntry, options: HistogramOptions = {}): Promise<Histogram | undefined> {
  const decode = valueDecoder(entry.dtype);
  const width = valueWidth(entry.dtype);
  if (decode === undefined || width === undefined) return undefined;
  let { min, max } = options;
  if (min === undefined || max === undefined) {
    const range = await finiteRange(entry, options.signal);
    if (range === undefined) return undefined;
    min ??= range.min;
    max ??= range.max;
  }
  const bins = options.bins ?? 64;
  const counts = new Array<number>(bins).fill(0);
  const scale = max > min ? bins / (max - min) : 0;
  await eachBlock(entry, options.signal, (values, count) => {
    for (let i = 0; i < count; i++) {
      const x = values[i]!;
      if (!(x >= min && x <= max)) continue; // NaN, infinities, outside the range
      counts[Math.min(bins - 1, Math.floor((x - min) * scale))]!++;
    }
  });
  return { min, max, counts };
}

/** The finite min and max of a tensor, or undefined when it has no finite value. */
async function finiteRange(entry: TensorEntry, signal: AbortSignal | undefined): Promise<{ min: number; max: number } | undefined> {
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  await eachBlock(entry, signal, (values, count) => {
    for (let i = 0; i < count; i++) {
      const x = values[i]!;
      if (x - x !== 0) continue;
      if (x < min) min = x;
      if (x > max) max = x;
    }
  });
  return min <= max ? { min, max } : undefined;
}

/** Each block of a tensor's values, decoded as float64 (a dtype read as numbers). */
async function eachBlock(entry: TensorEntry, signal: AbortSignal | undefined, visit: (values: Float64Array, count: number) => void): Promise<void> {
  const decode = valueDecoder(entry.dtype)!;
  const width = valueWidth(entry.dtype)!;
  const reader = new BlockReader(entry, BLOCK_BYTES);
  const values = new Float64Array(BLOCK_BYTES / width);
  for (let block = await reader.next(); block !== undefined; block = await reader.next()) {
    const count = block.byteLength / width;
    decode(block, count, values);
    visit(values, count);
    signal?.throwIfAborted();
  }
}
