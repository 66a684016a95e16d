/**
 * The tensor-stream model every adapter speaks: a reader lists entries whose bytes are pulled
 * lazily, in C order and little-endian; a writer takes all entries first, then pulls their bytes
 * in the order its format wants.
 */
import { type ByteSink, type ByteSource, DEFAULT_CHUNK_SIZE, WRITTEN, arraySink } from "./ByteSource.js";
import { type Dtype, dtypeInfo, tensorByteLength } from "./dtypes.js";
import { StConvertError, withContext } from "./StConvertError.js";

/** Name, dtype and shape of one tensor. */
export interface TensorInfo {
  readonly name: string;
  readonly dtype: Dtype;
  /** Dimensions, outermost first; `[]` is a 0-d (scalar) tensor. */
  readonly shape: readonly number[];
}

/** How a consumer wants a tensor's bytes delivered. */
export interface ChunkOptions {
  /** Largest chunk, in bytes. Default {@link DEFAULT_CHUNK_SIZE}. */
  chunkSize?: number;
  /**
   * The consumer is done with each chunk by the time it asks for the chunk two after it, so a
   * reader may recycle chunk memory (see `ReadRangeOptions.reuse`). Readers may ignore it.
   * Default false.
   */
  reuse?: boolean;
}

/** A tensor whose bytes can be pulled. */
export interface TensorEntry extends TensorInfo {
  /** Bytes of the tensor in C order, little-endian: elements × bits / 8. */
  readonly byteLength: number;
  /**
   * The tensor's bytes, in order, in chunks of at most `chunkSize` bytes (a chunk may be smaller).
   * Nothing is read before the consumer asks; each call starts from the first byte again.
   */
  chunks(options?: ChunkOptions): AsyncIterable<Uint8Array>;
  /**
   * Where the tensor's bytes lie as they are, when they do: exactly the `byteLength` bytes
   * `chunks()` delivers, from `offset` of `source`, with nothing to swap, gather or inflate.
   * Lets a sink copy them without reading them ({@link ByteSink.copyFrom}; a sink that cannot copy
   * from that source declines, and the bytes come through `chunks()`). Optional; undefined when
   * the bytes must be transformed. A wrapper that passes the bytes on unchanged (a rename) passes it on.
   */
  extent?(): TensorExtent | undefined;
  /**
   * Where the tensor's bytes lie as they are, when they lie in several runs (a distributed
   * checkpoint's tensor split by rows: one run per rank's chunk, in order): {@link extent}'s
   * promise for each run, whose lengths add up to `byteLength`. Asked only where `extent` gives
   * nothing. Optional; a wrapper that passes the bytes on unchanged passes it on.
   */
  extents?(): readonly TensorExtentRun[] | undefined;
}

/** One run of a tensor's bytes where they lie: an extent and how many bytes it holds. */
export interface TensorExtentRun extends TensorExtent {
  readonly length: number;
}

/** What {@link TensorEntry.extent} returns. */
export interface TensorExtent {
  readonly source: ByteSource;
  readonly offset: number;
  /**
   * Verifies the bytes as `chunks()` would (a stored zip member's CRC-32), reading them on its
   * own: run alongside the copy, which fails if it fails. Absent when there is nothing to check.
   */
  check?(): Promise<void>;
  /**
   * The same check as the CRC-32 of the copied bytes, for a sink that takes it as it copies
   * ({@link ByteSink.copyFromCrc32}) instead of {@link check} reading them again. Only beside
   * `check`, which a sink that cannot fold it runs; absent where the check is no CRC of these bytes.
   */
  readonly crc32?: ExtentCrc32;
  /**
   * Told the bytes copied so far after each piece of {@link KERNEL_COPY_STEP}: progress, and a
   * chance to stop (it may throw, as an aborted conversion does).
   */
  copied?(bytes: number): void;
}

/** A check of an extent's bytes as their CRC-32 (see {@link TensorExtent.crc32}). */
export interface ExtentCrc32 {
  /** The CRC-32 the copied bytes' CRC continues from (a zip member's bytes before the extent, say). */
  initial(): Promise<number>;
  /** Takes the copied bytes' CRC-32 and finishes the check (with the member's bytes after the extent, say). */
  finish(crc: number): Promise<void>;
}

/**
 * `extent` with every outcome of its check, whichever way it runs (`check`, or `crc32` folded into
 * the copy), passed through `guard` (which may name or mark a failure); the rest as it is.
 */
