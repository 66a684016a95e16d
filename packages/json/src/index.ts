/**
 * `@st-convert/json`: a lossless raw-tensor JSON form, to and from safetensors (and every other
 * st-convert format), streamed both ways.
 */
export {
  type TensorJsonEntry,
  type TensorJsonFile,
  type TensorJsonReadOptions,
  type TensorJsonWriteOptions,
  readTensorJson,
  serializeTensorJson,
  writeTensorJson,
} from "./tensorJson.js";
export { type JsonErrorCode, MAX_JSON_DEPTH, MAX_JSON_HEADER_SIZE, MAX_NUMBER_LENGTH } from "./scanTensorJson.js";
export { jsonFormat, sniffTensorJson } from "./jsonFormat.js";
