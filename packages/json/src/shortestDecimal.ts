/**
 * Shortest decimals: the fewest significant digits that read back to the same value of a dtype
 * when parsed as a float64 (correctly rounded, as JavaScript and Python do) and then rounded to
 * the dtype the way numpy does. Among the shortest, the one nearest to the value.
 *
 * F64 needs nothing here: `String(x)` is already the shortest round trip (ECMA-262 Number::toString).
 * F32 uses {@link shortestFloat32}, a fast interval method checked against {@link shortestDecimal};
 * the 16- and 8-bit types use {@link shortestDecimal} once per bit pattern, in a lookup table.
 */
import { LITTLE_ENDIAN } from "@st-convert/core";

/** A decimal `k × 10^e`, with `k` a positive integer. */
export interface Decimal {
  k: number;
  e: number;
}

/**
 * The shortest decimal `d` with `accepts(Number(d))`, where `x` itself is accepted and the
 * accepted set is an interval (the preimage of one value under a monotone rounding). Exact: every
 * candidate is checked by parsing it. For up to 15 significant digits (enough for any float type
 * up to F32); throws past that, which cannot happen for an interval that holds a float32 value.
 *
 * Why it is exhaustive: if any p-digit decimal lies in the interval, one of the two p-digit
 * decimals on either side of `x` does, since the interval is convex and holds `x`.
 */
export function shortestDecimal(x: number, accepts: (y: number) => boolean): Decimal {
  const a = Math.abs(x);
  const sign = x < 0 ? "-" : "";
  for (let p = 1; p <= 15; p++) {
    // toExponential is correctly rounded: k is one of the two p-digit decimals around a.
    const [mantissa, exponent] = a.toExponential(p - 1).split("e") as [string, string];
    const k = Number(mantissa.replace(".", ""));
    const e = Number(exponent) - (p - 1);
    // The accepted candidates are contiguous; keep the nearest to a (ties to the even one).
    let best = -1;
    for (const c of [k - 1, k, k + 1]) {
      if (c <= 0 || !accepts(Number(`${sign}${c}e${e}`))) continue;
      if (best < 0) best = c;
      else if (c === best + 1) {
        const side = compareToHalfway(a, best, e);
        if (side > 0 || (side === 0 && c % 2 === 0)) best = c;
      }
    }
    if (best > 0) return stripZeros({ k: best, e });
  }
  throw new Error(`no decimal of up to 15 digits reads back to ${x}`);
}

const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
const HI = LITTLE_ENDIAN ? 1 : 0;

/**
 * The sign of a − (k + ½) × 10^e, exactly (a positive, finite double): which of k × 10^e and
 * (k + 1) × 10^e is nearer to a, or 0 for a tie. BigInt arithmetic, for the rare near-ties.
 */
export function compareToHalfway(a: number, k: number, e: number): number {
  f64[0] = a;
  const high = u32[HI]!;
  const low = u32[1 - HI]!;
  const expField = (high >>> 20) & 0x7ff;
  let M = (BigInt(high & 0xfffff) << 32n) | BigInt(low);
  if (expField !== 0) M |= 1n << 52n;
  const Q = (expField === 0 ? 1 : expField) - 1075;
  // 2a = 2M × 2^Q against (2k + 1) × 10^e, both scaled to integers.
  let left = 2n * M;
  let right = BigInt(2 * k + 1);
  if (Q >= 0) left <<= BigInt(Q);
  else right <<= BigInt(-Q);
  if (e >= 0) right *= 10n ** BigInt(e);
  else left *= 10n ** BigInt(-e);
  return left > right ? 1 : left < right ? -1 : 0;
}

function stripZeros(d: Decimal): Decimal {
  while (d.k % 10 === 0) {
    d.k /= 10;
    d.e++;
  }
  return d;
}

