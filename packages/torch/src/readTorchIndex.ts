/**
 * Sharded PyTorch checkpoints: `pytorch_model.bin.index.json` (`{"metadata": {"total_size": …},
 * "weight_map": {tensor: shard file}}`, as huggingface_hub's `save_torch_state_dict(...,
 * safe_serialization=False)` and transformers write it), read as one source of tensors whose
 * bytes stay in their shards until a writer asks for them. The rules are those of core's
 * safetensors index reader; the shards are checkpoints, and their aliases are merged.
 */
import { type ByteInput, type ByteSource, MAX_INDEX_SIZE, type TensorSource, createMetadata, readSafetensorsIndex } from "@st-convert/core";
import { type TorchReadOptions, type TorchTensor, readTorch } from "./readTorch.js";

/** Largest index file read, in bytes (core's `MAX_INDEX_SIZE`: real ones hold a line per tensor). */
export const MAX_TORCH_INDEX_SIZE = MAX_INDEX_SIZE;

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

/**
 * Reads a sharded checkpoint: the index from `index`, each shard it names through
 * `openShard(name)` (the caller resolves the name beside the index and closes what it opened).
 * Tensors come in `weight_map` order (a name folded into an identical view under another name
 * stays an alias, in the metadata); metadata is `{"format": "pt"}` with what every shard's metadata
 * agrees on (the entries the torch writer keeps), the index's own entries (core's rules:
 * `total_size` and `total_parameters` left out) and every shard's aliases.
 * The index is read by core's safetensors index reader, with its rules; only the shards differ.
 * @throws StConvertError `InvalidIndex` (not an index; a shard name that is absolute, climbs out
 *   with `..` or is not a checkpoint's; a shard holding a tensor the index does not map to it),
 *   `TensorNotFound`, `LimitExceeded`, and every shard's codes, naming the shard.
 */
export async function readTorchIndex(
  index: ByteInput,
  openShard: (name: string) => Promise<ByteSource>,
  options: TorchIndexReadOptions = {},
): Promise<ShardedTorch> {
  const read = await readSafetensorsIndex(index, openShard, {
    maxIndexSize: options.maxIndexSize ?? MAX_TORCH_INDEX_SIZE,
    onWarning: options.onWarning,
    include: options.include,
    shards: {
      extensions: SHARD_EXTENSIONS,
      async read(shard) {
        const file = await readTorch(shard, options);
        // The aliases are merged from every shard by the index reader, not agreed on; the rest of
        // a shard's metadata (`format`, what the torch writer kept) is agreed on, as safetensors shards' is.
        const rest = Object.entries(file.metadata).filter(([key]) => !Object.hasOwn(file.aliases, key));
        return { tensors: file.tensors, metadata: createMetadata(rest), aliases: file.aliases };
      },
    },
  });
  return {
    format: "torch-index",
    metadata: read.metadata,
    // Every tensor came from readTorch above.
    tensors: read.tensors as readonly TorchTensor[],
    shards: read.shards,
    indexMetadata: read.indexMetadata,
    aliases: read.aliases,
  };
}
