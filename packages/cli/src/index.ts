/**
 * `st-convert`: the command and its library API. `convert()` turns one tensor file into another,
 * `convertMany()` converts files and folders in a batch, `inspect()` lists what a file holds; all
 * behave exactly like the command.
 */
export {
  type ConvertOptions,
  type ConvertResult,
  type FileReport,
  type InspectOptions,
  type WarningListener,
  convert,
  inspect,
  unusedFormatOptions,
} from "./convert.js";
export {
  type BatchEvent,
  type BatchJob,
  type BatchSummary,
  type ConvertManyOptions,
  DEFAULT_JOBS,
  JOBS_PER_TURN,
  convertMany,
  describeError,
  planBatch,
} from "./convertMany.js";
export { type DiffOptions, type DiffResult, type TensorDiff, diff } from "./diff.js";
export { type HashOptions, type HashResult, type TensorDigest, checkpointDigest, hash, tensorSha256 } from "./hash.js";
export type { RemoteInputOptions } from "./remoteInput.js";
export { type StatsOptions, type StatsResult, type TensorStats, stats } from "./stats.js";
export { FORMATS, detectInputFormat, detectOutputFormat, formatByExtension, formatByName } from "./formats.js";
export { type CliIo, EXIT_BROKEN_PIPE, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, main } from "./main.js";
export { type ProgressLine, createProgressLine, formatSize, renderProgress } from "./progress.js";
export {
  type BatchReport,
  type ConvertReport,
  type DiffItem,
  type DiffReport,
  type HashReport,
  type InfoReport,
  REPORT_VERSION,
  type Report,
  type ReportError,
  type ReportNumber,
  type StatsReport,
} from "./report.js";
export {
  type CompiledTransforms,
  type RenameRule,
  type TransformOptions,
  compileTransforms,
  parseMetadataEntries,
  parsePattern,
  parseRenameRule,
  transformTensors,
} from "./transforms.js";
