/**
 * Element-wise dtype casts over typed arrays, bit-exact with torch's `Tensor.to(dtype)` on CPU
 * (torch 2.13, checked over every bit pattern of the 8- and 16-bit dtypes and seeded sets of
 * float32 and float64 values by `fixtures/casts`).
 *
 * Floats. Every float cast is torch's: the source is widened to float32 exactly (float64 is
 * rounded to float32 first, to nearest even, as the FPU does: so float64 → F16, BF16 or F8 rounds
 * twice, as torch does), then narrowed by torch's scalar conversion for the target (c10's
 * `round_to_nearest_even`, F16C's `vcvtps2ph`, the `fp8*_from_fp32_value` routines), or widened to
 * float64. What each target does with what it cannot hold:
 * - F16, BF16, F8_E5M2: overflow gives ±inf; F8_E4M3 (`float8_e4m3fn`, no inf): overflow and
 *   ±inf saturate to ±448; the fnuz dtypes: overflow, ±inf and NaN give 0x80 (their only NaN),
 *   and −0 gives +0; F8_E8M0 (powers of two, no sign): the sign is dropped, values round to the
 *   nearest power (ties up), 0 gives 2^-127, and overflow, ±inf and NaN give 0xFF (its NaN).
 * - NaN stays NaN: F16 keeps the sign and the top payload bits, quieted (`vcvtps2ph`); float32 ↔
 *   float64 keep them too (quieted, as the FPU does); BF16 gets the canonical 0x7FC0 (torch's
 *   scalar conversion: its AVX2/AVX512 kernels write 0xFFFF instead when the source is F32 or
 *   F64); F8_E4M3 and F8_E5M2 get 0x7F with the sign. Decoding: BF16 NaNs keep their bits,
 *   F16 and F8_E5M2 NaNs are quieted, the fnuz and E8M0 NaNs become 0x7F800001.
 *
 * Integers (BOOL, U8 … U64, I8 … I64): exact, or refused: a kernel returns the index of the first
 * element the target cannot hold (a BOOL holds 0 and 1; a BOOL source byte other than 0 or 1 is
 * refused too), where torch would wrap it.
 *
 * Kernels work on native-endian typed arrays over aligned bytes; the caller swaps bytes on a
 * big-endian host. No allocation per element: 8- and 16-bit sources go through a table of every
 * pattern's result (built once per pair), float32 sources to an 8-bit target through a table
 * indexed by the top 16 bits and whether the low 16 are zero (enough, since every 8-bit target
 * rounds at bit 19 or above), F16 and BF16 targets through integer loops (F32 → BF16, the cast
 * most conversions make, through WebAssembly SIMD where the engine has it). Where a runtime
 * installed `kernels.castFloats` (the native module under Node), the float loops of a call of
 * {@link NATIVE_CAST_FROM} elements or more run there instead, bit for bit the same.
 */
import type { Dtype } from "./dtypes.js";
import { CAST_OPS, kernels } from "./kernels.js";
import { StConvertError } from "./StConvertError.js";
import { LITTLE_ENDIAN } from "./swapBytes.js";
import { WASM_HEADER, hostWebAssembly, sleb, uleb, wasmName, wasmSection } from "./wasmBytes.js";

/** The float dtypes st-convert casts between. */
export const FLOAT_CAST_DTYPES = [
  "F64",
  "F32",
  "F16",
  "BF16",
  "F8_E4M3",
  "F8_E5M2",
  "F8_E4M3FNUZ",
  "F8_E5M2FNUZ",
  "F8_E8M0",
] as const satisfies readonly Dtype[];
/** The integer dtypes st-convert casts between (BOOL: 0 and 1). */
export const INTEGER_CAST_DTYPES = ["BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"] as const satisfies readonly Dtype[];

type FloatDtype = (typeof FLOAT_CAST_DTYPES)[number];
type IntegerDtype = (typeof INTEGER_CAST_DTYPES)[number];
type SmallFloat = Exclude<FloatDtype, "F64" | "F32">;

const floats = new Set<string>(FLOAT_CAST_DTYPES);
const integers = new Set<string>(INTEGER_CAST_DTYPES);

/** True for the dtypes a `BF16`-style rule (no source dtype) casts: F64, F32, F16, BF16 and the F8 family. */
export function isFloatCastDtype(dtype: string): dtype is FloatDtype {
  return floats.has(dtype);
}

/** True for BOOL, U8 … U64 and I8 … I64. */
export function isIntegerCastDtype(dtype: string): dtype is IntegerDtype {
  return integers.has(dtype);
}

/** True when st-convert casts `from` to `to`: float to float, integer to integer (identity included). */
export function canCast(from: Dtype, to: Dtype): boolean {
  return (isFloatCastDtype(from) && isFloatCastDtype(to)) || (isIntegerCastDtype(from) && isIntegerCastDtype(to));
}

/**
 * Casts `count` elements from `src` into `dst`, both native-endian and aligned to their element
 * size. Returns −1, or the index of the first element the target cannot hold (integers only;
 * elements before it are written, the rest are not).
 */
export type CastKernel = (src: Uint8Array, dst: Uint8Array, count: number) => number;

