/**
 * ggml's `make_qkx2_quants` loops in WebAssembly, for Q4_K and Q5_K. Scalar (any engine with
 * WebAssembly): the float32 running sums Σw·l, Σw·l², Σw·l·x (with their prefixes, kept for the next
 * candidate), Σw and Σw·x, Q4_K's Σx², and the error Σw·(s·l + m − x)² (or |…|). Each step of those
 * sums depends on the one before, and in JavaScript a float32 addition is an addition and two
 * conversions (`Math.fround`), three times the latency of wasm's `f32.add`; the operations and their
 * order are C's, so the bits are too. SIMD (where the engine has it): a candidate's levels anew,
 * which elements' levels can have grown since the last candidate, and x − min for a new min, 32
 * lanes at once (the last one, and L copied by `set`, took Q4_K from 425 to 390 ms per 4 Mi values).
 *
 * The loops work on arrays in the modules' memory, which kQuantize.ts fills through the views
 * {@link Qkx2Loops} gives. Where WebAssembly is missing or refused (a page's CSP), `qkx2Loops()`
 * returns plain arrays and no functions, and kQuantize.ts runs the same loops in JavaScript (and
 * where only SIMD is missing, those two).
 */
import { WASM_HEADER, type WebAssemblyApi, hostWebAssembly, uleb, wasmName, wasmSection } from "@st-convert/core";

/** The arrays the loops read and write (views of the module's memory, or plain arrays without it). */
export interface Qkx2Loops {
  /** make_qkx2's weights, float32 as C's `float weights[32]`. */
  readonly weights: Float32Array;
  /** The values of the group. */
  readonly values: Float32Array;
  /** The candidate's levels. */
  readonly levels: Uint8Array;
  /** The three sums before element i at [i] ([0] stays 0). */
  readonly prefixL: Float32Array;
  readonly prefixL2: Float32Array;
  readonly prefixXL: Float32Array;
  /** Σw and Σw·x over the first `n` (from the first element's, as C starts them), at [0] and [1]. */
  readonly totals: Float32Array;
  /** Σw and Σw·x into {@link totals}. */
  readonly sumTotals?: (n: number) => void;
  /** Σx² over the first `n` values. */
  readonly squares?: (n: number) => number;
  /** x − min of the 32 values, for {@link due}. */
  readonly shifted: Float32Array;
  /** Each level's l + ½ (∞ at the top level), for {@link due}. */
  readonly halfUp: Float32Array;
  /**
   * Bit i set where float32(iscale · shifted[i]) ≥ halfUp[i] (of 32 elements): the only ones whose
   * level can have grown. In WebAssembly SIMD, where it runs.
   */
  readonly due?: (iscale: number) => number;
  /**
   * All 32 levels anew for `iscale` (> 0): nearest_int(float32(iscale · shifted[i])) clamped to
   * 0..nmax into {@link levels}, with {@link halfUp}; returns the bits of the levels that changed.
   * In WebAssembly SIMD, where it runs.
   */
  readonly relevel?: (iscale: number, nmax: number) => number;
  /** x − min of the 32 values into {@link shifted}, as float32 subtractions. In WebAssembly SIMD, where it runs. */
  readonly shift?: (min: number) => void;
  /** Continues the prefixes from `first` to `n` (the sums of all n at [n]). */
  readonly sums?: (first: number, n: number) => void;
  /** The error of scale `s` and min `m` over the first `n` levels: squared, or absolute when `mad` is 1. */
  readonly error?: (s: number, m: number, n: number, mad: number) => number;
}

// byte offsets in the module's memory
const W = 0;
const X = 128;
const L = 256;
const PL = 288;
const PL2 = PL + 33 * 4;
const PXL = PL2 + 33 * 4;
const TOTALS = PXL + 33 * 4;
const SHIFTED = 1024;
const HALF_UP = SHIFTED + 128;

