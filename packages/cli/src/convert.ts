/**
 * The library API behind the command: `convert()` one file into another, `inspect()` a file.
 * Both behave exactly as the CLI does (same formats, same checks, same atomic output).
 */
import { basename, join } from "node:path";
import {
  type ByteSink,
  type ByteSource,
  type ChunkOptions,
  type FormatOptionValues,
  StConvertError,
  type TensorEntry,
  type TensorExtent,
  type TensorExtentRun,
  type TensorFormat,
  type TensorSource,
  guardedExtent,
  lazyModule,
  storedBytes,
  withContext,
} from "@st-convert/core";
import { createFileSink, openFileSource, removeStaleTempFiles } from "@st-convert/core/node";
import { FORMATS, detectOutputFormat, formatByExtension, formatByName } from "./formats.js";
import { type OpenedInput, type WarningListener, nameOf, openInput, resolveInput, withSource } from "./inspect.js";
import type { RemoteInputOptions } from "./remoteInput.js";
import { DEFAULT_MAX_SHARD_SIZE, type ShardPlan, type ShardTarget, parseShardSize, shardTarget, shardable, writeShards } from "./shards.js";
import { plural } from "./text.js";
import type { TransformOptions } from "./transforms.js";

/** The kernel threads, loaded for an output format that has kernels (GGUF): other conversions never start one. */
const kernelPools = lazyModule(() => import("./kernelPool.js"));

export { type FileReport, type InspectOptions, type InspectedFile, type WarningListener, inspect, inspectEntries } from "./inspect.js";

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
  /** Receives non-fatal notices (e.g. metadata the output format cannot hold), with the file concerned. */
  onWarning?: WarningListener;
  /**
   * Write the output even when no tensor is left to write because `filter`/`exclude` selected none
   * of the input's or the reader skipped them all. Default false: that is an error (`NothingToWrite`).
   */
  allowEmpty?: boolean;
  /**
   * Write the output as shards of at most this many bytes (a larger tensor alone in its shard) and
   * an index: `5GB` (huggingface_hub's units, powers of 10), `2GiB`, or a number of bytes. The
   * output path is then the index, a checkpoint name or a folder. An output path that names an
   * index (`model.safetensors.index.json`) shards at huggingface_hub's default 5GB without it.
   */
  maxShardSize?: number | string;
  /**
   * Remove temporary files that a killed run left beside the output (`.NAME.PID-TAG.tmp` of a process
   * that is gone), with a warning each. Default true; a batch does it once for all its outputs.
   */
  removeStale?: boolean;
  /** Stops the conversion at the next chunk; the output is then removed. */
  signal?: AbortSignal;
  /** Called as tensor bytes are written: bytes done so far and the total. */
  onProgress?: (done: number, total: number) => void;
  /** The formats to choose from. Default: all that st-convert ships. */
  formats?: readonly TensorFormat[];
  /** How a URL input is opened: a whole download for a server without ranges (`allowDownload`), the traffic counted (`onFetched`). */
  remote?: RemoteInputOptions;
  /**
   * After writing, read the output back and compare each tensor's SHA-256 with the input's (taken
   * while the input streamed to the writer); on any difference the output is removed and the
   * conversion fails with `VerifyFailed`. Tensor bytes then pass through memory (no kernel copy).
   * Needs a file output. Default false.
   */
  verify?: boolean;
  /** Take each tensor's SHA-256 while converting, for the result's `digest` (implied by `verify`). Default false. */
  digest?: boolean;
  /**
   * Worker threads the output format may run its kernels on (GGUF's quantization), started only
   * when it first does. Default: the machine's cores, at most 4; 0 or 1 keeps all work on this
   * thread. A batch's conversions take none (its files are spread over threads already).
   */
  kernelThreads?: number;
}

