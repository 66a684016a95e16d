/**
 * `diff()`: are two checkpoints the same? Any two inputs st-convert reads, in any formats, with
 * the same selection and transforms applied to both; core's `diffTensors` compares them (exact, or
 * as `torch.testing.assert_close` does), reading each tensor once from each file, in step.
 */
import { type ByteSource, type DiffTensorsOptions, type TensorDiff, type TensorsDiff, diffTensors } from "@st-convert/core";
import { type InspectOptions, readInput } from "./inspect.js";

export type { TensorDiff };

/** Options of {@link diff}: how both inputs are read (the same for each), and core's rule (`atol`, `rtol`, `compareMetadata`). */
export interface DiffOptions extends InspectOptions, DiffTensorsOptions {}

/** What {@link diff} found: core's comparison, with each side's file and format. */
export interface DiffResult extends TensorsDiff {
  a: { file: string; format: string };
  b: { file: string; format: string };
}

/**
 * Compares `a` with `b` (see {@link DiffOptions}).
 * @throws StConvertError naming the file and the tensor when an input is refused.
 */
export async function diff(a: string | ByteSource, b: string | ByteSource, options: DiffOptions = {}): Promise<DiffResult> {
  return readInput(a, options, (left) =>
    readInput(b, options, async (right) => ({
      a: { file: nameOf(a), format: left.format },
      b: { file: nameOf(b), format: right.format },
      ...(await diffTensors(left, right, options)),
    })),
  );
}

function nameOf(input: string | ByteSource): string {
  return typeof input === "string" ? input : (input.name ?? "<input>");
}
