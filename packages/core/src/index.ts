/**
 * `@st-convert/core`: the safetensors format, the dtype table and the tensor-stream model that
 * every st-convert adapter speaks. File access for Node is in `@st-convert/core/node`.
 */
export {
  type ByteInput,
  type ByteSink,
  type ByteSource,
  type ScratchFactory,
  type ScratchSpace,
  DEFAULT_CHUNK_SIZE,
  MAX_READ_AHEAD,
  MemorySink,
  type ReadAheadOptions,
  SMALL_READ,
  arraySink,
  blobSource,
  bytesSource,
  checkRange,
  type ReadRangeOptions,
  readAheadSource,
  readRange,
  toByteSource,
  WRITTEN,
} from "./ByteSource.js";
export { CRC_RANGE_FROM, type Kernels, type RunReader, crc32FileRange, fileRunReader, kernels } from "./kernels.js";
export { NameIndex } from "./NameIndex.js";
export { DTYPES, type Dtype, type DtypeInfo, dtypeFromNumpyName, dtypeInfo, elementCount, isDtype, tensorByteLength, toSafeNumber } from "./dtypes.js";
export {
  MAX_HEADER_DEPTH,
  type ParseHeaderOptions,
  type ParsedSafetensorsHeader,
  type RawTensorInfo,
  parseSafetensorsHeader,
} from "./parseSafetensorsHeader.js";
export {
  COALESCED_READ_SIZE,
  MAX_HEADER_SIZE,
  SMALL_TENSOR_SIZE,
  SOURCE_ALIGNED_FROM,
  SOURCE_ALIGNMENT,
  type SafetensorsFile,
  type SafetensorsLayout,
  type SafetensorsReadOptions,
  type SafetensorsTensor,
  type SafetensorsWriteOptions,
  layoutSafetensors,
  readSafetensors,
  safetensorsFormat,
  serializeSafetensors,
  writeSafetensors,
} from "./safetensors.js";
export {
  type CommonErrorCode,
  type CoreErrorCode,
  type ErrorContext,
  type SafetensorsErrorCode,
  StConvertError,
  isStConvertError,
  quoteName,
  withContext,
} from "./StConvertError.js";
export {
  type ChunkOptions,
  type ExtentCrc32,
  type Metadata,
  type TensorEntry,
  type TensorExtent,
  type TensorExtentRun,
  type TensorInfo,
  KERNEL_COPY_FROM,
  KERNEL_COPY_STEP,
  type TensorSource,
  checkMetadata,
  checkShapeOverflow,
  checkedByteLength,
  compareCodePoints,
  createMetadata,
  exactChunks,
  extentNamed,
  guardedExtent,
  hasLoneSurrogate,
  pipeTensor,
  readAhead,
  readTensorBytes,
  splitAliases,
  tensorFromBytes,
} from "./Tensor.js";
export { MAX_INDEX_DEPTH, type ParseShardIndexOptions, type ShardIndex, parseShardIndex } from "./parseShardIndex.js";
export {
  MAX_INDEX_SIZE,
  type SafetensorsIndexReadOptions,
  type ShardContents,
  type ShardReader,
  type ShardedSafetensors,
  readSafetensorsIndex,
  safetensorsIndexFormat,
} from "./safetensorsIndex.js";
export {
  type FormatContext,
  type FormatKernels,
  type FormatOption,
  type FormatOptionValues,
  type KernelPool,
  type SplitFile,
  type StoredForm,
  type TensorFormat,
  fileStem,
  lazyModule,
  storedBytes,
  stringListOption,
  stringOption,
} from "./TensorFormat.js";
export { LITTLE_ENDIAN, swapBytesInPlace, swapBytesPortable } from "./swapBytes.js";
export {
  type CastKernel,
  FLOAT_CAST_DTYPES,
  INTEGER_CAST_DTYPES,
  INTEGER_RANGES,
  canCast,
  castKernel,
  checkCastable,
  isFloatCastDtype,
  isIntegerCastDtype,
} from "./castKernels.js";
export { castTensor } from "./castTensor.js";
export {
  BLOCK_BYTES,
  BYTE_BLOCK_BYTES,
  BlockReader,
  type ValueDecoder,
  valueDecoder,
  valueWidth,
} from "./tensorValues.js";
export { type Histogram, type HistogramOptions, type TensorStats, tensorHistogram, tensorStats } from "./tensorStats.js";
export { type TensorTreeNode, tensorTree } from "./tensorTree.js";
export { type DiffTensorsOptions, type TensorDiff, type TensorsDiff, diffTensors } from "./diffTensors.js";
export { type CastRule, castTarget, castTensors, formatCastRules, parseCastRule } from "./parseCastRule.js";
export {
  HTTP_READ_AHEAD,
  HTTP_STALL_TIMEOUT_MS,
  type HttpSource,
  type HttpSourceOptions,
  MAX_HTTP_ATTEMPTS,
  MAX_PARALLEL_REQUESTS,
  MAX_REDIRECTS,
  MAX_REQUEST_SIZE,
  MAX_RETRY_DELAY_MS,
  RETRY_BASE_DELAY_MS,
  openHttpSource,
} from "./HttpSource.js";
export { WASM_HEADER, type WebAssemblyApi, hostWebAssembly, sleb, uleb, wasmName, wasmSection } from "./wasmBytes.js";
