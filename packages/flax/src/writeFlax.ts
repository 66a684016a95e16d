/**
 * Writes named tensors as a flax msgpack checkpoint, byte-identical to
 * `flax.serialization.msgpack_serialize` of the nested tree, streaming: the structure and each
 * array's bytes go to the sink in order (ext headers carry lengths known in advance), never the
 * whole file in memory.
 *
 * Spec: flax 0.12.8 `flax/serialization.py` (`msgpack_serialize`, `_ndarray_to_bytes`, `_chunk`)
 * and msgpack-python's packer (smallest encodings, fixext for 1/2/4/8/16-byte payloads);
 * `docs/formats.md` §3.3–3.5.
 */
import {
  type ByteSink,
  DEFAULT_CHUNK_SIZE,
  MemorySink,
  StConvertError,
  type TensorEntry,
  type TensorSource,
  checkedByteLength,
  compareCodePoints,
  dtypeInfo,
  quoteName,
  withContext,
  hasLoneSurrogate,
} from "@st-convert/core";
import { MsgpackEncoder } from "./MsgpackEncoder.js";
import { CHUNKED_ARRAY_MARKER, MAX_DEPTH } from "./readFlax.js";

/**
 * flax's `MAX_CHUNK_SIZE` (2^30 bytes): an array with more bytes than this is written as a
 * `__msgpack_chunked_array__` dict of 1-d chunks of at most this many bytes, as flax does, since
 * a msgpack bin holds less than 2^31 bytes in msgpack-python.
 */
export const MAX_CHUNK_SIZE = 2 ** 30;

/** Largest `maxChunkSize` accepted: an ext payload's length is a u32 and msgpack-python caps an object at 2^31 − 1 bytes. */
const LARGEST_CHUNK_SIZE = 2 ** 31 - 1;

/** Options of {@link writeFlax}. */
export interface FlaxWriteOptions {
  /** Splits tensor names into the keys of nested dicts. Default `"."`. */
  sep?: string;
  /**
   * Arrays with more bytes than this are chunked as flax chunks them. Default {@link MAX_CHUNK_SIZE};
   * a smaller value reproduces flax with `flax.serialization.MAX_CHUNK_SIZE` patched to it.
   */
  maxChunkSize?: number;
  /** Bytes pulled from a tensor at a time. Default `DEFAULT_CHUNK_SIZE` (2 MiB). */
  chunkSize?: number;
  /** Deepest nesting written; flax's reader refuses more than 1024. Default {@link MAX_DEPTH}. */
  maxDepth?: number;
  /** Receives notices, such as metadata that flax msgpack cannot hold. */
  onWarning?: (message: string) => void;
}

/** A dict of the tree being written. `example` names a tensor under it, for messages. */
class Branch {
  readonly children = new Map<string, Branch | TensorEntry>();
  constructor(readonly example: string) {}
}

/** One ext-1 array written for a tensor: the whole of it, or one chunk. */
interface Piece {
  readonly key: string | undefined;
  readonly shape: readonly number[];
  readonly byteLength: number;
}

/**
 * Streams tensors into a flax msgpack file that `flax.serialization.msgpack_restore` reads back as
 * the nested tree: names are split on `sep` into nested dicts (a segment such as `0` stays a
 * string key, as in flax's state dicts, so lists come back as `{"0": …}` dicts), keys in
 * code-point order at every level (what `msgpack_serialize` writes), arrays as ext 1
 * `[shape, dtype name, bytes]`, arrays over `maxChunkSize` bytes chunked. Metadata has no place in
 * the format and is dropped with a warning. The caller closes or aborts the sink.
 *
 * @throws StConvertError `InvalidName` (a name that is both an array and a dict prefix of another,
 *   such as `a` beside `a.b`; a lone surrogate), `DuplicateKey`, `Unsupported` (F4/F6, which no
 *   numpy dtype holds byte for byte), `LimitExceeded` (deeper than `maxDepth`),
 *   `ByteLengthMismatch` (a tensor delivered another byte count than it declared),
 *   `InvalidArgument` (an empty `sep`, a bad `maxChunkSize`).
 */