/**
 * A kernel casting `from` to `to`. Each call makes a new kernel (some keep scratch space).
 * `portable`: the JavaScript loops only, never the native ones (for tests that compare them).
 * @throws StConvertError `InvalidArgument` when {@link canCast} is false.
 */
export function castKernel(from: Dtype, to: Dtype, { portable = false }: { portable?: boolean } = {}): CastKernel {
  checkCastable(from, to);
  if (from === to && canCast(from, to)) {
    const width = WIDTH[from as FloatDtype | IntegerDtype];
    return (src, dst, count) => {
      dst.set(src.subarray(0, count * width));
      return -1;
    };
  }
  if (isFloatCastDtype(from) && isFloatCastDtype(to)) return floatKernel(from, to, portable ? (_, kernel) => kernel : withNative);
  return integerKernel(from as IntegerDtype, to as IntegerDtype);
}

/**
 * Refuses a pair st-convert does not cast.
 * @throws StConvertError `InvalidArgument` when {@link canCast} is false.
 */
export function checkCastable(from: Dtype, to: Dtype): void {
  if (canCast(from, to)) return;
  throw new StConvertError(
    "InvalidArgument",
    `st-convert does not cast ${from} to ${to}: casts go between float dtypes (${FLOAT_CAST_DTYPES.join(", ")}) or between integer dtypes (${INTEGER_CAST_DTYPES.join(", ")})`,
  );
}

// ------------------------------------------------------------------------------------- floats

/** Bytes per element. */
const WIDTH: Readonly<Record<FloatDtype | IntegerDtype, 1 | 2 | 4 | 8>> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  F8_E4M3: 1,
  F8_E5M2: 1,
  F8_E4M3FNUZ: 1,
  F8_E5M2FNUZ: 1,
  F8_E8M0: 1,
  BOOL: 1,
  U8: 1,
  I8: 1,
  U16: 2,
  I16: 2,
  U32: 4,
  I32: 4,
  U64: 8,
  I64: 8,
};

/**
 * How a small float lays out its bits and treats what it cannot hold. `ieee`: an all-ones
 * exponent holds ±inf and NaNs (F16, BF16, F8_E5M2); `fn`: no inf, the all-ones pattern is NaN and
 * overflow saturates (F8_E4M3); `fnuz`: no inf, no −0, 0x80 is the only NaN (overflow gives it).
 */
interface Layout {
  readonly width: 1 | 2;
  readonly mantissaBits: number;
  readonly bias: number;
  readonly kind: "ieee" | "fn" | "fnuz";
}

const LAYOUTS: Readonly<Record<Exclude<SmallFloat, "F8_E8M0">, Layout>> = {
  F16: { width: 2, mantissaBits: 10, bias: 15, kind: "ieee" },
  BF16: { width: 2, mantissaBits: 7, bias: 127, kind: "ieee" },
  F8_E5M2: { width: 1, mantissaBits: 2, bias: 15, kind: "ieee" },
  F8_E4M3: { width: 1, mantissaBits: 3, bias: 7, kind: "fn" },
  F8_E4M3FNUZ: { width: 1, mantissaBits: 3, bias: 8, kind: "fnuz" },
  F8_E5M2FNUZ: { width: 1, mantissaBits: 2, bias: 16, kind: "fnuz" },
};

/** float32 bits → bits of a small float, as torch's scalar conversion for that dtype computes them. */
type Encoder = (bits: number) => number;

const encoders = new Map<SmallFloat, Encoder>();

function encoderFor(to: SmallFloat): Encoder {
  let encode = encoders.get(to);
  if (encode === undefined) {
    encode = to === "F8_E8M0" ? encodeE8m0 : layoutEncoder(to, LAYOUTS[to]);
    encoders.set(to, encode);
  }
  return encode;
}

function layoutEncoder(dtype: SmallFloat, { width, mantissaBits: m, bias, kind }: Layout): Encoder {
  const signShift = width * 8 - 1;
  const exponentBits = width * 8 - 1 - m;
  const infinity = ((1 << exponentBits) - 1) << m;
  // The largest finite pattern; a result above it has overflowed.
  const largest = kind === "ieee" ? infinity - 1 : kind === "fn" ? 0x7e : 0x7f;
  const shift = 23 - m;
  const halfLess = (1 << (shift - 1)) - 1;
  const rebias = (127 - bias) << 23;
  // float32 bits of the target's smallest normal, 2^(1 − bias).
  const smallestNormal = (128 - bias) << 23;
  const nan = nanEncoder(dtype, kind);
  const overflow = (sign: number): number => (kind === "fnuz" ? 0x80 : (sign << signShift) | (kind === "ieee" ? infinity : largest));
  return (bits) => {
    const sign = bits >>> 31;
    const a = bits & 0x7fffffff;
    if (a > 0x7f800000) return nan(bits);
    if (a === 0x7f800000) return overflow(sign);
    let q: number;
    if (a >= smallestNormal) {
      // Rebiased, then rounded to nearest even at bit `shift`; a carry moves into the exponent.
      const r = a - rebias;
      q = (r + halfLess + ((r >>> shift) & 1)) >>> shift;
    } else {
      // The target's subnormals: the significand (implicit bit included) scaled to their unit.
      const e = a >>> 23;
      const significand = e === 0 ? a : (a & 0x7fffff) | 0x800000;
      const s = 151 - bias - m - (e === 0 ? 1 : e);
      if (s > 25) {
        q = 0;
      } else {
        q = significand >>> s;
        const rest = significand & ((1 << s) - 1);
        const half = 1 << (s - 1);
        if (rest > half || (rest === half && (q & 1) === 1)) q++;
      }
    }
    if (q > largest) return overflow(sign);
    if (kind === "fnuz" && q === 0) return 0;
    return (sign << signShift) | q;
  };
}

