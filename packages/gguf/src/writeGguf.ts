/**
 * Writes GGUF files: byte for byte what gguf-py's `GGUFWriter` writes for the same key/value pairs
 * and tensors in the same order (version 3, little-endian; `general.architecture` first when the
 * metadata does not place it; every tensor's data padded to the alignment, the last one too).
 * F32, F16, BF16, F64 and the integer types are written as they are; tensors kept as quantized
 * blocks (`--keep-quantized`, or a GGUF read for a GGUF output) go back as their blocks untouched;
 * `quantize` rules make blocks of floating tensors (quantize.ts).
 *
 * Spec: gguf-py 0.19.0 `gguf_writer.py` (`write_header_to_file`, `write_kv_data_to_file`,
 * `write_ti_data_to_file`, `write_tensors_to_file`, `_pack_val`), ggml's `src/gguf.cpp`.
 */
import { type ByteSink, type Dtype, type KernelPool, StConvertError, type TensorEntry, type TensorSource, WRITTEN, pipeTensor } from "@st-convert/core";
import { metadataToKvs, readRecord } from "./ggufMetadata.js";
import { MAX_DIMS, MAX_NAME_BYTES, TYPE_OF_DTYPE, VALUE_TYPE_ID, VALUE_TYPE_SIZE, type ValueTypeName } from "./ggufTypes.js";
import { type GgufKv, type GgufValue, pad } from "./parseGguf.js";
import { type QuantizePlan, planQuantization, quantizedChunks } from "./quantize.js";
import { ggmlTypeInfo } from "./quants/ggmlTypes.js";
import { keptBlockType } from "./readGguf.js";

export interface GgufWriteOptions {
  /** `TYPE` or `NAME_REGEX:TYPE` rules, as `--quantize` gives them. */
  readonly quantize?: readonly string[];
  readonly onWarning?: (message: string) => void;
  /** Threads to quantize large tensors on (the CLI's); without it, everything runs on the calling thread. */
  readonly kernelPool?: KernelPool;
  /** Told each quantized tensor's name and the bytes of its blocks, once the file is planned (`FormatContext.onStored`). */
  readonly onStored?: (tensor: string, bytes: number) => void;
}

/** `general.architecture` when neither the metadata nor `--metadata` gives one, and the input was no GGUF. */
export const DEFAULT_ARCHITECTURE = "unknown";

/** GGUF's version this writer writes, as gguf-py does. */
const VERSION = 3;

/** What the writer makes of one tensor. */
export interface PlannedTensor {
  readonly entry: TensorEntry;
  /** ggml's `ne` (numpy's shape reversed). */
  readonly ne: readonly number[];
  readonly type: number;
  /** Bytes of its data, before padding. */
  readonly byteLength: number;
  /** When it is quantized on the way. */
  readonly quantize?: QuantizePlan;
}

/** The whole plan of a GGUF file: its pairs, its tensors, its alignment. */
export interface GgufPlan {
  readonly kvs: readonly GgufKv[];
  readonly tensors: readonly PlannedTensor[];
  readonly alignment: number;
}

/**
 * Plans the file for `source`: its key/value pairs from the metadata, each tensor's ggml type.
 * @throws StConvertError `InvalidMetadata`, `Unsupported` (a dtype GGUF has no type for, naming the
 *   tensor and the `--cast` that helps), `InvalidName`, `InvalidArgument`.
 */
export function planGguf(source: TensorSource, options: GgufWriteOptions = {}): GgufPlan {
  const record = readRecord(source.metadata);
  const kvs = metadataToKvs(source.metadata, record);
  // A GGUF's own keys (its record says it was one) are written as they were, with or without one.
  if (record === undefined && !kvs.some((kv) => kv.key === "general.architecture")) {
    kvs.unshift({ key: "general.architecture", type: "STRING", value: DEFAULT_ARCHITECTURE });
  }
  let alignment = 32;
  const alignmentKv = kvs.find((kv) => kv.key === "general.alignment");
  if (alignmentKv !== undefined) {
    const value = alignmentKv.value;
    if (alignmentKv.type !== "UINT32" || typeof value !== "number" || value === 0 || (value & (value - 1)) !== 0) {
      throw new StConvertError(
        "InvalidMetadata",
        `general.alignment must be a UINT32 power of two, as gguf.general.alignment={"type":"UINT32","value":64} gives it; got ${alignmentKv.type} ${JSON.stringify(value)}`,
      );
    }
    alignment = value;
  }
  const recorded = new Map(Object.entries(record?.types ?? {}));
  const blocksOf = (entry: TensorEntry) => {
    if (entry.dtype !== "U8") return undefined;
    const id = keptBlockType(entry.extent?.());
    return id === undefined ? recorded.get(entry.name) : ggmlTypeInfo(id)?.name;
  };
  const quantize = planQuantization(source.tensors, options.quantize ?? [], options.onWarning, blocksOf);
  for (const [name, plan] of quantize) options.onStored?.(name, plan.byteLength);
  const tensors = inRecordedOrder(source.tensors, record?.tensors ?? []).map((entry) => planTensor(entry, recorded, quantize.get(entry.name)));
  return { kvs, tensors, alignment };
}

