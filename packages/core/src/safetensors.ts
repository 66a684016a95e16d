/**
 * The safetensors format: a strict, lazy reader and a byte-exact, streaming writer.
 *
 * Spec: https://github.com/huggingface/safetensors (README "Format"; `safetensors/src/tensor.rs`
 * `read_metadata`, `Metadata::validate`, `prepare`, `serialize`). Layout: u64 LE header length N,
 * N bytes of UTF-8 JSON padded with spaces, then the tensors' bytes, contiguous, in offset order.
 */
import { type ByteInput, type ByteSink, type ByteSource, DEFAULT_CHUNK_SIZE, arraySink, readRange, toByteSource } from "./ByteSource.js";
import { DTYPES, type Dtype, dtypeInfo, toSafeNumber } from "./dtypes.js";
import { NameIndex } from "./NameIndex.js";
import { type HeaderTable, MAX_HEADER_DEPTH, exactBegin, exactDim, exactEnd, indexNames, parseHeaderTable } from "./parseSafetensorsHeader.js";
import { StConvertError, quoteName, withContext } from "./StConvertError.js";
import {
  type ChunkOptions,
  type Metadata,
  type TensorEntry,
  type TensorExtent,
  type TensorInfo,
  type TensorSource,
  checkMetadata,
  checkShapeOverflow,
  checkedByteLength,
  compareCodePoints,
  hasLoneSurrogate,
  KERNEL_COPY_FROM,
  pipeTensor,
} from "./Tensor.js";
import type { TensorFormat } from "./TensorFormat.js";

/**
 * Largest header the reference accepts, in bytes (`MAX_HEADER_SIZE` in `tensor.rs`). It bounds the
 * memory a header can make us spend before a single tensor is validated.
 */
export const MAX_HEADER_SIZE = 100_000_000;

/** Options of {@link readSafetensors}. */
export interface SafetensorsReadOptions {
  /** Largest header accepted, in bytes. Default {@link MAX_HEADER_SIZE}. */
  maxHeaderSize?: number;
  /** Deepest JSON nesting accepted in the header. Default {@link MAX_HEADER_DEPTH}. */
  maxDepth?: number;
}

/** One tensor of a safetensors file. */
export interface SafetensorsTensor extends TensorEntry {
  /** `data_offsets` as the header states them, relative to the byte buffer. */
  readonly dataOffsets: readonly [number, number];
}

/** A validated safetensors file whose tensors have not been read yet. */
export interface SafetensorsFile extends TensorSource {
  readonly format: "safetensors";
  /** N, the header length the file declares (padding included). */
  readonly headerLength: number;
  /** Tensors in the order of their bytes in the file. */
  readonly tensors: readonly SafetensorsTensor[];
  /**
   * The tensor called `name`.
   * @throws StConvertError `TensorNotFound`.
   */
  tensor(name: string): SafetensorsTensor;
}

const utf8Encoder = new TextEncoder();

/**
 * Tensors up to this many bytes are read together with their neighbours in file order: one read
 * of up to {@link COALESCED_READ_SIZE} bytes serves a run of them, instead of an asynchronous read
 * (tens of µs) for each of 50,000 tiny tensors.
 */
export const SMALL_TENSOR_SIZE = 64 * 1024;

/** Largest read that serves several small tensors (the memory one window of them holds). */
export const COALESCED_READ_SIZE = 1024 * 1024;

/**
 * Reads and validates a safetensors header; tensor bytes are read later, on demand.
 *
 * Applies the reference reader's rules in its order (`formats.md` §1.2): header length ≤ 100 MB
 * before the file length, UTF-8, the JSON schema, then per tensor in offset order: contiguous
 * offsets, overflow-checked element and bit counts, byte boundaries, byte lengths; finally, that
 * the tensors cover the file exactly.
 *
 * Memory: the header's bytes while it is parsed, then its names and about 100 bytes per tensor
 * (and, for a header of ASCII text up to 16 MiB, that text, of which the names are slices).
 * Small tensors adjacent in the file are read together (see {@link SMALL_TENSOR_SIZE}) when they
 * are asked for in file order, as writers do.
 *
 * @throws StConvertError with a code named after the reference's error (`HeaderTooLarge`,
 *   `InvalidOffset`, `ValidationOverflow`, `TensorInvalidInfo`, `MetadataIncompleteBuffer`, …),
 *   or `DuplicateKey` where st-convert is stricter than the reference.
 */
