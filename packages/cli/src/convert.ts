/**
 * The library API behind the command: `convert()` one file into another, `inspect()` a file.
 * Both behave exactly as the CLI does (same formats, same checks, same atomic output).
 */
import { dirname, join } from "node:path";
import {
  type ByteSource,
  type ChunkOptions,
  type FormatOptionValues,
  type Metadata,
  StConvertError,
  type TensorEntry,
  type TensorFormat,
  type TensorSource,
  withContext,
} from "@st-convert/core";
import { type FileSource, createFileSink, createScratchFile, openFileSource } from "@st-convert/core/node";
import { FORMATS, detectInputFormat, detectOutputFormat } from "./formats.js";
import { type TransformOptions, transformTensors } from "./transforms.js";

/** Options of {@link convert}. */
export interface ConvertOptions extends TransformOptions {
  /** Input format name; default: from the extension, else from the content. */
  from?: string;
  /** Output format name; default: from the extension. */
  to?: string;
  /** Replace an existing output. Default false. */
  force?: boolean;
  /** Format-specific options by name (e.g. `{ sep: "/" }`), as the CLI's `--sep /`. */
  formatOptions?: FormatOptionValues;
  /** Receives non-fatal notices (e.g. metadata the output format cannot hold). */
  onWarning?: (message: string) => void;
  /** Stops the conversion at the next chunk; the output is then removed. */
  signal?: AbortSignal;
  /** Called as tensor bytes are written: bytes done so far and the total. */
  onProgress?: (done: number, total: number) => void;
  /** The formats to choose from. Default: all that st-convert ships. */
  formats?: readonly TensorFormat[];
}

/** What {@link convert} did. */
export interface ConvertResult {
  input: string;
  output: string;
  inputFormat: string;
  outputFormat: string;
  tensors: number;
  /** Tensor bytes written (the header and container bytes not counted). */
  bytes: number;
}

/**
 * Converts the file at `input` into `output`, in the formats their names (or the options) say.
 * The output is written to a temporary file beside it and renamed into place only on success.
 * @throws StConvertError naming the file, the tensor and the broken rule; `OutputExists` when the
 *   output exists and `force` is not set; `Aborted` when `signal` fired.
 */
export async function convert(input: string, output: string, options: ConvertOptions = {}): Promise<ConvertResult> {
  const formats = options.formats ?? FORMATS;
  const outputFormat = detectOutputFormat(output, options.to, formats);
  return withSource(input, async (source, openSibling) => {
    const { format: inputFormat, tensors } = await openInput(source, input, options, formats, openSibling);
    const observed = observe(tensors, options.signal, options.onProgress);
    const sink = await createFileSink(output, { force: options.force ?? false });
    try {
      await outputFormat.write(observed.source, sink, { options: options.formatOptions ?? {}, onWarning: options.onWarning, fileName: output });
      options.signal?.throwIfAborted();
      await sink.close();
    } catch (error) {
      await sink.abort();
      throw withContext(abortError(error, options.signal), { file: observed.reading() ? input : output });
    }
    return {
      input,
      output,
      inputFormat: inputFormat.name,
      outputFormat: outputFormat.name,
      tensors: tensors.tensors.length,
      bytes: observed.done(),
    };
  });
}

/** Options of {@link inspect}. */
export interface InspectOptions extends TransformOptions {
  /** Input format name; default: from the extension, else from the content. */
  from?: string;
  formatOptions?: FormatOptionValues;
  onWarning?: (message: string) => void;
  formats?: readonly TensorFormat[];
}

/** What a file holds, as `st-convert info --json` prints it. */
export interface FileReport {
  format: string;
  metadata: Metadata | null;
  tensors: { name: string; dtype: string; shape: number[]; byteLength: number }[];
}

/**
 * Reads a file's header and lists its tensors and metadata, without reading tensor bytes
 * (formats whose layout needs it, such as compressed archives, may read more).
 */
export async function inspect(input: string, options: InspectOptions = {}): Promise<FileReport> {
  const formats = options.formats ?? FORMATS;
  return withSource(input, async (source, openSibling) => {
    const { format, tensors } = await openInput(source, input, options, formats, openSibling);
    return {
      format: format.name,
      metadata: tensors.metadata,
      tensors: tensors.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], byteLength: t.byteLength })),
    };
  });
}

/**
 * Opens the input for `use`, with a way to open files named relative to it (an index's shards);
 * closes them all when `use` is done.
 */
async function withSource<T>(path: string, use: (source: FileSource, openSibling: (name: string) => Promise<ByteSource>) => Promise<T>): Promise<T> {
  const source = await openFileSource(path);
  const siblings: FileSource[] = [];
  const openSibling = async (name: string): Promise<ByteSource> => {
    const sibling = await openFileSource(join(dirname(path), name));
    siblings.push(sibling);
    return sibling;
  };
  try {
    return await use(source, openSibling);
  } catch (error) {
    throw withContext(error, { file: path });
  } finally {
    await source.close();
    for (const sibling of siblings) await sibling.close().catch(() => {});
  }
}

/** Recognises the input's format, reads its header and applies the transforms; errors are named by `withSource`. */
async function openInput(
  source: FileSource,
  fileName: string,
  options: InspectOptions,
  formats: readonly TensorFormat[],
  openSibling: (name: string) => Promise<ByteSource>,
): Promise<{ format: TensorFormat; tensors: TensorSource }> {
  const format = await detectInputFormat(source, options.from, formats);
  const opened = await format.open(source, {
    options: options.formatOptions ?? {},
    onWarning: options.onWarning,
    fileName,
    // Scratch files go to the system's temporary folder (TMPDIR), removed as soon as they are made.
    scratch: () => createScratchFile(),
    openSibling,
  });
  return { format, tensors: transformTensors(opened, options) };
}

/**
 * Wraps a source so that the bytes pulled count towards progress and each chunk checks for an
 * abort; `reading()` tells whether a failure happened while pulling bytes (blame the input) or not.
 * A writer may pull a tensor more than once (the JSON writer pre-scans floats): progress counts the
 * furthest byte reached in each tensor, so it never passes the total.
 */
function observe(
  source: TensorSource,
  signal: AbortSignal | undefined,
  onProgress: ((done: number, total: number) => void) | undefined,
): { source: TensorSource; done: () => number; reading: () => boolean } {
  const total = source.tensors.reduce((sum, t) => sum + t.byteLength, 0);
  let done = 0;
  let inRead = false;
  const wrap = (entry: TensorEntry): TensorEntry => {
    let furthest = 0;
    return {
      name: entry.name,
      dtype: entry.dtype,
      shape: entry.shape,
      byteLength: entry.byteLength,
      async *chunks(options?: ChunkOptions) {
        const iterator = entry.chunks(options)[Symbol.asyncIterator]();
        let position = 0;
        for (;;) {
          signal?.throwIfAborted();
          inRead = true;
          const next = await iterator.next();
          inRead = false;
          if (next.done === true) return;
          position += next.value.byteLength;
          if (position > furthest) {
            done += Math.min(position, entry.byteLength) - Math.min(furthest, entry.byteLength);
            furthest = position;
          }
          yield next.value;
          onProgress?.(done, total);
        }
      },
    };
  };
  return {
    source: { metadata: source.metadata, tensors: source.tensors.map(wrap) },
    done: () => done,
    reading: () => inRead,
  };
}

function abortError(error: unknown, signal: AbortSignal | undefined): unknown {
  if (signal?.aborted === true && !(error instanceof StConvertError)) {
    return new StConvertError("Aborted", "conversion stopped before it finished; the output was not written", { cause: error });
  }
  return error;
}
