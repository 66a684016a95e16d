/**
 * What the page does with the files a user picked, without the page: list what a file holds (as
 * `st-convert info` does) and convert it into a sink (as `st-convert IN OUT` does), with the same
 * formats, checks and messages. Everything runs over `Blob` sources; nothing leaves the machine.
 */
import {
  type ByteSink,
  type ByteSource,
  type CastRule,
  type ChunkOptions,
  type FormatOptionValues,
  type Metadata,
  StConvertError,
  type TensorEntry,
  type TensorFormat,
  type TensorSource,
  blobSource,
  castTarget,
  castTensors,
  createMetadata,
  type DiffTensorsOptions,
  type Dtype,
  type Histogram,
  type TensorStats,
  type TensorsDiff,
  diffTensors,
  elementCount,
  tensorHistogram,
  tensorStats,
  formatCastRules,
  parseCastRule,
  readAheadSource,
  storedBytes,
  tensorByteLength,
  withContext,
} from "@st-convert/core";
import { FORMATS, detectInputFormat, formatByExtension, formatByName } from "./formats.js";
import { groupDigits, plural } from "./text.js";

/** A picked file: a `File`, or any `Blob` with a name. */
export interface NamedBlob extends Blob {
  readonly name: string;
}

/** What the form asks for, as the user typed it. */
export interface PageSettings {
  /** Keep only tensors whose name matches this regular expression (`--filter`); empty: all. */
  filter?: string;
  /** Drop tensors whose name matches this regular expression (`--exclude`). */
  exclude?: string;
  /** `KEY=VALUE` entries added to the metadata, one a line (`--metadata`). */
  metadata?: string;
  /** Cast rules separated by white space (`--cast F32=BF16 norm:F32=F32`). */
  cast?: string;
  /** Write an output even when the selection keeps no tensor (`--allow-empty`). */
  allowEmpty?: boolean;
  /** Record the casts made in the metadata (`"st_convert.cast": "F32=BF16"`; `--no-record` is false). Default true. */
  recordCast?: boolean;
  /** Format options by name (`sep`, `compress`, …); each format reads only those it declared. */
  formatOptions?: FormatOptionValues;
}

/** The settings checked and compiled. */
export interface CompiledSettings {
  readonly filter: RegExp | undefined;
  readonly exclude: RegExp | undefined;
  readonly metadata: Metadata;
  readonly cast: readonly CastRule[];
  readonly allowEmpty: boolean;
  readonly recordCast: boolean;
  readonly formatOptions: FormatOptionValues;
}

/** Metadata key under which a cast is recorded, as the command records it. */
export const CAST_METADATA_KEY = "st_convert.cast";

/**
 * Checks the settings.
 * @throws StConvertError `InvalidOption` for a pattern that does not compile, a metadata line
 *   without `KEY=`, a malformed cast rule.
 */
export function compileSettings(settings: PageSettings): CompiledSettings {
  const metadata = createMetadata();
  for (const line of (settings.metadata ?? "").split(/\r?\n/)) {
    if (line.trim() === "") continue;
    const at = line.indexOf("=");
    if (at <= 0) throw new StConvertError("InvalidOption", `metadata ${JSON.stringify(line)}: expected KEY=VALUE`);
    metadata[line.slice(0, at)] = line.slice(at + 1);
  }
  const rules = (settings.cast ?? "").split(/\s+/).filter((text) => text !== "");
  return {
    filter: pattern(settings.filter, "filter"),
    exclude: pattern(settings.exclude, "exclude"),
    metadata,
    cast: rules.map(parseCastRule),
    allowEmpty: settings.allowEmpty === true,
    recordCast: settings.recordCast !== false,
    formatOptions: settings.formatOptions ?? {},
  };
}

function pattern(text: string | undefined, field: string): RegExp | undefined {
  if (text === undefined || text === "") return undefined;
  try {
    return new RegExp(text, "u");
  } catch (error) {
    throw new StConvertError("InvalidOption", `${field} ${JSON.stringify(text)}: ${(error as Error).message}`);
  }
}

/** True when the filter and the exclusion keep the tensor called `name`. */
export function selects(settings: Pick<CompiledSettings, "filter" | "exclude">, name: string): boolean {
  if (settings.filter !== undefined && !settings.filter.test(name)) return false;
  return settings.exclude === undefined || !settings.exclude.test(name);
}

/** One tensor as `st-convert info` lists it. */
export interface TensorRow {
  name: string;
  dtype: string;
  shape: number[];
  byteLength: number;
  /** How the file stores it, where its format says (a quantized GGUF tensor: `Q4_K 288`). */
  stored?: string;
}

