/**
 * Q8_0 quantization in WebAssembly SIMD, byte for byte ggml's `quantize_row_q8_0_ref`: four lanes
 * of IEEE float32 arithmetic do exactly what C's floats do (the product x·id rounded once), where
 * JavaScript must round every double with `Math.fround`. Per value 0.47 ns where the values lie in
 * its memory and 0.6 ns copied in and out, against the JavaScript kernel's 8.3 ns (2026-12-07), which
 * keeps `--quantize Q8_0` bound by reading and writing. The module is about 3 KB assembled here (no
 * toolchain, nothing fetched); where WebAssembly or its SIMD is missing (or a page's CSP refuses it),
 * or for a block holding a NaN (ggml's `MAX` lets a NaN in and the next number out, which lane
 * maxima do not follow), an infinity (x·id is then NaN for it, whose int8 in C is the low byte of
 * x86's 0x80000000) or whose d is too small to invert (x·∞ likewise), the JavaScript kernel runs.
 *
 * Per block of 32 floats: amax is the largest |x| as bits (unsigned integer order is float order
 * for non-negative floats; infinity's bits and a NaN's are the highest, which sends the block to
 * JavaScript), d = amax / 127, id = d ≠ 0 ? 1/d : 0, d stored as ggml's f16 (round to nearest even,
 * infinity past 65504, subnormals exact), and each q = roundf(x·id) as trunc(p + copysign(½⁻, p)),
 * ½⁻ the float below ½ (0x3EFFFFFF): for |p| < 2^23 the float32 sum rounds onto the next integer
 * exactly when p's fraction is ½ or more (at p = ½ itself, 1 − 2^-25 is a tie that goes to the even
 * 1), and stays below it otherwise (the gap is then at least an ulp of p); ½ itself would take
 * 0.49999997 to 1. Here |p| ≤ 127·(1 + 2^-22), so the integer is read off the float without a
 * conversion instruction: t + 1.5·2^23 holds t in its low bits, and its bits less 0x4B400000 are t.
 * Four blocks go at once where none of them needs JavaScript, their d, id and f16 in the lanes of
 * one vector; 0.67 ns per value one block at a time, 0.52 with four (and 0.47 without `trunc_sat`,
 * several instructions on x86-64 where `roundps` is one).
 */
import { WASM_HEADER, sleb, uleb, wasmName, wasmSection } from "@st-convert/core";
import { instantiateKernel } from "./wasmKernel.js";

/** Blocks per call into the module: 8,192 (1 MiB of values) keep its memory small and in cache, whatever the batch. */
const CHUNK_BLOCKS = 8192;
/** Where the module's memory holds the values, the blocks, and the list of blocks left to JavaScript. */
const SRC = 0;
const DST = CHUNK_BLOCKS * 128;
const LIST = DST + CHUNK_BLOCKS * 34;
/**
 * After them, slots a caller takes ({@link takeQ8_0Slot}) to read values into and have blocks
 * written to where they lie: no copy in or out (about a fifth of `--quantize Q8_0`'s main thread,
 * 2026-12-06). Four of 4 MiB: two batches of values (one quantized, one being read) and their blocks.
 */
const SLOTS_AT = Math.ceil((LIST + CHUNK_BLOCKS * 4) / 65536) * 65536;
export const Q8_0_SLOT_BYTES = 4 * 1024 * 1024;
const SLOT_COUNT = 4;
const MEMORY_PAGES = (SLOTS_AT + SLOT_COUNT * Q8_0_SLOT_BYTES) / 65536;

