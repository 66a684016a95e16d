/**
 * Dequantization of Q8_0, Q4_K and Q6_K in WebAssembly SIMD: the most common block types of the
 * GGUFs people convert (a Q4_K_M model is Q4_K and Q6_K), the bits of the JavaScript loops (and so of
 * gguf-py's `dequantize`). Each output is one float32 product, or a product then a difference, of the
 * operands gguf-py rounds to float32 first, and four lanes of IEEE float32 arithmetic round each
 * operation exactly as numpy's float32 does: no reordering, no fused multiply-add. A fifth to a third of
 * the JavaScript loops' time, so a GGUF's conversion to F32 is paced by writing the output. The module,
 * about 5 KB with its loops unrolled, is assembled here (no toolchain, nothing fetched); where
 * WebAssembly or its SIMD is missing (or a page's CSP refuses it), the JavaScript loops run.
 *
 * An f16 scale becomes float32 through a 65,536-entry table in the module's memory (gguf-py's widening,
 * subnormals and NaNs included), filled once from the JavaScript loops' own table.
 */
import { WASM_HEADER, sleb, uleb, wasmName, wasmSection } from "@st-convert/core";
import { halfToFloatTable } from "./floatBits.js";
import { GgmlType } from "./ggmlTypes.js";
import { instantiateKernel } from "./wasmKernel.js";

/** Blocks per call into the module: 2,048 (2 MiB of values out) keep its memory small and in cache. */
const CHUNK_BLOCKS = 2048;
/** The f16 → float32 table at address 0, then the blocks copied in, then the values written. */
const TABLE = 0;
const IN = 65536 * 4;
const OUT = Math.ceil((IN + CHUNK_BLOCKS * 210) / 65536) * 65536;
const MEMORY_PAGES = (OUT + CHUNK_BLOCKS * 1024) / 65536;

/** Each type the module converts: its export, block size in bytes and values per block. */
const KERNELS = new Map<number, { readonly name: string; readonly typeSize: number; readonly blockSize: number }>([
  [GgmlType.Q8_0, { name: "q8_0", typeSize: 34, blockSize: 32 }],
  [GgmlType.Q4_K, { name: "q4_k", typeSize: 144, blockSize: 256 }],
  [GgmlType.Q6_K, { name: "q6_k", typeSize: 210, blockSize: 256 }],
]);

/**
 * The module: three functions `(src, dst, blocks)` converting `blocks` blocks at src to float32s at
 * dst, in memory imported as `env.mem`. Per block, as WAT-like steps (`widen` takes 16 bytes to four
 * f32x4 vectors: i16x8.extend_{low,high}_i8x16, i32x4.extend_{low,high}_i16x8, f32x4.convert_i32x4_s):
 *
 *     q8_0: d = table[u16 src]; for k in 0, 1: widen_s(v128.load src+2+16k) · splat(d) → dst+64k
 *     q4_k: d, dmin = table[u16 src], table[u16 src+2]
 *           for sub-block j in 0..7: sc, m = its 6-bit scale and min (scales[12] at src+4)
 *                                    dj = splat(d · f32(sc)), mj = splat(dmin · f32(m))
 *           for c in 0..3, h in 0, 1: q = v128.load src+16+32c+16h
 *             widen_u(q & 15) · d(2c) − m(2c) → dst+256c+64h; widen_u(q >> 4) · d(2c+1) − m(2c+1) → dst+256c+128+64h
 *     q6_k: d = table[u16 src+208]
 *           for n in 0, 1, k in 0..3, p in 0, 1 (the 16 values from e = 128n+32k+16p):
 *             low = v128.load src+64n+32(k&1)+16p, & 15 for k < 2, >> 4 otherwise
 *             high = ((v128.load src+128+32n+16p) >> 2k & 3) << 4
 *             widen_s((low | high) − 32) · splat(d · f32(int8 at src+192+e/16)) → dst+4e
 *
 * Opcodes and encodings: the WebAssembly core specification 2.0, §5 (binary format; SIMD
 * instructions are 0xFD and a LEB128 opcode).
 */