function nanEncoder(dtype: SmallFloat, kind: Layout["kind"]): Encoder {
  if (dtype === "F16") return (bits) => ((bits >>> 16) & 0x8000) | 0x7e00 | ((bits >>> 13) & 0x3ff);
  if (dtype === "BF16") return () => 0x7fc0;
  if (kind === "fnuz") return () => 0x80;
  return (bits) => ((bits >>> 24) & 0x80) | 0x7f;
}

/**
 * F8_E8M0 (`float8_e8m0fnu`): the float32 exponent, plus one when the mantissa rounds up
 * (guard bit set and round, sticky or the implicit bit set: ties round up from normals). The sign
 * is ignored; 254 rounding up gives 255, the NaN.
 */
function encodeE8m0(bits: number): number {
  const exponent = (bits >>> 23) & 0xff;
  if (exponent === 0xff) return 0xff;
  const guard = bits & 0x400000;
  const roundUp = guard !== 0 && ((bits & 0x3fffff) !== 0 || exponent > 0);
  return exponent + (roundUp ? 1 : 0);
}

/** Bits of a small float → float32 bits (unsigned), exact; NaNs as torch decodes them. */
function decodeToF32(from: SmallFloat, x: number): number {
  if (from === "BF16") return (x << 16) >>> 0;
  if (from === "F8_E8M0") {
    if (x === 0xff) return 0x7f800001;
    return x === 0 ? 0x00400000 : (x << 23) >>> 0;
  }
  const { width, mantissaBits: m, bias, kind } = LAYOUTS[from];
  const signBit = width === 2 ? 0x8000 : 0x80;
  const sign = x & signBit ? 0x80000000 : 0;
  const exponentMask = (1 << (width * 8 - 1 - m)) - 1;
  const exponent = (x >>> m) & exponentMask;
  const mantissa = x & ((1 << m) - 1);
  if (kind === "fnuz" && x === 0x80) return 0x7f800001;
  if (kind === "fn" && (x & 0x7f) === 0x7f) return (sign | 0x7f800000 | (mantissa << 20)) >>> 0;
  if (kind === "ieee" && exponent === exponentMask) {
    // F16 (and F8_E5M2, which torch decodes as the top byte of an F16): F16C quiets NaNs.
    return (sign | 0x7f800000 | (mantissa === 0 ? 0 : 0x400000 | (mantissa << (23 - m)))) >>> 0;
  }
  const magnitude = exponent === 0 ? mantissa * 2 ** (1 - bias - m) : (2 ** m + mantissa) * 2 ** (exponent - bias - m);
  return f32Bits(sign ? -magnitude : magnitude);
}

const scratch = new ArrayBuffer(8);
const scratchF32 = new Float32Array(scratch, 0, 1);
const scratchU32 = new Uint32Array(scratch, 0, 2);
const scratchF64 = new Float64Array(scratch, 0, 1);

/** float32 bits of a value float32 holds exactly (not NaN). */
function f32Bits(value: number): number {
  scratchF32[0] = value;
  return scratchU32[0]!;
}

/** float64 bits [lo, hi] of float32 bits: exact; a NaN keeps its sign and payload, quieted (`cvtss2sd`). */
function f32ToF64Words(bits: number, out: Uint32Array, at: number): void {
  if ((bits & 0x7fffffff) > 0x7f800000) {
    const payload = bits & 0x7fffff;
    out[at] = (payload & 7) << 29;
    out[at + 1] = (bits & 0x80000000) | 0x7ff80000 | (payload >>> 3);
    return;
  }
  scratchU32[0] = bits;
  scratchF64[0] = scratchF32[0]!;
  out[at] = scratchU32[0]!;
  out[at + 1] = scratchU32[1]!;
}

type Table = Uint8Array | Uint16Array | Uint32Array;

const tables = new Map<string, Table>();

/** The result of every pattern of an 8- or 16-bit float: one entry each (two words for F64). */
function patternTable(from: SmallFloat, to: FloatDtype): Table {
  const key = `${from}>${to}`;
  let table = tables.get(key);
  if (table !== undefined) return table;
  const patterns = WIDTH[from] === 2 ? 0x10000 : 0x100;
  if (to === "F64") {
    const words = new Uint32Array(patterns * 2);
    for (let x = 0; x < patterns; x++) f32ToF64Words(decodeToF32(from, x), words, 2 * x);
    table = words;
  } else if (to === "F32") {
    table = new Uint32Array(patterns);
    for (let x = 0; x < patterns; x++) table[x] = decodeToF32(from, x);
  } else {
    const encode = encoderFor(to);
    table = WIDTH[to] === 2 ? new Uint16Array(patterns) : new Uint8Array(patterns);
    for (let x = 0; x < patterns; x++) table[x] = encode(decodeToF32(from, x));
  }
  tables.set(key, table);
  return table;
}