/** What {@link convert} did. */
export interface ConvertResult {
  input: string;
  output: string;
  inputFormat: string;
  outputFormat: string;
  tensors: number;
  /** Tensor bytes written (the header and container bytes not counted): a quantized tensor's blocks, not the values read. */
  bytes: number;
  /** The notices given on the way, each with its file (also passed to `onWarning` as they came). */
  warnings: { file: string; message: string }[];
  /** Every file written: the output alone, or a sharded checkpoint's shards and index. */
  files: string[];
  /** The checkpoint digest of the tensors written (as `hash()` gives it), with `digest` or `verify`. */
  digest?: string;
}

/**
 * Converts `input` into `output`, in the formats their names (or the options) say. A path as the
 * output appears only on success, whole: written to a temporary file beside it and renamed into
 * place, or, when it is new and small, created at its name and written at once (see
 * `createFileSink`); a `ByteSink` is written and then closed, or aborted on failure. A
 * `ByteSource` as the input is read, never closed: it stays its owner's.
 * @throws StConvertError naming the file, the tensor and the broken rule; `OutputExists` when the
 *   output exists and `force` is not set; `NothingToWrite` when no tensor is left (see
 *   `allowEmpty`); `Aborted` when `signal` fired.
 */
export function convert(input: string | ByteSource, output: string | ByteSink, options: ConvertOptions = {}): Promise<ConvertResult> {
  return convertInto(input, output, options, false);
}

/**
 * {@link convert}, for a batch: `outputAbsent` when the batch made the output's folder itself, so
 * that nothing was at the output path when it began (`createFileSink`'s `absent`). For a model
 * folder, `split` groups the tensors into the output's shards (those of the source) instead of
 * the size limit; the output then names the index.
 */