function dequantModule(): Uint8Array {
  const [BLOCK, LOOP, END, BR, BR_IF] = [0x02, 0x03, 0x0b, 0x0c, 0x0d];
  const [LOCAL_GET, LOCAL_SET, F32_LOAD, I32_LOAD8_S, I32_LOAD8_U, I32_LOAD16_U, I32_CONST] = [0x20, 0x21, 0x2a, 0x2c, 0x2d, 0x2f, 0x41];
  const [I32_GE_U, I32_ADD, I32_AND, I32_OR, I32_SHL, I32_SHR_U, F32_MUL, F32_CONVERT_I32_S] = [0x4f, 0x6a, 0x71, 0x72, 0x74, 0x76, 0x94, 0xb2];
  const simd = (opcode: number) => [0xfd, ...uleb(opcode)];
  const [V128_LOAD, V128_STORE, I8X16_SPLAT, F32X4_SPLAT, V128_AND, V128_OR] = [simd(0x00), simd(0x0b), simd(0x0f), simd(0x13), simd(0x4e), simd(0x50)];
  const [I8X16_SHL, I8X16_SHR_U, I8X16_SUB] = [simd(0x6b), simd(0x6d), simd(0x71)];
  const [I16X8_EXTEND_LOW_S, I16X8_EXTEND_HIGH_S, I16X8_EXTEND_LOW_U, I16X8_EXTEND_HIGH_U] = [simd(0x87), simd(0x88), simd(0x89), simd(0x8a)];
  const [I32X4_EXTEND_LOW_S, I32X4_EXTEND_HIGH_S, I32X4_EXTEND_LOW_U, I32X4_EXTEND_HIGH_U] = [simd(0xa7), simd(0xa8), simd(0xa9), simd(0xaa)];
  const [F32X4_SUB, F32X4_MUL, F32X4_CONVERT_I32X4_S] = [simd(0xe5), simd(0xe6), simd(0xfa)];
  // locals: the three parameters; b, sc, m (i32); d, dmin (f32); x, scale, min (v128), then sixteen v128 for Q4_K's scales and mins
  const [src, dst, blocks, b, sc, m, d, dmin, x, scale, min] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  const subScale = (j: number) => 11 + j;
  const subMin = (j: number) => 19 + j;
  const get = (local: number) => [LOCAL_GET, local];
  const set = (local: number) => [LOCAL_SET, local];
  const i32 = (value: number) => [I32_CONST, ...sleb(value)];
  const advance = (local: number, by: number) => [...get(local), ...i32(by), I32_ADD, ...set(local)];
  const byte = (offset: number) => [...get(src), I32_LOAD8_U, 0, ...uleb(offset)];
  /** The float32 of the f16 at src+offset, through the table. */
  const half = (offset: number) => [...get(src), I32_LOAD16_U, 0, ...uleb(offset), ...i32(2), I32_SHL, F32_LOAD, 2, ...uleb(TABLE)];

  function body(emitBlock: (emit: (...parts: (number | number[])[]) => void) => void, typeSize: number, outBytes: number): number[] {
    const code: number[] = [];
    const emit = (...parts: (number | number[])[]) => {
      for (const part of parts) {
        if (typeof part === "number") code.push(part);
        else code.push(...part);
      }
    };
    emit(BLOCK, 0x40, LOOP, 0x40);
    emit(get(b), get(blocks), I32_GE_U, BR_IF, 1);
    emitBlock(emit);
    emit(advance(src, typeSize), advance(dst, outBytes), advance(b, 1), BR, 0, END, END, END);
    // local groups: 3 i32, 2 f32, 19 v128
    return [3, 3, 0x7f, 2, 0x7d, 19, 0x7b, ...code];
  }

  /** Widens the 16 bytes on the stack (signed or not) to four f32x4 vectors, each times `scale` (less `min`), stored from dst+offset. */
  function widen(emit: (...parts: (number | number[])[]) => void, signed: boolean, offset: number, withMin: boolean): void {
    emit(set(x));
    for (let half16 = 0; half16 < 2; half16++) {
      for (let quarter = 0; quarter < 2; quarter++) {
        emit(get(dst), get(x));
        emit(signed ? (half16 ? I16X8_EXTEND_HIGH_S : I16X8_EXTEND_LOW_S) : half16 ? I16X8_EXTEND_HIGH_U : I16X8_EXTEND_LOW_U);
        emit(signed ? (quarter ? I32X4_EXTEND_HIGH_S : I32X4_EXTEND_LOW_S) : quarter ? I32X4_EXTEND_HIGH_U : I32X4_EXTEND_LOW_U);
        emit(F32X4_CONVERT_I32X4_S, get(scale), F32X4_MUL);
        if (withMin) emit(get(min), F32X4_SUB);
        emit(V128_STORE, 0, uleb(offset + 32 * half16 + 16 * quarter));
      }
    }
  }

  const q8_0 = body(
    (emit) => {
      emit(half(0), F32X4_SPLAT, set(scale));
      for (let k = 0; k < 2; k++) {
        emit(get(src), V128_LOAD, 0, uleb(2 + 16 * k));
        widen(emit, true, 64 * k, false);
      }
    },
    34,
    128,
  );

  const q4_k = body(
    (emit) => {
      emit(half(0), set(d), half(2), set(dmin));
      for (let j = 0; j < 8; j++) {
        if (j < 4) {
          emit(byte(4 + j), i32(63), I32_AND, set(sc), byte(8 + j), i32(63), I32_AND, set(m));
        } else {
          emit(byte(8 + j), i32(15), I32_AND, byte(j), i32(6), I32_SHR_U, i32(4), I32_SHL, I32_OR, set(sc));
          emit(byte(8 + j), i32(4), I32_SHR_U, byte(4 + j), i32(6), I32_SHR_U, i32(4), I32_SHL, I32_OR, set(m));
        }
        emit(get(d), get(sc), F32_CONVERT_I32_S, F32_MUL, F32X4_SPLAT, set(subScale(j)));
        emit(get(dmin), get(m), F32_CONVERT_I32_S, F32_MUL, F32X4_SPLAT, set(subMin(j)));
      }
      for (let c = 0; c < 4; c++) {
        for (let h = 0; h < 2; h++) {
          emit(get(subScale(2 * c)), set(scale), get(subMin(2 * c)), set(min));
          emit(get(src), V128_LOAD, 0, uleb(16 + 32 * c + 16 * h), i32(15), I8X16_SPLAT, V128_AND);
          widen(emit, false, 256 * c + 64 * h, true);
          emit(get(subScale(2 * c + 1)), set(scale), get(subMin(2 * c + 1)), set(min));
          emit(get(src), V128_LOAD, 0, uleb(16 + 32 * c + 16 * h), i32(4), I8X16_SHR_U);
          widen(emit, false, 256 * c + 128 + 64 * h, true);
        }
      }
    },
    144,
    1024,
  );

  const q6_k = body(
    (emit) => {
      emit(half(208), set(d));
      for (let n = 0; n < 2; n++) {
        for (let k = 0; k < 4; k++) {
          for (let p = 0; p < 2; p++) {
            const e = 128 * n + 32 * k + 16 * p;
            emit(get(d), get(src), I32_LOAD8_S, 0, uleb(192 + e / 16), F32_CONVERT_I32_S, F32_MUL, F32X4_SPLAT, set(scale));
            emit(get(src), V128_LOAD, 0, uleb(64 * n + 32 * (k & 1) + 16 * p));
            emit(...(k < 2 ? [i32(15), I8X16_SPLAT, V128_AND] : [i32(4), I8X16_SHR_U]));
            emit(get(src), V128_LOAD, 0, uleb(128 + 32 * n + 16 * p), i32(2 * k), I8X16_SHR_U, i32(3), I8X16_SPLAT, V128_AND, i32(4), I8X16_SHL);
            emit(V128_OR, i32(32), I8X16_SPLAT, I8X16_SUB);
            widen(emit, true, 4 * e, false);
          }
        }
      }
    },
    210,
    1024,
  );

  const bodies = [q8_0, q4_k, q6_k];
  const code = bodies.flatMap((f) => [...uleb(f.length), ...f]);
  const exports = [...KERNELS.values()].flatMap((kernel, index) => [...wasmName(kernel.name), 0x00, index]);
  return new Uint8Array([
    ...WASM_HEADER,
    ...wasmSection(1, [1, 0x60, 3, 0x7f, 0x7f, 0x7f, 0]), // type 0: (i32, i32, i32) -> ()
    ...wasmSection(2, [1, ...wasmName("env"), ...wasmName("mem"), 0x02, 0x01, ...uleb(MEMORY_PAGES), ...uleb(MEMORY_PAGES)]), // memory of exactly MEMORY_PAGES
    ...wasmSection(3, [bodies.length, ...bodies.map(() => 0)]), // each function has type 0
    ...wasmSection(7, [KERNELS.size, ...exports]),
    ...wasmSection(10, [bodies.length, ...code]),
  ]);
}