/**
 * float32 → 8-bit target, indexed by `(bits >>> 16) << 1 | (low 16 bits ≠ 0)`: every 8-bit
 * target rounds at bit 19 or above (E4M3 normals; subnormals and E5M2, E8M0 higher), so the low
 * 16 bits only count as sticky, and a NaN's low payload bits only tell it from inf.
 */
function f32ByteTable(to: SmallFloat): Uint8Array {
  const key = `F32>${to}`;
  let table = tables.get(key) as Uint8Array | undefined;
  if (table !== undefined) return table;
  const encode = encoderFor(to);
  table = new Uint8Array(0x20000);
  for (let i = 0; i < 0x20000; i++) table[i] = encode(((i >>> 1) << 16) | (i & 1));
  tables.set(key, table);
  return table;
}

/**
 * Elements from which a float cast runs in `kernels.castFloats` (kernels.ts) when a runtime installed
 * it (the native module under Node: 5–10× the JavaScript's speed); below it, the call costs
 * more than it saves.
 */
export const NATIVE_CAST_FROM = 256;

/**
 * `portable`, or the native loop `op` (over `table`'s bytes, for the table ops) for calls of
 * {@link NATIVE_CAST_FROM} elements or more when it is installed: looked up at each call, so a
 * kernel made before the native module loaded still uses it.
 */
function withNative(op: number, portable: CastKernel, table?: Table): CastKernel {
  const bytes = table === undefined ? undefined : new Uint8Array(table.buffer, table.byteOffset, table.byteLength);
  return (src, dst, count) => {
    const run = kernels.castFloats;
    if (run === undefined || count < NATIVE_CAST_FROM) return portable(src, dst, count);
    run(op, src, dst, count, bytes);
    return -1;
  };
}

/** {@link withNative}, or a stand-in that keeps the portable kernel. */
type Wrap = (op: number, portable: CastKernel, table?: Table) => CastKernel;

function floatKernel(from: FloatDtype, to: FloatDtype, wrap: Wrap): CastKernel {
  if (from === "F64") {
    const f64ToF32Kernel = wrap(CAST_OPS.f64ToF32, f64ToF32);
    if (to === "F32") return f64ToF32Kernel;
    // Rounded to float32 first, as torch does, into scratch space reused between calls.
    const narrow = floatKernel("F32", to, wrap);
    let staged = new Uint8Array(0);
    return (src, dst, count) => {
      if (staged.byteLength < count * 4) staged = new Uint8Array(count * 4);
      f64ToF32Kernel(src, staged, count);
      return narrow(staged, dst, count);
    };
  }
  if (from === "F32") {
    if (to === "F64") return wrap(CAST_OPS.f32ToF64, f32ToF64);
    if (to === "BF16") return wrap(CAST_OPS.f32ToBf16, simdF32ToBf16() ?? f32ToBf16);
    if (to === "F16") return wrap(CAST_OPS.f32ToF16, f32ToF16Kernel());
    const table = f32ByteTable(to as SmallFloat);
    return wrap(CAST_OPS.f32ToByte, f32ToByteKernel(table), table);
  }
  if (from === "BF16" && to === "F32") return wrap(CAST_OPS.bf16ToF32, bf16ToF32);
  const table = patternTable(from, to);
  return wrap(WIDTH[from] === 2 ? CAST_OPS.halfTable : CAST_OPS.byteTable, tableKernel(table, WIDTH[from], to === "F64"), table);
}

/**
 * BF16 is the top half of a float32: a shift, NaNs included (torch keeps their bits too). On a
 * little-endian host, two halves per 32-bit load and four results per iteration: 1.3–1.7× the
 * speed of one element per step (Node 20, 256 MiB in 2 MiB chunks).
 */
const bf16ToF32: CastKernel = (src, dst, count) => {
  const halves = new Uint16Array(src.buffer, src.byteOffset, count);
  const out = new Int32Array(dst.buffer, dst.byteOffset, count);
  let i = 0;
  if (LITTLE_ENDIAN && count >= 4) {
    if ((src.byteOffset & 3) !== 0) {
      out[0] = halves[0]! << 16;
      i = 1;
    }
    const quads = (count - i) >>> 2;
    const words = new Int32Array(src.buffer, src.byteOffset + 2 * i, 2 * quads);
    for (let j = 0; j < quads; j++, i += 4) {
      const w = words[2 * j]!;
      const v = words[2 * j + 1]!;
      out[i] = w << 16;
      out[i + 1] = w & 0xffff0000;
      out[i + 2] = v << 16;
      out[i + 3] = v & 0xffff0000;
    }
  }
  for (; i < count; i++) out[i] = halves[i]! << 16;
  return -1;
};

