/**
 * One npy array (a `.npy` file or an `.npz` member) as a lazy {@link TensorEntry}: the header is
 * read and checked against the bytes that follow it, and the data is delivered in C order and
 * little-endian, byte-swapped and repacked from Fortran order on the fly.
 */
import {
  type ChunkOptions,
  DEFAULT_CHUNK_SIZE,
  type Dtype,
  type ScratchFactory,
  type ScratchSpace,
  StConvertError,
  type TensorEntry,
  type TensorExtent,
  extentNamed,
  swapBytesInPlace,
  toSafeNumber,
  withContext,
} from "@st-convert/core";
import { FORTRAN_SLAB_SIZE, type RangeReader, fortranToC } from "./fortranToC.js";
import { type NpyHeader, type NpyHeaderOptions, type NpyVersion, readNpyHeader } from "./NpyHeader.js";
import { type DtypeDeclarations, numpyCanShape, parseDescr, parseTupleDescr, resolveVoid } from "./NpyDtype.js";
import { type Payload, StreamCursor, sourcePayload } from "./Payload.js";

/** Chunks a Fortran repack pulls from a forward-only payload. */
const CURSOR_CHUNK = 4 * 1024 * 1024;
/**
 * Chunks inflated into scratch space: the inflater's own buffer size, so that no piece is copied
 * on the way (peak RSS of a 512 MiB member: 204 MB against 236 MB with 4 MiB chunks).
 */
const SPILL_CHUNK = 1024 * 1024;

/** Options of {@link openNpyArray}. */
export interface OpenNpyArrayOptions extends NpyHeaderOptions {
  declarations: DtypeDeclarations;
  /** The dtype the container records for this array (the npz archive comment), if any. */
  recorded?: Dtype;
  /** Bytes per Fortran-repack slab. Default: `FORTRAN_SLAB_SIZE_SYNC` (16 MiB) from a file, else {@link FORTRAN_SLAB_SIZE} (64 MiB). */
  fortranSlabSize?: number;
  /** Where a forward-only payload (a deflated member) is spilled once when its Fortran repack would need more than one pass. */
  scratch?: ScratchFactory;
  /** The file, named in errors the tensor's `chunks()` throws. */
  file?: string;
}

/** An opened npy array: its header and the tensor that delivers its bytes. */
export interface NpyArray {
  readonly version: NpyVersion;
  readonly header: NpyHeader;
  readonly dataOffset: number;
  readonly tensor: TensorEntry;
}

/**
 * Reads the header of the npy in `payload` and returns the tensor called `name`.
 * @throws StConvertError from the header ({@link readNpyHeader}), the dtype (`UnsupportedDtype`,
 *   `InvalidDescr`, `UndeclaredVoidDtype`, `InvalidMetadata` when a recorded dtype does not fit),
 *   `UnexpectedEof` when fewer data bytes follow than the shape needs, `Unsupported` for a
 *   dimension past 2^53 − 1. The tensor's `chunks()` throws the container's integrity errors.
 */
export async function openNpyArray(payload: Payload, name: string, options: OpenNpyArrayOptions): Promise<NpyArray> {
  const { version, header, dataOffset } = await readNpyHeader((length) => payload.head(length), options);
  return { version, header, dataOffset, tensor: npyTensor(payload, name, header, dataOffset, options) };
}

/**
 * The tensor of an npy whose header has been read (the data starting at `dataOffset` of `payload`).
 * @throws StConvertError as {@link openNpyArray}, but for the header's own errors.
 */
