/**
 * K-quant quantization byte for byte as ggml's `quantize_row_q{2..6}_K_ref` (what `ggml_quantize_chunk`
 * runs without an importance matrix). The scale searches are float32 arithmetic whose result depends on
 * every rounding, so each C operation is one `Math.fround` here, in C's order (ggml-base is built
 * without FMA: `a*b + c` is two roundings), and `nearest_int` is ggml's round-half-even trick. For
 * Q4_K and Q5_K, make_qkx2's float32 sums, errors and levels run in WebAssembly (qkx2Loops.ts: its
 * float32 operations are C's, one instruction each), with these loops where it cannot.
 */
import { floatToHalf, halfToFloatTable, nearestInt } from "./floatBits.js";
import { type Qkx2Functions, qkx2Arrays, qkx2Functions } from "./qkx2Loops.js";

const fr = Math.fround;
/** ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it is all zeros. */
const GROUP_MAX_EPS = fr(1e-15);
const TENTH = fr(0.1);

// scratch, reused: quantization never re-enters itself
/** make_qkx2's arrays: views of the loops' WebAssembly memory where it can be made. */
const arrays = qkx2Arrays();
const { weights, values: xf, levels: laux, prefixL, prefixL2, prefixXL, totals, shifted: shiftedF32, halfUp } = arrays;
/**
 * make_qkx2's loops in WebAssembly where it runs, made by {@link prepareLoops} on the first K-quant
 * quantization: compiling them takes about 3 ms, which every conversion that reads a GGUF would
 * otherwise pay at start-up. (The arrays stay constants: as `let`s they cost Q4_K about 6 %.)
 */
let loops: Qkx2Functions | undefined;
let wasmSums: Qkx2Functions["sums"];
let wasmError: Qkx2Functions["error"];
let wasmTotals: Qkx2Functions["sumTotals"];
let wasmSquares: Qkx2Functions["squares"];
let wasmDue: Qkx2Functions["due"];
let wasmRelevel: Qkx2Functions["relevel"];
let wasmShift: Qkx2Functions["shift"];

/** Makes the loops once; the quantizers that use them (Q2_K, Q4_K, Q5_K) call it first. */
function prepareLoops(): void {
  if (loops !== undefined) return;
  loops = qkx2Functions(arrays);
  ({ sums: wasmSums, error: wasmError, sumTotals: wasmTotals, squares: wasmSquares, due: wasmDue, relevel: wasmRelevel, shift: wasmShift } = loops);
}

const levels = new Uint8Array(256);
const signedLevels = new Int8Array(256);
const subScales = new Float32Array(16);
const subMins = new Float32Array(16);
/** make_qkx2_quants' second result (the min it settled on, negated), kept out of a module `let` so no number is boxed. */
const qkx2Out = new Float64Array(1);
/** x − min for the current min (float32 values, held as doubles). */
const shifted = new Float64Array(32);
/** The values and weights make_qkx2 works on, as doubles. */
const xs = new Float64Array(32);
const ws = new Float64Array(32);

/** 2^-23: twice float32's unit roundoff, bounding the three roundings of s·l + m − x relative to their operands. */
const ROUNDING_BOUND = 1.2e-7;

/**
 * Whether the float32 error make_qkx2_quants computes for levels `laux`, scale `s` and min `m` is
 * certainly not below `best`, judged in double without the float32 roundings: each difference
 * s·l + m − x is off its exact value by at most ROUNDING_BOUND·(|s·l| + |s·l + m| + |exact|) (plus
 * an absolute 2^-147 for subnormal results), the square, the weight and the 32 sums by a relative
 * 40·2^-24 at most and an absolute 1e-40 in all. A lower bound that still exceeds `best` means the
 * exact computation would reject the candidate too; NaN and infinities fall to the exact computation.
 */
