/**
 * PyTorch checkpoints written for `torch.load`: a zip laid out as torch 2.13's `torch.save` lays
 * it out (records in its order, every member stored and its data on a 64-byte boundary through an
 * `FB` padding field, data descriptors, ZIP64 end records), holding a protocol-2 pickle of a
 * `dict[str, Tensor]` that `torch.load(weights_only=True)` accepts, and `mmap=True` too.
 *
 * Spec: torch 2.13 `torch/serialization.py` (`_save`: records `data.pkl`, `.format_version`,
 * `.storage_alignment`, `byteorder`, `data/<key>`, `version`, `.data/serialization_id`),
 * `torch/_tensor.py` (`_reduce_ex_internal`: `_rebuild_tensor_v2` with a typed storage, v3 with an
 * `UntypedStorage` and the dtype for the dtypes of `torch.storage._new_dtypes()`), PKWARE APPNOTE
 * 6.3 (§4.3.7, §4.3.9, §4.3.12, §4.3.14–16, §4.5.3), and the bytes of torch's own files
 * (docs/pytorch.md §1.1).
 */
import {
  type ByteSink,
  DEFAULT_CHUNK_SIZE,
  KERNEL_COPY_FROM,
  type Dtype,
  StConvertError,
  type TensorEntry,
  type TensorSource,
  checkedByteLength,
  exactChunks,
  pipeTensor,
  hasLoneSurrogate,
  quoteName,
  withContext,
} from "@st-convert/core";
import { type Codec, crcCounted, loadCodec } from "@st-convert/npy";
import { METADATA_ENTRY } from "./torchSymbols.js";

/** Options of {@link writeTorch}. */
export interface TorchWriteOptions {
  /** Receives non-fatal notices (metadata that has no place in a checkpoint). */
  onWarning?: (message: string) => void;
  /** The folder every record sits in, as torch names it after the file's stem. Default `"archive"` (torch's name when saving to a buffer). */
  rootFolder?: string;
  /** Bytes pulled from a tensor at a time. Default 2 MiB. */
  chunkSize?: number;
  /** `"fflate"` forces the portable CRC-32 (browsers); default `node:zlib` when present. */
  codec?: "auto" | "fflate";
  /**
   * Sizes and offsets from which the ZIP64 fields are used (default 0xFFFFFFFF, where the 32-bit
   * fields overflow). Tests lower it to check the ZIP64 layout on small files.
   */
  zip64Threshold?: number;
  /**
   * What the pickle holds: the dict of the tensors (default), the one tensor itself
   * (`torch.save(tensor)`, a distributed checkpoint's chunk), or a str (one of its other items).
   */
  object?: { kind: "dict" } | { kind: "tensor" } | { kind: "str"; text: string };
}

/** How torch pickles a tensor of each safetensors dtype: a typed storage class (v2), or v3's dtype over an `UntypedStorage`. */
const TORCH_STORAGE: Readonly<Partial<Record<Dtype, { storage: string } | { dtype: string }>>> = {
  F64: { storage: "DoubleStorage" },
  F32: { storage: "FloatStorage" },
  F16: { storage: "HalfStorage" },
  BF16: { storage: "BFloat16Storage" },
  I64: { storage: "LongStorage" },
  I32: { storage: "IntStorage" },
  I16: { storage: "ShortStorage" },
  I8: { storage: "CharStorage" },
  U8: { storage: "ByteStorage" },
  BOOL: { storage: "BoolStorage" },
  C64: { storage: "ComplexFloatStorage" },
  F8_E4M3: { dtype: "float8_e4m3fn" },
  F8_E5M2: { dtype: "float8_e5m2" },
  F8_E4M3FNUZ: { dtype: "float8_e4m3fnuz" },
  F8_E5M2FNUZ: { dtype: "float8_e5m2fnuz" },
  F8_E8M0: { dtype: "float8_e8m0fnu" },
  U16: { dtype: "uint16" },
  U32: { dtype: "uint32" },
  U64: { dtype: "uint64" },
};

