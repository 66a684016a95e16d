/**
 * GGUF files built field by field for the hostile and loader tests, written from the format's
 * description (ggml's docs/gguf.md), not by the package's writer: every field can be made wrong.
 */

/** Little-endian field encoders. */
export const u8 = (v: number) => new Uint8Array([v]);
export const u32 = (v: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, v >>> 0, true);
  return b;
};
export const i32 = (v: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setInt32(0, v, true);
  return b;
};
export const u64 = (v: number | bigint) => {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt.asUintN(64, BigInt(v)), true);
  return b;
};
export const raw = (text: string) => new TextEncoder().encode(text);
export const str = (text: string | Uint8Array) => {
  const bytes = typeof text === "string" ? raw(text) : text;
  return cat(u64(bytes.byteLength), bytes);
};

export function cat(...parts: (Uint8Array | readonly number[])[]): Uint8Array {
  const arrays = parts.map((p) => (p instanceof Uint8Array ? p : new Uint8Array(p)));
  const out = new Uint8Array(arrays.reduce((n, a) => n + a.byteLength, 0));
  let at = 0;
  for (const a of arrays) {
    out.set(a, at);
    at += a.byteLength;
  }
  return out;
}

/** A key/value pair: key, type id, value bytes. */
export const kv = (key: string | Uint8Array, type: number, value: Uint8Array) => cat(str(key), u32(type), value);
/** A tensor info: name, ne (ggml order), type, offset. */
export const tensorInfo = (name: string | Uint8Array, ne: readonly (number | bigint)[], type: number, offset: number | bigint) =>
  cat(str(name), u32(ne.length), ...ne.map((n) => u64(n)), i32(type), u64(offset));

export interface FileSpec {
  version?: number;
  kvs?: Uint8Array[];
  tensors?: Uint8Array[];
  /** Counts to declare, when not the real ones. */
  kvCount?: number | bigint;
  tensorCount?: number | bigint;
  alignment?: number;
  /** Data bytes after the padded header (default: zeros for `dataSize`). */
  data?: Uint8Array;
  dataSize?: number;
}

/** A whole file: header, padding to the alignment (when it has tensors), data. */
export function gguf(spec: FileSpec): Uint8Array {
  const kvs = spec.kvs ?? [];
  const tensors = spec.tensors ?? [];
  const head = cat(raw("GGUF"), u32(spec.version ?? 3), u64(spec.tensorCount ?? tensors.length), u64(spec.kvCount ?? kvs.length), ...kvs, ...tensors);
  const alignment = spec.alignment ?? 32;
  const padded = tensors.length > 0 ? Math.ceil(head.byteLength / alignment) * alignment : head.byteLength;
  return cat(head, new Uint8Array(padded - head.byteLength), spec.data ?? new Uint8Array(spec.dataSize ?? 0));
}

/** An F32 tensor of `ne` elements at `offset`, its info, with the data size it needs padded to 32. */
export const f32Info = (name: string, ne: readonly number[], offset = 0) => tensorInfo(name, ne, 0, offset);