const encoder = new TextEncoder();

/** The tensors the record lists in its order (the GGUF's, which a sorting format lost), then the others in theirs. */
function inRecordedOrder(tensors: readonly TensorEntry[], order: readonly string[]): readonly TensorEntry[] {
  if (order.length === 0) return tensors;
  const rank = new Map(order.map((name, i) => [name, i]));
  const listed = tensors.filter((t) => rank.has(t.name)).sort((a, b) => rank.get(a.name)! - rank.get(b.name)!);
  return [...listed, ...tensors.filter((t) => !rank.has(t.name))];
}

function planTensor(entry: TensorEntry, recorded: ReadonlyMap<string, string>, quantize: QuantizePlan | undefined): PlannedTensor {
  const { name } = entry;
  const nameBytes = encoder.encode(name).byteLength;
  if (nameBytes >= MAX_NAME_BYTES) {
    throw new StConvertError("InvalidName", `name of ${nameBytes} bytes; ggml reads names of at most ${MAX_NAME_BYTES - 1} (shorten it with --rename)`, {
      tensor: name,
    });
  }
  if (entry.shape.length > MAX_DIMS) {
    throw new StConvertError("Unsupported", `${entry.shape.length} dimensions; GGUF tensors have at most ${MAX_DIMS}`, { tensor: name });
  }
  const ne = [...entry.shape].reverse();
  if (quantize !== undefined) return { entry, ne, type: quantize.type, byteLength: quantize.byteLength, quantize };
  const plain = TYPE_OF_DTYPE.get(entry.dtype);
  if (plain !== undefined) return { entry, ne, type: plain, byteLength: entry.byteLength };
  if (entry.dtype === "U8") {
    const kept = keptBlockType(entry.extent?.()) ?? typeByName(recorded.get(name), name);
    if (kept !== undefined) return keptBlocks(entry, kept);
  }
  throw new StConvertError("Unsupported", `GGUF has no type for ${entry.dtype}; ${castHint(entry.dtype)}`, { tensor: name });
}

/** The ggml type id called `name`, for a recorded type. */
function typeByName(name: string | undefined, tensor: string): number | undefined {
  if (name === undefined) return undefined;
  for (let id = 0; id < 64; id++) if (ggmlTypeInfo(id)?.name === name) return id;
  throw new StConvertError("InvalidMetadata", `the recorded ggml type ${JSON.stringify(name)} is not one ggml knows`, { tensor });
}

/** A U8 tensor `[...outer, bytes per row]` holding blocks of ggml type `type`. */
function keptBlocks(entry: TensorEntry, type: number): PlannedTensor {
  const info = ggmlTypeInfo(type)!;
  const rowBytes = entry.shape[entry.shape.length - 1];
  if (rowBytes === undefined || rowBytes % info.typeSize !== 0) {
    throw new StConvertError("InvalidArgument", `kept ${info.name} blocks, but its last dimension (${rowBytes}) is not whole ${info.typeSize}-byte blocks`, {
      tensor: entry.name,
    });
  }
  const ne = [(rowBytes / info.typeSize) * info.blockSize, ...entry.shape.slice(0, -1).reverse()];
  return { entry, ne, type, byteLength: entry.byteLength };
}