const f64ToF32: CastKernel = (src, dst, count) => {
  const values = new Float64Array(src.buffer, src.byteOffset, count);
  const words = new Uint32Array(src.buffer, src.byteOffset, count * 2);
  const out = new Float32Array(dst.buffer, dst.byteOffset, count);
  const outBits = new Uint32Array(dst.buffer, dst.byteOffset, count);
  for (let i = 0; i < count; i++) {
    const x = values[i]!;
    if (x === x) {
      // Rounds to nearest even (the store is `cvtsd2ss`); ±inf and values past float32 give ±inf.
      out[i] = x;
    } else {
      // A NaN's bits are made by hand: engines need not keep a NaN's payload through a number.
      const hi = words[2 * i + 1]!;
      outBits[i] = (hi & 0x80000000) | 0x7fc00000 | ((hi & 0xfffff) << 3) | (words[2 * i]! >>> 29);
    }
  }
  return -1;
};

const f32ToF64: CastKernel = (src, dst, count) => {
  const values = new Float32Array(src.buffer, src.byteOffset, count);
  const bits = new Uint32Array(src.buffer, src.byteOffset, count);
  const out = new Float64Array(dst.buffer, dst.byteOffset, count);
  const outWords = new Uint32Array(dst.buffer, dst.byteOffset, count * 2);
  for (let i = 0; i < count; i++) {
    const x = values[i]!;
    if (x === x) out[i] = x;
    else f32ToF64Words(bits[i]!, outWords, 2 * i);
  }
  return -1;
};

/**
 * c10's `round_to_nearest_even`: add 0x7FFF plus the lowest kept bit, keep the top half. Int32
 * lanes keep every step in 32-bit integer arithmetic; the sum cannot wrap: the largest non-NaN
 * magnitude, inf (0x7F800000), plus 0x8000 is below 2^31, and a set sign bit carries out.
 *
 * On a little-endian host, four elements per iteration and two results per 32-bit store, from a
 * 4-byte-aligned output position: 1.2–1.4× the speed of two per iteration, 1.4× that of one per
 * 16-bit store (Node 20, 256 MiB in 2 MiB chunks). A group holding a NaN goes element by element. `x & 0x7FFFFFFF` minus 0x7F800001 is negative
 * unless `x` is a NaN, so the AND of four such differences is negative exactly when none is.
 */
export const f32ToBf16: CastKernel = (src, dst, count) => {
  const bits = new Int32Array(src.buffer, src.byteOffset, count);
  const out = new Uint16Array(dst.buffer, dst.byteOffset, count);
  let i = 0;
  if (LITTLE_ENDIAN && count >= 4) {
    if ((dst.byteOffset & 3) !== 0) i = f32ToBf16Each(bits, out, 0, 1);
    const quads = (count - i) >>> 2;
    const words = new Int32Array(dst.buffer, dst.byteOffset + 2 * i, 2 * quads);
    for (let j = 0; j < quads; j++, i += 4) {
      const a = bits[i]!;
      const b = bits[i + 1]!;
      const c = bits[i + 2]!;
      const d = bits[i + 3]!;
      if ((((a & 0x7fffffff) - 0x7f800001) & ((b & 0x7fffffff) - 0x7f800001) & ((c & 0x7fffffff) - 0x7f800001) & ((d & 0x7fffffff) - 0x7f800001)) >= 0) {
        f32ToBf16Each(bits, out, i, i + 4);
      } else {
        words[2 * j] = (((a + 0x7fff + ((a >>> 16) & 1)) | 0) >>> 16) | ((b + 0x7fff + ((b >>> 16) & 1)) & 0xffff0000);
        words[2 * j + 1] = (((c + 0x7fff + ((c >>> 16) & 1)) | 0) >>> 16) | ((d + 0x7fff + ((d >>> 16) & 1)) & 0xffff0000);
      }
    }
  }
  f32ToBf16Each(bits, out, i, count);
  return -1;
};

/** {@link f32ToBf16} one element at a time, `[from, to)`; NaNs give 0x7FC0. Returns `to`. */
function f32ToBf16Each(bits: Int32Array, out: Uint16Array, from: number, to: number): number {
  for (let i = from; i < to; i++) {
    const u = bits[i]!;
    out[i] = (u & 0x7fffffff) > 0x7f800000 ? 0x7fc0 : ((u + 0x7fff + ((u >>> 16) & 1)) | 0) >>> 16;
  }
  return to;
}

// ----------------------------------------------------------------- F32 → BF16 in WebAssembly

/**
 * Elements per block copied through the SIMD kernel's memory: 256 KiB in, 128 KiB out. Blocks
 * this small stay in cache between the copy in, the kernel and the copy out (4 MiB blocks took a
 * quarter longer); much smaller ones make more garbage (two views a block): 32 KiB blocks raised
 * the peak memory of a 1 GiB cast by 18 MiB.
 */
const SIMD_BLOCK = 65536;
/** 64 KiB pages of the SIMD kernel's memory: a block in, its output after it. */
const SIMD_PAGES = (SIMD_BLOCK * 6) / 65536;

/** The SIMD kernel, once made: `null` when this engine cannot run it. */
let simdBf16: CastKernel | null | undefined;

/**
 * F32 → BF16 eight elements at a time in WebAssembly SIMD (i32x4), copied in and out of the
 * module's memory a block at a time: the arithmetic of {@link f32ToBf16}, lane for lane (i32x4
 * adds wrap as `| 0` does; a NaN lane is selected to 0x7FC0 after the sum), at 2–3× its speed
 * (Node 20, 256 MiB of F32 in 2 MiB chunks, copies included). The blocks' memory is shared by every kernel this
 * returns: a call copies its output out before it returns, and calls never interleave.
 * Undefined on a big-endian host (wasm loads are little-endian, the kernel's arrays native), and
 * where WebAssembly or its SIMD is missing or refused (a page's CSP): the integer loop serves.
 */