/**
 * The module: `sums(first, n)` and `error(s, m, n, mad)` over the arrays at W, X, L, PL, PL2, PXL
 * of memory imported as `env.mem`. As C writes them (ggml's make_qkx2_quants):
 *
 *     for (i = first; i < n; i++) { l = L[i]; wl = W[i]*l; sl += wl; sl2 += wl*l; sxl += wl*X[i]; P*[i+1] = … }
 *     for (i = 0; i < n; i++) { d = s*L[i] + m - X[i]; d = mad ? fabsf(d) : d*d; e += W[i]*d; } return e;
 *
 * and `totals(n)`, `squares(n)` (make_qkx2's Σw, Σw·x from its first element; quantize_row_q4_K's Σx²):
 *
 *     sw = W[0]; sx = sw*X[0]; for (i = 1; i < n; i++) { sw += W[i]; sx += W[i]*X[i]; } T[0] = sw; T[1] = sx;
 *     q = 0; for (i = 0; i < n; i++) q += X[i]*X[i]; return q;
 *
 * Opcodes and encodings: the WebAssembly core specification 2.0, §5.
 */
function loopsModule(): Uint8Array {
  const [BLOCK, LOOP, END, BR, BR_IF, SELECT, LOCAL_GET, LOCAL_SET, LOCAL_TEE] = [0x02, 0x03, 0x0b, 0x0c, 0x0d, 0x1b, 0x20, 0x21, 0x22];
  const [F32_LOAD, I32_LOAD8_U, F32_STORE, I32_CONST, I32_GE_U, I32_ADD, I32_SHL] = [0x2a, 0x2d, 0x38, 0x41, 0x4f, 0x6a, 0x74];
  const [F32_ABS, F32_ADD, F32_SUB, F32_MUL, F32_CONVERT_I32_U] = [0x8b, 0x92, 0x93, 0x94, 0xb3];
  const get = (local: number) => [LOCAL_GET, local];
  const set = (local: number) => [LOCAL_SET, local];
  // only small non-negative constants, whose signed LEB128 is their unsigned one
  const i32 = (value: number) => [I32_CONST, ...uleb(value)];
  // memargs: f32 at alignment 2^2, bytes at 2^0, then the offset
  const loadF32 = (offset: number) => [F32_LOAD, 2, ...uleb(offset)];
  const storeF32 = (offset: number) => [F32_STORE, 2, ...uleb(offset)];
  const loadU8 = (offset: number) => [I32_LOAD8_U, 0, ...uleb(offset)];
  // sums: params first (0), n (1); locals a (2, i32: 4·i), l (3), wl (4), sl (5), sl2 (6), sxl (7) (f32)
  const [i, n, a, l, wl, sl, sl2, sxl] = [0, 1, 2, 3, 4, 5, 6, 7];
  const sums = [
    ...[2, 1, 0x7f, 5, 0x7d],
    ...[...get(i), ...i32(2), I32_SHL, ...set(a)],
    ...[...get(a), ...loadF32(PL), ...set(sl), ...get(a), ...loadF32(PL2), ...set(sl2), ...get(a), ...loadF32(PXL), ...set(sxl)],
    ...[BLOCK, 0x40, LOOP, 0x40],
    ...[...get(i), ...get(n), I32_GE_U, BR_IF, 1],
    ...[...get(i), ...loadU8(L), F32_CONVERT_I32_U, ...set(l)],
    ...[...get(a), ...loadF32(W), ...get(l), F32_MUL, LOCAL_TEE, wl],
    ...[...get(sl), F32_ADD, ...set(sl)],
    ...[...get(sl2), ...get(wl), ...get(l), F32_MUL, F32_ADD, ...set(sl2)],
    ...[...get(sxl), ...get(wl), ...get(a), ...loadF32(X), F32_MUL, F32_ADD, ...set(sxl)],
    ...[...get(a), ...i32(4), I32_ADD, ...set(a), ...get(i), ...i32(1), I32_ADD, ...set(i)],
    ...[...get(a), ...get(sl), ...storeF32(PL), ...get(a), ...get(sl2), ...storeF32(PL2), ...get(a), ...get(sxl), ...storeF32(PXL)],
    ...[BR, 0, END, END, END],
  ];
  // error: params s (0), m (1) (f32), n (2), mad (3) (i32); locals i (4), a (5) (i32), d (6), e (7) (f32)
  const [s, m, count, mad, j, b, d, e] = [0, 1, 2, 3, 4, 5, 6, 7];
  const error = [
    ...[2, 2, 0x7f, 2, 0x7d],
    ...[BLOCK, 0x40, LOOP, 0x40],
    ...[...get(j), ...get(count), I32_GE_U, BR_IF, 1],
    ...[...get(s), ...get(j), ...loadU8(L), F32_CONVERT_I32_U, F32_MUL, ...get(m), F32_ADD, ...get(b), ...loadF32(X), F32_SUB, LOCAL_TEE, d],
    ...[F32_ABS, ...get(d), ...get(d), F32_MUL, ...get(mad), SELECT, ...set(d)],
    ...[...get(e), ...get(b), ...loadF32(W), ...get(d), F32_MUL, F32_ADD, ...set(e)],
    ...[...get(b), ...i32(4), I32_ADD, ...set(b), ...get(j), ...i32(1), I32_ADD, ...set(j)],
    ...[BR, 0, END, END],
    ...[...get(e), END],
  ];
  // totals: param n (0); locals a (1, i32: 4·i), sw (2), sx (3) (f32)
  const [tn, ta, sw, sx] = [0, 1, 2, 3];
  const totals = [
    ...[2, 1, 0x7f, 2, 0x7d],
    ...[...i32(0), ...loadF32(W), LOCAL_TEE, sw, ...i32(0), ...loadF32(X), F32_MUL, ...set(sx), ...i32(4), ...set(ta)],
    ...[BLOCK, 0x40, LOOP, 0x40],
    ...[...get(ta), ...get(tn), ...i32(2), I32_SHL, I32_GE_U, BR_IF, 1],
    ...[...get(sw), ...get(ta), ...loadF32(W), F32_ADD, ...set(sw)],
    ...[...get(sx), ...get(ta), ...loadF32(W), ...get(ta), ...loadF32(X), F32_MUL, F32_ADD, ...set(sx)],
    ...[...get(ta), ...i32(4), I32_ADD, ...set(ta)],
    ...[BR, 0, END, END],
    ...[...i32(0), ...get(sw), ...storeF32(TOTALS), ...i32(0), ...get(sx), ...storeF32(TOTALS + 4), END],
  ];
  // squares: param n (0); locals a (1, i32), q (2, f32)
  const [qn, qa, q] = [0, 1, 2];
  const squares = [
    ...[2, 1, 0x7f, 1, 0x7d],
    ...[BLOCK, 0x40, LOOP, 0x40],
    ...[...get(qa), ...get(qn), ...i32(2), I32_SHL, I32_GE_U, BR_IF, 1],
    ...[...get(q), ...get(qa), ...loadF32(X), ...get(qa), ...loadF32(X), F32_MUL, F32_ADD, ...set(q)],
    ...[...get(qa), ...i32(4), I32_ADD, ...set(qa)],
    ...[BR, 0, END, END],
    ...[...get(q), END],
  ];
  const code = (body: number[]) => [...uleb(body.length), ...body];
  return new Uint8Array([
    ...WASM_HEADER,
    // type 0: (i32, i32) -> (); type 1: (f32, f32, i32, i32) -> f32; type 2: (i32) -> (); type 3: (i32) -> f32
    ...wasmSection(1, [4, 0x60, 2, 0x7f, 0x7f, 0, 0x60, 4, 0x7d, 0x7d, 0x7f, 0x7f, 1, 0x7d, 0x60, 1, 0x7f, 0, 0x60, 1, 0x7f, 1, 0x7d]),
    ...wasmSection(2, [1, ...wasmName("env"), ...wasmName("mem"), 0x02, 0x01, 1, 1]), // one page
    ...wasmSection(3, [4, 0, 1, 2, 3]),
    ...wasmSection(7, [4, ...wasmName("sums"), 0x00, 0, ...wasmName("error"), 0x00, 1, ...wasmName("totals"), 0x00, 2, ...wasmName("squares"), 0x00, 3]),
    ...wasmSection(10, [4, ...code(sums), ...code(error), ...code(totals), ...code(squares)]),
  ]);
}

