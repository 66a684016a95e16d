/**
 * The one interface through which a format plugs into the `st-convert` command and the
 * `convert()` API. The CLI names no format in its own code: it lists registered formats.
 */
import type { ByteSink, ByteSource, ScratchFactory } from "./ByteSource.js";
import { StConvertError } from "./StConvertError.js";
import type { TensorEntry, TensorSource } from "./Tensor.js";

/** A command-line option a format adds, e.g. npy's `--name` or flax's `--sep`. */
export interface FormatOption {
  /** Long name without dashes, e.g. `"sep"`. */
  readonly name: string;
  readonly type: "string" | "boolean";
  /** May be given more than once (values collect into an array). */
  readonly multiple?: boolean;
  /** Placeholder shown in help, e.g. `"SEP"`. */
  readonly valueName?: string;
  /** One line for `--help`. */
  readonly description: string;
  /** Which side the option applies to. */
  readonly appliesTo: "read" | "write" | "both";
}

/** Values of options, keyed by option name, as the CLI parsed them. */
export type FormatOptionValues = Readonly<Record<string, string | boolean | readonly string[] | undefined>>;

/** What a format's `open`/`write` receive besides the bytes. */
export interface FormatContext {
  /** Option values; a format reads only the options it declared. */
  readonly options: FormatOptionValues;
  /** Receives non-fatal notices (metadata dropped, leaves skipped). Libraries never print. */
  readonly onWarning?: (message: string) => void;
  /** Path or label of the file, for default tensor names and messages. */
  readonly fileName?: string;
  /**
   * Scratch space for readers that need to read some bytes back out of order (the npz reader, for
   * a large deflated Fortran-order member). The CLI gives temporary files; without it such readers
   * fall back to slower ways that need none.
   */
  readonly scratch?: ScratchFactory;
  /**
   * Opens a file named relative to this one, read-only (the shards an index names). Whoever
   * provides it closes what it opened once the conversion is over; the CLI does.
   */
  readonly openSibling?: (name: string) => Promise<ByteSource>;
  /**
   * The tensors the caller will keep (the CLI's `--filter`/`--exclude`), by the name the reader
   * gives them. A reader may leave out a tensor for which this is false before judging it, so that
   * a user can drop what cannot be converted (an object array, an undeclared void dtype) instead of
   * having the whole file refused. Readers that ignore it are still correct: the caller filters again.
   */
  readonly include?: (name: string) => boolean;
  /**
   * The name of the format the tensors are read for, when a conversion knows it (not `info`): a
   * reader may then keep a stored form that its own format's writer takes back as it is (a GGUF
   * read for a GGUF output keeps its quantized blocks instead of dequantizing them).
   */
  readonly writing?: string;
  /**
   * True when no reference tool writes this conversion's output byte for byte, because the input's
   * format has {@link TensorFormat.freeLayout}: a writer may then lay the file out for the copy
   * (the safetensors writer pads its header so that tensors lie at their source's offsets within a
   * page, which the kernel copies at `cp`'s speed). The same input gives the same bytes everywhere:
   * the layout depends on the input alone, never on how it will be copied.
   */
  readonly freeLayout?: boolean;
  /**
   * Threads the format's {@link TensorFormat.kernels} may run on (the CLI's worker threads, for a
   * single conversion); absent on the page and in a batch's own threads, where a format runs its
   * kernels itself, on the thread it was called on.
   */
  readonly kernelPool?: KernelPool;
  /**
   * Told by a writer that stores a tensor in other bytes than it reads of it (GGUF's `--quantize`):
   * the tensor's name as the writer received it and the bytes it stores, so that the caller's report
   * gives what was written. Told once per tensor, before its bytes are read; writers that store what
   * they read need not call it.
   */
  readonly onStored?: (tensor: string, bytes: number) => void;
}

/** A format's pure functions that a {@link KernelPool} runs on other threads, by name (GGUF's quantization). */
export type FormatKernels = Readonly<Record<string, (...args: never[]) => unknown>>;