/** Python's pickler batches SETITEMS by this many items. */
const BATCH = 1000;
/** torch's `.storage_alignment`: every record's data starts on a multiple of it (mmap needs it). */
const ALIGNMENT = 64;

// ----- the pickle -----

/** A protocol-2 pickle written opcode by opcode (also the distributed checkpoint writer's). */
export class PickleBuilder {
  #parts: Uint8Array[] = [];
  #length = 0;
  #memo = new Map<string, number>();
  #next = 0;
  readonly #encoder = new TextEncoder();

  bytes(...values: number[]): void {
    this.#push(Uint8Array.from(values));
  }

  #push(bytes: Uint8Array): void {
    this.#parts.push(bytes);
    this.#length += bytes.byteLength;
  }

  #u32(n: number): Uint8Array {
    const out = new Uint8Array(4);
    new DataView(out.buffer).setUint32(0, n, true);
    return out;
  }

  int(value: number | bigint): void {
    if (typeof value === "bigint" && value > BigInt(Number.MAX_SAFE_INTEGER)) {
      this.long(value);
      return;
    }
    const n = Number(value);
    if (n < 0x100) this.bytes(0x4b, n);
    else if (n < 0x10000) this.bytes(0x4d, n & 0xff, n >> 8);
    else if (n < 2 ** 31) {
      this.bytes(0x4a);
      this.#push(this.#u32(n));
    } else this.long(BigInt(n));
  }

  /** LONG1: the shortest two's-complement little-endian bytes of a non-negative int. */
  long(value: bigint): void {
    const digits: number[] = [];
    for (let v = value; v > 0n; v >>= 8n) digits.push(Number(v & 0xffn));
    if ((digits[digits.length - 1]! & 0x80) !== 0) digits.push(0);
    this.bytes(0x8a, digits.length, ...digits);
  }

  string(s: string): void {
    const utf8 = this.#encoder.encode(s);
    this.bytes(0x58);
    this.#push(this.#u32(utf8.byteLength));
    this.#push(utf8);
  }

  /** A str or symbol, memoized the first time and fetched from the memo after, as Python's pickler does. */
  memoized(key: string, emit: () => void): void {
    const index = this.#memo.get(key);
    if (index !== undefined) {
      this.get(index);
      return;
    }
    emit();
    this.#memo.set(key, this.put());
  }

  global(module: string, name: string): void {
    this.memoized(`global ${module} ${name}`, () => {
      this.bytes(0x63);
      this.#push(this.#encoder.encode(`${module}\n${name}\n`));
    });
  }

  put(): number {
    const index = this.#next++;
    if (index < 0x100) this.bytes(0x71, index);
    else {
      this.bytes(0x72);
      this.#push(this.#u32(index));
    }
    return index;
  }

  get(index: number): void {
    if (index < 0x100) this.bytes(0x68, index);
    else {
      this.bytes(0x6a);
      this.#push(this.#u32(index));
    }
  }

  intTuple(values: readonly (number | bigint)[]): void {
    if (values.length === 0) {
      this.bytes(0x29);
      return;
    }
    if (values.length > 3) this.bytes(0x28);
    for (const v of values) this.int(v);
    this.bytes(values.length === 1 ? 0x85 : values.length === 2 ? 0x86 : values.length === 3 ? 0x87 : 0x74);
  }

  finish(): Uint8Array {
    const out = new Uint8Array(this.#length);
    let at = 0;
    for (const part of this.#parts) {
      out.set(part, at);
      at += part.byteLength;
    }
    return out;
  }
}

/** C-contiguous strides as torch computes them (a dimension of size 0 counts as 1), exact. */
function contiguousStrides(shape: readonly number[]): bigint[] {
  const strides = new Array<bigint>(shape.length);
  let step = 1n;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = step;
    step *= BigInt(Math.max(shape[i]!, 1));
  }
  return strides;
}

/** torch's sizes and strides are `int64_t`. */
const INT64_MAX = 2n ** 63n - 1n;