/**
 * The module: `q(src, dst, blocks, list)` quantizes `blocks` blocks of float32s at src into Q8_0
 * blocks at dst, in memory imported as `env.mem`, and returns how many it left to JavaScript (an
 * infinity or a NaN among their values), their indices written to the int32s at list. As WAT-like steps:
 *
 *     loop while b < blocks:
 *       if b + 4 ≤ blocks:                                            ;; four blocks at once
 *         mj = i32x4.max_u over the block's (vk & splat 0x7FFFFFFF), j = 0..3   ;; |x| as bits
 *         amax = [lane max of m0, of m1, of m2, of m3]                ;; shuffles and max_u, as a 4×4 transpose
 *         d = amax / 127; id = (1 / d) & (d ≠ 0)                      ;; f32x4
 *         if none of amax ≥ 0x7F800000 (signed lanes: |x| ≥ 0) nor id = ∞:
 *           h = f16 bits of d (below), lane by lane by bitselect; i32.store16 dst + 34j each
 *           each block j: quantized (below) with id's lane j splat
 *           src += 512; dst += 136; b += 4; continue
 *       up to four blocks (to b + 4 or blocks) one at a time:
 *         m = lane max of the block's |x| bits; d = f32(m) / 127; id = d ≠ 0 ? 1 / d : 0
 *         if m ≥u 0x7F800000 or id = ∞: list[count++] = b
 *         else: i32.store16 dst (f16 bits of d); quantized with splat(id)
 *         src += 128; dst += 34; b += 1
 *
 *     f16 bits of d: 0x7C00 from 0x477FF000; below 0x38800000 nearest(d·2^24);
 *                    else (bits − 0x38000000 + 0xFFF + ((bits >> 13) & 1)) >> 13
 *     quantized: for each vk: p = vk · splat(id); q = bits(trunc(p + copysign(0.49999997, p)) + 1.5·2^23) − 0x4B400000;
 *                narrow the 32 int32s to int8 (i16x8.narrow_i32x4_s, i8x16.narrow_i16x8_s), stored at dst+2, dst+18
 *
 * Opcodes and encodings: the WebAssembly core specification 2.0, §5 (binary format; SIMD
 * instructions are 0xFD and a LEB128 opcode).
 */