/**
 * The SIMD module, over the same memory: `due(iscale)`, per four lanes k = 0..7
 *
 *     i32x4.bitmask(f32x4.ge(f32x4.mul(splat iscale, v128.load SHIFTED+16k), v128.load HALF_UP+16k)) << 4k
 *
 * or-ed together; `shift(min)`, per four lanes v128.store SHIFTED+16k (f32x4.sub(v128.load X+16k,
 * splat min)); and `relevel(iscale, nmax)`, per four lanes l = clamp(trunc_sat(f32x4.nearest(
 * iscale · shifted)), 0, nmax) (nearest is round half to even, as nearest_int for the products
 * here, between 0 and nmax + 1), HALF_UP = l = nmax ? ∞ : l + ½, and per sixteen the levels
 * narrowed to bytes, compared with the old ones (i8x16.ne, bitmask) and stored.
 */
function simdModule(): Uint8Array {
  const [LOCAL_GET, LOCAL_SET, I32_CONST, F32_CONST, I32_SHL, I32_OR, END] = [0x20, 0x21, 0x41, 0x43, 0x74, 0x72, 0x0b];
  const simd = (opcode: number) => [0xfd, ...uleb(opcode)];
  const [V128_LOAD, V128_STORE, I32X4_SPLAT, F32X4_SPLAT, I8X16_NE, I32X4_EQ, F32X4_GE] = [
    simd(0x00),
    simd(0x0b),
    simd(0x11),
    simd(0x13),
    simd(0x24),
    simd(0x37),
    simd(0x46),
  ];
  const [V128_BITSELECT, I8X16_BITMASK, I8X16_NARROW_I16X8_U, F32X4_NEAREST, I16X8_NARROW_I32X4_U] = [
    simd(0x52),
    simd(0x64),
    simd(0x66),
    simd(0x6a),
    simd(0x86),
  ];
  const [I32X4_BITMASK, I32X4_MIN_S, I32X4_MAX_S, F32X4_ADD, F32X4_SUB, F32X4_MUL, I32X4_TRUNC_SAT_F32X4_S, F32X4_CONVERT_I32X4_S] = [
    simd(0xa4),
    simd(0xb6),
    simd(0xb8),
    simd(0xe4),
    simd(0xe5),
    simd(0xe6),
    simd(0xf8),
    simd(0xfa),
  ];
  const f32 = (value: number) => [F32_CONST, ...new Uint8Array(new Float32Array([value]).buffer)];
  const at = (offset: number) => [I32_CONST, 0, ...V128_LOAD, 4, ...uleb(offset)];
  // due: param iscale (0, f32); locals s (1, v128), mask (2, i32)
  const due = [2, 1, 0x7b, 1, 0x7f, LOCAL_GET, 0, ...F32X4_SPLAT, LOCAL_SET, 1];
  for (let k = 0; k < 8; k++) {
    due.push(LOCAL_GET, 1, ...at(SHIFTED + 16 * k), ...F32X4_MUL, ...at(HALF_UP + 16 * k), ...F32X4_GE, ...I32X4_BITMASK);
    if (k > 0) due.push(I32_CONST, 4 * k, I32_SHL, LOCAL_GET, 2, I32_OR);
    due.push(LOCAL_SET, 2);
  }
  due.push(LOCAL_GET, 2, END);
  // relevel: params iscale (0, f32), nmax (1, i32); locals s (2), top (3), l (4), q0..q3 (5–8) (v128), mask (9, i32)
  const relevel = [2, 7, 0x7b, 1, 0x7f, LOCAL_GET, 0, ...F32X4_SPLAT, LOCAL_SET, 2, LOCAL_GET, 1, ...I32X4_SPLAT, LOCAL_SET, 3];
  for (let k = 0; k < 8; k++) {
    relevel.push(LOCAL_GET, 2, ...at(SHIFTED + 16 * k), ...F32X4_MUL, ...F32X4_NEAREST, ...I32X4_TRUNC_SAT_F32X4_S);
    relevel.push(I32_CONST, 0, ...I32X4_SPLAT, ...I32X4_MAX_S, LOCAL_GET, 3, ...I32X4_MIN_S, LOCAL_SET, 4);
    // HALF_UP: bitselect(∞, l + ½, l = nmax)
    relevel.push(I32_CONST, 0, ...f32(Number.POSITIVE_INFINITY), ...F32X4_SPLAT);
    relevel.push(LOCAL_GET, 4, ...F32X4_CONVERT_I32X4_S, ...f32(0.5), ...F32X4_SPLAT, ...F32X4_ADD);
    relevel.push(LOCAL_GET, 4, LOCAL_GET, 3, ...I32X4_EQ, ...V128_BITSELECT, ...V128_STORE, 4, ...uleb(HALF_UP + 16 * k));
    relevel.push(LOCAL_GET, 4, LOCAL_SET, 5 + (k % 4));
    if (k % 4 === 3) {
      // sixteen levels as bytes: compared with the old, then stored
      const offset = L + 4 * (k - 3);
      relevel.push(I32_CONST, 0);
      relevel.push(LOCAL_GET, 5, LOCAL_GET, 6, ...I16X8_NARROW_I32X4_U, LOCAL_GET, 7, LOCAL_GET, 8, ...I16X8_NARROW_I32X4_U, ...I8X16_NARROW_I16X8_U);
      relevel.push(LOCAL_SET, 4, LOCAL_GET, 4, ...at(offset), ...I8X16_NE, ...I8X16_BITMASK);
      if (k === 7) relevel.push(I32_CONST, 16, I32_SHL, LOCAL_GET, 9, I32_OR);
      relevel.push(LOCAL_SET, 9, LOCAL_GET, 4, ...V128_STORE, 0, ...uleb(offset));
    }
  }
  relevel.push(LOCAL_GET, 9, END);
  // shift: param min (0, f32); local m (1, v128)
  const shift = [1, 1, 0x7b, LOCAL_GET, 0, ...F32X4_SPLAT, LOCAL_SET, 1];
  for (let k = 0; k < 8; k++) shift.push(I32_CONST, 0, ...at(X + 16 * k), LOCAL_GET, 1, ...F32X4_SUB, ...V128_STORE, 4, ...uleb(SHIFTED + 16 * k));
  shift.push(END);
  return new Uint8Array([
    ...WASM_HEADER,
    // type 0: (f32) -> i32; type 1: (f32, i32) -> i32; type 2: (f32) -> ()
    ...wasmSection(1, [3, 0x60, 1, 0x7d, 1, 0x7f, 0x60, 2, 0x7d, 0x7f, 1, 0x7f, 0x60, 1, 0x7d, 0]),
    ...wasmSection(2, [1, ...wasmName("env"), ...wasmName("mem"), 0x02, 0x01, 1, 1]),
    ...wasmSection(3, [3, 0, 1, 2]),
    ...wasmSection(7, [3, ...wasmName("due"), 0x00, 0, ...wasmName("relevel"), 0x00, 1, ...wasmName("shift"), 0x00, 2]),
    ...wasmSection(10, [3, ...uleb(due.length), ...due, ...uleb(relevel.length), ...relevel, ...uleb(shift.length), ...shift]),
  ]);
}