function surelyWorse(n: number, s: number, m: number, useMad: boolean, best: number): boolean {
  let lower = 0;
  for (let i = 0; i < n; i++) {
    const sl = s * laux[i]!;
    const slm = sl + m;
    const exact = Math.abs(slm - xs[i]!);
    const a = exact - (ROUNDING_BOUND * (sl < 0 ? -sl : sl) + ROUNDING_BOUND * Math.abs(slm) + ROUNDING_BOUND * exact + 2 ** -147);
    if (a > 0) lower += ws[i]! * (useMad ? a : a * a);
  }
  return lower * (1 - 1e-5) - 1e-40 > best;
}

const ceiling = new Float64Array(32);
/** (1 − 2^-20): a level's ceiling sits this far below the exact crossing, far more than float32's and double's roundings. */
const CEILING_MARGIN = 1 - 2 ** -20;
/**
 * Σw, Σw·x, Σw·|x|, Σw·x² in double for the values make_qkx2 works on. A typed array, not module
 * `let`s: V8 boxes every double written to a module variable, and those allocations cost more than the work.
 */
const moments = new Float64Array(4);

/**
 * surelyWorse for the squared error, from moments in O(1): E(s, m) = Σw·(s·l + m − x)² expanded over
 * the double moments (its evaluation error is far below 1e-12 of the sum of the magnitudes of its
 * terms); the float32 differences are each off by at most e = ROUNDING_BOUND·(|s·l| + |s·l + m| + |D|),
 * and Σw·(|D| − e)₊² ≥ E − 2·√(E·Σw·e²) (Cauchy–Schwarz), Σw·e² ≤ 3·ROUNDING_BOUND²·Σw·((s·l)² +
 * (s·l + m)² + D²), all three sums again moments.
 */
function surelyWorseSquared(s: number, m: number, mL: number, mLL: number, mXL: number, mAXL: number, best: number): boolean {
  const momentW = moments[0]!;
  const momentX = moments[1]!;
  const momentAX = moments[2]!;
  const momentXX = moments[3]!;
  const sll = s * s * mLL;
  const cross = 2 * s * m * mL;
  const mm = m * m * momentW;
  const e = momentXX - 2 * s * mXL - 2 * m * momentX + sll + cross + mm;
  const magnitude = momentXX + 2 * Math.abs(s) * mAXL + 2 * Math.abs(m) * momentAX + sll + Math.abs(cross) + mm;
  const slack = 1e-12 * magnitude;
  const upper = e + slack;
  const spread = 3 * ROUNDING_BOUND * ROUNDING_BOUND * 2 * (2 * sll + Math.abs(cross) + mm + upper + slack) + 2 * momentW * 2 ** -294;
  const lower = (1 - 1e-5) * (e - slack - 2 * Math.sqrt(upper * spread)) - 1e-40;
  return lower > best;
}

const bitsF32 = new Float32Array(1);
const bitsU32 = new Uint32Array(bitsF32.buffer);

/** 1.5·2^52: adding and subtracting it rounds a double to an integer, half to even. */
const ROUND_DOUBLE = 6755399441055744;

/**
 * ggml's `nearest_int(t)` for a float32 t, clamped to 0..nmax. C adds 1.5·2^23 in float32 and reads
 * the low mantissa bits: for |t| < 2^22 that is t rounded half to even, which the double trick gives
 * without a float32 rounding; beyond, ggml's bit trick itself (its results there are not roundings).
 */
function level(t: number, nmax: number): number {
  const r = t + ROUND_DOUBLE - ROUND_DOUBLE;
  let l = r | 0;
  if (!(r >= -4194304 && r <= 4194303)) {
    // nearestInt's bit trick written out: a call here would keep V8 from hoisting the typed arrays'
    // checks out of the loops this is inlined into
    bitsF32[0] = t + 12582912;
    l = (bitsU32[0]! & 0x007fffff) - 0x00400000;
  }
  // biome-ignore lint/complexity/useMathMinMax: measured: V8 compiles this to int compares, Math.min/max here cost 40 % of Q4_K
  return l < 0 ? 0 : l > nmax ? nmax : l;
}

/** x − min of the `n` values into shiftedF32 by SIMD (`simd`: 32 of them, in WebAssembly memory), else into both arrays. */
function shiftBy(min: number, n: number, simd: boolean): void {
  if (simd) wasmShift!(min);
  else for (let i = 0; i < n; i++) shifted[i] = shiftedF32[i] = fr(xs[i]! - min);
}