function q8Module(): Uint8Array {
  const [BLOCK, LOOP, IF, ELSE, END, BR, BR_IF, SELECT] = [0x02, 0x03, 0x04, 0x05, 0x0b, 0x0c, 0x0d, 0x1b];
  const [LOCAL_GET, LOCAL_SET, LOCAL_TEE, I32_STORE, I32_STORE16, I32_CONST, F32_CONST] = [0x20, 0x21, 0x22, 0x36, 0x3b, 0x41, 0x43];
  const [I32_LT_U, I32_GT_U, I32_GE_U, F32_EQ, F32_NE, I32_ADD, I32_SUB, I32_AND, I32_OR, I32_SHL, I32_SHR_U] = [
    0x49, 0x4b, 0x4f, 0x5b, 0x5c, 0x6a, 0x6b, 0x71, 0x72, 0x74, 0x76,
  ];
  const [F32_NEAREST, F32_MUL, F32_DIV, I32_TRUNC_F32_U, I32_REINTERPRET_F32, F32_REINTERPRET_I32] = [0x90, 0x94, 0x95, 0xa9, 0xbc, 0xbe];
  const simd = (opcode: number) => [0xfd, ...uleb(opcode)];
  const [V128_LOAD, V128_STORE, V128_CONST, I8X16_SHUFFLE, I32X4_SPLAT, F32X4_SPLAT, I32X4_EXTRACT_LANE] = [
    simd(0x00),
    simd(0x0b),
    simd(0x0c),
    simd(0x0d),
    simd(0x11),
    simd(0x13),
    simd(0x1b),
  ];
  const [I32X4_LT_S, I32X4_GT_S, F32X4_EQ, F32X4_NE, V128_AND, V128_OR, V128_BITSELECT, V128_ANY_TRUE] = [
    simd(0x39),
    simd(0x3b),
    simd(0x41),
    simd(0x42),
    simd(0x4e),
    simd(0x50),
    simd(0x52),
    simd(0x53),
  ];
  const [I8X16_NARROW_I16X8_S, F32X4_NEAREST, I16X8_NARROW_I32X4_S, I32X4_SHR_U, I32X4_ADD, I32X4_SUB, I32X4_MAX_U] = [
    simd(0x65),
    simd(0x6a),
    simd(0x85),
    simd(0xad),
    simd(0xae),
    simd(0xb1),
    simd(0xb9),
  ];
  const [F32X4_TRUNC, F32X4_ADD, F32X4_MUL, F32X4_DIV, I32X4_TRUNC_SAT_F32X4_S] = [simd(0x69), simd(0xe4), simd(0xe6), simd(0xe7), simd(0xf8)];
  // locals: the four parameters; b, m, count, bits, until (i32); d, id (f32); v0..v7, t, splat(id), the
  // abs mask, splat(the float below ½), the sign mask, a group's amax, d, id and f16 bits, splat(1.5·2^23) (v128)
  const [src, dst, blocks, list, b, m, count, bits, until, d, id] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  const v = (k: number) => 11 + k;
  const [t, vid, abs, belowHalf, sign, gMax, gD, gId, gHalf, magic] = [19, 20, 21, 22, 23, 24, 25, 26, 27, 28];
  const get = (local: number) => [LOCAL_GET, local];
  const set = (local: number) => [LOCAL_SET, local];
  const i32 = (value: number) => [I32_CONST, ...sleb(value)];
  const f32 = (value: number) => [F32_CONST, ...new Uint8Array(new Float32Array([value]).buffer)];
  const splatI32 = (value: number) => [...V128_CONST, ...new Uint8Array(new Int32Array([value, value, value, value]).buffer)];
  const splatF32 = (value: number) => [...V128_CONST, ...new Uint8Array(new Float32Array([value, value, value, value]).buffer)];
  /** i8x16.shuffle's bytes for the 32-bit lanes given (0–3 the first operand's, 4–7 the second's). */
  const lanes = (...of: number[]) => of.flatMap((lane) => [4 * lane, 4 * lane + 1, 4 * lane + 2, 4 * lane + 3]);
  const advance = (local: number, by: number) => [...get(local), ...i32(by), I32_ADD, ...set(local)];
  const code: number[] = [];
  const emit = (...parts: (number | number[])[]) => {
    for (const part of parts) {
      if (typeof part === "number") code.push(part);
      else code.push(...part);
    }
  };
  /** Pushes |x| as bits of the four values at src + offset (memarg: alignment 2^0, which is only a hint, then the offset). */
  const absAt = (offset: number) => emit(get(src), V128_LOAD, 0, uleb(offset), get(abs), V128_AND);
  /** Quantizes the block at src + 128·j with splat(id) in vid into the 32 int8s at dst + 34·j + 2. */
  const quantizeBlock = (j: number) => {
    for (let k = 0; k < 8; k++) {
      emit(get(src), V128_LOAD, 0, uleb(128 * j + 16 * k), get(vid), F32X4_MUL, LOCAL_TEE, t);
      emit(get(t), get(sign), V128_AND, get(belowHalf), V128_OR, F32X4_ADD, F32X4_TRUNC, get(magic), F32X4_ADD, get(magic), I32X4_SUB);
      if (k % 2 === 1) emit(I16X8_NARROW_I32X4_S);
      if (k % 4 === 3) emit(I8X16_NARROW_I16X8_S, set(t), get(dst), get(t), V128_STORE, 0, uleb(34 * j + (k === 3 ? 2 : 18)));
    }
  };
  emit(
    i32(0x7fffffff),
    I32X4_SPLAT,
    set(abs),
    i32(0x3effffff),
    I32X4_SPLAT,
    set(belowHalf),
    i32(0x80000000 | 0),
    I32X4_SPLAT,
    set(sign),
    i32(0x4b400000),
    I32X4_SPLAT,
    set(magic),
  );
  emit(BLOCK, 0x40, LOOP, 0x40); // $exit, $next
  emit(get(b), get(blocks), I32_GE_U, BR_IF, 1);
  emit(BLOCK, 0x40); // $alone: blocks one at a time, up to the next multiple of four
  emit(get(b), i32(4), I32_ADD, get(blocks), I32_GT_U, BR_IF, 0);
  // four blocks at once: each one's lane maxima of |x|, then the four maxima side by side in gMax
  for (let j = 0; j < 4; j++) {
    for (let pair = 0; pair < 4; pair++) {
      absAt(128 * j + 32 * pair);
      absAt(128 * j + 32 * pair + 16);
      emit(I32X4_MAX_U);
      if (pair % 2 === 1) emit(I32X4_MAX_U);
    }
    emit(I32X4_MAX_U, set(v(j)));
  }
  for (const [a, c, into] of [
    [v(0), v(1), v(4)],
    [v(2), v(3), v(5)],
  ] as const) {
    emit(get(a), get(c), I8X16_SHUFFLE, lanes(0, 1, 4, 5), get(a), get(c), I8X16_SHUFFLE, lanes(2, 3, 6, 7), I32X4_MAX_U, set(into));
  }
  emit(get(v(4)), get(v(5)), I8X16_SHUFFLE, lanes(0, 2, 4, 6), get(v(4)), get(v(5)), I8X16_SHUFFLE, lanes(1, 3, 5, 7), I32X4_MAX_U, set(gMax));
  emit(get(gMax), splatF32(127), F32X4_DIV, set(gD));
  emit(splatF32(1), get(gD), F32X4_DIV, get(gD), splatF32(0), F32X4_NE, V128_AND, set(gId));
  // a NaN in any of the four, or a d too small to invert: those blocks go one at a time
  emit(get(gMax), splatI32(0x7f7fffff), I32X4_GT_S, get(gId), splatF32(Number.POSITIVE_INFINITY), F32X4_EQ, V128_OR, V128_ANY_TRUE, BR_IF, 0);
  // the four ds' f16 bits (d ≥ 0, so signed lane comparisons order its bits): infinity, else subnormal, else normal
  emit(splatI32(0x7c00));
  emit(get(gD), splatF32(16777216), F32X4_MUL, F32X4_NEAREST, I32X4_TRUNC_SAT_F32X4_S);
  emit(get(gD), splatI32(0x38000000), I32X4_SUB, splatI32(0x0fff), I32X4_ADD, get(gD), i32(13), I32X4_SHR_U, splatI32(1), V128_AND, I32X4_ADD);
  emit(i32(13), I32X4_SHR_U, get(gD), splatI32(0x38800000), I32X4_LT_S, V128_BITSELECT);
  emit(get(gD), splatI32(0x477fefff), I32X4_GT_S, V128_BITSELECT, set(gHalf));
  for (let j = 0; j < 4; j++) {
    emit(get(dst), get(gHalf), I32X4_EXTRACT_LANE, j, I32_STORE16, 1, uleb(34 * j));
    emit(get(gId), get(gId), I8X16_SHUFFLE, lanes(j, j, j, j), set(vid));
    quantizeBlock(j);
  }
  emit(advance(src, 512), advance(dst, 136), advance(b, 4), BR, 1, END); // to $next
  // one at a time, up to four blocks
  emit(get(b), i32(4), I32_ADD, get(blocks), get(b), i32(4), I32_ADD, get(blocks), I32_LT_U, SELECT, set(until));
  emit(LOOP, 0x40); // $one
  for (let pair = 0; pair < 4; pair++) {
    absAt(32 * pair);
    absAt(32 * pair + 16);
    emit(I32X4_MAX_U);
    if (pair % 2 === 1) emit(I32X4_MAX_U);
  }
  emit(I32X4_MAX_U);
  emit(set(t), get(t), get(t), get(t), I8X16_SHUFFLE, lanes(2, 3, 0, 1), I32X4_MAX_U);
  emit(set(t), get(t), get(t), get(t), I8X16_SHUFFLE, lanes(1, 0, 3, 2), I32X4_MAX_U);
  emit(I32X4_EXTRACT_LANE, 0, set(m));
  emit(get(m), F32_REINTERPRET_I32, f32(127), F32_DIV, set(d));
  emit(f32(1), get(d), F32_DIV, f32(0), get(d), f32(0), F32_NE, SELECT, set(id));
  emit(get(m), i32(0x7f800000), I32_GE_U, get(id), f32(Number.POSITIVE_INFINITY), F32_EQ, I32_OR, IF, 0x40);
  emit(get(list), get(count), i32(2), I32_SHL, I32_ADD, get(b), I32_STORE, 2, 0, advance(count, 1));
  emit(ELSE);
  emit(get(id), F32X4_SPLAT, set(vid));
  emit(get(d), I32_REINTERPRET_F32, set(bits), get(dst));
  emit(get(bits), i32(0x477ff000), I32_GE_U, IF, 0x7f, i32(0x7c00), ELSE);
  emit(get(bits), i32(0x38800000), I32_LT_U, IF, 0x7f, get(d), f32(16777216), F32_MUL, F32_NEAREST, I32_TRUNC_F32_U, ELSE);
  emit(get(bits), i32(0x38000000), I32_SUB, i32(0x0fff), I32_ADD, get(bits), i32(13), I32_SHR_U, i32(1), I32_AND, I32_ADD, i32(13), I32_SHR_U);
  emit(END, END, I32_STORE16, 1, 0);
  quantizeBlock(0);
  emit(END);
  emit(advance(src, 128), advance(dst, 34), advance(b, 1), get(b), get(until), I32_LT_U, BR_IF, 0, END); // to $one
  emit(BR, 0, END, END, get(count), END); // to $next
  // local groups: 5 i32, 2 f32, 18 v128
  const body = [3, 5, 0x7f, 2, 0x7d, 18, 0x7b, ...code];
  return new Uint8Array([
    ...WASM_HEADER,
    ...wasmSection(1, [1, 0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f]), // type 0: (i32, i32, i32, i32) -> i32
    ...wasmSection(2, [1, ...wasmName("env"), ...wasmName("mem"), 0x02, 0x01, ...uleb(MEMORY_PAGES), ...uleb(MEMORY_PAGES)]), // memory of exactly MEMORY_PAGES
    ...wasmSection(3, [1, 0]), // function 0 has type 0
    ...wasmSection(7, [1, ...wasmName("q"), 0x00, 0]), // export function 0 as "q"
    ...wasmSection(10, [1, ...uleb(body.length), ...body]),
  ]);
}

