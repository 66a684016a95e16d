/**
 * The `.npy` format: one array per file.
 *
 * Spec: numpy's `numpy/lib/_format_impl.py` (see `NpyHeader.ts`) and the npy format NEP
 * (https://numpy.org/neps/nep-0001-npy-format.html). A `.npy` file holds no name and no
 * metadata: the tensor is named after the file, and metadata is dropped with a warning.
 */
import {
  type ByteInput,
  type ByteSink,
  type ByteSource,
  type ScratchFactory,
  DEFAULT_CHUNK_SIZE,
  StConvertError,
  type TensorEntry,
  type TensorSource,
  checkedByteLength,
  fileStem,
  pipeTensor,
  toByteSource,
  withContext,
} from "@st-convert/core";
import { encodeNpyHeader, type NpyHeader, type NpyVersion } from "./NpyHeader.js";
import { type DtypeDeclarations, checkNumpyShape, declarationsOf, descrOfDtype, isVoidInNumpy } from "./NpyDtype.js";
import { openNpyArray } from "./openNpyArray.js";
import { memoryPayload, sourcePayload } from "./Payload.js";
import { readZipDirectory } from "./ZipArchive.js";

/**
 * Files up to this size (a page) are read whole at once: a folder of many small arrays costs one
 * read per file, not two. Larger ones are read as asked for.
 */
const SMALL_NPY = 4096;

/** The tensor name of a `.npy` when neither an option nor a file name gives one (numpy's name for unnamed arrays). */
const DEFAULT_NAME = "arr_0";

/** Options shared by the npy and npz readers. */
export interface NpyReadOptionsBase {
  /**
   * What raw void dtypes hold: declarations such as `"V2=BF16"`, `"V1=F8_E4M3"`, `"emb:V2=BF16"`
   * (see `parseDtypeDeclarations`). Default: none, so a void array is refused with a hint.
   */
  dtypes?: readonly string[] | DtypeDeclarations;
  /** Longest npy header accepted, in characters. Default `MAX_NPY_HEADER_SIZE` (10,000, numpy's). */
  maxHeaderSize?: number;
  /**
   * Bytes per Fortran-repack slab (memory used is about twice this). Default `FORTRAN_SLAB_SIZE_SYNC`
   * (16 MiB) from a file, `FORTRAN_SLAB_SIZE` (64 MiB) from other sources.
   */
  fortranSlabSize?: number;
  /**
   * Where a deflated Fortran-order npz member larger than one slab is inflated once, to be
   * gathered from at random (`createScratchFile` from `@st-convert/core/node`; the CLI passes it).
   * Without one, or if it fails (a full disk), the member is inflated again for every slab:
   * correct, in the same memory, but slower by the number of slabs.
   */
  scratch?: ScratchFactory;
  /** Receives non-fatal notices (ignored trailing bytes, a Python 2 header, skipped members). */
  onWarning?: (message: string) => void;
}

/** Options of {@link readNpy}. */
export interface NpyReadOptions extends NpyReadOptionsBase {
  /** The tensor's name. Default: the source's name without its directory and extension, else `"arr_0"`. */
  name?: string;
}

/** A `.npy` file whose data has not been read yet. */
export interface NpyFile extends TensorSource {
  readonly format: "npy";
  readonly version: NpyVersion;
  /** The header as the file states it. */
  readonly header: NpyHeader;
  /** Offset of the first data byte. */
  readonly dataOffset: number;
  /** Always null: a `.npy` file has no room for metadata. */
  readonly metadata: null;
  readonly tensors: readonly [TensorEntry];
}

/**
 * Reads a `.npy` file's header; the data is read when the tensor's `chunks()` is iterated,
 * little-endian and in C order whatever the file's byte order and layout.
 * @throws StConvertError naming the file and tensor: `BadMagic`, `UnsupportedVersion`,
 *   `HeaderTooLarge`, `InvalidHeader`, `InvalidHeaderKeys`, `InvalidShape`, `InvalidFortranOrder`,
 *   `InvalidDescr`, `UnsupportedDtype`, `UndeclaredVoidDtype`, `UnexpectedEof` (truncated),
 *   `AmbiguousFormat` when the bytes after the data make the file a zip archive too (np.load reads
 *   the array, zipfile the archive).
 */