/** make_qkx2's error of the levels in `laux` for scale `s` and min `m`: Σw·(s·l + m − x)², or Σw·|…|. */
function errorOf(s: number, m: number, n: number, useMad: boolean, inWasm: boolean): number {
  if (inWasm) return wasmError!(s, m, n, useMad ? 1 : 0);
  let error = 0;
  for (let i = 0; i < n; i++) {
    let diff = fr(fr(fr(s * laux[i]!) + m) - xs[i]!);
    diff = useMad ? Math.abs(diff) : fr(diff * diff);
    error = fr(error + fr(ws[i]! * diff));
  }
  return error;
}

/**
 * ggml's `make_qkx2_quants`: a scale and a min for `n` values of `x` at `xo` with weights, levels
 * 0..nmax into `L` at `lo`, searching `nstep + 1` candidate scales. Returns the scale; the min goes to qkx2Out.
 *
 * A candidate whose levels equal the previous candidate's has the same sums, scale, min and error, so
 * it cannot win (an equal error is not an improvement): it is skipped, which halves the work and
 * changes no result.
 */
function makeQkx2(x: Float32Array, xo: number, n: number, nmax: number, L: Uint8Array, lo: number, rmin: number, nstep: number, useMad: boolean): number {
  // the float32 sums in WebAssembly, but for Q2_K's groups of 16 (absolute errors), where the calls cost what they save
  const inWasm = wasmSums !== undefined && !useMad;
  // due elements by SIMD (32 lanes at once) where it runs: exact, since a level can grow only once
  // float32(iscale·v) reaches l + ½; the ceilings' margin serves the double check of the other path
  const simdDue = inWasm && n === 32 && wasmDue !== undefined && wasmShift !== undefined;
  // x − min: with SIMD only as float32s (shiftedF32, which it reads), else as doubles too (shifted)
  // the values and weights as doubles (exact copies of the float32s): the loops below then convert nothing
  for (let i = 0; i < n; i++) {
    const v = x[xo + i]!;
    xs[i] = v;
    xf[i] = v;
    ws[i] = weights[i]!;
  }
  let min = x[xo]!;
  let max = min;
  let sumW: number;
  let sumX: number;
  if (inWasm) {
    for (let i = 1; i < n; i++) {
      const xi = xs[i]!;
      if (xi < min) min = xi;
      if (xi > max) max = xi;
    }
    wasmTotals!(n);
    sumW = totals[0]!;
    sumX = totals[1]!;
  } else {
    const sumW0 = ws[0]!;
    sumW = sumW0;
    sumX = fr(sumW0 * min);
    for (let i = 1; i < n; i++) {
      const xi = xs[i]!;
      if (xi < min) min = xi;
      if (xi > max) max = xi;
      const w = ws[i]!;
      sumW = fr(sumW + w);
      sumX = fr(sumX + fr(w * xi));
    }
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, lo, lo + n);
    qkx2Out[0] = -min;
    return 0;
  }
  shiftBy(min, n, simdDue);
  let momentW = 0;
  let momentX = 0;
  let momentAX = 0;
  let momentXX = 0;
  for (let i = 0; i < n; i++) {
    const w = ws[i]!;
    const xi = xs[i]!;
    momentW += w;
    momentX += w * xi;
    momentAX += w * Math.abs(xi);
    momentXX += w * xi * xi;
  }
  moments[0] = momentW;
  moments[1] = momentX;
  moments[2] = momentAX;
  moments[3] = momentXX;
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  for (let i = 0; i < n; i++) L[lo + i] = laux[i] = level(fr(iscale * (simdDue ? shiftedF32[i]! : shifted[i]!)), nmax);
  let bestError = errorOf(scale, min, n, useMad, inWasm);
  if (nstep < 1) {
    qkx2Out[0] = -min;
    return scale;
  }
  // Levels: the candidates' iscale grows with `is` while min stays, so each level can only grow; a
  // level l of x − min = v cannot change while iscale·v < (l + ½)(1 − 2^-20) (the float32 product
  // then rounds below l + ½; the double product is exact), so each element keeps that bound (`ceiling`)
  // and is recomputed only past it. After min changes, or for an iscale that is not positive, every level is recomputed.
  let fresh = true;
  let summed = false;
  // double moments of the current levels, for the error screen (not for any result)
  let mL = 0;
  let mLL = 0;
  let mXL = 0;
  let mAXL = 0;
  for (let is = 0; is <= nstep; is++) {
    // max − min again each time: min follows the best candidate so far
    iscale = fr(fr(fr(rmin + fr(TENTH * is)) + nmax) / fr(max - min));
    let first = n;
    if (fresh || !(iscale > 0)) {
      let changed: number;
      if (simdDue && iscale > 0) {
        // the same levels as the loop below, 32 lanes at once
        changed = wasmRelevel!(iscale, nmax);
      } else {
        changed = 0;
        for (let i = 0; i < n; i++) {
          const l = level(fr(iscale * (simdDue ? shiftedF32[i]! : shifted[i]!)), nmax);
          // which levels changed, as bits: no branch on a change, which is a coin toss here
          const diff = l ^ laux[i]!;
          changed |= ((diff | -diff) >>> 31) << i;
          laux[i] = l;
          ceiling[i] = l < nmax ? (l + 0.5) * CEILING_MARGIN : Number.POSITIVE_INFINITY;
          halfUp[i] = l < nmax ? l + 0.5 : Number.POSITIVE_INFINITY;
        }
      }
      // the moments of the new levels
      mL = mLL = mXL = mAXL = 0;
      for (let i = 0; i < n; i++) {
        const l = laux[i]!;
        const w = ws[i]!;
        const xi = xs[i]!;
        mL += w * l;
        mLL += w * l * l;
        mXL += w * xi * l;
        mAXL += w * Math.abs(xi) * l;
      }
      if (changed !== 0) first = 31 - Math.clz32(changed & -changed);
      fresh = !(iscale > 0);
    } else {
      // which elements reached their ceiling, as bits: a branch per element would be mispredicted
      // at each of the few that did
      let due = 0;
      if (simdDue) due = wasmDue!(iscale);
      else for (let i = 0; i < n; i++) due |= +(iscale * shifted[i]! >= ceiling[i]!) << i;
      while (due !== 0) {
        const i = 31 - Math.clz32(due & -due);
        due &= due - 1;
        const v = simdDue ? shiftedF32[i]! : shifted[i]!;
        const l = level(fr(iscale * v), nmax);
        const old = laux[i]!;
        // unconditional: an unchanged level adds exact zeros
        if (i < first && l !== old) first = i;
        laux[i] = l;
        const w = ws[i]!;
        const xi = xs[i]!;
        const step = l - old;
        mL += w * step;
        mLL += w * (l * l - old * old);
        mXL += w * xi * step;
        mAXL += w * Math.abs(xi) * step;
        ceiling[i] = l < nmax ? (l + 0.5) * CEILING_MARGIN : Number.POSITIVE_INFINITY;
        halfUp[i] = l < nmax ? l + 0.5 : Number.POSITIVE_INFINITY;
      }
    }
    if (!summed) first = 0;
    else if (first === n) continue; // the same levels as the last candidate: the same error, no improvement
    summed = true;
    let sumL: number;
    let sumL2: number;
    let sumXL: number;
    if (inWasm) {
      wasmSums!(first, n);
      sumL = prefixL[n]!;
      sumL2 = prefixL2[n]!;
      sumXL = prefixXL[n]!;
    } else {
      sumL = prefixL[first]!;
      sumL2 = prefixL2[first]!;
      sumXL = prefixXL[first]!;
      for (let i = first; i < n; i++) {
        const l = laux[i]!;
        const wl = fr(ws[i]! * l);
        sumL = fr(sumL + wl);
        sumL2 = fr(sumL2 + fr(wl * l));
        sumXL = fr(sumXL + fr(wl * xs[i]!));
        prefixL[i + 1] = sumL;
        prefixL2[i + 1] = sumL2;
        prefixXL[i + 1] = sumXL;
      }
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let thisScale = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let thisMin = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fr(sumXL / sumL2);
      }
      if (useMad ? surelyWorse(n, thisScale, thisMin, true, bestError) : surelyWorseSquared(thisScale, thisMin, mL, mLL, mXL, mAXL, bestError)) continue;
      const curError = errorOf(thisScale, thisMin, n, useMad, inWasm);
      if (curError < bestError) {
        if (n === 32) L.set(laux, lo);
        else for (let i = 0; i < n; i++) L[lo + i] = laux[i]!;
        bestError = curError;
        scale = thisScale;
        if (thisMin !== min) {
          min = thisMin;
          shiftBy(min, n, simdDue);
          fresh = true;
        }
      }
    }
  }
  qkx2Out[0] = -min;
  return scale;
}

