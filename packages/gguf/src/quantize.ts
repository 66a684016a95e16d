/**
 * `--quantize TYPE` and `--quantize NAME_REGEX:TYPE`: which tensors become blocks of which ggml
 * type, and the streaming of their values into the block kernels (quants/). Eligible: F32, F16
 * and BF16 tensors of two or more dimensions whose rows are whole blocks; F16 and BF16 are widened
 * to F32 first, exactly, as llama.cpp does. A tensor a `NAME_REGEX:TYPE` rule names that cannot be
 * quantized is an error; under a bare `TYPE` the others keep their dtype, and a warning says which.
 */
import { type Dtype, type FormatKernels, type KernelPool, StConvertError, type TensorEntry, castKernel, exactChunks, quoteName } from "@st-convert/core";
import { GgmlType, Q8_0_SLOT_BYTES, ggmlTypeInfo, giveBackQ8_0Slot, quantizeRows, quantizesAtReadSpeed, takeQ8_0Slot } from "./quants/index.js";

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
 * For llama-quantize's names of a mix (`Q4_K_M`: its file types, which pick a type per tensor by its
 * role in the model, mostly the base type and some tensors at another), what to type instead.
 */
function mixHint(typeName: string): string {
  const mix = /^(Q\d_K)_(S|M|L)$/.exec(typeName);
  if (mix === null || !(QUANTIZE_TYPES as readonly string[]).includes(mix[1]!)) return "";
  return ` (${typeName} is llama-quantize's mix, mostly ${mix[1]}, some tensors at another type by their role; here each rule names one type: --quantize ${mix[1]}, and NAME_REGEX:TYPE rules for the tensors to keep at more bits, e.g. --quantize '^output\\.weight$|ffn_down\\.weight:Q6_K')`;
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
      throw new StConvertError("InvalidOption", `--quantize ${JSON.stringify(text)}: the type is not one of ${QUANTIZE_TYPES.join(", ")}${mixHint(typeName)}`);
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
 * Each tensor the rules quantize, with its plan; the last rule that applies decides. Warns of the
 * tensors a bare `TYPE` leaves as they are, and of a `NAME_REGEX:TYPE` rule that matches no name.
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
  /** The tensors kept as they are under a bare TYPE, by why (one reason often holds for dozens: every norm). */
  const kept = new Map<string, string[]>();
  const matched = new Set<Rule>();
  for (const entry of tensors) {
    let rule: Rule | undefined;
    for (const r of rules) {
      if (r.pattern === undefined || r.pattern.test(entry.name)) {
        rule = r;
        matched.add(r);
      }
    }
    if (rule === undefined) continue;
    const why = ineligible(entry, rule.type, blocksOf(entry));
    if (why !== undefined) {
      if (rule.pattern !== undefined) {
        throw new StConvertError("InvalidArgument", `--quantize ${rule.text} names it, but it cannot be quantized: ${why}`, { tensor: entry.name });
      }
      const names = kept.get(why);
      if (names === undefined) kept.set(why, [quoteName(entry.name)]);
      else names.push(quoteName(entry.name));
      continue;
    }
    const info = ggmlTypeInfo(rule.type)!;
    const elements = entry.shape.reduce((a, b) => a * b, 1);
    plans.set(entry.name, { type: rule.type, typeName: rule.typeName, byteLength: (elements / info.blockSize) * info.typeSize });
  }
  if (kept.size > 0) {
    const groups = [...kept].map(([why, names]) => `${names.join(", ")} (${why})`);
    onWarning?.(`kept as they are, not quantized: ${groups.join("; ")}`);
  }
  // A rule that names nothing is most likely a mistyped name: said, not silently ignored.
  for (const rule of rules) {
    if (rule.pattern !== undefined && !matched.has(rule)) onWarning?.(`--quantize ${rule.text}: no tensor's name matches ${rule.pattern.source}`);
  }
  return plans;
}

/**
 * Values quantized per kernel call (4 MiB of F32): a multiple of every block size (32, 256), large
 * enough that a call's cost and a message to a thread vanish, small enough that the batches in
 * flight stay a few tens of MB.
 */