export function guardedExtent(extent: TensorExtent, guard: <T>(done: Promise<T>) => Promise<T>): TensorExtent {
  const { check, crc32 } = extent;
  return {
    ...extent,
    check: check === undefined ? undefined : () => guard(check()),
    crc32: crc32 === undefined ? undefined : { initial: () => guard(crc32.initial()), finish: (crc) => guard(crc32.finish(crc)) },
  };
}

/** `extent` with the errors of its check given `where` (the file, the tensor) when they lack it, as `chunks()` would name them. */
export function extentNamed(extent: TensorExtent, where: { file?: string; tensor?: string }): TensorExtent {
  if (extent.check === undefined) return extent;
  return guardedExtent(extent, (done) =>
    done.catch((error: unknown) => {
      throw withContext(error, where);
    }),
  );
}

/**
 * Tensors from this size are copied by a sink's `copyFrom` where it can: below it, a copy through
 * the thread pool costs more than the sink's buffer (a write of 50,000 tiny tensors stays there).
 */
export const KERNEL_COPY_FROM = 1024 * 1024;

/** A kernel copy goes in pieces this large, so that progress moves and an abort is heard between them. */
export const KERNEL_COPY_STEP = 64 * 1024 * 1024;

/** Metadata of a tensor file: a string → string map (a null-prototype object when st-convert builds it). */
export type Metadata = Readonly<Record<string, string>>;

/** What a reader returns and a writer takes: metadata and the tensors, in the source's order. */
export interface TensorSource {
  /** `null` when the file has none. */
  readonly metadata: Metadata | null;
  readonly tensors: readonly TensorEntry[];
  /**
   * Names the file holds as other names' tensors (`{removed: kept}`, tied weights), for formats
   * that hold them as names (a PyTorch checkpoint); they are in `metadata` too. Absent for none.
   */
  readonly aliases?: Readonly<Record<string, string>>;
  /**
   * Code the file names and st-convert never runs: the symbols a pickle names outside the
   * reader's allow-list (`module.name`, PyTorch checkpoints). `info --json` lists them, so that
   * the command doubles as a scanner. Absent for formats that cannot name code.
   */
  readonly globals?: readonly string[];
}

/**
 * An in-memory tensor.
 * @throws StConvertError `ByteLengthMismatch` when `bytes` does not have the length that `dtype` and `shape` require.
 */
export function tensorFromBytes(info: TensorInfo, bytes: Uint8Array): TensorEntry {
  const byteLength = checkedByteLength(info);
  if (bytes.byteLength !== byteLength) {
    throw new StConvertError("ByteLengthMismatch", `${info.dtype} shape [${info.shape.join(", ")}] needs ${byteLength} bytes, got ${bytes.byteLength}`, {
      tensor: info.name,
    });
  }
  return {
    name: info.name,
    dtype: info.dtype,
    shape: [...info.shape],
    byteLength,
    async *chunks({ chunkSize = DEFAULT_CHUNK_SIZE }: ChunkOptions = {}) {
      for (let at = 0; at < byteLength; at += chunkSize) yield bytes.subarray(at, Math.min(at + chunkSize, byteLength));
    },
  };
}

/**
 * Bytes a tensor needs, after checking that its dtype is known and its dims are non-negative integers.
 * @throws StConvertError `UnknownDtype`, `TensorInvalidInfo`, `MisalignedSlice`.
 */
export function checkedByteLength(info: TensorInfo): number {
  try {
    dtypeInfo(info.dtype);
    for (const dim of info.shape) {
      if (!Number.isSafeInteger(dim) || dim < 0) {
        throw new StConvertError("TensorInvalidInfo", `shape [${info.shape.join(", ")}] has a dimension that is not a non-negative integer`);
      }
    }
    return tensorByteLength(info.dtype, info.shape);
  } catch (error) {
    throw withContext(error, { tensor: info.name });
  }
}

/** u64 max: the safetensors reader counts elements and bits in u64. */
const U64_MAX = (1n << 64n) - 1n;

/**
 * Refuses a shape whose element count overflows u64 when its dims are multiplied left to right,
 * as the safetensors reader multiplies them (`checked_mul`), even where a later 0 makes the
 * tensor empty: `[2^32, 2^32, 0]` holds no byte, but the reference refuses a file that has it.
 * Only an empty tensor can pass {@link checkedByteLength} and fail here. Call it after that.
 * @throws StConvertError `ValidationOverflow` naming the tensor.
 */
