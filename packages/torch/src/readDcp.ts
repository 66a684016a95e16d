/**
 * Distributed checkpoints (`torch.distributed.checkpoint`, DCP) read as one source of named
 * tensors: each tensor consolidated from the chunks its ranks saved into C order, byte for byte
 * what torch's `dcp_to_torch_save` gives, streaming, in memory bounded by a few chunks' rows.
 *
 * A DCP folder holds `.metadata` (decoded by `dcpMetadata.ts`) and `__R_N.distcp` files in which
 * every chunk is a whole `torch.save` record at (offset, length): each is read by this package's
 * checkpoint reader over that range of the file. Spec: torch 2.13 `torch/distributed/checkpoint/`
 * (`filesystem.py`, `format_utils.py`); facts in the repository's `docs/gguf-dcp.md`.
 */
import {
  type ByteSource,
  type ChunkOptions,
  DEFAULT_CHUNK_SIZE,
  type ExtentCrc32,
  type Metadata,
  type RunReader,
  StConvertError,
  type TensorEntry,
  type TensorExtent,
  type TensorExtentRun,
  type TensorSource,
  createMetadata,
  extentNamed,
  fileRunReader,
  isStConvertError,
  quoteName,
  toByteSource,
  withContext,
} from "@st-convert/core";
import { type DcpChunk, type DcpMetadata, type DcpStorage, type DcpTensorItem, decodeDcpMetadata } from "./dcpMetadata.js";
import { MAX_PICKLE_SIZE, MAX_WARNINGS, type TorchReadOptions, type TorchTensor, readTorchZipValue } from "./readTorch.js";
import { describeValue, type PickleValue } from "./Unpickler.js";

/**
 * Output rows gathered at a time where chunks split a tensor across its columns: each group is
 * filled from every chunk's rows and handed on, so memory stays at about this size plus one read
 * chunk per piece, whatever the tensor's size (a row larger than this is gathered in parts). 1 MiB,
 * not 8: three blocks and the shares read into them then stay in the CPU's cache (1 GiB split by
 * columns over 4 ranks: 0.68–0.92 s against 0.76–1.30 s with 8 MiB, 5 runs each, a shared machine).
 */
export const DCP_ROW_GROUP_SIZE = 1024 * 1024;

/**
 * Bytes a gather that reads through the chunks' records reads at a time, all chunks together
 * (each reads whole groups' shares of it): 8 reads of 256 KiB per MiB gathered over 4 ranks kept
 * the main thread waking the thread pool (and the CRC thread) for most of its time.
 */
const DCP_GATHER_READ = 8 * 1024 * 1024;

/** Options of {@link readDcp}. */
export interface DcpReadOptions extends Pick<TorchReadOptions, "maxMemoEntries" | "maxStackSize" | "maxNestingDepth" | "maxObjects" | "codec"> {
  /** Receives non-fatal notices (items skipped). */
  onWarning?: (message: string) => void;
  /** The tensors kept (`--filter`): the others are left out before any of their records is opened. Other items are always read. */
  include?: (name: string) => boolean;
  /** Largest `.metadata`, in bytes. Default `MAX_PICKLE_SIZE`. */
  maxMetadataSize?: number;
  /** Default {@link DCP_ROW_GROUP_SIZE}; tests lower it to cross group edges on small tensors. */
  rowGroupSize?: number;
  /** Default `MAX_WARNINGS`. */
  maxWarnings?: number;
}

/** One consolidated tensor. */
export interface DcpTensor extends TensorEntry {
  /** The chunks its ranks saved, as the metadata lists them. */
  readonly pieces: readonly DcpChunk[];
}

/** A distributed checkpoint whose tensors have not been read yet. */
export interface DcpCheckpoint extends TensorSource {
  readonly format: "dcp";
  /** Plain numbers and strings among the non-tensor items, by name (`step` → `"7"`): Python's `str()` of each. */
  readonly metadata: Metadata;
  readonly tensors: readonly DcpTensor[];
  /** Every item that is not a tensor, by name, with what it holds (`an int`, `a tuple`…). */
  readonly others: readonly { name: string; holds: string; carried: boolean }[];
  readonly version: string | undefined;
}

