/*
 * The three hot loops of the JSON form for F32 data, as the json package's JavaScript has them
 * (packages/json/src/valueCodecs.ts and scanTensorJson.ts), element for element the same result:
 *
 *   formatFloat32s(words, index, end, out, pos, limit, first, state) -> pos
 *     Writes F32 elements (by their bits) from `index` as the shortest decimals that read back,
 *     joined by ", ", while index < end and pos <= limit; state[0] = where it stopped. It stops
 *     early, before an element's separator, at an element whose digits need the exact route
 *     (a near tie, a candidate at an interval's end that no parse settles): the caller writes
 *     that one and calls again.
 *
 *   storeFloat32Run(buf, i, final, floats, base, leaf, endLeaf, state) -> i
 *     Parses the run of plain numbers from buf[i] into floats[leaf - base], Clinger's fast path
 *     only; state[0] = the next leaf.
 *
 *   numberRun(buf, i, count, dim, kinds, maxLength, state) -> at
 *     The scanner's count of the numbers that follow a value in its array; state[0] = the count.
 *
 * The tests compare each with its JavaScript twin over random and edge-case inputs.
 */
#define _GNU_SOURCE
#include <math.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* valueCodecs' Leaf bits. */
#define LEAF_INTEGER 1
#define LEAF_FLOAT 2
#define LEAF_NEGATIVE 128

static double pow2[256];
static int e0_plain[256], e0_edge[256];
static double inv10[128];
static double exact_pow10[23];
static const double EPS = 1e-6;

void json_initialize(void) {
  for (int i = 0; i < 256; i++) pow2[i] = ldexp(1.0, i - 150);
  for (int i = 0; i < 256; i++) {
    double w = pow2[i == 0 ? 1 : i];
    e0_plain[i] = (int)floor(log10(w));
    e0_edge[i] = (int)floor(log10(0.75 * w));
  }
  char text[16];
  for (int i = 0; i < 128; i++) {
    snprintf(text, sizeof text, "1e%d", 64 - i);
    inv10[i] = strtod(text, NULL);
  }
  for (int i = 0; i < 23; i++) {
    snprintf(text, sizeof text, "1e%d", i);
    exact_pow10[i] = strtod(text, NULL);
  }
}

/* floor and ceil of the scaled values here (|x| < 2^40): a conversion each way instead of libm's
 * call, which x86-64 without SSE4.1 makes for floor(); a third of the time of a shortest decimal. */
static double floor_of(double x) {
  double t = (double)(int64_t)x;
  return t > x ? t - 1 : t;
}

static double ceil_of(double x) {
  double t = (double)(int64_t)x;
  return t < x ? t + 1 : t;
}

static float float_of(uint32_t bits) {
  float x;
  memcpy(&x, &bits, 4);
  return x;
}

/* Whether k × 10^e reads back (through float64, correctly rounded by strtod) as x. */
static int settles(double k, int e, float x, double tlo, double thi) {
  if (k > tlo + EPS && k < thi - EPS) return 1;
  char text[40];
  snprintf(text, sizeof text, "%.0fe%d", k, e);
  return (float)strtod(text, NULL) == x;
}

static void settle(double k, int e, int32_t* digits_out, int* e_out) {
  int32_t digits = (int32_t)k;
  while (digits % 10 == 0) {
    digits /= 10;
    e++;
  }
  *digits_out = digits;
  *e_out = e;
}

/* The shortest decimal of the positive finite float32 (exp_field, mant); 0 when the exact route is needed. */
static int shortest_float32(uint32_t exp_field, uint32_t mant, int32_t* k_out, int* e_out) {
  float x = float_of(exp_field << 23 | mant);
  double ulp = pow2[exp_field == 0 ? 1 : exp_field];
  double hi = (double)x + ulp / 2;
  int edge = mant == 0 && exp_field > 1;
  double lo = edge ? (double)x - ulp / 4 : (double)x - ulp / 2;
  int e0 = (edge ? e0_edge : e0_plain)[exp_field];

  int e = e0 + 1;
  double scale = inv10[e + 64];
  double tlo = lo * scale;
  double thi = hi * scale;
  double k = floor_of(thi + EPS);
  if (k > 0 && k >= tlo - EPS && settles(k, e, x, tlo, thi)) {
    settle(k, e, k_out, e_out);
    return 1;
  }

  e = e0;
  scale = inv10[e + 64];
  tlo = lo * scale;
  thi = hi * scale;
  double tx = (double)x * scale;
  double kmin = ceil_of(tlo - EPS);
  double kmax = floor_of(thi + EPS);
  k = floor_of(tx);
  double frac = tx - k;
  if (fabs(frac - 0.5) < EPS) return 0; /* a near tie: decided exactly by the caller */
  if (frac > 0.5) k++;
  if (k < kmin) k = kmin;
  if (k > kmax) k = kmax;
  for (int tries = 0; tries < 4 && k >= kmin && k <= kmax; tries++) {
    if (settles(k, e, x, tlo, thi)) {
      settle(k, e, k_out, e_out);
      return 1;
    }
    k += k - tlo < thi - k ? 1 : -1;
  }
  return 0;
}