export function checkShapeOverflow(info: TensorInfo): void {
  let product = 1;
  for (const dim of info.shape) {
    product *= dim;
    // Below 2^53 − 1 the product is exact and far from 2^64; past it, the exact fold decides.
    if (product > Number.MAX_SAFE_INTEGER) {
      let elements = 1n;
      for (const d of info.shape) {
        elements *= BigInt(d);
        if (elements > U64_MAX) {
          throw new StConvertError(
            "ValidationOverflow",
            `shape [${info.shape.join(", ")}]: its dims multiplied left to right pass 2^64 − 1 (a later 0 does not help), and the safetensors reader refuses such a shape (overflow computing buffer size)`,
            { tensor: info.name },
          );
        }
      }
      return;
    }
  }
}

/**
 * A tensor's chunks, refused if they do not add up to exactly the byte length it declares, or if
 * that length is not what its dtype and shape need (a writer lays out headers from dtype and
 * shape, so a mismatch would write a corrupt file): the one place that holds every reader to its
 * word, for every consumer (writers, `readTensorBytes`). Stops reading as soon as a reader
 * delivers too much.
 * @throws StConvertError `ByteLengthMismatch` naming the tensor.
 */
export async function* exactChunks(tensor: TensorEntry, options: ChunkOptions = {}): AsyncGenerator<Uint8Array> {
  checkDeclaredLength(tensor);
  let delivered = 0;
  for await (const chunk of tensor.chunks(options)) {
    delivered += chunk.byteLength;
    if (delivered > tensor.byteLength) break;
    yield chunk;
  }
  if (delivered !== tensor.byteLength) throw deliveredMismatch(tensor, delivered);
}

function checkDeclaredLength(tensor: TensorEntry): void {
  const needed = checkedByteLength(tensor);
  if (tensor.byteLength !== needed) {
    throw new StConvertError(
      "ByteLengthMismatch",
      `the reader declares ${tensor.byteLength} bytes, but ${tensor.dtype} shape [${tensor.shape.join(", ")}] needs ${needed}`,
      { tensor: tensor.name },
    );
  }
}

function deliveredMismatch(tensor: TensorEntry, delivered: number): StConvertError {
  return new StConvertError(
    "ByteLengthMismatch",
    `the reader delivered ${delivered > tensor.byteLength ? "more than" : "only"} ${delivered} of the ${tensor.byteLength} bytes it declared`,
    { tensor: tensor.name },
  );
}

/**
 * Copies one tensor's bytes to a sink and checks that the tensor delivers exactly the byte count
 * it declared (as {@link exactChunks} does). Writes behind: chunk k's write is started, then
 * chunk k + 1 is asked for while it runs, so the reader's work (a CRC, an inflate, a gather)
 * overlaps the write instead of delaying it.
 * @throws StConvertError `ByteLengthMismatch`, and what the reader or the sink throw, naming the tensor.
 */
export async function pipeTensor(tensor: TensorEntry, sink: ByteSink, chunkSize = DEFAULT_CHUNK_SIZE): Promise<void> {
  if (tensor.byteLength >= KERNEL_COPY_FROM && sink.copyFrom !== undefined && tensor.extent !== undefined) {
    const extent = tensor.extent();
    if (extent !== undefined && (await copyExtent(tensor, extent, sink))) return;
  }
  if (tensor.byteLength >= KERNEL_COPY_FROM && sink.copyFrom !== undefined && tensor.extents !== undefined) {
    const runs = tensor.extents();
    if (runs !== undefined && (await copyRuns(tensor, runs, sink))) return;
  }
  if (tensor.byteLength >= KERNEL_COPY_FROM && sink.copyFromFile !== undefined && tensor.extent !== undefined) {
    // Bytes with a check are read as chunks, the check folded into the same read.
    const extent = tensor.extent();
    const copy = sink.copyFromFile.bind(sink);
    if (extent !== undefined && extent.check === undefined && extent.crc32 === undefined && (await copyExtent(tensor, extent, sink, tensor.byteLength, copy))) {
      return;
    }
  }
  // The iterator is driven by hand, not through exactChunks: one async generator less per tensor,
  // a third of the cost of copying 500,000 tiny tensors.
  let writing: Promise<void> | undefined;
  let iterator: AsyncIterator<Uint8Array> | undefined;
  let open = false;
  try {
    checkDeclaredLength(tensor);
    // reuse: each chunk is written (and the sink keeps no reference) before the one after next is asked for.
    iterator = tensor.chunks({ chunkSize, reuse: true })[Symbol.asyncIterator]();
    open = true;
    let delivered = 0;
    for (;;) {
      const next = await iterator.next();
      if (next.done === true) {
        open = false;
        break;
      }
      delivered += next.value.byteLength;
      if (delivered > tensor.byteLength) break;
      if (writing !== undefined) await writing;
      writing = sink.write(next.value);
      // Taken at once: nothing to wait for. Otherwise marked handled now: a failing write is
      // reported when awaited, not as an unhandled rejection.
      if (writing === WRITTEN) writing = undefined;
      else writing.catch(() => {});
    }
    if (open) {
      open = false;
      await iterator.return?.();
    }
    if (writing !== undefined) await writing;
    if (delivered !== tensor.byteLength) throw deliveredMismatch(tensor, delivered);
  } catch (error) {
    // Neither a read nor a write outlives the call, whichever failed first.
    if (open) await Promise.resolve(iterator?.return?.()).catch(() => {});
    await writing?.catch(() => {});
    throw withContext(error, { tensor: tensor.name });
  }
}

