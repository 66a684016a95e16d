/**
 * The raw-tensor JSON form: a streaming reader and writer, lossless both ways.
 *
 * ```
 * {
 *   "__metadata__": {"format": "pt"},
 *   "w": {"dtype": "F32", "shape": [2, 2], "data": [1.5, -0.0, "NaN", "-Infinity"]},
 *   "emb": {"dtype": "BF16", "shape": [3], "data_base64": "…"}
 * }
 * ```
 *
 * It mirrors a safetensors header with `data` (values) or `data_base64` (the raw little-endian
 * bytes) in place of `data_offsets`. The package README states the form in full; `schema.json`
 * is its JSON Schema.
 */
import {
  type ByteInput,
  type ByteSink,
  type ByteSource,
  type ChunkOptions,
  DEFAULT_CHUNK_SIZE,
  type Dtype,
  type Metadata,
  MemorySink,
  StConvertError,
  type TensorEntry,
  type TensorSource,
  NameIndex,
  checkMetadata,
  checkShapeOverflow,
  checkedByteLength,
  readTensorBytes,
  exactChunks,
  quoteName,
  checkRange,
  toByteSource,
  withContext,
  LITTLE_ENDIAN,
  hasLoneSurrogate,
  swapBytesInPlace,
  kernels,
} from "@st-convert/core";
import { BASE64_VALUE, decodeBase64Into, encodeBase64Into } from "./base64.js";
import { BAD_LEAF, ByteWindow, NEED_MORE, leafEnd, leafToken } from "./ByteWindow.js";
import { type ScanOptions, type ScannedTensor, hex4, leafPath, pathName, scanTensorJson } from "./scanTensorJson.js";
import {
  type FormatCursor,
  Leaf,
  type ValueCodec,
  ValueError,
  fillFloat32Gaps,
  formatFloat32s,
  formattedUpTo,
  storeFloat32Run,
  storedUpTo,
  valueCodec,
} from "./valueCodecs.js";

// ---- reading -------------------------------------------------------------------------------

/** Options of {@link readTensorJson}. */
export interface TensorJsonReadOptions extends ScanOptions {}

/** One tensor of a JSON document; its bytes are decoded from the text when `chunks()` is iterated. */
export interface TensorJsonEntry extends TensorEntry {
  /** Whether the document carries the tensor as values (`data`) or as raw bytes (`data_base64`). */
  readonly encoding: "values" | "base64";
}

/** A scanned JSON document whose tensors have not been decoded yet. */
export interface TensorJsonFile extends TensorSource {
  readonly format: "json";
  /** Tensors in document order. */
  readonly tensors: readonly TensorJsonEntry[];
  /**
   * The tensor called `name`.
   * @throws StConvertError `TensorNotFound`.
   */
  tensor(name: string): TensorJsonEntry;
}

/**
 * Reads a JSON tensor document: one streaming scan validates all of it (syntax, duplicate keys,
 * dtypes, shapes, value counts and nesting, the kinds of values each dtype takes, base64 lengths)
 * and records where each tensor's data lies. Tensor bytes are produced later by `chunks()`, which
 * re-reads just that range and encodes the values block by block; a value beyond its dtype's
 * range (300 for U8, 1e5 for F16) is reported there, naming its path (`w.data[17]`).
 *
 * @throws StConvertError with a `JsonErrorCode` (`InvalidJson`, `InvalidTensor`, `DuplicateKey`,
 *   `UnknownDtype`, `InvalidMetadata`, `ShapeMismatch`, `InvalidValue`, `ValueOutOfRange`,
 *   `InvalidBase64`, `ByteLengthMismatch`, `Unsupported`, `LimitExceeded`).
 */
export async function readTensorJson(input: ByteInput, options: TensorJsonReadOptions = {}): Promise<TensorJsonFile> {
  const source = toByteSource(input);
  // Small tensors share reads, in document order or not (a safetensors writer takes them sorted).
  const text = { source: blockCacheSource(source), windowSize: options.windowSize ?? DEFAULT_CHUNK_SIZE };
  // Each entry made as it is scanned: the scan's record of it is not kept.
  const document = await scanTensorJson(
    source,
    options,
    (name, dtype, shape, byteLength, encoding, start, end, dims, escaped) =>
      new JsonTensor(text, name, dtype, shape, byteLength, encoding, start, end, dims, escaped),
  );
  const { tensors } = document;
  let byName: Map<string, JsonTensor> | undefined;
  return {
    format: "json",
    metadata: document.metadata,
    tensors,
    tensor(name: string): TensorJsonEntry {
      byName ??= new Map(tensors.map((t) => [t.name, t]));
      const found = byName.get(name);
      if (found === undefined) throw new StConvertError("TensorNotFound", "tensor not found", { file: source.name, tensor: name });
      return found;
    },
  };
}