/** A stretch of a file as a source of its own: a chunk's `torch.save` record. */
function windowOf(file: ByteSource, storage: DcpStorage): ByteSource & { readonly base: ByteSource; readonly start: number } {
  const { offset, length } = storage;
  return {
    name: `${file.name ?? storage.relativePath} [${offset}, ${offset + length})`,
    size: length,
    base: file,
    start: offset,
    read: async (at, n) => {
      if (at + n > length) throw new StConvertError("UnexpectedEof", `a read of ${n} bytes at ${at} passes the record's ${length} bytes`);
      return file.read(offset + at, n);
    },
    readInto:
      file.readInto === undefined
        ? undefined
        : async (at, target) => {
            if (at + target.byteLength > length) throw new StConvertError("UnexpectedEof", `a read at ${at} passes the record's ${length} bytes`);
            return file.readInto!(offset + at, target);
          },
    readIntoSync:
      file.readIntoSync === undefined
        ? undefined
        : (at, target) => {
            if (at + target.byteLength > length) throw new StConvertError("UnexpectedEof", `a read at ${at} passes the record's ${length} bytes`);
            file.readIntoSync!(offset + at, target);
          },
  };
}

/**
 * A `relative_path` that names a file of the folder: not absolute, no `..` or empty segment, no
 * backslash or NUL (torch joins it to the folder as it is; a hostile one would reach elsewhere).
 */
function checkRelativePath(path: string, name: string): void {
  const bad = (why: string): never => {
    throw new StConvertError("InvalidRelativePath", `its storage's relative_path ${JSON.stringify(path)} ${why}`, { tensor: name });
  };
  if (path === "") bad("is empty");
  if (path.includes("\0") || path.includes("\\")) bad("holds a NUL or a backslash");
  if (path.startsWith("/") || /^[A-Za-z]:/.test(path)) bad("is absolute: it leaves the checkpoint's folder");
  for (const part of path.split("/")) {
    if (part === "..") bad("climbs out of the checkpoint's folder with ..");
    if (part === "" || part === ".") bad("has an empty or . segment");
  }
}

/**
 * Checks that the chunks tile the tensor exactly: each within the size, none sharing an element
 * with another, together covering every element (torch's loader checks none of this, and a
 * missing chunk leaves uninitialised memory in its output).
 * @throws StConvertError `ChunksDoNotTile`, `ValidationOverflow`.
 */
function checkTiling(item: DcpTensorItem, elementSize: number): void {
  const { name, size, chunks } = item;
  const where = (c: DcpChunk): string => `[${c.offsets.join(", ")}] of size [${c.sizes.join(", ")}]`;
  const fail = (rule: string): never => {
    throw new StConvertError("ChunksDoNotTile", rule, { tensor: name });
  };
  let numel = 1n;
  for (const d of size) numel *= BigInt(d);
  if (numel * BigInt(elementSize) > BigInt(Number.MAX_SAFE_INTEGER))
    throw new StConvertError("ValidationOverflow", `size [${size.join(", ")}] holds ${numel * BigInt(elementSize)} bytes, past 2^53 - 1`, { tensor: name });
  if (chunks.length === 0 && numel > 0n) fail(`no chunk holds any of its ${numel} elements`);
  let covered = 0n;
  for (const c of chunks) {
    if (c.offsets.length !== size.length || c.sizes.length !== size.length)
      fail(`the chunk at ${where(c)} has ${c.offsets.length} offsets and ${c.sizes.length} sizes for a tensor of ${size.length} dimensions`);
    let volume = 1n;
    for (let d = 0; d < size.length; d++) {
      if (c.offsets[d]! + c.sizes[d]! > size[d]!) fail(`the chunk at ${where(c)} reaches past the edge of its size [${size.join(", ")}] in dimension ${d}`);
      volume *= BigInt(c.sizes[d]!);
    }
    covered += volume;
  }
  // Overlaps: chunks sorted by their first offset, each compared with those whose rows meet its own.
  const solid = chunks.filter((c) => c.sizes.every((s) => s > 0));
  if (size.length === 0 && solid.length > 1) fail(`${solid.length} chunks each hold its one element: they overlap`);
  if (size.length > 0) {
    solid.sort((a, b) => a.offsets[0]! - b.offsets[0]!);
    for (let i = 0; i < solid.length; i++) {
      const a = solid[i]!;
      for (let j = i + 1; j < solid.length && solid[j]!.offsets[0]! < a.offsets[0]! + a.sizes[0]!; j++) {
        const b = solid[j]!;
        let meet = true;
        for (let d = 0; d < size.length && meet; d++)
          meet = Math.max(a.offsets[d]!, b.offsets[d]!) < Math.min(a.offsets[d]! + a.sizes[d]!, b.offsets[d]! + b.sizes[d]!);
        if (meet) fail(`the chunks at ${where(a)} and ${where(b)} overlap`);
      }
    }
  }
  if (covered !== numel) fail(`its chunks hold ${covered} of its ${numel} elements: a hole no rank saved`);
}