/**
 * Copies a tensor by its extent, in pieces of {@link KERNEL_COPY_STEP}: with its check folded into
 * the copy where the extent gives it as a CRC-32 and the sink takes one ({@link ByteSink.copyFromCrc32}),
 * else with its check (if any) running alongside. With `copy` (the sink's `copyFromFile`), by it
 * instead of `copyFrom` and with no fold. False, with nothing written, when the sink cannot copy
 * from this source.
 * @throws StConvertError what the copy, the check or `extent.copied` throw, naming the tensor.
 */
async function copyExtent(
  tensor: TensorEntry,
  extent: TensorExtent,
  sink: ByteSink,
  length = tensor.byteLength,
  copy: NonNullable<ByteSink["copyFrom"]> | undefined = undefined,
): Promise<boolean> {
  let checking: Promise<void> | undefined;
  try {
    checkDeclaredLength(tensor);
    let fold = sink.copyFromCrc32 === undefined || copy !== undefined ? undefined : extent.crc32;
    let crc = fold === undefined ? 0 : await fold.initial();
    for (let at = 0; at < length; ) {
      const step = Math.min(KERNEL_COPY_STEP, length - at);
      let copying: Promise<unknown> | undefined;
      if (fold !== undefined) {
        copying = sink.copyFromCrc32!(extent.source, extent.offset + at, step, crc)?.then((value) => {
          crc = value;
        });
        // Declined before the first piece: the check runs alongside instead.
        if (copying === undefined && at === 0) fold = undefined;
      }
      if (fold === undefined)
        copying = copy === undefined ? sink.copyFrom!(extent.source, extent.offset + at, step) : copy(extent.source, extent.offset + at, step);
      if (copying === undefined) {
        // Only ever before the first piece: a sink that took one takes the rest.
        if (at === 0) return false;
        throw new StConvertError("Io", "the output stopped taking copies halfway through a tensor", { file: sink.name });
      }
      if (at === 0 && fold === undefined && extent.check !== undefined) {
        checking = extent.check();
        // Marked handled now: a failure is reported by the await below.
        checking.catch(() => {});
      }
      await copying;
      at += step;
      extent.copied?.(at);
    }
    await fold?.finish(crc);
    await checking;
    return true;
  } catch (error) {
    await checking?.catch(() => {});
    throw withContext(error, { tensor: tensor.name });
  }
}

/**
 * Copies a tensor by its runs, one after the other, each as {@link copyExtent} copies an extent.
 * False, with nothing written, when the sink cannot copy from the first run's source.
 * @throws StConvertError `ByteLengthMismatch` when the runs do not add up to the tensor's bytes,
 *   `Io` when the sink declines a later run, and what a copy or a check throws.
 */
async function copyRuns(tensor: TensorEntry, runs: readonly TensorExtentRun[], sink: ByteSink): Promise<boolean> {
  const total = runs.reduce((n, run) => n + run.length, 0);
  if (total !== tensor.byteLength) {
    throw new StConvertError("ByteLengthMismatch", `its runs hold ${total} bytes, but the tensor is ${tensor.byteLength}`, { tensor: tensor.name });
  }
  for (let i = 0; i < runs.length; i++) {
    const run = runs[i]!;
    if (run.length === 0) continue;
    if (!(await copyExtent(tensor, run, sink, run.length))) {
      if (i === 0) return false;
      throw new StConvertError("Io", "the output stopped taking copies halfway through a tensor", { file: sink.name, tensor: tensor.name });
    }
  }
  return true;
}