export async function writeFlax(source: TensorSource, sink: ByteSink, options: FlaxWriteOptions = {}): Promise<void> {
  const sep = options.sep ?? ".";
  if (typeof sep !== "string" || sep === "") throw new StConvertError("InvalidArgument", "the name separator must be a non-empty string");
  const maxChunkSize = options.maxChunkSize ?? MAX_CHUNK_SIZE;
  if (!Number.isSafeInteger(maxChunkSize) || maxChunkSize < 1 || maxChunkSize > LARGEST_CHUNK_SIZE) {
    throw new StConvertError("InvalidArgument", `maxChunkSize must be an integer from 1 to ${LARGEST_CHUNK_SIZE}, got ${maxChunkSize}`);
  }
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  const maxDepth = options.maxDepth ?? MAX_DEPTH;

  if (source.metadata !== null && Object.keys(source.metadata).length > 0) {
    options.onWarning?.(
      `metadata dropped (${Object.keys(source.metadata).join(", ")}): flax msgpack has no place for it, and an extra key would break flax.serialization.from_bytes`,
    );
  }

  const root = new Branch("");
  for (const tensor of source.tensors) {
    const info = dtypeInfo(tensor.dtype);
    if (info.numpyName === undefined) {
      throw new StConvertError(
        "Unsupported",
        `${tensor.dtype} has no numpy dtype with the same bytes (ml_dtypes keeps one value per byte, safetensors packs them), so flax cannot hold it`,
        {
          tensor: tensor.name,
        },
      );
    }
    const declared = checkedByteLength(tensor);
    if (declared !== tensor.byteLength) {
      throw new StConvertError(
        "ByteLengthMismatch",
        `${tensor.dtype} shape [${tensor.shape.join(", ")}] needs ${declared} bytes, the tensor declares ${tensor.byteLength}`,
        {
          tensor: tensor.name,
        },
      );
    }
    if (hasLoneSurrogate(tensor.name)) {
      throw new StConvertError("InvalidName", "the name holds a lone UTF-16 surrogate, which UTF-8 cannot encode", { tensor: tensor.name });
    }
    const keys = tensor.name.split(sep);
    const chunked = tensor.byteLength > maxChunkSize;
    if (keys.length + (chunked ? 2 : 0) > maxDepth) {
      throw new StConvertError(
        "LimitExceeded",
        `the name nests ${keys.length} dicts deep${chunked ? " (and 2 more for its chunks)" : ""}; flax's reader stops at ${maxDepth}`,
        {
          tensor: tensor.name,
        },
      );
    }
    insert(root, keys, tensor, sep);
  }

  const out = new MsgpackEncoder(sink);
  await writeBranch(root, out, { maxChunkSize, chunkSize });
  await out.flush();
}

function insert(root: Branch, keys: readonly string[], tensor: TensorEntry, sep: string): void {
  let branch = root;
  for (let i = 0; i < keys.length - 1; i++) {
    const key = keys[i]!;
    const child = branch.children.get(key);
    if (child === undefined) {
      const created = new Branch(tensor.name);
      branch.children.set(key, created);
      branch = created;
    } else if (child instanceof Branch) {
      branch = child;
    } else {
      throw clash(tensor.name, child.name, sep);
    }
  }
  const last = keys[keys.length - 1]!;
  const existing = branch.children.get(last);
  if (existing instanceof Branch) throw clash(existing.example, tensor.name, sep);
  if (existing !== undefined) throw new StConvertError("DuplicateKey", "two tensors have this name", { tensor: tensor.name });
  branch.children.set(last, tensor);
}

function clash(nested: string, leaf: string, sep: string): StConvertError {
  return new StConvertError(
    "InvalidName",
    `${quoteName(leaf)} is an array, but ${quoteName(nested)} needs it to be a dict (names are split on ${JSON.stringify(sep)}); rename one, or choose another separator`,
    { tensor: nested },
  );
}

async function writeBranch(branch: Branch, out: MsgpackEncoder, options: { maxChunkSize: number; chunkSize: number }): Promise<void> {
  // msgpack_serialize rebuilds every dict through jax's tree_map, which sorts keys (Python's
  // sorted(): code-point order, not JavaScript's UTF-16 order).
  const keys = [...branch.children.keys()].sort(compareCodePoints);
  out.mapHeader(keys.length);
  for (const key of keys) {
    out.str(key);
    const child = branch.children.get(key)!;
    if (child instanceof Branch) await writeBranch(child, out, options);
    else await writeTensor(child, out, options);
  }
}