/** Largest rank written: the reader's `MAX_RANK` (numpy's `NPY_MAXDIMS`), so that every file written reads back. */
const MAX_WRITE_RANK = 64;

/**
 * What torch.load would refuse in a tensor's shape, checked before the first byte: more than
 * {@link MAX_WRITE_RANK} dimensions, sizes whose left-to-right product passes 2^63 − 1 (torch's
 * "numel: integer multiplication overflow", [2^32, 2^32, 0]), or a C-order stride past it
 * ([0, 2^32, 2^32]: torch.save could not have written it either).
 */
function checkShape(t: TensorEntry): void {
  const refuse = (rule: string): never => {
    throw new StConvertError("Unsupported", rule, { tensor: t.name });
  };
  if (t.shape.length > MAX_WRITE_RANK) refuse(`${t.shape.length} dimensions, more than the ${MAX_WRITE_RANK} a checkpoint is read with (MAX_RANK)`);
  let numel = 1n;
  for (const d of t.shape) {
    numel *= BigInt(d);
    if (numel > INT64_MAX) refuse(`the shape [${t.shape.join(", ")}] multiplies past 2^63 - 1 from the left, which torch.load refuses (numel overflow)`);
  }
  const strides = contiguousStrides(t.shape);
  if (strides.length > 0 && strides[0]! * BigInt(Math.max(t.shape[0]!, 1)) > INT64_MAX) {
    refuse(`the shape [${t.shape.join(", ")}] has C-order strides past 2^63 - 1, which torch cannot hold`);
  }
}

/**
 * A BOOL tensor's bytes must be 0 or 1: torch reads any other byte as True and gives 0x01 back, so
 * the checkpoint would mean other bytes than the ones written. Refused (by name, before the first
 * byte) rather than changed, since a conversion never alters bytes unasked.
 */
async function checkBoolBytes(t: TensorEntry): Promise<void> {
  let index = 0;
  for await (const chunk of t.chunks({ reuse: true })) {
    for (let i = 0; i < chunk.byteLength; i++) {
      if (chunk[i]! > 1) {
        throw new StConvertError(
          "Unsupported",
          `element ${index + i} is the byte ${chunk[i]}, not a BOOL (0 or 1): torch would read it as True (0x01), so it cannot be written as it is`,
          { tensor: t.name },
        );
      }
    }
    index += chunk.byteLength;
  }
}

interface Planned {
  readonly name: string;
  /** The tensor whose storage it is; for an alias, the kept tensor's. */
  readonly tensor: TensorEntry;
  readonly key: string;
  readonly alias: boolean;
}

/**
 * The pickle of the state dict: `{name: _rebuild_tensor_v2/v3(storage, 0, size, stride, False, OrderedDict())}`.
 * With metadata to keep, the state dict is an OrderedDict whose `_metadata` attribute (where
 * `nn.Module.state_dict()` puts per-module versions, and `load_state_dict` looks them up by module
 * prefix) is `OrderedDict({"__metadata__": {key: value, …}})`: the bytes `torch.save` writes for it.
 */
function statePickle(planned: readonly Planned[], bare = false, kept: readonly [string, string][] = []): Uint8Array {
  const p = new PickleBuilder();
  p.bytes(0x80, 2);
  if (bare) {
    // torch.save(tensor): the rebuild call alone.
    tensorCall(p, planned[0]!);
    p.bytes(0x2e);
    return p.finish();
  }
  // A lone tensor named state_dict would be taken for a training checkpoint's wrapper and unwrapped
  // by readers (st-convert's, safetensors' convert.py): one level deeper, it reads back as itself.
  const wrapped = planned.length === 1 && planned[0]!.name === "state_dict";
  if (wrapped) {
    p.bytes(0x7d);
    p.put();
    p.string("state_dict");
    p.put();
  }
  if (kept.length > 0) orderedDict(p);
  else p.bytes(0x7d);
  p.put();
  const memoOf = new Map<string, number>();
  setItems(p, planned, (t) => {
    p.string(t.name);
    p.put();
    const already = memoOf.get(t.key);
    if (already !== undefined) {
      // An alias: the same tensor object again, as torch.save pickles tied weights.
      p.get(already);
    } else memoOf.set(t.key, tensorCall(p, t));
  });
  if (kept.length > 0) {
    // BUILD's state: {"_metadata": OrderedDict({"__metadata__": {key: value, …}})}.
    p.bytes(0x7d);
    p.put();
    p.string("_metadata");
    p.put();
    orderedDict(p);
    p.put();
    p.string(METADATA_ENTRY);
    p.put();
    p.bytes(0x7d);
    p.put();
    setItems(p, kept, ([key, value]) => {
      p.string(key);
      p.put();
      p.string(value);
      p.put();
    });
    p.bytes(0x73, 0x73, 0x62); // SETITEM into _metadata, SETITEM into the state, BUILD
  }
  if (wrapped) p.bytes(0x73);
  p.bytes(0x2e);
  return p.finish();
}