static const char PAIRS[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static int digit_count(int32_t v) {
  if (v < 100000) return v < 100 ? (v < 10 ? 1 : 2) : v < 1000 ? 3 : v < 10000 ? 4 : 5;
  return v < 10000000 ? (v < 1000000 ? 6 : 7) : v < 100000000 ? 8 : v < 1000000000 ? 9 : 10;
}

/* v (< 10^10) as ten digits, zero-padded, at d. */
static void ten_digits(uint8_t* d, uint32_t v) {
  uint32_t hi = v / 100000000u, lo = v % 100000000u;
  uint32_t a = lo / 10000u, b = lo % 10000u;
  memcpy(d, PAIRS + 2 * hi, 2);
  memcpy(d + 2, PAIRS + 2 * (a / 100u), 2);
  memcpy(d + 4, PAIRS + 2 * (a % 100u), 2);
  memcpy(d + 6, PAIRS + 2 * (b / 100u), 2);
  memcpy(d + 8, PAIRS + 2 * (b % 100u), 2);
}

/*
 * writeDecimal of valueCodecs: plain for 1e-6 <= |v| < 1e15, else d.ddde±X. The digits are made
 * once, ten of them, and copied out in fixed 16-byte moves (the ones past the element are
 * overwritten by the next, or lie in the room the caller keeps: ELEMENT_ROOM), without a
 * division by a variable power of ten: 11 ns an element instead of 20.
 */
static size_t write_decimal(uint8_t* out, size_t pos, int negative, int32_t v, int e) {
  out[pos] = '-';
  pos += (size_t)negative;
  uint8_t d[32];
  ten_digits(d, (uint32_t)v);
  int p = digit_count(v);
  const uint8_t* digits = d + 10 - p;
  int n = p + e;
  if (n > 0 && n <= 15) {
    memcpy(out + pos, digits, 16);
    if (e >= 0) {
      memset(out + pos + p, '0', (size_t)e);
      return pos + (size_t)(p + e);
    }
    out[pos + (size_t)n] = '.';
    memcpy(out + pos + (size_t)n + 1, digits + n, 16);
    return pos + (size_t)p + 1;
  }
  if (n <= 0 && n > -6) {
    memcpy(out + pos, "0.000000", 8);
    pos += (size_t)(2 - n);
    memcpy(out + pos, digits, 16);
    return pos + (size_t)p;
  }
  out[pos] = digits[0];
  out[pos + 1] = '.';
  memcpy(out + pos + 2, digits + 1, 16);
  pos += p > 1 ? (size_t)p + 1 : 1;
  int x = n - 1;
  out[pos++] = 'e';
  if (x < 0) {
    out[pos++] = '-';
    x = -x;
  } else {
    out[pos++] = '+';
  }
  if (x >= 100) out[pos++] = (uint8_t)('0' + x / 100);
  if (x >= 10) out[pos++] = (uint8_t)('0' + (x / 10) % 10);
  out[pos++] = (uint8_t)('0' + x % 10);
  return pos;
}

static size_t put(uint8_t* out, size_t pos, const char* text) {
  size_t n = strlen(text);
  memcpy(out + pos, text, n);
  return pos + n;
}

/* writeFloat32 of valueCodecs; (size_t)-1 when the element needs the exact route. */
static size_t write_float32(uint8_t* out, size_t pos, uint32_t bits) {
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {
    if (magnitude > 0x7f800000u) return put(out, pos, "\"NaN\"");
    return put(out, pos, bits == magnitude ? "\"Infinity\"" : "\"-Infinity\"");
  }
  if (magnitude == 0) return put(out, pos, bits != 0 ? "-0.0" : "0");
  int32_t k;
  int e;
  if (!shortest_float32(magnitude >> 23, magnitude & 0x7fffffu, &k, &e)) return (size_t)-1;
  return write_decimal(out, pos, bits != magnitude, k, e);
}

/*
 * Room kept past an element's start: its separator and the longest element (", -1.2345678e-38",
 * "\"-Infinity\""), and write_decimal's 16-byte moves past its end (at most 2 + 1 + 10 + 1 + 16).
 */
#define ELEMENT_ROOM 48

/* ---------- Node-API glue ---------- */

static napi_value fail(napi_env env, const char* message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

static int typed(napi_env env, napi_value value, napi_typedarray_type want, void** data, size_t* length) {
  bool is_typed = false;
  napi_typedarray_type type;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed) return 0;
  if (napi_get_typedarray_info(env, value, &type, length, data, NULL, NULL) != napi_ok) return 0;
  return type == want;
}

static int index_arg(napi_env env, napi_value value, int64_t* out) {
  double d;
  if (napi_get_value_double(env, value, &d) != napi_ok || !(d >= -1 && d <= 9007199254740991.0) || d != (double)(int64_t)d) return 0;
  *out = (int64_t)d;
  return 1;
}

static napi_value number(napi_env env, double value) {
  napi_value result;
  napi_create_double(env, value, &result);
  return result;
}

static napi_value format_float32s_js(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  uint32_t* words;
  uint8_t* out;
  double* state;
  size_t words_length, out_length, state_length;
  int64_t index, end, pos, limit;
  bool first;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 8 ||
      !typed(env, argv[0], napi_uint32_array, (void**)&words, &words_length) || !index_arg(env, argv[1], &index) ||
      !index_arg(env, argv[2], &end) || !typed(env, argv[3], napi_uint8_array, (void**)&out, &out_length) ||
      !index_arg(env, argv[4], &pos) || !index_arg(env, argv[5], &limit) || napi_get_value_bool(env, argv[6], &first) != napi_ok ||
      !typed(env, argv[7], napi_float64_array, (void**)&state, &state_length) || state_length < 1 || index < 0 || pos < 0 ||
      end > (int64_t)words_length)
    return fail(env, "formatFloat32s(words, index, end, out, pos, limit, first, state)");
  size_t at = (size_t)pos;
  if (index == 0 && first && index < end && pos <= limit) {
    if (at + ELEMENT_ROOM > out_length) goto stop;
    size_t next = write_float32(out, at, words[0]);
    if (next == (size_t)-1) goto stop;
    at = next;
    index = 1;
  }
  for (; index < end && (int64_t)at <= limit; index++) {
    if (at + ELEMENT_ROOM > out_length) break;
    size_t next = write_float32(out, at + 2, words[index]);
    if (next == (size_t)-1) break;
    out[at] = ',';
    out[at + 1] = ' ';
    at = next;
  }
stop:
  state[0] = (double)index;
  return number(env, (double)at);
}