export async function readSafetensors(input: ByteInput, options: SafetensorsReadOptions = {}): Promise<SafetensorsFile> {
  const source = toByteSource(input);
  const maxHeaderSize = options.maxHeaderSize ?? MAX_HEADER_SIZE;
  const fail = (code: string, rule: string, tensor?: string): never => {
    throw new StConvertError(code, rule, { file: source.name, tensor });
  };

  if (source.size < 8) fail("HeaderTooSmall", `header too small: the file has ${source.size} bytes, fewer than the 8 of the header length`);
  const prefix = await source.read(0, 8);
  const declared = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (declared > BigInt(maxHeaderSize)) {
    fail("HeaderTooLarge", `header too large: ${declared} bytes declared, the limit is ${maxHeaderSize}`);
  }
  const headerLength = Number(declared);
  if (8 + headerLength > source.size) {
    fail("InvalidHeaderLength", `invalid header length: ${headerLength} bytes declared, but the file has only ${source.size - 8} after the length`);
  }

  let table: HeaderTable;
  try {
    // The header's bytes are referenced only here: they can go as soon as the table is built.
    table = parseHeaderTable(await source.read(8, headerLength), { maxDepth: options.maxDepth });
  } catch (error) {
    throw withContext(error, { file: source.name });
  }
  const data = new FileData(source, 8 + headerLength);
  let fileIndex: Uint32Array;
  try {
    fileIndex = validateLayout(table, data, fail);
  } catch (error) {
    throw withContext(error, { file: source.name });
  }
  // Made on the first lookup by name when the parser needed none: a listing never looks one up.
  let nameIndex = table.nameIndex;
  const { names } = table;
  const tensors = data.tensors;
  return {
    format: "safetensors",
    metadata: table.metadata,
    headerLength,
    tensors,
    tensor(name: string): SafetensorsTensor {
      nameIndex ??= indexNames(names);
      const found = nameIndex.get(name);
      if (found === -1) fail("TensorNotFound", "tensor not found", name);
      return tensors[fileIndex[found]!]!;
    },
  };
}

type Fail = (code: string, rule: string, tensor?: string) => never;

/**
 * The reference's `Metadata::validate` over a parsed header, tensor by tensor in offset order,
 * then `read_metadata`'s check that the tensors cover the file. Fills `data.tensors` in offset
 * order and returns, for each header position, the tensor's index there.
 */
function validateLayout(table: HeaderTable, data: FileData, fail: Fail): Uint32Array {
  const { count, names, dtypes, begins, ends, shapeStarts, dims } = table;
  // Offset order, by (begin, end); ties keep header order (the reference keeps HashMap order
  // there, which is random; the error raised is the same either way). Files are usually in
  // offset order already: that is checked in one pass, and only other files are sorted.
  const exact = table.wideValues.size === 0;
  const compare = (a: number, b: number): number => (exact ? begins[a]! - begins[b]! || ends[a]! - ends[b]! : compareOffsets(table, a, b)) || a - b;
  let sorted = true;
  if (exact) {
    // compare(i - 1, i) < 0, written out: this loop runs cold, once per tensor.
    for (let i = 1; i < count && sorted; i++) sorted = begins[i - 1]! < begins[i]! || (begins[i - 1] === begins[i] && ends[i - 1]! <= ends[i]!);
  } else {
    for (let i = 1; i < count && sorted; i++) sorted = compare(i - 1, i) < 0;
  }
  let order: number[] | undefined;
  if (!sorted) {
    order = [];
    for (let i = 0; i < count; i++) order.push(i);
    order.sort(compare);
  }

  const shapes = new ShapeCache();
  const fileIndex = new Uint32Array(count);
  const tensors = data.tensors;
  // Where the next tensor must start: exact below 2^53, else in `wideStart` (and NaN here).
  let start = 0;
  let wideStart: bigint | undefined;
  for (let k = 0; k < count; k++) {
    const i = order === undefined ? k : order[k]!;
    const name = names[i]!;
    const dtype = DTYPES[dtypes[i]!]!;
    const begin = begins[i]!;
    const end = ends[i]!;
    // Doubles are exact while every value and product stays at or below 2^53 − 1 (NaN stands for
    // a larger value); past that, the reference's u64 rules are applied in BigInt.
    let bits = 1;
    if (wideStart === undefined && begin === start && end >= begin) {
      for (let j = shapeStarts[i]!; j < shapeStarts[i + 1]! && bits <= Number.MAX_SAFE_INTEGER; j++) bits *= dims[j]!;
      bits *= dtype.bits;
    } else bits = Number.NaN;
    if (bits <= Number.MAX_SAFE_INTEGER) {
      if (bits % 8 !== 0) {
        fail("MisalignedSlice", `${dtype.code} shape [${shapeText(table, i)}] holds ${bits} bits, which does not end on a byte boundary`, name);
      }
      if (end - begin !== bits / 8) {
        fail(
          "TensorInvalidInfo",
          `invalid shape, data type, or offset: ${dtype.code} [${shapeText(table, i)}] needs ${bits / 8} bytes, data_offsets [${begin}, ${end}] hold ${end - begin}`,
          name,
        );
      }
      start = end;
    } else {
      const next = validateExactly(table, i, wideStart ?? BigInt(start), fail);
      if (next <= BigInt(Number.MAX_SAFE_INTEGER)) {
        start = Number(next);
        wideStart = undefined;
      } else {
        start = Number.NaN;
        wideStart = next;
      }
    }
    fileIndex[i] = k;
    tensors.push(new FileTensor(data, k, name, dtype.code, shapes.get(table, i, name), begin, end - begin));
  }
  const covered = wideStart ?? BigInt(start);
  if (covered !== BigInt(data.size - data.start)) {
    fail(
      "MetadataIncompleteBuffer",
      `incomplete metadata, file not fully covered: the tensors end at byte ${covered + BigInt(data.start)} of a ${data.size}-byte file`,
    );
  }
  return fileIndex;
}

