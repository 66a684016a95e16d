/**
 * Hand-written msgpack for tests: each helper writes one fixed encoding from the spec, so hostile
 * files are built byte by byte and do not depend on the code under test.
 */
import { concat, fromHex } from "@st-convert/testing";

const utf8 = new TextEncoder();

export type Part = Uint8Array | readonly number[] | string;

/** Concatenates parts; a string part is hex (spaces allowed). */
export function cat(...parts: Part[]): Uint8Array {
  return concat(...parts.map((p) => (typeof p === "string" ? fromHex(p.replace(/\s+/g, "")) : Uint8Array.from(p))));
}

const be = (value: number, width: number): number[] => Array.from({ length: width }, (_, i) => Math.floor(value / 256 ** (width - 1 - i)) % 256);

/** fixmap (n ≤ 15). */
export const map = (n: number): number[] => [0x80 | n];
/** fixarray (n ≤ 15). */
export const arr = (n: number): number[] => [0x90 | n];
/** fixstr or str8 of UTF-8 text. */
export function str(text: string): Uint8Array {
  const bytes = utf8.encode(text);
  return cat(bytes.byteLength <= 31 ? [0xa0 | bytes.byteLength] : [0xd9, bytes.byteLength], bytes);
}
/** A non-negative int as positive fixint or uint32. */
export const uint = (n: number): number[] => (n <= 0x7f ? [n] : [0xce, ...be(n, 4)]);
/** bin32 header. */
export const bin = (n: number): number[] => [0xc6, ...be(n, 4)];
/** ext32 header. */
export const ext = (type: number, n: number): number[] => [0xc9, ...be(n, 4), type & 0xff];

/** An ext payload `[shape, dtype name, bytes]` as flax writes it (bin32 and ext32 forms). */
export function payload(shape: readonly number[], dtype: string, data: Uint8Array | number[]): Uint8Array {
  return cat(arr(3), arr(shape.length), ...shape.map(uint), str(dtype), bin(data.length), Uint8Array.from(data));
}

/** An ndarray ext (type 1, or 3 for a numpy scalar) around a payload. */
export function ndarray(shape: readonly number[], dtype: string, data: Uint8Array | number[], type = 1): Uint8Array {
  const p = payload(shape, dtype, data);
  return cat(ext(type, p.byteLength), p);
}

/** Little-endian float32 bytes. */
export const f32 = (...values: number[]): Uint8Array => new Uint8Array(Float32Array.from(values).buffer);