/** Bytes of each block a {@link blockCacheSource} reads and keeps. */
const CACHE_BLOCK = 1 << 20;
/** Blocks it keeps at most (the least recently used goes first): 8 MiB. */
const CACHE_BLOCKS = 8;
/** Small reads made as asked before blocks are used: a tensor or two read alone cost no more than their text. */
const DIRECT_READS = 16;

/**
 * The source, with reads of at most a block served from the aligned 1 MiB blocks that hold them,
 * the last {@link CACHE_BLOCKS} kept. Tensors are pulled in document order (core's
 * `readAheadSource` covers that) but also sorted by name, as a safetensors writer takes them:
 * `layers.1`, `layers.10`, `layers.100`… hop between a few regions of the file, and a read-ahead
 * window that restarts at each hop cost 6,500 reads for 50,000 tensors where this costs 6.
 * The first {@link DIRECT_READS} reads go to the source as they are.
 */
function blockCacheSource(source: ByteSource): ByteSource {
  const blocks = new Map<number, Promise<Uint8Array>>();
  let direct = 0;
  // The block of the last read, which most reads hit again: no reordering of the map for them.
  let lastIndex = -1;
  let last: Promise<Uint8Array> | undefined;
  const block = (index: number): Promise<Uint8Array> => {
    if (index === lastIndex && last !== undefined) return last;
    let bytes = blocks.get(index);
    if (bytes !== undefined) {
      blocks.delete(index);
    } else {
      const start = index * CACHE_BLOCK;
      bytes = source.read(start, Math.min(CACHE_BLOCK, source.size - start));
      // A failed read is not kept: the next one tries again.
      bytes.catch(() => {
        blocks.delete(index);
        if (lastIndex === index) last = undefined;
      });
      if (blocks.size >= CACHE_BLOCKS) blocks.delete(blocks.keys().next().value!);
    }
    blocks.set(index, bytes);
    lastIndex = index;
    last = bytes;
    return bytes;
  };
  const cached: ByteSource = {
    size: source.size,
    name: source.name,
    read(offset: number, length: number): Promise<Uint8Array> {
      checkRange(cached, offset, length);
      const index = Math.floor(offset / CACHE_BLOCK);
      if (direct < DIRECT_READS || length === 0 || Math.floor((offset + length - 1) / CACHE_BLOCK) !== index) {
        direct++;
        return source.read(offset, length);
      }
      const at = offset - index * CACHE_BLOCK;
      return block(index).then((bytes) => bytes.subarray(at, at + length));
    },
  };
  // A big tensor's windows are read into the window's own memory, past the blocks: a fresh array
  // per 2 MiB window cost its zeroing, its page faults and a copy joining it to the bytes kept.
  if (source.readInto !== undefined) cached.readInto = (offset, target) => source.readInto!(offset, target);
  if (source.readIntoSync !== undefined) cached.readIntoSync = (offset, target) => source.readIntoSync!(offset, target);
  return cached;
}

/** Where a document's tensors are read from for `chunks()`. */
interface DocumentText {
  readonly source: ByteSource;
  readonly windowSize: number;
}

/**
 * One tensor of a document: what the scan learnt of it, and `chunks()`. A class rather than an
 * object with a closure per tensor, for documents of 500,000 of them; wrap it rather than copy
 * it with `{ ...tensor }`, which keeps no `chunks()`.
 */
class JsonTensor implements TensorJsonEntry, ScannedTensor {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly byteLength: number;
  readonly encoding: "values" | "base64";
  readonly start: number;
  readonly end: number;
  readonly dims: readonly number[];
  readonly escaped: boolean;

  constructor(
    private readonly text: DocumentText,
    name: string,
    dtype: Dtype,
    shape: readonly number[],
    byteLength: number,
    encoding: "values" | "base64",
    start: number,
    end: number,
    dims: readonly number[],
    escaped: boolean,
  ) {
    this.name = name;
    this.dtype = dtype;
    this.shape = shape;
    this.byteLength = byteLength;
    this.encoding = encoding;
    this.start = start;
    this.end = end;
    this.dims = dims;
    this.escaped = escaped;
  }

  chunks({ chunkSize = DEFAULT_CHUNK_SIZE }: ChunkOptions = {}): AsyncIterable<Uint8Array> {
    const { source, windowSize } = this.text;
    return this.encoding === "base64"
      ? base64Chunks(source, this, chunkSize, windowSize)
      : valueChunks(source, this, valueCodec(this.dtype)!, chunkSize, windowSize);
  }
}

function changed(source: ByteSource, t: ScannedTensor, what: string): StConvertError {
  return new StConvertError("InvalidJson", `${pathName(t.name)}: ${what} (did the file change since it was opened?)`, { file: source.name, tensor: t.name });
}

/**
 * Tensors of at most this many bytes whose `data` text is at most {@link SMALL_TEXT} bytes are
 * parsed whole into a block kept for the purpose, then copied out: no generator and no typed
 * views made per tensor.
 */
const SMALL_VALUES = 64 * 1024;
/** Longest `data` text read at once for a small tensor (whitespace inside data is not bounded). */
const SMALL_TEXT = 1024 * 1024;
/** The block small tensors are parsed into; aligned for every element size. */
const scratch = new Uint8Array(SMALL_VALUES);

