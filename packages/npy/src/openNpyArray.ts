/**
 * One npy array (a `.npy` file or an `.npz` member) as a lazy {@link TensorEntry}: the header is
 * read and checked against the bytes that follow it, and the data is delivered in C order and
 * little-endian, byte-swapped and repacked from Fortran order on the fly.
 */
import {
  DEFAULT_CHUNK_SIZE,
  type Dtype,
  type ScratchFactory,
  type ScratchSpace,
  StConvertError,
  type TensorEntry,
  swapBytesInPlace,
  toSafeNumber,
  withContext,
} from "@st-convert/core";
import { FORTRAN_SLAB_SIZE, type RangeReader, fortranToC } from "./fortranToC.js";
import { type NpyHeader, type NpyHeaderOptions, type NpyVersion, readNpyHeader } from "./NpyHeader.js";
import { type DtypeDeclarations, parseDescr, resolveVoid } from "./NpyDtype.js";
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
  const parsed = parseDescr(header.descr);
  let dtype: Dtype;
  let swapUnit: number;
  if (parsed.kind === "void") {
    dtype = resolveVoid(header.descr, parsed.itemSize, name, options.declarations, options.recorded);
    const unit = dtype === "C64" ? 4 : parsed.itemSize;
    swapUnit = parsed.swapUnit === -1 && unit > 1 ? unit : 1;
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
  let elements = 1n;
  for (const dim of header.shape) elements *= dim;
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
  const slabSize = options.fortranSlabSize;

  async function* stored(block: number, reuse: boolean): AsyncGenerator<Uint8Array> {
    // reuse passes through: a swapped chunk is a copy made before the next is asked for.
    for await (const chunk of payload.range(dataOffset, byteLength, { chunkSize: block, reuse })) {
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
  async function spill(scratch: ScratchFactory): Promise<ScratchSpace | undefined> {
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
      for await (const chunk of payload.range(dataOffset, byteLength, { chunkSize: SPILL_CHUNK })) {
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

  async function* repacked(block: number): AsyncGenerator<Uint8Array> {
    let reader: RangeReader;
    let cursor: StreamCursor | undefined;
    let space: ScratchSpace | undefined;
    // A forward-only payload needs one pass per slab; past one slab, one inflation into scratch
    // space and random reads from it (at a file's speed: 16 MiB slabs, synchronous reads) are cheaper.
    if (payload.random === undefined && options.scratch !== undefined && byteLength > (slabSize ?? FORTRAN_SLAB_SIZE)) {
      space = await spill(options.scratch);
    }
    // After a spill the array is read back from scratch space, where it starts at byte 0 and has
    // nothing left to verify (the spill checked the container).
    const from = space === undefined ? payload : sourcePayload(space.source());
    const start = space === undefined ? dataOffset : 0;
    const random = from.random;
    const intoSync = from.randomIntoSync;
    if (random === undefined) {
      // A forward-only payload, read in passes. No reuse: the cursor keeps chunks across its reads.
      reader = cursor = new StreamCursor(() => from.range(start, byteLength, { chunkSize: CURSOR_CHUNK }));
    } else {
      reader = {
        random: true,
        read: (offset, length) => random(start + offset, length),
        readIntoSync: intoSync === undefined ? undefined : (offset, target) => intoSync(start + offset, target),
      };
    }
    try {
      for await (const chunk of fortranToC(reader, shape, itemSize, { slabSize, chunkSize: block })) {
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

  const tensor: TensorEntry = {
    name,
    dtype,
    shape,
    byteLength,
    async *chunks({ chunkSize = DEFAULT_CHUNK_SIZE, reuse = false } = {}) {
      if (!Number.isSafeInteger(chunkSize) || chunkSize < 1)
        throw new StConvertError("InvalidArgument", `chunkSize must be a positive integer, got ${chunkSize}`);
      // Whole elements per chunk, so that a byte swap never straddles two chunks.
      const block = chunkSize >= itemSize ? chunkSize - (chunkSize % itemSize) : itemSize;
      try {
        for await (const chunk of fortran ? repacked(block) : stored(block, reuse)) {
          if (chunk.byteLength <= chunkSize) yield chunk;
          else for (let at = 0; at < chunk.byteLength; at += chunkSize) yield chunk.subarray(at, at + chunkSize);
        }
      } catch (error) {
        throw withContext(error, { file: options.file, tensor: name });
      }
    },
  };
  return { version, header, dataOffset, tensor };
}
