/**
 * `inspect()`: a file's tensors and metadata, read as `convert()` reads its input (the same
 * formats, selection and transforms), and the opening of an input both share. A module of its own
 * so that `st-convert info` loads no writer, cast or shard code: the remote-input code too loads
 * only for a URL.
 */
import { dirname, join } from "node:path";
import {
  type ByteSource,
  type FormatOptionValues,
  type Metadata,
  StConvertError,
  type TensorEntry,
  type TensorFormat,
  type TensorSource,
  isStConvertError,
  withContext,
} from "@st-convert/core";
import { createScratchFile, openFileSource } from "@st-convert/core/node";
import { FORMATS, detectInputFormat, folderEntryOf } from "./formats.js";
import type { RemoteInputOptions } from "./remoteInput.js";
import { isRemoteInput } from "./remotePath.js";
import { type TransformOptions, compileTransforms, selects, transformTensors } from "./transforms.js";

/** Receives a non-fatal notice and the file it concerns (the input, an output, a shard). */
export type WarningListener = (message: string, file: string) => void;

/** Options of {@link inspect}. */
export interface InspectOptions extends TransformOptions {
  /** Input format name; default: from the extension, else from the content. */
  from?: string;
  formatOptions?: FormatOptionValues;
  onWarning?: WarningListener;
  formats?: readonly TensorFormat[];
  /** How a URL input is opened, as for {@link convert}. */
  remote?: RemoteInputOptions;
}

/** What a file holds, as `st-convert info --json` prints it. */
export interface FileReport {
  format: string;
  metadata: Metadata | null;
  tensors: { name: string; dtype: string; shape: number[]; byteLength: number }[];
}

/** What a file holds, as {@link inspect} finds it but with the reader's own entries, read-only. */
export interface InspectedFile {
  readonly format: string;
  /** The format's own object, for its `info` hooks (`describeMetadata`, `storedForm`). */
  readonly formatSpec?: TensorFormat;
  readonly metadata: Metadata | null;
  readonly tensors: readonly TensorEntry[];
  /** The symbols the file's pickle names outside its reader's allow-list (none run); absent for other formats. */
  readonly globals?: readonly string[];
}

/**
 * Reads a file's header and lists its tensors and metadata, without reading tensor bytes
 * (formats whose layout needs it, such as compressed archives, may read more).
 */
export async function inspect(input: string | ByteSource, options: InspectOptions = {}): Promise<FileReport> {
  const found = await inspectEntries(input, options);
  return {
    format: found.format,
    metadata: found.metadata,
    tensors: found.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], byteLength: t.byteLength })),
  };
}

/**
 * {@link inspect} without a copy of each entry, for a caller that only reads them (the info
 * command: copying 50,000 entries and their shapes took about 40 ms of a 550 ms listing, before
 * the collector copied them again).
 */
export async function inspectEntries(input: string | ByteSource, options: InspectOptions = {}): Promise<InspectedFile> {
  return readInput(input, options, async (found) => found);
}

/**
 * Opens `input` as {@link inspect} does and hands its tensors, after the selection and the
 * transforms, to `use`, while the file is open: their bytes can be pulled until `use` settles.
 * The input is closed when `use` is done, on every path; errors name the file.
 */
export async function readInput<T>(input: string | ByteSource, options: InspectOptions, use: (found: InspectedFile) => Promise<T>): Promise<T> {
  const formats = options.formats ?? FORMATS;
  const inputName = nameOf(input, "<input>");
  return withSource(
    await resolveInput(input, formats),
    async (source, openSibling) => {
      const onWarning = options.onWarning === undefined ? undefined : (message: string) => options.onWarning?.(message, inputName);
      const { format, tensors } = await openInput(source, inputName, { ...options, onWarning: undefined }, formats, openSibling, onWarning);
      return use({ format: format.name, formatSpec: format, metadata: tensors.selected.metadata, tensors: tensors.selected.tensors, globals: tensors.globals });
    },
    options.remote,
  );
}

/** The input as opened: a folder that is a checkpoint (a DCP's) through its entry file; anything else as given. */
export async function resolveInput(input: string | ByteSource, formats: readonly TensorFormat[]): Promise<string | ByteSource> {
  if (typeof input !== "string" || isRemoteInput(input)) return input;
  return (await folderEntryOf(input, formats)) ?? input;
}

/** A file's or URL's name, or a source's own, for messages. */
export function nameOf(file: string | { readonly name?: string }, fallback: string): string {
  return typeof file === "string" ? file : (file.name ?? fallback);
}