/** A tensor's bytes from its `data` value (see {@link readTensorJson}). */
function valueChunks(source: ByteSource, t: ScannedTensor, codec: ValueCodec, chunkSize: number, windowSize: number): AsyncIterable<Uint8Array> {
  if (t.byteLength <= Math.min(chunkSize, SMALL_VALUES) && t.end - t.start <= SMALL_TEXT) return new SmallValueChunks(source, t, codec);
  return windowedValueChunks(source, t, codec, chunkSize, windowSize);
}

const DONE: IteratorResult<Uint8Array> = Object.freeze({ done: true, value: undefined });

/** The chunk of a small tensor: its text read at once, its values parsed into {@link scratch}. */
class SmallValueChunks implements AsyncIterableIterator<Uint8Array> {
  #done = false;

  constructor(
    private readonly source: ByteSource,
    private readonly t: ScannedTensor,
    private readonly codec: ValueCodec,
  ) {}

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<Uint8Array>> {
    if (this.#done) return Promise.resolve(DONE);
    this.#done = true;
    const { source, t } = this;
    return source.read(t.start, t.end - t.start).then((text) => this.#parse(text));
  }

  return(): Promise<IteratorResult<Uint8Array>> {
    this.#done = true;
    return Promise.resolve(DONE);
  }

  #parse(text: Uint8Array): IteratorResult<Uint8Array> {
    const { source, t, codec } = this;
    // Synchronous from here to the copy: no other tensor can use the block meanwhile.
    const w = ByteWindow.holding(source, t.start, text);
    const endLeaf = (t.byteLength / codec.elementBytes) * codec.leavesPerElement;
    const leaf = storeLeaves(source, t, codec, scratch, 0, 0, endLeaf, w);
    if (leaf !== endLeaf) throw changed(source, t, `the data ended after ${leaf} of ${endLeaf} values`);
    checkRest(source, t, w.buf, w.i);
    if (t.byteLength === 0) return DONE;
    const block = scratch.slice(0, t.byteLength);
    if (!LITTLE_ENDIAN) swapBytesInPlace(block, t.dtype === "C64" ? 4 : codec.elementBytes);
    return { done: false, value: block };
  }
}

/**
 * Stores the leaves `leaf` up to `endLeaf` from the bytes at hand in `w` into `block`, whose
 * element 0 is element `first` of the tensor; stops early at a token cut by the window's end.
 * Returns the next leaf; `w.i` is where it stopped.
 */
function storeLeaves(
  source: ByteSource,
  t: ScannedTensor,
  codec: ValueCodec,
  block: Uint8Array,
  first: number,
  leaf: number,
  endLeaf: number,
  w: ByteWindow,
): number {
  const { leavesPerElement } = codec;
  const buf = w.buf;
  const n = buf.length;
  const final = w.drained;
  let i = w.i;
  // F32 and C64: plain numbers parsed as their end is found, the rest the general way below.
  const floats = codec.dtype === "F32" || codec.dtype === "C64" ? floatSlots(block) : undefined;
  try {
    while (i < n && leaf < endLeaf) {
      if (floats !== undefined) {
        i = storeFloat32Run(buf, i, final, floats, first * leavesPerElement, leaf, endLeaf);
        leaf = storedUpTo;
        if (i >= n || leaf >= endLeaf) break;
      }
      const c = buf[i]!;
      if (c === 0x2c || c === 0x20 || c === 0x5b || c === 0x5d || c === 0x0a || c === 0x0d || c === 0x09) {
        i++;
        continue;
      }
      let end: number;
      let kind: number;
      if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
        // A number: the scan checked its syntax, so finding its end is enough here (the
        // parser checks again as it reads the digits, in case the file changed).
        let float = false;
        for (end = i + 1; end < n; end++) {
          const d = buf[end]!;
          if (d === 0x2c || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break;
          if (d === 0x2e || d === 0x65 || d === 0x45) float = true;
        }
        if (end === n && !final) break;
        kind = float ? Leaf.Float : Leaf.Integer;
      } else {
        end = leafEnd(buf, i, final);
        if (end === NEED_MORE) break;
        if (end === BAD_LEAF) throw changed(source, t, `not a value at byte ${w.base + i}`);
        kind = leafToken.kind;
      }
      const element = Math.floor(leaf / leavesPerElement);
      codec.store(block, element - first, leaf - element * leavesPerElement, kind, buf, i, end);
      leaf++;
      i = end;
    }
  } catch (error) {
    if (error instanceof ValueError) {
      throw new StConvertError(error.code, `${leafPath(pathName(t.name), t.dims, leaf)}: ${error.rule}`, { file: source.name, tensor: t.name });
    }
    throw error;
  }
  w.i = i;
  return leaf;
}

let lastBlock: Uint8Array | undefined;
let lastFloats: Float32Array | undefined;

/** A float32 view of a block (aligned: fresh or the shared scratch), kept while the block is the same. */
function floatSlots(block: Uint8Array): Float32Array {
  if (block !== lastBlock) {
    lastFloats = new Float32Array(block.buffer, block.byteOffset, block.byteLength >>> 2);
    lastBlock = block;
  }
  return lastFloats!;
}

/** Only brackets, commas and whitespace may follow the values (the scan counted them). */
function checkRest(source: ByteSource, t: ScannedTensor, buf: Uint8Array, from: number): void {
  for (let i = from; i < buf.length; i++) {
    const c = buf[i]!;
    if (!(c === 0x5d || c === 0x5b || c === 0x2c || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09)) {
      throw changed(source, t, "more values than the scan counted");
    }
  }
}

/**
 * A tensor's bytes from its `data` value, in windows: re-tokenizes the range the scan recorded
 * and stores each value into a block of elements, yielding a block of at most `chunkSize` bytes
 * at a time.
 */
async function* windowedValueChunks(
  source: ByteSource,
  t: ScannedTensor,
  codec: ValueCodec,
  chunkSize: number,
  windowSize: number,
): AsyncGenerator<Uint8Array> {
  const { elementBytes, leavesPerElement } = codec;
  const elements = t.byteLength / elementBytes;
  const perBlock = Math.max(1, Math.floor(chunkSize / elementBytes));
  const w = new ByteWindow(source, t.start, t.end, windowSize, true);
  let leaf = 0;
  for (let first = 0; first < elements; first += perBlock) {
    const count = Math.min(perBlock, elements - first);
    const block = new Uint8Array(count * elementBytes);
    const endLeaf = (first + count) * leavesPerElement;
    while (leaf < endLeaf) {
      // Synchronous over the bytes at hand; stops at a token cut by the window's end.
      leaf = storeLeaves(source, t, codec, block, first, leaf, endLeaf, w);
      if (leaf < endLeaf && !(await w.more())) {
        if (w.i >= w.buf.length) throw changed(source, t, `the data ended after ${leaf} of ${elements * leavesPerElement} values`);
      }
    }
    if (leaf !== endLeaf) throw changed(source, t, "value count");
    if (!LITTLE_ENDIAN) swapBytesInPlace(block, t.dtype === "C64" ? 4 : elementBytes);
    if (block.length <= chunkSize) yield block;
    // A chunk size below one element: the element's bytes in pieces.
    else for (let at = 0; at < block.length; at += chunkSize) yield block.subarray(at, Math.min(block.length, at + chunkSize));
  }
  for (;;) {
    checkRest(source, t, w.buf, w.i);
    w.i = w.buf.length;
    if (!(await w.more())) return;
  }
}

/** A tensor's bytes from its `data_base64` string, decoded in groups of 4 characters. */
async function* base64Chunks(source: ByteSource, t: ScannedTensor, chunkSize: number, windowSize: number): AsyncGenerator<Uint8Array> {
  // Characters per output chunk: whole groups of 4 that decode to at most chunkSize bytes.
  const groupChars = Math.max(4, Math.floor(chunkSize / 3) * 4);
  let produced = 0;
  const emit = function* (bytes: Uint8Array): Generator<Uint8Array> {
    produced += bytes.length;
    if (produced > t.byteLength) throw changed(source, t, "more bytes than the scan counted");
    for (let at = 0; at < bytes.length; at += chunkSize) yield bytes.subarray(at, Math.min(bytes.length, at + chunkSize));
  };
  const decode = (text: Uint8Array, length: number): Uint8Array => {
    const out = new Uint8Array((length / 4) * 3);
    const end = decodeBase64Into(text, 0, length, out, 0);
    if (end < 0) throw changed(source, t, "a character that is not base64");
    return out.subarray(0, end);
  };
  if (!t.escaped) {
    for (let at = t.start; at < t.end; at += groupChars) {
      const length = Math.min(groupChars, t.end - at);
      if (length % 4 !== 0) throw changed(source, t, "base64 length");
      yield* emit(decode(await source.read(at, length), length));
    }
  } else {
    // Escapes (`\/`, `\u0041`) are rare: unescape into a clean buffer, then decode it.
    const w = new ByteWindow(source, t.start, t.end, windowSize);
    const clean = new Uint8Array(groupChars);
    let m = 0;
    for (;;) {
      const buf = w.buf;
      let i = w.i;
      while (i < buf.length) {
        let c = buf[i]!;
        if (c === 0x5c) {
          const width = buf[i + 1] === 0x75 ? 6 : 2;
          if (i + width > buf.length) break;
          c = width === 2 ? buf[i + 1]! : hex4(buf, i + 2, i + 6);
          i += width;
        } else i++;
        if (c < 0 || c >= 128 || (BASE64_VALUE[c] === 255 && c !== 0x3d)) throw changed(source, t, "a character that is not base64");
        clean[m++] = c;
        if (m === groupChars) {
          yield* emit(decode(clean, m));
          m = 0;
        }
      }
      w.i = i;
      if (!(await w.more())) break;
    }
    if (m % 4 !== 0) throw changed(source, t, "base64 length");
    if (m > 0) yield* emit(decode(clean, m));
  }
  if (produced !== t.byteLength) throw changed(source, t, `${produced} bytes decoded, ${t.byteLength} expected`);
}

// ---- writing -------------------------------------------------------------------------------

/** Options of {@link writeTensorJson}. */
export interface TensorJsonWriteOptions {
  /**
   * Write every tensor as `data_base64` (its raw little-endian bytes): bit-exact whatever they
   * hold, a third larger than the bytes, and fast. Default false: values wherever they are lossless.
   */
  base64?: boolean;
  /** Bytes pulled from a tensor at a time. Default `DEFAULT_CHUNK_SIZE` (2 MiB). */
  chunkSize?: number;
  /** Receives notices, such as a tensor written as base64 because values could not carry its bytes. */
  onWarning?: (message: string) => void;
}

/**
 * Size of each of the two output buffers: the text is built in one while the other is written.
 * Large enough that per-write overhead vanishes, small enough to stay in cache.
 */
const OUTPUT_BUFFER_SIZE = 1 << 20;
/** Room kept free for one element's text (the longest is a C64 pair, under 64 bytes). */
const ELEMENT_ROOM = 64;

const utf8Encoder = new TextEncoder();

/** Double-buffered text output to a sink. */
class TextOut {
  buf = new Uint8Array(OUTPUT_BUFFER_SIZE);
  pos = 0;
  private spare = new Uint8Array(OUTPUT_BUFFER_SIZE);
  private pending: Promise<void> | undefined;

