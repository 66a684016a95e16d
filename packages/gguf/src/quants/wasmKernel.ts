/** How the block-type kernels assembled in the source are instantiated. */
import { hostWebAssembly } from "@st-convert/core";

/** An instantiated kernel: its exports and the memory they work in. */
export interface WasmKernel {
  readonly exports: Record<string, unknown>;
  /** Never grown, so views of it are never detached. */
  readonly memory: ArrayBuffer;
}

/**
 * The module `bytes()` makes, instantiated with a memory of exactly `pages` pages of 64 KiB imported as
 * `env.mem`; undefined where it cannot run (no WebAssembly, a big-endian host, no SIMD for a module that
 * uses it: compiling throws, or a page's CSP refusing WebAssembly). The bytes are made only where
 * WebAssembly is there.
 */
export function instantiateKernel(bytes: () => Uint8Array, pages: number): WasmKernel | undefined {
  const wasm = hostWebAssembly();
  if (wasm === undefined) return undefined;
  try {
    const memory = new wasm.Memory({ initial: pages, maximum: pages });
    const instance = new wasm.Instance(new wasm.Module(bytes()), { env: { mem: memory } });
    return { exports: instance.exports, memory: memory.buffer };
  } catch {
    return undefined;
  }
}
