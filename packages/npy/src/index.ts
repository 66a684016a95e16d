/**
 * `@st-convert/npy`: NumPy `.npy` and `.npz` to and from the st-convert tensor stream (and so to
 * and from safetensors), lossless, streaming, without numpy.
 */
export { loadCodec, type Codec } from "./Codec.js";
export { type CrcCounted, crcCounted } from "./crcTensor.js";
export { THREAD_CRC_FROM, type Crc32Stream, crc32Stream, withCrc32 } from "./crcThread.js";
export { FORTRAN_SLAB_SIZE, FORTRAN_SLAB_SIZE_SYNC } from "./fortranToC.js";
export {
  type EncodeNpyHeaderOptions,
  MAX_NPY_HEADER_SIZE,
  MAX_RANK,
  NPY_MAGIC,
  type NpyHeader,
  type NpyHeaderOptions,
  type NpyPreamble,
  type NpyVersion,
  encodeNpyHeader,
  parseNpyHeader,
  readNpyHeader,
} from "./NpyHeader.js";
export { type DtypeDeclarations, type ParsedDescr, descrOfDtype, parseDescr, parseDtypeDeclarations } from "./NpyDtype.js";
export type { NpyErrorCode } from "./NpyErrorCode.js";
export { type NpyFile, type NpyReadOptions, type NpyReadOptionsBase, type NpyWriteOptions, readNpy, writeNpy } from "./npy.js";
export { DTYPE_OPTION, npyFormat, npzFormat } from "./formats.js";
export { NPZ_COMMENT_FORMAT, type NpzComment, type NpzFile, type NpzReadOptions, type NpzWriteOptions, readNpz, writeNpz } from "./npz.js";
export { MAX_LITERAL_DEPTH, type PyValue, parsePythonLiteral } from "./parsePythonLiteral.js";
export { MAX_KEPT_BYTES, MAX_NPZ_MEMBER_SIZE, MAX_ZIP_DIRECTORY_SIZE, type ZipReadOptions } from "./ZipArchive.js";
export { type ZipDirectory, type ZipEntry, type ZipMember, checkExtractable, locateMembers, memberPayload, readZipDirectory } from "./ZipArchive.js";
