/** The plain float types gguf-py also "dequantizes": F32 (a copy), F16 and BF16 (exact widening). */
import { halfToFloatTable } from "./floatBits.js";

export function dequantizeF32(src: Uint8Array, dst: Float32Array, count: number): void {
  new Uint8Array(dst.buffer, dst.byteOffset, count * 4).set(src.subarray(0, count * 4));
}

export function dequantizeF16(src: Uint8Array, dst: Float32Array, count: number): void {
  const half = halfToFloatTable();
  const bits = new Uint32Array(half.buffer);
  const out = new Uint32Array(dst.buffer, dst.byteOffset, count);
  for (let i = 0; i < count; i++) out[i] = bits[src[2 * i]! | (src[2 * i + 1]! << 8)]!;
}

export function dequantizeBF16(src: Uint8Array, dst: Float32Array, count: number): void {
  const out = new Uint32Array(dst.buffer, dst.byteOffset, count);
  for (let i = 0; i < count; i++) out[i] = ((src[2 * i]! << 16) | (src[2 * i + 1]! << 24)) >>> 0;
}
