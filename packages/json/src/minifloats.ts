/**
 * The 16- and 8-bit float dtypes (F16, BF16, the five F8 variants): exact decoding to float64 and
 * the float64 → dtype rounding that numpy / ml_dtypes apply in `np.array(values, dtype)`, which
 * is how the JSON reader turns a decimal into bits and how the writer proves its decimals exact.
 *
 * Observed with numpy 2.4.6 and ml_dtypes 0.6.0 (and checked by `fixtures/json/decimals.json`):
 * - F16 and every F8 variant round the float64 directly, to nearest, ties to even;
 * - BF16 rounds the float64 to float32 first, then to bfloat16 (two roundings, as ml_dtypes does);
 * - F8_E8M0 (powers of two, no sign, no zero) rounds ties upwards (1.5 → 2), clamps values below
 *   2^-127 to 2^-127, its smallest value, and rounds values strictly between 2^-127 and 2^-126 up.
 * Where numpy would silently produce Infinity or NaN (overflow, Infinity into a type without one,
 * zero or a negative into E8M0), the encoder reports it instead: the reader turns that into an error.
 */
import { type Dtype, LITTLE_ENDIAN } from "@st-convert/core";

/** Returned by {@link MinifloatCodec.encode} for a finite value beyond the dtype's largest finite value. */
export const OVERFLOW = -1;
/** Returned by {@link MinifloatCodec.encode} for a value the dtype has no neighbour for (zero or negative into E8M0). */
export const UNREPRESENTABLE = -2;

/** Encoding and decoding of one small float dtype. */
export interface MinifloatCodec {
  readonly dtype: Dtype;
  /** 8 or 16. */
  readonly width: number;
  /** Whether the dtype has infinities (F16, BF16, F8_E5M2). */
  readonly hasInfinity: boolean;
  /** Whether the dtype has a sign at all (all but F8_E8M0). */
  readonly signed: boolean;
  /** The exact value of a bit pattern. */
  decode(bits: number): number;
  /**
   * Bits of the dtype value nearest to `x` (for `NaN`, the bits numpy makes of `float("nan")`),
   * or {@link OVERFLOW} / {@link UNREPRESENTABLE}.
   */
  encode(x: number): number;
}

interface Layout {
  dtype: Dtype;
  width: 8 | 16;
  mantissaBits: number;
  bias: number;
  /** Largest unbiased exponent of a finite value. */
  emax: number;
  /** Largest mantissa field at `emax` (smaller than all-ones where that pattern is NaN). */
  maxMantissaAtEmax: number;
  /** IEEE-style: the all-ones exponent holds infinities and NaNs. */
  ieee: boolean;
  /** The "fnuz" variants: no negative zero, no infinity, NaN is the sign bit alone (0x80). */
  fnuz: boolean;
  /** The bits `NaN` encodes to: what numpy makes of `float("nan")`. */
  nan: number;
  /** Round through float32 first (BF16 in ml_dtypes). */
  viaFloat32: boolean;
}

const LAYOUTS: readonly Layout[] = [
  { dtype: "F16", width: 16, mantissaBits: 10, bias: 15, emax: 15, maxMantissaAtEmax: 1023, ieee: true, fnuz: false, nan: 0x7e00, viaFloat32: false },
  { dtype: "BF16", width: 16, mantissaBits: 7, bias: 127, emax: 127, maxMantissaAtEmax: 127, ieee: true, fnuz: false, nan: 0x7fc0, viaFloat32: true },
  { dtype: "F8_E5M2", width: 8, mantissaBits: 2, bias: 15, emax: 15, maxMantissaAtEmax: 3, ieee: true, fnuz: false, nan: 0x7e, viaFloat32: false },
  // float8_e4m3fn: no infinity; 0x7F and 0xFF are NaN, so the largest finite is exponent 15, mantissa 6 (448).
  { dtype: "F8_E4M3", width: 8, mantissaBits: 3, bias: 7, emax: 8, maxMantissaAtEmax: 6, ieee: false, fnuz: false, nan: 0x7f, viaFloat32: false },
  { dtype: "F8_E4M3FNUZ", width: 8, mantissaBits: 3, bias: 8, emax: 7, maxMantissaAtEmax: 7, ieee: false, fnuz: true, nan: 0x80, viaFloat32: false },
  { dtype: "F8_E5M2FNUZ", width: 8, mantissaBits: 2, bias: 16, emax: 15, maxMantissaAtEmax: 3, ieee: false, fnuz: true, nan: 0x80, viaFloat32: false },
];

// Scratch views to read a float64's exponent field without allocating.
const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
const HI = LITTLE_ENDIAN ? 1 : 0;