/** The value of largest magnitude among `n` values (the first of equal magnitudes), and whether it is below GROUP_MAX_EPS. */
function signedAbsMax(x: Float32Array, xo: number, n: number): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const v = x[xo + i]!;
    const a = Math.abs(v);
    if (a > amax) {
      amax = a;
      max = v;
    }
  }
  return amax < GROUP_MAX_EPS ? 0 : max;
}

function clampInt(l: number, lo: number, hi: number): number {
  // biome-ignore lint/complexity/useMathMinMax: V8 compiles this to int compares; Math.min/max on these mixed int/double values is slower
  return l < lo ? lo : l > hi ? hi : l;
}

/** ggml's `make_qx_quants` with rmse_type 1 and no weights (Q6_K): levels into signedLevels (offset by nmax). */
function makeQx(x: Float32Array, xo: number, n: number, nmax: number, L: Int8Array, lo: number): number {
  const max = signedAbsMax(x, xo, n);
  if (max === 0) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  let iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i]!;
    const l = clampInt(nearestInt(fr(iscale * xi)), -nmax, nmax - 1);
    L[lo + i] = l + nmax;
    const w = fr(xi * xi);
    sumlx = fr(sumlx + fr(fr(w * xi) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  let scale = suml2 !== 0 ? fr(sumlx / suml2) : 0;
  let best = fr(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(-fr(nmax + fr(TENTH * is)) / max);
    sumlx = 0;
    suml2 = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[xo + i]!;
      const l = clampInt(nearestInt(fr(iscale * xi)), -nmax, nmax - 1);
      const w = fr(xi * xi);
      sumlx = fr(sumlx + fr(fr(w * xi) * l));
      suml2 = fr(suml2 + fr(fr(w * l) * l));
    }
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      for (let i = 0; i < n; i++) L[lo + i] = nmax + clampInt(nearestInt(fr(iscale * x[xo + i]!)), -nmax, nmax - 1);
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

/** ggml's `make_q3_quants` with do_rmse (Q3_K): levels 0..2·nmax−1 into signedLevels at `lo`. */
function makeQ3(x: Float32Array, xo: number, n: number, nmax: number, L: Int8Array, lo: number): number {
  const max = signedAbsMax(x, xo, n);
  if (max === 0) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  const iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i]!;
    const l = clampInt(nearestInt(fr(iscale * xi)), -nmax, nmax - 1);
    L[lo + i] = l;
    const w = fr(xi * xi);
    sumlx = fr(sumlx + fr(fr(w * xi) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[xo + i]!;
      const w = fr(xi * xi);
      const li = L[lo + i]!;
      let slx = fr(sumlx - fr(fr(w * xi) * li));
      if (slx > 0) {
        let sl2 = fr(suml2 - fr(fr(w * li) * li));
        const newL = clampInt(nearestInt(fr(fr(xi * sl2) / slx)), -nmax, nmax - 1);
        if (newL !== li) {
          slx = fr(slx + fr(fr(w * xi) * newL));
          sl2 = fr(sl2 + fr(fr(w * newL) * newL));
          if (sl2 > 0 && fr(fr(slx * slx) * suml2) > fr(fr(sumlx * sumlx) * sl2)) {
            L[lo + i] = newL;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (changed === 0) break;
  }
  for (let i = 0; i < n; i++) L[lo + i] = L[lo + i]! + nmax;
  return suml2 > 0 ? fr(sumlx / suml2) : 0;
}

function putHalf(dst: Uint8Array, at: number, value: number): number {
  const h = floatToHalf(value);
  dst[at] = h & 0xff;
  dst[at + 1] = h >> 8;
  return halfToFloatTable()[h]!;
}

/** Packs 2-bit levels: for each 128 values, byte l of 32 holds values l, l+32, l+64, l+96. */
function pack2(L: Uint8Array | Int8Array, dst: Uint8Array, at: number): void {
  for (let j = 0; j < 256; j += 128) {
    for (let l = 0; l < 32; l++) dst[at + j / 4 + l] = L[j + l]! | (L[j + l + 32]! << 2) | (L[j + l + 64]! << 4) | (L[j + l + 96]! << 6);
  }
}

/** `quantize_row_q2_K_ref`: block = scales[16], qs[64], f16 d, f16 dmin. */
export function quantizeQ2_K(src: Float32Array, dst: Uint8Array, blocks: number): void {
  prepareLoops();
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 256, o += 84) {
    let maxScale = 0;
    let maxMin = 0;
    for (let j = 0; j < 16; j++) {
      for (let l = 0; l < 16; l++) weights[l] = Math.abs(src[x + 16 * j + l]!);
      const scale = makeQkx2(src, x + 16 * j, 16, 3, levels, 16 * j, -0.5, 15, true);
      subScales[j] = scale;
      subMins[j] = qkx2Out[0]!;
      if (scale > maxScale) maxScale = scale;
      if (subMins[j]! > maxMin) maxMin = subMins[j]!;
    }
    let d = 0;
    if (maxScale > 0) {
      const iscale = fr(15 / maxScale);
      for (let j = 0; j < 16; j++) dst[o + j] = nearestInt(fr(iscale * subScales[j]!)) & 0xff;
      d = putHalf(dst, o + 80, fr(maxScale / 15));
    } else {
      dst.fill(0, o, o + 16);
      d = putHalf(dst, o + 80, 0);
    }
    let dmin = 0;
    if (maxMin > 0) {
      const iscale = fr(15 / maxMin);
      for (let j = 0; j < 16; j++) dst[o + j] = dst[o + j]! | ((nearestInt(fr(iscale * subMins[j]!)) << 4) & 0xff);
      dmin = putHalf(dst, o + 82, fr(maxMin / 15));
    } else {
      dmin = putHalf(dst, o + 82, 0);
    }
    for (let j = 0; j < 16; j++) {
      const sc = dst[o + j]!;
      const dl = fr(d * (sc & 15));
      if (dl === 0) continue;
      const dm = fr(dmin * (sc >> 4));
      for (let ii = 0; ii < 16; ii++) levels[16 * j + ii] = clampInt(nearestInt(fr(fr(src[x + 16 * j + ii]! + dm) / dl)), 0, 3);
    }
    pack2(levels, dst, o + 16);
  }
}

/** `quantize_row_q3_K_ref`: block = hmask[32], qs[64], scales[12], f16 d. */
export function quantizeQ3_K(src: Float32Array, dst: Uint8Array, blocks: number): void {
  const L = signedLevels;
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 256, o += 110) {
    let maxScale = 0;
    let amax = 0;
    for (let j = 0; j < 16; j++) {
      const scale = makeQ3(src, x + 16 * j, 16, 4, L, 16 * j);
      subScales[j] = scale;
      const a = Math.abs(scale);
      if (a > amax) {
        amax = a;
        maxScale = scale;
      }
    }
    const sc = o + 96;
    dst.fill(0, sc, sc + 12);
    let d = 0;
    if (maxScale !== 0) {
      const iscale = fr(-32 / maxScale);
      for (let j = 0; j < 16; j++) {
        const l = clampInt((nearestInt(fr(iscale * subScales[j]!)) << 24) >> 24, -32, 31) + 32;
        if (j < 8) dst[sc + j] = l & 15;
        else dst[sc + j - 8] = dst[sc + j - 8]! | ((l & 15) << 4);
        dst[sc + 8 + (j % 4)] = dst[sc + 8 + (j % 4)]! | ((l >> 4) << (2 * (j >> 2)));
      }
      d = putHalf(dst, o + 108, fr(1 / iscale));
    } else {
      d = putHalf(dst, o + 108, 0);
    }
    for (let j = 0; j < 16; j++) {
      const low = j < 8 ? dst[sc + j]! & 15 : dst[sc + j - 8]! >> 4;
      const s = (((low | (((dst[sc + 8 + (j % 4)]! >> (2 * (j >> 2))) & 3) << 4)) << 24) >> 24) - 32;
      const dl = fr(d * s);
      if (dl === 0) continue;
      for (let ii = 0; ii < 16; ii++) L[16 * j + ii] = clampInt(nearestInt(fr(src[x + 16 * j + ii]! / dl)), -4, 3) + 4;
    }
    dst.fill(0, o, o + 32);
    for (let j = 0, m = 0, hm = 1; j < 256; j++) {
      if (L[j]! > 3) {
        dst[o + m] = dst[o + m]! | hm;
        L[j] = L[j]! - 4;
      }
      if (++m === 32) {
        m = 0;
        hm <<= 1;
      }
    }
    pack2(L, dst, o + 32);
  }
}

/** Q4_K/Q5_K's eight sub-block scales and mins (6 bits each) packed into scales[12] at `at`; `L` gets the levels. */
function kScalesAndLevels(src: Float32Array, x: number, dst: Uint8Array, o: number, nmax: number, rmin: number, nstep: number): void {
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    const xo = x + 32 * j;
    let sumX2 = 0;
    if (wasmSquares !== undefined) {
      for (let l = 0; l < 32; l++) xf[l] = src[xo + l]!;
      sumX2 = wasmSquares(32);
    } else {
      for (let l = 0; l < 32; l++) {
        const v = src[xo + l]!;
        sumX2 = fr(sumX2 + fr(v * v));
      }
    }
    const avX = fr(Math.sqrt(fr(sumX2 / 32)));
    for (let l = 0; l < 32; l++) weights[l] = avX + Math.abs(src[xo + l]!);
    const scale = makeQkx2(src, xo, 32, nmax, levels, 32 * j, rmin, nstep, false);
    subScales[j] = scale;
    subMins[j] = qkx2Out[0]!;
    if (scale > maxScale) maxScale = scale;
    if (subMins[j]! > maxMin) maxMin = subMins[j]!;
  }
  const invScale = maxScale > 0 ? fr(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? fr(63 / maxMin) : 0;
  const sc = o + 4;
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(fr(invScale * subScales[j]!)) & 0xff);
    const lm = Math.min(63, nearestInt(fr(invMin * subMins[j]!)) & 0xff);
    if (j < 4) {
      dst[sc + j] = ls;
      dst[sc + j + 4] = lm;
    } else {
      dst[sc + j + 4] = (ls & 15) | ((lm & 15) << 4);
      dst[sc + j - 4] = dst[sc + j - 4]! | ((ls >> 4) << 6);
      dst[sc + j] = dst[sc + j]! | ((lm >> 4) << 6);
    }
  }
  const d = putHalf(dst, o, fr(maxScale / 63));
  const dmin = putHalf(dst, o + 2, fr(maxMin / 63));
  for (let j = 0; j < 8; j++) {
    let s: number;
    let m: number;
    if (j < 4) {
      s = dst[sc + j]! & 63;
      m = dst[sc + j + 4]! & 63;
    } else {
      s = (dst[sc + j + 4]! & 15) | ((dst[sc + j - 4]! >> 6) << 4);
      m = (dst[sc + j + 4]! >> 4) | ((dst[sc + j]! >> 6) << 4);
    }
    const dl = fr(d * s);
    if (dl === 0) continue;
    const dm = fr(dmin * m);
    for (let ii = 0; ii < 32; ii++) levels[32 * j + ii] = clampInt(nearestInt(fr(fr(src[x + 32 * j + ii]! + dm) / dl)), 0, nmax);
  }
}

/** `quantize_row_q4_K_ref`: block = f16 d, f16 dmin, scales[12], qs[128]. */
export function quantizeQ4_K(src: Float32Array, dst: Uint8Array, blocks: number): void {
  prepareLoops();
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 256, o += 144) {
    // weights are rounded when stored into the Float32Array, as C's float weights[32]
    kScalesAndLevels(src, x, dst, o, 15, -1, 20);
    for (let j = 0, q = o + 16; j < 256; j += 64, q += 32) {
      for (let l = 0; l < 32; l++) dst[q + l] = levels[j + l]! | (levels[j + l + 32]! << 4);
    }
  }
}