/** Writes one array: an ext 1, or flax's chunk dict `{marker: true, shape: {…}, chunks: {…}}`. */
async function writeTensor(tensor: TensorEntry, out: MsgpackEncoder, { maxChunkSize, chunkSize }: { maxChunkSize: number; chunkSize: number }): Promise<void> {
  const info = dtypeInfo(tensor.dtype);
  const itemSize = info.bits / 8;
  const pieces: Piece[] = [];
  if (tensor.byteLength > maxChunkSize) {
    // `_chunk`: a dict in insertion order (written after the sort, so not sorted), the shape as
    // {"0": d0, …}, and the C-order elements in runs of max(1, int(MAX_CHUNK_SIZE / itemsize)).
    out.mapHeader(3);
    out.str(CHUNKED_ARRAY_MARKER);
    out.bool(true);
    out.str("shape");
    out.mapHeader(tensor.shape.length);
    tensor.shape.forEach((dim, i) => {
      out.str(String(i));
      out.uint(dim);
    });
    out.str("chunks");
    const elements = tensor.byteLength / itemSize;
    const perChunk = Math.max(1, Math.floor(maxChunkSize / itemSize));
    const count = Math.ceil(elements / perChunk);
    out.mapHeader(count);
    for (let i = 0; i < count; i++) {
      const n = Math.min(perChunk, elements - i * perChunk);
      pieces.push({ key: String(i), shape: [n], byteLength: n * itemSize });
    }
  } else {
    pieces.push({ key: undefined, shape: tensor.shape, byteLength: tensor.byteLength });
  }

  const source = tensor.chunks({ chunkSize })[Symbol.asyncIterator]();
  let next = source.next();
  next.catch(() => {});
  let pending: Uint8Array = new Uint8Array(0);
  let delivered = 0;
  /** The next non-empty run of the tensor's bytes, reading ahead one chunk. */
  const pull = async (): Promise<Uint8Array | undefined> => {
    for (;;) {
      const { done, value } = await next;
      if (done) return undefined;
      delivered += value.byteLength;
      if (delivered > tensor.byteLength) {
        throw new StConvertError("ByteLengthMismatch", `the reader delivered more than the ${tensor.byteLength} bytes it declared`, { tensor: tensor.name });
      }
      next = source.next();
      next.catch(() => {});
      if (value.byteLength > 0) return value;
    }
  };
  try {
    for (const piece of pieces) {
      if (piece.key !== undefined) out.str(piece.key);
      out.ndarrayHeader(piece.shape, info.numpyName!, piece.byteLength);
      await out.flushIfFull();
      let left = piece.byteLength;
      while (left > 0) {
        if (pending.byteLength === 0) {
          const value = await pull();
          if (value === undefined) {
            throw new StConvertError("ByteLengthMismatch", `the reader delivered only ${delivered} of the ${tensor.byteLength} bytes it declared`, {
              tensor: tensor.name,
            });
          }
          pending = value;
        }
        const take = pending.subarray(0, Math.min(left, pending.byteLength));
        await out.raw(take);
        pending = pending.subarray(take.byteLength);
        left -= take.byteLength;
      }
    }
    if (pending.byteLength > 0 || (await pull()) !== undefined) {
      throw new StConvertError("ByteLengthMismatch", `the reader delivered more than the ${tensor.byteLength} bytes it declared`, { tensor: tensor.name });
    }
  } catch (error) {
    await source.return?.();
    throw withContext(error, { tensor: tensor.name });
  }
}

/**
 * Serializes tensors into one in-memory flax msgpack file (what `msgpack_serialize` returns). For
 * large outputs, stream with {@link writeFlax} into a file sink instead.
 * @throws StConvertError as {@link writeFlax}.
 */
export async function serializeFlax(source: TensorSource, options: FlaxWriteOptions = {}): Promise<Uint8Array> {
  const sink = new MemorySink();
  await writeFlax(source, sink, options);
  await sink.close();
  return sink.bytes();
}
