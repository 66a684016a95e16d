/**
 * `--quantize TYPE` and `--quantize NAME_REGEX:TYPE`: which tensors become blocks of which ggml
 * type, and the streaming of their values into the block kernels (quants/). Eligible: F32, F16
 * and BF16 tensors of two or more dimensions whose rows are whole blocks; F16 and BF16 are widened
 * to F32 first, exactly, as llama.cpp does. A tensor a `NAME_REGEX:TYPE` rule names that cannot be
 * quantized is an error; under a bare `TYPE` the others keep their dtype, and a warning says which.
 */
import { type CastKernel, type Dtype, StConvertError, type TensorEntry, castKernel, exactChunks, quoteName } from "@st-convert/core";
import { ggmlTypeInfo, quantizeRows } from "./quants/index.js";

/** The block types `--quantize` makes. */
export const QUANTIZE_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"] as const;

/** How one tensor is quantized. */
export interface QuantizePlan {
  readonly type: number;
  readonly typeName: string;
  /** Bytes of its blocks. */
  readonly byteLength: number;
}

interface Rule {
  readonly pattern: RegExp | undefined;
  readonly text: string;
  readonly type: number;
  readonly typeName: string;
}

const QUANTIZABLE_DTYPES: ReadonlySet<Dtype> = new Set(["F32", "F16", "BF16"]);

function typeId(name: string): number | undefined {
  for (let id = 0; id < 64; id++) if (ggmlTypeInfo(id)?.name === name) return id;
  return undefined;
}

/**
 * Parses `--quantize` values: `TYPE` or `NAME_REGEX:TYPE` (split at the last colon).
 * @throws StConvertError `InvalidOption` for an unknown type or an invalid expression.
 */
export function parseQuantizeRules(values: readonly string[]): Rule[] {
  return values.map((text) => {
    const at = text.lastIndexOf(":");
    const typeName = (at < 0 ? text : text.slice(at + 1)).toUpperCase();
    const type = (QUANTIZE_TYPES as readonly string[]).includes(typeName) ? typeId(typeName) : undefined;
    if (type === undefined) {
      throw new StConvertError("InvalidOption", `--quantize ${JSON.stringify(text)}: the type is not one of ${QUANTIZE_TYPES.join(", ")}`);
    }
    let pattern: RegExp | undefined;
    if (at >= 0) {
      try {
        pattern = new RegExp(text.slice(0, at), "u");
      } catch (error) {
        throw new StConvertError("InvalidOption", `--quantize ${JSON.stringify(text)}: ${(error as Error).message}`);
      }
    }
    return { pattern, text, type, typeName };
  });
}

/** Why `entry` cannot become blocks of `type`, or undefined when it can. */
function ineligible(entry: TensorEntry, type: number, blocks: string | undefined): string | undefined {
  const info = ggmlTypeInfo(type)!;
  if (blocks !== undefined) return `already ${blocks} blocks, passed through as they are`;
  if (!QUANTIZABLE_DTYPES.has(entry.dtype)) return `${entry.dtype} is not F32, F16 or BF16`;
  if (entry.shape.length < 2) return `${entry.shape.length} dimension${entry.shape.length === 1 ? "" : "s"} (quantized tensors have 2 or more)`;
  const row = entry.shape[entry.shape.length - 1]!;
  if (row % info.blockSize !== 0) return `rows of ${row} are not whole ${info.name} blocks of ${info.blockSize}`;
  return undefined;
}

/**
 * Each tensor the rules quantize, with its plan; the last rule that applies decides.
 * @throws StConvertError `InvalidOption` for a malformed rule, `InvalidArgument` for a tensor a
 *   `NAME_REGEX:TYPE` rule names that cannot be quantized.
 */
export function planQuantization(
  tensors: readonly TensorEntry[],
  values: readonly string[],
  onWarning?: (message: string) => void,
  /** The ggml type of a tensor that holds quantized blocks already (kept from a GGUF). */
  blocksOf: (entry: TensorEntry) => string | undefined = () => undefined,
): Map<string, QuantizePlan> {
  const plans = new Map<string, QuantizePlan>();
  if (values.length === 0) return plans;
  const rules = parseQuantizeRules(values);
  const kept: string[] = [];
  for (const entry of tensors) {
    let rule: Rule | undefined;
    for (const r of rules) {
      if (r.pattern === undefined || r.pattern.test(entry.name)) rule = r;
    }
    if (rule === undefined) continue;
    const why = ineligible(entry, rule.type, blocksOf(entry));
    if (why !== undefined) {
      if (rule.pattern !== undefined) {
        throw new StConvertError("InvalidArgument", `--quantize ${rule.text} names it, but it cannot be quantized: ${why}`, { tensor: entry.name });
      }
      kept.push(`${quoteName(entry.name)} (${why})`);
      continue;
    }
    const info = ggmlTypeInfo(rule.type)!;
    const elements = entry.shape.reduce((a, b) => a * b, 1);
    plans.set(entry.name, { type: rule.type, typeName: rule.typeName, byteLength: (elements / info.blockSize) * info.typeSize });
  }
  if (kept.length > 0) onWarning?.(`kept as they are, not quantized: ${kept.join(", ")}`);
  return plans;
}

/** Elements quantized per call: rows are gathered up to about this many. */
const BATCH_ELEMENTS = 256 * 1024;

/** The blocks of `entry` quantized as `plan` says, a batch of whole rows at a time. */
export async function* quantizedChunks(entry: TensorEntry, plan: QuantizePlan): AsyncGenerator<Uint8Array> {
  const info = ggmlTypeInfo(plan.type)!;
  const row = entry.shape[entry.shape.length - 1]!;
  const width = entry.dtype === "F32" ? 4 : 2;
  const rowsPerBatch = Math.max(1, Math.floor(BATCH_ELEMENTS / Math.max(1, row)));
  const batchElements = rowsPerBatch * row;
  const staged = new Uint8Array(batchElements * width);
  const values = new Float32Array(batchElements);
  const widen: CastKernel | undefined = entry.dtype === "F32" ? undefined : castKernel(entry.dtype, "F32");
  let filled = 0;
  const flush = (): Uint8Array => {
    const n = filled / width;
    const floats = values.subarray(0, n);
    if (widen === undefined) new Uint8Array(floats.buffer, 0, filled).set(staged.subarray(0, filled));
    else widen(staged, new Uint8Array(floats.buffer, 0, n * 4), n);
    const out = new Uint8Array((n / info.blockSize) * info.typeSize);
    try {
      quantizeRows(plan.type, floats, out);
    } catch (error) {
      throw new StConvertError("Unsupported", `quantizing to ${plan.typeName}: ${(error as Error).message}`, { tensor: entry.name });
    }
    filled = 0;
    return out;
  };
  for await (const chunk of exactChunks(entry)) {
    for (let at = 0; at < chunk.byteLength; ) {
      const take = Math.min(chunk.byteLength - at, staged.byteLength - filled);
      staged.set(chunk.subarray(at, at + take), filled);
      filled += take;
      at += take;
      if (filled === staged.byteLength) yield flush();
    }
  }
  if (filled > 0) yield flush();
}