export async function readNpy(input: ByteInput, options: NpyReadOptions = {}): Promise<NpyFile> {
  const source = toByteSource(input);
  const name = options.name ?? fileStem(source.name) ?? DEFAULT_NAME;
  try {
    const declarations = declarationsOf(options.dtypes);
    // Notices wait for the check below: a file refused as ambiguous gets no warning first.
    const notices: string[] = [];
    // A small file is read at once: one read for its header and its data.
    const payload = source.size <= SMALL_NPY ? memoryPayload(await source.read(0, source.size)) : sourcePayload(source);
    const array = await openNpyArray(payload, name, { ...options, declarations, file: source.name, onWarning: (m) => notices.push(m) });
    if (array.dataOffset + array.tensor.byteLength < source.size && (await holdsZip(source))) {
      throw new StConvertError(
        "AmbiguousFormat",
        "the file is both an .npy (np.load reads it as one array, deciding by its first bytes) and a zip archive after the array's data (which zipfile finds at its end); refused, as either reading would hide the other",
      );
    }
    for (const notice of notices) options.onWarning?.(notice);
    return { format: "npy", version: array.version, header: array.header, dataOffset: array.dataOffset, metadata: null, tensors: [array.tensor] };
  } catch (error) {
    throw withContext(error, { file: source.name, tensor: name });
  }
}

/** True when the bytes after an array's data end the file as a zip archive that zipfile would open. */
async function holdsZip(source: ByteSource): Promise<boolean> {
  try {
    await readZipDirectory(source);
    return true;
  } catch {
    return false;
  }
}

/** Options of {@link writeNpy}. */
export interface NpyWriteOptions {
  /** Bytes pulled from the tensor at a time. Default `DEFAULT_CHUNK_SIZE` (2 MiB). */
  chunkSize?: number;
  /** Receives notices: metadata dropped, a dtype numpy only sees as raw void. */
  onWarning?: (message: string) => void;
}

/**
 * Writes the one tensor of `source` as a `.npy`, byte-identical to `np.save` of the same numpy
 * (or ml_dtypes) array: BF16 and the F8 types become `<V2`/`<V1` as ml_dtypes saves them (F8_E5M2
 * included, which `np.save` writes as an unloadable `<f1`). Metadata has no place in a `.npy`: it
 * is dropped with a warning. The caller closes or aborts the sink.
 * @throws StConvertError `Unsupported` when `source` holds other than one tensor (write `.npz`) or
 *   a shape numpy refuses to make (U8 [0, 2^32, 2^32]: "array is too big"), `UnsupportedDtype` for
 *   F4/F6, `ByteLengthMismatch` when the tensor delivers the wrong byte count.
 */
export async function writeNpy(source: TensorSource, sink: ByteSink, options: NpyWriteOptions = {}): Promise<void> {
  if (source.tensors.length !== 1) {
    throw new StConvertError(
      "Unsupported",
      `a .npy file holds exactly one array, and this source has ${source.tensors.length} tensors; write a .npz archive instead`,
      { file: sink.name },
    );
  }
  const tensor = source.tensors[0]!;
  try {
    checkedByteLength(tensor);
    const descr = descrOfDtype(tensor.dtype);
    checkNumpyShape(tensor.dtype, tensor.shape);
    if (source.metadata !== null && Object.keys(source.metadata).length > 0) {
      options.onWarning?.(`metadata dropped: a .npy file has no room for it (${Object.keys(source.metadata).length} keys; write .npz to keep them)`);
    }
    if (isVoidInNumpy(tensor.dtype)) {
      options.onWarning?.(
        `tensor ${JSON.stringify(tensor.name)}: ${tensor.dtype} is written as numpy raw void '${descr}', as ml_dtypes saves it; reading it back needs --dtype V${descr.slice(2)}=${tensor.dtype}`,
      );
    }
    await sink.write(encodeNpyHeader({ descr, shape: tensor.shape }));
    await pipeTensor(tensor, sink, options.chunkSize ?? DEFAULT_CHUNK_SIZE);
  } catch (error) {
    throw withContext(error, { tensor: tensor.name });
  }
}
