/**
 * Reads GGUF files (v2 and v3, either byte order, split sets through their first file) as named
 * tensors: F32, F16, BF16, F64 and the integer types pass byte for byte; quantized tensors are
 * dequantized to F32 as their bytes are pulled, a piece of whole blocks at a time, or kept as their
 * blocks (`keepQuantized`). The key/value pairs go into the metadata as `gguf.KEY` entries
 * (ggufMetadata.ts). Nothing but the header is read before a tensor's bytes are asked for.
 *
 * Spec: ggml's `src/gguf.cpp` (`gguf_init_from_file`) and `docs/gguf.md`; gguf-py's
 * `GGUFReader` for big-endian files and the numpy shapes.
 */
import {
  type ByteInput,
  type ByteSource,
  type ChunkOptions,
  DEFAULT_CHUNK_SIZE,
  type Dtype,
  LITTLE_ENDIAN,
  type Metadata,
  StConvertError,
  type TensorEntry,
  type TensorExtent,
  type TensorSource,
  lazyModule,
  readRange,
  swapBytesInPlace,
  toByteSource,
  withContext,
} from "@st-convert/core";
import { kvsToMetadata } from "./ggufMetadata.js";
import { PLAIN_TYPES } from "./ggufTypes.js";
import { type GgufHeader, type GgufKv, type GgufTensorInfo, parseGguf } from "./parseGguf.js";
import { canDequantize, ggmlTypeInfo } from "./quants/ggmlTypes.js";

/** The block kernels, loaded for the first quantized tensor read (a GGUF of plain tensors needs none). */
const quants = lazyModule(() => import("./quants/index.js"));

export interface GgufReadOptions {
  /** Keep quantized tensors as their blocks: U8 `[...outer dims, bytes per row]`, as gguf-py's reader gives them. */
  readonly keepQuantized?: boolean;
  readonly onWarning?: (message: string) => void;
  /** Path or label of the file, for messages and for finding the rest of a split set. */
  readonly fileName?: string;
  /** Opens a file named relative to this one (the other files of a split set). */
  readonly openSibling?: (name: string) => Promise<ByteSource>;
}

/** A GGUF tensor as read: its entry, with the ggml type and the bytes it takes in the file. */
export interface GgufTensor extends TensorEntry {
  /** The ggml type name (`"Q4_K"`, `"F16"`). */
  readonly ggmlType: string;
  /** Bytes of the tensor's data in the file. */
  readonly storedBytes: number;
}

/** What {@link readGguf} returns. */
export interface GgufFile extends TensorSource {
  readonly tensors: readonly GgufTensor[];
  /** The header of the (first) file. */
  readonly header: GgufHeader;
  /** The files of a split set, first included; one name for a single file. */
  readonly files: readonly string[];
}

/** The keys that lay out a split set; they describe the files, not the model, and are left out of the metadata of a set read as one. */
export const SPLIT_KEYS = ["split.no", "split.count", "split.tensors.count"] as const;

/** `NAME-00001-of-00003.gguf`, as gguf-py and llama-gguf-split name the files of a set. */
const SPLIT_NAME = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/**
 * Blocks kept as U8 tensors, by source and offset: the GGUF writer finds a kept tensor's ggml type
 * here (through its extent, which renames and other wrappers pass on) when the metadata that
 * records it by name no longer matches (a renamed tensor).
 */
const keptBlocks = new WeakMap<ByteSource, Map<number, number>>();

/** The ggml type of the blocks an extent covers, when a reader of this package kept them. */
export function keptBlockType(extent: TensorExtent | undefined): number | undefined {
  if (extent === undefined) return undefined;
  return keptBlocks.get(extent.source)?.get(extent.offset);
}

/**
 * Opens a GGUF file (the first of a split set: the others are opened through `openSibling`).
 * @throws StConvertError with a `GgufErrorCode` naming the file, the tensor and the broken rule.
 */