/** The SIMD module's functions, or none where SIMD is missing. */
function simdLoops(wasm: WebAssemblyApi, memory: object): Pick<Qkx2Loops, "due" | "relevel" | "shift"> {
  try {
    const { exports } = new wasm.Instance(new wasm.Module(simdModule()), { env: { mem: memory } });
    return { due: exports.due as Qkx2Loops["due"], relevel: exports.relevel as Qkx2Loops["relevel"], shift: exports.shift as Qkx2Loops["shift"] };
  } catch {
    return {};
  }
}

/** The loops' arrays, without their functions. */
export type Qkx2Arrays = Omit<Qkx2Loops, Qkx2FunctionName>;
type Qkx2FunctionName = "sumTotals" | "squares" | "due" | "relevel" | "shift" | "sums" | "error";
/** The loops' functions: none where WebAssembly cannot run. */
export type Qkx2Functions = Pick<Qkx2Loops, Qkx2FunctionName>;

/** Where each array's views were made: the memory the functions are instantiated over. */
const memories = new WeakMap<Qkx2Arrays, object>();

/**
 * The loops' arrays: views of a WebAssembly memory where it can be made (a 64 KiB memory, no
 * module compiled), else plain arrays. Cheap: a caller that may never quantize makes them at once
 * and leaves the functions ({@link qkx2Functions}) for its first use.
 */
