/**
 * The safetensors format: a strict, lazy reader and a byte-exact, streaming writer.
 *
 * Spec: https://github.com/huggingface/safetensors (README "Format"; `safetensors/src/tensor.rs`
 * `read_metadata`, `Metadata::validate`, `prepare`, `serialize`). Layout: u64 LE header length N,
 * N bytes of UTF-8 JSON padded with spaces, then the tensors' bytes, contiguous, in offset order.
 */
import { type ByteInput, type ByteSink, type ByteSource, arraySink, readRange, toByteSource } from "./ByteSource.js";
import { type Dtype, dtypeInfo, toSafeNumber } from "./dtypes.js";
import { MAX_HEADER_DEPTH, type ParsedSafetensorsHeader, parseSafetensorsHeader } from "./parseSafetensorsHeader.js";
import { StConvertError, quoteName, withContext } from "./StConvertError.js";
import {
  type ChunkOptions,
  type Metadata,
  type TensorEntry,
  type TensorInfo,
  type TensorSource,
  checkMetadata,
  checkedByteLength,
  compareCodePoints,
  hasLoneSurrogate,
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

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const utf8Encoder = new TextEncoder();

/**
 * Reads and validates a safetensors header; tensor bytes are read later, on demand.
 *
 * Applies the reference reader's rules in its order (`formats.md` §1.2): header length ≤ 100 MB
 * before the file length, UTF-8, the JSON schema, then per tensor in offset order: contiguous
 * offsets, overflow-checked element and bit counts, byte boundaries, byte lengths; finally, that
 * the tensors cover the file exactly.
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

  let text: string;
  try {
    text = utf8.decode(await source.read(8, headerLength));
  } catch (error) {
    if (error instanceof TypeError) fail("InvalidHeader", "invalid UTF-8 in header");
    throw error;
  }

  let parsed: ParsedSafetensorsHeader;
  try {
    parsed = parseSafetensorsHeader(text, { maxDepth: options.maxDepth });
  } catch (error) {
    throw withContext(error, { file: source.name });
  }

  // Sorting by (begin, end) is stable, so tensors at the same offsets keep header order (the
  // reference keeps HashMap order there, which is random; the error raised is the same either way).
  const order = [...parsed.tensors].sort((a, b) => (a.begin < b.begin ? -1 : a.begin > b.begin ? 1 : a.end < b.end ? -1 : a.end > b.end ? 1 : 0));
  const dataStart = 8 + headerLength;
  const u64Max = (1n << 64n) - 1n;
  let start = 0n;
  const tensors: SafetensorsTensor[] = [];
  for (const raw of order) {
    const { name, begin, end } = raw;
    if (begin !== start || end < begin) {
      fail("InvalidOffset", `invalid offset: data_offsets [${begin}, ${end}] do not start where the previous tensor ends (${start})`, name);
    }
    let elements = 1n;
    for (const dim of raw.shape) {
      elements *= dim;
      if (elements > u64Max) fail("ValidationOverflow", `overflow computing buffer size from shape [${raw.shape.join(", ")}]`, name);
    }
    const bits = elements * BigInt(dtypeInfo(raw.dtype).bits);
    if (bits > u64Max) fail("ValidationOverflow", `overflow computing buffer size from shape [${raw.shape.join(", ")}] and dtype ${raw.dtype}`, name);
    if (bits % 8n !== 0n) {
      fail("MisalignedSlice", `${raw.dtype} shape [${raw.shape.join(", ")}] holds ${bits} bits, which does not end on a byte boundary`, name);
    }
    if (end - begin !== bits / 8n) {
      fail(
        "TensorInvalidInfo",
        `invalid shape, data type, or offset: ${raw.dtype} [${raw.shape.join(", ")}] needs ${bits / 8n} bytes, data_offsets [${begin}, ${end}] hold ${end - begin}`,
        name,
      );
    }
    start = end;
    tensors.push(
      fileTensor(source, dataStart, {
        name,
        dtype: raw.dtype,
        shape: raw.shape.map((dim) => safeDim(dim, name, source.name)),
        // Within the file (checked just below, before any tensor is read), so below 2^53.
        begin: Number(begin),
        end: Number(end),
      }),
    );
  }
  if (start + BigInt(dataStart) !== BigInt(source.size)) {
    fail(
      "MetadataIncompleteBuffer",
      `incomplete metadata, file not fully covered: the tensors end at byte ${start + BigInt(dataStart)} of a ${source.size}-byte file`,
    );
  }

  const byName = new Map(tensors.map((t) => [t.name, t]));
  return {
    format: "safetensors",
    metadata: parsed.metadata,
    headerLength,
    tensors,
    tensor(name: string): SafetensorsTensor {
      const found = byName.get(name);
      if (found === undefined) fail("TensorNotFound", "tensor not found", name);
      return found!;
    },
  };
}

function safeDim(dim: bigint, tensor: string, file: string | undefined): number {
  try {
    return toSafeNumber(dim, "dimension");
  } catch (error) {
    throw withContext(error, { file, tensor });
  }
}

function fileTensor(source: ByteSource, dataStart: number, t: { name: string; dtype: Dtype; shape: number[]; begin: number; end: number }): SafetensorsTensor {
  return {
    name: t.name,
    dtype: t.dtype,
    shape: t.shape,
    byteLength: t.end - t.begin,
    dataOffsets: [t.begin, t.end],
    chunks: (options: ChunkOptions = {}) => readRange(source, dataStart + t.begin, t.end - t.begin, options),
  };
}

/** Options of {@link writeSafetensors}. */
export interface SafetensorsWriteOptions {
  /** Bytes pulled from a tensor at a time. Default {@link DEFAULT_CHUNK_SIZE}. */
  chunkSize?: number;
  /** Largest header written. Default {@link MAX_HEADER_SIZE}, the largest the reference reads. */
  maxHeaderSize?: number;
}

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
 * spaces to a multiple of 8.
 * @throws StConvertError `DuplicateKey`, `InvalidName`, `InvalidMetadata`, `TensorInvalidInfo`,
 *   `MisalignedSlice`, `HeaderTooLarge`.
 */
export function layoutSafetensors<T extends TensorInfo>(
  tensors: readonly T[],
  metadata: Metadata | null = null,
  maxHeaderSize = MAX_HEADER_SIZE,
): SafetensorsLayout<T> {
  checkMetadata(metadata);
  const seen = new Set<string>();
  for (const t of tensors) {
    if (seen.has(t.name)) throw new StConvertError("DuplicateKey", "duplicate tensor name", { tensor: t.name });
    seen.add(t.name);
    if (t.name === "__metadata__") throw new StConvertError("InvalidName", "the name `__metadata__` is reserved for the metadata", { tensor: t.name });
    checkWellFormed(t.name, { tensor: t.name });
  }
  const order = [...tensors].sort((a, b) => dtypeInfo(b.dtype).rank - dtypeInfo(a.dtype).rank || compareCodePoints(a.name, b.name));

  const parts: string[] = [];
  if (metadata !== null) {
    const keys = Object.keys(metadata).sort(compareCodePoints);
    for (const key of keys) {
      checkWellFormed(key, {});
      checkWellFormed(metadata[key]!, {});
    }
    parts.push(`"__metadata__":{${keys.map((k) => `${JSON.stringify(k)}:${JSON.stringify(metadata[k])}`).join(",")}}`);
  }
  const offsets: [number, number][] = [];
  let at = 0;
  for (const t of order) {
    const length = checkedByteLength(t);
    offsets.push([at, at + length]);
    parts.push(`${JSON.stringify(t.name)}:{"dtype":"${t.dtype}","shape":[${t.shape.join(",")}],"data_offsets":[${at},${at + length}]}`);
    at += length;
  }
  const json = utf8Encoder.encode(`{${parts.join(",")}}`);
  const headerLength = Math.ceil(json.byteLength / 8) * 8;
  if (headerLength > maxHeaderSize) {
    throw new StConvertError("HeaderTooLarge", `header too large: ${headerLength} bytes, the limit is ${maxHeaderSize}`);
  }
  const header = new Uint8Array(8 + headerLength).fill(0x20, 8 + json.byteLength);
  new DataView(header.buffer).setBigUint64(0, BigInt(headerLength), true);
  header.set(json, 8);
  return { header, order, offsets, fileSize: header.byteLength + at };
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
 * (and metadata with at most one key; with more, ours are sorted, the reference's are random).
 * The caller closes or aborts the sink.
 * @throws StConvertError as {@link layoutSafetensors}, and `ByteLengthMismatch` when a tensor
 *   delivers another byte count than it declared.
 */
export async function writeSafetensors(source: TensorSource, sink: ByteSink, options: SafetensorsWriteOptions = {}): Promise<void> {
  await writeLayout(layoutSafetensors(source.tensors, source.metadata, options.maxHeaderSize), sink, options.chunkSize);
}

/**
 * Serializes tensors into one in-memory safetensors file, like the reference's `save()`.
 * For large outputs, stream with {@link writeSafetensors} into a file sink instead.
 */
export async function serializeSafetensors(source: TensorSource, options: SafetensorsWriteOptions = {}): Promise<Uint8Array> {
  const layout = layoutSafetensors(source.tensors, source.metadata, options.maxHeaderSize);
  // The layout gives the size, so the file is written straight into its final array.
  const out = new Uint8Array(layout.fileSize);
  await writeLayout(layout, arraySink(out), options.chunkSize);
  return out;
}

async function writeLayout(layout: SafetensorsLayout<TensorEntry>, sink: ByteSink, chunkSize: number | undefined): Promise<void> {
  await sink.write(layout.header);
  for (const tensor of layout.order) await pipeTensor(tensor, sink, chunkSize);
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
  write: (tensors, sink) => writeSafetensors(tensors, sink),
};