const POW2 = Float64Array.from({ length: 256 }, (_, i) => 2 ** (i - 150));
// floor(log10(w)) for the interval width w of each exponent field: the ulp, or 3/4 of it just
// above a power of two. (log10 of these is never within 1e-3 of an integer but for w = 1.)
const E0 = Int32Array.from({ length: 256 }, (_, i) => Math.floor(Math.log10(POW2[i === 0 ? 1 : i]!)));
const E0_EDGE = Int32Array.from({ length: 256 }, (_, i) => Math.floor(Math.log10(0.75 * POW2[i === 0 ? 1 : i]!)));
const EPS = 1e-6;
const f32 = new Float32Array(1);
const bitsScratch = new Uint32Array(1);
const floatScratch = new Float32Array(bitsScratch.buffer);

/**
 * Whether `k × 10^e` reads back (through float64) as the float32 `x`: surely when it lies clear
 * of the interval's ends [tlo, thi] (in units of 10^e), else checked exactly by parsing (slow,
 * for the rare candidates at an end). Inlined by V8 (small), so its doubles stay unboxed.
 */
function settles(k: number, e: number, x: number, tlo: number, thi: number): boolean {
  return (k > tlo + EPS && k < thi - EPS) || Math.fround(Number(`${k}e${e}`)) === x;
}

/** Takes `k × 10^e`, less its trailing zeros, as the result. k < 2^24 × 10: int32 arithmetic, not a float modulo. */
function settle(k: number, e: number, out: Decimal): void {
  let digits = k | 0;
  while (digits % 10 === 0) {
    digits = (digits / 10) | 0;
    e++;
  }
  out.k = digits;
  out.e = e;
}
/**
 * 10^-e at index e + 64, each the double nearest to it: scaling by a product rather than a
 * quotient (a division costs several multiplications). Two roundings instead of one; the scaled
 * values stay within ~2e-16 relative (~4e-8 absolute: they are below 2^24 × 10), far inside EPS.
 */
const INV10 = Float64Array.from({ length: 128 }, (_, i) => Number(`1e${64 - i}`));

/**
 * The shortest decimal of a positive, finite float32 value `x` (with its bits), nearest to `x`
 * among the shortest; written to `out`.
 *
 * Method: the doubles that round to `x` form the interval between the midpoints to its
 * neighbours (closed when the significand is even, since ties go to even). With w its width and
 * e0 = floor(log10 w), a multiple of 10^e0 always lies inside, and at most one multiple of
 * 10^(e0+1) does; if that one exists, its trailing zeros give the shortest, else the multiple of
 * 10^e0 nearest to `x` is it (an exact tie, such as 2097151.75 between …1.7 and …1.8, goes to
 * the even one, as `Number.prototype.toString` does). Scaled values are computed in doubles (relative error ~1e-16); any
 * candidate within 1e-6 of an end is checked exactly by parsing, so the decimal → double →
 * float32 double rounding is honoured. Agrees with {@link shortestDecimal} (tested).
 */
export function shortestFloat32(bits: number, out: Decimal): void {
  shortestFloat32Of((bits >>> 23) & 0xff, bits & 0x7fffff, out);
}

/**
 * {@link shortestFloat32} of the value with exponent field `expField` and mantissa field
 * `mant`: the writer's entry, once per element. Both are small integers and the value is made
 * from them here: V8 does not inline this function, and it boxes any argument that is a double
 * or an integer past 2^30 (a float32's bits for |x| ≥ 2), an allocation per element.
 */
