/**
 * Sharded safetensors checkpoints: `model.safetensors.index.json` (`{"metadata": {"total_size": …},
 * "weight_map": {tensor: shard file}}`, as huggingface_hub and transformers write it) read as one
 * source of tensors whose bytes stay in their shards until a writer asks for them.
 */
import { type ByteInput, type ByteSource, toByteSource } from "./ByteSource.js";
import { type SafetensorsReadOptions, readSafetensors } from "./safetensors.js";
import { parseShardIndex } from "./parseShardIndex.js";
import { StConvertError, withContext } from "./StConvertError.js";
import { type Metadata, type TensorEntry, type TensorSource, createMetadata, splitAliases } from "./Tensor.js";
import type { TensorFormat } from "./TensorFormat.js";

/**
 * Largest index file read, in bytes. Real ones hold a line per tensor (a few MB for the largest
 * models); huggingface.js stops at 250 MB, huggingface_hub reads whatever it is given.
 */
export const MAX_INDEX_SIZE = 64 * 1024 * 1024;

/** Options of {@link readSafetensorsIndex}: those of every shard's reader, and the index's own limit. */
export interface SafetensorsIndexReadOptions extends SafetensorsReadOptions {
  /** Largest index accepted, in bytes. Default {@link MAX_INDEX_SIZE}. */
  maxIndexSize?: number;
  /** Deepest nesting of the index's JSON accepted. Default `MAX_INDEX_DEPTH` (where Python's json stops). */
  maxIndexDepth?: number;
  /** Receives non-fatal notices (a `total_size` that is not the sum, metadata the shards disagree on). */
  onWarning?: (message: string) => void;
  /**
   * The tensors the caller keeps, by name. A shard whose mapped tensors are all left out is not
   * opened; a shard reader may leave out a tensor this refuses (see {@link ShardReader.read}), and
   * the index's check that each shard holds what it maps then asks only for the kept ones.
   * Default: every tensor.
   */
  include?: (name: string) => boolean;
  /**
   * For another format sharded the same way (`pytorch_model.bin.index.json`): the extensions a
   * shard name may end in and how a shard is read. Default: `.safetensors` files read by
   * {@link readSafetensors} with these options.
   */
  shards?: ShardReader;
}

/** What a shard holds, as {@link ShardReader.read} gives it. */
export interface ShardContents {
  readonly tensors: readonly TensorEntry[];
  /** Merged into the index's metadata when every shard agrees on an entry; null for none. */
  readonly metadata: Metadata | null;
  /**
   * Names the shard holds as other names' tensors (`{removed: kept}`, tied weights): they count as
   * held for the index's checks, and an index entry for one needs no tensor of its own.
   */
  readonly aliases?: Readonly<Record<string, string>>;
}

/** How the shards of a sharded format other than safetensors are named and read. */
export interface ShardReader {
  /** A shard name must end in one of these (`[".bin", ".pt"]`). */
  readonly extensions: readonly string[];
  read(source: ByteSource): Promise<ShardContents>;
}

/** A sharded checkpoint, read through its index. */
export interface ShardedSafetensors extends TensorSource {
  readonly format: "safetensors-index";
  /** Shard file names as the index gives them, in the order they first appear in `weight_map`. */
  readonly shards: readonly string[];
  /** The index's own `metadata` object (`total_size`, …), as parsed; null when it has none. */
  readonly indexMetadata: Readonly<Record<string, unknown>> | null;
  /** `{removed: kept}` over all shards (tied weights); also in `metadata`. */
  readonly aliases: Readonly<Record<string, string>>;
}