interface Kernel {
  readonly run: (src: number, dst: number, blocks: number, list: number) => number;
  readonly memory: ArrayBuffer;
  /** Whether each slot is taken. */
  readonly taken: boolean[];
  readonly values: Float32Array;
  readonly blocks: Uint8Array;
  readonly list: Int32Array;
}

/** The instantiated module: null where it cannot run (no WebAssembly, no SIMD, a page's CSP), undefined before the first call. */
let kernel: Kernel | null | undefined;

function instantiate(): Kernel | null {
  if (kernel !== undefined) return kernel;
  const module = instantiateKernel(q8Module, MEMORY_PAGES);
  kernel = null;
  if (module === undefined) return null;
  // wasm loads are little-endian, the Float32Array copied in is the host's order (instantiateKernel
  // gives nothing on a big-endian host)
  const { exports, memory } = module;
  kernel = {
    run: exports.q as Kernel["run"],
    memory,
    taken: new Array<boolean>(SLOT_COUNT).fill(false),
    values: new Float32Array(memory, SRC, CHUNK_BLOCKS * 32),
    blocks: new Uint8Array(memory, DST, CHUNK_BLOCKS * 34),
    list: new Int32Array(memory, LIST, CHUNK_BLOCKS),
  };
  return kernel;
}

/** Whether {@link quantizeQ8_0Simd} runs here. */
export function hasQ8_0Simd(): boolean {
  return instantiate() !== null;
}