export function simdF32ToBf16(): CastKernel | undefined {
  if (simdBf16 === undefined) simdBf16 = makeSimdF32ToBf16();
  return simdBf16 ?? undefined;
}

function makeSimdF32ToBf16(): CastKernel | null {
  const wasm = hostWebAssembly();
  if (wasm === undefined) return null;
  let run: (src: number, dst: number, end: number) => void;
  let heap: Uint8Array;
  try {
    // Never grown: the view of it is never detached.
    const memory = new wasm.Memory({ initial: SIMD_PAGES, maximum: SIMD_PAGES });
    const instance = new wasm.Instance(new wasm.Module(bf16Module()), { env: { memory } });
    run = instance.exports.run as typeof run;
    heap = new Uint8Array(memory.buffer);
  } catch {
    return null;
  }
  const output = SIMD_BLOCK * 4;
  return (src, dst, count) => {
    let at = 0;
    while (count - at >= 8) {
      const n = Math.min(SIMD_BLOCK, (count - at) & ~7);
      heap.set(src.subarray(at * 4, (at + n) * 4), 0);
      run(0, output, n * 4);
      dst.set(heap.subarray(output, output + n * 2), at * 2);
      at += n;
    }
    if (at < count) f32ToBf16(src.subarray(at * 4), dst.subarray(at * 2), count - at);
    return -1;
  };
}

/**
 * The module: `run(src, dst, end)` casts the float32s at [src, end) (a positive multiple of 32
 * bytes) to BF16 at dst, in memory imported as `env.memory`. Per eight elements, as WAT:
 *
 *     loop
 *       local.get $dst
 *       (v128.load offset=0 (local.get $src))  ROUND
 *       (v128.load offset=16 (local.get $src)) ROUND
 *       i8x16.shuffle 2 3 6 7 10 11 14 15 18 19 22 23 26 27 30 31   ;; the top half of each lane
 *       v128.store
 *       $src += 32, $dst += 16; br_if 0 ($src <u $end)
 *     end
 *
 * where ROUND, on v, is `bitselect(splat 0x7FC00000, v + splat 0x7FFF + ((v >>u 16) & splat 1),
 * (v & splat 0x7FFFFFFF) >s splat 0x7F800000)`. Opcodes and encodings: the WebAssembly core
 * specification 2.0, §5 (binary format; SIMD instructions are 0xFD and a LEB128 opcode).
 */
function bf16Module(): Uint8Array {
  const [LOOP, END, BR_IF, LOCAL_GET, LOCAL_SET, I32_CONST, I32_LT_U, I32_ADD] = [0x03, 0x0b, 0x0d, 0x20, 0x21, 0x41, 0x49, 0x6a];
  const simd = (opcode: number) => [0xfd, ...uleb(opcode)];
  const [V128_LOAD, V128_STORE, I8X16_SHUFFLE, I32X4_SPLAT, I32X4_GT_S] = [simd(0x00), simd(0x0b), simd(0x0d), simd(0x11), simd(0x3b)];
  const [V128_AND, V128_BITSELECT, I32X4_SHR_U, I32X4_ADD] = [simd(0x4e), simd(0x52), simd(0xad), simd(0xae)];
  const [src, dst, end, v] = [0, 1, 2, 3];
  const get = (local: number) => [LOCAL_GET, local];
  const i32 = (value: number) => [I32_CONST, ...sleb(value)];
  const splat = (value: number) => [...i32(value), ...I32X4_SPLAT];
  // memarg: alignment 2^4, then the offset.
  const load = (offset: number) => [...get(src), ...V128_LOAD, 4, offset];
  const round = [
    ...[LOCAL_SET, v],
    ...splat(0x7fc00000),
    ...[...get(v), ...splat(0x7fff), ...I32X4_ADD],
    ...[...get(v), ...i32(16), ...I32X4_SHR_U, ...splat(1), ...V128_AND, ...I32X4_ADD],
    ...[...get(v), ...splat(0x7fffffff), ...V128_AND, ...splat(0x7f800000), ...I32X4_GT_S],
    ...V128_BITSELECT,
  ];
  const advance = (local: number, by: number) => [...get(local), ...i32(by), I32_ADD, LOCAL_SET, local];
  const body = [
    ...[1, 1, 0x7b], // locals: one v128
    ...[LOOP, 0x40],
    ...get(dst),
    ...load(0),
    ...round,
    ...load(16),
    ...round,
    ...[...I8X16_SHUFFLE, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31],
    ...[...V128_STORE, 4, 0],
    ...advance(src, 32),
    ...advance(dst, 16),
    ...[...get(src), ...get(end), I32_LT_U, BR_IF, 0],
    ...[END, END],
  ];
  return new Uint8Array([
    ...WASM_HEADER,
    ...wasmSection(1, [1, 0x60, 3, 0x7f, 0x7f, 0x7f, 0]), // type 0: (i32, i32, i32) -> ()
    ...wasmSection(2, [1, ...wasmName("env"), ...wasmName("memory"), 0x02, 0x01, ...uleb(SIMD_PAGES), ...uleb(SIMD_PAGES)]), // memory of exactly SIMD_PAGES
    ...wasmSection(3, [1, 0]), // function 0 has type 0
    ...wasmSection(7, [1, ...wasmName("run"), 0x00, 0]), // export function 0 as "run"
    ...wasmSection(10, [1, ...uleb(body.length), ...body]),
  ]);
}

