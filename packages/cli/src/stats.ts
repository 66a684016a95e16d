/**
 * `stats()`: each tensor's min, max, mean and population standard deviation over its non-NaN
 * values, and its counts of NaN, +Inf, −Inf and zeros, as numpy's nan-functions compute them in
 * float64 (core's `tensorStats`, one pass over each tensor), for a file of any format.
 */
import { type ByteSource, type TensorStats, tensorStats } from "@st-convert/core";
import { type InspectOptions, readInput } from "./inspect.js";

export type { TensorStats };

/** Options of {@link stats}: how the input is read and which tensors are kept, as for `inspect()`. */
export interface StatsOptions extends InspectOptions {
  /** Stops at the next block. */
  signal?: AbortSignal;
  /** Called as tensor bytes are read: bytes done so far and the total. */
  onProgress?: (done: number, total: number) => void;
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
