/**
 * A dtype cast as a streaming transform: the cast entry's chunks are its source's chunks mapped
 * through a {@link castKernel}, so a tensor of any size is cast in memory bounded by the chunk size.
 */
import { DEFAULT_CHUNK_SIZE } from "./ByteSource.js";
import { INTEGER_RANGES, castKernel, checkCastable, isIntegerCastDtype } from "./castKernels.js";
import { type Dtype, dtypeInfo, tensorByteLength } from "./dtypes.js";
import { StConvertError, withContext } from "./StConvertError.js";
import { LITTLE_ENDIAN, swapBytesInPlace } from "./swapBytes.js";
import { type ChunkOptions, type TensorEntry, exactChunks } from "./Tensor.js";

/**
 * The tensor cast to `to`: same name and shape, `to`'s byte length, and `chunks()` that maps the
 * source's chunks as they come (whatever their length: an element split between two chunks is
 * carried over). Nothing is read before the consumer asks. Float casts are bit-exact with torch's
 * `Tensor.to` (see `castKernels.ts`); an integer cast refuses, when its chunks are read, the first
 * element `to` cannot hold. `to` equal to the tensor's dtype returns the entry itself.
 *
 * Chunks: at most `chunkSize` bytes each, every one but the last holding
 * floor(chunkSize / element size) elements. With `reuse`, output chunks share two buffers (a
 * buffer is written again only once the consumer has asked for the chunk two after its last one);
 * without it, every chunk is fresh memory.
 * @throws StConvertError `InvalidArgument` when st-convert does not cast the tensor's dtype to
 *   `to` (float ↔ integer, C64, F4, F6), naming the tensor. Its chunks throw `CastOutOfRange`
 *   (naming the tensor, the element's index and value) and `ByteLengthMismatch` for a source
 *   that does not deliver its declared bytes.
 */
export function castTensor(entry: TensorEntry, to: Dtype): TensorEntry {
  if (to === entry.dtype) return entry;
  const shape = [...entry.shape];
  let byteLength: number;
  try {
    checkCastable(entry.dtype, to);
    byteLength = tensorByteLength(to, shape);
  } catch (error) {
    throw withContext(error, { tensor: entry.name });
  }
  return {
    name: entry.name,
    dtype: to,
    shape,
    byteLength,
    chunks: (options) => castChunks(entry, to, options),
  };
}

