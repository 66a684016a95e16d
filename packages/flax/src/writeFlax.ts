/**
 * Writes named tensors as a flax msgpack checkpoint, byte-identical to
 * `flax.serialization.msgpack_serialize` of the nested tree, streaming: the structure and each
 * array's bytes go to the sink in order (ext headers carry lengths known in advance), never the
 * whole file in memory. A `flax.tree` record in the metadata (what the flax reader keeps) puts
 * back what the tensors cannot say: values that are not arrays, empty containers, lists, numpy
 * scalars, key order and chunk sizes.
 *
 * Spec: flax 0.12.8 `flax/serialization.py` (`msgpack_serialize`, `_ndarray_to_bytes`,
 * `_msgpack_ext_pack`, `_chunk`) and msgpack-python's packer (smallest encodings, fixext for
 * 1/2/4/8/16-byte payloads); `docs/formats.md` §3.3–3.5.
 */
import {
  type ByteSink,
  DEFAULT_CHUNK_SIZE,
  MemorySink,
  StConvertError,
  type TensorEntry,
  type TensorExtent,
  type TensorSource,
  checkedByteLength,
  compareCodePoints,
  dtypeInfo,
  hasLoneSurrogate,
  quoteName,
  KERNEL_COPY_FROM,
  readAhead,
  readRange,
  readTensorBytes,
  withContext,
} from "@st-convert/core";
import {
  CHUNKED_ARRAY_MARKER,
  type DictEntry,
  type DictNode,
  FLAX_TREE_KEY,
  type FlaxTree,
  type FlaxTreeNode,
  type FlaxValue,
  MAX_CHUNK_SIZE,
  MAX_TREE_RECORD,
  type SlotForm,
  type SlotNode,
  dictNode,
  parseFlaxTree,
} from "./FlaxTree.js";
import { MsgpackEncoder } from "./MsgpackEncoder.js";
import { MAX_DEPTH, MAX_RANK, arrayTooBig } from "./readFlax.js";

export { MAX_CHUNK_SIZE, MAX_TREE_RECORD };

/** Largest `maxChunkSize` accepted: an ext payload's length is a u32 and msgpack-python caps an object at 2^31 − 1 bytes. */
const LARGEST_CHUNK_SIZE = 2 ** 31 - 1;

/**
 * Largest array written unchunked in a list (flax never chunks there, and would not unchunk): its
 * ext payload, the array bytes and a header of at most a few hundred bytes, must fit msgpack's u32.
 */
const LARGEST_LIST_ARRAY = 2 ** 32 - 1 - 1024;

/** The form of an array the record does not place. */
const NDARRAY: SlotForm = { type: "ndarray" };

/** Options of {@link writeFlax}. */
export interface FlaxWriteOptions {
  /** Splits tensor names into the keys of nested dicts. Default `"."`. */
  sep?: string;
  /**
   * Arrays with more bytes than this are chunked as flax chunks them. Default {@link MAX_CHUNK_SIZE};
   * a smaller value reproduces flax with `flax.serialization.MAX_CHUNK_SIZE` patched to it.
   * Chunk sizes a `flax.tree` record gives take precedence.
   */
  maxChunkSize?: number;
  /** Bytes pulled from a tensor at a time. Default `DEFAULT_CHUNK_SIZE` (2 MiB). */
  chunkSize?: number;
  /** Deepest nesting written; flax's reader refuses more than 1024. Default {@link MAX_DEPTH}. */
  maxDepth?: number;
  /** Longest `flax.tree` record parsed. Default {@link MAX_TREE_RECORD}. */
  maxTreeRecord?: number;
  /** Receives notices, such as metadata that flax msgpack cannot hold. */
  onWarning?: (message: string) => void;
}

interface Plan {
  readonly sep: string;
  readonly maxChunkSize: number;
  readonly chunkSize: number;
  readonly maxDepth: number;
}