export async function convertInto(
  input: string | ByteSource,
  output: string | ByteSink,
  options: ConvertOptions,
  outputAbsent: boolean,
  split?: (tensors: readonly TensorEntry[]) => ShardPlan,
): Promise<ConvertResult> {
  const formats = options.formats ?? FORMATS;
  const inputName = nameOf(input, "<input>");
  const outputName = nameOf(output, "<output>");
  const sharding = await shardingOf(output, options, formats);
  const outputFormat = sharding?.format ?? detectOutputFormat(outputName, options.to, formats);
  const warnings: ConvertResult["warnings"] = [];
  const warnFor = (file: string) => (message: string) => {
    warnings.push({ file, message });
    options.onWarning?.(message, file);
  };
  // No thread starts before the format first runs a kernel.
  const pool = outputFormat.kernels === undefined ? undefined : new (await kernelPools()).WorkerKernelPool(options.kernelThreads);
  const kernelPool = pool !== undefined && pool.threads > 1 ? pool : undefined;
  const converting = withSource(
    await resolveInput(input, formats),
    async (source, openSibling) => {
      const { format: inputFormat, tensors } = await openInput(
        source,
        inputName,
        { ...options, onWarning: undefined },
        formats,
        openSibling,
        warnFor(inputName),
        outputFormat.name,
      );
      for (const message of unusedFormatOptions(options.formatOptions ?? {}, inputFormat, outputFormat, formats)) warnFor(inputName)(message);
      // No reference writes a conversion from such a format byte for byte: the writer may lay it out for the copy.
      const freeLayout = inputFormat.freeLayout === true;
      const tied = tiedWeightsNotice(tensors.selected, outputFormat.name);
      if (tied !== undefined) warnFor(outputName)(tied);
      checkSomethingToWrite(tensors, options, warnings.length > 0);
      if (options.verify === true && typeof output !== "string") {
        throw new StConvertError("InvalidOption", "--verify reads the output back; name a file as the output, not a stream");
      }
      // Loaded only when asked for: node:crypto costs a conversion about 3 ms of start-up.
      const verifying = options.verify === true || options.digest === true ? await import("./verifyOutput.js") : undefined;
      const digesting = verifying?.digestingSource(tensors.selected);
      const observed = observe(digesting?.source ?? tensors.selected, options.signal, options.onProgress);
      // Tensors the writer stores in other bytes than it reads (GGUF's --quantize): the report gives what was written.
      const stored = storedBytes(observed.source.tensors);
      const { onStored } = stored;
      /** The digest of what was written, after the output was read back and compared when asked. */
      const checked = async (files: readonly string[], written: string, format: TensorFormat | undefined): Promise<string | undefined> => {
        if (digesting === undefined || verifying === undefined) return undefined;
        try {
          const digests = digesting.digests();
          if (options.verify === true) await verifying.verifyWritten(written, format, digests, options);
          return verifying.checkpointDigest(digests);
        } catch (error) {
          await verifying.removeOutput(files);
          throw withContext(error, { file: written });
        }
      };
      const result = {
        input: inputName,
        output: outputName,
        inputFormat: inputFormat.name,
        outputFormat: outputFormat.name,
        tensors: tensors.selected.tensors.length,
        bytes: 0,
        warnings,
        files: [outputName],
      };
      if (sharding !== undefined) {
        // A notice every shard's writer gives alike (metadata a format has no place for) is said once.
        const noticed = new Set<string>();
        try {
          const splitSet = outputFormat.splitSet;
          const written = await writeShards(observed.source, sharding.target, split ?? sharding.maxShardSize, {
            force: options.force ?? false,
            splitSet:
              splitSet === undefined
                ? undefined
                : (source, weightsName) =>
                    splitSet.plan(source, sharding.maxShardSize, weightsName, {
                      options: options.formatOptions ?? {},
                      onWarning: warnFor(join(sharding.target.dir, weightsName)),
                      fileName: join(sharding.target.dir, weightsName),
                      kernelPool,
                      onStored,
                    }),
            write: async (part, sink, fileName) => {
              const onWarning = (message: string) => {
                if (noticed.has(message)) return;
                noticed.add(message);
                warnFor(fileName)(message);
              };
              await outputFormat.write(part, sink, {
                options: options.formatOptions ?? {},
                onWarning,
                fileName,
                kernelPool,
                freeLayout,
                onStored,
              });
              options.signal?.throwIfAborted();
            },
            aliasesOf: async (path, fileName) => {
              const file = await openFileSource(path);
              try {
                return Object.keys((await outputFormat.open(file, { options: {}, fileName })).aliases ?? {});
              } finally {
                await file.close();
              }
            },
          });
          for (const removed of written.removed) warnFor(written.output)(`removed ${removed}, a file of the replaced set that the new one does not name`);
          const digest = await checked(written.files, written.output, undefined);
          return {
            ...result,
            output: written.output,
            files: written.files,
            bytes: stored.written(observed.done()),
            ...(digest === undefined ? {} : { digest }),
          };
        } catch (error) {
          throw withContext(abortError(error, options.signal), { file: observed.reading() ? inputName : outputName });
        }
      }
      if (outputFormat.writeFolder !== undefined) {
        if (typeof output !== "string") throw new StConvertError("InvalidOption", `${outputFormat.name} writes a folder; name one as the output, not a stream`);
        const { writeFolderOutput } = await import("./folderOutput.js");
        try {
          const files = await writeFolderOutput(output, options.force ?? false, async (open) => {
            await outputFormat.writeFolder!(observed.source, open, {
              options: options.formatOptions ?? {},
              onWarning: warnFor(outputName),
              fileName: outputName,
            });
            options.signal?.throwIfAborted();
          });
          return { ...result, files, bytes: stored.written(observed.done()) };
        } catch (error) {
          throw withContext(abortError(error, options.signal), { file: observed.reading() ? inputName : outputName });
        }
      }
      if (typeof output === "string" && options.removeStale !== false) {
        // Left by a run that was killed (SIGKILL, a crash, a power cut): its process is gone.
        for (const stale of await removeStaleTempFiles(output).catch(() => [])) {
          warnFor(output)(`removed ${stale}, a temporary file left by an interrupted run`);
        }
      }
      const sink = typeof output === "string" ? await createFileSink(output, { force: options.force ?? false, absent: outputAbsent }) : output;
      try {
        await outputFormat.write(observed.source, sink, {
          options: options.formatOptions ?? {},
          onWarning: warnFor(outputName),
          fileName: outputName,
          kernelPool,
          freeLayout,
          onStored,
        });
        options.signal?.throwIfAborted();
        await sink.close();
      } catch (error) {
        await sink.abort();
        throw withContext(abortError(error, options.signal), { file: observed.reading() ? inputName : outputName });
      }
      const digest =
        typeof output === "string"
          ? await checked([output], output, outputFormat)
          : digesting === undefined
            ? undefined
            : verifying?.checkpointDigest(digesting.digests());
      return { ...result, bytes: stored.written(observed.done()), ...(digest === undefined ? {} : { digest }) };
    },
    { ...options.remote, signal: options.signal },
  );
  // The threads (started only if the format ran a kernel) end with the conversion, whatever its outcome.
  return kernelPool === undefined ? converting : converting.finally(() => kernelPool.close());
}

