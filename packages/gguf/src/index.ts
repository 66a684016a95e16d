/**
 * `@st-convert/gguf`: GGUF files (llama.cpp, ggml) to and from the tensor model of st-convert,
 * streaming both ways.
 */
export { type GgufFile, type GgufReadOptions, type GgufTensor, SPLIT_KEYS, readGguf } from "./readGguf.js";
export {
  DEFAULT_ARCHITECTURE,
  type GgufPlan,
  type GgufWriteOptions,
  type PlannedTensor,
  planGguf,
  planSplitSet,
  serializeHeader,
  splitName,
  writeGguf,
  writePlan,
} from "./writeGguf.js";
export { type GgufHeader, type GgufKv, type GgufTensorInfo, type GgufValue, parseGguf } from "./parseGguf.js";
export { type GgufRecord, KV_PREFIX, RECORD_KEY, decodeValue, encodeValue, kvsToMetadata, metadataToKvs, readRecord } from "./ggufMetadata.js";
export { type GgufErrorCode, PLAIN_TYPES, VALUE_TYPES } from "./ggufTypes.js";
export { QUANTIZE_TYPES, parseQuantizeRules, planQuantization } from "./quantize.js";
export { ggufFormat, sniffGguf } from "./format.js";