export function npyTensor(payload: Payload, name: string, header: NpyHeader, dataOffset: number, options: OpenNpyArrayOptions): TensorEntry {
  const parsed = header.descrTuple === undefined ? parseDescr(header.descr) : parseTupleDescr(header.descrTuple, header.descr);
  let elements = 1n;
  for (const dim of header.shape) elements *= dim;
  let dtype: Dtype;
  let swapUnit: number;
  if (parsed.kind === "void") {
    if (parsed.swapUnit === -1 && parsed.itemSize > 1 && elements !== 0n) {
      // Deliberately stricter than numpy: np.dtype('>V2') is '|V2' (a void has no byte order), so
      // np.load returns the bytes as stored; but ml_dtypes saves a big-endian bfloat16 array as
      // '>V2' (observed), whose values are those bytes swapped. Either reading of the declared
      // dtype is wrong for one of them (an empty array has no values to differ).
      throw new StConvertError(
        "UnsupportedDtype",
        `dtype '${header.descr}' is raw void marked big-endian: numpy drops the mark (a void has no byte order) and returns the bytes as stored, while ml_dtypes saves a big-endian bfloat16 array this way, whose values are those bytes swapped; the two readings give different tensors, so st-convert reads neither (save the array little-endian: arr.astype(arr.dtype.newbyteorder('<')))`,
      );
    }
    dtype = resolveVoid(header.descr, parsed.itemSize, name, options.declarations, options.recorded);
    swapUnit = 1;
  } else {
    if (options.recorded !== undefined && options.recorded !== parsed.dtype) {
      throw new StConvertError(
        "InvalidMetadata",
        `the archive comment records ${options.recorded}, but the array's dtype is '${header.descr}' (${parsed.dtype})`,
      );
    }
    dtype = parsed.dtype;
    swapUnit = parsed.swapUnit;
  }
  const itemSize = parsed.itemSize;
  // (2^32, 2^32, 0) is no more an array to numpy than to safetensors.
  if (!numpyCanShape(header.shape, itemSize)) {
    throw new StConvertError(
      "InvalidShape",
      `shape is not valid: (${header.shape.join(", ")}) of '${header.descr}' is too big for numpy (its non-zero dimensions and item size multiply past 2^63 - 1), empty or not`,
    );
  }
  if (parsed.subarray !== undefined) {
    // np.load makes `count` items of the subarray dtype and reshapes them to the header's shape,
    // which works only when each item is one element (or there are none). Deliberately stricter
    // than np.load of a file on disk: numpy.fromfile reads the base elements the data holds, and
    // np.load takes them when they are exactly the shape's count; from a stream or an npz member
    // the same bytes are refused. One file, two verdicts in numpy itself; np.save never writes one.
    const perItem = parsed.subarray.reduce((n, d) => n * BigInt(d), 1n);
    if (perItem !== 1n && elements !== 0n) {
      throw new StConvertError(
        "UnsupportedDtype",
        `dtype '${header.descr}' is a subarray of ${perItem} elements per item, for a shape of ${elements} elements: np.save never writes one (it folds a subarray into the shape), and np.load reads it two ways, from a stream or an npz member not at all ("Failed to read all data", "cannot reshape"), from a file on disk as the base elements the data holds (numpy.fromfile); st-convert refuses it`,
      );
    }
  }
  const needed = elements * BigInt(itemSize);
  const available = payload.size - dataOffset;
  if (needed > BigInt(available)) {
    throw new StConvertError(
      "UnexpectedEof",
      `truncated data: shape (${header.shape.join(", ")}) of '${header.descr}' needs ${needed} bytes after the header, only ${available} follow`,
    );
  }
  const byteLength = Number(needed);
  if (byteLength < available) options.onWarning?.(`${available - byteLength} bytes after the array data are ignored (np.load ignores them too)`);
  const shape = header.shape.map((dim) => toSafeNumber(dim, "dimension"));
  const fortran = header.fortranOrder && shape.filter((d) => d !== 1).length > 1 && byteLength > 0;
  return new NpyTensor(payload, name, dtype, shape, byteLength, { itemSize, swapUnit, dataOffset, fortran, options });
}

/** How an {@link NpyTensor} finds and delivers its bytes. */
interface Layout {
  readonly itemSize: number;
  /** Bytes per byte-swap unit, 1 when none is needed. */
  readonly swapUnit: number;
  readonly dataOffset: number;
  /** Fortran order with more than one axis past length 1: repacked to C order. */
  readonly fortran: boolean;
  readonly options: OpenNpyArrayOptions;
}