/**
 * Reads a sharded checkpoint: the index from `index`, each shard it names through
 * `openShard(name)` (the caller resolves the name beside the index and closes what it opened).
 * Tensors come in `weight_map` order. The metadata is what every shard's metadata agrees on (each
 * huggingface_hub shard holds `{"format": "pt"}`), then the index's own string entries for keys
 * the shards do not set (`total_size` and `total_parameters` left out: they describe the split;
 * on a clash the shards' value wins, with a notice), then every shard's aliases (`{removed:
 * kept}`, tied weights: a torch shard's second name for a tensor, or a safetensors shard's
 * `{"format": "pt"}` metadata entries naming one of its tensors).
 *
 * The index is judged as huggingface_hub's loader judges it (see {@link parseShardIndex}).
 *
 * Stricter than the loaders, which load whatever the shards hold: the index and the shards must
 * agree exactly, so that a conversion holds what the index promises.
 * @throws StConvertError `InvalidIndex` for an index that is not one (not JSON as Python reads it,
 *   a byte order mark, no `weight_map`, a shard name that is absolute, climbs out with `..`, or
 *   does not end in `.safetensors`), or
 *   shards that hold a tensor the index does not map to them; `TensorNotFound` for a mapped tensor
 *   its shard does not hold; `LimitExceeded` past `maxIndexSize` or `maxIndexDepth`; every shard's safetensors codes,
 *   naming the shard.
 */
export async function readSafetensorsIndex(
  index: ByteInput,
  openShard: (name: string) => Promise<ByteSource>,
  options: SafetensorsIndexReadOptions = {},
): Promise<ShardedSafetensors> {
  const source = toByteSource(index);
  const bad = (rule: string, tensor?: string): never => {
    throw new StConvertError("InvalidIndex", rule, { file: source.name, tensor });
  };
  const maxIndexSize = options.maxIndexSize ?? MAX_INDEX_SIZE;
  if (source.size > maxIndexSize) {
    throw new StConvertError("LimitExceeded", `the index has ${source.size} bytes, more than the limit of ${maxIndexSize} (maxIndexSize)`, {
      file: source.name,
    });
  }
  const reader: ShardReader = options.shards ?? { extensions: [".safetensors"], read: (shard) => readSafetensorsShard(shard, options) };
  const parsed = parseShardIndex(await source.read(0, source.size), {
    file: source.name,
    extensions: reader.extensions,
    maxDepth: options.maxIndexDepth,
    onWarning: options.onWarning,
  });
  const indexMetadata = parsed.metadata;
  const shardOf = parsed.weightMap;
  const shards = parsed.shards;

  const include = options.include ?? (() => true);
  const wanted = new Set<string>();
  for (const [name, shard] of shardOf) if (include(name)) wanted.add(shard);

  const byName = new Map<string, TensorEntry>();
  const aliased = new Set<string>();
  const allAliases: Record<string, string> = createMetadata();
  const shardMetadata: (Metadata | null)[] = [];
  for (const shard of shards) {
    if (!wanted.has(shard)) continue;
    try {
      const file = await reader.read(await openShard(shard));
      shardMetadata.push(file.metadata);
      const aliases = Object.keys(file.aliases ?? {});
      for (const name of [...file.tensors.map((t) => t.name), ...aliases]) {
        const mapped = shardOf.get(name);
        // A tied name may go unlisted (an index of huggingface_hub's safetensors form lists only the kept one).
        if (mapped !== shard && !(mapped === undefined && file.aliases?.[name] !== undefined)) {
          bad(
            mapped === undefined
              ? `shard ${JSON.stringify(shard)} holds a tensor the index does not list`
              : `shard ${JSON.stringify(shard)} holds a tensor the index maps to ${JSON.stringify(mapped)}`,
            name,
          );
        }
      }
      for (const tensor of file.tensors) byName.set(tensor.name, tensor);
      for (const name of aliases) aliased.add(name);
      Object.assign(allAliases, file.aliases);
    } catch (error) {
      throw withContext(error, { file: shard });
    }
  }
  const tensors: TensorEntry[] = [];
  for (const [name, shard] of shardOf) {
    const tensor = byName.get(name);
    if (tensor !== undefined) tensors.push(tensor);
    else if (!aliased.has(name) && include(name)) {
      throw new StConvertError("TensorNotFound", `the index maps it to ${JSON.stringify(shard)}, which does not hold it`, { file: source.name, tensor: name });
    }
  }

  const totalSize = indexMetadata?.total_size;
  const sum = tensors.reduce((n, t) => n + t.byteLength, 0);
  if (totalSize !== undefined && totalSize !== sum && options.include === undefined) {
    const shown = typeof totalSize === "number" ? String(totalSize) : JSON.stringify(totalSize);
    options.onWarning?.(`the index's total_size is ${shown}, but its tensors hold ${sum} bytes`);
  }
  return {
    format: "safetensors-index",
    metadata: mergedMetadata(agreedMetadata(shardMetadata, options.onWarning), indexMetadata, allAliases, options.onWarning),
    tensors,
    shards,
    indexMetadata,
    aliases: allAliases,
  };
}