/** `quantize_row_q5_K_ref`: block = f16 d, f16 dmin, scales[12], qh[32], qs[128]. */
export function quantizeQ5_K(src: Float32Array, dst: Uint8Array, blocks: number): void {
  prepareLoops();
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 256, o += 176) {
    kScalesAndLevels(src, x, dst, o, 31, -0.5, 15);
    const qh = o + 16;
    dst.fill(0, qh, qh + 32);
    let m1 = 1;
    let m2 = 2;
    for (let n = 0, ql = o + 48; n < 256; n += 64, ql += 32) {
      for (let j = 0; j < 32; j++) {
        let l1 = levels[n + j]!;
        if (l1 > 15) {
          l1 -= 16;
          dst[qh + j] = dst[qh + j]! | m1;
        }
        let l2 = levels[n + j + 32]!;
        if (l2 > 15) {
          l2 -= 16;
          dst[qh + j] = dst[qh + j]! | m2;
        }
        dst[ql + j] = l1 | (l2 << 4);
      }
      m1 <<= 2;
      m2 <<= 2;
    }
  }
}

/** `quantize_row_q6_K_ref`: block = ql[128], qh[64], scales[16] (int8), f16 d. */
export function quantizeQ6_K(src: Float32Array, dst: Uint8Array, blocks: number): void {
  const L = signedLevels;
  for (let b = 0, x = 0, o = 0; b < blocks; b++, x += 256, o += 210) {
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let ib = 0; ib < 16; ib++) {
      const scale = makeQx(src, x + 16 * ib, 16, 32, L, 16 * ib);
      subScales[ib] = scale;
      const a = Math.abs(scale);
      if (a > maxAbsScale) {
        maxAbsScale = a;
        maxScale = scale;
      }
    }
    if (maxAbsScale < GROUP_MAX_EPS) {
      dst.fill(0, o, o + 210);
      continue;
    }
    const iscale = fr(-128 / maxScale);
    const d = putHalf(dst, o + 208, fr(1 / iscale));
    for (let ib = 0; ib < 16; ib++) dst[o + 192 + ib] = Math.min(127, nearestInt(fr(iscale * subScales[ib]!))) & 0xff;
    for (let j = 0; j < 16; j++) {
      const dl = fr(d * ((dst[o + 192 + j]! << 24) >> 24));
      if (dl === 0) continue;
      for (let ii = 0; ii < 16; ii++) L[16 * j + ii] = clampInt(nearestInt(fr(src[x + 16 * j + ii]! / dl)), -32, 31) + 32;
    }
    for (let j = 0, ql = o, qh = o + 128; j < 256; j += 128, ql += 64, qh += 32) {
      for (let l = 0; l < 32; l++) {
        const a = L[j + l]!;
        const b2 = L[j + l + 32]!;
        const c = L[j + l + 64]!;
        const e = L[j + l + 96]!;
        dst[ql + l] = (a & 15) | ((c & 15) << 4);
        dst[ql + l + 32] = (b2 & 15) | ((e & 15) << 4);
        dst[qh + l] = (a >> 4) | ((b2 >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
      }
    }
  }
}