/**
 * Runs formats' kernels ({@link TensorFormat.kernels}) on other threads, for as long as the host
 * keeps it open. Arguments and results cross threads as structured clones, and the buffers named
 * to move go there and come back without a copy.
 */
export interface KernelPool {
  /** Threads that run kernels at once. */
  readonly threads: number;
  /**
   * Runs kernel `kernel` of the format called `format` with `args` on the next free thread; the
   * buffers in `transfer` move there (the caller's views of them become empty). Resolves to the
   * kernel's result, with the buffers of the typed arrays it holds (it or its items, when it is an
   * array) moved back, so a kernel that returns its arguments hands their memory back.
   * @throws what the kernel throws (as an Error with its message), and an Error when the thread stops.
   */
  run(format: string, kernel: string, args: readonly unknown[], transfer: readonly ArrayBuffer[]): Promise<unknown>;
}

/** How a file stores a tensor, where that differs from its dtype (for `info`). */
export interface StoredForm {
  /** The format's own name for the type (a GGUF tensor's ggml type, `"Q4_K"`). */
  readonly type: string;
  /** Bytes the tensor takes in the file. */
  readonly bytes: number;
}

/** One file of a format's own split set (see {@link TensorFormat.splitSet}). */
export interface SplitFile {
  /** Its file name, beside the others. */
  readonly name: string;
  /** The tensors it holds. */
  readonly tensors: readonly TensorEntry[];
  /** Writes the whole file to the sink; the caller closes or aborts the sink. */
  write(sink: ByteSink): Promise<void>;
}

/** A file format: how to recognise, read and write it. */
export interface TensorFormat {
  /** Short name used by `--from`/`--to`, e.g. `"safetensors"`. */
  readonly name: string;
  /** One line for `--help`. */
  readonly description: string;
  /** File name endings, lower case with the dot, e.g. `[".safetensors"]`. */
  readonly extensions: readonly string[];
  /** Options this format understands. */
  readonly options?: readonly FormatOption[];
  /**
   * True when files with this format's extensions are often something else (`.json`: configs,
   * tokenizers). Folder walks then take such a file only when `sniff` accepts its first bytes.
   */
  readonly ambiguousExtension?: boolean;
  /**
   * True when folder walks should leave files of this format alone: they are converted only when
   * named (a sharded checkpoint's index, whose shards a walk takes one by one already).
   */
  readonly namedOnly?: boolean;
  /**
   * A checkpoint of this format is a folder holding this file (a distributed checkpoint's
   * `.metadata`): a folder given as the input that holds it is read through it, its other files
   * opened with `openSibling`.
   */
  readonly folderEntry?: string;
  /**
   * Writes a checkpoint that is a folder of files (a distributed checkpoint): each file through
   * `open(name)`, a name inside the folder. The caller puts all of them in place once every one
   * was written, or none. A format that has it writes no single file: `write` refuses.
   */
  writeFolder?(tensors: TensorSource, open: (name: string) => Promise<ByteSink>, context: FormatContext): Promise<void>;
  /**
   * True when conversions from this format have no byte-exact reference, so their writers get
   * {@link FormatContext.freeLayout}: a GGUF's keys go into the output's metadata in st-convert's
   * own encoding, which no other tool writes.
   */
  readonly freeLayout?: boolean;
  /** True for a format that can only be read: `write` refuses, and the CLI refuses it as an output up front. */
  readonly readOnly?: boolean;
  /** True when the first bytes of a file look like this format (used when the extension says nothing). */
  sniff?(head: Uint8Array): boolean;
  /**
   * A short form of a metadata entry for `info`'s text view, or undefined to show it whole (a GGUF
   * tokenizer's 150,000 tokens as their type and count); `--json` always gives the whole value.
   */
  describeMetadata?(key: string, value: string): string | undefined;
  /** How the file stores a tensor this format's reader listed, where that differs from its dtype (for `info`). */
  storedForm?(entry: TensorEntry): StoredForm | undefined;
  /**
   * A split convention of the format's own, which `--max-shard-size` follows instead of
   * huggingface_hub's split and index (GGUF's split sets: `model-0000k-of-0000N.gguf`, each file
   * a GGUF of its own, no index).
   */
  readonly splitSet?: {
    /** The checkpoint's name when the output is a folder (`model.gguf`). */
    readonly defaultName: string;
    /** The files of the set, in order, named after `weightsName`; one file, so named, when nothing needs splitting. */
    plan(tensors: TensorSource, maxShardSize: number, weightsName: string, context: FormatContext): Promise<readonly SplitFile[]>;
  };
  /**
   * For a later file of a split set that is read through its first file (GGUF's
   * `NAME-0000k-of-0000N.gguf`, k > 1), the first file's name; undefined for any other name. A
   * batch converts the set once, through its first file, and leaves the later ones out.
   */
  firstOfSet?(fileName: string): string | undefined;
  /**
   * The format's kernels that a {@link KernelPool} may run on other threads, loaded on first use.
   * Optional; a format that has them uses them through `FormatContext.kernelPool` when given one.
   */
  kernels?(): Promise<FormatKernels>;
  /** Reads the file's header and lists its tensors; their bytes are read later, on demand. */
  open(source: ByteSource, context: FormatContext): Promise<TensorSource>;
  /** Writes tensors to the sink. The caller closes or aborts the sink. */
  write(tensors: TensorSource, sink: ByteSink, context: FormatContext): Promise<void>;
}