/**
 * Whether the output is sharded, and how: asked for with `maxShardSize`, or implied by an output
 * that names an index (`*.index.json`, at the 5GB default).
 * @throws StConvertError `InvalidOption` for a size that does not parse, a sink as the output, or
 *   an output format that has no sharded form.
 */
async function shardingOf(
  output: string | ByteSink,
  options: ConvertOptions,
  formats: readonly TensorFormat[],
): Promise<{ format: TensorFormat; target: ShardTarget; maxShardSize: number } | undefined> {
  const namesIndex = typeof output === "string" && output.toLowerCase().endsWith(".index.json");
  if (options.maxShardSize === undefined && !namesIndex) return undefined;
  if (typeof output !== "string")
    throw new StConvertError("InvalidOption", "--max-shard-size writes files; name a folder or an index as the output, not a stream");
  const maxShardSize = options.maxShardSize === undefined ? DEFAULT_MAX_SHARD_SIZE : parseShardSize(options.maxShardSize);
  const named = basename(output).replace(/\.index\.json$/i, "");
  const format =
    options.to !== undefined ? formatByName(options.to, formats, "write") : (formatByExtension(named, formats) ?? formatByName("safetensors", formats));
  if (!shardable(format))
    throw new StConvertError(
      "InvalidOption",
      `--max-shard-size applies to ${wordList(formats.filter(shardable).map((f) => f.name))} outputs, not ${format.name}`,
    );
  return { format, target: await shardTarget(output, format), maxShardSize };
}

/**
 * Refuses a conversion that would write no tensor although the input had some (the selection
 * kept none) or the reader skipped what it found: an empty output is then a mistake, not a result.
 */
function checkSomethingToWrite(opened: OpenedInput, options: ConvertOptions, warned: boolean): void {
  if (options.allowEmpty === true || opened.selected.tensors.length > 0) return;
  const total = opened.dropped.size;
  if (total > 0) {
    throw new StConvertError(
      "NothingToWrite",
      `the selection (filter/exclude) keeps none of the input's ${plural(total, "tensor")}; nothing to write (allow an empty output to write one anyway)`,
    );
  }
  if (warned) throw new StConvertError("NothingToWrite", "no tensor is left to write: the reader skipped everything it found (see the warnings)");
}

/**
 * Notices for format options given that neither side of this conversion reads (`--compress`
 * with a `.json` output, `--base64` with `.npz`): silence would let a user believe they applied.
 */