/** `collections.OrderedDict()`: the class (memoized), called with no arguments. */
function orderedDict(p: PickleBuilder): void {
  p.global("collections", "OrderedDict");
  p.bytes(0x29, 0x52); // EMPTY_TUPLE, REDUCE
}

/** A dict's items as Python's pickler adds them: in batches of {@link BATCH}, SETITEM for a batch of one. */
function setItems<T>(p: PickleBuilder, items: readonly T[], emit: (item: T) => void): void {
  for (let start = 0; start < items.length; start += BATCH) {
    const batch = items.slice(start, start + BATCH);
    if (batch.length > 1) p.bytes(0x28); // MARK
    for (const item of batch) emit(item);
    p.bytes(batch.length > 1 ? 0x75 : 0x73); // SETITEMS, or SETITEM for a batch of one
  }
}

/** A tensor's rebuild call, `_rebuild_tensor_v2/v3(storage, 0, size, stride, False, OrderedDict())`; returns its memo index. */
function tensorCall(p: PickleBuilder, t: Planned): number {
  const how = TORCH_STORAGE[t.tensor.dtype]!;
  const v3 = "dtype" in how;
  p.global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
  p.bytes(0x28, 0x28);
  p.memoized("str storage", () => p.string("storage"));
  if (v3) p.global("torch.storage", "UntypedStorage");
  else p.global("torch", how.storage);
  p.memoized(`str ${t.key}`, () => p.string(t.key));
  p.memoized("str cpu", () => p.string("cpu"));
  const elements = t.tensor.shape.reduce((n, d) => n * d, 1);
  p.int(v3 ? t.tensor.byteLength : elements);
  p.bytes(0x74, 0x51); // TUPLE, BINPERSID
  p.int(0);
  p.intTuple(t.tensor.shape);
  p.intTuple(contiguousStrides(t.tensor.shape));
  p.bytes(0x89);
  orderedDict(p);
  p.put();
  if (v3) p.global("torch", how.dtype);
  p.bytes(0x74, 0x52); // TUPLE, REDUCE
  return p.put();
}

/** `torch.save(text)`'s pickle: the str, memoized as Python's pickler does. */
function strPickle(text: string): Uint8Array {
  const p = new PickleBuilder();
  p.bytes(0x80, 2);
  p.string(text);
  p.put();
  p.bytes(0x2e);
  return p.finish();
}

// ----- the zip -----

const SIG_LOCAL = 0x04034b50;
const SIG_CENTRAL = 0x02014b50;
const SIG_DESCRIPTOR = 0x08074b50;
const SIG_END = 0x06054b50;
const SIG_END64 = 0x06064b50;
const SIG_LOCATOR64 = 0x07064b50;
/** General-purpose flags of every torch record: sizes in a data descriptor (bit 3), UTF-8 names (bit 11). */
const FLAGS = 0x0808;
const U32_MAX = 0xffffffff;

interface Written {
  readonly name: Uint8Array;
  readonly crc32: number;
  readonly size: number;
  readonly offset: number;
}

class TorchZipWriter {
  readonly #sink: ByteSink;
  readonly #codec: Codec;
  readonly #zip64: number;
  readonly #entries: Written[] = [];
  readonly #encoder = new TextEncoder();
  #offset = 0;

