/**
 * Sharded output: a checkpoint split into `model-00001-of-0000N.safetensors` files and the
 * `model.safetensors.index.json` that maps each tensor to its shard, as the Hugging Face tools
 * write them. The split is huggingface_hub's `split_torch_state_dict_into_shards`, the index is
 * transformers' `save_pretrained`'s, byte for byte. One shard is open at a time; all of them and
 * the index appear together, or none does.
 */
import { mkdir, readdir, rm, stat, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import {
  type ByteSink,
  type SplitFile,
  StConvertError,
  type TensorEntry,
  type TensorFormat,
  type TensorSource,
  createMetadata,
  splitAliases,
} from "@st-convert/core";
import { type AtomicFileSink, createFileSink } from "@st-convert/core/node";
import { parameterCount } from "./text.js";

/** huggingface_hub's default limit (`MAX_SHARD_SIZE`, 5 GB), used when the output names an index. */
export const DEFAULT_MAX_SHARD_SIZE = 5 * 10 ** 9;

const SIZE_UNITS: Readonly<Record<string, number>> = {
  "": 1,
  B: 1,
  KB: 10 ** 3,
  MB: 10 ** 6,
  GB: 10 ** 9,
  TB: 10 ** 12,
  KIB: 2 ** 10,
  MIB: 2 ** 20,
  GIB: 2 ** 30,
  TIB: 2 ** 40,
};

/**
 * `5GB` → 5,000,000,000 (huggingface_hub's units: KB, MB, GB, TB are powers of 10), `2GiB` →
 * 2^31 (KiB, MiB, GiB, TiB are powers of 2), `1.5GB`, or a plain number of bytes.
 * @throws StConvertError `InvalidOption` for anything else, or a size below one byte.
 */
export function parseShardSize(text: string | number): number {
  if (typeof text === "number") {
    if (!Number.isSafeInteger(text) || text < 1)
      throw new StConvertError("InvalidOption", `--max-shard-size ${text}: expected a whole number of bytes of at least 1`);
    return text;
  }
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const multiplier = match === null ? undefined : SIZE_UNITS[match[2]!.toUpperCase()];
  if (match === null || multiplier === undefined) {
    throw new StConvertError("InvalidOption", `--max-shard-size ${JSON.stringify(text)}: expected a size such as 5GB, 500MB, 2GiB or a number of bytes`);
  }
  // As huggingface_hub computes it: int(float(value) * multiplier).
  const bytes = Math.trunc(Number(match[1]) * multiplier);
  if (!Number.isSafeInteger(bytes) || bytes < 1) throw new StConvertError("InvalidOption", `--max-shard-size ${JSON.stringify(text)}: out of range`);
  return bytes;
}

/** Where a sharded checkpoint goes: its folder, the index's name and the shards' name pattern. */
export interface ShardTarget {
  dir: string;
  /** `model.safetensors.index.json`. */
  indexName: string;
  /** The name of the checkpoint unsharded, `model.safetensors`; shards insert `-0000k-of-0000n` before the extension. */
  weightsName: string;
}

/** The default checkpoint names, per output format (as transformers names them). */
const DEFAULT_WEIGHTS: Readonly<Record<string, string>> = { safetensors: "model.safetensors", torch: "pytorch_model.bin" };

/** True when a format can be written as shards (one with a default checkpoint name). */
export function shardable(format: TensorFormat): boolean {
  return DEFAULT_WEIGHTS[format.name] !== undefined || format.splitSet !== undefined;
}

/**
 * The target of a sharded output given as an index (`out/model.safetensors.index.json`), a
 * checkpoint name (`out/model.safetensors`), or a folder (existing, or ending in a separator).
 */
export async function shardTarget(output: string, format: TensorFormat): Promise<ShardTarget> {
  const isDir =
    /[\\/]$/.test(output) ||
    (await stat(output).then(
      (s) => s.isDirectory(),
      () => false,
    ));
  const fallback = DEFAULT_WEIGHTS[format.name] ?? format.splitSet?.defaultName;
  if (fallback === undefined) throw new StConvertError("InvalidOption", `${format.name} cannot be written as shards; write safetensors or torch`);
  const name = basename(output);
  const weightsName = name.endsWith(".index.json") ? name.slice(0, -".index.json".length) : name;
  // A name that is not a checkpoint's (`out`, `model-v2`) is a folder to make, as cp -r's target is.
  const isCheckpointName = format.extensions.some((extension) => weightsName.length > extension.length && weightsName.endsWith(extension));
  if (isDir || !isCheckpointName) return { dir: output.replace(/[\\/]+$/, "") || ".", indexName: `${fallback}.index.json`, weightsName: fallback };
  return { dir: dirname(output), indexName: `${weightsName}.index.json`, weightsName };
}

/** The file name of shard `k` (1-based) of `n`: `model-00002-of-00003.safetensors`. */
export function shardName(weightsName: string, k: number, n: number): string {
  const dot = weightsName.lastIndexOf(".");
  const [stem, extension] = dot > 0 ? [weightsName.slice(0, dot), weightsName.slice(dot)] : [weightsName, ""];
  return `${stem}-${String(k).padStart(5, "0")}-of-${String(n).padStart(5, "0")}${extension}`;
}

/** How tensors fall into shards. */
/** What a shard plan and an index need of a tensor. */
export type ShardedTensor = Pick<TensorEntry, "name" | "shape" | "byteLength">;

export interface ShardPlan<T extends ShardedTensor = TensorEntry> {
  /**
   * File names and their tensors, in the order written; one unsharded file when `sharded` is false.
   * `aliases`: the names the written file holds as another tensor's (tied weights, in a format
   * that holds them as names), which the index lists too.
   */
  shards: { name: string; tensors: T[]; aliases?: string[] }[];
  sharded: boolean;
  totalSize: number;
  totalParameters: number;
}

/**
 * The split of huggingface_hub's `split_state_dict_into_shards_factory`: tensors in the source's
 * order; the open shard is closed when the next tensor would take it past the limit; a tensor
 * larger than the limit gets a shard of its own at once, while the open shard stays open (so it
 * may come before that shard in the list); a single shard is the unsharded checkpoint.
 */
export function planShards<T extends ShardedTensor>(tensors: readonly T[], maxShardSize: number, weightsName: string): ShardPlan<T> {
  const groups: T[][] = [];
  let current: T[] = [];
  let currentSize = 0;
  let totalSize = 0;
  let totalParameters = 0;
  for (const tensor of tensors) {
    totalParameters += parameterCount(tensor.shape);
    totalSize += tensor.byteLength;
    if (tensor.byteLength > maxShardSize) {
      groups.push([tensor]);
      continue;
    }
    if (currentSize + tensor.byteLength > maxShardSize) {
      groups.push(current);
      current = [];
      currentSize = 0;
    }
    current.push(tensor);
    currentSize += tensor.byteLength;
  }
  if (current.length > 0) groups.push(current);
  if (groups.length === 0) groups.push([]);
  const sharded = groups.length > 1;
  return {
    shards: groups.map((group, i) => ({ name: sharded ? shardName(weightsName, i + 1, groups.length) : weightsName, tensors: group })),
    sharded,
    totalSize,
    totalParameters,
  };
}

/**
 * The index as transformers writes it: `json.dumps(index, indent=2, sort_keys=True) + "\n"`
 * (keys sorted by code point, non-ASCII escaped as `\uXXXX`), with `total_parameters` and
 * `total_size` in its metadata.
 */
export function indexJson(plan: ShardPlan<ShardedTensor>): string {
  const weightMap = new Map<string, string>();
  for (const shard of plan.shards) {
    for (const t of shard.tensors) weightMap.set(t.name, shard.name);
    for (const name of shard.aliases ?? []) weightMap.set(name, shard.name);
  }
  const entries = [...weightMap].sort(([a], [b]) => compareCodePoints(a, b));
  const map = entries.length === 0 ? "{}" : `{\n${entries.map(([k, v]) => `    ${pyString(k)}: ${pyString(v)}`).join(",\n")}\n  }`;
  return `{\n  "metadata": {\n    "total_parameters": ${plan.totalParameters},\n    "total_size": ${plan.totalSize}\n  },\n  "weight_map": ${map}\n}\n`;
}

/** Python's `str` order: by code point (JavaScript's default compares UTF-16 units). */
function compareCodePoints(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i]!.codePointAt(0)! - y[i]!.codePointAt(0)!;
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

const SHORT_ESCAPES: Readonly<Record<string, string>> = { '"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/** A string as Python's `json.dumps` writes it with `ensure_ascii=True`. */
function pyString(text: string): string {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    const code = text.charCodeAt(i);
    if (SHORT_ESCAPES[ch] !== undefined) out += SHORT_ESCAPES[ch];
    else if (code < 0x20 || code > 0x7e) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}

/** What {@link writeShards} wrote. */
export interface ShardsWritten {
  /** The index's path, or the single file's when the checkpoint fit in one shard. */
  output: string;
  files: string[];
  removed: string[];
}

/**
 * Writes `source` as shards of at most `split` bytes (a larger tensor alone), or as `split` groups
 * them, each through `options.write` (the output format's writer), plus the index, which maps
 * every tensor and every alias the shard holds as a name (`options.aliasesOf`) to its shard. Every file goes to a temporary name first; they are put in place only when all
 * were written. With `force`, an existing set is replaced whole: shards of the same name pattern
 * that the new set does not name are removed, and so is a stale index or unsharded file.
 * @throws StConvertError `OutputExists` when a file of the new set exists and `force` is off.
 */
export async function writeShards(
  source: TensorSource,
  target: ShardTarget,
  split: number | ((tensors: readonly TensorEntry[]) => ShardPlan),
  options: {
    force: boolean;
    write: (part: TensorSource, sink: ByteSink, fileName: string) => Promise<void>;
    /** The names a written shard holds as another tensor's, as the output format reads the file back. */
    aliasesOf?: (path: string, fileName: string) => Promise<readonly string[]>;
    /** The output format's own split set (its `splitSet.plan`), written instead of huggingface_hub's shards and index. */
    splitSet?: (source: TensorSource, weightsName: string) => Promise<readonly SplitFile[]>;
  },
): Promise<ShardsWritten> {
  const splitFiles = await options.splitSet?.(source, target.weightsName);
  // A set of the format's own has no index: each file is found by its name, and writes itself.
  const fileByName = new Map(splitFiles?.map((f) => [f.name, f]));
  const plan: ShardPlan =
    splitFiles !== undefined
      ? { shards: splitFiles.map((f) => ({ name: f.name, tensors: [...f.tensors] })), sharded: false, totalSize: 0, totalParameters: 0 }
      : typeof split === "number"
        ? planShards(source.tensors, split, target.weightsName)
        : split(source.tensors);
  const names = plan.shards.map((s) => s.name);
  if (plan.sharded) names.push(target.indexName);
  if (!options.force) {
    for (const name of names) {
      if (
        await stat(join(target.dir, name)).then(
          () => true,
          () => false,
        )
      ) {
        throw new StConvertError("OutputExists", "a file of the sharded output exists; pass --force to replace the set", { file: join(target.dir, name) });
      }
    }
  }
  // A folder that does not exist yet is made, and removed again if the conversion fails.
  const created = await mkdir(target.dir, { recursive: true }).catch((error: unknown) => {
    throw new StConvertError("Io", `cannot create the output folder: ${(error as Error).message}`, { file: target.dir, cause: error });
  });
  const sinks: AtomicFileSink[] = [];
  const open = async (name: string): Promise<AtomicFileSink> => {
    const sink = await createFileSink(join(target.dir, name), { force: options.force, deferPlacement: true });
    if (sink.kind !== "file") {
      await sink.abort();
      throw new StConvertError("Io", "a shard must be a regular file", { file: join(target.dir, name) });
    }
    sinks.push(sink);
    return sink;
  };
  try {
    // Aliases go with the tensor they name, into its shard alone: elsewhere they would name
    // nothing (and a writer would report them dropped). The rest of the metadata goes everywhere.
    const { aliases, rest } = splitAliases(source.metadata, source.tensors);
    for (const shard of plan.shards) {
      const sink = await open(shard.name);
      const file = fileByName.get(shard.name);
      const held = new Set(shard.tensors.map((t) => t.name));
      const own = Object.entries(aliases).filter(([, kept]) => held.has(kept));
      if (file !== undefined) await file.write(sink);
      else {
        const metadata = plan.sharded ? (rest === null && own.length === 0 ? null : createMetadata([...Object.entries(rest ?? {}), ...own])) : source.metadata;
        await options.write({ metadata, tensors: shard.tensors }, sink, sink.name);
      }
      await sink.close();
      if (plan.sharded && own.length > 0 && options.aliasesOf !== undefined) shard.aliases = [...(await options.aliasesOf(sink.tempPath, sink.name))];
    }
    if (plan.sharded) {
      const sink = await open(target.indexName);
      await sink.write(new TextEncoder().encode(indexJson(plan)));
      await sink.close();
    }
    for (const sink of sinks) await sink.place();
  } catch (error) {
    for (const sink of sinks) await sink.abort();
    if (created !== undefined) await rm(created, { recursive: true }).catch(() => {});
    throw error;
  }
  const setOfFiles = splitFiles !== undefined && splitFiles.length > 1;
  const removed = options.force ? await removeReplaced(target, new Set(names), plan.sharded || setOfFiles) : [];
  const files = names.map((n) => join(target.dir, n));
  return { output: join(target.dir, plan.sharded ? target.indexName : splitFiles !== undefined ? names[0]! : target.weightsName), files, removed };
}

/** Files of an earlier set that the new one replaces: other shards of the pattern, a stale index or single file. */
async function removeReplaced(target: ShardTarget, kept: Set<string>, sharded: boolean): Promise<string[]> {
  const dot = target.weightsName.lastIndexOf(".");
  const [stem, extension] = dot > 0 ? [target.weightsName.slice(0, dot), target.weightsName.slice(dot)] : [target.weightsName, ""];
  const pattern = new RegExp(`^${escapeRegExp(stem)}-\\d{5}-of-\\d{5}${escapeRegExp(extension)}$`);
  const removed: string[] = [];
  for (const name of await readdir(target.dir).catch(() => [] as string[])) {
    const stale = !kept.has(name) && (pattern.test(name) || name === (sharded ? target.weightsName : target.indexName));
    if (!stale) continue;
    const path = join(target.dir, name);
    if (
      !(await stat(path).then(
        (s) => s.isFile(),
        () => false,
      ))
    )
      continue;
    await unlink(path).then(
      () => removed.push(path),
      () => {},
    );
  }
  return removed;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
