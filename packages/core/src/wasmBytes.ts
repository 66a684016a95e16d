/**
 * The pieces of WebAssembly's binary format (specification 2.0, §5) that the kernels assembled
 * byte by byte in source need: no toolchain at build time, nothing fetched at run time; and the
 * runtime's WebAssembly, where they can use it.
 */
import { LITTLE_ENDIAN } from "./swapBytes.js";

/** The few WebAssembly names the kernels use: the packages' lib settings (ES2022, Node's types) declare none. */
export interface WebAssemblyApi {
  Memory: new (descriptor: { initial: number; maximum: number }) => { readonly buffer: ArrayBuffer };
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { readonly exports: Record<string, unknown> };
}

/**
 * The runtime's WebAssembly where a kernel can use it: present, on a little-endian host (wasm
 * memory is little-endian, as the typed-array views of it must be). Undefined elsewhere. Looked up
 * on each call (a test takes it away).
 */
export function hostWebAssembly(): WebAssemblyApi | undefined {
  return LITTLE_ENDIAN ? (globalThis as { WebAssembly?: WebAssemblyApi }).WebAssembly : undefined;
}

/** The magic number and version every module starts with. */
export const WASM_HEADER: readonly number[] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/** An unsigned 32-bit integer as unsigned LEB128 (counts, sizes, indices, memarg offsets). */
export function uleb(value: number): number[] {
  const bytes: number[] = [];
  let rest = value >>> 0;
  do {
    const byte = rest & 0x7f;
    rest >>>= 7;
    bytes.push(rest === 0 ? byte : byte | 0x80);
  } while (rest !== 0);
  return bytes;
}

/** A signed 32-bit integer as signed LEB128 (`i32.const`'s immediate). */
export function sleb(value: number): number[] {
  const bytes: number[] = [];
  let rest = value | 0;
  for (;;) {
    const byte = rest & 0x7f;
    rest >>= 7;
    if ((rest === 0 && (byte & 0x40) === 0) || (rest === -1 && (byte & 0x40) !== 0)) {
      bytes.push(byte);
      return bytes;
    }
    bytes.push(byte | 0x80);
  }
}

/** A section: its id, then its contents' length and the contents. */
export function wasmSection(id: number, contents: readonly number[]): number[] {
  return [id, ...uleb(contents.length), ...contents];
}

/** A name (an import's module or field, an export): its length, then its ASCII bytes. */
export function wasmName(text: string): number[] {
  return [text.length, ...[...text].map((c) => c.charCodeAt(0))];
}