  constructor(private readonly sink: ByteSink) {}

  /** Where formatting must stop to leave room for one more element. */
  get limit(): number {
    return this.buf.length - ELEMENT_ROOM;
  }

  async flush(): Promise<void> {
    if (this.pos === 0) return;
    const full = this.buf.subarray(0, this.pos);
    if (this.pending !== undefined) await this.pending;
    this.pending = this.sink.write(full);
    // Marked handled now; a failure is reported by the next await of `pending`.
    this.pending.catch(() => {});
    [this.buf, this.spare] = [this.spare, this.buf];
    this.pos = 0;
  }

  async finish(): Promise<void> {
    await this.flush();
    if (this.pending !== undefined) await this.pending;
  }

  /**
   * Hands `bytes` to the sink after everything put before. Returns once they are queued, with
   * the promise of their write: the caller leaves them alone until it settles.
   */
  async enqueue(bytes: Uint8Array): Promise<{ written: Promise<void> }> {
    await this.flush();
    const before = this.pending;
    const written = before === undefined ? this.sink.write(bytes) : before.then(() => this.sink.write(bytes));
    // Marked handled now; a failure is reported by the next await of `pending`, or by the caller.
    written.catch(() => {});
    this.pending = written;
    return { written };
  }

  /**
   * Appends `text` as UTF-8: at once when it fits (returns undefined), else through
   * {@link text} (returns its promise). Saves a promise and an encoded copy per piece of a line.
   */
  put(text: string): Promise<void> | undefined {
    const n = text.length;
    const buf = this.buf;
    let pos = this.pos;
    // A UTF-16 unit takes at most 3 bytes of UTF-8.
    if (buf.length - pos < 3 * n) return this.text(text);
    let k = 0;
    for (; k < n; k++) {
      const c = text.charCodeAt(k);
      if (c >= 0x80) break;
      buf[pos++] = c;
    }
    if (k < n) pos += utf8Encoder.encodeInto(text.slice(k), buf.subarray(pos)).written;
    this.pos = pos;
    return undefined;
  }