/** float32 magnitudes (bits) whose F16 is normal and finite: 2^-14 ≤ |x| < 65520. */
const F16_NORMAL_LOW = 0x38800000;
const F16_NORMAL_END = 0x477ff000;

/**
 * Normal F16 results inline (rebiased, rounded to nearest even at bit 13), the rest (subnormal,
 * overflow, NaN) by the encoder. On a little-endian host four elements per iteration and two
 * results per 32-bit store, as {@link f32ToBf16}: a group is inline when the OR of the four
 * `magnitude − low` is not negative (all at or above it) and the AND of the four
 * `magnitude − end` is negative (all below it). 1.0–1.3× the speed of one element per step (Node 20).
 */
function f32ToF16Kernel(): CastKernel {
  const encode = encoderFor("F16");
  const each = (bits: Int32Array, out: Uint16Array, from: number, to: number): number => {
    for (let i = from; i < to; i++) {
      const u = bits[i]!;
      const a = u & 0x7fffffff;
      if (a >= F16_NORMAL_LOW && a < F16_NORMAL_END) {
        const r = a - 0x38000000;
        out[i] = ((u >>> 16) & 0x8000) | ((r + 0xfff + ((r >>> 13) & 1)) >>> 13);
      } else {
        out[i] = encode(u);
      }
    }
    return to;
  };
  return (src, dst, count) => {
    const bits = new Int32Array(src.buffer, src.byteOffset, count);
    const out = new Uint16Array(dst.buffer, dst.byteOffset, count);
    let i = 0;
    if (LITTLE_ENDIAN && count >= 4) {
      if ((dst.byteOffset & 3) !== 0) i = each(bits, out, 0, 1);
      const quads = (count - i) >>> 2;
      const words = new Int32Array(dst.buffer, dst.byteOffset + 2 * i, 2 * quads);
      for (let j = 0; j < quads; j++, i += 4) {
        const a = bits[i]!;
        const b = bits[i + 1]!;
        const c = bits[i + 2]!;
        const d = bits[i + 3]!;
        const ma = a & 0x7fffffff;
        const mb = b & 0x7fffffff;
        const mc = c & 0x7fffffff;
        const md = d & 0x7fffffff;
        if (
          ((ma - F16_NORMAL_LOW) | (mb - F16_NORMAL_LOW) | (mc - F16_NORMAL_LOW) | (md - F16_NORMAL_LOW)) < 0 ||
          ((ma - F16_NORMAL_END) & (mb - F16_NORMAL_END) & (mc - F16_NORMAL_END) & (md - F16_NORMAL_END)) >= 0
        ) {
          each(bits, out, i, i + 4);
        } else {
          const ra = ma - 0x38000000;
          const rb = mb - 0x38000000;
          const rc = mc - 0x38000000;
          const rd = md - 0x38000000;
          words[2 * j] =
            ((a >>> 16) & 0x8000) | ((ra + 0xfff + ((ra >>> 13) & 1)) >>> 13) | ((((b >>> 16) & 0x8000) | ((rb + 0xfff + ((rb >>> 13) & 1)) >>> 13)) << 16);
          words[2 * j + 1] =
            ((c >>> 16) & 0x8000) | ((rc + 0xfff + ((rc >>> 13) & 1)) >>> 13) | ((((d >>> 16) & 0x8000) | ((rd + 0xfff + ((rd >>> 13) & 1)) >>> 13)) << 16);
        }
      }
    }
    each(bits, out, i, count);
    return -1;
  };
}

function f32ToByteKernel(table: Uint8Array): CastKernel {
  return (src, dst, count) => {
    const bits = new Uint32Array(src.buffer, src.byteOffset, count);
    for (let i = 0; i < count; i++) {
      const u = bits[i]!;
      dst[i] = table[((u >>> 16) << 1) | ((u & 0xffff) === 0 ? 0 : 1)]!;
    }
    return -1;
  };
}

function tableKernel(table: Table, width: number, wide: boolean): CastKernel {
  return (src, dst, count) => {
    const patterns = width === 2 ? new Uint16Array(src.buffer, src.byteOffset, count) : src.subarray(0, count);
    if (wide) {
      const out = new Uint32Array(dst.buffer, dst.byteOffset, count * 2);
      for (let i = 0; i < count; i++) {
        const x = 2 * patterns[i]!;
        out[2 * i] = table[x]!;
        out[2 * i + 1] = table[x + 1]!;
      }
      return -1;
    }
    if (table instanceof Uint32Array && width === 2) return halfToWord(new Int32Array(table.buffer, table.byteOffset, table.length), src, dst, count);
    const out =
      table instanceof Uint32Array
        ? new Uint32Array(dst.buffer, dst.byteOffset, count)
        : table instanceof Uint16Array
          ? new Uint16Array(dst.buffer, dst.byteOffset, count)
          : dst;
    for (let i = 0; i < count; i++) out[i] = table[patterns[i]!]!;
    return -1;
  };
}