export function unusedFormatOptions(values: FormatOptionValues, input: TensorFormat, output: TensorFormat, formats: readonly TensorFormat[]): string[] {
  const notices: string[] = [];
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined || value === false || (Array.isArray(value) && value.length === 0)) continue;
    // Each side on its own: input and output may be the same format (npz → npz with --compress).
    const applies = (format: TensorFormat, side: "read" | "write") =>
      (format.options ?? []).some((o) => o.name === name && (o.appliesTo === "both" || o.appliesTo === side));
    const appliesHere = applies(input, "read") || applies(output, "write");
    if (appliesHere) continue;
    const owners = formats.filter((f) => f.options?.some((o) => o.name === name)).map((f) => f.name);
    notices.push(`--${name} applies to ${owners.join(", ") || "no format"}, not to reading ${input.name} or writing ${output.name}; ignored`);
  }
  return notices;
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
  const progress: Progress = { total: source.tensors.reduce((sum, t) => sum + t.byteLength, 0), done: 0, inRead: false, signal, onProgress };
  return {
    // One small object per tensor (no closures): a checkpoint may hold hundreds of thousands.
    source: { metadata: source.metadata, tensors: source.tensors.map((entry) => new ObservedEntry(entry, progress)) },
    done: () => progress.done,
    reading: () => progress.inRead,
  };
}

/** What every {@link ObservedEntry} of one conversion shares. */
interface Progress {
  readonly total: number;
  done: number;
  inRead: boolean;
  readonly signal: AbortSignal | undefined;
  readonly onProgress: ((done: number, total: number) => void) | undefined;
}

/** A tensor whose chunks count towards progress and check for an abort. */
class ObservedEntry implements TensorEntry {
  readonly name: string;
  readonly dtype: TensorEntry["dtype"];
  readonly shape: readonly number[];
  readonly byteLength: number;
  #furthest = 0;

  constructor(
    readonly entry: TensorEntry,
    private readonly progress: Progress,
  ) {
    this.name = entry.name;
    this.dtype = entry.dtype;
    this.shape = entry.shape;
    this.byteLength = entry.byteLength;
  }

  chunks(options?: ChunkOptions): AsyncIterable<Uint8Array> {
    return new ObservedChunks(this, options, this.progress);
  }

  /** The tensor's extent, with progress and the abort check after each piece copied, and its check's failure blamed on the input. */
  extent(): TensorExtent | undefined {
    const inner = this.entry.extent?.();
    if (inner === undefined) return undefined;
    const progress = this.progress;
    progress.signal?.throwIfAborted();
    // Every way the check runs is kept (a CRC-32 the copy takes needs no read of its own).
    const blamed = guardedExtent(inner, (done) =>
      done.catch((error: unknown) => {
        progress.inRead = true;
        throw error;
      }),
    );
    return {
      ...blamed,
      copied: (bytes) => {
        inner.copied?.(bytes);
        this.reached(bytes);
        progress.onProgress?.(progress.done, progress.total);
        progress.signal?.throwIfAborted();
      },
    };
  }

  /** The tensor's runs, each watched as {@link ObservedEntry.extent} watches an extent, progress counted from the run's start. */
  extents(): readonly TensorExtentRun[] | undefined {
    const runs = this.entry.extents?.();
    if (runs === undefined) return undefined;
    const progress = this.progress;
    progress.signal?.throwIfAborted();
    let start = 0;
    return runs.map((run) => {
      const from = start;
      start += run.length;
      const blamed = guardedExtent(run, (done) =>
        done.catch((error: unknown) => {
          progress.inRead = true;
          throw error;
        }),
      );
      return {
        ...blamed,
        length: run.length,
        copied: (bytes: number) => {
          run.copied?.(bytes);
          this.reached(from + bytes);
          progress.onProgress?.(progress.done, progress.total);
          progress.signal?.throwIfAborted();
        },
      };
    });
  }

