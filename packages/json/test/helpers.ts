/** Small helpers shared by the json package's tests. */
import {
  type ByteSink,
  type ByteSource,
  type Dtype,
  type TensorEntry,
  type TensorSource,
  dtypeInfo,
  isStConvertError,
  readTensorBytes,
  tensorByteLength,
  tensorFromBytes,
} from "@st-convert/core";
import { type TensorJsonReadOptions, type TensorJsonWriteOptions, readTensorJson, serializeTensorJson } from "@st-convert/json";
import { pseudoRandomBytes as bytesFor } from "@st-convert/testing";

export const utf8 = new TextEncoder();
export const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

export function tensor(name: string, dtype: Dtype, shape: number[], bytes?: Uint8Array): TensorEntry {
  return tensorFromBytes({ name, dtype, shape }, bytes ?? bytesFor(name.length + shape.length, tensorByteLength(dtype, shape)));
}

/** Every bit pattern of an 8- or 16-bit dtype, as little-endian bytes. */
export function allPatterns(dtype: Dtype): Uint8Array {
  const bits = dtypeInfo(dtype).bits;
  if (bits === 8) return Uint8Array.from({ length: 256 }, (_, i) => i);
  const out = new Uint8Array(2 * 65536);
  const view = new DataView(out.buffer);
  for (let p = 0; p < 65536; p++) view.setUint16(2 * p, p, true);
  return out;
}

/** The document of tensors, written in memory, with the warnings it raised. */
export async function toJson(source: TensorSource, options: TensorJsonWriteOptions = {}): Promise<{ json: Uint8Array; warnings: string[] }> {
  const warnings: string[] = [];
  const json = await serializeTensorJson(source, { ...options, onWarning: (m) => warnings.push(m) });
  return { json, warnings };
}

/** Reads a document and all of its tensors' bytes. */
export async function readAll(json: Uint8Array | string, options: TensorJsonReadOptions = {}) {
  return readAllFrom(typeof json === "string" ? utf8.encode(json) : json, options);
}

/** {@link readAll} from any source. */
export async function readAllFrom(input: Uint8Array | ByteSource, options: TensorJsonReadOptions = {}) {
  const file = await readTensorJson(input, options);
  const tensors = await Promise.all(
    file.tensors.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], encoding: t.encoding, bytes: await readTensorBytes(t) })),
  );
  return { metadata: file.metadata === null ? null : { ...file.metadata }, tensors };
}

/** The StConvertError a promise rejects with. */
export async function failure(promise: Promise<unknown>): Promise<{ code: string; message: string; tensor: string | undefined }> {
  try {
    await promise;
  } catch (error) {
    if (!isStConvertError(error)) throw error;
    return { code: error.code, message: error.message, tensor: error.tensor };
  }
  throw new Error("expected a refusal");
}

/** A sink that records the size of every write. */
export class CountingSink implements ByteSink {
  readonly sizes: number[] = [];
  readonly parts: Uint8Array[] = [];
  async write(chunk: Uint8Array): Promise<void> {
    this.sizes.push(chunk.byteLength);
    this.parts.push(chunk.slice());
  }
  async close(): Promise<void> {}
  async abort(): Promise<void> {}
  bytes(): Uint8Array {
    const out = new Uint8Array(this.sizes.reduce((a, b) => a + b, 0));
    let at = 0;
    for (const p of this.parts) {
      out.set(p, at);
      at += p.byteLength;
    }
    return out;
  }
}

export { bytesFor };