export async function readGguf(input: ByteInput, options: GgufReadOptions = {}): Promise<GgufFile> {
  const source = toByteSource(input, options.fileName);
  const file = options.fileName ?? source.name;
  const header = await parseGguf(source, file);
  const count = intValue(header.kvs, "split.count");
  const parts: { source: ByteSource; header: GgufHeader; file: string | undefined }[] = [{ source, header, file }];
  if (count !== undefined && count > 1) parts.push(...(await openSplitSet(header, count, file, options)));
  else if (intValue(header.kvs, "split.no") !== undefined && intValue(header.kvs, "split.no") !== 0) {
    throw new StConvertError("InvalidSplit", `file ${intValue(header.kvs, "split.no")! + 1} of a split set; open the set through its first file`, { file });
  }
  const split = parts.length > 1;
  const keep = options.keepQuantized === true;
  const tensors: GgufTensor[] = [];
  const keptTypes = new Map<string, string>();
  const names = new Set<string>();
  for (const part of parts) {
    for (const info of part.header.tensors) {
      if (names.has(info.name)) throw new StConvertError("InvalidSplit", "tensor in two files of the split set", { file: part.file, tensor: info.name });
      names.add(info.name);
      const entry = tensorEntry(part.source, part.header, info, keep, part.file);
      if (entry.dtype === "U8" && !PLAIN_TYPES.has(info.type)) keptTypes.set(info.name, entry.ggmlType);
      tensors.push(entry);
    }
  }
  const kvs = split ? header.kvs.filter((kv) => !(SPLIT_KEYS as readonly string[]).includes(kv.key)) : header.kvs;
  const metadata: Metadata = kvsToMetadata(
    kvs,
    tensors.map((t) => t.name),
    keptTypes,
  );
  return { metadata, tensors, header, files: parts.map((p) => p.file ?? "<input>") };
}

function intValue(kvs: readonly GgufKv[], key: string): number | undefined {
  const kv = kvs.find((k) => k.key === key);
  return kv !== undefined && typeof kv.value === "number" ? kv.value : undefined;
}

/** The second and later files of a split set, checked against the first. */
async function openSplitSet(first: GgufHeader, count: number, file: string | undefined, options: GgufReadOptions) {
  const base = file?.slice(Math.max(file.lastIndexOf("/"), file.lastIndexOf("\\")) + 1);
  const match = base === undefined ? null : SPLIT_NAME.exec(base);
  if (match === null) {
    throw new StConvertError("InvalidSplit", `split.count is ${count}, but the file is not named NAME-00001-of-${pad5(count)}.gguf`, { file });
  }
  if (Number(match[2]) !== 1 || intValue(first.kvs, "split.no") !== 0) {
    throw new StConvertError("InvalidSplit", "a split set is read through its first file (NAME-00001-of-…)", { file });
  }
  if (Number(match[3]) !== count) throw new StConvertError("InvalidSplit", `the name says ${match[3]} files, split.count ${count}`, { file });
  if (options.openSibling === undefined)
    throw new StConvertError("InvalidSplit", `the other ${count - 1} files of the split set cannot be opened from here`, { file });
  const parts: { source: ByteSource; header: GgufHeader; file: string }[] = [];
  let total = first.tensors.length;
  for (let k = 2; k <= count; k++) {
    const name = `${match[1]}-${pad5(k)}-of-${pad5(count)}.gguf`;
    const source = await options.openSibling(name);
    const header = await parseGguf(source, name);
    if (intValue(header.kvs, "split.no") !== k - 1 || intValue(header.kvs, "split.count") !== count) {
      throw new StConvertError(
        "InvalidSplit",
        `split.no/split.count say ${intValue(header.kvs, "split.no")}/${intValue(header.kvs, "split.count")}, not ${k - 1}/${count}`,
        {
          file: name,
        },
      );
    }
    total += header.tensors.length;
    parts.push({ source, header, file: name });
  }
  const expected = intValue(first.kvs, "split.tensors.count");
  if (expected !== undefined && expected !== total) {
    throw new StConvertError("InvalidSplit", `split.tensors.count is ${expected}, but the ${count} files hold ${total} tensors`, { file });
  }
  return parts;
}

function pad5(n: number): string {
  return String(n).padStart(5, "0");
}

/** numpy's shape: ggml's `ne` reversed. */
function numpyShape(ne: readonly number[]): number[] {
  return [...ne].reverse();
}