/** Offset order of header positions `a` and `b`, for headers with offsets past 2^53 − 1. */
function compareOffsets(table: HeaderTable, a: number, b: number): number {
  const [x, y] = [exactBegin(table, a), exactBegin(table, b)];
  if (x !== y) return x < y ? -1 : 1;
  const [u, v] = [exactEnd(table, a), exactEnd(table, b)];
  return u < v ? -1 : u > v ? 1 : 0;
}

/**
 * One tensor's layout rules in u64 arithmetic, as the reference applies them (for values or
 * products past 2^53 − 1, which doubles cannot hold). Returns where the next tensor must start.
 */
function validateExactly(table: HeaderTable, i: number, start: bigint, fail: Fail): bigint {
  const name = table.names[i]!;
  const dtype = DTYPES[table.dtypes[i]!]!;
  const begin = exactBegin(table, i);
  const end = exactEnd(table, i);
  const u64Max = (1n << 64n) - 1n;
  if (begin !== start || end < begin) {
    fail("InvalidOffset", `invalid offset: data_offsets [${begin}, ${end}] do not start where the previous tensor ends (${start})`, name);
  }
  let elements = 1n;
  for (let j = table.shapeStarts[i]!; j < table.shapeStarts[i + 1]!; j++) {
    elements *= exactDim(table, j);
    if (elements > u64Max) fail("ValidationOverflow", `overflow computing buffer size from shape [${shapeText(table, i)}]`, name);
  }
  const bits = elements * BigInt(dtype.bits);
  if (bits > u64Max) fail("ValidationOverflow", `overflow computing buffer size from shape [${shapeText(table, i)}] and dtype ${dtype.code}`, name);
  if (bits % 8n !== 0n) {
    fail("MisalignedSlice", `${dtype.code} shape [${shapeText(table, i)}] holds ${bits} bits, which does not end on a byte boundary`, name);
  }
  if (end - begin !== bits / 8n) {
    fail(
      "TensorInvalidInfo",
      `invalid shape, data type, or offset: ${dtype.code} [${shapeText(table, i)}] needs ${bits / 8n} bytes, data_offsets [${begin}, ${end}] hold ${end - begin}`,
      name,
    );
  }
  return end;
}

function shapeText(table: HeaderTable, i: number): string {
  const dims: bigint[] = [];
  for (let j = table.shapeStarts[i]!; j < table.shapeStarts[i + 1]!; j++) dims.push(exactDim(table, j));
  return dims.join(", ");
}

const EMPTY_SHAPE: readonly number[] = Object.freeze([]);

/**
 * One frozen shape array per distinct shape: checkpoints repeat a few shapes over thousands of
 * tensors, and an array per tensor would cost more than the rest of its entry.
 */
class ShapeCache {
  readonly #byKey = new Map<string | number, readonly number[]>();
  // The shape returned last: neighbours usually share theirs, found without building a key.
  #last: readonly number[] = EMPTY_SHAPE;

  /**
   * The shape of header position `i`.
   * @throws StConvertError `Unsupported` for a dimension past 2^53 − 1.
   */
  get(table: HeaderTable, i: number, name: string): readonly number[] {
    const from = table.shapeStarts[i]!;
    const to = table.shapeStarts[i + 1]!;
    if (from === to) return EMPTY_SHAPE;
    const { dims } = table;
    const last = this.#last;
    if (last.length === to - from) {
      // A NaN dim (past 2^53 − 1) equals nothing, so it never matches here.
      let j = from;
      while (j < to && dims[j] === last[j - from]) j++;
      if (j === to) return last;
    }
    this.#last = this.#lookUp(table, from, to, name);
    return this.#last;
  }

