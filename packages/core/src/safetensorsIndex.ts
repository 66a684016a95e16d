/**
 * Sharded safetensors checkpoints: `model.safetensors.index.json` (`{"metadata": {"total_size": …},
 * "weight_map": {tensor: shard file}}`, as huggingface_hub and transformers write it) read as one
 * source of tensors whose bytes stay in their shards until a writer asks for them.
 */
import { type ByteInput, type ByteSource, toByteSource } from "./ByteSource.js";
import { type SafetensorsReadOptions, readSafetensors } from "./safetensors.js";
import { StConvertError, isStConvertError, quoteName, withContext } from "./StConvertError.js";
import { type Metadata, type TensorEntry, type TensorSource, createMetadata } from "./Tensor.js";
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
  /** Receives non-fatal notices (a `total_size` that is not the sum, metadata the shards disagree on). */
  onWarning?: (message: string) => void;
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
}

/**
 * Reads a sharded checkpoint: the index from `index`, each shard it names through
 * `openShard(name)` (the caller resolves the name beside the index and closes what it opened).
 * Tensors come in `weight_map` order; metadata is what every shard's metadata agrees on (each
 * huggingface_hub shard holds `{"format": "pt"}`).
 *
 * Stricter than the loaders, which load whatever the shards hold: the index and the shards must
 * agree exactly, so that a conversion holds what the index promises.
 * @throws StConvertError `InvalidIndex` for an index that is not one (not JSON, no `weight_map`,
 *   a shard name that is absolute, climbs out with `..`, or does not end in `.safetensors`), or
 *   shards that hold a tensor the index does not map to them; `TensorNotFound` for a mapped tensor
 *   its shard does not hold; `LimitExceeded` past `maxIndexSize`; every shard's safetensors codes,
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
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(await source.read(0, source.size)));
  } catch (error) {
    if (isStConvertError(error)) throw error;
    bad(`not a JSON index: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (!isObject(parsed)) return bad('not an index: a JSON object with a "weight_map" is expected');
  const weightMap = parsed.weight_map;
  if (!isObject(weightMap)) return bad('not an index: "weight_map" must be an object mapping tensor names to shard files');
  const metadata = parsed.metadata;
  if (metadata !== undefined && metadata !== null && !isObject(metadata)) bad('"metadata" must be an object');
  const indexMetadata = isObject(metadata) ? metadata : null;

  const reader: ShardReader = options.shards ?? { extensions: [".safetensors"], read: (shard) => readSafetensors(shard, options) };
  // Tensor → shard, and the shards in order of first appearance.
  const shardOf = new Map<string, string>();
  for (const [name, shard] of Object.entries(weightMap)) {
    if (typeof shard !== "string") bad(`weight_map maps ${quoteName(name)} to ${JSON.stringify(shard)}, not to a file name`, name);
    checkShardName(shard as string, reader.extensions, bad);
    shardOf.set(name, shard as string);
  }
  const shards = [...new Set(shardOf.values())];

  const byName = new Map<string, TensorEntry>();
  const aliased = new Set<string>();
  const shardMetadata: (Metadata | null)[] = [];
  for (const shard of shards) {
    try {
      const file = await reader.read(await openShard(shard));
      shardMetadata.push(file.metadata);
      const aliases = Object.keys(file.aliases ?? {});
      for (const name of [...file.tensors.map((t) => t.name), ...aliases]) {
        const mapped = shardOf.get(name);
        if (mapped !== shard) {
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
    } catch (error) {
      throw withContext(error, { file: shard });
    }
  }
  const tensors: TensorEntry[] = [];
  for (const [name, shard] of shardOf) {
    const tensor = byName.get(name);
    if (tensor !== undefined) tensors.push(tensor);
    else if (!aliased.has(name)) {
      throw new StConvertError("TensorNotFound", `the index maps it to ${JSON.stringify(shard)}, which does not hold it`, { file: source.name, tensor: name });
    }
  }

  const totalSize = indexMetadata?.total_size;
  const sum = tensors.reduce((n, t) => n + t.byteLength, 0);
  if (totalSize !== undefined && totalSize !== sum) {
    options.onWarning?.(`the index's total_size is ${JSON.stringify(totalSize)}, but its tensors hold ${sum} bytes`);
  }
  return {
    format: "safetensors-index",
    metadata: agreedMetadata(shardMetadata, options.onWarning),
    tensors,
    shards,
    indexMetadata,
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The loaders' rule (huggingface_hub parses names as Windows paths and refuses a drive, a root or
 * a `..` part), with the format's extension required: an index cannot make st-convert read a
 * file outside its folder.
 */
function checkShardName(name: string, extensions: readonly string[], bad: (rule: string) => never): void {
  const shown = JSON.stringify(name);
  if (name === "" || name.includes("\0")) bad(`shard name ${shown} is not a file name`);
  if (/^[A-Za-z]:/.test(name) || name.startsWith("/") || name.startsWith("\\"))
    bad(`shard name ${shown} is an absolute path; shards must lie beside the index`);
  if (name.split(/[\\/]/).includes("..")) bad(`shard name ${shown} climbs out of the index's folder with ".."`);
  if (!extensions.some((e) => name.endsWith(e))) bad(`shard name ${shown} does not end in ${extensions.join(", ")}`);
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