interface Kernel {
  readonly run: ReadonlyMap<number, (src: number, dst: number, blocks: number) => void>;
  readonly memory: ArrayBuffer;
  readonly blocks: Uint8Array;
  readonly values: Float32Array;
}

/** The instantiated module: null where it cannot run (no WebAssembly, no SIMD, a page's CSP), undefined before the first call. */
let kernel: Kernel | null | undefined;

function instantiate(): Kernel | null {
  if (kernel !== undefined) return kernel;
  const module = instantiateKernel(dequantModule, MEMORY_PAGES);
  kernel = null;
  if (module === undefined) return null;
  // wasm loads are little-endian, the values written are read in the host's order (instantiateKernel
  // gives nothing on a big-endian host)
  const { exports, memory } = module;
  new Float32Array(memory, TABLE, 65536).set(halfToFloatTable());
  kernel = {
    run: new Map([...KERNELS].map(([type, k]) => [type, exports[k.name] as (src: number, dst: number, blocks: number) => void])),
    memory,
    blocks: new Uint8Array(memory, IN, CHUNK_BLOCKS * 210),
    values: new Float32Array(memory, OUT, CHUNK_BLOCKS * 256),
  };
  return kernel;
}

/** Whether {@link dequantizeSimd} converts blocks of `type` here. */
export function hasDequantSimd(type: number): boolean {
  return KERNELS.has(type) && instantiate() !== null;
}

/**
 * Dequantizes `blocks` blocks of `type` from `src` into `dst` with the module, through its memory (a
 * copy in and out costs about a tenth of the kernel's time; writing where the caller's chunks lie
 * saved no time in a whole conversion, which waits for its writes). False, having written nothing,
 * for another type or where the module cannot run.
 */
export function dequantizeSimd(type: number, src: Uint8Array, dst: Float32Array, blocks: number): boolean {
  const geometry = KERNELS.get(type);
  const k = geometry === undefined ? null : instantiate();
  if (geometry === undefined || k === null) return false;
  const run = k.run.get(type)!;
  for (let first = 0; first < blocks; first += CHUNK_BLOCKS) {
    const n = Math.min(CHUNK_BLOCKS, blocks - first);
    k.blocks.set(src.subarray(first * geometry.typeSize, (first + n) * geometry.typeSize));
    const values = n * geometry.blockSize;
    run(IN, OUT, n);
    dst.set(k.values.subarray(0, values), first * geometry.blockSize);
  }
  return true;
}