  /** Counts the bytes up to `position` of one pass towards progress, once across passes. */
  reached(position: number): void {
    if (position <= this.#furthest) return;
    this.progress.done += Math.min(position, this.byteLength) - Math.min(this.#furthest, this.byteLength);
    this.#furthest = position;
  }
}

const DONE: IteratorResult<Uint8Array> = Object.freeze({ done: true, value: undefined });

/**
 * One pass over an {@link ObservedEntry}'s chunks. An iterator by hand rather than an async
 * generator: a generator's every step costs several promise turns, paid for each of 500,000 tiny
 * tensors. Progress is reported when the consumer asks for the chunk after (as a generator resuming
 * after its `yield` would), and the abort signal is checked before every read.
 */
class ObservedChunks implements AsyncIterableIterator<Uint8Array> {
  #inner: AsyncIterator<Uint8Array> | undefined;
  #position = 0;
  #report = false;
  #finished = false;

  constructor(
    private readonly tensor: ObservedEntry,
    private readonly options: ChunkOptions | undefined,
    private readonly progress: Progress,
  ) {}

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<Uint8Array>> {
    if (this.#finished) return Promise.resolve(DONE);
    const progress = this.progress;
    let pending: Promise<IteratorResult<Uint8Array>>;
    try {
      if (this.#report) {
        this.#report = false;
        progress.onProgress?.(progress.done, progress.total);
      }
      progress.signal?.throwIfAborted();
      this.#inner ??= this.tensor.entry.chunks(this.options)[Symbol.asyncIterator]();
      progress.inRead = true;
      pending = this.#inner.next();
    } catch (error) {
      this.#finished = true;
      return Promise.reject(error);
    }
    return pending.then(
      (next) => {
        progress.inRead = false;
        if (next.done === true) {
          this.#finished = true;
          return DONE;
        }
        this.#position += next.value.byteLength;
        this.tensor.reached(this.#position);
        this.#report = true;
        return next;
      },
      (error: unknown) => {
        // progress.inRead stays set: the failure happened while pulling bytes.
        this.#finished = true;
        throw error;
      },
    );
  }

  async return(): Promise<IteratorResult<Uint8Array>> {
    if (!this.#finished) {
      this.#finished = true;
      await this.#inner?.return?.();
    }
    return DONE;
  }
}

function abortError(error: unknown, signal: AbortSignal | undefined): unknown {
  if (signal?.aborted === true && !(error instanceof StConvertError)) {
    return new StConvertError("Aborted", "conversion stopped before it finished; the output was not written", { cause: error });
  }
  return error;
}

/** Output formats that keep tied weights: safetensors names them in the metadata as `convert.py` does, torch ties them again. */
const KEEPS_TIED_WEIGHTS = new Set(["safetensors", "torch"]);

/**
 * What becomes of tied weights (a PyTorch checkpoint's names that share one storage, read as one
 * tensor with the other names in the metadata, `{removed: kept}` beside `"format": "pt"`) in an
 * output format that has no shared arrays; undefined when there are none, or the format keeps them.
 */
export function tiedWeightsNotice(source: TensorSource, format: string): string | undefined {
  if (KEEPS_TIED_WEIGHTS.has(format) || source.metadata?.format !== "pt") return undefined;
  const names = new Set(source.tensors.map((t) => t.name));
  const pairs = Object.entries(source.metadata).filter(([removed, kept]) => removed !== "format" && names.has(kept) && !names.has(removed));
  if (pairs.length === 0) return undefined;
  const shown = pairs.slice(0, 3).map(([removed, kept]) => `${removed} shared its storage with ${kept}`);
  const more = pairs.length > 3 ? ` (and ${pairs.length - 3} more)` : "";
  const others = pairs.length === 1 ? pairs[0]![0] : "the other names";
  const fate =
    format === "npz"
      ? `${others} ${pairs.length === 1 ? "is" : "are"} only named in the metadata (the archive comment, which np.load does not read)`
      : format === "flax"
        ? `${others} ${pairs.length === 1 ? "is" : "are"} left out with the metadata (flax msgpack has no place for it)`
        : `${others} ${pairs.length === 1 ? "is" : "are"} only named in the metadata`;
  return `tied weights: ${shown.join(", ")}${more}; ${format} has no shared arrays, so each is written once, under the kept name, and ${fate}`;
}

/** `a, b and c`. */
function wordList(words: readonly string[]): string {
  return words.length <= 1 ? words.join("") : `${words.slice(0, -1).join(", ")} and ${words[words.length - 1]}`;
}