const BATCH_ELEMENTS = 1024 * 1024;

/**
 * Tensors from this many values have their batches quantized on a kernel pool's threads, when the
 * writer is given one: below it, starting the threads (about 40 ms) costs more than it saves.
 */
const POOL_FROM = 4 * BATCH_ELEMENTS;

/** Widened F16/BF16 values, reused by every call on this thread. */
let widened = new Float32Array(0);

/**
 * Quantizes one batch: the raw little-endian F32, F16 or BF16 values `raw` (F16 and BF16 widened to
 * F32 first, exactly) into the blocks `out`. Returns both, so that a thread that ran it hands their
 * memory back. The writer's kernel, run here or on a kernel pool's thread.
 * @throws RangeError as `quantizeRows`.
 */
export function quantizeBatch(type: number, dtype: Dtype, raw: Uint8Array, out: Uint8Array): [Uint8Array, Uint8Array] {
  let values: Float32Array;
  if (dtype === "F32") {
    values = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  } else {
    const n = raw.byteLength / 2;
    if (widened.length < n) widened = new Float32Array(n);
    values = widened.subarray(0, n);
    castKernel(dtype, "F32")(raw, new Uint8Array(values.buffer, 0, n * 4), n);
  }
  quantizeRows(type, values, out);
  return [raw, out];
}

/** What a kernel pool runs of this package, by name (`ggufFormat.kernels`). */
export const GGUF_KERNELS: FormatKernels = { quantize: quantizeBatch };

/**
 * The raw values of `entry` in batches of `batchBytes` (the last may be shorter), each read into a
 * buffer of `buffers` (taken from its end; new ones when it is empty), which the caller gives back
 * when done with a batch. Read straight from the file where the tensor lies as it is and the source
 * reads into a buffer (no copy: the read runs on Node's thread pool); else gathered from its chunks.
 */
async function* rawBatches(entry: TensorEntry, batchBytes: number, buffers: Uint8Array[]): AsyncGenerator<Uint8Array> {
  const take = (n: number) => (buffers.pop() ?? new Uint8Array(batchBytes)).subarray(0, n);
  const extent = entry.extent?.();
  if (extent !== undefined && extent.check === undefined && extent.source.readInto !== undefined) {
    // One read at a time (two in flight cost the kernel twice the system time: 1 GiB F32 → Q8_0
    // on one thread, 0.58 s read by read, 1.0 s two at once), the next batch's read running on
    // Node's thread pool while this one is quantized: medians 0.53 s against 0.58 s read then
    // quantize, in 7 interleaved runs (2026-12-06).
    const source = extent.source;
    const read = (at: number) => {
      const batch = take(Math.min(batchBytes, entry.byteLength - at));
      const done = source.readInto!(extent.offset + at, batch).then(() => batch);
      // Marked handled now: a failed read is reported when awaited, not as an unhandled rejection.
      done.catch(() => {});
      return done;
    };
    let reading: Promise<Uint8Array> | undefined = entry.byteLength > 0 ? read(0) : undefined;
    try {
      for (let at = 0; reading !== undefined; ) {
        const batch = await reading;
        at += batch.byteLength;
        extent.copied?.(at);
        reading = at < entry.byteLength ? read(at) : undefined;
        yield batch;
      }
    } finally {
      // Stopped early: the read in flight settles before its buffer is let go.
      await reading?.catch(() => {});
    }
    return;
  }
  let batch = take(Math.min(batchBytes, entry.byteLength));
  let filled = 0;
  let left = entry.byteLength;
  for await (const chunk of exactChunks(entry, { chunkSize: batchBytes, reuse: true })) {
    for (let at = 0; at < chunk.byteLength; ) {
      const n = Math.min(chunk.byteLength - at, batch.byteLength - filled);
      batch.set(chunk.subarray(at, at + n), filled);
      filled += n;
      at += n;
      if (filled === batch.byteLength) {
        left -= filled;
        yield batch;
        filled = 0;
        if (left > 0) batch = take(Math.min(batchBytes, left));
      }
    }
  }
}

