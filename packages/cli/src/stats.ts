/**
 * `stats()`: each tensor's min, max, mean and population standard deviation over its non-NaN
 * values, and its counts of NaN, +Inf, −Inf and zeros, as numpy's `nanmin`, `nanmax`, `nanmean`
 * and `nanstd` compute them in float64. One pass over each tensor, in blocks.
 *
 * Mean and std: each block's sum is compensated (Neumaier) and its squares are summed about the
 * block's own mean; blocks are merged by Chan et al.'s pairwise update. Within 1e-9 relative of
 * numpy's pairwise sums for any size (a naive running sum of 2^28 float32 values is off by ~1e-8).
 * An infinity makes the mean that infinity (NaN with both signs) and the std NaN, as in numpy.
 */
import type { ByteSource, TensorEntry } from "@st-convert/core";
import { type InspectOptions, readInput } from "./inspect.js";
import { BLOCK_BYTES, BlockReader, valueDecoder, valueWidth } from "./tensorValues.js";

/** Options of {@link stats}: how the input is read and which tensors are kept, as for `inspect()`. */
export interface StatsOptions extends InspectOptions {
  /** Stops at the next block. */
  signal?: AbortSignal;
  /** Called as tensor bytes are read: bytes done so far and the total. */
  onProgress?: (done: number, total: number) => void;
}

/** One tensor's statistics. */
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

/** What {@link stats} found. */
export interface StatsResult {
  format: string;
  /** In the file's order. */
  tensors: TensorStats[];
}

/**
 * The statistics of every tensor of `input` (after `filter`, `exclude`, `rename` and `cast`).
 * @throws StConvertError naming the file and the tensor when the input is refused.
 */
export async function stats(input: string | ByteSource, options: StatsOptions = {}): Promise<StatsResult> {
  return readInput(input, options, async (found) => {
    const total = found.tensors.reduce((n, t) => n + t.byteLength, 0);
    let done = 0;
    const tensors: TensorStats[] = [];
    for (const entry of found.tensors) {
      tensors.push(
        await tensorStats(entry, options.signal, (bytes) => {
          done += bytes;
          options.onProgress?.(done, total);
        }),
      );
    }
    return { format: found.format, tensors };
  });
}

/** One tensor's statistics (see {@link stats}). */
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