/** A chunk opened: its record read and checked against the metadata. */
interface OpenedChunk {
  readonly chunk: DcpChunk;
  readonly tensor: TorchTensor;
  /** Where the record starts in its file (extents are given in the file). */
  readonly window: ReturnType<typeof windowOf>;
}

/**
 * Reads a distributed checkpoint: `metadata` is its `.metadata` file; `openFile(relativePath)`
 * opens the files its storage entries name, beside it (the caller closes them). Every chunk of a
 * tensor the selection keeps is opened and checked now (its record, its dtype and shape against
 * the metadata, its range within its file); no tensor byte is read.
 * @throws StConvertError `InvalidDcpMetadata`, `ChunksDoNotTile`, `ChunkMismatch`,
 *   `StoragePastEnd`, `InvalidRelativePath`, `UnsupportedTransform`, `ValidationOverflow`, and the
 *   checkpoint reader's codes for a chunk's record, naming the tensor.
 */
export async function readDcp(
  metadata: ByteSource | Uint8Array,
  openFile: (relativePath: string) => Promise<ByteSource>,
  options: DcpReadOptions = {},
): Promise<DcpCheckpoint> {
  const source = toByteSource(metadata);
  try {
    const limit = options.maxMetadataSize ?? MAX_PICKLE_SIZE;
    if (source.size > limit)
      throw new StConvertError("LimitExceeded", `the metadata has ${source.size} bytes, more than the limit of ${limit} (maxMetadataSize)`);
    const decoded: DcpMetadata = decodeDcpMetadata(await source.read(0, source.size), {
      maxMemoEntries: options.maxMemoEntries,
      maxStackSize: options.maxStackSize,
      maxNestingDepth: options.maxNestingDepth,
      maxObjects: options.maxObjects,
    });
    const files = new Map<string, Promise<ByteSource>>();
    const fileOf = (storage: DcpStorage, name: string): Promise<ByteSource> => {
      checkRelativePath(storage.relativePath, name);
      let file = files.get(storage.relativePath);
      if (file === undefined) {
        file = openFile(storage.relativePath).then(
          (opened) => {
            // A local file that is not a regular one (a FIFO, a device) has no descriptor to copy from.
            if ("fd" in opened && (opened as { fd?: number }).fd === undefined)
              throw new StConvertError("InvalidRelativePath", `its storage's relative_path ${JSON.stringify(storage.relativePath)} is not a regular file`, {
                tensor: name,
              });
            return opened;
          },
          (error: unknown) => {
            if (isStConvertError(error) && error.code === "InvalidRelativePath") throw error;
            const why = isStConvertError(error) ? error.rule : String(error);
            throw new StConvertError(
              "InvalidRelativePath",
              `its storage's relative_path ${JSON.stringify(storage.relativePath)} is not a regular file of the folder (${why})`,
              { tensor: name, cause: error },
            );
          },
        );
        files.set(storage.relativePath, file);
        file.catch(() => {});
      }
      return file;
    };
    const record = async (storage: DcpStorage, name: string): Promise<ReturnType<typeof windowOf>> => {
      const file = await fileOf(storage, name);
      if (storage.offset + storage.length > file.size) {
        throw new StConvertError(
          "StoragePastEnd",
          `its record [${storage.offset}, ${storage.offset + storage.length}) in ${storage.relativePath} passes the file's end at byte ${file.size}`,
          { tensor: name },
        );
      }
      return windowOf(file, storage);
    };
    // A chunk's record is read whole, as torch.load reads it: the selection and the notices are this reader's.
    const readOptions: TorchReadOptions = {
      maxMemoEntries: options.maxMemoEntries,
      maxStackSize: options.maxStackSize,
      maxNestingDepth: options.maxNestingDepth,
      maxObjects: options.maxObjects,
      codec: options.codec,
      rootName: "chunk",
    };

    const tensors: DcpTensor[] = [];
    const others: { name: string; holds: string; carried: boolean }[] = [];
    const carried: [string, string][] = [];
    const notices: string[] = [];
    for (const item of decoded.items) {
      // The selection is the tensors': the other items are read whatever it keeps (they are small).
      if (item.kind === "tensor" && options.include !== undefined && !options.include(item.name)) continue;
      try {
        if (item.kind === "bytes") {
          const { value } = await readTorchZipValue(await record(item.storage, item.name), readOptions);
          const text = plainText(value);
          others.push({ name: item.name, holds: describeValue(value), carried: text !== undefined });
          if (text !== undefined) carried.push([item.name, text]);
          else notices.push(`skipped ${quoteName(item.name)}: ${describeValue(value)} (only plain numbers and strings are carried into the metadata)`);
          continue;
        }
        tensors.push(await consolidated(item, record, readOptions, options.rowGroupSize ?? DCP_ROW_GROUP_SIZE));
      } catch (error) {
        throw withContext(error, { tensor: item.name });
      }
    }
    const maxWarnings = options.maxWarnings ?? MAX_WARNINGS;
    for (const notice of notices.slice(0, maxWarnings)) options.onWarning?.(notice);
    if (notices.length > maxWarnings) options.onWarning?.(`skipped ${notices.length - maxWarnings} more items that are not tensors`);
    return { format: "dcp", metadata: createMetadata(carried), tensors, others, version: decoded.version };
  } catch (error) {
    throw withContext(error, { file: source.name });
  }
}