type Closeable = ByteSource & { close(): Promise<void> };

/**
 * Opens the input for `use` (a path, a URL — `http(s)://` or `hf://`, see remoteInput.ts — or a
 * source the caller owns), with a way to open files named relative to it (an index's shards: by
 * URL beside a URL); closes what it opened when `use` is done, on every path.
 */
export async function withSource<T>(
  input: string | ByteSource,
  use: (source: ByteSource, openSibling: (name: string) => Promise<ByteSource>) => Promise<T>,
  remote: RemoteInputOptions = {},
): Promise<T> {
  const name = nameOf(input, "<input>");
  const opened: Closeable[] = [];
  const openSibling = async (sibling: string): Promise<ByteSource> => {
    if (typeof input !== "string") {
      throw new StConvertError("InvalidArgument", `cannot open ${JSON.stringify(sibling)} beside an input that is not a file`, { file: name });
    }
    const file = isRemoteInput(input)
      ? await openRemote((await import("./remoteInput.js")).remoteSibling(input, sibling), remote)
      : await openFileSource(join(dirname(input), sibling), { regularOnly: true });
    opened.push(file);
    return file;
  };
  try {
    let source: ByteSource;
    if (typeof input === "string") {
      // A signal (Ctrl-C) ends a request in flight at once, not after the server's answer.
      const file = isRemoteInput(input) ? await openRemote(input, remote) : await openFileSource(input);
      opened.push(file);
      source = file;
    } else {
      source = input;
    }
    return await use(source, openSibling);
  } catch (error) {
    throw withContext(error, { file: name });
  } finally {
    for (const file of opened) await file.close().catch(() => {});
  }
}

/**
 * A reader's refusals of a file's first bytes, which another format's file brings about (an npz
 * read as safetensors: "header too large"): for these the content is looked at again.
 */
const NOT_THIS_FORMAT = new Set([
  "HeaderTooSmall",
  "HeaderTooLarge",
  "InvalidHeaderLength",
  "InvalidHeader",
  "InvalidHeaderDeserialization",
  "BadMagic",
  "ExtraData",
  "InvalidJson",
]);

/** The input after the transforms, and the names the selection left out (by the reader or after it). */
export interface OpenedInput {
  selected: TensorSource;
  dropped: Set<string>;
  /** The reader's {@link TensorSource.globals}, whatever the selection kept. */
  globals?: readonly string[];
}

/** Recognises the input's format, reads its header and applies the transforms; errors are named by `withSource`. */
export async function openInput(
  source: ByteSource,
  fileName: string,
  options: InspectOptions,
  formats: readonly TensorFormat[],
  openSibling: (name: string) => Promise<ByteSource>,
  onWarning: ((message: string) => void) | undefined,
  writing?: string,
): Promise<{ format: TensorFormat; tensors: OpenedInput }> {
  const transforms = compileTransforms(options);
  const dropped = new Set<string>();
  // No selection: every tensor is kept, and no reader is asked about each one.
  const selecting = transforms.filter.length > 0 || transforms.exclude.length > 0;
  const include = !selecting
    ? undefined
    : (name: string): boolean => {
        const keep = selects(transforms, name);
        if (!keep) dropped.add(name);
        return keep;
      };
  const format = await detectInputFormat(source, options.from, formats);
  let all: TensorSource;
  try {
    all = await format.open(source, {
      options: options.formatOptions ?? {},
      onWarning,
      fileName,
      // Scratch files go to the system's temporary folder (TMPDIR), removed as soon as they are made.
      scratch: () => createScratchFile(),
      openSibling,
      include,
      writing,
    });
  } catch (error) {
    // Refused as the format its name says: when the content says another (an npz renamed
    // .safetensors), that is the message, not the wrong reader's.
    if (options.from === undefined && isStConvertError(error) && NOT_THIS_FORMAT.has(error.code)) {
      const { misnamedFormat } = await import("./foreign.js");
      const other = await misnamedFormat(source, format, formats).catch(() => undefined);
      if (other !== undefined) throw other;
    }
    throw error;
  }
  if (include !== undefined) for (const entry of all.tensors) include(entry.name);
  return { format, tensors: { selected: transformTensors(all, transforms), dropped, globals: all.globals } };
}

/** Opens a URL input, loading the remote-input code on first use. */
async function openRemote(url: string, remote: RemoteInputOptions): Promise<Closeable> {
  const { openRemoteInput } = await import("./remoteInput.js");
  return openRemoteInput(url, remote);
}
