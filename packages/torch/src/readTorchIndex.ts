/**
 * Sharded PyTorch checkpoints: `pytorch_model.bin.index.json` (`{"metadata": {"total_size": …},
 * "weight_map": {tensor: shard file}}`, as huggingface_hub's `save_torch_state_dict(...,
 * safe_serialization=False)` and transformers write it), read as one source of tensors whose
 * bytes stay in their shards until a writer asks for them. The rules are those of core's
 * safetensors index reader; the shards are checkpoints, and their aliases are merged.
 */
import {
  type ByteInput,
  type ByteSource,
  StConvertError,
  type TensorSource,
  createMetadata,
  isStConvertError,
  quoteName,
  toByteSource,
  withContext,
} from "@st-convert/core";
import { type TorchReadOptions, type TorchTensor, readTorch } from "./readTorch.js";

/** Largest index file read, in bytes (core's `MAX_INDEX_SIZE`: real ones hold a line per tensor). */
export const MAX_TORCH_INDEX_SIZE = 64 * 1024 * 1024;

/** Options of {@link readTorchIndex}: those of every shard's reader, and the index's own limit. */
export interface TorchIndexReadOptions extends TorchReadOptions {
  /** Largest index accepted, in bytes. Default {@link MAX_TORCH_INDEX_SIZE}. */
  maxIndexSize?: number;
}

/** A sharded checkpoint, read through its index. */
export interface ShardedTorch extends TensorSource {
  readonly format: "torch-index";
  readonly tensors: readonly TorchTensor[];
  /** Shard file names as the index gives them, in the order they first appear in `weight_map`. */
  readonly shards: readonly string[];
  /** The index's own `metadata` object (`total_size`, …), as parsed; null when it has none. */
  readonly indexMetadata: Readonly<Record<string, unknown>> | null;
  /** `{removed: kept}` over all shards. */
  readonly aliases: Readonly<Record<string, string>>;
}

const SHARD_EXTENSIONS = [".bin", ".pt", ".pth", ".ckpt"];

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Reads a sharded checkpoint: the index from `index`, each shard it names through
 * `openShard(name)` (the caller resolves the name beside the index and closes what it opened).
 * Tensors come in `weight_map` order (a name folded into an identical view under another name
 * stays an alias, in the metadata); metadata is `{"format": "pt"}` and every shard's aliases.
 * @throws StConvertError `InvalidIndex` (not an index; a shard name that is absolute, climbs out
 *   with `..` or is not a checkpoint's; a shard holding a tensor the index does not map to it),
 *   `TensorNotFound`, `LimitExceeded`, and every shard's codes, naming the shard.
 */
export async function readTorchIndex(
  index: ByteInput,
  openShard: (name: string) => Promise<ByteSource>,
  options: TorchIndexReadOptions = {},
): Promise<ShardedTorch> {
  const source = toByteSource(index);
  const bad = (rule: string, tensor?: string): never => {
    throw new StConvertError("InvalidIndex", rule, { file: source.name, tensor });
  };
  const maxIndexSize = options.maxIndexSize ?? MAX_TORCH_INDEX_SIZE;
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

  const shardOf = new Map<string, string>();
  for (const [name, shard] of Object.entries(weightMap)) {
    if (typeof shard !== "string") return bad(`weight_map maps ${quoteName(name)} to ${JSON.stringify(shard)}, not to a file name`, name);
    const shown = JSON.stringify(shard);
    if (shard === "" || shard.includes("\0")) bad(`shard name ${shown} is not a file name`);
    if (/^[A-Za-z]:/.test(shard) || shard.startsWith("/") || shard.startsWith("\\"))
      bad(`shard name ${shown} is an absolute path; shards must lie beside the index`);
    if (shard.split(/[\\/]/).includes("..")) bad(`shard name ${shown} climbs out of the index's folder with ".."`);
    if (!SHARD_EXTENSIONS.some((e) => shard.endsWith(e))) bad(`shard name ${shown} does not end in ${SHARD_EXTENSIONS.join(", ")}`);
    shardOf.set(name, shard);
  }
  const shards = [...new Set(shardOf.values())];

  const byName = new Map<string, TorchTensor>();
  const aliases: Record<string, string> = createMetadata();
  for (const shard of shards) {
    try {
      const file = await readTorch(await openShard(shard), options);
      const held = [...file.tensors.map((t) => t.name), ...Object.keys(file.aliases)];
      for (const name of held) {
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
      for (const t of file.tensors) byName.set(t.name, t);
      Object.assign(aliases, file.aliases);
    } catch (error) {
      throw withContext(error, { file: shard });
    }
  }
  const tensors: TorchTensor[] = [];
  for (const [name, shard] of shardOf) {
    const tensor = byName.get(name);
    if (tensor !== undefined) tensors.push(tensor);
    else if (aliases[name] === undefined) {
      throw new StConvertError("TensorNotFound", `the index maps it to ${JSON.stringify(shard)}, which does not hold it`, { file: source.name, tensor: name });
    }
  }
  const totalSize = indexMetadata?.total_size;
  const sum = tensors.reduce((n, t) => n + t.byteLength, 0);
  if (totalSize !== undefined && totalSize !== sum) {
    options.onWarning?.(`the index's total_size is ${JSON.stringify(totalSize)}, but its tensors hold ${sum} bytes`);
  }
  return { format: "torch-index", metadata: createMetadata([["format", "pt"], ...Object.entries(aliases)]), tensors, shards, indexMetadata, aliases };
}