export function shortestFloat32Of(expField: number, mant: number, out: Decimal): void {
  bitsScratch[0] = (expField << 23) | mant;
  const x = floatScratch[0]!;
  const ulp = POW2[expField === 0 ? 1 : expField]!;
  const hi = x + ulp / 2;
  // Just above a power of two the neighbour below is half as far.
  const edge = mant === 0 && expField > 1;
  const lo = edge ? x - ulp / 4 : x - ulp / 2;
  const e0 = (edge ? E0_EDGE : E0)[expField]!;

  // One multiple of 10^(e0+1) at most.
  let e = e0 + 1;
  let scale = INV10[e + 64]!;
  let tlo = lo * scale;
  let thi = hi * scale;
  let k = Math.floor(thi + EPS);
  if (k > 0 && k >= tlo - EPS && settles(k, e, x, tlo, thi)) {
    settle(k, e, out);
    return;
  }

  e = e0;
  scale = INV10[e + 64]!;
  tlo = lo * scale;
  thi = hi * scale;
  const tx = x * scale;
  const kmin = Math.ceil(tlo - EPS);
  const kmax = Math.floor(thi + EPS);
  k = Math.floor(tx);
  const frac = tx - k;
  if (Math.abs(frac - 0.5) < EPS) {
    const side = compareToHalfway(x, k, e);
    if (side > 0 || (side === 0 && k % 2 === 1)) k++;
  } else if (frac > 0.5) k++;
  if (k < kmin) k = kmin;
  if (k > kmax) k = kmax;
  // Walk inwards from an end until a candidate reads back; the interior ones always do.
  for (let tries = 0; tries < 4 && k >= kmin && k <= kmax; tries++) {
    if (settles(k, e, x, tlo, thi)) {
      settle(k, e, out);
      return;
    }
    k += k - tlo < thi - k ? 1 : -1;
  }
  exactShortestFloat32(x, out);
}

/**
 * The safety net of {@link shortestFloat32Of} for a boundary case its walk would miss (none is
 * known: the tests compare it with the exact search over millions of patterns). A function of its
 * own: a closure over the caller's `x` would make V8 allocate a context at every call.
 */
function exactShortestFloat32(x: number, out: Decimal): void {
  const d = shortestDecimal(x, (y) => {
    f32[0] = y;
    return f32[0] === x;
  });
  out.k = d.k;
  out.e = d.e;
}

/**
 * Writes `[-]k × 10^e` as JSON number text at `pos` and returns the new position. Plain notation
 * for 1e-6 ≤ |v| < 1e15 (like `Number.prototype.toString` below 1e21, but earlier to exponent
 * form so that no integer-looking text reaches 2^53: Python reads those as `int`, which
 * ml_dtypes refuses past 2^64 and numpy rounds once instead of twice), else `d.ddde±X`.
 */
export function writeDecimal(out: Uint8Array, pos: number, negative: boolean, k: number, e: number): number {
  if (negative) out[pos++] = 0x2d;
  if (k > 0x7fffffff) return writeWideDecimal(out, pos, k, e);
  // Digits go straight to their places, last first, two per division by a constant (int32).
  const v = k | 0;
  const p = digitCount(v);
  const n = p + e; // the decimal point sits after n digits
  if (n > 0 && n <= 15) {
    if (e >= 0) {
      writeDigits(out, pos, v, p);
      pos += p;
      for (let i = 0; i < e; i++) out[pos++] = 0x30;
      return pos;
    }
    // n integer digits, a point, p - n fraction digits.
    let rest = v;
    let at = pos + p + 1;
    let fraction = p - n;
    for (; fraction >= 2; fraction -= 2) {
      const q = (rest / 100) | 0;
      const r = 2 * (rest - q * 100);
      out[--at] = PAIRS[r + 1]!;
      out[--at] = PAIRS[r]!;
      rest = q;
    }
    if (fraction === 1) {
      const q = (rest / 10) | 0;
      out[--at] = 0x30 + (rest - q * 10);
      rest = q;
    }
    out[--at] = 0x2e;
    writeDigits(out, pos, rest, n);
    return pos + p + 1;
  }
  if (n <= 0 && n > -6) {
    out[pos++] = 0x30;
    out[pos++] = 0x2e;
    for (let i = n; i < 0; i++) out[pos++] = 0x30;
    writeDigits(out, pos, v, p);
    return pos + p;
  }
  // d.ddde±X: the first digit, then the others after a point.
  if (p > 1) {
    const tens = POW10_INT[p - 1]!;
    const lead = (v / tens) | 0;
    out[pos++] = 0x30 + lead;
    out[pos++] = 0x2e;
    writeDigits(out, pos, v - lead * tens, p - 1);
    pos += p - 1;
  } else out[pos++] = 0x30 + v;
  return writeExponent(out, pos, n - 1);
}