  async text(text: string): Promise<void> {
    // Names and metadata: any length (a metadata value may be megabytes), UTF-8.
    const bytes = utf8Encoder.encode(text);
    for (let at = 0; at < bytes.length; ) {
      if (this.pos >= this.buf.length) await this.flush();
      const n = Math.min(bytes.length - at, this.buf.length - this.pos);
      this.buf.set(bytes.subarray(at, at + n), this.pos);
      this.pos += n;
      at += n;
    }
  }
}

/** A JSON string literal for a name or metadata text (serde's and `JSON.stringify`'s escaping). */
function jsonString(text: string, where: { tensor?: string }, what: string): string {
  if (hasLoneSurrogate(text)) {
    throw new StConvertError(
      what === "name" ? "InvalidName" : "InvalidMetadata",
      `${what} ${quoteName(text)} holds a lone UTF-16 surrogate, which JSON text in UTF-8 cannot carry`,
      where,
    );
  }
  return JSON.stringify(text);
}

/**
 * A tensor's bytes re-cut into blocks of whole `unit`-byte groups (a group split between chunks is
 * carried over and yielded on its own), then the 1 to `unit` − 1 bytes left over at the end, if
 * any. `exactChunks` holds the tensor to its byte length before that last piece is yielded.
 */
async function* wholeGroups(tensor: TensorEntry, unit: number, chunkSize: number): AsyncGenerator<Uint8Array> {
  const carry = new Uint8Array(unit);
  let carried = 0;
  for await (const chunk of exactChunks(tensor, { chunkSize })) {
    let at = 0;
    if (carried > 0) {
      at = Math.min(unit - carried, chunk.byteLength);
      carry.set(chunk.subarray(0, at), carried);
      carried += at;
      if (carried < unit) continue;
      yield carry.slice();
      carried = 0;
    }
    const whole = at + Math.floor((chunk.byteLength - at) / unit) * unit;
    if (whole > at) yield chunk.subarray(at, whole);
    carry.set(chunk.subarray(whole), 0);
    carried = chunk.byteLength - whole;
  }
  if (carried > 0) yield carry.slice(0, carried);
}

/**
 * A tensor's bytes in blocks of whole elements, aligned for typed-array views and in the
 * platform's byte order.
 */
async function* elementBlocks(tensor: TensorEntry, elementBytes: number, chunkSize: number): AsyncGenerator<Uint8Array> {
  const align = Math.min(elementBytes, 8);
  const unit = tensor.dtype === "C64" ? 4 : elementBytes;
  for await (let block of wholeGroups(tensor, elementBytes, chunkSize)) {
    if (block.byteLength % elementBytes !== 0) {
      // A part of an element left over: a tensor whose declared byteLength is not a whole number of elements.
      throw new StConvertError("ByteLengthMismatch", `the reader delivered only ${tensor.byteLength} of the ${tensor.byteLength} bytes it declared`, {
        tensor: tensor.name,
      });
    }
    if (block.byteOffset % align !== 0 || !LITTLE_ENDIAN) {
      block = new Uint8Array(block); // a copy: Buffer#slice would be a view, keeping the misalignment
      if (!LITTLE_ENDIAN) swapBytesInPlace(block, unit);
    }
    yield block;
  }
}

/**
 * The tensor's element blocks if values can carry its exact bytes (every element reads back to
 * its bits from the text the writer would write), else undefined. Deciding reads the whole tensor
 * before any of its text is written; a tensor of at most `chunkSize` bytes is kept from that read,
 * a larger one is read again to be written.
 */
async function valueBlocks(tensor: TensorEntry, codec: ValueCodec, chunkSize: number): Promise<Iterable<Uint8Array> | AsyncIterable<Uint8Array> | undefined> {
  if (codec.alwaysLossless()) return elementBlocks(tensor, codec.elementBytes, chunkSize);
  const keep = tensor.byteLength <= chunkSize;
  const kept: Uint8Array[] = [];
  for await (const block of elementBlocks(tensor, codec.elementBytes, chunkSize)) {
    if (!codec.lossless(block)) return undefined;
    if (keep) kept.push(block);
  }
  return keep ? kept : elementBlocks(tensor, codec.elementBytes, chunkSize);
}

async function writeValues(blocks: Iterable<Uint8Array> | AsyncIterable<Uint8Array>, codec: ValueCodec, out: TextOut): Promise<void> {
  let first = true;
  const parallel = codec.dtype === "F32" && kernels.formatFloat32sAsync !== undefined ? new ParallelFloat32s() : undefined;
  for await (const block of blocks) {
    if (parallel !== undefined && block.byteLength >= 4 * PARALLEL_FROM) await parallel.write(block, first, out);
    else {
      const pending = writeBlock(block, codec, out, first);
      if (pending !== undefined) await pending;
    }
    first = false;
  }
}

/** F32 blocks of at least this many elements are formatted by {@link ParallelFloat32s}. */
const PARALLEL_FROM = 64 * 1024;
/** Elements of each half of a piece that {@link ParallelFloat32s} formats. */
const PARALLEL_HALF = 64 * 1024;
/** Most bytes of one F32 element's text with its separator (`, -1.17549435e-38` is 17): the gap the pool's half leaves for an element of the exact route. */
const F32_TEXT_MAX = 20;
/** Gaps the pool's half may leave; past them, the rest of the half is written here (one in about 3,000 random F32s takes the exact route). */
const PARALLEL_GAPS = 1024;
/** Bytes of one half's buffer: room for all its elements at their longest, plus {@link ELEMENT_ROOM}. */
const HALF_BUFFER = PARALLEL_HALF * F32_TEXT_MAX + ELEMENT_ROOM;
/** Where formatting into a half's buffer stops; a gap is as long as an element's longest text, so a half fits with any number of them. */
const HALF_LIMIT = HALF_BUFFER - ELEMENT_ROOM;

/**
 * F32 text made on both cores: each piece of 2 × {@link PARALLEL_HALF} elements is formatted in
 * two halves at once, the first on Node's thread pool (`kernels.formatFloat32sAsync`), the
 * second here, each into a buffer that holds it whole. The pool's kernel leaves a gap for each
 * element of the exact route, which is written here after it (and the gap closed), as is the
 * rest of its half if it ran out of gaps. Then both halves go to the sink in order, while the
 * next piece is formatted into the other pair of buffers. The same bytes as {@link writeBlock}
 * (the tests compare them).
 */
class ParallelFloat32s {
  private readonly pairs = [0, 1].map(() => ({
    halves: [new Uint8Array(HALF_BUFFER), new Uint8Array(HALF_BUFFER)] as const,
    state: new Float64Array(2),
    stops: new Float64Array(2 * PARALLEL_GAPS),
    written: undefined as Promise<void> | undefined,
  }));
  private turn = 0;