/** The cast that would make a dtype writable. */
function castHint(dtype: Dtype): string {
  switch (dtype) {
    case "BOOL":
    case "U8":
      return `cast it first, e.g. --cast ${dtype}=I16 (or F32)`;
    case "U16":
      return "cast it first, e.g. --cast U16=I32";
    case "U32":
      return "cast it first, e.g. --cast U32=I64";
    case "U64":
      return "cast it first, e.g. --cast U64=I64 (if its values fit) or F64";
    case "C64":
      return "no cast keeps complex values";
    default:
      return `cast it first, e.g. --cast ${dtype}=F32 (or F16, BF16)`;
  }
}

/** A growing little-endian buffer for the header. */
class HeaderBytes {
  #bytes = new Uint8Array(64 * 1024);
  #view = new DataView(this.#bytes.buffer);
  length = 0;

  /**
   * Makes room for `n` more bytes and returns the view to write them through, at `length` (which
   * the caller then moves on). Taken before the write: a view read before the buffer grew would be
   * the old one.
   */
  #room(n: number): DataView {
    if (this.length + n > this.#bytes.byteLength) {
      const grown = new Uint8Array(Math.max(this.#bytes.byteLength * 2, this.length + n));
      grown.set(this.#bytes.subarray(0, this.length));
      this.#bytes = grown;
      this.#view = new DataView(grown.buffer);
    }
    return this.#view;
  }
  u32(v: number): void {
    this.#room(4).setUint32(this.length, v, true);
    this.length += 4;
  }
  u64(v: number | bigint): void {
    this.#room(8).setBigUint64(this.length, BigInt(v), true);
    this.length += 8;
  }
  raw(bytes: Uint8Array): void {
    this.#room(bytes.byteLength);
    this.#bytes.set(bytes, this.length);
    this.length += bytes.byteLength;
  }
  string(value: string | { hex: string }): void {
    const bytes = typeof value === "string" ? encoder.encode(value) : fromHex(value.hex);
    this.u64(bytes.byteLength);
    this.raw(bytes);
  }
  /** One scalar of `type` in the metadata encoding's form (checked by ggufMetadata.ts). */
  scalar(type: ValueTypeName, value: unknown): void {
    if (type === "STRING") {
      this.string(value as string | { hex: string });
      return;
    }
    const size = VALUE_TYPE_SIZE[VALUE_TYPE_ID[type]]!;
    const view = this.#room(size);
    const at = this.length;
    switch (type) {
      case "UINT8":
        view.setUint8(at, value as number);
        break;
      case "BOOL":
        view.setUint8(at, value === true ? 1 : 0);
        break;
      case "INT8":
        view.setInt8(at, value as number);
        break;
      case "UINT16":
        view.setUint16(at, value as number, true);
        break;
      case "INT16":
        view.setInt16(at, value as number, true);
        break;
      case "UINT32":
        view.setUint32(at, value as number, true);
        break;
      case "INT32":
        view.setInt32(at, value as number, true);
        break;
      case "UINT64":
        view.setBigUint64(at, BigInt(value as string), true);
        break;
      case "INT64":
        view.setBigInt64(at, BigInt(value as string), true);
        break;
      case "FLOAT32":
        if (typeof value === "string") view.setUint32(at, Number.parseInt(value.slice(2), 16), true);
        else view.setFloat32(at, value as number, true);
        break;
      case "FLOAT64":
        if (typeof value === "string") view.setBigUint64(at, BigInt(value), true);
        else view.setFloat64(at, value as number, true);
        break;
      default:
        throw new Error(`scalar: ${type}`);
    }
    this.length += size;
  }
  /** A value with its type id first, as `_pack_val(add_vtype=True)` writes it. */
  value(value: GgufValue): void {
    this.u32(VALUE_TYPE_ID[value.type]);
    if (value.type === "ARRAY") this.array(value.itemType!, value.value as unknown[]);
    else this.scalar(value.type, value.value);
  }
  array(itemType: ValueTypeName, items: readonly unknown[]): void {
    this.u32(VALUE_TYPE_ID[itemType]);
    this.u64(items.length);
    for (const item of items) {
      if (itemType === "ARRAY") {
        const inner = item as { itemType: ValueTypeName; value: unknown[] };
        this.array(inner.itemType, inner.value);
      } else {
        this.scalar(itemType, item);
      }
    }
  }
  bytes(): Uint8Array {
    return this.#bytes.subarray(0, this.length);
  }
}

function fromHex(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.byteLength; i++) out[i] = Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** The header (through the padding before the data) of a planned file. */
export function serializeHeader(plan: GgufPlan): Uint8Array {
  const out = new HeaderBytes();
  out.raw(encoder.encode("GGUF"));
  out.u32(VERSION);
  out.u64(plan.tensors.length);
  out.u64(plan.kvs.length);
  for (const kv of plan.kvs) {
    out.string(kv.key);
    out.value(kv);
  }
  let offset = 0;
  for (const t of plan.tensors) {
    out.string(t.entry.name);
    out.u32(t.ne.length);
    for (const n of t.ne) out.u64(n);
    out.u32(t.type);
    out.u64(offset);
    offset += pad(t.byteLength, plan.alignment);
  }
  const padding = pad(out.length, plan.alignment) - out.length;
  out.raw(new Uint8Array(padding));
  return out.bytes();
}

/** Zeros, shared by every padding (at most an alignment's worth; alignments are small). */
let zeros = new Uint8Array(256);

function padding(n: number): Uint8Array {
  if (n > zeros.byteLength) zeros = new Uint8Array(n);
  return zeros.subarray(0, n);
}

/**
 * Writes `source` to `sink` as one GGUF file.
 * @throws StConvertError as {@link planGguf}, and what the reader or the sink throw, naming the tensor.
 */
export async function writeGguf(source: TensorSource, sink: ByteSink, options: GgufWriteOptions = {}): Promise<void> {
  await writePlan(planGguf(source, options), sink, options.kernelPool);
}

/** Writes a planned file: its header, then each tensor's data padded to the alignment (quantized on `pool`'s threads, when given). */
export async function writePlan(plan: GgufPlan, sink: ByteSink, pool?: KernelPool): Promise<void> {
  await sink.write(serializeHeader(plan));
  for (const t of plan.tensors) {
    if (t.quantize !== undefined) {
      for await (const chunk of quantizedChunks(t.entry, t.quantize, pool)) {
        const written = sink.write(chunk);
        if (written !== WRITTEN) await written;
      }
    } else {
      await pipeTensor(t.entry, sink);
    }
    const rest = pad(t.byteLength, plan.alignment) - t.byteLength;
    if (rest > 0) await sink.write(padding(rest));
  }
}

/** `NAME-0000k-of-0000N.gguf`, as GGUFWriter names the files of a split set. */
export function splitName(weightsName: string, k: number, n: number): string {
  const stem = weightsName.replace(/\.gguf$/i, "");
  return `${stem}-${String(k).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.gguf`;
}

/**
 * The files of a split set of at most `maxShardSize` tensor bytes each, as gguf-py's
 * `GGUFWriter(split_max_size=…)` makes it: tensors in order, a new file when the open one holds a
 * tensor and the next would take its bytes (padding not counted) past the limit; every file a GGUF
 * of its own with `split.no` (UINT16), `split.count` (UINT16) and `split.tensors.count` (INT32)
 * after its keys, the first holding the model's keys, the others only those three. One file, named
 * `weightsName` and without split keys, when nothing needs splitting.
 */
export function planSplitSet(
  source: TensorSource,
  maxShardSize: number,
  weightsName: string,
  options: GgufWriteOptions = {},
): { name: string; tensors: TensorEntry[]; write(sink: ByteSink): Promise<void> }[] {
  const plan = planGguf(source, options);
  const groups: PlannedTensor[][] = [[]];
  let size = 0;
  for (const t of plan.tensors) {
    const open = groups[groups.length - 1]!;
    if (open.length > 0 && size + t.byteLength > maxShardSize) {
      groups.push([]);
      size = 0;
    }
    groups[groups.length - 1]!.push(t);
    size += t.byteLength;
  }
  const file = (name: string, part: GgufPlan) => ({
    name,
    tensors: part.tensors.map((t) => t.entry),
    write: (sink: ByteSink) => writePlan(part, sink, options.kernelPool),
  });
  if (groups.length === 1) return [file(weightsName, plan)];
  const n = groups.length;
  const total = plan.tensors.length;
  return groups.map((tensors, k) => {
    const split: GgufKv[] = [
      { key: "split.no", type: "UINT16", value: k },
      { key: "split.count", type: "UINT16", value: n },
      { key: "split.tensors.count", type: "INT32", value: total },
    ];
    const kvs = [...(k === 0 ? plan.kvs.filter((kv) => !split.some((s) => s.key === kv.key)) : []), ...split];
    return file(splitName(weightsName, k + 1, n), { kvs, tensors, alignment: plan.alignment });
  });
}
