/**
 * `@st-convert/flax`: flax msgpack checkpoints (`flax.serialization`) to and from the tensor model
 * of st-convert, streaming both ways.
 */
export {
  CHUNKED_ARRAY_MARKER,
  type FlaxErrorCode,
  type FlaxFile,
  type FlaxReadOptions,
  type FlaxTensor,
  MAX_ARRAYS,
  MAX_DEPTH,
  MAX_MAP_ENTRIES,
  MAX_NAME_LENGTH,
  MAX_ORDERED_TREE_BYTES,
  MAX_RANK,
  MAX_TREE_BYTES,
  MAX_WARNINGS,
  readFlax,
} from "./readFlax.js";
export { FLAX_TREE_KEY } from "./FlaxTree.js";
export { type FlaxWriteOptions, MAX_CHUNK_SIZE, MAX_TREE_RECORD, serializeFlax, writeFlax } from "./writeFlax.js";
export { flaxFormat, sniffFlax } from "./flaxFormat.js";