/**
 * What a writer said it stores ({@link FormatContext.onStored}) for the tensors of `tensors` (as
 * the writer receives them): `onStored` to pass on, and `written(read)`, the tensor bytes written
 * when `read` bytes of them were read (each stored tensor's bytes in place of its own).
 */
export function storedBytes(tensors: readonly TensorEntry[]): { onStored: (tensor: string, bytes: number) => void; written: (read: number) => number } {
  const stored = new Map<string, number>();
  return {
    onStored: (tensor, bytes) => {
      stored.set(tensor, bytes);
    },
    written: (read) => {
      let bytes = read;
      if (stored.size === 0) return bytes;
      for (const entry of tensors) {
        const kept = stored.get(entry.name);
        if (kept !== undefined) bytes += kept - entry.byteLength;
      }
      return bytes;
    },
  };
}

/**
 * A string option's value, or undefined when absent.
 * @throws StConvertError `InvalidOption` when it is not a single string.
 */
export function stringOption(options: FormatOptionValues, name: string): string | undefined {
  const value = options[name];
  if (value === undefined) return undefined;
  if (typeof value !== "string") throw new StConvertError("InvalidOption", `--${name} takes one string value`);
  return value;
}

/** A repeatable string option's values (none when absent). */
export function stringListOption(options: FormatOptionValues, name: string): string[] {
  const value = options[name];
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.filter((v): v is string => typeof v === "string");
  return [];
}

/**
 * A file name without its directory and its last extension (`dir/emb.weight.npy` → `emb.weight`):
 * the default tensor name of single-tensor formats. Undefined when nothing is left.
 */
export function fileStem(path: string | undefined): string | undefined {
  if (path === undefined) return undefined;
  const base = path.slice(Math.max(path.lastIndexOf("/"), path.lastIndexOf("\\")) + 1);
  const dot = base.lastIndexOf(".");
  const stem = dot > 0 ? base.slice(0, dot) : base;
  return stem === "" ? undefined : stem;
}

/**
 * A format's reader or writer module, loaded on first use (a command that touches no file of the
 * format does not pay for it) and then kept: `import()` of a module already loaded still costs
 * ~8 µs, felt over a folder of thousands of small files. A failed load is tried again next time.
 */
export function lazyModule<T>(load: () => Promise<T>): () => Promise<T> {
  let loaded: Promise<T> | undefined;
  return () => {
    loaded ??= load().catch((error: unknown) => {
      loaded = undefined;
      throw error;
    });
    return loaded;
  };
}