  constructor(sink: ByteSink, codec: Codec, zip64Threshold: number) {
    this.#sink = sink;
    this.#codec = codec;
    this.#zip64 = zip64Threshold;
  }

  async #put(bytes: Uint8Array): Promise<void> {
    await this.#sink.write(bytes);
    this.#offset += bytes.byteLength;
  }

  /** A stored record: local header (version 0, CRC and sizes 0) padded to the alignment, its data, a data descriptor. Returns its CRC-32. */
  async add(name: string, data: AsyncIterable<Uint8Array>): Promise<number> {
    const offset = this.#offset;
    const nameBytes = await this.#localHeader(name);
    let crc = 0;
    let size = 0;
    for await (const chunk of data) {
      const writing = this.#put(chunk);
      crc = this.#codec.crc32(chunk, crc);
      size += chunk.byteLength;
      await writing;
    }
    return this.#descriptor(nameBytes, offset, crc, size);
  }

  /** Puts a record's local header (version 0, CRC and sizes 0), padded so that its data starts on the alignment; returns the encoded name. */
  async #localHeader(name: string): Promise<Uint8Array> {
    const nameBytes = this.#encoder.encode(name);
    const offset = this.#offset;
    const unpadded = offset + 30 + nameBytes.byteLength + 4;
    const padding = (ALIGNMENT - (unpadded % ALIGNMENT)) % ALIGNMENT;
    const header = new Uint8Array(30 + nameBytes.byteLength + 4 + padding);
    const v = new DataView(header.buffer);
    v.setUint32(0, SIG_LOCAL, true);
    v.setUint16(6, FLAGS, true);
    v.setUint16(26, nameBytes.byteLength, true);
    v.setUint16(28, 4 + padding, true);
    header.set(nameBytes, 30);
    v.setUint16(30 + nameBytes.byteLength, 0x4246, true); // "FB", torch's padding field
    v.setUint16(32 + nameBytes.byteLength, padding, true);
    header.fill(0x5a, 34 + nameBytes.byteLength); // "Z"
    await this.#put(header);
    return nameBytes;
  }

  /** Puts a record's data descriptor and enters the record for the central directory; returns `crc`. */
  async #descriptor(nameBytes: Uint8Array, offset: number, crc: number, size: number): Promise<number> {
    const zip64 = size >= this.#zip64;
    const descriptor = new Uint8Array(zip64 ? 24 : 16);
    const dv = new DataView(descriptor.buffer);
    dv.setUint32(0, SIG_DESCRIPTOR, true);
    dv.setUint32(4, crc, true);
    if (zip64) {
      dv.setBigUint64(8, BigInt(size), true);
      dv.setBigUint64(16, BigInt(size), true);
    } else {
      dv.setUint32(8, size, true);
      dv.setUint32(12, size, true);
    }
    await this.#put(descriptor);
    this.#entries.push({ name: nameBytes, crc32: crc, size, offset });
    return crc;
  }

  /**
   * A tensor's record as {@link TorchZipWriter.add} writes it, the tensor piped straight to the
   * sink (`pipeTensor`: copied in the kernel where the sink can copy from its extent, the CRC-32
   * then taken by a read of its own alongside). Returns its CRC-32.
   */
  async addTensor(name: string, tensor: TensorEntry, chunkSize: number): Promise<number> {
    const offset = this.#offset;
    const nameBytes = await this.#localHeader(name);
    const counted = crcCounted(tensor, this.#codec);
    await pipeTensor(counted.entry, this.#sink, chunkSize);
    this.#offset += tensor.byteLength;
    return this.#descriptor(nameBytes, offset, counted.crc(), tensor.byteLength);
  }

  /** The central directory, then the ZIP64 end record and locator (torch writes them always), then the end record. */
  async finish(): Promise<void> {
    const directoryOffset = this.#offset;
    for (const e of this.#entries) {
      const extra: bigint[] = [];
      const big = e.size >= this.#zip64;
      if (big) extra.push(BigInt(e.size), BigInt(e.size));
      if (e.offset >= this.#zip64) extra.push(BigInt(e.offset));
      const out = new Uint8Array(46 + e.name.byteLength + (extra.length > 0 ? 4 + 8 * extra.length : 0));
      const v = new DataView(out.buffer);
      v.setUint32(0, SIG_CENTRAL, true);
      v.setUint16(6, extra.length > 0 ? 45 : 0, true);
      v.setUint16(8, FLAGS, true);
      v.setUint32(16, e.crc32, true);
      v.setUint32(20, big ? U32_MAX : e.size, true);
      v.setUint32(24, big ? U32_MAX : e.size, true);
      v.setUint16(28, e.name.byteLength, true);
      v.setUint16(30, extra.length > 0 ? 4 + 8 * extra.length : 0, true);
      v.setUint32(42, e.offset >= this.#zip64 ? U32_MAX : e.offset, true);
      out.set(e.name, 46);
      if (extra.length > 0) {
        const at = 46 + e.name.byteLength;
        v.setUint16(at, 1, true);
        v.setUint16(at + 2, 8 * extra.length, true);
        extra.forEach((value, i) => v.setBigUint64(at + 4 + 8 * i, value, true));
      }
      await this.#put(out);
    }
    const directorySize = this.#offset - directoryOffset;
    const end64Offset = this.#offset;
    const count = this.#entries.length;
    const tail = new Uint8Array(56 + 20 + 22);
    const v = new DataView(tail.buffer);
    v.setUint32(0, SIG_END64, true);
    v.setBigUint64(4, 44n, true);
    v.setUint16(12, 0x031e, true); // made by: Unix, 3.0 (what torch's writer records)
    v.setUint16(14, 45, true);
    v.setBigUint64(24, BigInt(count), true);
    v.setBigUint64(32, BigInt(count), true);
    v.setBigUint64(40, BigInt(directorySize), true);
    v.setBigUint64(48, BigInt(directoryOffset), true);
    v.setUint32(56, SIG_LOCATOR64, true);
    v.setBigUint64(64, BigInt(end64Offset), true);
    v.setUint32(72, 1, true);
    v.setUint32(76, SIG_END, true);
    v.setUint16(84, Math.min(count, 0xffff), true);
    v.setUint16(86, Math.min(count, 0xffff), true);
    v.setUint32(88, Math.min(directorySize, U32_MAX), true);
    v.setUint32(92, directoryOffset >= this.#zip64 ? U32_MAX : directoryOffset, true);
    await this.#put(tail);
  }
}

/** 40 decimal digits, as torch's serialization id has, derived from the records' CRCs so that the output is reproducible. */
function serializationId(crcs: readonly number[]): string {
  let h = 0xcbf29ce484222325n;
  for (const crc of crcs) h = ((h ^ BigInt(crc)) * 0x100000001b3n) & 0xffffffffffffffffn;
  let digits = "";
  while (digits.length < 40) {
    h = (h * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    digits += String((h >> 33n) % 10n);
  }
  return digits;
}

async function* once(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  yield bytes;
}

/**
 * Writes tensors as a PyTorch checkpoint to a sink: the pickle first, then each tensor's bytes
 * streamed into its own record (`data/0`, `data/1`, …, in the source's order), CRC-32 computed
 * on the way. Names recorded as aliases in the source's metadata (`{removed: kept}` with
 * `"format": "pt"`, as the reader and safetensors' `convert.py` write them) become names of the
 * kept tensor again, sharing its storage as tied weights do. The caller closes or aborts the sink.
 * @throws StConvertError `Unsupported` for F4/F6 (torch has no such dtype), `InvalidName`,
 *   `DuplicateKey`, `ByteLengthMismatch` (a tensor that delivers other bytes than it declares).
 */
export async function writeTorch(source: TensorSource, sink: ByteSink, options: TorchWriteOptions = {}): Promise<void> {
  const seen = new Set<string>();
  for (const t of source.tensors) {
    checkedByteLength(t);
    if (TORCH_STORAGE[t.dtype] === undefined) {
      throw new StConvertError("Unsupported", `${t.dtype} has no torch dtype (torch packs no 4- or 6-bit floats this way)`, { tensor: t.name });
    }
    checkShape(t);
    if (hasLoneSurrogate(t.name))
      throw new StConvertError("InvalidName", "the name holds a lone UTF-16 surrogate, which a pickle cannot encode", { tensor: t.name });
    if (seen.has(t.name)) throw new StConvertError("DuplicateKey", "two tensors have this name", { tensor: t.name });
    seen.add(t.name);
  }
  for (const t of source.tensors) if (t.dtype === "BOOL") await checkBoolBytes(t);
  const planned: Planned[] = [];
  const keyOf = new Map<string, string>();
  source.tensors.forEach((tensor, i) => {
    planned.push({ name: tensor.name, tensor, key: String(i), alias: false });
    keyOf.set(tensor.name, String(i));
  });
  const dropped: string[] = [];
  /** Entries that are not aliases: kept in the state dict's `_metadata` (see {@link statePickle}). */
  const kept: [string, string][] = [];
  const metadata = source.metadata ?? {};
  const aliasing = metadata.format === "pt";
  for (const [key, value] of Object.entries(metadata)) {
    if (key === "format" && value === "pt") continue;
    if (hasLoneSurrogate(key) || hasLoneSurrogate(value)) {
      dropped.push(key);
      continue;
    }
    const tied = aliasing ? keyOf.get(value) : undefined;
    if (tied === undefined || seen.has(key)) {
      kept.push([key, value]);
      continue;
    }
    seen.add(key);
    planned.push({ name: key, tensor: source.tensors[Number(tied)]!, key: tied, alias: true });
  }
  if (dropped.length > 0) {
    options.onWarning?.(`metadata dropped (a lone UTF-16 surrogate, which a pickle cannot encode): ${dropped.map((k) => quoteName(k)).join(", ")}`);
  }

  const codec = await loadCodec(options.codec === "fflate" ? "fflate" : undefined);
  const root = options.rootFolder !== undefined && /^[A-Za-z0-9_-][A-Za-z0-9_.-]*$/.test(options.rootFolder) ? options.rootFolder : "archive";
  const zip = new TorchZipWriter(sink, codec, options.zip64Threshold ?? U32_MAX);
  const encoder = new TextEncoder();
  const crcs: number[] = [];
  const record = async (name: string, bytes: Uint8Array | AsyncIterable<Uint8Array>) => {
    crcs.push(await zip.add(`${root}/${name}`, bytes instanceof Uint8Array ? once(bytes) : bytes));
  };
  const object = options.object ?? { kind: "dict" };
  if (object.kind === "tensor" && planned.length !== 1)
    throw new StConvertError("InvalidArgument", "a lone tensor is saved, but the source holds another count");
  if (object.kind === "str") planned.length = 0;
  await record("data.pkl", object.kind === "str" ? strPickle(object.text) : statePickle(planned, object.kind === "tensor", kept));
  await record(".format_version", encoder.encode("1"));
  await record(".storage_alignment", encoder.encode(String(ALIGNMENT)));
  await record("byteorder", encoder.encode("little"));
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  for (const t of planned) {
    if (t.alias) continue;
    try {
      const name = `${root}/data/${t.key}`;
      // A tensor whose bytes lie as they are in a file is piped whole, copied in the kernel where the sink can.
      if (t.tensor.byteLength >= KERNEL_COPY_FROM && sink.copyFrom !== undefined && t.tensor.extent !== undefined) {
        crcs.push(await zip.addTensor(name, t.tensor, chunkSize));
      } else await record(`data/${t.key}`, exactChunks(t.tensor, { chunkSize, reuse: true }));
    } catch (error) {
      throw withContext(error, { tensor: t.name });
    }
  }
  await record("version", encoder.encode("3\n"));
  await record(".data/serialization_id", encoder.encode(serializationId(crcs)));
  await zip.finish();
}
