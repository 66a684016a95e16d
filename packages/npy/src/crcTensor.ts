/**
 * A tensor's CRC-32 taken on the way to a sink, whichever way its bytes go there: over its chunks
 * as they pass, or, when the sink copies its extent without reading it (a kernel copy), by a pass
 * of its own over the extent's bytes that runs alongside the copy. Zip writers (npz, torch) use it
 * to record a member's CRC without a second pass over its data.
 */
import { type ByteSource, type ChunkOptions, type TensorEntry, type TensorExtent, crc32FileRange, readRange } from "@st-convert/core";
import type { Codec } from "./Codec.js";

/** What {@link crcCounted} returns. */
export interface CrcCounted {
  /** The tensor to pipe: the same bytes, counted. */
  readonly entry: TensorEntry;
  /** The CRC-32 of the bytes of the last pass, continuing from `initial`; read it once the pipe is done. */
  crc(): number;
}

/** `tensor` with the CRC-32 of its bytes folded from `initial` (see the file's comment). */
export function crcCounted(tensor: TensorEntry, codec: Codec, initial = 0): CrcCounted {
  let crc = initial;
  const inner = tensor.extent;
  const entry: TensorEntry = {
    name: tensor.name,
    dtype: tensor.dtype,
    shape: tensor.shape,
    byteLength: tensor.byteLength,
    chunks: (options?: ChunkOptions) => counted(tensor.chunks(options)),
    extent:
      inner === undefined
        ? undefined
        : () => {
            const extent = inner.call(tensor);
            return extent === undefined ? undefined : withCrcPass(extent, tensor.byteLength);
          },
  };
  async function* counted(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
    crc = initial;
    // Folded before the chunk is handed on: a reused buffer is refilled only after the next request.
    for await (const chunk of chunks) {
      crc = codec.crc32(chunk, crc);
      yield chunk;
    }
  }
  function withCrcPass(extent: TensorExtent, length: number): TensorExtent {
    const own = extent.check;
    return {
      source: extent.source,
      offset: extent.offset,
      copied: extent.copied,
      async check() {
        const checking = own?.();
        checking?.catch(() => {});
        crc = await rangeCrc32(extent.source, extent.offset, length, initial, codec);
        await checking;
      },
      // A copy that takes the CRC as it goes gives this one at once, where the extent's own check
      // (which would want the same bytes' CRC from another start) does not need them too.
      crc32:
        own === undefined
          ? {
              initial: async () => initial,
              async finish(value) {
                crc = value;
              },
            }
          : undefined,
    };
  }
  return { entry, crc: () => crc };
}

/**
 * The CRC-32 of `length` bytes of `source` from `offset`, continuing from `initial`: through the
 * native module's read on the thread pool for a local file (core's `crc32FileRange`), else folded
 * over the bytes read here with `codec`.
 */
export async function rangeCrc32(source: ByteSource, offset: number, length: number, initial: number, codec: Codec): Promise<number> {
  const native = crc32FileRange(source, offset, length, initial);
  if (native !== undefined) return native;
  let crc = initial;
  // reuse: each chunk is folded into the CRC before the next is asked for.
  for await (const chunk of readRange(source, offset, length, { reuse: true })) crc = codec.crc32(chunk, crc);
  return crc;
}