/**
 * One npy array as a tensor. A class rather than an object of closures: an archive of 50,000
 * small members makes 50,000 of them, and their allocation is a fair part of opening it.
 */
class NpyTensor implements TensorEntry {
  constructor(
    readonly payload: Payload,
    readonly name: string,
    readonly dtype: Dtype,
    readonly shape: readonly number[],
    readonly byteLength: number,
    readonly layout: Layout,
  ) {}

  chunks({ chunkSize = DEFAULT_CHUNK_SIZE, reuse = false }: ChunkOptions = {}): AsyncIterable<Uint8Array> {
    if (!Number.isSafeInteger(chunkSize) || chunkSize < 1) {
      throw new StConvertError("InvalidArgument", `chunkSize must be a positive integer, got ${chunkSize}`);
    }
    const { itemSize, fortran, dataOffset, swapUnit } = this.layout;
    // Bytes in memory (a small kept member), in C order: views, without a generator's cost.
    const { payload } = this;
    if (payload.bytesSync !== undefined && !fortran && chunkSize >= itemSize) {
      return new MemoryChunks(this, () => payload.bytesSync!(dataOffset, this.byteLength), chunkSize, swapUnit);
    }
    // Whole elements per chunk, so that a byte swap never straddles two chunks.
    const block = chunkSize >= itemSize ? chunkSize - (chunkSize % itemSize) : itemSize;
    return this.#chunks(fortran ? this.#repacked(block) : this.#stored(block, reuse), chunkSize);
  }

  /** Where the array's bytes lie, when they pass through as they are (C order, nothing to swap, not inflated). */
  extent(): TensorExtent | undefined {
    const { fortran, dataOffset, swapUnit, options } = this.layout;
    if (fortran || swapUnit > 1 || this.payload.extent === undefined) return undefined;
    return extentNamed(this.payload.extent(dataOffset, this.byteLength), { file: options.file, tensor: this.name });
  }

