/**
 * `@st-convert/torch`: PyTorch checkpoints (`torch.save`, zip and legacy) to and from the tensor
 * model of st-convert, read by a pickle reader that runs nothing, streaming both ways.
 */
export {
  GATHER_TILE_SIZE,
  MAX_EXPANDED_BYTES,
  MAX_GATHER_WINDOW,
  MAX_MEMO_ENTRIES,
  MAX_NESTING_DEPTH,
  MAX_PICKLE_OBJECTS,
  MAX_PICKLE_SIZE,
  MAX_RANK,
  MAX_STACK_SIZE,
  MAX_WARNINGS,
  NAMING_VISITS_BASE,
  NAMING_VISITS_PER_PICKLE_BYTE,
  type TorchFile,
  type TorchReadOptions,
  type TorchTensor,
  classifyTorchHead,
  readTorch,
} from "./readTorch.js";
export { MAX_TORCH_INDEX_SIZE, type ShardedTorch, type TorchIndexReadOptions, readTorchIndex } from "./readTorchIndex.js";
export { type TorchWriteOptions, writeTorch } from "./writeTorch.js";
export { dcpFormat, sniffDcpMetadata, sniffTorch, torchFormat, torchIndexFormat } from "./torchFormat.js";
export { DCP_DATA_FILE, DCP_METADATA_FILE, type DcpWriteOptions, writeDcp } from "./writeDcp.js";
export type { TorchErrorCode } from "./TorchErrorCode.js";
export {
  MAX_KEY_VALUES,
  type PickleValue,
  type UnpickleOptions,
  type Unpickled,
  type UnpicklerHooks,
  NeedMoreData,
  describeValue,
  unpickle,
} from "./Unpickler.js";
export { DCP_ROW_GROUP_SIZE, type DcpCheckpoint, type DcpReadOptions, type DcpTensor, pythonFloat, readDcp } from "./readDcp.js";
export { type DcpChunk, type DcpItem, type DcpMetadata, type DcpStorage, decodeDcpMetadata } from "./dcpMetadata.js";