function tensorEntry(source: ByteSource, header: GgufHeader, info: GgufTensorInfo, keep: boolean, file: string | undefined): GgufTensor {
  const type = ggmlTypeInfo(info.type)!;
  const offset = header.dataOffset + info.offset;
  const plain = PLAIN_TYPES.get(info.type);
  const shape = numpyShape(info.ne);
  const common = { name: info.name, ggmlType: type.name, storedBytes: info.byteLength };
  if (plain !== undefined) {
    const unit = type.typeSize;
    const swap = !header.littleEndian && unit > 1;
    return {
      ...common,
      dtype: plain,
      shape,
      byteLength: info.byteLength,
      chunks: swap ? (options) => swapped(source, offset, info.byteLength, unit, options) : (options) => readRange(source, offset, info.byteLength, options),
      extent: swap ? undefined : () => ({ source, offset }),
    };
  }
  if (!header.littleEndian) {
    throw new StConvertError("Unsupported", `${type.name} blocks of a big-endian file: their byte order inside the blocks is not defined by the format`, {
      file,
      tensor: info.name,
    });
  }
  if (keep) {
    const rowBytes = ((info.ne[0] ?? 1) / type.blockSize) * type.typeSize;
    let kept = keptBlocks.get(source);
    if (kept === undefined) keptBlocks.set(source, (kept = new Map()));
    kept.set(offset, info.type);
    const extent = { source, offset };
    return {
      ...common,
      dtype: "U8",
      shape: [...shape.slice(0, -1), rowBytes],
      byteLength: info.byteLength,
      chunks: (options) => readRange(source, offset, info.byteLength, options),
      extent: () => extent,
    };
  }
  const elements = info.ne.reduce((a, b) => a * b, 1);
  return {
    ...common,
    dtype: "F32" satisfies Dtype,
    shape,
    byteLength: elements * 4,
    // Listed either way (info shows it); its bytes are refused when pulled.
    chunks: canDequantize(info.type) ? (options) => dequantized(source, offset, info, options, file) : () => refused(type.name, info.name, file),
  };
}

// biome-ignore lint/correctness/useYield: it refuses before its first chunk
async function* refused(typeName: string, tensor: string, file: string | undefined): AsyncGenerator<Uint8Array> {
  throw new StConvertError(
    "Unsupported",
    `${typeName} blocks cannot be dequantized (gguf-py defines no dequantization for them); --keep-quantized keeps them as blocks`,
    {
      file,
      tensor,
    },
  );
}

async function* swapped(source: ByteSource, offset: number, length: number, unit: number, options: ChunkOptions = {}): AsyncGenerator<Uint8Array> {
  const chunkSize = Math.max(unit, options.chunkSize ?? DEFAULT_CHUNK_SIZE);
  for await (const chunk of readRange(source, offset, length, { chunkSize: chunkSize - (chunkSize % unit) })) {
    const copy = new Uint8Array(chunk);
    swapBytesInPlace(copy, unit);
    yield copy;
  }
}

/** The F32 values of a quantized tensor, a piece of whole blocks at a time. */
async function* dequantized(source: ByteSource, offset: number, info: GgufTensorInfo, options: ChunkOptions = {}, file?: string): AsyncGenerator<Uint8Array> {
  const type = ggmlTypeInfo(info.type)!;
  const { dequantizeRows } = await quants();
  const outBlock = type.blockSize * 4;
  const blocks = Math.max(1, Math.floor((options.chunkSize ?? DEFAULT_CHUNK_SIZE) / outBlock));
  // With reuse, a ring of three output buffers, as readRange keeps for its reads.
  const ring = options.reuse === true ? [0, 1, 2].map(() => new Float32Array(blocks * type.blockSize)) : undefined;
  let index = 0;
  for await (const piece of readRange(source, offset, info.byteLength, { chunkSize: blocks * type.typeSize, reuse: options.reuse })) {
    const n = (piece.byteLength / type.typeSize) * type.blockSize;
    const out = ring === undefined ? new Float32Array(n) : ring[index++ % 3]!.subarray(0, n);
    try {
      dequantizeRows(info.type, piece, out);
    } catch (error) {
      throw withContext(error instanceof StConvertError ? error : new StConvertError("Unsupported", `${type.name}: ${(error as Error).message}`), {
        file,
        tensor: info.name,
      });
    }
    const bytes = new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
    if (!LITTLE_ENDIAN) swapBytesInPlace(bytes, 4);
    yield bytes;
  }
}