/**
 * The blocks of `entry` quantized as `plan` says, a batch at a time. With a kernel pool (and a
 * tensor and a kernel worth it), up to two batches per thread are quantized at once while the next
 * are read; the blocks still come out in order. Blocks never span rows, so a batch is any whole number of blocks.
 * @throws StConvertError `Unsupported` when the kernel fails, and what the reader throws.
 */
export async function* quantizedChunks(entry: TensorEntry, plan: QuantizePlan, pool?: KernelPool): AsyncGenerator<Uint8Array> {
  const info = ggmlTypeInfo(plan.type)!;
  const width = entry.dtype === "F32" ? 4 : 2;
  const elements = entry.byteLength / width;
  const pooled = pool !== undefined && pool.threads > 1 && elements >= POOL_FROM && !quantizesAtReadSpeed(plan.type) ? pool : undefined;
  const depth = pooled === undefined ? 1 : 2 * pooled.threads;
  const inputs: Uint8Array[] = [];
  const outputs: Uint8Array[] = [];
  const outBytes = (BATCH_ELEMENTS / info.blockSize) * info.typeSize;
  const failed = (error: unknown) => new StConvertError("Unsupported", `quantizing to ${plan.typeName}: ${(error as Error).message}`, { tensor: entry.name });
  const quantize = (raw: Uint8Array): Promise<[Uint8Array, Uint8Array]> => {
    const out = (outputs.pop() ?? new Uint8Array(outBytes)).subarray(0, (raw.byteLength / width / info.blockSize) * info.typeSize);
    if (pooled === undefined) {
      try {
        return Promise.resolve(quantizeBatch(plan.type, entry.dtype, raw, out));
      } catch (error) {
        return Promise.reject(failed(error));
      }
    }
    const running = pooled.run("gguf", "quantize", [plan.type, entry.dtype, raw, out], [raw.buffer as ArrayBuffer, out.buffer as ArrayBuffer]);
    return (running as Promise<[Uint8Array, Uint8Array]>).catch((error: unknown) => {
      throw failed(error);
    });
  };
  // Q8_0 of F32 on this thread: values read into the kernel's own memory, blocks written there
  // (two batches of values, one read while the other is quantized, and one of blocks), where it has
  // slots free; other buffers are copied in and out.
  const slots: Uint8Array[] = [];
  if (pooled === undefined && plan.type === GgmlType.Q8_0 && entry.dtype === "F32" && BATCH_ELEMENTS * 4 <= Q8_0_SLOT_BYTES) {
    for (const [list, bytes] of [
      [inputs, BATCH_ELEMENTS * 4],
      [inputs, BATCH_ELEMENTS * 4],
      [outputs, outBytes],
    ] as const) {
      const slot = takeQ8_0Slot(bytes);
      if (slot === undefined) break;
      slots.push(slot);
      list.push(slot);
    }
  }
  const pending: Promise<[Uint8Array, Uint8Array]>[] = [];
  const reading = rawBatches(entry, BATCH_ELEMENTS * width, inputs);
  try {
    for (let more = true; more || pending.length > 0; ) {
      while (more && pending.length < depth) {
        const next = await reading.next();
        if (next.done === true) more = false;
        else {
          const running = quantize(next.value);
          // Marked handled now: a failure is reported when its turn to be awaited comes.
          running.catch(() => {});
          pending.push(running);
        }
      }
      if (pending.length === 0) break;
      const [raw, out] = await pending.shift()!;
      // Whole again (the last batch is shorter), where they lie (a slot is part of a larger memory).
      inputs.push(new Uint8Array(raw.buffer, raw.byteOffset, BATCH_ELEMENTS * width));
      yield out;
      // The writer has written it (a sink keeps no reference once its write settled).
      outputs.push(new Uint8Array(out.buffer, out.byteOffset, outBytes));
    }
  } finally {
    await reading.return(undefined);
    await Promise.allSettled(pending);
    // Nothing reads into them or writes from them any more.
    for (const slot of slots) giveBackQ8_0Slot(slot);
  }
}