/**
 * The items of `items`, the next one always asked for before the current one is handed on, so
 * that the producer's work (a read, a CRC, an inflate) overlaps the consumer's (a write).
 */
export async function* readAhead<T>(items: AsyncIterable<T>): AsyncGenerator<T> {
  const iterator = items[Symbol.asyncIterator]();
  let next = iterator.next();
  try {
    for (;;) {
      const { done, value } = await next;
      if (done === true) return;
      next = iterator.next();
      // Marked handled now: a failing read is reported when awaited, not as an unhandled rejection.
      next.catch(() => {});
      yield value;
    }
  } finally {
    await iterator.return?.();
  }
}

/**
 * All of one tensor's bytes in one array. Meant for tensors that fit in memory; streaming
 * consumers use `chunks()`.
 * @throws StConvertError `LimitExceeded` past `maxBytes` (default 2^32 − 1, the largest `Uint8Array`
 *   Node 20 makes), `ByteLengthMismatch` when the reader delivers another byte count.
 */
export async function readTensorBytes(entry: TensorEntry, maxBytes = 2 ** 32 - 1): Promise<Uint8Array> {
  if (entry.byteLength > maxBytes) {
    throw new StConvertError("LimitExceeded", `${entry.byteLength} bytes exceed the in-memory limit of ${maxBytes}; stream it with chunks()`, {
      tensor: entry.name,
    });
  }
  const out = new Uint8Array(entry.byteLength);
  await pipeTensor(entry, arraySink(out));
  return out;
}

/**
 * Code-point order, which the safetensors (Rust byte order of UTF-8), numpy and msgpack-python
 * references all use. JavaScript's `<` compares UTF-16 units and puts U+10000.. before U+E000..U+FFFF.
 */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}

/** Moves surrogates (D800–DFFF, i.e. code points ≥ U+10000) above E000–FFFF; the rest keeps its order. */
function codePointRank(unit: number): number {
  if (unit >= 0xe000) return unit - 0x800;
  if (unit >= 0xd800) return unit + 0x2000;
  return unit;
}

/**
 * True when `text` holds a UTF-16 surrogate without its partner: such a string has no UTF-8 form,
 * so no tensor name, key or metadata value of a file can carry it.
 */
export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** A metadata map with no prototype, so that keys such as `__proto__` stay plain keys. */
export function createMetadata(entries: Iterable<readonly [string, string]> = []): Record<string, string> {
  const metadata: Record<string, string> = Object.create(null);
  for (const [key, value] of entries) metadata[key] = value;
  return metadata;
}

/**
 * Splits `metadata` into tied-weight aliases and the rest. An alias is an entry `removed: kept`
 * beside `"format": "pt"` (as safetensors' `convert.py` and PyTorch readers record tied weights)
 * whose value names one of `tensors` and whose key names none of them.
 */
export function splitAliases(
  metadata: Metadata | null,
  tensors: readonly Pick<TensorEntry, "name">[],
): { aliases: Record<string, string>; rest: Metadata | null } {
  const aliases = createMetadata();
  if (metadata === null || metadata.format !== "pt") return { aliases, rest: metadata };
  const names = new Set(tensors.map((t) => t.name));
  const rest = createMetadata();
  for (const [key, value] of Object.entries(metadata)) {
    if (key !== "format" && names.has(value) && !names.has(key)) aliases[key] = value;
    else rest[key] = value;
  }
  return { aliases, rest };
}

/**
 * Checks that `metadata` is a string → string map.
 * @throws StConvertError `InvalidMetadata` naming the first offending key.
 */
export function checkMetadata(metadata: unknown): asserts metadata is Metadata | null | undefined {
  if (metadata === null || metadata === undefined) return;
  if (typeof metadata !== "object" || Array.isArray(metadata)) {
    throw new StConvertError("InvalidMetadata", "metadata must be an object mapping strings to strings");
  }
  for (const [key, value] of Object.entries(metadata)) {
    if (typeof value !== "string") {
      throw new StConvertError("InvalidMetadata", `metadata value of ${JSON.stringify(key)} is a ${typeof value}, not a string`);
    }
  }
}