/**
 * A free slot of the module's memory, `bytes` (≤ {@link Q8_0_SLOT_BYTES}) long, for values that
 * {@link quantizeQ8_0Simd} reads where they lie or blocks it writes there; undefined where the
 * module cannot run or every slot is taken. Given back with {@link giveBackQ8_0Slot}.
 */
export function takeQ8_0Slot(bytes: number): Uint8Array | undefined {
  const k = instantiate();
  if (k === null || bytes > Q8_0_SLOT_BYTES) return undefined;
  const slot = k.taken.indexOf(false);
  if (slot < 0) return undefined;
  k.taken[slot] = true;
  return new Uint8Array(k.memory, SLOTS_AT + slot * Q8_0_SLOT_BYTES, bytes);
}

/** Gives back a slot {@link takeQ8_0Slot} gave (any view that starts at it); anything else is ignored. */
export function giveBackQ8_0Slot(view: Uint8Array): void {
  if (kernel === undefined || kernel === null || view.buffer !== kernel.memory) return;
  const slot = (view.byteOffset - SLOTS_AT) / Q8_0_SLOT_BYTES;
  if (Number.isInteger(slot) && slot >= 0 && slot < SLOT_COUNT) kernel.taken[slot] = false;
}

/**
 * Quantizes `blocks` blocks of `src` to Q8_0 into `dst`, as `quantizeQ8_0` does, with the module
 * (reading `src` and writing `dst` where they lie when they lie in its memory, else through it);
 * the blocks holding a NaN by `scalar` (the JavaScript kernel). False, having written nothing,
 * where the module cannot run.
 */
export function quantizeQ8_0Simd(
  src: Float32Array,
  dst: Uint8Array,
  blocks: number,
  scalar: (src: Float32Array, dst: Uint8Array, blocks: number) => void,
): boolean {
  const k = instantiate();
  if (k === null) return false;
  const inPlace = src.buffer === k.memory;
  const outInPlace = dst.buffer === k.memory;
  for (let first = 0; first < blocks; first += CHUNK_BLOCKS) {
    const n = Math.min(CHUNK_BLOCKS, blocks - first);
    if (!inPlace) k.values.set(src.subarray(first * 32, (first + n) * 32));
    const withNaN = k.run(inPlace ? src.byteOffset + first * 128 : SRC, outInPlace ? dst.byteOffset + first * 34 : DST, n, LIST);
    if (!outInPlace) dst.set(k.blocks.subarray(0, n * 34), first * 34);
    for (let i = 0; i < withNaN; i++) {
      const b = first + k.list[i]!;
      scalar(src.subarray(b * 32, b * 32 + 32), dst.subarray(b * 34, b * 34 + 34), 1);
    }
  }
  return true;
}