static int is_space(uint8_t c) {
  return c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09;
}

static napi_value store_float32_run_js(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  uint8_t* buf;
  float* floats;
  double* state;
  size_t n, floats_length, state_length;
  int64_t i, base, leaf, end_leaf;
  bool final;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 8 || !typed(env, argv[0], napi_uint8_array, (void**)&buf, &n) ||
      !index_arg(env, argv[1], &i) || napi_get_value_bool(env, argv[2], &final) != napi_ok ||
      !typed(env, argv[3], napi_float32_array, (void**)&floats, &floats_length) || !index_arg(env, argv[4], &base) ||
      !index_arg(env, argv[5], &leaf) || !index_arg(env, argv[6], &end_leaf) ||
      !typed(env, argv[7], napi_float64_array, (void**)&state, &state_length) || state_length < 1 || i < 0 || base < 0 || leaf < base)
    return fail(env, "storeFloat32Run(buf, i, final, floats, base, leaf, endLeaf, state)");
  /* Never past the floats given: the caller's general path takes any leaf beyond. */
  if (end_leaf > base + (int64_t)floats_length) end_leaf = base + (int64_t)floats_length;
  size_t at = (size_t)i;
  while (at < n && leaf < end_leaf) {
    uint8_t c = buf[at];
    if (c == 0x2c || c == 0x20 || c == 0x5b || c == 0x5d || c == 0x0a || c == 0x0d || c == 0x09) {
      at++;
      continue;
    }
    size_t j = at;
    int negative = c == 0x2d;
    if (negative) j++;
    if (j >= n) break;
    c = buf[j];
    if (c < 0x30 || c > 0x39) break;
    double m = c - 0x30;
    int digits = m == 0 ? 0 : 1;
    j++;
    if (m != 0) {
      for (; j < n; j++) {
        c = buf[j];
        int d = c - 0x30;
        if (d < 0 || d > 9) break;
        m = m * 10 + d;
        if (++digits > 15) goto done;
      }
    } else if (j < n) {
      c = buf[j];
    }
    int exp10 = 0;
    if (j < n && c == 0x2e) {
      size_t fraction = ++j;
      for (; j < n; j++) {
        c = buf[j];
        int d = c - 0x30;
        if (d < 0 || d > 9) break;
        m = m * 10 + d;
        exp10--;
        if (m != 0 && ++digits > 15) goto done;
      }
      if (j == fraction) break;
    }
    if (j < n && (c == 0x65 || c == 0x45)) {
      j++;
      int exp_negative = 0;
      if (j < n && (buf[j] == 0x2b || buf[j] == 0x2d)) exp_negative = buf[j++] == 0x2d;
      size_t exp_start = j;
      int exp = 0;
      for (; j < n; j++) {
        c = buf[j];
        int d = c - 0x30;
        if (d < 0 || d > 9) break;
        exp = exp * 10 + d;
        if (j - exp_start > 3) goto done;
      }
      if (j == exp_start) break;
      exp10 += exp_negative ? -exp : exp;
    }
    if (j >= n) {
      if (!final) break;
    } else if (!(c == 0x2c || c == 0x5d || c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09)) {
      break;
    }
    if (exp10 > 22 || exp10 < -22) break;
    float value = (float)(exp10 >= 0 ? m * exact_pow10[exp10] : m / exact_pow10[-exp10]);
    if (isinf(value)) break;
    floats[leaf - base] = negative ? -value : value;
    leaf++;
    at = j;
  }
