/**
 * The one error family of st-convert. Every refusal of an input, every broken limit and every
 * failed write is an `StConvertError` with a `code` from a fixed catalog; adapters bring their
 * own codes but reuse this class, so callers need a single guard.
 */

/** Codes of the safetensors format; the names are those of the reference implementation's errors. */
export type SafetensorsErrorCode =
  | "HeaderTooSmall"
  | "HeaderTooLarge"
  | "InvalidHeaderLength"
  | "InvalidHeader"
  | "InvalidHeaderDeserialization"
  | "InvalidOffset"
  | "ValidationOverflow"
  | "MisalignedSlice"
  | "TensorInvalidInfo"
  | "MetadataIncompleteBuffer"
  | "TensorNotFound"
  | "DuplicateKey";

/** Codes shared by every format. */
export type CommonErrorCode =
  /** A source ended before the bytes a header promised. */
  | "UnexpectedEof"
  /** A named resource limit was exceeded (header size, tensor count, nesting depth…). */
  | "LimitExceeded"
  /** The value is valid in the format but cannot be represented here (e.g. a dimension above 2^53). */
  | "Unsupported"
  /** A dtype name that the format or st-convert does not know. */
  | "UnknownDtype"
  /** A tensor name that cannot be written (e.g. not valid Unicode). */
  | "InvalidName"
  /** Metadata that is not a string → string map. */
  | "InvalidMetadata"
  /** A tensor's bytes do not have the length its dtype and shape require. */
  | "ByteLengthMismatch"
  /** Reading or writing a file failed at the operating-system level. */
  | "Io"
  /** The reader of a pipe or socket went away (EPIPE, as after `| head`): a command may end quietly. */
  | "BrokenPipe"
  /** The target exists and replacing it was not asked for. */
  | "OutputExists"
  /** The caller passed options that contradict each other or the input. */
  | "InvalidArgument"
  /** An option's value is malformed (a command-line mistake: the CLI exits 2). */
  | "InvalidOption"
  /** A conversion would write no tensor: the selection kept none, or the reader skipped them all. */
  | "NothingToWrite"
  /** No format matches a `--from`/`--to` name, an extension or a file's content. */
  | "UnknownFormat"
  /** The file is of a format st-convert recognises but does not convert (ONNX, HDF5, TFLite, TorchScript…). */
  | "UnsupportedFormat"
  /** The file's content is another format than its name says (an npz renamed .safetensors). */
  | "FormatMismatch"
  /** The reader of a pipe or stream output went away (`| head`): the CLI ends quietly. */
  | "BrokenPipe"
  /** The conversion was stopped by the caller (signal, abort). */
  | "Aborted"
  /** A sharded checkpoint's index is malformed, names a file outside its folder, or disagrees with its shards. */
  | "InvalidIndex"
  /** A cast meets a value its target dtype cannot hold (an integer out of range, a BOOL byte other than 0 or 1). */
  | "CastOutOfRange"
  /** An HTTP request failed: an error status, a broken redirect, or a network failure past the retries. */
  | "HttpError"
  /** A server that does not serve the byte ranges asked (answers 200 with the whole file, or another range). */
  | "RangeNotSupported"
  /** A file changed while it was being read (another ETag, Last-Modified or size between two requests). */
  | "SourceChanged"
  /** An output read back after writing does not hold the tensors written (`--verify`). */
  | "VerifyFailed";

export type CoreErrorCode = SafetensorsErrorCode | CommonErrorCode;

const brand = Symbol.for("st-convert.error");

/** Where an error happened, as far as the code that raised it knows. */
export interface ErrorContext {
  /** The file (or other source) being read or written. */
  file?: string;
  /** The tensor being read or written. */
  tensor?: string;
  /** The underlying error, when this one wraps another. */
  cause?: unknown;
}

/**
 * An error raised by st-convert for a refused input, a broken limit or a failed write.
 * `message` reads `tensor \`name\`: rule` (the file is added by whoever knows it, see {@link withFile}).
 */
export class StConvertError<C extends string = string> extends Error {
  override readonly name = "StConvertError";
  readonly code: C;
  /** The broken rule, without the file and tensor prefix. */
  readonly rule: string;
  readonly file: string | undefined;
  readonly tensor: string | undefined;

  constructor(code: C, rule: string, context: ErrorContext = {}) {
    super(composeMessage(rule, context), context.cause === undefined ? undefined : { cause: context.cause });
    this.code = code;
    this.rule = rule;
    this.file = context.file;
    this.tensor = context.tensor;
    Object.defineProperty(this, brand, { value: true });
  }
}

/** A file that ended at byte `endedAt` while bytes up to `expectedEnd` were being read: shrunk under the reader. */
export function endedEarly(endedAt: number, expectedEnd: number, file?: string): StConvertError {
  return new StConvertError(
    "UnexpectedEof",
    `the file ended at byte ${endedAt} while ${expectedEnd} were expected (was it truncated while being read?)`,
    file === undefined ? {} : { file },
  );
}

function composeMessage(rule: string, { file, tensor }: ErrorContext): string {
  const where = [file, tensor === undefined ? undefined : `tensor ${quoteName(tensor)}`].filter((part): part is string => part !== undefined);
  return where.length === 0 ? rule : `${where.join(": ")}: ${rule}`;
}

/** Tensor names can hold anything; quote them so that empty or odd names stay visible in one line. */
export function quoteName(name: string): string {
  return JSON.stringify(name);
}

/**
 * True for any st-convert error, also one thrown by another copy of this package
 * (a brand, not `instanceof`, decides).
 */
export function isStConvertError(value: unknown): value is StConvertError {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}

/**
 * The same error with the file and/or tensor named where it names none yet; other values pass
 * through unchanged. Readers know the tensor, the caller knows the file: each adds what it knows.
 */
export function withContext<E>(error: E, where: { file?: string; tensor?: string }): E | StConvertError {
  if (!isStConvertError(error)) return error;
  const file = error.file ?? where.file;
  const tensor = error.tensor ?? where.tensor;
  if (file === error.file && tensor === error.tensor) return error;
  const named = new StConvertError(error.code, error.rule, { file, tensor, cause: error.cause });
  if (error.stack !== undefined) named.stack = error.stack;
  return named;
}