  #lookUp(table: HeaderTable, from: number, to: number, name: string): readonly number[] {
    const { dims } = table;
    let key: string | number = dims[from]!;
    for (let j = from + 1; j < to; j++) key = `${key},${dims[j]}`;
    let shape = this.#byKey.get(key);
    if (shape === undefined) {
      const values: number[] = [];
      for (let j = from; j < to; j++) {
        try {
          values.push(toSafeNumber(exactDim(table, j), "dimension"));
        } catch (error) {
          throw withContext(error, { tensor: name });
        }
      }
      shape = Object.freeze(values);
      this.#byKey.set(key, shape);
    }
    return shape;
  }
}

/** A window of file bytes holding tensors `first` to `last` − 1 (in file order). */
interface Window {
  readonly first: number;
  readonly last: number;
  /** Where `bytes` starts, relative to the byte buffer. */
  readonly offset: number;
  readonly bytes: Uint8Array;
}

/** What a file's tensors share: the source, where the byte buffer starts, and the last window read. */
class FileData {
  /** The tensors in file order. */
  readonly tensors: FileTensor[] = [];
  #window: Window | undefined;
  /** How many tensors the next window may hold: doubled while they are asked for in file order. */
  #run = 1;

  constructor(
    readonly source: ByteSource,
    /** Offset of the byte buffer in the file. */
    readonly start: number,
  ) {}

  get size(): number {
    return this.source.size;
  }

  chunks(tensor: FileTensor, options: ChunkOptions): AsyncIterable<Uint8Array> {
    if (tensor.byteLength > SMALL_TENSOR_SIZE || tensor.byteLength === 0) {
      return readRange(this.source, this.start + tensor.begin, tensor.byteLength, options);
    }
    return new SmallTensorChunks(this, tensor, options.chunkSize ?? DEFAULT_CHUNK_SIZE);
  }

  /** The window holding `tensor`: the last one read, or a new one. */
  window(tensor: FileTensor): Window | Promise<Window> {
    const w = this.#window;
    return w !== undefined && tensor.index >= w.first && tensor.index < w.last ? w : this.#load(tensor);
  }

  /**
   * Reads a window from `tensor` on: only that tensor when tensors are asked for out of file
   * order (a read of neighbours would be wasted), twice as many tensors as last time when the
   * tensor is the one right after the last window, up to {@link COALESCED_READ_SIZE} bytes, small
   * tensors only.
   */
  async #load(tensor: FileTensor): Promise<Window> {
    const previous = this.#window;
    this.#run = previous !== undefined && tensor.index === previous.last ? this.#run * 2 : 1;
    const { tensors } = this;
    const limit = Math.min(tensors.length, tensor.index + this.#run);
    let last = tensor.index + 1;
    let end = tensor.begin + tensor.byteLength;
    for (; last < limit; last++) {
      const next = tensors[last]!;
      const nextEnd = next.begin + next.byteLength;
      if (next.byteLength > SMALL_TENSOR_SIZE || nextEnd - tensor.begin > COALESCED_READ_SIZE) break;
      end = nextEnd;
    }
    const w = { first: tensor.index, last, offset: tensor.begin, bytes: await this.source.read(this.start + tensor.begin, end - tensor.begin) };
    this.#window = w;
    return w;
  }
}

/**
 * The chunks of a small tensor, as views of its window: an iterator by hand, since an async
 * generator costs more than the copy of a tensor of a few bytes. The window is never written
 * again, so the views stay valid (as `ByteSource.read` promises).
 */
class SmallTensorChunks implements AsyncIterableIterator<Uint8Array> {
  #at = 0;
  #bytes: Uint8Array | undefined;