/**
 * A 16-bit source through a table of 32-bit results (F16 → F32). On a little-endian host, two
 * patterns per 32-bit load and four results per iteration (1.2–1.4× the speed of one per step,
 * on Node 20); Int32 lanes, so no result is boxed as a number above 2^31.
 */
function halfToWord(table: Int32Array, src: Uint8Array, dst: Uint8Array, count: number): number {
  const patterns = new Uint16Array(src.buffer, src.byteOffset, count);
  const out = new Int32Array(dst.buffer, dst.byteOffset, count);
  let i = 0;
  if (LITTLE_ENDIAN && count >= 4) {
    if ((src.byteOffset & 3) !== 0) {
      out[0] = table[patterns[0]!]!;
      i = 1;
    }
    const quads = (count - i) >>> 2;
    const words = new Int32Array(src.buffer, src.byteOffset + 2 * i, 2 * quads);
    for (let j = 0; j < quads; j++, i += 4) {
      const w = words[2 * j]!;
      const v = words[2 * j + 1]!;
      out[i] = table[w & 0xffff]!;
      out[i + 1] = table[w >>> 16]!;
      out[i + 2] = table[v & 0xffff]!;
      out[i + 3] = table[v >>> 16]!;
    }
  }
  for (; i < count; i++) out[i] = table[patterns[i]!]!;
  return -1;
}

// ----------------------------------------------------------------------------------- integers

/** The smallest and largest value of each integer dtype (exact as numbers: used only with values below 2^53). */
export const INTEGER_RANGES: Readonly<Record<IntegerDtype, readonly [bigint, bigint]>> = {
  BOOL: [0n, 1n],
  U8: [0n, 255n],
  I8: [-128n, 127n],
  U16: [0n, 65535n],
  I16: [-32768n, 32767n],
  U32: [0n, 4294967295n],
  I32: [-2147483648n, 2147483647n],
  U64: [0n, 18446744073709551615n],
  I64: [-9223372036854775808n, 9223372036854775807n],
};

type IntArray = Uint8Array | Int8Array | Uint16Array | Int16Array | Uint32Array | Int32Array;

function narrowView(dtype: IntegerDtype, bytes: Uint8Array, count: number): IntArray {
  const { buffer, byteOffset } = bytes;
  switch (dtype) {
    case "I8":
      return new Int8Array(buffer, byteOffset, count);
    case "U16":
      return new Uint16Array(buffer, byteOffset, count);
    case "I16":
      return new Int16Array(buffer, byteOffset, count);
    case "U32":
      return new Uint32Array(buffer, byteOffset, count);
    case "I32":
      return new Int32Array(buffer, byteOffset, count);
    default:
      return bytes.subarray(0, count);
  }
}

function integerKernel(from: IntegerDtype, to: IntegerDtype): CastKernel {
  const [lo, hi] = INTEGER_RANGES[to];
  // Bounds as numbers for sources below 64 bits (whose values are exact numbers); a 64-bit
  // target holds every value of a narrower source of the same signedness.
  const min = WIDTH[to] === 8 ? (to === "U64" ? 0 : Number.NEGATIVE_INFINITY) : Number(lo);
  const max = WIDTH[to] === 8 ? Number.POSITIVE_INFINITY : Number(hi);
  const wideOut = WIDTH[to] === 8;
  if (WIDTH[from] < 8) {
    const sourceMax = from === "BOOL" ? 1 : Number.POSITIVE_INFINITY;
    return (src, dst, count) => {
      const values = narrowView(from, src, count);
      if (wideOut) {
        const words = new Int32Array(dst.buffer, dst.byteOffset, count * 2);
        for (let i = 0; i < count; i++) {
          const v = values[i]!;
          if (v < min || v > sourceMax) return i;
          words[2 * i] = v;
          words[2 * i + 1] = v < 0 ? -1 : 0;
        }
        return -1;
      }
      const out = narrowView(to, dst, count);
      for (let i = 0; i < count; i++) {
        const v = values[i]!;
        if (v < min || v > max || v > sourceMax) return i;
        out[i] = v;
      }
      return -1;
    };
  }
  const signed = from === "I64";
  return (src, dst, count) => {
    const words = new Int32Array(src.buffer, src.byteOffset, count * 2);
    if (wideOut) {
      // I64 ↔ U64: the top bit must be clear either way.
      const out = new Int32Array(dst.buffer, dst.byteOffset, count * 2);
      for (let i = 0; i < count; i++) {
        const high = words[2 * i + 1]!;
        if (high < 0) return i;
        out[2 * i] = words[2 * i]!;
        out[2 * i + 1] = high;
      }
      return -1;
    }
    const out = narrowView(to, dst, count);
    for (let i = 0; i < count; i++) {
      const low = words[2 * i]!;
      const high = words[2 * i + 1]!;
      // The value as a number when it is within 32 bits (either sign), else out of every narrow range.
      let v: number;
      if (high === 0) v = low >>> 0;
      else if (signed && high === -1 && low < 0) v = low;
      else return i;
      if (v < min || v > max) return i;
      out[i] = v;
    }
    return -1;
  };
}