/** What a file holds, as `st-convert info --json` reports it. */
export interface FileInfo {
  file: string;
  format: string;
  metadata: Metadata | null;
  /** The metadata as the text view shows it: long values its format can summarise, summarised. */
  metadataShown?: [string, string][];
  tensors: TensorRow[];
  totals: { tensors: number; parameters: number; bytes: number };
}

/**
 * The file a conversion reads: an index among the picked files (its shards beside it), or a
 * distributed checkpoint's `.metadata` (its rank files beside it), else the first.
 */
export function mainFile(files: readonly NamedBlob[]): NamedBlob {
  const first = files[0];
  if (first === undefined) throw new StConvertError("InvalidArgument", "no file was picked");
  return (
    files.find((f) => formatByExtension(f.name)?.name.endsWith("-index") === true) ??
    files.find((f) => FORMATS.some((format) => format.folderEntry !== undefined && f.name === format.folderEntry)) ??
    first
  );
}

/**
 * Reads the header of the main file (see {@link mainFile}) and lists its tensors and metadata.
 * @throws StConvertError naming the file, as `st-convert info` does.
 */
export async function inspectFiles(files: readonly NamedBlob[], settings: PageSettings = {}, onWarning?: (line: string) => void): Promise<FileInfo> {
  const compiled = compileSettings({ formatOptions: settings.formatOptions });
  return withInput(files, async (source, file) => {
    const { format, tensors } = await openInput(source, file, files, compiled, (message) => onWarning?.(`${file}: ${message}`));
    const rows = tensors.tensors.map((t): TensorRow => {
      const stored = format.storedForm?.(t);
      const row = { name: t.name, dtype: t.dtype, shape: [...t.shape], byteLength: t.byteLength };
      return stored === undefined ? row : { ...row, stored: `${stored.type} ${groupDigits(stored.bytes)}` };
    });
    const metadataShown = Object.entries(tensors.metadata ?? {}).map(([key, value]): [string, string] => [key, format.describeMetadata?.(key, value) ?? value]);
    return { file, format: format.name, metadata: tensors.metadata, metadataShown, tensors: rows, totals: totalsOf(rows) };
  });
}

/** Tensors, parameters (elements) and bytes of a list of tensors. */
export function totalsOf(tensors: readonly TensorRow[]): FileInfo["totals"] {
  let parameters = 0;
  let bytes = 0;
  for (const t of tensors) {
    parameters += elementCount(t.shape);
    bytes += t.byteLength;
  }
  return { tensors: tensors.length, parameters, bytes };
}

/**
 * The tensor bytes a conversion of `info` with `settings` writes (after the selection and the
 * casts): what decides whether the output streams to disk. Containers add their headers; the JSON
 * form's text is larger than the bytes.
 */
export function plannedBytes(info: FileInfo, settings: CompiledSettings): number {
  let total = 0;
  for (const t of info.tensors) {
    if (!selects(settings, t.name)) continue;
    const to = castTarget(settings.cast, t.name, t.dtype as Dtype);
    total += to === undefined ? t.byteLength : tensorByteLength(to, t.shape);
  }
  return total;
}

/** What {@link convertFiles} did. */
export interface PageConvertResult {
  input: string;
  output: string;
  inputFormat: string;
  outputFormat: string;
  tensors: number;
  /** Tensor bytes written (headers and containers not counted). */
  bytes: number;
}

/** How {@link convertFiles} reports as it goes. */
export interface ConvertListeners {
  /** A notice, as the command prints it after `st-convert: warning: ` (`file: message`). */
  onWarning?: (line: string) => void;
  /** Tensor bytes written so far, and the total. */
  onProgress?: (done: number, total: number) => void;
  /** Stops the conversion at the next chunk; the sink is then aborted. */
  signal?: AbortSignal;
}

/**
 * Converts the main file (see {@link mainFile}) to format `to` into `sink`, which is closed on
 * success and aborted on failure. `outputName` names the output in messages and where a format
 * records its own name (a torch archive's folder).
 * @throws StConvertError naming the file, the tensor and the broken rule, as the command does;
 *   `NothingToWrite` when the selection keeps no tensor; `Aborted` when `signal` fired.
 */