  constructor(
    private readonly storage: FileData,
    private readonly tensor: FileTensor,
    private readonly chunkSize: number,
  ) {}

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<Uint8Array>> {
    if (this.#bytes === undefined && this.#at < this.tensor.byteLength) {
      const w = this.storage.window(this.tensor);
      // A window already read is used without waiting a turn.
      if (w instanceof Promise) return w.then((w) => this.#step(w));
      return Promise.resolve(this.#step(w));
    }
    return Promise.resolve(this.#step(undefined));
  }

  #step(w: Window | undefined): IteratorResult<Uint8Array> {
    const { byteLength } = this.tensor;
    if (this.#at >= byteLength) return { done: true, value: undefined };
    if (w !== undefined) {
      const from = this.tensor.begin - w.offset;
      this.#bytes = w.bytes.subarray(from, from + byteLength);
    }
    const bytes = this.#bytes!;
    const at = this.#at;
    this.#at = Math.min(byteLength, at + this.chunkSize);
    return { done: false, value: at === 0 && this.#at === byteLength ? bytes : bytes.subarray(at, this.#at) };
  }

  async return(): Promise<IteratorResult<Uint8Array>> {
    this.#at = this.tensor.byteLength;
    return { done: true, value: undefined };
  }
}

/**
 * One tensor of a safetensors file. A class, not an object literal with a closure per tensor:
 * a file of 500,000 tensors makes 500,000 of them. Wrap it (as a rename does) rather than copy
 * it with `{ ...tensor }`, which keeps neither `chunks()` nor `dataOffsets`.
 */
class FileTensor implements SafetensorsTensor {
  constructor(
    readonly storage: FileData,
    /** Position in file order. */
    readonly index: number,
    readonly name: string,
    readonly dtype: Dtype,
    readonly shape: readonly number[],
    /** `data_offsets[0]`. */
    readonly begin: number,
    readonly byteLength: number,
  ) {}

  get dataOffsets(): readonly [number, number] {
    return [this.begin, this.begin + this.byteLength];
  }

  chunks(options: ChunkOptions = {}): AsyncIterable<Uint8Array> {
    return this.storage.chunks(this, options);
  }

  extent(): TensorExtent {
    return { source: this.storage.source, offset: this.storage.start + this.begin };
  }
}

/** Options of {@link writeSafetensors}. */
export interface SafetensorsWriteOptions {
  /** Bytes pulled from a tensor at a time. Default {@link DEFAULT_CHUNK_SIZE}. */
  chunkSize?: number;
  /** Largest header written. Default {@link MAX_HEADER_SIZE}, the largest the reference reads. */
  maxHeaderSize?: number;
  /**
   * Pads the header further (spaces, in steps of 8, less than {@link SOURCE_ALIGNMENT}) so that
   * the tensors copied from a file ({@link TensorEntry.extent}, {@link KERNEL_COPY_FROM} bytes or
   * more each) lie at the same offset within a block of that size of the output as of their
   * source, as many of their bytes as one padding can place (ties: the least padding), when that
   * is {@link SOURCE_ALIGNED_FROM} bytes or more. The reference writer pads to 8 bytes only, so
   * this is for outputs that no reference writes byte for byte (see `FormatContext.freeLayout`);
   * every reader reads the file alike, as the spec allows a header padded with spaces. Default false.
   */
  matchSourcePages?: boolean;
}

/**
 * The block within which {@link SafetensorsWriteOptions.matchSourcePages} places tensor bytes as
 * their source does. Linux copies between files (`copy_file_range`) a page-cache folio at a time,
 * and ext4 keeps a file's cache in folios larger than a page. Copying 1 GiB from offset 320 of a
 * file to an offset equal to it modulo 64 KiB took a median 0.285 s, as `cp` (0.286 s) and an
 * equal offset (0.283 s), and 0.270 s and 0.282 s modulo 256 KiB and 2 MiB; modulo a 4 KiB page
 * only, 0.412 s (2026-12-07, 7 interleaved runs each after dropping the page cache and compacting
 * memory, outputs synced between).
 */
export const SOURCE_ALIGNMENT = 64 * 1024;

/**
 * Bytes that {@link SafetensorsWriteOptions.matchSourcePages} must place before it pads at all:
 * below them the copy takes milliseconds, and the file keeps the reference's layout (the padding
 * costs at most 0.4 % of the data).
 */
export const SOURCE_ALIGNED_FROM = 16 * 1024 * 1024;

/** Where each tensor goes in a safetensors file, and the header bytes that say so. */
export interface SafetensorsLayout<T extends TensorInfo = TensorInfo> {
  /** The 8-byte length and the padded header JSON. */
  readonly header: Uint8Array;
  /** The tensors in file order: dtype rank descending, then name by code point. */
  readonly order: readonly T[];
  /** `data_offsets` of `order[i]`. */
  readonly offsets: readonly (readonly [number, number])[];
  /** Header plus data, in bytes. */
  readonly fileSize: number;
}

/**
 * Orders tensors and builds the header the reference writer would build for them: tensors by dtype
 * rank descending, then name in code-point order; compact JSON with `__metadata__` first (its keys
 * sorted, since the reference's HashMap order is random); fields `dtype, shape, data_offsets`;
 * spaces to a multiple of 8. Refuses, naming the tensor, anything the reference reader would
 * refuse in the file it makes (a shape whose dims overflow u64 before a 0 empties it).
 * @throws StConvertError `DuplicateKey`, `InvalidName`, `InvalidMetadata`, `UnknownDtype`,
 *   `TensorInvalidInfo`, `MisalignedSlice`, `ValidationOverflow`, `HeaderTooLarge`.
 */
export function layoutSafetensors<T extends TensorInfo>(
  tensors: readonly T[],
  metadata: Metadata | null = null,
  maxHeaderSize = MAX_HEADER_SIZE,
): SafetensorsLayout<T> {
  const plan = planSafetensors(tensors, metadata, maxHeaderSize);
  const header = new Uint8Array(8 + plan.headerLength);
  let at = 0;
  for (const piece of plan.header) {
    header.set(piece, at);
    at += piece.byteLength;
  }
  const { order, starts } = plan;
  return {
    header,
    order,
    get offsets() {
      return order.map((_, k) => [starts[k]!, starts[k + 1]!] as const);
    },
    fileSize: plan.fileSize,
  };
}

/** {@link SafetensorsLayout}, with the header in pieces (a 100 MB header is written without a copy of it). */
interface SafetensorsPlan<T> {
  /** The 8-byte length, the JSON in pieces, the padding. */
  readonly header: Uint8Array[];
  /** N, the header's length after the 8 bytes. */
  readonly headerLength: number;
  readonly order: T[];
  /** Where `order[k]` starts in the byte buffer; `starts[order.length]` is the buffer's size. */
  readonly starts: Float64Array;
  readonly fileSize: number;
}

/**
 * Spaces to add to a header whose tensor bytes would start at `dataStart`, given their order and
 * offsets from there: 0 for the reference's layout.
 */
type ExtraPadding<T> = (order: readonly T[], starts: Float64Array, dataStart: number) => number;

function planSafetensors<T extends TensorInfo>(
  tensors: readonly T[],
  metadata: Metadata | null,
  maxHeaderSize: number,
  extraPadding?: ExtraPadding<T>,
): SafetensorsPlan<T> {
  checkMetadata(metadata);
  const count = tensors.length;
  const ranks = new Uint8Array(count);
  const lengths = new Float64Array(count);
  // Names with no UTF-16 unit from U+D800 up compare in code-point order with `<`, natively.
  const plain = new Uint8Array(count);
  for (let i = 0; i < count; i++) {
    const t = tensors[i]!;
    if (t.name === "__metadata__") throw new StConvertError("InvalidName", "the name `__metadata__` is reserved for the metadata", { tensor: t.name });
    checkWellFormed(t.name, { tensor: t.name });
    lengths[i] = checkedByteLength(t);
    checkShapeOverflow(t);
    ranks[i] = dtypeInfo(t.dtype).rank;
    plain[i] = HIGH_UNIT.test(t.name) ? 0 : 1;
  }
  const compare = (a: number, b: number): number => {
    const rank = ranks[b]! - ranks[a]!;
    if (rank !== 0) return rank;
    const x = tensors[a]!.name;
    const y = tensors[b]!.name;
    return plain[a]! & plain[b]! ? (x < y ? -1 : x > y ? 1 : 0) : compareCodePoints(x, y);
  };
  // Readers of safetensors files hand their tensors over in this order already: checked in one
  // pass, sorted only when not. In order, and all of one dtype, the names are unique already.
  const positions = Array.from({ length: count }, (_, i) => i);
  let sorted = true;
  for (let i = 1; i < count && sorted; i++) sorted = compare(i - 1, i) < 0;
  if (!sorted) positions.sort(compare);
  if (!sorted || ranks[0] !== ranks[count - 1]) {
    const seen = new NameIndex();
    for (const t of tensors) if (!seen.add(t.name)) throw new StConvertError("DuplicateKey", "duplicate tensor name", { tensor: t.name });
  }

  const json = new HeaderBytes();
  json.ascii("{");
  if (metadata !== null) {
    const keys = Object.keys(metadata).sort(compareCodePoints);
    for (const key of keys) {
      checkWellFormed(key, {});
      checkWellFormed(metadata[key]!, {});
    }
    json.text(`"__metadata__":{${keys.map((k) => `${JSON.stringify(k)}:${JSON.stringify(metadata[k])}`).join(",")}}`);
  }
  const order: T[] = new Array(count);
  const starts = new Float64Array(count + 1);
  let at = 0;
  for (let k = 0; k < count; k++) {
    const t = tensors[positions[k]!]!;
    const end = at + lengths[positions[k]!]!;
    order[k] = t;
    starts[k] = at;
    if (k > 0 || metadata !== null) json.ascii(",");
    if (NEEDS_ESCAPE.test(t.name)) json.text(JSON.stringify(t.name));
    else {
      json.ascii('"');
      json.text(t.name);
      json.ascii('"');
    }
    json.ascii(':{"dtype":"');
    json.ascii(t.dtype);
    json.ascii('","shape":[');
    for (let d = 0; d < t.shape.length; d++) {
      if (d > 0) json.ascii(",");
      json.integer(t.shape[d]!);
    }
    json.ascii('],"data_offsets":[');
    json.integer(at);
    json.ascii(",");
    json.integer(end);
    json.ascii("]}");
    at = end;
  }
  starts[count] = at;
  json.ascii("}");
  const padded = json.paddedLength();
  const extra = extraPadding?.(order, starts, 8 + padded) ?? 0;
  // Padding never makes a header too large: past the limit it is left out.
  const header = json.finish(maxHeaderSize, padded + extra > maxHeaderSize ? 0 : extra);
  const headerLength = header.reduce((n, piece) => n + piece.byteLength, -8);
  return { header, headerLength, order, starts, fileSize: 8 + headerLength + at };
}

/** A UTF-16 unit from U+D800 up: `<` orders strings without any in code-point order. */
const HIGH_UNIT = /[\ud800-\uffff]/;
/** What JSON.stringify escapes in a string (lone surrogates aside, refused before). */
const NEEDS_ESCAPE = /["\\\u0000-\u001f]/;

/** Bytes of header text written into one piece before the next is started. */
const HEADER_PIECE = 1 << 18;
/** The first piece's size, doubled for each next one up to {@link HEADER_PIECE}: a batch of small files makes one header each. */
const FIRST_HEADER_PIECE = 1 << 10;

/**
 * Header text written as UTF-8 straight into pieces of about {@link HEADER_PIECE} bytes: a 100 MB
 * header costs its bytes once, and no string is made per entry (50,000 entry strings, joined, then
 * encoded, were most of the cost of a header for 50,000 tensors).
 */
class HeaderBytes {
  readonly #pieces: Uint8Array[] = [];
  #bytes = 0;
  #piece = new Uint8Array(FIRST_HEADER_PIECE);
  #at = 0;

  /** Text of ASCII characters only: the writer's own punctuation, a dtype. */
  ascii(text: string): void {
    const n = text.length;
    if (this.#at + n > this.#piece.byteLength) this.#next(n);
    const piece = this.#piece;
    let at = this.#at;
    for (let k = 0; k < n; k++) piece[at++] = text.charCodeAt(k);
    this.#at = at;
  }

  /** Any well-formed text, as UTF-8 (at most 3 bytes per UTF-16 unit). */
  text(text: string): void {
    const n = text.length;
    if (this.#at + 3 * n > this.#piece.byteLength) this.#next(3 * n);
    const piece = this.#piece;
    let at = this.#at;
    for (let k = 0; k < n; k++) {
      const c = text.charCodeAt(k);
      if (c >= 0x80) {
        this.#at = at + utf8Encoder.encodeInto(k === 0 ? text : text.slice(k), piece.subarray(at)).written;
        return;
      }
      piece[at++] = c;
    }
    this.#at = at;
  }

  /** A non-negative integer below 2^53, in decimal. */
  integer(value: number): void {
    if (this.#at + 16 > this.#piece.byteLength) this.#next(16);
    const piece = this.#piece;
    let digits = 1;
    for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++;
    let at = this.#at + digits;
    this.#at = at;
    let rest = value;
    do {
      piece[--at] = 0x30 + (rest % 10);
      rest = Math.floor(rest / 10);
    } while (rest > 0);
  }

  /** Ends the current piece and starts one with room for `n` bytes. */
  #next(n: number): void {
    this.#end();
    this.#piece = new Uint8Array(Math.max(Math.min(2 * this.#piece.byteLength, HEADER_PIECE), n));
  }

  #end(): void {
    if (this.#at > 0) this.#pieces.push(this.#piece.subarray(0, this.#at));
    this.#bytes += this.#at;
    this.#at = 0;
  }

  /** The text's length so far, padded to a multiple of 8. */
  paddedLength(): number {
    return Math.ceil((this.#bytes + this.#at) / 8) * 8;
  }

  /**
   * The 8-byte length, the text's pieces and its padding (to a multiple of 8, then `extra` more).
   * @throws StConvertError `HeaderTooLarge` past `maxHeaderSize`.
   */
  finish(maxHeaderSize: number, extra = 0): Uint8Array[] {
    this.#end();
    const headerLength = this.paddedLength() + extra;
    if (headerLength > maxHeaderSize) {
      throw new StConvertError("HeaderTooLarge", `header too large: ${headerLength} bytes, the limit is ${maxHeaderSize}`);
    }
    const length = new Uint8Array(8);
    new DataView(length.buffer).setBigUint64(0, BigInt(headerLength), true);
    return [length, ...this.#pieces.splice(0), new Uint8Array(headerLength - this.#bytes).fill(0x20)];
  }
}

/** JSON.stringify of a string matches serde_json's escaping except for lone surrogates, which UTF-8 cannot hold. */
function checkWellFormed(text: string, where: { tensor?: string }): void {
  if (hasLoneSurrogate(text)) {
    throw new StConvertError("InvalidName", `${quoteName(text)} holds a lone UTF-16 surrogate, which UTF-8 cannot encode`, where);
  }
}

/**
 * Streams tensors into a safetensors file: the header first, then each tensor's bytes, never the
 * whole file in memory. The bytes are identical to the reference writer's for the same tensors
 * (and metadata with at most one key; with more, ours are sorted, the reference's are random),
 * save for the header's padding where `matchSourcePages` asks for more. The caller closes or
 * aborts the sink.
 * @throws StConvertError as {@link layoutSafetensors}, and `ByteLengthMismatch` when a tensor
 *   delivers another byte count than it declared.
 */
export async function writeSafetensors(source: TensorSource, sink: ByteSink, options: SafetensorsWriteOptions = {}): Promise<void> {
  await writePlan(planFor(source, options), sink, options.chunkSize);
}

/** The padding of {@link SafetensorsWriteOptions.matchSourcePages}: each copied tensor votes, by its bytes, for the one that places it. */
function sourceAlignedPadding(order: readonly TensorEntry[], starts: Float64Array, dataStart: number): number {
  const votes = new Map<number, number>();
  for (let k = 0; k < order.length; k++) {
    const tensor = order[k]!;
    if (tensor.byteLength < KERNEL_COPY_FROM) continue;
    const extent = tensor.extent?.();
    if (extent === undefined) continue;
    const shift = (((extent.offset - dataStart - starts[k]!) % SOURCE_ALIGNMENT) + SOURCE_ALIGNMENT) % SOURCE_ALIGNMENT;
    // The header stays a multiple of 8 bytes long, as the reference's is.
    if (shift % 8 === 0) votes.set(shift, (votes.get(shift) ?? 0) + tensor.byteLength);
  }
  let best = 0;
  let most = 0;
  for (const [shift, bytes] of votes) {
    if (bytes > most || (bytes === most && shift < best)) {
      best = shift;
      most = bytes;
    }
  }
  return most >= SOURCE_ALIGNED_FROM ? best : 0;
}

/**
 * Serializes tensors into one in-memory safetensors file, like the reference's `save()`.
 * For large outputs, stream with {@link writeSafetensors} into a file sink instead.
 */
export async function serializeSafetensors(source: TensorSource, options: SafetensorsWriteOptions = {}): Promise<Uint8Array> {
  const plan = planFor(source, options);
  // The plan gives the size, so the file is written straight into its final array.
  const out = new Uint8Array(plan.fileSize);
  await writePlan(plan, arraySink(out), options.chunkSize);
  return out;
}

function planFor(source: TensorSource, options: SafetensorsWriteOptions): SafetensorsPlan<TensorEntry> {
  const padding = options.matchSourcePages === true ? sourceAlignedPadding : undefined;
  return planSafetensors(source.tensors, source.metadata, options.maxHeaderSize ?? MAX_HEADER_SIZE, padding);
}

async function writePlan(plan: SafetensorsPlan<TensorEntry>, sink: ByteSink, chunkSize: number | undefined): Promise<void> {
  // Each piece is let go once written.
  const { header } = plan;
  while (header.length > 0) await sink.write(header.shift()!);
  for (const tensor of plan.order) await pipeTensor(tensor, sink, chunkSize);
}

/** The safetensors format, as registered with the `st-convert` command. */
export const safetensorsFormat: TensorFormat = {
  name: "safetensors",
  description: "Hugging Face safetensors (strict reader, byte-exact writer)",
  extensions: [".safetensors"],
  sniff(head) {
    if (head.byteLength < 9) return false;
    const n = new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true);
    const first = head[8];
    return n >= 2n && n <= BigInt(MAX_HEADER_SIZE) && (first === 0x7b || first === 0x20 || first === 0x09 || first === 0x0a || first === 0x0d);
  },
  open: (source) => readSafetensors(source),
  write: (tensors, sink, context) => writeSafetensors(tensors, sink, { matchSourcePages: context.freeLayout === true }),
};