async function* castChunks(entry: TensorEntry, to: Dtype, { chunkSize = DEFAULT_CHUNK_SIZE, reuse = false }: ChunkOptions = {}): AsyncGenerator<Uint8Array> {
  if (!Number.isSafeInteger(chunkSize) || chunkSize < 1) throw new StConvertError("InvalidArgument", `chunkSize ${chunkSize} is not a positive integer`);
  const from = entry.dtype;
  const kernel = castKernel(from, to);
  const inWidth = dtypeInfo(from).bits / 8;
  const outWidth = dtypeInfo(to).bits / 8;
  // Floored: a declared length that is not whole elements is refused by exactChunks on the first read.
  const total = Math.floor(entry.byteLength / inWidth);
  // Elements per output buffer: a chunk's worth, at least one (a chunk smaller than an element
  // gets the element in slices).
  const perBuffer = Math.max(1, Math.min(Math.floor(chunkSize / outWidth), total));
  const ring = reuse ? [new Uint8Array(perBuffer * outWidth), new Uint8Array(perBuffer * outWidth)] : undefined;
  let turn = 0;
  const nextBuffer = (): Uint8Array => (ring === undefined ? new Uint8Array(perBuffer * outWidth) : ring[turn++ % 2]!);
  // Whole elements whose bytes are not aligned for a typed array are copied here first; a
  // partial element waits in `carry` for the rest of its bytes.
  let staging: Uint8Array | undefined;
  const carry = new Uint8Array(8);
  let carried = 0;
  let done = 0;
  let out = total > 0 ? nextBuffer() : new Uint8Array(0);
  let filled = 0;

  const convert = (src: Uint8Array, count: number): void => {
    let input = src;
    if (input.byteOffset % inWidth !== 0 || !LITTLE_ENDIAN) {
      if (staging === undefined || staging.byteLength < count * inWidth) staging = new Uint8Array(Math.max(perBuffer, count) * inWidth);
      staging.set(src.subarray(0, count * inWidth));
      input = staging;
      if (!LITTLE_ENDIAN) swapBytesInPlace(input.subarray(0, count * inWidth), inWidth);
    }
    const target = out.subarray(filled * outWidth, (filled + count) * outWidth);
    const bad = kernel(input, target, count);
    if (bad >= 0) throw outOfRange(entry, to, done + bad, input.subarray(bad * inWidth, (bad + 1) * inWidth));
    if (!LITTLE_ENDIAN) swapBytesInPlace(target, outWidth);
    filled += count;
    done += count;
  };

  try {
    for await (const chunk of exactChunks(entry, { chunkSize: perBuffer * inWidth, reuse: true })) {
      // reuse: each source chunk is consumed (converted, or its tail copied into `carry`) before the next is asked for.
      let at = 0;
      while (at < chunk.byteLength) {
        if (carried > 0 || chunk.byteLength - at < inWidth) {
          const take = Math.min(inWidth - carried, chunk.byteLength - at);
          carry.set(chunk.subarray(at, at + take), carried);
          carried += take;
          at += take;
          if (carried < inWidth) break;
          carried = 0;
          convert(carry, 1);
        } else {
          const count = Math.min(perBuffer - filled, Math.floor((chunk.byteLength - at) / inWidth));
          convert(chunk.subarray(at, at + count * inWidth), count);
          at += count * inWidth;
        }
        if (filled === perBuffer) {
          yield* slices(out, filled * outWidth, chunkSize);
          filled = 0;
          if (done < total) out = nextBuffer();
        }
      }
    }
    if (filled > 0) yield* slices(out, filled * outWidth, chunkSize);
  } catch (error) {
    throw withContext(error, { tensor: entry.name });
  }
}

function* slices(buffer: Uint8Array, length: number, chunkSize: number): Generator<Uint8Array> {
  for (let at = 0; at < length; at += chunkSize) yield buffer.subarray(at, Math.min(at + chunkSize, length));
}

/** The refusal of element `index` (its native-endian bytes in `bytes`), with its position in the shape. */
function outOfRange(entry: TensorEntry, to: Dtype, index: number, bytes: Uint8Array): StConvertError {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const value = integerValue(entry.dtype, view);
  const where = entry.shape.length > 1 ? ` (at [${unravel(index, entry.shape).join(", ")}])` : "";
  const target = isIntegerCastDtype(to) ? INTEGER_RANGES[to] : undefined;
  const holds = to === "BOOL" ? "BOOL holds 0 and 1" : target === undefined ? `${to} cannot hold it` : `${to} holds ${target[0]} to ${target[1]}`;
  const rule =
    entry.dtype === "BOOL"
      ? `cannot cast BOOL to ${to}: element ${index}${where} is the byte ${value}, which is not a BOOL (0 or 1)`
      : `cannot cast ${entry.dtype} to ${to}: element ${index}${where} is ${value}, and ${holds} (st-convert refuses what torch would wrap)`;
  return new StConvertError("CastOutOfRange", rule, { tensor: entry.name });
}

function integerValue(dtype: Dtype, view: DataView): bigint | number {
  const native = LITTLE_ENDIAN;
  switch (dtype) {
    case "I8":
      return view.getInt8(0);
    case "I16":
      return view.getInt16(0, native);
    case "U16":
      return view.getUint16(0, native);
    case "I32":
      return view.getInt32(0, native);
    case "U32":
      return view.getUint32(0, native);
    case "I64":
      return view.getBigInt64(0, native);
    case "U64":
      return view.getBigUint64(0, native);
    default:
      return view.getUint8(0);
  }
}

/** The C-order position of flat element `index` in `shape`. */
function unravel(index: number, shape: readonly number[]): number[] {
  const position = new Array<number>(shape.length).fill(0);
  let rest = index;
  for (let k = shape.length - 1; k >= 0; k--) {
    const dim = shape[k]!;
    position[k] = rest % dim;
    rest = Math.floor(rest / dim);
  }
  return position;
}