export async function convertFiles(
  files: readonly NamedBlob[],
  to: string,
  sink: ByteSink,
  outputName: string,
  settings: PageSettings = {},
  listeners: ConvertListeners = {},
): Promise<PageConvertResult> {
  let compiled: CompiledSettings;
  let outputFormat: TensorFormat;
  try {
    compiled = compileSettings(settings);
    outputFormat = formatByName(to);
    if (outputFormat.readOnly === true || outputFormat.name.endsWith("-index") || outputFormat.writeFolder !== undefined) {
      throw new StConvertError("UnknownFormat", `${outputFormat.name} can be read but not written`, { file: outputName });
    }
  } catch (error) {
    await sink.abort();
    throw error;
  }
  const warn = (file: string) => (message: string) => listeners.onWarning?.(`${file}: ${message}`);
  let warnedOnInput = false;
  return withInput(
    files,
    async (source, file) => {
      const opened = await openInput(
        source,
        file,
        files,
        compiled,
        (message) => {
          warnedOnInput = true;
          warn(file)(message);
        },
        outputFormat.name,
      );
      const kept = opened.tensors.tensors.filter((t) => opened.include(t.name));
      if (kept.length === 0 && !compiled.allowEmpty) {
        // As the command: an empty output is a mistake when the input had tensors (the selection
        // dropped them, or the reader skipped what it found and said so).
        if (opened.dropped.size > 0) {
          throw new StConvertError(
            "NothingToWrite",
            `the selection (filter/exclude) keeps none of the input's ${plural(opened.dropped.size, "tensor")}; nothing to write (tick "allow an empty output" to write one anyway)`,
          );
        }
        if (warnedOnInput) throw new StConvertError("NothingToWrite", "no tensor is left to write: the reader skipped everything it found (see the warnings)");
      }
      const cast = castTensors(kept, compiled.cast);
      const casts = cast.filter((entry, i) => entry !== kept[i]).length;
      const selected: TensorSource = { metadata: metadataOf(opened.tensors.metadata, compiled, casts), tensors: cast };
      const observed = observe(selected, listeners.signal, listeners.onProgress);
      // A quantized GGUF tensor is reported as the bytes of its blocks, as the command does.
      const stored = storedBytes(observed.source.tensors);
      try {
        await outputFormat.write(observed.source, sink, {
          options: compiled.formatOptions,
          onWarning: warn(outputName),
          fileName: outputName,
          freeLayout: opened.format.freeLayout === true,
          onStored: stored.onStored,
        });
        listeners.signal?.throwIfAborted();
        await sink.close();
      } catch (error) {
        await sink.abort();
        throw withContext(abortError(error, listeners.signal), { file: observed.reading() ? file : outputName });
      }
      return {
        input: file,
        output: outputName,
        inputFormat: opened.format.name,
        outputFormat: outputFormat.name,
        tensors: selected.tensors.length,
        bytes: stored.written(observed.done()),
      };
    },
    () => sink.abort(),
  );
}

/** One tensor's statistics and the histogram of its finite values, as the page shows them. */
export interface TensorLook {
  stats: TensorStats;
  histogram: Histogram | undefined;
}

/**
 * The statistics (as `st-convert stats --json` gives them) and a histogram of the tensor `name` of
 * the picked file, read with the page's format options.
 * @throws StConvertError naming the file and the tensor; `TensorNotFound` when the file has no such tensor.
 */
export async function lookAtTensor(files: readonly NamedBlob[], name: string, settings: PageSettings = {}, bins = 64): Promise<TensorLook> {
  const compiled = compileSettings({ formatOptions: settings.formatOptions });
  return withInput(files, async (source, file) => {
    const { tensors } = await openInput(source, file, files, compiled, undefined);
    const entry = tensors.tensors.find((t) => t.name === name);
    if (entry === undefined) throw new StConvertError("TensorNotFound", `no tensor ${JSON.stringify(name)} in the file`, { file });
    const stats = await tensorStats(entry);
    const histogram = stats.min === null ? undefined : await tensorHistogram(entry, { bins });
    return { stats, histogram };
  });
}

/** What {@link diffFiles} found: core's comparison, with each side's file and format. */
export interface PageDiff extends TensorsDiff {
  a: { file: string; format: string };
  b: { file: string; format: string };
}

/**
 * Compares the picked file (A) with another (B) as `st-convert diff A B` does: exactly, or with
 * `atol`/`rtol` as `torch.testing.assert_close`; the form's filter and exclude apply to both.
 * @throws StConvertError naming the file that cannot be read.
 */
export async function diffFiles(
  a: readonly NamedBlob[],
  b: readonly NamedBlob[],
  settings: PageSettings = {},
  options: DiffTensorsOptions = {},
): Promise<PageDiff> {
  const compiled = compileSettings({ filter: settings.filter, exclude: settings.exclude, formatOptions: settings.formatOptions });
  const selected = async (files: readonly NamedBlob[], source: ByteSource, file: string) => {
    const opened = await openInput(source, file, files, compiled, undefined);
    return {
      format: opened.format.name,
      tensors: { metadata: opened.tensors.metadata, tensors: opened.tensors.tensors.filter((t) => opened.include(t.name)) },
    };
  };
  return withInput(a, async (sourceA, fileA) => {
    const left = await selected(a, sourceA, fileA);
    return withInput(b, async (sourceB, fileB) => {
      const right = await selected(b, sourceB, fileB);
      const found = await diffTensors(left.tensors, right.tensors, options);
      return { a: { file: fileA, format: left.format }, b: { file: fileB, format: right.format }, ...found };
    });
  });
}