/** A safetensors shard: its tensors, and the aliases its metadata records (`{"format": "pt", removed: kept}`). */
async function readSafetensorsShard(shard: ByteSource, options: SafetensorsReadOptions): Promise<ShardContents> {
  const file = await readSafetensors(shard, options);
  const { aliases, rest } = splitAliases(file.metadata, file.tensors);
  return { tensors: file.tensors, metadata: rest, aliases };
}

/**
 * Entries of the index's own metadata that describe the set of shards, not the tensors: a merged
 * file says its own size, and these would be wrong for any other split.
 */
const INDEX_ONLY_METADATA = new Set(["total_size", "total_parameters"]);

/**
 * The merged checkpoint's metadata: what the shards agree on, then the index's own string entries
 * for keys the shards do not set (on a clash the shards win, with a notice: each shard's header
 * is what a loader of that file sees), then every shard's aliases.
 */
function mergedMetadata(
  shards: Metadata | null,
  index: Readonly<Record<string, unknown>> | null,
  aliases: Readonly<Record<string, string>>,
  onWarning?: (message: string) => void,
): Metadata | null {
  const merged: [string, string][] = Object.entries(shards ?? {});
  for (const [key, value] of Object.entries(index ?? {})) {
    if (INDEX_ONLY_METADATA.has(key)) continue;
    if (typeof value !== "string") {
      onWarning?.(`the index's metadata ${JSON.stringify(key)} is not a string (a file's metadata holds strings only); dropped`);
      continue;
    }
    const shardValue = shards?.[key];
    if (shardValue === undefined) merged.push([key, value]);
    else if (shardValue !== value) {
      onWarning?.(
        `metadata ${JSON.stringify(key)} is ${JSON.stringify(value)} in the index but ${JSON.stringify(shardValue)} in the shards; the shards' value is kept`,
      );
    }
  }
  for (const [removed, kept] of Object.entries(aliases)) if (!merged.some(([key]) => key === removed)) merged.push([removed, kept]);
  return merged.length === 0 ? null : createMetadata(merged);
}

/** The metadata entries every shard has with the same value; a notice for each it drops. */
function agreedMetadata(all: readonly (Metadata | null)[], onWarning?: (message: string) => void): Metadata | null {
  if (all.length === 0 || all.every((m) => m === null)) return null;
  const keys = new Set(all.flatMap((m) => (m === null ? [] : Object.keys(m))));
  const agreed: [string, string][] = [];
  for (const key of keys) {
    const values = new Set(all.map((m) => m?.[key]));
    const [value] = values;
    if (values.size === 1 && value !== undefined) agreed.push([key, value]);
    else onWarning?.(`metadata ${JSON.stringify(key)} differs between shards (or some lack it); dropped`);
  }
  return createMetadata(agreed);
}

/** Sharded safetensors as the `st-convert` command reads them: give it the index. */
export const safetensorsIndexFormat: TensorFormat = {
  name: "safetensors-index",
  description: "a sharded safetensors checkpoint, read through its model.safetensors.index.json (read only)",
  extensions: [".safetensors.index.json"],
  namedOnly: true,
  readOnly: true,
  // Content sniffing is left to the name: any JSON object may have a "weight_map" key.
  async open(source, context) {
    if (context.openSibling === undefined) {
      throw new StConvertError("InvalidArgument", "a sharded checkpoint's shards cannot be opened here (no openSibling in the context)", { file: source.name });
    }
    return readSafetensorsIndex(source, context.openSibling, { onWarning: context.onWarning });
  },
  async write() {
    throw new StConvertError(
      "Unsupported",
      "writing a sharded checkpoint is not supported; write one .safetensors file (the shards of an index convert on their own too)",
    );
  },
};