done:
  state[0] = (double)leaf;
  return number(env, (double)at);
}

static napi_value number_run_js(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  uint8_t* buf;
  double* state;
  size_t n, state_length;
  int64_t i, count, dim, kinds, max_length;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 7 || !typed(env, argv[0], napi_uint8_array, (void**)&buf, &n) ||
      !index_arg(env, argv[1], &i) || !index_arg(env, argv[2], &count) || !index_arg(env, argv[3], &dim) || !index_arg(env, argv[4], &kinds) ||
      !index_arg(env, argv[5], &max_length) || !typed(env, argv[6], napi_float64_array, (void**)&state, &state_length) || state_length < 1 ||
      i < 0 || count < 0)
    return fail(env, "numberRun(buf, i, count, dim, kinds, maxLength, state)");
  size_t at = (size_t)i, k0 = (size_t)i;
  while (k0 < n) {
    uint8_t c = buf[k0];
    if (is_space(c)) {
      k0++;
      continue;
    }
    if (c != 0x2c) break;
    size_t j = k0 + 1;
    while (j < n && is_space(buf[j])) j++;
    if (j >= n) break;
    uint8_t d = buf[j];
    if (d != 0x2d && (d < 0x30 || d > 0x39)) break;
    if (dim != -1 && count >= dim) break;
    size_t k = d == 0x2d ? j + 1 : j;
    if (k >= n) break;
    uint8_t e = buf[k];
    int non_zero = e != 0x30;
    if (e == 0x30) {
      k++;
    } else if (e >= 0x31 && e <= 0x39) {
      for (k++; k < n && (uint8_t)(buf[k] - 0x30) < 10; k++);
    } else {
      break;
    }
    int is_float = 0;
    if (k < n && buf[k] == 0x2e) {
      is_float = 1;
      size_t fraction = ++k;
      for (; k < n && (uint8_t)(buf[k] - 0x30) < 10; k++)
        if (buf[k] != 0x30) non_zero = 1;
      if (k == fraction) break;
    }
    if (k < n && (buf[k] == 0x65 || buf[k] == 0x45)) {
      is_float = 1;
      k++;
      if (k < n && (buf[k] == 0x2b || buf[k] == 0x2d)) k++;
      size_t exponent = k;
      while (k < n && (uint8_t)(buf[k] - 0x30) < 10) k++;
      if (k == exponent) break;
    }
    if (k >= n || (int64_t)(k - j) > max_length) break;
    e = buf[k];
    if (!(e == 0x2c || e == 0x5d || is_space(e))) break;
    int64_t kind = (is_float ? LEAF_FLOAT : LEAF_INTEGER) | (d == 0x2d && non_zero ? LEAF_NEGATIVE : 0);
    if ((kinds & kind) != kind) break;
    count++;
    k0 = k;
    at = k;
  }
  state[0] = (double)count;
  return number(env, (double)at);
}

void json_register(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "formatFloat32s", NAPI_AUTO_LENGTH, format_float32s_js, NULL, &fn);
  napi_set_named_property(env, exports, "formatFloat32s", fn);
  napi_create_function(env, "storeFloat32Run", NAPI_AUTO_LENGTH, store_float32_run_js, NULL, &fn);
  napi_set_named_property(env, exports, "storeFloat32Run", fn);
  napi_create_function(env, "numberRun", NAPI_AUTO_LENGTH, number_run_js, NULL, &fn);
  napi_set_named_property(env, exports, "numberRun", fn);
}