/** `e±X` for the exponent `x`. */
function writeExponent(out: Uint8Array, pos: number, x: number): number {
  out[pos++] = 0x65;
  if (x < 0) {
    out[pos++] = 0x2d;
    x = -x;
  } else out[pos++] = 0x2b;
  if (x >= 100) out[pos++] = 0x30 + Math.floor(x / 100);
  if (x >= 10) out[pos++] = 0x30 + (Math.floor(x / 10) % 10);
  out[pos++] = 0x30 + (x % 10);
  return pos;
}

/** 10^0 … 10^9, the powers an int32 digit count needs. */
const POW10_INT = Int32Array.from({ length: 10 }, (_, i) => 10 ** i);

/** Decimal digits of a positive int32. */
function digitCount(v: number): number {
  if (v < 100_000) return v < 100 ? (v < 10 ? 1 : 2) : v < 1000 ? 3 : v < 10_000 ? 4 : 5;
  return v < 10_000_000 ? (v < 1_000_000 ? 6 : 7) : v < 100_000_000 ? 8 : v < 1_000_000_000 ? 9 : 10;
}

/** Writes the int32 `v` < 10^count as exactly `count` digits (leading zeros) at `at`. */
function writeDigits(out: Uint8Array, at: number, v: number, count: number): void {
  let i = at + count;
  for (; count >= 2; count -= 2) {
    const q = (v / 100) | 0;
    const r = 2 * (v - q * 100);
    out[--i] = PAIRS[r + 1]!;
    out[--i] = PAIRS[r]!;
    v = q;
  }
  if (count === 1) out[--i] = 0x30 + v;
}

/** {@link writeDecimal} for k past 2^31 (wider types' tables; never a float32). */
function writeWideDecimal(out: Uint8Array, pos: number, k: number, e: number): number {
  let p = 0;
  for (let v = k; v > 0; v = Math.floor(v / 10)) DIGITS[p++] = 0x30 + (v % 10);
  const n = p + e;
  if (n > 0 && n <= 15) {
    if (e >= 0) {
      for (let i = p - 1; i >= 0; i--) out[pos++] = DIGITS[i]!;
      for (let i = 0; i < e; i++) out[pos++] = 0x30;
    } else {
      for (let i = p - 1; i >= p - n; i--) out[pos++] = DIGITS[i]!;
      out[pos++] = 0x2e;
      for (let i = p - n - 1; i >= 0; i--) out[pos++] = DIGITS[i]!;
    }
    return pos;
  }
  if (n <= 0 && n > -6) {
    out[pos++] = 0x30;
    out[pos++] = 0x2e;
    for (let i = n; i < 0; i++) out[pos++] = 0x30;
    for (let i = p - 1; i >= 0; i--) out[pos++] = DIGITS[i]!;
    return pos;
  }
  out[pos++] = DIGITS[p - 1]!;
  if (p > 1) {
    out[pos++] = 0x2e;
    for (let i = p - 2; i >= 0; i--) out[pos++] = DIGITS[i]!;
  }
  return writeExponent(out, pos, n - 1);
}

const DIGITS = new Uint8Array(32);
/** "00" … "99" as ASCII pairs: two digits per division. */
const PAIRS = Uint8Array.from({ length: 200 }, (_, i) => 0x30 + (i % 2 === 0 ? Math.floor(i / 20) : (i >> 1) % 10));

/** The text {@link writeDecimal} writes, as a string (for tables and tests). */
export function decimalText(negative: boolean, d: Decimal): string {
  const scratch = new Uint8Array(40);
  const end = writeDecimal(scratch, 0, negative, d.k, d.e);
  return String.fromCharCode(...scratch.subarray(0, end));
}