/**
 * Streams tensors into a flax msgpack file that `flax.serialization.msgpack_restore` reads back as
 * the nested tree. Without a `flax.tree` record: names are split on `sep` into nested dicts (a
 * segment such as `0` stays a string key, as in flax's state dicts, so lists come back as
 * `{"0": …}` dicts), keys in code-point order at every level (what `msgpack_serialize` writes),
 * arrays as ext 1 `[shape, dtype name, bytes]`, arrays over `maxChunkSize` bytes chunked. With
 * one (the flax reader's): the recorded tree, with each tensor at its recorded place (by name,
 * joined with the record's separator) and the rest placed by name after the recorded keys; the
 * recorded places no tensor fills are left out, with a warning. Other metadata has no place in the
 * format and is dropped with a warning. The caller closes or aborts the sink.
 *
 * @throws StConvertError `InvalidName` (a name that is both an array and a dict prefix of another,
 *   such as `a` beside `a.b`; a lone surrogate; a name the record's lists or values are in the way
 *   of; a `__msgpack_chunked_array__` key), `DuplicateKey`, `Unsupported` (F4/F6, which no numpy
 *   dtype holds byte for byte; an array numpy finds too big or of more than `MAX_RANK` dimensions), `LimitExceeded` (deeper than
 *   `maxDepth`, a record past `maxTreeRecord`), `ByteLengthMismatch` (a tensor delivered another
 *   byte count than it declared), `InvalidMetadata` (a `flax.tree` record st-convert did not
 *   write), `InvalidArgument` (an empty `sep`, a bad `maxChunkSize`, a record of one top-level
 *   array beside another number of tensors than one). All but `ByteLengthMismatch` are raised
 *   before the first byte is written.
 */
export async function writeFlax(source: TensorSource, sink: ByteSink, options: FlaxWriteOptions = {}): Promise<void> {
  const sep = options.sep ?? ".";
  if (typeof sep !== "string" || sep === "") throw new StConvertError("InvalidArgument", "the name separator must be a non-empty string");
  const maxChunkSize = options.maxChunkSize ?? MAX_CHUNK_SIZE;
  if (!Number.isSafeInteger(maxChunkSize) || maxChunkSize < 1 || maxChunkSize > LARGEST_CHUNK_SIZE) {
    throw new StConvertError("InvalidArgument", `maxChunkSize must be an integer from 1 to ${LARGEST_CHUNK_SIZE}, got ${maxChunkSize}`);
  }
  const plan: Plan = { sep, maxChunkSize, chunkSize: options.chunkSize ?? DEFAULT_CHUNK_SIZE, maxDepth: options.maxDepth ?? MAX_DEPTH };

  const metadata = source.metadata ?? {};
  const record = Object.hasOwn(metadata, FLAX_TREE_KEY) ? metadata[FLAX_TREE_KEY] : undefined;
  const dropped = Object.keys(metadata).filter((key) => key !== FLAX_TREE_KEY);
  if (dropped.length > 0) {
    options.onWarning?.(
      `metadata dropped (${dropped.join(", ")}): flax msgpack has no place for it, and an extra key would break flax.serialization.from_bytes`,
    );
  }
  const tree: FlaxTree = record === undefined ? { root: dictNode(""), slots: new Map() } : parseFlaxTree(record, plan.maxDepth, options.maxTreeRecord);

  for (const tensor of source.tensors) {
    checkTensor(tensor);
    place(tree, tensor, source.tensors.length, plan);
  }
  if (tree.root.kind === "slot" && tree.root.tensor === undefined) {
    throw new StConvertError("InvalidArgument", `the recorded tree (${FLAX_TREE_KEY}) is one top-level array, and no tensor is given`);
  }
  const missing: string[] = [];
  // The top level stays, emptied or not: a file holds one value.
  prune(tree.root, missing);
  if (missing.length > 0) {
    const shown = missing.slice(0, 3).map(quoteName).join(", ");
    options.onWarning?.(
      `${missing.length} ${missing.length === 1 ? "array" : "arrays"} of the recorded tree (${FLAX_TREE_KEY}) ${missing.length === 1 ? "is" : "are"} not among the tensors and left out: ${shown}${missing.length > 3 ? ", …" : ""}`,
    );
  }

  const out = new MsgpackEncoder(sink);
  await writeNode(tree.root, out, plan, true);
  await out.flush();
}