/**
 * The input's metadata with the form's entries added, then the cast rules when a tensor was cast
 * (as the command records them); untouched when there is nothing to add.
 */
function metadataOf(metadata: Metadata | null, settings: CompiledSettings, casts: number): Metadata | null {
  const extra = Object.entries(settings.metadata);
  if (casts > 0 && settings.recordCast) extra.push([CAST_METADATA_KEY, formatCastRules(settings.cast)]);
  if (extra.length === 0) return metadata;
  return createMetadata([...Object.entries(metadata ?? {}), ...extra]);
}

/**
 * Runs `use` over a source of the main file; failures before it ran (or inside it, when they
 * name no file) are put on the main file, and `onFailure` runs first.
 */
async function withInput<T>(files: readonly NamedBlob[], use: (source: ByteSource, file: string) => Promise<T>, onFailure?: () => Promise<void>): Promise<T> {
  let file = "<input>";
  try {
    const main = mainFile(files);
    file = main.name;
    // Small reads (headers, 50,000 small tensors in file order) come from a window read ahead:
    // each Blob read is a round trip through the browser's blob storage.
    return await use(readAheadSource(blobSource(main, main.name)), file);
  } catch (error) {
    await onFailure?.().catch(() => {});
    throw withContext(error, { file });
  }
}

/** The input opened, with the names the reader left out because the selection drops them. */
async function openInput(
  source: ByteSource,
  fileName: string,
  files: readonly NamedBlob[],
  settings: CompiledSettings,
  onWarning: ((message: string) => void) | undefined,
  writing?: string,
): Promise<{ format: TensorFormat; tensors: TensorSource; dropped: Set<string>; include: (name: string) => boolean }> {
  const dropped = new Set<string>();
  const include = (name: string): boolean => {
    const keep = selects(settings, name);
    if (!keep) dropped.add(name);
    return keep;
  };
  const format = await detectInputFormat(source);
  const tensors = await format.open(source, {
    options: settings.formatOptions,
    onWarning,
    fileName,
    openSibling: async (name) => openSibling(files, fileName, name),
    include,
    writing,
  });
  return { format, tensors, dropped, include };
}

/**
 * A file an index names, among the picked files: matched by its path relative to the index (a
 * folder picked whole gives `webkitRelativePath`), else by its name.
 * @throws StConvertError `InvalidArgument` when it was not picked.
 */
function openSibling(files: readonly NamedBlob[], indexName: string, name: string): ByteSource {
  const found = files.find((f) => relativePath(f) === siblingPath(files, indexName, name)) ?? files.find((f) => f.name === name);
  if (found === undefined) {
    throw new StConvertError(
      "InvalidArgument",
      indexName.endsWith(".metadata")
        ? `the checkpoint's metadata names ${JSON.stringify(name)}, which was not picked: pick the whole folder, .metadata with its rank files`
        : `the index names ${JSON.stringify(name)}, which was not picked: pick the index together with its shards`,
      {
        file: indexName,
      },
    );
  }
  return readAheadSource(blobSource(found, name));
}

function relativePath(file: NamedBlob): string {
  const path = (file as { webkitRelativePath?: string }).webkitRelativePath;
  return path === undefined || path === "" ? file.name : path;
}

function siblingPath(files: readonly NamedBlob[], indexName: string, name: string): string {
  const index = files.find((f) => f.name === indexName);
  const path = index === undefined ? indexName : relativePath(index);
  const slash = path.lastIndexOf("/");
  return slash < 0 ? name : `${path.slice(0, slash + 1)}${name}`;
}

/**
 * The source with its tensors' chunks counted towards progress and checked against the abort
 * signal (their extents passed on); `reading()` tells whether a failure happened while pulling input bytes (blame the input)
 * or while writing (blame the output). A writer may pull a tensor twice (the JSON writer scans
 * floats first): progress counts the furthest byte reached in each tensor.
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
      // Passed on: the page copies nothing in a kernel, but a writer lays its file out by where the
      // bytes lie (a GGUF's conversion to safetensors), as the command does.
      extent: entry.extent?.bind(entry),
      async *chunks(options?: ChunkOptions) {
        const iterator = entry.chunks(options)[Symbol.asyncIterator]();
        let position = 0;
        try {
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
        } finally {
          await iterator.return?.();
        }
      },
    };
  };
  return { source: { metadata: source.metadata, tensors: source.tensors.map(wrap) }, done: () => done, reading: () => inRead };
}

function abortError(error: unknown, signal: AbortSignal | undefined): unknown {
  if (signal?.aborted === true && !(error instanceof StConvertError)) {
    return new StConvertError("Aborted", "conversion stopped before it finished; the output was not written", { cause: error });
  }
  return error;
}