export function qkx2Arrays(): Qkx2Arrays {
  const wasm = hostWebAssembly();
  let memory: { buffer: ArrayBuffer } | undefined;
  try {
    // Never grown: the views of it are never detached.
    memory = wasm === undefined ? undefined : (new wasm.Memory({ initial: 1, maximum: 1 }) as { buffer: ArrayBuffer });
  } catch {
    memory = undefined;
  }
  if (memory === undefined) {
    return {
      weights: new Float32Array(32),
      values: new Float32Array(32),
      levels: new Uint8Array(32),
      prefixL: new Float32Array(33),
      prefixL2: new Float32Array(33),
      prefixXL: new Float32Array(33),
      totals: new Float32Array(2),
      shifted: new Float32Array(32),
      halfUp: new Float32Array(32),
    };
  }
  const { buffer } = memory;
  const arrays: Qkx2Arrays = {
    weights: new Float32Array(buffer, W, 32),
    values: new Float32Array(buffer, X, 32),
    levels: new Uint8Array(buffer, L, 32),
    prefixL: new Float32Array(buffer, PL, 33),
    prefixL2: new Float32Array(buffer, PL2, 33),
    prefixXL: new Float32Array(buffer, PXL, 33),
    totals: new Float32Array(buffer, TOTALS, 2),
    shifted: new Float32Array(buffer, SHIFTED, 32),
    halfUp: new Float32Array(buffer, HALF_UP, 32),
  };
  memories.set(arrays, memory);
  return arrays;
}

/**
 * The functions over `arrays` (made by {@link qkx2Arrays}): the modules compiled and instantiated
 * over their memory, the SIMD ones where SIMD runs; none where WebAssembly cannot run (no memory,
 * or a page's CSP refusing the compilation).
 */
export function qkx2Functions(arrays: Qkx2Arrays): Qkx2Functions {
  const wasm = hostWebAssembly();
  const memory = memories.get(arrays);
  if (wasm === undefined || memory === undefined) return {};
  try {
    const { exports } = new wasm.Instance(new wasm.Module(loopsModule()), { env: { mem: memory } });
    return {
      sumTotals: exports.totals as Qkx2Loops["sumTotals"],
      squares: exports.squares as Qkx2Loops["squares"],
      ...simdLoops(wasm, memory),
      sums: exports.sums as Qkx2Loops["sums"],
      error: exports.error as Qkx2Loops["error"],
    };
  } catch {
    return {};
  }
}

/** The loops' arrays and functions at once: in WebAssembly where it runs, else plain arrays without functions. */
export function qkx2Loops(): Qkx2Loops {
  const arrays = qkx2Arrays();
  return { ...arrays, ...qkx2Functions(arrays) };
}