/** floor(log2(a)) for a finite a > 0 that is a normal float64; -1023 for float64 subnormals. */
function exponentOf(a: number): number {
  f64[0] = a;
  return ((u32[HI]! >>> 20) & 0x7ff) - 1023;
}

/** Round a non-negative double below 2^31 to an integer, ties to even. */
function roundHalfEven(v: number): number {
  let r = Math.floor(v);
  const d = v - r;
  if (d > 0.5 || (d === 0.5 && (r & 1) === 1)) r++;
  return r;
}

function layoutCodec(layout: Layout): MinifloatCodec {
  const { mantissaBits: m, bias, emax, maxMantissaAtEmax, ieee, fnuz, nan, viaFloat32, width } = layout;
  const signBit = width === 16 ? 0x8000 : 0x80;
  const expMask = (1 << (width - 1 - m)) - 1;
  const mantMask = (1 << m) - 1;
  const emin = 1 - bias;
  const subnormalQuantum = 2 ** (emin - m);
  const implicit = 1 << m;
  const inf = ieee ? expMask << m : -1;

  const decode = (bits: number): number => {
    if (fnuz && bits === 0x80) return NaN;
    if (!ieee && !fnuz && (bits & 0x7f) === 0x7f) return NaN;
    const sign = bits & signBit ? -1 : 1;
    const exp = (bits >>> m) & expMask;
    const mant = bits & mantMask;
    if (ieee && exp === expMask) return mant === 0 ? sign * Infinity : NaN;
    if (exp === 0) return sign * mant * subnormalQuantum;
    return sign * (implicit + mant) * 2 ** (exp - bias - m);
  };

  const encode = (x: number): number => {
    if (x !== x) return nan;
    const negative = x < 0 || Object.is(x, -0);
    let a = negative ? -x : x;
    if (a === Infinity) return ieee ? (negative ? signBit : 0) | inf : OVERFLOW;
    if (viaFloat32) {
      a = Math.fround(a);
      if (a === Infinity) return OVERFLOW;
    }
    let bits: number;
    const e = exponentOf(a);
    if (a === 0 || e < emin) {
      // Subnormal range: a multiple of the smallest quantum; rounding up to 2^m lands on the
      // smallest normal, whose encoding is the same integer.
      bits = roundHalfEven(a / subnormalQuantum);
    } else {
      let exp = e;
      let n = roundHalfEven(a / 2 ** (e - m));
      if (n === implicit << 1) {
        exp++;
        n = implicit;
      }
      if (exp > emax || (exp === emax && n - implicit > maxMantissaAtEmax)) return OVERFLOW;
      bits = ((exp + bias) << m) | (n - implicit);
    }
    if (fnuz && bits === 0) return 0; // no negative zero: -0 and tiny negatives become +0, as in ml_dtypes
    return negative ? bits | signBit : bits;
  };

  return {
    dtype: layout.dtype,
    width,
    hasInfinity: ieee,
    signed: true,
    decode,
    encode,
  };
}

/** F8_E8M0 ("fnu"): 2^(bits − 127) for bits 0..254, NaN at 255; no sign, no zero, no infinity. */
function e8m0Codec(): MinifloatCodec {
  const decode = (bits: number): number => (bits === 0xff ? NaN : 2 ** (bits - 127));
  const encode = (x: number): number => {
    if (x !== x) return 0xff;
    if (x <= 0) return UNREPRESENTABLE; // also -0
    if (x === Infinity) return OVERFLOW;
    let e = exponentOf(x);
    if (e < -127) return 0; // below 2^-127 the nearest value is 2^-127 (there is no zero)
    // ml_dtypes 0.6.0 rounds everything strictly between 2^-127 and 2^-126 up to 2^-126 (its
    // bottom exponent goes through its subnormal path); matched so that numpy reads the same bits.
    if (e === -127) return x === 2 ** -127 ? 0 : 1;
    if (x / 2 ** e >= 1.5) e++; // ties upwards, as ml_dtypes rounds this type
    if (e > 127) return OVERFLOW;
    return e + 127;
  };
  return {
    dtype: "F8_E8M0",
    width: 8,
    hasInfinity: false,
    signed: false,
    decode,
    encode,
  };
}

const CODECS = new Map<Dtype, MinifloatCodec>([...LAYOUTS.map((l) => [l.dtype, layoutCodec(l)] as const), ["F8_E8M0", e8m0Codec()]]);

/** The codec of a 16- or 8-bit float dtype, or undefined for any other dtype. */
export function minifloat(dtype: Dtype): MinifloatCodec | undefined {
  return CODECS.get(dtype);
}