  async *#chunks(source: AsyncGenerator<Uint8Array>, chunkSize: number): AsyncGenerator<Uint8Array> {
    try {
      for await (const chunk of source) {
        if (chunk.byteLength <= chunkSize) yield chunk;
        else for (let at = 0; at < chunk.byteLength; at += chunkSize) yield chunk.subarray(at, at + chunkSize);
      }
    } catch (error) {
      throw withContext(error, { file: this.layout.options.file, tensor: this.name });
    }
  }

  async *#stored(block: number, reuse: boolean): AsyncGenerator<Uint8Array> {
    const { dataOffset, swapUnit } = this.layout;
    // reuse passes through: a swapped chunk is a copy made before the next is asked for.
    for await (const chunk of this.payload.range(dataOffset, this.byteLength, { chunkSize: block, reuse })) {
      if (swapUnit <= 1) {
        yield chunk;
        continue;
      }
      // The payload's memory is not ours to modify. A copy by constructor: a Node Buffer's
      // slice() would be a view.
      const copy = new Uint8Array(chunk);
      swapBytesInPlace(copy, swapUnit);
      yield copy;
    }
  }

  /**
   * The array's bytes inflated once into scratch space (the payload's integrity is checked on the
   * way), or undefined when the scratch space fails: a notice, and the caller falls back to passes.
   */
  async #spill(scratch: ScratchFactory): Promise<ScratchSpace | undefined> {
    const { options, dataOffset } = this.layout;
    const fallBack = (error: unknown): undefined => {
      const reason = error instanceof Error ? error.message : String(error);
      options.onWarning?.(`no scratch space for the Fortran-order member (${reason}); it is inflated once per slab instead, which is slower`);
      return undefined;
    };
    let space: ScratchSpace;
    try {
      space = await scratch();
    } catch (error) {
      return fallBack(error);
    }
    try {
      for await (const chunk of this.payload.range(dataOffset, this.byteLength, { chunkSize: SPILL_CHUNK })) {
        try {
          await space.write(chunk);
        } catch (error) {
          // The scratch space failed (a full disk), not the file.
          await space.dispose();
          return fallBack(error);
        }
      }
      return space;
    } catch (error) {
      // The payload's own errors (a bad CRC, a short member) are the file's, reported as they are.
      await space.dispose();
      throw error;
    }
  }

  async *#repacked(block: number): AsyncGenerator<Uint8Array> {
    const { options, dataOffset, itemSize, swapUnit } = this.layout;
    const { payload, byteLength } = this;
    const slabSize = options.fortranSlabSize;
    let reader: RangeReader;
    let cursor: StreamCursor | undefined;
    let space: ScratchSpace | undefined;
    // A forward-only payload needs one pass per slab; past one slab, one inflation into scratch
    // space and random reads from it (at a file's speed: 16 MiB slabs, synchronous reads) are cheaper.
    if (payload.random === undefined && options.scratch !== undefined && byteLength > (slabSize ?? FORTRAN_SLAB_SIZE)) {
      space = await this.#spill(options.scratch);
    }
    // After a spill the array is read back from scratch space, where it starts at byte 0 and has
    // nothing left to verify (the spill checked the container).
    const from = space === undefined ? payload : sourcePayload(space.source());
    const start = space === undefined ? dataOffset : 0;
    if (from.random === undefined) {
      // A forward-only payload, read in passes. No reuse: the cursor keeps chunks across its reads.
      reader = cursor = new StreamCursor(() => from.range(start, byteLength, { chunkSize: CURSOR_CHUNK }));
    } else {
      reader = {
        random: true,
        read: (offset, length) => from.random!(start + offset, length),
        readIntoSync: from.randomIntoSync === undefined ? undefined : (offset, target) => from.randomIntoSync!(start + offset, target),
      };
    }
    try {
      for await (const chunk of fortranToC(reader, this.shape, itemSize, { slabSize, chunkSize: block })) {
        swapBytesInPlace(chunk, swapUnit);
        yield chunk;
      }
      // The container's integrity check: over all the bytes, or to the end of the cursor's pass.
      await (cursor === undefined ? from.verify() : cursor.finish());
    } finally {
      await cursor?.close();
      await space?.dispose();
    }
  }
}

/**
 * The chunks of an array whose bytes are in memory: views of them (copies when they must be
 * byte-swapped), by hand rather than through async generators, which cost more per tensor than
 * the copy of a small one. The bytes are fetched (and their CRC-32 checked) on the first `next()`.
 * Only for a chunk size of at least one element.
 */
class MemoryChunks implements AsyncIterableIterator<Uint8Array> {
  #bytes: Uint8Array | undefined;
  #at = 0;

  constructor(
    private readonly tensor: NpyTensor,
    private readonly fetch: () => Uint8Array,
    private readonly chunkSize: number,
    private readonly swapUnit: number,
  ) {}

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<Uint8Array>> {
    try {
      return Promise.resolve(this.#step());
    } catch (error) {
      return Promise.reject(withContext(error, { file: this.tensor.layout.options.file, tensor: this.tensor.name }));
    }
  }

  #step(): IteratorResult<Uint8Array> {
    const { byteLength } = this.tensor;
    if (this.#at >= byteLength) return { done: true, value: undefined };
    this.#bytes ??= this.fetch();
    const at = this.#at;
    // Whole elements per chunk (chunkSize is at least one), so a swap never straddles two.
    this.#at = Math.min(byteLength, at + this.chunkSize - (this.chunkSize % this.tensor.layout.itemSize));
    let chunk = at === 0 && this.#at === byteLength ? this.#bytes : this.#bytes.subarray(at, this.#at);
    if (this.swapUnit > 1) {
      chunk = new Uint8Array(chunk);
      swapBytesInPlace(chunk, this.swapUnit);
    }
    return { done: false, value: chunk };
  }

  async return(): Promise<IteratorResult<Uint8Array>> {
    this.#at = this.tensor.byteLength;
    return { done: true, value: undefined };
  }
}