/** A plain value as Python's `str()` writes it (ints, floats, bools, strings); undefined for anything else. */
function plainText(value: PickleValue): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "number" || typeof value === "bigint") return String(value);
  if (value !== null && typeof value === "object" && value.kind === "float") return pythonFloat(value.value);
  return undefined;
}

/** Python's `repr(float)`: the shortest digits that read back (as JavaScript's), in Python's notation. */
export function pythonFloat(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  const [mantissa, exponentText] = x.toExponential().split("e") as [string, string];
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 16) return `${mantissa}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  const plain = Object.is(x, -0) ? "-0" : String(x);
  return plain.includes(".") ? plain : `${plain}.0`;
}

/**
 * The consolidated entry of one tensor: its tiling checked, every chunk's record opened and its
 * dtype and shape compared with the metadata.
 */
async function consolidated(
  item: DcpTensorItem,
  record: (storage: DcpStorage, name: string) => Promise<ReturnType<typeof windowOf>>,
  readOptions: TorchReadOptions,
  rowGroupSize: number,
): Promise<DcpTensor> {
  const { name, size, dtype } = item;
  checkTiling(item, dtype.size);
  const opened: OpenedChunk[] = [];
  for (const chunk of item.chunks) {
    const window = await record(chunk.storage, name);
    // Named after the tensor, so that what its record throws later (a CRC-32 that fails) names it.
    const { file } = await readTorchZipValue(window, { ...readOptions, rootName: name });
    const tensor = file.tensors[0];
    const at = `the chunk at [${chunk.offsets.join(", ")}]`;
    if (file.tensors.length !== 1 || tensor === undefined)
      throw new StConvertError("ChunkMismatch", `${at} holds ${file.tensors.length} tensors, not the one tensor of a chunk`, { tensor: name });
    if (tensor.dtype !== dtype.code)
      throw new StConvertError("ChunkMismatch", `${at} holds ${tensor.dtype}, but the metadata says torch.${dtype.torchName} (${dtype.code})`, {
        tensor: name,
      });
    if (tensor.shape.length !== chunk.sizes.length || tensor.shape.some((d, i) => d !== chunk.sizes[i]))
      throw new StConvertError("ChunkMismatch", `${at} holds shape [${tensor.shape.join(", ")}], but the metadata says [${chunk.sizes.join(", ")}]`, {
        tensor: name,
      });
    opened.push({ chunk, tensor, window });
  }
  let byteLength = dtype.size;
  for (const d of size) byteLength *= d;
  const solid = opened.filter((o) => o.tensor.byteLength > 0);
  // Split by rows only (or one chunk): the chunks in row order are the tensor's bytes as they are.
  const byRows = solid.every((o) => o.chunk.sizes.every((s, d) => d === 0 || s === size[d]));
  if (byRows) solid.sort((a, b) => a.chunk.offsets[0]! - b.chunk.offsets[0]!);
  const entry: DcpTensor = {
    name,
    dtype: dtype.code!,
    shape: [...size],
    byteLength,
    pieces: item.chunks,
    chunks: byRows
      ? (chunkOptions?: ChunkOptions) => concatenated(solid, chunkOptions)
      : (chunkOptions?: ChunkOptions) => gathered(item, solid, chunkOptions, rowGroupSize),
    // One chunk holding the whole tensor: its bytes where the record keeps them.
    extent: solid.length === 1 && byRows && byteLength > 0 ? () => remapped(solid[0]!, name) : undefined,
    // Split by rows: each chunk's bytes where its record keeps them, one run per chunk, in order.
    extents:
      solid.length > 1 && byRows
        ? () => {
            const runs: TensorExtentRun[] = [];
            for (const piece of solid) {
              const extent = remapped(piece, name);
              if (extent === undefined) return undefined;
              runs.push({ ...extent, length: piece.tensor.byteLength });
            }
            return runs;
          }
        : undefined,
  };
  return entry;
}

/** The extent of a chunk's record's bytes, in its file (the kernel copy needs the file itself). */
function remapped(piece: OpenedChunk, name: string): TensorExtent | undefined {
  const inner = piece.tensor.extent?.();
  if (inner === undefined) return undefined;
  if (inner.source !== piece.window) return inner;
  return extentNamed({ ...inner, source: piece.window.base, offset: piece.window.start + inner.offset }, { tensor: name });
}

/** The chunks' bytes one after the other (rows split only: each chunk is a run of whole rows). */
async function* concatenated(pieces: readonly OpenedChunk[], options: ChunkOptions = {}): AsyncGenerator<Uint8Array> {
  for (const piece of pieces) yield* piece.tensor.chunks(options);
}

/** Reads a chunk's bytes in order, a given number at a time. */
class ChunkCursor {
  #iterator: AsyncIterator<Uint8Array> | undefined;
  #pending: Uint8Array = new Uint8Array(0);

  constructor(
    private readonly piece: OpenedChunk,
    private readonly chunkSize: number,
  ) {}

  /** Where bytes that span two read chunks are joined: kept and reused (fresh memory costs the kernel a page-zeroing pass). */
  #joined: Uint8Array = new Uint8Array(0);

  /** Bytes taken so far. */
  #taken = 0;

  /**
   * The next `length` bytes of the chunk, in one array, valid until the next call: the caller
   * copies them out at once (so the chunks are asked for with `reuse`). The last bytes come only
   * once the record's check of them passed (its CRC-32, which the record's stream takes at its end).
   */
  async take(length: number): Promise<Uint8Array> {
    const out = await this.#bytes(length);
    this.#taken += length;
    if (this.#taken === this.piece.tensor.byteLength) {
      const end = this.#pending.byteLength > 0 ? { done: false } : await this.#iterator?.next();
      if (end !== undefined && end.done !== true) throw new StConvertError("ByteLengthMismatch", "a chunk's record gave more bytes than its shape needs");
    }
    return out;
  }

  async #bytes(length: number): Promise<Uint8Array> {
    // A share is read as one chunk of its own size: the next chunk is it, with no join.
    if (this.#pending.byteLength === 0 && length > 0) this.#pending = await this.#next();
    if (this.#pending.byteLength >= length) {
      const out = this.#pending.subarray(0, length);
      this.#pending = this.#pending.subarray(length);
      return out;
    }
    if (this.#joined.byteLength < length) this.#joined = new Uint8Array(length);
    const out = this.#joined.subarray(0, length);
    let filled = 0;
    while (filled < length) {
      if (this.#pending.byteLength === 0) this.#pending = await this.#next();
      const n = Math.min(length - filled, this.#pending.byteLength);
      out.set(this.#pending.subarray(0, n), filled);
      this.#pending = this.#pending.subarray(n);
      filled += n;
    }
    return out;
  }

  async #next(): Promise<Uint8Array> {
    this.#iterator ??= this.piece.tensor.chunks({ chunkSize: this.chunkSize, reuse: true })[Symbol.asyncIterator]();
    const next = await this.#iterator.next();
    if (next.done === true) throw new StConvertError("ByteLengthMismatch", "a chunk's record gave fewer bytes than its shape needs");
    return next.value;
  }

  async close(): Promise<void> {
    await this.#iterator?.return?.();
  }
}

/** A group of output: `count` indices of the cut dimension, and the chunks that hold them. */
interface Group {
  readonly count: number;
  readonly meeting: readonly OpenedChunk[];
}

/**
 * The groups of a gather, in output order: for every index of the dimensions before the cut
 * (`k`), the cut dimension in runs of at most `perGroup` indices that end where a chunk starts or
 * ends, so that each chunk meets a group whole or not at all.
 */
function* groupsOf(size: readonly number[], k: number, pieces: readonly OpenedChunk[], perGroup: number): Generator<Group> {
  const holds = (p: OpenedChunk, d: number, i: number): boolean => p.chunk.offsets[d]! <= i && i < p.chunk.offsets[d]! + p.chunk.sizes[d]!;
  const edges = new Set<number>([0, size[k]!]);
  for (const p of pieces) {
    edges.add(p.chunk.offsets[k]!);
    edges.add(p.chunk.offsets[k]! + p.chunk.sizes[k]!);
  }
  const bounds = [...edges].sort((a, b) => a - b);
  const prefix = new Array<number>(k).fill(0);
  for (;;) {
    const around = pieces.filter((p) => prefix.every((i, d) => holds(p, d, i)));
    for (let b = 0; b + 1 < bounds.length; b++) {
      const meeting = around.filter((p) => holds(p, k, bounds[b]!));
      for (let first = bounds[b]!; first < bounds[b + 1]!; first += perGroup) yield { count: Math.min(perGroup, bounds[b + 1]! - first), meeting };
    }
    let d = k - 1;
    for (; d >= 0; d--) {
      if (++prefix[d]! < size[d]!) break;
      prefix[d] = 0;
    }
    if (d < 0) return;
  }
}

/**
 * The tensor in C order where chunks split it across columns (Shard(1), a 2-D mesh): output is
 * gathered a group at a time, each chunk read forward through its own bytes (chunks are
 * C-contiguous, so what a chunk holds of a group is one run of its bytes, and the groups meet
 * each chunk in its own order), scattered into place. A group is whole rows (dimension 0) where
 * a row fits `rowGroupSize`; where one does not, the cut moves to the first dimension whose one
 * index does (a [2, 10^9] weight split by columns is gathered a part of a row at a time).
 */
async function* gathered(item: DcpTensorItem, pieces: readonly OpenedChunk[], options: ChunkOptions = {}, rowGroupSize: number): AsyncGenerator<Uint8Array> {
  const { size, dtype } = item;
  const es = dtype.size;
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  if (size.some((d) => d === 0)) return;
  const tail = (sizes: readonly number[], from: number): number => sizes.slice(from).reduce((n, d) => n * d, 1) * es;
  let k = 0;
  while (k < size.length - 1 && tail(size, k + 1) > rowGroupSize) k++;
  const slab = tail(size, k + 1);
  const inner = size.slice(k + 1);
  const perGroup = Math.max(1, Math.floor(rowGroupSize / slab));
  const slabOf = (p: OpenedChunk): number => tail(p.chunk.sizes, k + 1);
  const groups = groupsOf(size, k, pieces, perGroup);
  const inPlace = placedPieces(pieces, item.name);
  if (inPlace !== undefined) {
    yield* readInPlace(groups, inPlace, k, inner, slab, es, chunkSize, options.reuse === true);
    return;
  }
  // Each chunk is read in pieces of whole group shares (so that a share is mostly within one read
  // chunk: no join), as many groups' worth as DCP_GATHER_READ holds for all chunks together: reads
  // (and their trips to the thread pool and the CRC thread) stay few, their memory bounded.
  const sharesPerRead = Math.max(1, Math.floor(DCP_GATHER_READ / (perGroup * slab)));
  const cursors = new Map(pieces.map((p) => [p, new ChunkCursor(p, Math.max(1, sharesPerRead * perGroup * slabOf(p)))]));
  // With `reuse`, two blocks take turns: a block is filled again only once the consumer has asked
  // for a chunk of the other one, so it is done with this one's chunks but perhaps the last.
  const blockOf = blockTurns(options.reuse === true ? 2 : 0);
  // Every chunk's share of a group is read at once, and the next group's before this one is handed on.
  const take = (g: Group): Promise<Uint8Array[]> => {
    const taking = Promise.all(g.meeting.map((p) => cursors.get(p)!.take(g.count * slabOf(p))));
    taking.catch(() => {});
    return taking;
  };
  let group = groups.next();
  let next = group.done === true ? undefined : take(group.value);
  try {
    while (group.done !== true) {
      const { count, meeting } = group.value;
      const parts = await next!;
      const block = blockOf(count * slab);
      meeting.forEach((p, j) => scatter(parts[j]!, block, [count, ...p.chunk.sizes.slice(k + 1)], [0, ...p.chunk.offsets.slice(k + 1)], [count, ...inner], es));
      group = groups.next();
      next = group.done === true ? undefined : take(group.value);
      for (let at = 0; at < block.byteLength; at += chunkSize) yield block.subarray(at, Math.min(at + chunkSize, block.byteLength));
    }
  } finally {
    await next?.catch(() => {});
    for (const cursor of cursors.values()) await cursor.close().catch(() => {});
  }
}

/**
 * The blocks a gather fills, group after group: `turns` blocks taking turns (each grown as needed,
 * filled again `turns` groups later), or a fresh block every time when `turns` is 0.
 */
function blockTurns(turns: number): (length: number) => Uint8Array {
  if (turns === 0) return (length) => new Uint8Array(length);
  const blocks = Array.from({ length: turns }, () => new Uint8Array(0));
  let turn = 0;
  return (length) => {
    turn = (turn + 1) % turns;
    if (blocks[turn]!.byteLength < length) blocks[turn] = new Uint8Array(length);
    return blocks[turn]!.subarray(0, length);
  };
}

/** A chunk whose bytes are read straight into place: its file, where its bytes start, its check. */
interface PlacedPiece {
  readonly read: RunReader;
  readonly offset: number;
  readonly byteLength: number;
  /** The check of its bytes, as their CRC-32 (absent: nothing to check). */
  readonly crc32: ExtentCrc32 | undefined;
  /** Bytes read so far, and their CRC-32. */
  consumed: number;
  crc: number;
}

/**
 * The chunks as {@link PlacedPiece}s, when every one lies as it is in a file that runs can be
 * read from in place (the native module's `readRuns`) and its check, if any, is the CRC-32 of
 * exactly its bytes; undefined otherwise, and the gather reads through the records.
 */
function placedPieces(pieces: readonly OpenedChunk[], name: string): Map<OpenedChunk, PlacedPiece> | undefined {
  const placed = new Map<OpenedChunk, PlacedPiece>();
  for (const piece of pieces) {
    const extent = remapped(piece, name);
    const read = extent === undefined ? undefined : fileRunReader(extent.source);
    if (extent === undefined || read === undefined || (extent.check !== undefined && extent.crc32 === undefined)) return undefined;
    placed.set(piece, { read, offset: extent.offset, byteLength: piece.tensor.byteLength, crc32: extent.crc32, consumed: 0, crc: 0 });
  }
  return placed;
}

/**
 * The runs in which a chunk's share of a group (a C-order block of shape `sizes`) lies in the
 * group's C-order block of shape `full`, at `offsets`: `count` runs of `run` bytes, `stride`
 * apart, the first at `base`. Undefined when they are not evenly spaced (a chunk that cuts a
 * dimension between the group's and the run's), which {@link scatter} places run by run.
 */
function runLayout(
  sizes: readonly number[],
  offsets: readonly number[],
  full: readonly number[],
  es: number,
): { run: number; stride: number; count: number; base: number } | undefined {
  const { k, run, strides, base } = runsOf(sizes, offsets, full, es);
  let count = 1;
  for (let d = 0; d < k; d++) {
    // Dimensions between the first and the run's, held whole, keep the runs evenly spaced.
    if (d > 0 && (sizes[d] !== full[d] || offsets[d] !== 0)) return undefined;
    count *= sizes[d]!;
  }
  return { run, stride: k > 0 ? strides[k - 1]! : run, count, base };
}

/**
 * How a C-order block of shape `sizes` lies in the C-order block of shape `full` at `offsets`,
 * `es` bytes an element: runs of `run` bytes (the trailing dimensions both hold whole, merged, and
 * dimension `k`, where the block starts cutting), `full`'s strides in bytes, and where the first run starts.
 */
function runsOf(
  sizes: readonly number[],
  offsets: readonly number[],
  full: readonly number[],
  es: number,
): { k: number; run: number; strides: number[]; base: number } {
  const rank = sizes.length;
  let k = rank - 1;
  let run = es;
  while (k > 0 && sizes[k] === full[k] && offsets[k] === 0) run *= sizes[k--]!;
  run *= sizes[k]!;
  const strides = new Array<number>(rank);
  let stride = es;
  for (let d = rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= full[d]!;
  }
  let base = 0;
  for (let d = 0; d <= k; d++) base += offsets[d]! * strides[d]!;
  return { k, run, strides, base };
}

/**
 * The gather of {@link gathered} with each chunk's share of a group read from its file straight
 * into its place in the group's block (one read per chunk and group, the CRC-32 folded as the
 * bytes arrive): no copy between the page cache and the block, none on the main thread. The next
 * group is read while the consumer writes this one; with `reuse`, three blocks take turns (a
 * block is filled again only once the consumer has asked for a chunk of a later one).
 */
async function* readInPlace(
  groups: Generator<Group>,
  placed: Map<OpenedChunk, PlacedPiece>,
  k: number,
  inner: readonly number[],
  slab: number,
  es: number,
  chunkSize: number,
  reuse: boolean,
): AsyncGenerator<Uint8Array> {
  for (const piece of placed.values()) piece.crc = piece.crc32 === undefined ? 0 : await piece.crc32.initial();
  const blockOf = blockTurns(reuse ? 3 : 0);
  const fill = async ({ count, meeting }: Group): Promise<Uint8Array> => {
    const block = blockOf(count * slab);
    const full = [count, ...inner];
    // Every read settled before a failure is reported: none goes on writing into a block given up.
    const reads = await Promise.allSettled(
      meeting.map(async (p) => {
        const piece = placed.get(p)!;
        const sizes = [count, ...p.chunk.sizes.slice(k + 1)];
        const offsets = [0, ...p.chunk.offsets.slice(k + 1)];
        const layout = runLayout(sizes, offsets, full, es);
        if (layout === undefined) {
          // Runs not evenly spaced: the share read whole, placed run by run.
          const share = new Uint8Array(sizes.reduce((n, d) => n * d, es));
          piece.crc = await piece.read(piece.offset + piece.consumed, share, 0, share.byteLength, share.byteLength, 1, piece.crc);
          scatter(share, block, sizes, offsets, full, es);
          piece.consumed += share.byteLength;
        } else {
          const { run, stride, count: runs, base } = layout;
          piece.crc = await piece.read(piece.offset + piece.consumed, block, base, run, stride, runs, piece.crc);
          piece.consumed += run * runs;
        }
        if (piece.consumed === piece.byteLength) await piece.crc32?.finish(piece.crc);
      }),
    );
    for (const read of reads) if (read.status === "rejected") throw read.reason;
    return block;
  };
  let group = groups.next();
  let filling = group.done === true ? undefined : fill(group.value);
  try {
    while (filling !== undefined) {
      const block = await filling;
      group = groups.next();
      filling = group.done === true ? undefined : fill(group.value);
      // Marked handled now: a failing read is reported when awaited, not as an unhandled rejection.
      filling?.catch(() => {});
      for (let at = 0; at < block.byteLength; at += chunkSize) yield block.subarray(at, Math.min(at + chunkSize, block.byteLength));
    }
  } finally {
    await filling?.catch(() => {});
  }
}

/**
 * Copies a C-order block of shape `sizes` into the C-order block `target` of shape `full` at
 * `offsets`, by runs: the trailing dimensions the two share whole, and the last one the block
 * holds part of, are one run of bytes in both.
 */
function scatter(bytes: Uint8Array, target: Uint8Array, sizes: readonly number[], offsets: readonly number[], full: readonly number[], es: number): void {
  const { k, run, strides: targetStrides, base } = runsOf(sizes, offsets, full, es);
  const outer = sizes.slice(0, k);
  const count = outer.reduce((n, d) => n * d, 1);
  const index = new Array<number>(k).fill(0);
  let at = base;
  for (let i = 0, from = 0; i < count; i++, from += run) {
    target.set(bytes.subarray(from, from + run), at);
    for (let d = k - 1; d >= 0; d--) {
      at += targetStrides[d]!;
      if (++index[d]! < outer[d]!) break;
      at -= targetStrides[d]! * outer[d]!;
      index[d] = 0;
    }
  }
}
