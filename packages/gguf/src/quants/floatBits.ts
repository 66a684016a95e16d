/**
 * The float operations of ggml's C and numpy's float32, reproduced exactly in JavaScript: a double
 * rounded to float32 after each single operation (`Math.fround`) is the correctly rounded float32
 * result, since a double carries more than twice float32's precision.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The bits of float32 `value`. */
export function floatToBits(value: number): number {
  f32[0] = value;
  return u32[0]!;
}

/** The float32 with bits `bits`. */
export function bitsToFloat(bits: number): number {
  u32[0] = bits;
  return f32[0]!;
}

let halfTable: Float32Array | undefined;

/**
 * Every F16 bit pattern widened to F32 (numpy's `astype(float32)`, ggml's `GGML_FP16_TO_FP32`: exact,
 * NaN payloads kept), built on first use: 256 KiB, and a lookup beats the arithmetic in the loops.
 */
export function halfToFloatTable(): Float32Array {
  if (halfTable !== undefined) return halfTable;
  const table = new Float32Array(65536);
  const bits = new Uint32Array(table.buffer);
  for (let h = 0; h < 65536; h++) {
    const sign = (h & 0x8000) << 16;
    const exponent = (h >> 10) & 0x1f;
    const mantissa = h & 0x3ff;
    if (exponent === 0x1f) bits[h] = sign | 0x7f800000 | (mantissa << 13);
    else if (exponent !== 0) bits[h] = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else bits[h] = sign | floatToBits(mantissa * 2 ** -24);
  }
  halfTable = table;
  return table;
}

/**
 * F32 to F16 bits as ggml's `GGML_FP32_TO_FP16` does it: round to nearest, ties to even; overflow to
 * infinity; every NaN to the quiet 0x7E00 with the sign kept.
 */
export function floatToHalf(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;
  if (abs >= 0x477ff000) return sign | 0x7c00; // 65520 and above round to infinity
  if (abs < 0x38800000) {
    // below 2^-14: a subnormal F16 (or zero), in units of 2^-24
    const scaled = Math.abs(f32[0]!) * 2 ** 24;
    let r = Math.floor(scaled);
    const rest = scaled - r;
    if (rest > 0.5 || (rest === 0.5 && (r & 1) === 1)) r++;
    return sign | r;
  }
  let half = (((abs >>> 23) - 112) << 10) | ((abs >>> 13) & 0x3ff);
  const dropped = abs & 0x1fff;
  if (dropped > 0x1000 || (dropped === 0x1000 && (half & 1) === 1)) half++;
  return sign | half;
}

/**
 * ggml's `nearest_int`: adds 1.5·2^23 in float32 and reads the low mantissa bits, so it rounds half
 * to even, and for |x| past 2^22 (where C asserts, compiled out) it gives those same bits.
 */
export function nearestInt(x: number): number {
  const v = Math.fround(x + 12582912);
  if (v >= 8388608 && v < 16777216) return (v - 12582912) | 0; // | 0: an int32 on both paths, for V8
  return (floatToBits(v) & 0x007fffff) - 0x00400000;
}
