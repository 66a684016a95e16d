/**
 * `hash()`: SHA-256 digests of a checkpoint's tensors, the same whatever format holds them. A
 * tensor's digest is that of its bytes in C order, little-endian (what
 * `hashlib.sha256(t.numpy().tobytes())` gives); the checkpoint's is that of one UTF-8 line per
 * tensor, sorted by name in code-point order: `NAME\tDTYPE\tSHAPE\tSHA256\n`, with the safetensors
 * dtype code and the shape as JSON without spaces (`[2,3]`, `[]`).
 */
import { createHash } from "node:crypto";
import { type ByteSource, type TensorEntry, compareCodePoints, exactChunks, withContext } from "@st-convert/core";
import { type InspectOptions, readInput } from "./inspect.js";

/** Options of {@link hash}: how the input is read and which tensors are kept, as for `inspect()`. */
export interface HashOptions extends InspectOptions {
  /** Stops at the next chunk. */
  signal?: AbortSignal;
  /** Called as tensor bytes are hashed: bytes done so far and the total. */
  onProgress?: (done: number, total: number) => void;
}

/** One tensor's digest. */
export interface TensorDigest {
  name: string;
  /** The safetensors dtype code. */
  dtype: string;
  shape: number[];
  /** Lowercase hex SHA-256 of the tensor's bytes in C order, little-endian. */
  sha256: string;
}

/** What {@link hash} found. */
export interface HashResult {
  /** The input's format. */
  format: string;
  /** The checkpoint's digest (see {@link checkpointDigest}). */
  digest: string;
  /** Every tensor, sorted by name (code-point order). */
  tensors: TensorDigest[];
  /** Tensor bytes hashed. */
  bytes: number;
}

/** Chunks a hash asks for: large enough that a chunk's cost is the hashing, not the read call. */
const HASH_CHUNK = 4 * 1024 * 1024;

/**
 * Hashes every tensor of `input` (after `filter`, `exclude`, `rename` and `cast`), reading each
 * once, in chunks.
 * @throws StConvertError naming the file and the tensor when the input is refused.
 */
export async function hash(input: string | ByteSource, options: HashOptions = {}): Promise<HashResult> {
  return readInput(input, options, async (found) => {
    const total = found.tensors.reduce((n, t) => n + t.byteLength, 0);
    let done = 0;
    const tensors: TensorDigest[] = [];
    for (const entry of found.tensors) {
      const sha256 = await tensorSha256(entry, options.signal, (bytes) => {
        done += bytes;
        options.onProgress?.(done, total);
      });
      tensors.push({ name: entry.name, dtype: entry.dtype, shape: [...entry.shape], sha256 });
    }
    tensors.sort((a, b) => compareCodePoints(a.name, b.name));
    return { format: found.format, digest: checkpointDigest(tensors), tensors, bytes: total };
  });
}

/**
 * SHA-256 of one tensor's bytes, as lowercase hex.
 * @throws StConvertError naming the tensor when its reader fails or delivers another length.
 */
export async function tensorSha256(entry: TensorEntry, signal?: AbortSignal, onBytes?: (bytes: number) => void): Promise<string> {
  const hasher = createHash("sha256");
  try {
    // reuse: each chunk is hashed before the next is asked for.
    for await (const chunk of exactChunks(entry, { chunkSize: HASH_CHUNK, reuse: true })) {
      hasher.update(chunk);
      onBytes?.(chunk.byteLength);
      signal?.throwIfAborted();
    }
  } catch (error) {
    throw withContext(error, { tensor: entry.name });
  }
  return hasher.digest("hex");
}

/**
 * The checkpoint digest of tensors' digests: SHA-256 of `NAME\tDTYPE\tSHAPE\tSHA256\n` per tensor,
 * the lines sorted by name in code-point order, as UTF-8. The order the tensors come in does not matter.
 */
export function checkpointDigest(tensors: readonly Pick<TensorDigest, "name" | "dtype" | "shape" | "sha256">[]): string {
  const sorted = [...tensors].sort((a, b) => compareCodePoints(a.name, b.name));
  const hasher = createHash("sha256");
  for (const t of sorted) hasher.update(`${t.name}\t${t.dtype}\t${JSON.stringify(t.shape)}\t${t.sha256}\n`, "utf8");
  return hasher.digest("hex");
}