  async write(block: Uint8Array, first: boolean, out: TextOut): Promise<void> {
    const words = new Uint32Array(block.buffer, block.byteOffset, block.byteLength / 4);
    for (let at = 0; at < words.length; ) {
      const mid = Math.min(at + PARALLEL_HALF, words.length);
      const end = Math.min(mid + PARALLEL_HALF, words.length);
      const pair = this.pairs[this.turn]!;
      this.turn ^= 1;
      // Its buffers are free once the sink has written what they held.
      if (pair.written !== undefined) await pair.written;
      const [a, b] = pair.halves;
      const job = kernels.formatFloat32sAsync!(words, at, mid, a, 0, HALF_LIMIT, first, pair.state, pair.stops, F32_TEXT_MAX);
      let posA: number;
      let posB = 0;
      try {
        if (mid < end) posB = formatHalf(words, mid, end, b, 0, first);
      } finally {
        // Never left running on buffers this call gives up.
        posA = await job;
      }
      posA = fillFloat32Gaps(words, a, pair.stops, pair.state[1]!, posA, first, F32_TEXT_MAX);
      const stopped = pair.state[0]!;
      if (stopped < mid) posA = formatHalf(words, stopped, mid, a, posA, first);
      pair.written = (await out.enqueue(a.subarray(0, posA))).written;
      if (posB > 0) pair.written = (await out.enqueue(b.subarray(0, posB))).written;
      at = end;
    }
  }
}

/** F32 elements `index` up to `end` into a half's buffer, which holds them all. */
function formatHalf(words: Uint32Array, index: number, end: number, out: Uint8Array, pos: number, first: boolean): number {
  pos = formatFloat32s(words, index, end, out, pos, HALF_LIMIT, first);
  if (formattedUpTo !== end) throw new Error(`the F32 writer stopped at element ${formattedUpTo} of ${end} with room left`);
  return pos;
}

/** The values of one block: at once while they fit in the output buffer, else flushing as it fills. */
function writeBlock(block: Uint8Array, codec: ValueCodec, out: TextOut, first: boolean): Promise<void> | undefined {
  const count = block.byteLength / codec.elementBytes;
  const cursor: FormatCursor = { index: 0, pos: out.pos };
  codec.format(block, count, out.buf, out.limit, cursor, first);
  out.pos = cursor.pos;
  if (cursor.index >= count) return undefined;
  return (async () => {
    while (cursor.index < count) {
      await out.flush();
      cursor.pos = out.pos;
      codec.format(block, count, out.buf, out.limit, cursor, first);
      out.pos = cursor.pos;
    }
  })();
}

async function writeBase64(tensor: TensorEntry, out: TextOut, chunkSize: number): Promise<void> {
  // Whole groups of 3 bytes but in the last piece, whose 1–2 leftover bytes are padded.
  for await (const bytes of wholeGroups(tensor, 3, chunkSize)) {
    for (let at = 0; at < bytes.length; ) {
      const room = Math.floor((out.buf.length - out.pos) / 4) * 3;
      if (room === 0) {
        await out.flush();
        continue;
      }
      const n = Math.min(bytes.length - at, room);
      out.pos = encodeBase64Into(bytes, at, at + n, out.buf, out.pos);
      at += n;
    }
  }
}

/**
 * Streams tensors into a JSON document: never the whole text, nor a whole tensor, in memory.
 * Tensors appear in the source's order, one per line. Each is written as values (`data`) unless
 * values cannot carry its exact bytes (a NaN other than the dtype's canonical one, a BOOL byte
 * other than 0/1, or F4/F6, which have no values form); then, or with `base64`, as `data_base64`.
 * Deciding this reads a float or BOOL tensor once before writing it (a tensor of at most
 * `chunkSize` bytes is kept from that read, a larger one is read again). The caller closes or
 * aborts the sink.
 *
 * @throws StConvertError `DuplicateKey` (two tensors with one name), `InvalidName` (the name
 *   `__metadata__`, or a lone surrogate), `InvalidMetadata`, `ByteLengthMismatch` when a tensor
 *   delivers another byte count than it declared, and what the sink throws.
 */
export async function writeTensorJson(source: TensorSource, sink: ByteSink, options: TensorJsonWriteOptions = {}): Promise<void> {
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  checkMetadata(source.metadata);
  const names = new NameIndex();
  for (const t of source.tensors) {
    if (!names.add(t.name)) throw new StConvertError("DuplicateKey", "duplicate tensor name", { tensor: t.name });
    if (t.name === "__metadata__") throw new StConvertError("InvalidName", "the name `__metadata__` is reserved for the metadata", { tensor: t.name });
    checkedByteLength(t);
    checkShapeOverflow(t);
    jsonString(t.name, { tensor: t.name }, "name");
  }
  const metadata = source.metadata === null || source.metadata === undefined ? null : metadataLine(source.metadata);

  const out = new TextOut(sink);
  const count = source.tensors.length;
  await out.text(count === 0 && metadata === null ? "{" : "{\n");
  if (metadata !== null) await out.text(`${metadata}${count > 0 ? "," : ""}\n`);
  for (let index = 0; index < count; index++) {
    const tensor = source.tensors[index]!;
    // Checked above: no lone surrogate, so JSON.stringify is serde's escaping.
    const name = NEEDS_ESCAPE.test(tensor.name) ? JSON.stringify(tensor.name) : `"${tensor.name}"`;
    let pending = out.put(`  ${name}: {"dtype": "${tensor.dtype}", "shape": [${tensor.shape.join(", ")}], `);
    if (pending !== undefined) await pending;
    try {
      const codec = options.base64 === true ? undefined : valueCodec(tensor.dtype);
      if (tensor.byteLength <= Math.min(chunkSize, SMALL_TENSOR_SIZE)) await writeSmall(tensor, codec, out, options.onWarning);
      else {
        const blocks = codec === undefined ? undefined : await valueBlocks(tensor, codec, chunkSize);
        if (codec !== undefined && blocks === undefined) options.onWarning?.(base64Notice(tensor));
        if (blocks !== undefined) {
          await out.text('"data": [');
          await writeValues(blocks, codec!, out);
          await out.text("]}");
        } else {
          await out.text('"data_base64": "');
          await writeBase64(tensor, out, chunkSize);
          await out.text('"}');
        }
      }
    } catch (error) {
      throw withContext(error, { tensor: tensor.name });
    }
    pending = out.put(index + 1 < count ? ",\n" : "\n");
    if (pending !== undefined) await pending;
  }
  await out.text("}\n");
  await out.finish();
}

/**
 * Tensors up to this size are read once, whole, and written from memory: the lossless check and
 * the text then come from the same bytes, without a stack of async generators per tensor.
 */
const SMALL_TENSOR_SIZE = 64 * 1024;

/** What values would say is the caution, for a tensor written as base64 instead. */
function base64Notice(tensor: TensorEntry): string {
  const why = tensor.dtype === "BOOL" ? "bytes other than 0 and 1" : "NaNs other than the canonical one (payload or sign bits)";
  return `tensor ${quoteName(tensor.name)}: written as data_base64, since it holds ${why}, which values cannot carry`;
}

/** A small tensor's data: read once, then written as values when they carry its bytes, else as base64. */
async function writeSmall(tensor: TensorEntry, codec: ValueCodec | undefined, out: TextOut, onWarning: ((message: string) => void) | undefined): Promise<void> {
  // A fresh array at offset 0: aligned for typed-array views.
  const raw = await readTensorBytes(tensor);
  let block = raw;
  if (codec !== undefined && !LITTLE_ENDIAN) {
    block = raw.slice();
    swapBytesInPlace(block, tensor.dtype === "C64" ? 4 : codec.elementBytes);
  }
  if (codec !== undefined && (codec.alwaysLossless() || codec.lossless(block))) {
    let pending = out.put('"data": [');
    if (pending !== undefined) await pending;
    pending = writeBlock(block, codec, out, true);
    if (pending !== undefined) await pending;
    pending = out.put("]}");
    if (pending !== undefined) await pending;
    return;
  }
  if (codec !== undefined) onWarning?.(base64Notice(tensor));
  let pending = out.put('"data_base64": "');
  if (pending !== undefined) await pending;
  // At most 4/3 of 64 KiB: fits once the buffer is flushed.
  if (out.buf.length - out.pos < Math.ceil(raw.byteLength / 3) * 4) await out.flush();
  out.pos = encodeBase64Into(raw, 0, raw.byteLength, out.buf, out.pos);
  pending = out.put('"}');
  if (pending !== undefined) await pending;
}

/** What JSON.stringify escapes in a string (lone surrogates aside, refused before). */
const NEEDS_ESCAPE = /["\\\u0000-\u001f]/;

function metadataLine(metadata: Metadata): string {
  const entries = Object.keys(metadata).map((key) => `${jsonString(key, {}, "metadata key")}: ${jsonString(metadata[key]!, {}, "metadata value")}`);
  return `  "__metadata__": {${entries.join(", ")}}`;
}

/**
 * The JSON document of some tensors, in memory (for small outputs; stream large ones with
 * {@link writeTensorJson}).
 */
export async function serializeTensorJson(source: TensorSource, options: TensorJsonWriteOptions = {}): Promise<Uint8Array> {
  const sink = new MemorySink();
  await writeTensorJson(source, sink, options);
  await sink.close();
  return sink.bytes();
}