function checkTensor(tensor: TensorEntry): void {
  const info = dtypeInfo(tensor.dtype);
  if (info.numpyName === undefined) {
    throw new StConvertError(
      "Unsupported",
      `${tensor.dtype} has no numpy dtype with the same bytes (ml_dtypes keeps one value per byte, safetensors packs them), so flax cannot hold it`,
      { tensor: tensor.name },
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
  if (tensor.shape.length > MAX_RANK) {
    throw new StConvertError(
      "Unsupported",
      `${tensor.dtype} [${tensor.shape.join(", ")}] has ${tensor.shape.length} dimensions; numpy allows at most ${MAX_RANK} (NPY_MAXDIMS), so flax could not read it back`,
      { tensor: tensor.name },
    );
  }
  const tooBig = arrayTooBig(tensor.shape, info.bits / 8);
  if (tooBig !== undefined) throw new StConvertError("Unsupported", `${tooBig}, so flax could not read it back`, { tensor: tensor.name });
  if (hasLoneSurrogate(tensor.name)) {
    throw new StConvertError("InvalidName", "the name holds a lone UTF-16 surrogate, which UTF-8 cannot encode", { tensor: tensor.name });
  }
}

/** Puts `tensor` in the tree: at its recorded place, or where its name, split on `sep`, leads. */
function place(tree: FlaxTree, tensor: TensorEntry, count: number, plan: Plan): void {
  const recorded = tree.slots.get(tensor.name);
  if (recorded !== undefined) {
    fill(recorded, tensor, plan);
    return;
  }
  const root = tree.root;
  if (root.kind === "slot") {
    if (count !== 1) {
      throw new StConvertError("InvalidArgument", `the recorded tree (${FLAX_TREE_KEY}) is one top-level array, and ${count} tensors are given`, {
        tensor: tensor.name,
      });
    }
    fill(root, tensor, plan);
    return;
  }
  const keys = tensor.name.split(plan.sep);
  if (keys.length > plan.maxDepth) {
    throw new StConvertError("LimitExceeded", `the name nests ${keys.length} dicts deep; flax's reader stops at ${plan.maxDepth}`, { tensor: tensor.name });
  }
  let node: FlaxTreeNode = root;
  let inDicts = true;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    const last = i === keys.length - 1;
    let target: FlaxTreeNode;
    if (node.kind === "dict") {
      if (key === CHUNKED_ARRAY_MARKER && inDicts) {
        throw new StConvertError("InvalidName", `the key ${CHUNKED_ARRAY_MARKER} would make flax read the dict that holds it as one chunked array`, {
          tensor: tensor.name,
        });
      }
      const entry = node.byText.get(key);
      if (entry === undefined) {
        const child: FlaxTreeNode = last ? { kind: "slot", form: NDARRAY, name: tensor.name, tensor: undefined, depth: i + 1, inDicts } : dictNode(tensor.name);
        const added: DictEntry = { key: { kind: "str", value: key }, node: child, added: true };
        node.entries.push(added);
        node.byText.set(key, added);
        if (last) {
          fill(child as SlotNode, tensor, plan);
          return;
        }
        node = child;
        continue;
      }
      target = entry.node;
    } else if (node.kind === "list") {
      const index = /^(0|[1-9][0-9]*)$/.test(key) ? Number(key) : -1;
      if (index < 0 || index >= node.items.length) {
        throw new StConvertError(
          "InvalidName",
          `the recorded tree (${FLAX_TREE_KEY}) has a list of ${node.items.length} items at ${quoteName(node.example)}, which has no item ${quoteName(key)}`,
          { tensor: tensor.name },
        );
      }
      inDicts = false;
      target = node.items[index]!;
    } else {
      // Only the top level can be a value here: one on the path is refused below, before descending into it.
      throw new StConvertError(
        "InvalidName",
        `the recorded tree (${FLAX_TREE_KEY}) is ${describe((node as { value: FlaxValue }).value)} at the top level, not a dict`,
        {
          tensor: tensor.name,
        },
      );
    }
    if (target.kind === "dict" || target.kind === "list") {
      if (last) throw clash(target.example, tensor.name, plan.sep);
      node = target;
      continue;
    }
    if (target.kind === "slot") {
      if (last) {
        fill(target, tensor, plan);
        return;
      }
      throw clash(tensor.name, target.tensor?.name ?? keys.slice(0, i + 1).join(plan.sep), plan.sep);
    }
    throw new StConvertError(
      "InvalidName",
      `the recorded tree (${FLAX_TREE_KEY}) holds ${describe(target.value)} at ${quoteName(keys.slice(0, i + 1).join(plan.sep))}, ${last ? "not an array" : "not a dict"}`,
      { tensor: tensor.name },
    );
  }
}

function fill(slot: SlotNode, tensor: TensorEntry, plan: Plan): void {
  if (slot.tensor !== undefined) throw new StConvertError("DuplicateKey", "two tensors have this name", { tensor: tensor.name });
  const run = chunkRun(slot, tensor, plan);
  if (slot.depth + (run === undefined ? 0 : 2) > plan.maxDepth) {
    throw new StConvertError(
      "LimitExceeded",
      `the name nests ${slot.depth} dicts deep${run === undefined ? "" : " (and 2 more for its chunks)"}; flax's reader stops at ${plan.maxDepth}`,
      { tensor: tensor.name },
    );
  }
  if (!slot.inDicts && tensor.byteLength > LARGEST_LIST_ARRAY) {
    throw new StConvertError(
      "Unsupported",
      `an array of ${tensor.byteLength} bytes in a list: flax chunks arrays only in dicts, and one msgpack ext value holds less than 2^32 bytes`,
      { tensor: tensor.name },
    );
  }
  slot.tensor = tensor;
}

/** Elements per chunk when the tensor is written in chunks, else undefined. */
function chunkRun(slot: SlotNode, tensor: TensorEntry, { maxChunkSize }: Plan): number | undefined {
  // flax chunks (and unchunks) only in dicts; an array in a list stays whole.
  if (!slot.inDicts) return undefined;
  const itemSize = dtypeInfo(tensor.dtype).bits / 8;
  const form = slot.form;
  if (form.type === "chunked" && tensor.byteLength > 0 && form.run * itemSize <= LARGEST_CHUNK_SIZE) return form.run;
  if (tensor.byteLength > maxChunkSize) return Math.max(1, Math.floor(maxChunkSize / itemSize));
  return undefined;
}

function clash(nested: string, leaf: string, sep: string): StConvertError {
  return new StConvertError(
    "InvalidName",
    `${quoteName(leaf)} is an array, but ${quoteName(nested)} needs it to be a dict (names are split on ${JSON.stringify(sep)}); rename one, or choose another separator`,
    { tensor: nested },
  );
}

function describe(value: FlaxValue): string {
  switch (value.kind) {
    case "nil":
      return "None";
    case "str":
      return "a string";
    case "bin":
      return "bytes";
    case "ext":
      return `an ext value of type ${value.code}`;
    default:
      return `a Python ${value.kind}`;
  }
}

/**
 * Leaves out the recorded places no tensor filled, and lists their names; a dict or list that held
 * nothing else goes too (one recorded empty stays). True when `node` is to go.
 */
function prune(node: FlaxTreeNode, missing: string[]): boolean {
  if (node.kind === "slot") {
    if (node.tensor !== undefined) return false;
    missing.push(node.name);
    return true;
  }
  if (node.kind === "dict") {
    if (node.entries.length === 0) return false;
    for (let i = node.entries.length - 1; i >= 0; i--) {
      const entry = node.entries[i]!;
      if (!prune(entry.node, missing)) continue;
      node.entries.splice(i, 1);
      if (entry.key.kind === "str") node.byText.delete(entry.key.value);
    }
    return node.entries.length === 0;
  }
  if (node.kind === "list") {
    if (node.items.length === 0) return false;
    for (let i = node.items.length - 1; i >= 0; i--) if (prune(node.items[i]!, missing)) node.items.splice(i, 1);
    return node.items.length === 0;
  }
  return false;
}

/** The entries of a dict as written: the recorded ones in their order, then the others by code point. */
function orderedEntries(dict: DictNode): DictNode["entries"] {
  const recorded = dict.entries.filter((entry) => !entry.added);
  if (recorded.length === dict.entries.length) return recorded;
  // msgpack_serialize rebuilds every dict through jax's tree_map, which sorts keys (Python's
  // sorted(): code-point order, not JavaScript's UTF-16 order).
  const added = dict.entries
    .filter((entry) => entry.added)
    .sort((a, b) => compareCodePoints((a.key as { value: string }).value, (b.key as { value: string }).value));
  return [...recorded, ...added];
}

async function writeNode(node: FlaxTreeNode, out: MsgpackEncoder, plan: Plan, inDicts: boolean): Promise<void> {
  switch (node.kind) {
    case "dict": {
      const entries = orderedEntries(node);
      out.mapHeader(entries.length);
      for (const entry of entries) {
        writeValue(entry.key, out);
        await writeNode(entry.node, out, plan, inDicts);
      }
      return;
    }
    case "list":
      out.arrayHeader(node.items.length);
      for (const item of node.items) await writeNode(item, out, plan, false);
      return;
    case "slot":
      await writeSlot(node, out, plan);
      return;
    case "leaf":
      writeValue(node.value, out);
      await out.flushIfFull();
      return;
  }
}

/** A value as msgpack-python packs it (`use_bin_type=True`; complex numbers as flax's ext 2). */
function writeValue(value: FlaxValue, out: MsgpackEncoder): void {
  switch (value.kind) {
    case "nil":
      out.nil();
      return;
    case "bool":
      out.bool(value.value);
      return;
    case "int":
      out.int(value.value);
      return;
    case "float":
      out.float64(value.bits);
      return;
    case "str":
      out.str(value.value);
      return;
    case "bin":
      out.bin(value.value);
      return;
    case "complex": {
      // `packb((x.real, x.imag))`: a fixarray of two float64.
      const payload = new Uint8Array(19);
      payload[0] = 0x92;
      payload[1] = 0xcb;
      payload.set(value.real, 2);
      payload[10] = 0xcb;
      payload.set(value.imag, 11);
      out.ext(2, payload);
      return;
    }
    case "ext":
      out.ext(value.code, value.data);
      return;
  }
}

/** Writes the tensor of a slot in the form its place asks for. */
async function writeSlot(slot: SlotNode, out: MsgpackEncoder, plan: Plan): Promise<void> {
  const tensor = slot.tensor!;
  const form = slot.form;
  try {
    if (form.type === "python" && tensor.shape.length === 0) {
      // A Python number read as a 0-d tensor goes back as the number, when its dtype is still the one it was read as.
      const kind = form.python;
      if (
        (kind === "int" && (tensor.dtype === "I64" || tensor.dtype === "U64")) ||
        (kind === "float" && tensor.dtype === "F64") ||
        (kind === "bool" && tensor.dtype === "BOOL")
      ) {
        const bytes = await readTensorBytes(tensor);
        const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        if (kind === "int") out.int(tensor.dtype === "I64" ? view.getBigInt64(0, true) : view.getBigUint64(0, true));
        else if (kind === "bool") out.bool(bytes[0] !== 0);
        else out.float64(bytes.slice().reverse());
        return;
      }
    }
    if (form.type === "npscalar" && tensor.dtype === "BOOL" && tensor.shape.length === 0) {
      // numpy's bool scalar holds 0 or 1 (flax restores 0x55 as True, and writes it back as 0x01).
      const [byte] = await readTensorBytes(tensor);
      out.ndarrayHeader([], "bool", 1, 3);
      await out.raw(Uint8Array.of(byte === 0 ? 0 : 1));
      return;
    }
    await writeArray(tensor, out, form.type === "npscalar" ? 3 : 1, chunkRun(slot, tensor, plan), plan.chunkSize);
  } catch (error) {
    throw withContext(error, { tensor: tensor.name });
  }
}

/** One ext-1 array written for a tensor: the whole of it, or one chunk. */
interface Piece {
  readonly key: string | undefined;
  readonly shape: readonly number[];
  readonly byteLength: number;
}

/** Writes one array: an ext 1 (or 3), or flax's chunk dict `{marker: true, shape: {…}, chunks: {…}}` of `run`-element chunks. */
async function writeArray(tensor: TensorEntry, out: MsgpackEncoder, type: 1 | 3, run: number | undefined, chunkSize: number): Promise<void> {
  const info = dtypeInfo(tensor.dtype);
  const itemSize = info.bits / 8;
  const pieces: Piece[] = [];
  if (run !== undefined) {
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
    const count = Math.ceil(elements / run);
    out.mapHeader(count);
    for (let i = 0; i < count; i++) {
      const n = Math.min(run, elements - i * run);
      pieces.push({ key: String(i), shape: [n], byteLength: n * itemSize });
    }
  } else {
    pieces.push({ key: undefined, shape: tensor.shape, byteLength: tensor.byteLength });
  }

  if (run === undefined) return writeWhole(tensor, out, type, info.numpyName!, chunkSize);
  const extent = tensor.byteLength >= KERNEL_COPY_FROM ? tensor.extent?.() : undefined;
  if (extent !== undefined) return writeChunkedExtent(tensor, extent, pieces, out, info.numpyName!, chunkSize);
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
      // Chunks are always ndarrays (flax chunks arrays, never numpy scalars).
      out.ndarrayHeader(piece.shape, info.numpyName!, piece.byteLength, run === undefined ? type : 1);
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
 * flax's chunk dict of an array whose bytes lie as they are in a file: each chunk's header, then
 * its bytes piped from its part of the extent (copied in the kernel where the sink can), so that a
 * 2 GiB tensor past {@link MAX_CHUNK_SIZE} is copied as one below it is. The extent's check (a
 * stored member's CRC) goes with the first chunk; a chunk that the sink declines to copy is read
 * from the same range, after the check.
 */
async function writeChunkedExtent(
  tensor: TensorEntry,
  extent: TensorExtent,
  pieces: readonly Piece[],
  out: MsgpackEncoder,
  dtypeName: string,
  chunkSize: number,
): Promise<void> {
  let start = 0;
  try {
    for (const [i, piece] of pieces.entries()) {
      out.str(piece.key!);
      out.ndarrayHeader(piece.shape, dtypeName, piece.byteLength, 1);
      const at = extent.offset + start;
      const check = i === 0 ? extent.check : undefined;
      const done = start;
      const part: TensorEntry = {
        name: tensor.name,
        dtype: tensor.dtype,
        shape: piece.shape,
        byteLength: piece.byteLength,
        async *chunks(options) {
          await check?.();
          yield* readRange(extent.source, at, piece.byteLength, options);
        },
        extent: () => ({ source: extent.source, offset: at, check, copied: extent.copied && ((bytes) => extent.copied!(done + bytes)) }),
      };
      await out.pipe(part, chunkSize);
      start += piece.byteLength;
    }
  } catch (error) {
    throw withContext(error, { tensor: tensor.name });
  }
}

/** One array in one ext value: its header, then the tensor's chunks as they come. */
async function writeWhole(tensor: TensorEntry, out: MsgpackEncoder, type: 1 | 3, dtypeName: string, chunkSize: number): Promise<void> {
  out.ndarrayHeader(tensor.shape, dtypeName, tensor.byteLength, type);
  // A large array whose bytes lie as they are in a file: copied without reading them, where the sink can.
  if (tensor.byteLength >= KERNEL_COPY_FROM && tensor.extent !== undefined) return out.pipe(tensor, chunkSize);
  await out.flushIfFull();
  let delivered = 0;
  // Each chunk is written (or copied into the buffer) before the one after next is asked for. A
  // tensor of several chunks is read one chunk ahead, so that reading overlaps writing; a small
  // one is not worth the generator.
  const chunks = tensor.chunks({ chunkSize, reuse: true });
  for await (const chunk of tensor.byteLength > chunkSize ? readAhead(chunks) : chunks) {
    delivered += chunk.byteLength;
    if (delivered > tensor.byteLength) break;
    await out.raw(chunk);
  }
  if (delivered !== tensor.byteLength) {
    throw new StConvertError(
      "ByteLengthMismatch",
      `the reader delivered ${delivered > tensor.byteLength ? "more than" : "only"} ${delivered} of the ${tensor.byteLength} bytes it declared`,
      { tensor: tensor.name },
    );
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
