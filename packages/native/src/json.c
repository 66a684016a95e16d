/*
 * The hot loops of the JSON form for F32 data, as the json package's JavaScript has them
 * (packages/json/src/valueCodecs.ts and scanTensorJson.ts), element for element the same result:
 *
 *   formatFloat32s(words, index, end, out, pos, limit, first, state) -> pos
 *     Writes F32 elements (by their bits) from `index` as the shortest decimals that read back,
 *     joined by ", ", while index < end and pos <= limit; state[0] = where it stopped. It stops
 *     early, before an element's separator, at an element whose digits need the exact route
 *     (a near tie, a candidate at an interval's end that no parse settles): the caller writes
 *     that one and calls again.
 *
 *   formatFloat32sAsync(words, index, end, out, pos, limit, first, state) -> Promise of pos
 *     The same, on a thread of the pool.
 *
 *   storeFloat32Run(buf, i, final, floats, base, leaf, endLeaf, state) -> i
 *     Parses the run of plain numbers from buf[i] into floats[leaf - base], Clinger's fast path
 *     only; state[0] = the next leaf.
 *
 *   numberRun(buf, i, count, dim, kinds, maxLength, state) -> at
 *     The scanner's count of the numbers that follow a value in its array; state[0] = the count.
 *
 *   float32Lossless(words) -> boolean
 *     The writer's check that values carry a tensor's exact bits (no NaN but the canonical one).
 *
 * The two reader loops take their common case (plain numbers between commas) 64 bytes at a time
 * where the CPU has SSE4.1 (store_block, number_block), taking a number only where the loop itself
 * would take it, with the same value; the loop goes on wherever they stop.
 *
 * The tests compare each with its JavaScript twin over random and edge-case inputs.
 */
#define _GNU_SOURCE
#include <math.h>
#include <node_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
#if defined(__x86_64__)
/* Whether the reader's blocks may run (SSE4.1: every x86-64 of the last fifteen years). */
static int has_sse41;
/* Whether format_run decides four elements at a time (decide_batch_avx2). */
static int has_avx2;
/* Whether store_block_avx2 may run (with has_avx2). */
static int has_bmi2;
#endif

static void scales_initialize(void);
#if defined(__x86_64__)
static void writer_initialize(void);
static void store_divisors_initialize(void);
#endif

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
  scales_initialize();
#if defined(__x86_64__)
  store_divisors_initialize();
  __builtin_cpu_init();
  has_sse41 = __builtin_cpu_supports("sse4.1");
  has_avx2 = __builtin_cpu_supports("avx2");
  has_bmi2 = __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  /* Narrower loops on request (ST_CONVERT_JSON_SIMD: 1 SSE4.1 only, 0 none), so that the tests
   * compare each set of loops this CPU can run with the JavaScript. */
  const char* level = getenv("ST_CONVERT_JSON_SIMD");
  if (level != NULL && (level[0] == '0' || level[0] == '1')) {
    has_avx2 = has_bmi2 = 0;
    if (level[0] == '0') has_sse41 = 0;
  }
  writer_initialize();
#endif
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

/* v (< 10^10) as ten ASCII digits, zero-padded, the first in the lowest byte: made in registers and
 * stored in 16-byte moves, never read back from memory (a 16-byte load of bytes just stored in
 * pieces waits for them: 10 % of the writer's time when the digits went through the stack). */
typedef unsigned __int128 u128;

static inline uint64_t pair_of(uint32_t i) {
  uint16_t p;
  memcpy(&p, PAIRS + 2 * i, 2);
  return p;
}

static inline u128 ten_digits(uint32_t v) {
  uint32_t hi = v / 100000000u, lo = v % 100000000u;
  uint32_t a = lo / 10000u, b = lo % 10000u;
  uint64_t low8 = pair_of(a / 100u) | pair_of(a % 100u) << 16 | pair_of(b / 100u) << 32 | pair_of(b % 100u) << 48;
  return (u128)low8 << 16 | pair_of(hi);
}

static inline void store16(uint8_t* at, u128 v) {
  memcpy(at, &v, 16);
}

static const u128 TEN_ZEROS = (u128)0x3030u << 64 | 0x3030303030303030ull;

/*
 * writeDecimal of valueCodecs for k × 10^e (0 < k < 10^10; k may end in zeros, they are dropped
 * here): plain for 1e-6 <= |v| < 1e15, else d.ddde±X. The digits' leading and trailing zeros
 * are counted from their text with one bit scan each, not by dividing k by ten until it stops;
 * the digits past the element's end that the 16-byte moves leave are overwritten by the next
 * element, or lie in the room the caller keeps (ELEMENT_ROOM).
 */
static size_t write_decimal(uint8_t* out, size_t pos, int negative, uint32_t v, int e) {
  out[pos] = '-';
  pos += (size_t)negative;
  u128 text = ten_digits(v);
  u128 values = text - TEN_ZEROS;
  uint64_t low = (uint64_t)values, high = (uint64_t)(values >> 64);
  int lead = (low != 0 ? __builtin_ctzll(low) : 64 + __builtin_ctzll(high)) >> 3;
  int trail = high != 0 ? (__builtin_clzll(high) - 48) >> 3 : 2 + (__builtin_clzll(low) >> 3);
  int p = 10 - lead - trail;
  e += trail;
  u128 digits = text >> (8 * lead);
  int n = p + e;
  if (n > 0 && n <= 15) {
    store16(out + pos, digits);
    if (e >= 0) {
      memset(out + pos + p, '0', (size_t)e);
      return pos + (size_t)(p + e);
    }
    out[pos + (size_t)n] = '.';
    store16(out + pos + (size_t)n + 1, digits >> (8 * n));
    return pos + (size_t)p + 1;
  }
  if (n <= 0 && n > -6) {
    memcpy(out + pos, "0.000000", 8);
    pos += (size_t)(2 - n);
    store16(out + pos, digits);
    return pos + (size_t)p;
  }
  out[pos] = (uint8_t)digits;
  out[pos + 1] = '.';
  store16(out + pos + 2, digits >> 8);
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

/* An exponent field's interval half-widths and scales: SCALES[exp_field | (mant == 0) << 8]. */
struct scales {
  double up, down, s0, s1;
  int e0;
};
static struct scales SCALES[512];

static void scales_initialize(void) {
  for (int i = 0; i < 512; i++) {
    int field = i & 255, edge = i >= 256 && field > 1;
    double ulp = pow2[field == 0 ? 1 : field];
    int e0 = (edge ? e0_edge : e0_plain)[field];
    SCALES[i] = (struct scales){ulp / 2, edge ? ulp / 4 : ulp / 2, inv10[e0 + 64], inv10[e0 + 65], e0};
  }
}

static double round_of(double v) {
  /* To the nearest integer for |v| < 2^51, in two additions (no SSE4.1 round instruction). */
  const double rounder = 6755399441055744.0;
  return (v + rounder) - rounder;
}

__attribute__((noinline, cold)) static int shortest_slow(uint32_t exp_field, uint32_t mant, int32_t* k_out, int* e_out) {
  return shortest_float32(exp_field, mant, k_out, e_out);
}

/*
 * shortest_float32 without its branches, as k × 10^e with k possibly ending in zeros: both of
 * its tries computed at once and the result selected by masks, so that no element's outcome is
 * guessed by the branch predictor (which missed about half the time on normal data). Wherever
 * a quantity lies within 2e-6 of a boundary that shortest_float32 decides differently inside
 * its EPS margin (an end, a tie, an empty try), it calls shortest_float32 itself. Equal to it
 * on all 2^31 positive finite patterns (checked exhaustively when this was written; the tests
 * compare the kernel with its JavaScript twin).
 */
static int shortest_fast(uint32_t exp_field, uint32_t mant, int32_t* k_out, int* e_out) {
  float x = float_of(exp_field << 23 | mant);
  const struct scales* t = &SCALES[exp_field | (uint32_t)(mant == 0) << 8];
  double hi = (double)x + t->up, lo = (double)x - t->down;
  const double margin = 2 * EPS;
  /* The multiple of 10^(e0+1) below the interval's top, and whether it lies inside. */
  double thi1 = hi * t->s1, tlo1 = lo * t->s1;
  double r = round_of(thi1);
  int64_t k1 = (int64_t)r - (r > thi1);
  int doubt = fabs(thi1 - r) < margin;
  doubt |= fabs((double)k1 - tlo1) < margin;
  int64_t inside = (k1 >= 1) & ((double)k1 > tlo1);
  /* The multiple of 10^e0 nearest to x, kept within the interval. */
  double thi = hi * t->s0, tlo = lo * t->s0, tx = (double)x * t->s0;
  double rlo = round_of(tlo), rhi = round_of(thi), rx = round_of(tx);
  doubt |= fabs(tlo - rlo) < margin;
  doubt |= fabs(thi - rhi) < margin;
  doubt |= fabs(fabs(tx - rx) - 0.5) < margin;
  int64_t kmin = (int64_t)rlo + (rlo < tlo);
  int64_t kmax = (int64_t)rhi - (rhi > thi);
  int64_t k = (int64_t)rx;
  doubt |= kmin > kmax;
  if (__builtin_expect(doubt, 0)) return shortest_slow(exp_field, mant, k_out, e_out);
  k += (kmin - k) & -(int64_t)(k < kmin);
  k += (kmax - k) & -(int64_t)(k > kmax);
  int64_t take1 = -inside;
  *k_out = (int32_t)((k1 * 10 & take1) | (k & ~take1));
  *e_out = t->e0;
  return 1;
}

/* One element's decision: its digits, or a special text (SPECIAL_NAN ... SPECIAL_HARD in e). */
struct decision {
  int32_t k, e;
};
enum { SPECIAL = -100000, SPECIAL_NAN = SPECIAL - 1, SPECIAL_INF = SPECIAL - 2, SPECIAL_MINUS_INF = SPECIAL - 3,
       SPECIAL_ZERO = SPECIAL - 4, SPECIAL_MINUS_ZERO = SPECIAL - 5, SPECIAL_HARD = SPECIAL - 6 };

static void decide(uint32_t bits, struct decision* d) {
  uint32_t magnitude = bits & 0x7fffffffu;
  if (__builtin_expect(magnitude - 1u >= 0x7f7fffffu, 0)) {
    int negative = bits != magnitude;
    d->e = magnitude > 0x7f800000u ? SPECIAL_NAN
           : magnitude != 0        ? (negative ? SPECIAL_MINUS_INF : SPECIAL_INF)
                                   : (negative ? SPECIAL_MINUS_ZERO : SPECIAL_ZERO);
    return;
  }
  if (!shortest_fast(magnitude >> 23, magnitude & 0x7fffffu, &d->k, &d->e)) d->e = SPECIAL_HARD;
}

/* decide for count elements: decide's only caller, so that decide and shortest_fast stay inlined
 * in this loop (not in each of decide_batch_avx2's calls). */
__attribute__((noinline)) static void decide_run(const uint32_t* words, int64_t count, struct decision* out) {
  for (int64_t j = 0; j < count; j++) decide(words[j], &out[j]);
}

#if defined(__x86_64__)
#include <immintrin.h>
#include <stddef.h>

/* A SCALES row as decide_batch_avx2 reads it: 5 doubles, e0 in the fifth. */
_Static_assert(sizeof(struct scales) == 5 * sizeof(double) && offsetof(struct scales, e0) == 4 * sizeof(double), "SCALES row");

/*
 * decide for count elements, four at a time in AVX2 (no FMA: each multiply and add rounds as in
 * shortest_fast): shortest_fast's quantities in the four lanes of a vector, the same operands,
 * roundings and comparisons, so the same k and e. Lanes that decide treats specially (zero,
 * infinity, NaN) or where shortest_fast is in doubt go to decide itself (decide_run), as does
 * a tail of count % 4 elements. The scaled values stay below 2^51, so round_of's two additions
 * round them and every integer-valued quantity (k1, kmin, kmax, k) is exact as a double; k
 * (< 2^31) becomes an int32 at the end. Equal to decide on all 2^32 patterns, checked
 * exhaustively when this was written (e everywhere, and k wherever decide sets it: for a special
 * element it sets e only, and write_decided reads e only).
 */
__attribute__((target("avx2"))) static void decide_batch_avx2(const uint32_t* words, int64_t count, struct decision* out) {
  const __m256d rounder = _mm256_set1_pd(6755399441055744.0);
  const __m256d margin = _mm256_set1_pd(2 * EPS);
  const __m256d half = _mm256_set1_pd(0.5);
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d ten = _mm256_set1_pd(10.0);
  const __m256d no_sign = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    __m128i m = _mm_and_si128(_mm_loadu_si128((const __m128i*)(words + j)), _mm_set1_epi32(0x7fffffff));
    /* decide's special lanes: magnitude - 1 >= 0x7f7fffff (unsigned), i.e. 0 or above 0x7f7fffff. */
    __m128i special = _mm_or_si128(_mm_cmpeq_epi32(m, _mm_setzero_si128()), _mm_cmpgt_epi32(m, _mm_set1_epi32(0x7f7fffff)));
    /* SCALES[exp_field | (mant == 0) << 8], as offsets in doubles (a row is 40 bytes); each row's
     * first 32 bytes (up, down, s0, s1) in one load, the four transposed. No gather: slow on many
     * x86-64s (AMD before Zen 4, Intel's with the Downfall fix), and no faster here. */
    __m128i mant_zero = _mm_cmpeq_epi32(_mm_and_si128(m, _mm_set1_epi32(0x7fffff)), _mm_setzero_si128());
    __m128i row = _mm_or_si128(_mm_srli_epi32(m, 23), _mm_and_si128(mant_zero, _mm_set1_epi32(256)));
    row = _mm_add_epi32(row, _mm_slli_epi32(row, 2));
    int o0 = _mm_cvtsi128_si32(row), o1 = _mm_extract_epi32(row, 1), o2 = _mm_extract_epi32(row, 2), o3 = _mm_extract_epi32(row, 3);
    const double* rows = &SCALES[0].up;
    __m256d r0 = _mm256_loadu_pd(rows + o0), r1 = _mm256_loadu_pd(rows + o1);
    __m256d r2 = _mm256_loadu_pd(rows + o2), r3 = _mm256_loadu_pd(rows + o3);
    __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
    __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
    __m256d up = _mm256_permute2f128_pd(t0, t2, 0x20), s0 = _mm256_permute2f128_pd(t0, t2, 0x31);
    __m256d down = _mm256_permute2f128_pd(t1, t3, 0x20), s1 = _mm256_permute2f128_pd(t1, t3, 0x31);
    const int* e0s = &SCALES[0].e0;
    __m128i e0 = _mm_setr_epi32(e0s[2 * o0], e0s[2 * o1], e0s[2 * o2], e0s[2 * o3]);

    __m256d x = _mm256_cvtps_pd(_mm_castsi128_ps(m));
    __m256d hi = _mm256_add_pd(x, up), lo = _mm256_sub_pd(x, down);
    /* The multiple of 10^(e0+1) below the interval's top, and whether it lies inside. */
    __m256d thi1 = _mm256_mul_pd(hi, s1), tlo1 = _mm256_mul_pd(lo, s1);
    __m256d r = _mm256_sub_pd(_mm256_add_pd(thi1, rounder), rounder);
    __m256d k1 = _mm256_sub_pd(r, _mm256_and_pd(_mm256_cmp_pd(r, thi1, _CMP_GT_OQ), one));
    __m256d doubt = _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(thi1, r), no_sign), margin, _CMP_LT_OQ);
    doubt = _mm256_or_pd(doubt, _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(k1, tlo1), no_sign), margin, _CMP_LT_OQ));
    __m256d inside = _mm256_and_pd(_mm256_cmp_pd(k1, one, _CMP_GE_OQ), _mm256_cmp_pd(k1, tlo1, _CMP_GT_OQ));
    /* The multiple of 10^e0 nearest to x, kept within the interval. */
    __m256d thi = _mm256_mul_pd(hi, s0), tlo = _mm256_mul_pd(lo, s0), tx = _mm256_mul_pd(x, s0);
    __m256d rlo = _mm256_sub_pd(_mm256_add_pd(tlo, rounder), rounder);
    __m256d rhi = _mm256_sub_pd(_mm256_add_pd(thi, rounder), rounder);
    __m256d rx = _mm256_sub_pd(_mm256_add_pd(tx, rounder), rounder);
    doubt = _mm256_or_pd(doubt, _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(tlo, rlo), no_sign), margin, _CMP_LT_OQ));
    doubt = _mm256_or_pd(doubt, _mm256_cmp_pd(_mm256_and_pd(_mm256_sub_pd(thi, rhi), no_sign), margin, _CMP_LT_OQ));
    __m256d tie = _mm256_sub_pd(_mm256_and_pd(_mm256_sub_pd(tx, rx), no_sign), half);
    doubt = _mm256_or_pd(doubt, _mm256_cmp_pd(_mm256_and_pd(tie, no_sign), margin, _CMP_LT_OQ));
    __m256d kmin = _mm256_add_pd(rlo, _mm256_and_pd(_mm256_cmp_pd(rlo, tlo, _CMP_LT_OQ), one));
    __m256d kmax = _mm256_sub_pd(rhi, _mm256_and_pd(_mm256_cmp_pd(rhi, thi, _CMP_GT_OQ), one));
    doubt = _mm256_or_pd(doubt, _mm256_cmp_pd(kmin, kmax, _CMP_GT_OQ));
    __m256d k = _mm256_min_pd(_mm256_max_pd(rx, kmin), kmax);
    k = _mm256_blendv_pd(k, _mm256_mul_pd(k1, ten), inside);
    __m128i kk = _mm256_cvtpd_epi32(k);
    /* Interleaved as struct decision {k, e}: two elements per 16 bytes. */
    _mm_storeu_si128((__m128i*)(out + j), _mm_unpacklo_epi32(kk, e0));
    _mm_storeu_si128((__m128i*)(out + j + 2), _mm_unpackhi_epi32(kk, e0));
    unsigned redo = (unsigned)_mm256_movemask_pd(doubt) | (unsigned)_mm_movemask_ps(_mm_castsi128_ps(special));
    while (__builtin_expect(redo != 0, 0)) {
      int l = __builtin_ctz(redo);
      redo &= redo - 1;
      decide_run(words + j + l, 1, out + j + l);
    }
  }
  decide_run(words + j, count - j, out + j);
}
#endif

/* format_run's decisions for a batch: four at a time where the CPU has AVX2, else one by one. */
static void decide_batch(const uint32_t* words, int64_t count, struct decision* out) {
#if defined(__x86_64__)
  if (has_avx2) {
    decide_batch_avx2(words, count, out);
    return;
  }
#endif
  decide_run(words, count, out);
}

/* writeFloat32 of valueCodecs for a decided element; (size_t)-1 when it needs the exact route. */
static size_t write_decided(uint8_t* out, size_t pos, uint32_t bits, const struct decision* d) {
  if (__builtin_expect(d->e > SPECIAL, 1)) return write_decimal(out, pos, (int)(bits >> 31), (uint32_t)d->k, d->e);
  switch (d->e) {
    case SPECIAL_NAN:
      return put(out, pos, "\"NaN\"");
    case SPECIAL_INF:
      return put(out, pos, "\"Infinity\"");
    case SPECIAL_MINUS_INF:
      return put(out, pos, "\"-Infinity\"");
    case SPECIAL_ZERO:
      return put(out, pos, "0");
    case SPECIAL_MINUS_ZERO:
      return put(out, pos, "-0.0");
    default:
      return (size_t)-1;
  }
}

/*
 * Room kept past an element's start: its separator and the longest element (", -1.2345678e-38",
 * "\"-Infinity\""), and write_decimal's 16-byte moves past its end (at most 2 + 1 + 10 + 1 + 16).
 */
#define ELEMENT_ROOM 48
/* Most bytes of one F32 element's text with its separator (`, -1.17549435e-38` is 17): the least gap formatFloat32sAsync leaves. */
#define F32_TEXT_MAX 20

#if defined(__x86_64__)
/*
 * write_decimal's text by layout, for write_batch_vector. An element's ten digits (k zero-padded)
 * lie as values 0-9 in bytes 6-15 of a vector, bytes 0-5 zero; with `lead` leading zeros, `p`
 * digits from the first nonzero to the last, and n = 10 - lead + e digits before the point, the
 * text is one pshufb of that vector plus a vector of characters: WRITE_SHUF[layout * 10 + lead] picks
 * digit bytes (0x80, a zero, where the text has a fixed character or a digit beyond the ten),
 * WRITE_CHARS[layout] adds '0' to digits and holds the fixed characters. Layouts: n = 1 ... 15
 * (0 ... 14: digits, '.', digits; with p <= n the '.' lies past the end and the zeros of k or
 * beyond it fill to n), n = -5 ... 0 (15 ... 20: "0.", -n zeros, digits), and d.ddd for the
 * exponent form (21), whose "e±X" (WRITE_N[n].suffix, 4 bytes, the fourth past the end when X
 * has one digit) is stored after the digits; for the plain forms it goes past the end (offset 16).
 * A float32's shortest digits are at most nine (k has ten only when it ends in a zero), so the
 * text without sign is at most 16 bytes ("0.00000" and nine digits): one pshufb, one store.
 * Equal to write_decimal for every decision of all 2^32 patterns (checked exhaustively).
 */
struct write_n {
  uint32_t suffix;
  uint16_t shuf;   /* layout × 10: WRITE_SHUF's row for lead 0 */
  uint8_t layout;
  uint8_t length[11]; /* the text's length (no sign) by p = 1 ... 10 */
  uint8_t offset[11]; /* where the suffix goes by p */
  uint8_t pad[1];
};
static struct write_n WRITE_N[128]; /* by n + 64 */
static uint8_t WRITE_SHUF[22 * 10][16] __attribute__((aligned(16)));
static uint8_t WRITE_CHARS[22][16] __attribute__((aligned(16)));

static void writer_initialize(void) {
  for (int layout = 0; layout < 22; layout++) {
    /* Each position's digit ordinal (from the first significant digit), or -1 and its character. */
    int ordinal[16];
    char fixed[16];
    for (int i = 0; i < 16; i++) {
      ordinal[i] = -1;
      fixed[i] = 0;
      if (layout < 15) {
        int n = layout + 1;
        if (i < n) ordinal[i] = i;
        else if (i == n) fixed[i] = '.';
        else ordinal[i] = i - 1;
      } else if (layout < 21) {
        int n = layout - 20; /* -5 ... 0 */
        if (i == 1) fixed[i] = '.';
        else if (i < 2 - n) fixed[i] = '0';
        else ordinal[i] = i - (2 - n);
      } else {
        if (i == 0) ordinal[i] = 0;
        else if (i == 1) fixed[i] = '.';
        else ordinal[i] = i - 1;
      }
      WRITE_CHARS[layout][i] = (uint8_t)(ordinal[i] >= 0 ? '0' : fixed[i]);
    }
    for (int lead = 0; lead < 10; lead++)
      for (int i = 0; i < 16; i++) {
        int at = ordinal[i] + lead + 6;
        WRITE_SHUF[layout * 10 + lead][i] = (uint8_t)(ordinal[i] >= 0 && at < 16 ? at : 0x80);
      }
  }
  for (int i = 0; i < 128; i++) {
    int n = i - 64;
    struct write_n* w = &WRITE_N[i];
    int layout = n >= 1 && n <= 15 ? n - 1 : n >= -5 && n <= 0 ? n + 20 : 21;
    w->layout = (uint8_t)layout;
    w->shuf = (uint16_t)(layout * 10);
    int x = n - 1, ax = x < 0 ? -x : x;
    uint8_t s[4] = {'e', x < 0 ? '-' : '+', (uint8_t)('0' + (ax >= 10 ? ax / 10 : ax)), (uint8_t)(ax >= 10 ? '0' + ax % 10 : 0)};
    memcpy(&w->suffix, s, 4);
    for (int p = 1; p <= 10; p++) {
      if (layout < 15) {
        w->length[p] = (uint8_t)(p > n ? p + 1 : n);
        w->offset[p] = 16;
      } else if (layout < 21) {
        w->length[p] = (uint8_t)(2 - n + p);
        w->offset[p] = 16;
      } else {
        int digits = p > 1 ? p + 1 : 1;
        w->length[p] = (uint8_t)(digits + (ax >= 10 ? 4 : 3));
        w->offset[p] = (uint8_t)digits;
      }
    }
  }
}

/*
 * One element's ", " and text at `at`, from its digit vector (write_n), when it is not special;
 * its end. Stores 4 bytes at `at`, 16 at at + 2 or 3 and 4 at most 16 bytes after those: within
 * at + 23, in the room kept past an element's start (ELEMENT_ROOM).
 */
__attribute__((target("sse4.1"), always_inline)) static inline size_t write_one_sse41(uint8_t* out, size_t at, __m128i digits, int32_t e,
                                                                                     uint32_t bits) {
  /* Digit values are 0-9: those above zero mark the first and the last significant digit. */
  unsigned nonzero = (unsigned)_mm_movemask_epi8(_mm_cmpgt_epi8(digits, _mm_setzero_si128()));
  int first = __builtin_ctz(nonzero), last = 31 - __builtin_clz(nonzero);
  const struct write_n* w = &WRITE_N[(80 - first + e) & 127]; /* n + 64, n = 16 - first + e */
  __m128i shuf = _mm_load_si128((const __m128i*)WRITE_SHUF[w->shuf + first - 6]);
  __m128i text = _mm_add_epi8(_mm_shuffle_epi8(digits, shuf), _mm_load_si128((const __m128i*)WRITE_CHARS[w->layout]));
  int p = last - first + 1;
  size_t negative = bits >> 31;
  uint32_t separator = 0x002d202cu; /* ", -" */
  memcpy(out + at, &separator, 4);
  uint8_t* start = out + at + 2 + negative;
  _mm_storeu_si128((__m128i*)start, text);
  memcpy(start + w->offset[p], &w->suffix, 4);
  return at + 2 + negative + w->length[p];
}

/* The ten digits of four decided elements' k, as values in bytes 6-15 of a vector each, to slots
 * 0, 2, 1, 3 of `out` (digits8_avx2's order); special elements (k unset) get those of 1. */
__attribute__((target("sse4.1"))) static inline int digits4_sse41(const struct decision* d, __m128i* out) {
  __m128 a = _mm_loadu_ps((const float*)d), b = _mm_loadu_ps((const float*)(d + 2));
  __m128i k = _mm_castps_si128(_mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
  __m128i e = _mm_castps_si128(_mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  __m128i special = _mm_cmplt_epi32(e, _mm_set1_epi32(SPECIAL + 1));
  k = _mm_or_si128(_mm_andnot_si128(special, k), _mm_and_si128(special, _mm_set1_epi32(1)));
  /* hi = k / 10^8 (k < 2^31), lo = k % 10^8; a = lo / 10^4, b = lo % 10^4 (multiply-shifts checked for all k < 2^31). */
  const __m128i m1 = _mm_set1_epi32(1441151881), m2 = _mm_set1_epi32(109951163);
  __m128i hi = _mm_blend_epi16(_mm_srli_epi64(_mm_mul_epu32(k, m1), 57), _mm_srli_epi64(_mm_mul_epu32(_mm_srli_epi64(k, 32), m1), 25), 0xcc);
  __m128i lo = _mm_sub_epi32(k, _mm_mullo_epi32(hi, _mm_set1_epi32(100000000)));
  __m128i ha = _mm_blend_epi16(_mm_srli_epi64(_mm_mul_epu32(lo, m2), 40), _mm_srli_epi64(_mm_mul_epu32(_mm_srli_epi64(lo, 32), m2), 8), 0xcc);
  __m128i lb = _mm_sub_epi32(lo, _mm_mullo_epi32(ha, _mm_set1_epi32(10000)));
  /* The four-digit groups in 16-bit lanes (a0 b0 a1 b1 ...), by 100 (x * 5243 >> 19, x < 10^4). */
  __m128i g = _mm_or_si128(ha, _mm_slli_epi32(lb, 16));
  __m128i q = _mm_srli_epi16(_mm_mulhi_epu16(g, _mm_set1_epi16(5243)), 3);
  __m128i hundred = _mm_set1_epi16(100);
  __asm__("" : "+x"(hundred)); /* a multiply (pmullw), not gcc's four shifts and adds */
  __m128i r = _mm_sub_epi16(g, _mm_mullo_epi16(q, hundred));
  __m128i p01 = _mm_unpacklo_epi16(q, r), p23 = _mm_unpackhi_epi16(q, r);
  /* Each value below 100 as two digit bytes, tens first (y * 6554 >> 16 = y / 10). */
  __m128i m10 = _mm_set1_epi16(6554), ten = _mm_set1_epi16(10);
  __asm__("" : "+x"(ten));
  __m128i t = _mm_mulhi_epu16(p01, m10);
  __m128i d01 = _mm_or_si128(t, _mm_slli_epi16(_mm_sub_epi16(p01, _mm_mullo_epi16(t, ten)), 8));
  t = _mm_mulhi_epu16(p23, m10);
  __m128i d23 = _mm_or_si128(t, _mm_slli_epi16(_mm_sub_epi16(p23, _mm_mullo_epi16(t, ten)), 8));
  t = _mm_mulhi_epu16(hi, m10);
  __m128i dh = _mm_or_si128(t, _mm_slli_epi16(_mm_sub_epi16(hi, _mm_mullo_epi16(t, ten)), 8));
  /* The two high digits into bytes 6-7, the eight others into 8-15. */
  __m128i hev = _mm_slli_epi64(dh, 48), hod = _mm_slli_epi64(_mm_srli_epi64(dh, 32), 48);
  out[0] = _mm_unpacklo_epi64(hev, d01);
  out[2] = _mm_blend_epi16(hod, d01, 0xf0);
  out[1] = _mm_alignr_epi8(d23, hev, 8);
  out[3] = _mm_unpackhi_epi64(hod, d23);
  return _mm_movemask_ps(_mm_castsi128_ps(special));
}

/* digits4_sse41 for eight elements in AVX2: the same arithmetic, elements 0 1 4 5 in the low
 * lanes and 2 3 6 7 in the high ones, stored as slots 0 2 1 3 4 6 5 7 (slot = element with bits
 * 0 and 1 swapped). */
__attribute__((target("avx2"))) static inline int digits8_avx2(const struct decision* d, __m128i* out) {
  __m256 a = _mm256_loadu_ps((const float*)d), b = _mm256_loadu_ps((const float*)(d + 4));
  __m256i k = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
  __m256i e = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  __m256i special = _mm256_cmpgt_epi32(_mm256_set1_epi32(SPECIAL + 1), e);
  k = _mm256_blendv_epi8(k, _mm256_set1_epi32(1), special);
  const __m256i m1 = _mm256_set1_epi32(1441151881), m2 = _mm256_set1_epi32(109951163);
  __m256i hi = _mm256_blend_epi16(_mm256_srli_epi64(_mm256_mul_epu32(k, m1), 57), _mm256_srli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(k, 32), m1), 25),
                                  0xcc);
  __m256i lo = _mm256_sub_epi32(k, _mm256_mullo_epi32(hi, _mm256_set1_epi32(100000000)));
  __m256i ha = _mm256_blend_epi16(_mm256_srli_epi64(_mm256_mul_epu32(lo, m2), 40), _mm256_srli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(lo, 32), m2), 8),
                                  0xcc);
  __m256i lb = _mm256_sub_epi32(lo, _mm256_mullo_epi32(ha, _mm256_set1_epi32(10000)));
  __m256i g = _mm256_or_si256(ha, _mm256_slli_epi32(lb, 16));
  __m256i q = _mm256_srli_epi16(_mm256_mulhi_epu16(g, _mm256_set1_epi16(5243)), 3);
  __m256i hundred = _mm256_set1_epi16(100);
  __asm__("" : "+x"(hundred)); /* a multiply (pmullw), not gcc's four shifts and adds */
  __m256i r = _mm256_sub_epi16(g, _mm256_mullo_epi16(q, hundred));
  __m256i p01 = _mm256_unpacklo_epi16(q, r), p23 = _mm256_unpackhi_epi16(q, r);
  __m256i m10 = _mm256_set1_epi16(6554), ten = _mm256_set1_epi16(10);
  __asm__("" : "+x"(ten));
  __m256i t = _mm256_mulhi_epu16(p01, m10);
  __m256i d01 = _mm256_or_si256(t, _mm256_slli_epi16(_mm256_sub_epi16(p01, _mm256_mullo_epi16(t, ten)), 8));
  t = _mm256_mulhi_epu16(p23, m10);
  __m256i d23 = _mm256_or_si256(t, _mm256_slli_epi16(_mm256_sub_epi16(p23, _mm256_mullo_epi16(t, ten)), 8));
  t = _mm256_mulhi_epu16(hi, m10);
  __m256i dh = _mm256_or_si256(t, _mm256_slli_epi16(_mm256_sub_epi16(hi, _mm256_mullo_epi16(t, ten)), 8));
  __m256i hev = _mm256_slli_epi64(dh, 48), hod = _mm256_slli_epi64(_mm256_srli_epi64(dh, 32), 48);
  _mm256_storeu_si256((__m256i*)out, _mm256_unpacklo_epi64(hev, d01));
  _mm256_storeu_si256((__m256i*)(out + 2), _mm256_blend_epi16(hod, d01, 0xf0));
  _mm256_storeu_si256((__m256i*)(out + 4), _mm256_alignr_epi8(d23, hev, 8));
  _mm256_storeu_si256((__m256i*)(out + 6), _mm256_unpackhi_epi64(hod, d23));
  return _mm256_movemask_ps(_mm256_castsi256_ps(special));
}

/* format_run's scalar step for element j: its ", " and text, or 0 where format_run stops. */
static inline int write_scalar(uint8_t* out, size_t* at, int64_t bound, const uint32_t* words, const struct decision* d, int64_t j) {
  if ((int64_t)*at > bound) return 0;
  size_t next = write_decided(out, *at + 2, words[j], &d[j]);
  if (next == (size_t)-1) return 0;
  out[*at] = ',';
  out[*at + 1] = ' ';
  *at = next;
  return 1;
}

/*
 * format_run's writing of a decided batch where the CPU has SSE4.1 (AVX2: avx2 set, and the
 * function compiled for it): the digits of the batch first, eight elements at a time (digits8_avx2
 * or digits4_sse41), then each element's text from its digits in one shuffle (write_one_sse41),
 * no branch on its form. Eight elements none of them special, whose last starts at most
 * 7 × F32_TEXT_MAX after the first, and that before where the run must stop (bound), go without
 * checks; else format_run's checks element by element, and write_decided for special elements.
 * Returns the elements written, *at_io the position.
 */
__attribute__((always_inline, target("sse4.1"))) static inline int64_t write_batch_vector(const uint32_t* words, const struct decision* d, int64_t count,
                                                                                         uint8_t* out, int64_t bound, size_t* at_io, int bare_first,
                                                                                         int avx2) {
  __m128i digits[256];
  uint8_t special[32];
  size_t at = *at_io;
  int64_t j = 0;
  if (bare_first && count > 0) {
    if ((int64_t)at > bound) goto done;
    size_t next = write_decided(out, at, words[0], &d[0]);
    if (next == (size_t)-1) goto done;
    at = next;
    j = 1;
  }
  words += j;
  d += j;
  count -= j;
  int64_t groups = count >> 3;
  for (int64_t g = 0; g < groups; g++) {
    const struct decision* dg = d + 8 * g;
    special[g] = (uint8_t)(avx2 ? digits8_avx2(dg, digits + 8 * g) : digits4_sse41(dg, digits + 8 * g) | digits4_sse41(dg + 4, digits + 8 * g + 4));
  }
  int64_t i = 0;
  for (int64_t g = 0; g < groups; g++) {
    const struct decision* dg = d + 8 * g;
    const uint32_t* wg = words + 8 * g;
    const __m128i* vg = digits + 8 * g;
    if (__builtin_expect(!special[g] && (int64_t)at + 7 * F32_TEXT_MAX <= bound, 1)) {
      at = write_one_sse41(out, at, vg[0], dg[0].e, wg[0]);
      at = write_one_sse41(out, at, vg[2], dg[1].e, wg[1]);
      at = write_one_sse41(out, at, vg[1], dg[2].e, wg[2]);
      at = write_one_sse41(out, at, vg[3], dg[3].e, wg[3]);
      at = write_one_sse41(out, at, vg[4], dg[4].e, wg[4]);
      at = write_one_sse41(out, at, vg[6], dg[5].e, wg[5]);
      at = write_one_sse41(out, at, vg[5], dg[6].e, wg[6]);
      at = write_one_sse41(out, at, vg[7], dg[7].e, wg[7]);
      continue;
    }
    for (int l = 0; l < 8; l++) {
      i = 8 * g + l;
      if ((int64_t)at > bound) goto stop;
      if (dg[l].e <= SPECIAL) {
        if (!write_scalar(out, &at, bound, words, d, i)) goto stop;
      } else {
        at = write_one_sse41(out, at, vg[(l & 4) | (l & 1) << 1 | (l & 2) >> 1], dg[l].e, wg[l]);
      }
    }
  }
  for (i = 8 * groups; i < count; i++)
    if (!write_scalar(out, &at, bound, words, d, i)) goto stop;
  i = count;
stop:
  j += i;
done:
  *at_io = at;
  return j;
}

__attribute__((target("sse4.1"))) static int64_t write_batch_sse41(const uint32_t* words, const struct decision* d, int64_t count, uint8_t* out,
                                                                    int64_t bound, size_t* at_io, int bare_first) {
  return write_batch_vector(words, d, count, out, bound, at_io, bare_first, 0);
}

__attribute__((target("avx2"))) static int64_t write_batch_avx2(const uint32_t* words, const struct decision* d, int64_t count, uint8_t* out,
                                                                 int64_t bound, size_t* at_io, int bare_first) {
  return write_batch_vector(words, d, count, out, bound, at_io, bare_first, 1);
}
#endif


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

/*
 * formatFloat32s' loop: elements from `index` while index < end and at <= limit (and their room
 * fits in out_length); returns the output position, *stopped the next element.
 */
static size_t format_run(const uint32_t* words, int64_t index, int64_t end, uint8_t* out, size_t out_length, size_t at, int64_t limit, int first,
                         int64_t* stopped) {
  struct decision batch[256];
#if defined(__x86_64__)
  /* Where the writers must stop: (int64_t)at > bound exactly when at > limit or at + ELEMENT_ROOM > out_length. */
  int64_t room = out_length >= ELEMENT_ROOM ? (int64_t)(out_length - ELEMENT_ROOM) : -1;
  int64_t bound = limit < room ? limit : room;
#endif
  while (index < end && (int64_t)at <= limit) {
    int64_t count = end - index < 256 ? end - index : 256;
    decide_batch(words + index, count, batch);
#if defined(__x86_64__)
    if (has_sse41) {
      int64_t written = has_avx2 ? write_batch_avx2(words + index, batch, count, out, bound, &at, index == 0 && first)
                                 : write_batch_sse41(words + index, batch, count, out, bound, &at, index == 0 && first);
      index += written;
      if (written < count) goto stop;
      continue;
    }
#endif
    for (int64_t j = 0; j < count; j++, index++) {
      if ((int64_t)at > limit || at + ELEMENT_ROOM > out_length) goto stop;
      if (index == 0 && first) {
        size_t next = write_decided(out, at, words[index], &batch[j]);
        if (next == (size_t)-1) goto stop;
        at = next;
        continue;
      }
      size_t next = write_decided(out, at + 2, words[index], &batch[j]);
      if (next == (size_t)-1) goto stop;
      out[at] = ',';
      out[at + 1] = ' ';
      at = next;
    }
  }
stop:
  *stopped = index;
  return at;
}

/* The arguments of formatFloat32s and formatFloat32sAsync, checked. */
struct format_args {
  uint32_t* words;
  uint8_t* out;
  double* state;
  size_t words_length, out_length, state_length;
  int64_t index, end, pos, limit;
  bool first;
};

static int format_arguments(napi_env env, napi_value* argv, struct format_args* a) {
  return typed(env, argv[0], napi_uint32_array, (void**)&a->words, &a->words_length) && index_arg(env, argv[1], &a->index) &&
         index_arg(env, argv[2], &a->end) && typed(env, argv[3], napi_uint8_array, (void**)&a->out, &a->out_length) &&
         index_arg(env, argv[4], &a->pos) && index_arg(env, argv[5], &a->limit) && napi_get_value_bool(env, argv[6], &a->first) == napi_ok &&
         typed(env, argv[7], napi_float64_array, (void**)&a->state, &a->state_length) && a->state_length >= 1 && a->index >= 0 && a->pos >= 0 &&
         a->end <= (int64_t)a->words_length;
}

static napi_value format_float32s_js(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  struct format_args a;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 8 || !format_arguments(env, argv, &a))
    return fail(env, "formatFloat32s(words, index, end, out, pos, limit, first, state)");
  int64_t stopped;
  size_t at = format_run(a.words, a.index, a.end, a.out, a.out_length, (size_t)a.pos, a.limit, a.first, &stopped);
  a.state[0] = (double)stopped;
  return number(env, (double)at);
}

/*
 * formatFloat32sAsync: the same loop on a thread of the pool, so that the caller formats another
 * part of the tensor meanwhile. An element left for the exact route does not end the job, as it
 * ends formatFloat32s: the job leaves `gap` bytes for it in `out`, records (element, position of
 * the gap) in `stops`, and goes on after it. It ends at `end`, for want of room, or when `stops`
 * is full; `state[0]` is then the next element, `state[1]` the number of gaps, which the caller
 * fills with the elements' text and closes before it writes `out`. The job holds references to
 * `words`, `out`, `state` and `stops`, which the caller leaves alone (but for reading other
 * elements of `words`) until the promise settles.
 */
typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref refs[4];
  struct format_args a;
  double* stops;
  size_t stops_length;
  int64_t gap;
  int64_t stopped, gaps;
  size_t at;
} format_job;

static void format_job_run(napi_env env, void* data) {
  (void)env;
  format_job* job = data;
  struct format_args* a = &job->a;
  size_t at = (size_t)a->pos;
  int64_t index = a->index, stopped, gaps = 0, room = (int64_t)(job->stops_length / 2);
  for (;;) {
    at = format_run(a->words, index, a->end, a->out, a->out_length, at, a->limit, a->first, &stopped);
    /* Stopped for room (or at the end) rather than for the exact route, or no gap left: done. */
    if (stopped >= a->end || gaps == room || (int64_t)(at + (size_t)job->gap) > a->limit || at + (size_t)job->gap + ELEMENT_ROOM > a->out_length)
      break;
    job->stops[2 * gaps] = (double)stopped;
    job->stops[2 * gaps + 1] = (double)at;
    gaps++;
    at += (size_t)job->gap;
    index = stopped + 1;
  }
  job->stopped = stopped;
  job->gaps = gaps;
  job->at = at;
}

static void format_job_done(napi_env env, napi_status status, void* data) {
  format_job* job = data;
  if (status != napi_ok) {
    napi_value message, error;
    napi_create_string_utf8(env, "formatFloat32sAsync cancelled", NAPI_AUTO_LENGTH, &message);
    napi_create_error(env, NULL, message, &error);
    napi_reject_deferred(env, job->deferred, error);
  } else {
    job->a.state[0] = (double)job->stopped;
    job->a.state[1] = (double)job->gaps;
    napi_resolve_deferred(env, job->deferred, number(env, (double)job->at));
  }
  for (int i = 0; i < 4; i++) napi_delete_reference(env, job->refs[i]);
  napi_delete_async_work(env, job->work);
  free(job);
}

static napi_value format_float32s_async_js(napi_env env, napi_callback_info info) {
  size_t argc = 10;
  napi_value argv[10];
  const char* usage = "formatFloat32sAsync(words, index, end, out, pos, limit, first, state, stops, gap)";
  format_job* job = calloc(1, sizeof *job);
  if (job == NULL) return fail(env, "formatFloat32sAsync: out of memory");
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 10 || !format_arguments(env, argv, &job->a) ||
      job->a.state_length < 2 || !typed(env, argv[8], napi_float64_array, (void**)&job->stops, &job->stops_length) ||
      !index_arg(env, argv[9], &job->gap) || job->gap < F32_TEXT_MAX) {
    free(job);
    return fail(env, usage);
  }
  int made = 0;
  napi_value promise, resource;
  const int kept[4] = {0, 3, 7, 8};
  for (; made < 4; made++)
    if (napi_create_reference(env, argv[kept[made]], 1, &job->refs[made]) != napi_ok) break;
  if (made == 4 && napi_create_promise(env, &job->deferred, &promise) == napi_ok &&
      napi_create_string_utf8(env, "st-convert.formatFloat32sAsync", NAPI_AUTO_LENGTH, &resource) == napi_ok &&
      napi_create_async_work(env, NULL, resource, format_job_run, format_job_done, job, &job->work) == napi_ok) {
    if (napi_queue_async_work(env, job->work) == napi_ok) return promise;
    napi_delete_async_work(env, job->work);
  }
  for (int i = 0; i < made; i++) napi_delete_reference(env, job->refs[i]);
  free(job);
  return fail(env, "formatFloat32sAsync: cannot queue the job");
}

static int is_space(uint8_t c) {
  return c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09;
}

/* ---------- the reader's loops: plain numbers 64 bytes at a time (x86-64 with SSE4.1) ---------- */

#if defined(__x86_64__)
#include <immintrin.h>

/* A plain number's digits as number_digits reads them. */
struct digits {
  uint64_t value;         /* the digits, the point dropped */
  size_t fraction_length; /* 0 (no point) to 13 */
  size_t length;          /* bytes taken */
};

/*
 * The number at p, from 16 bytes read there, when it is -?-less (the caller steps over a sign)
 * 0 or [1-9][0-9]*, then optionally a point and at least one digit, all of it within 15 bytes, so
 * that the byte after it was read too: at most 14 digits, so within 15 significant ones and a
 * decimal exponent of -13 or more (the fast path's bounds). Returns 0 for anything else, and the
 * general path decides. The digits' lengths come from one comparison's bit mask, their value
 * from the 16 bytes with the point squeezed out, right-aligned, by a shuffle and three multiply-adds.
 */
__attribute__((target("sse4.1"))) static inline int number_digits(const uint8_t* p, struct digits* out) {
  __m128i v = _mm_loadu_si128((const __m128i*)p);
  __m128i d = _mm_sub_epi8(v, _mm_set1_epi8(0x30));
  __m128i is_digit = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
  uint32_t digits = (uint32_t)_mm_movemask_epi8(is_digit);
  uint32_t points = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x2e)));
  uint32_t int_length = (uint32_t)__builtin_ctz(~digits);
  uint32_t is_float = (points >> int_length) & 1;
  uint32_t fraction_length = is_float ? (uint32_t)__builtin_ctz(~(digits >> (int_length + 1))) : 0;
  uint32_t length = int_length + is_float * (1 + fraction_length);
  uint32_t zeros = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x30)));
  /* Refused: no digit first, a 0 before another digit, a point without a digit after it, or too long.
   * Bit operations on the masks, not conditions in turn: whether a number starts with 0 is a coin's
   * toss in real data, a branch on it mispredicted half the time. */
  uint32_t refused = (~digits & 1) | (zeros & (digits >> 1) & 1) | (is_float & (fraction_length == 0)) | (length > 15);
  if (refused != 0) return 0;
  /* Digit k of the number (k < count) goes to byte 16 - count + k: from byte k before the point, k + 1 after it. */
  uint32_t count = int_length + fraction_length;
  __m128i iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m128i k = _mm_add_epi8(iota, _mm_set1_epi8((char)(count - 16)));
  __m128i after_point = _mm_cmpgt_epi8(k, _mm_set1_epi8((char)(int_length - 1)));
  __m128i from = _mm_sub_epi8(k, after_point);               /* +1 where after the point */
  from = _mm_or_si128(from, _mm_cmplt_epi8(k, _mm_setzero_si128())); /* 0x80: a zero byte */
  __m128i w = _mm_shuffle_epi8(d, from);
  __m128i pairs = _mm_maddubs_epi16(w, _mm_setr_epi8(10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1));
  __m128i quads = _mm_madd_epi16(pairs, _mm_setr_epi16(100, 1, 100, 1, 100, 1, 100, 1));
  __m128i eights = _mm_madd_epi16(_mm_packus_epi32(quads, quads), _mm_setr_epi16(10000, 1, 10000, 1, 0, 0, 0, 0));
  uint64_t both = (uint64_t)_mm_cvtsi128_si64(eights);
  out->value = (both & 0xffffffffu) * 100000000u + (both >> 32);
  out->fraction_length = fraction_length;
  out->length = length;
  return 1;
}

/* Bit i set where p[i] is a comma, for the 64 bytes at p. */
__attribute__((target("sse4.1"))) static inline uint64_t comma_mask(const uint8_t* p) {
  const __m128i comma = _mm_set1_epi8(0x2c);
  uint64_t mask = 0;
  for (int i = 0; i < 4; i++)
    mask |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i*)(p + 16 * i)), comma)) << (16 * i);
  return mask;
}

/* Room a block reads past its start: 64 bytes, then a number's 16 after a space and a sign. */
#define BLOCK_ROOM 96

/*
 * The common case of both loops: numbers that number_digits takes, each ending at a comma, the
 * next starting just after it (or after one space). Where each starts and ends comes from the
 * commas' bits, not from reading the one before, so the processor works on several at once.
 * Each stops at the first number not of this form, or when its 64 bytes run out; the general
 * path goes on from there, and finds what it would have found without the block.
 */

/* storeFloat32Run's block: `at` is a number's start. Returns the comma after the last number
 * stored (at when none was), *leaf_io advanced past them. */
/* store_block's numbers of the 64-byte window at *start_io, one by one (store_block_avx2 takes a
 * window so where it cannot take it whole): 0 once one is not of that form or the window holds
 * no comma, the block then ends; *resume_io the comma after the last one stored. */
__attribute__((target("sse4.1"), always_inline)) static inline int store_window_numbers(const uint8_t* buf, size_t* start_io, size_t* resume_io,
                                                                                        float* floats, int64_t base, int64_t* leaf_io,
                                                                                        int64_t end_leaf) {
  size_t start = *start_io, window = start;
  int64_t leaf = *leaf_io;
  uint64_t commas = comma_mask(buf + window);
  int whole = commas != 0;
  while (commas != 0 && leaf < end_leaf) {
    size_t end = window + (size_t)__builtin_ctzll(commas);
    commas &= commas - 1;
    size_t s = start + (buf[start] == 0x20);
    uint32_t negative = buf[s] == 0x2d;
    size_t j = s + negative;
    struct digits q;
    if (!number_digits(buf + j, &q) || j + q.length != end) {
      whole = 0;
      break;
    }
    /* Below 10^15: exact as a double, and never infinite as an F32. */
    float value = (float)((double)(int64_t)q.value / exact_pow10[q.fraction_length]);
    uint32_t bits;
    memcpy(&bits, &value, 4);
    bits ^= negative << 31;
    memcpy(&floats[leaf - base], &bits, 4);
    leaf++;
    *resume_io = end;
    start = end + 1;
  }
  *start_io = start;
  *leaf_io = leaf;
  return whole;
}

__attribute__((target("sse4.1"))) static size_t store_block(const uint8_t* buf, size_t n, size_t at, float* floats, int64_t base,
                                                            int64_t* leaf_io, int64_t end_leaf) {
  int64_t leaf = *leaf_io;
  size_t start = at, resume = at;
  while (start + BLOCK_ROOM <= n && leaf < end_leaf && store_window_numbers(buf, &start, &resume, floats, base, &leaf, end_leaf));
  *leaf_io = leaf;
  return resume;
}

/* Bit i set where p[i] equals c, for the 64 bytes at p. */
__attribute__((target("sse4.1"))) static inline uint64_t byte_mask(const __m128i* v, __m128i c) {
  uint64_t mask = 0;
  for (int i = 0; i < 4; i++) mask |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v[i], c)) << (16 * i);
  return mask;
}

/*
 * The numbers a window of 64 bytes starting at a comma holds whole, judged all at once from the
 * bit masks of its bytes: the numbers between that comma and the window's last one, when every
 * one of them is a number number_block would take, each of a kind in `kinds` (a sign at all
 * counts as negative, here). Returns the last comma's position in the window, *tokens the numbers
 * before it; 0 when the window holds no whole number or any of them is not of that form, and
 * number_block's loop, number by number, then decides. What it checks, on the bytes strictly
 * between the first comma and the last (R):
 *   only digits, commas, spaces, signs and points; a space only just after a comma; a sign only
 *   where a number starts (after a comma, or its space); a digit first (S: after the space and
 *   the sign, up to and including the last comma, so that an empty number is seen); no 0 first
 *   followed by a digit; a point between digits, and at most one in a number (the digits after a
 *   point run up to a comma, never to another point); at most 15 digits and points in a row, so
 *   that number_digits sees the whole number in its 16 bytes.
 */
/* Bit i of each: the byte at i of a 64-byte window is of that class. */
struct byte_classes {
  uint64_t digit, comma, space, minus, point, zero;
};

__attribute__((target("sse4.1"))) static void classes_sse41(const uint8_t* p, struct byte_classes* c) {
  __m128i v[4];
  for (int i = 0; i < 4; i++) v[i] = _mm_loadu_si128((const __m128i*)(p + 16 * i));
  uint64_t digit = 0;
  for (int i = 0; i < 4; i++) {
    __m128i d = _mm_sub_epi8(v[i], _mm_set1_epi8(0x30));
    digit |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d)) << (16 * i);
  }
  *c = (struct byte_classes){digit, byte_mask(v, _mm_set1_epi8(0x2c)), byte_mask(v, _mm_set1_epi8(0x20)), byte_mask(v, _mm_set1_epi8(0x2d)),
                             byte_mask(v, _mm_set1_epi8(0x2e)), byte_mask(v, _mm_set1_epi8(0x30))};
}

/* The same classes, 32 bytes at a time. */
__attribute__((target("avx2"))) static inline uint64_t class_avx2(__m256i a, __m256i b, char byte) {
  __m256i c = _mm256_set1_epi8(byte);
  return (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, c)) | (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, c)) << 32;
}

__attribute__((target("avx2"))) static void classes_avx2(const uint8_t* p, struct byte_classes* c) {
  __m256i a = _mm256_loadu_si256((const __m256i*)p), b = _mm256_loadu_si256((const __m256i*)(p + 32));
  __m256i da = _mm256_sub_epi8(a, _mm256_set1_epi8(0x30)), db = _mm256_sub_epi8(b, _mm256_set1_epi8(0x30));
  __m256i nine = _mm256_set1_epi8(9);
  uint64_t digit = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(da, nine), da)) |
                   (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(db, nine), db)) << 32;
  *c = (struct byte_classes){digit, class_avx2(a, b, 0x2c), class_avx2(a, b, 0x20), class_avx2(a, b, 0x2d), class_avx2(a, b, 0x2e), class_avx2(a, b, 0x30)};
}

/*
 * The judgement count_window describes, from a window's byte classes: the bytes from just after
 * its first comma through its last comma (bit i: byte i) when every number between them is of
 * that form, else 0 (no whole number, or one not of that form); *last the last comma's position.
 */
__attribute__((always_inline)) static inline uint64_t whole_numbers(const struct byte_classes* c, int* last) {
  uint64_t digit = c->digit, comma = c->comma, space = c->space, minus = c->minus, point = c->point, zero = c->zero;
  if ((comma & ~1ull) == 0) return 0;
  *last = 63 - __builtin_clzll(comma);
  uint64_t last_bit = 1ull << *last;
  uint64_t inside = (last_bit - 1) & ~1ull, through = inside | last_bit;
  uint64_t bad = ~(digit | comma | space | minus | point) & inside;
  bad |= space & ~(comma << 1) & inside;
  uint64_t starts = ((comma << 1) & ~space) | (space << 1);
  bad |= minus & ~starts & inside;
  uint64_t first = (starts & ~minus) | (minus << 1);
  bad |= first & ~digit & through;
  bad |= ((first & zero) << 1) & digit & inside;
  bad |= point & ~(digit << 1) & inside;
  bad |= (point << 1) & ~digit & through;
  uint64_t fraction_starts = (point << 1) & inside;
  bad |= ((digit & inside) + fraction_starts) & ~digit & point;
  uint64_t run = (digit | point) & inside;
  run &= run >> 1;
  run &= run >> 2;
  run &= run >> 4;
  run &= run >> 8;
  bad |= run;
  return bad == 0 ? through : 0;
}

__attribute__((target("sse4.1"))) static size_t count_window(const uint8_t* p, int64_t kinds, int64_t* tokens) {
  struct byte_classes c;
  if (has_avx2)
    classes_avx2(p, &c);
  else
    classes_sse41(p, &c);
  int last;
  uint64_t through = whole_numbers(&c, &last);
  if (through == 0) return 0;
  uint64_t inside = through & ~(1ull << last);
  int64_t count = __builtin_popcountll(c.comma & through);
  int64_t floats = __builtin_popcountll(c.point & inside);
  if ((!(kinds & LEAF_FLOAT) && floats != 0) || (!(kinds & LEAF_INTEGER) && floats != count) || (!(kinds & LEAF_NEGATIVE) && (c.minus & inside) != 0))
    return 0;
  *tokens = count;
  return (size_t)last;
}

/* numberRun's block: `at` is a comma after a value. Returns the end of the last number counted
 * (at when none was), *count_io advanced past them. Each window starts at a comma: count_window
 * takes its numbers at once where it can, else they are taken one by one. */
__attribute__((target("sse4.1"))) static size_t number_block(const uint8_t* buf, size_t n, size_t at, int64_t* count_io, int64_t dim,
                                                             int64_t kinds, int64_t max_length) {
  int64_t count = *count_io;
  size_t start = at + 1, resume = at;
  while (start + BLOCK_ROOM <= n && (dim == -1 || count < dim)) {
    size_t window = start - 1;
    int64_t tokens;
    size_t last = max_length >= 16 ? count_window(buf + window, kinds, &tokens) : 0;
    if (last != 0 && (dim == -1 || count + tokens <= dim)) {
      count += tokens;
      resume = window + last;
      start = resume + 1;
      continue;
    }
    uint64_t commas = comma_mask(buf + window) & ~1ull;
    if (commas == 0) break;
    do {
      size_t end = window + (size_t)__builtin_ctzll(commas);
      commas &= commas - 1;
      size_t s = start + (buf[start] == 0x20);
      uint32_t negative = buf[s] == 0x2d;
      struct digits q;
      if (!number_digits(buf + s + negative, &q) || s + negative + q.length != end || (int64_t)(end - s) > max_length) goto done;
      /* Negative: a sign before a digit other than 0. */
      int64_t kind = (q.fraction_length != 0 ? LEAF_FLOAT : LEAF_INTEGER) | (int64_t)((negative & (q.value != 0)) * LEAF_NEGATIVE);
      if ((kinds & kind) != kind) goto done;
      count++;
      resume = end;
      start = end + 1;
    } while (commas != 0 && (dim == -1 || count < dim));
  }
done:
  *count_io = count;
  return resume;
}

/*
 * storeFloat32Run's block where the CPU has AVX2 (and BMI1/2): whole windows of 64 bytes from a
 * comma, judged at once from their bytes' bit masks (store_window: the numbers store_block would
 * take, every one of them), their numbers' ends gathered into a list, and the list parsed four
 * numbers at a time (store_four), without a branch per number. A window not judged whole is taken
 * number by number as store_block takes it.
 */

/* The divisor of a number from its lane's weights (store_four): 2 * (16 - f) for a point f digits
 * from the end (0 for none), + 1 for a sign; the power of ten, negative for a sign, so that the
 * quotient has the sign (a correctly rounded division is symmetric). */
static double store_divisors[40];

static void store_divisors_initialize(void) {
  for (int s = 0; s < 40; s++) {
    int u = s >> 1, f = u == 0 ? 0 : 16 - u;
    if (f < 0 || f > 22) f = 0;
    store_divisors[s] = (s & 1) ? -exact_pow10[f] : exact_pow10[f];
  }
}

/* The ends (commas) of the numbers a window of 64 bytes from the comma at p holds whole, when
 * store_block would take every one of them: bit e set for a number ending at p[e]. 0 otherwise.
 * The same judgement as count_window's with every kind allowed. */
__attribute__((target("avx2,bmi,bmi2"))) static inline uint64_t store_window(const uint8_t* p, uint64_t* last_out) {
  struct byte_classes c;
  classes_avx2(p, &c);
  int last;
  uint64_t through = whole_numbers(&c, &last);
  if (through == 0) return 0;
  *last_out = (uint64_t)last;
  return c.comma & through;
}

/* One 128-bit lane per number: the 16 bytes before its end, reversed (byte 0 its last digit).
 * Returns the digits' value as [low 8 digits, high 8 digits] in the lane's first two 32-bit
 * words; *weights the lane's byte sum that indexes store_divisors. */
__attribute__((target("avx2,bmi,bmi2"))) static inline __m256i store_lanes(const uint8_t* a, const uint8_t* b, __m256i* weights) {
  const __m256i reverse = _mm256_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i top_of_low = _mm256_setr_epi8(-128, -128, -128, -128, -128, -128, -128, -128, 7, 7, 7, 7, 7, 7, 7, 7, -128, -128, -128, -128, -128, -128,
                                              -128, -128, 7, 7, 7, 7, 7, 7, 7, 7);
  const __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -113, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -113);
  __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)a)), _mm_loadu_si128((const __m128i*)b), 1);
  __m256i r = _mm256_shuffle_epi8(v, reverse);
  __m256i e = _mm256_sub_epi8(r, _mm256_set1_epi8(0x2e)); /* point 0, digits 2..11; comma, space, sign below 0 */
  __m256i zero = _mm256_setzero_si256();
  __m256i not_run = _mm256_cmpgt_epi8(zero, e);
  __m256i pt = _mm256_cmpeq_epi8(e, zero);
  /* Bytes from the first not of the number on (the number's digits and point are the bytes before). */
  __m256i nr = _mm256_or_si256(not_run, _mm256_sub_epi64(zero, not_run));
  nr = _mm256_or_si256(nr, _mm256_shuffle_epi8(nr, top_of_low));
  /* Bytes from the number's point on. */
  __m256i pm = _mm256_andnot_si256(nr, pt);
  __m256i pa = _mm256_or_si256(pm, _mm256_sub_epi64(zero, pm));
  pa = _mm256_or_si256(pa, _mm256_shuffle_epi8(pa, top_of_low));
  __m256i d = _mm256_andnot_si256(nr, _mm256_sub_epi8(r, _mm256_set1_epi8(0x30)));
  __m256i digits = _mm256_shuffle_epi8(d, _mm256_sub_epi8(iota, pa)); /* from the point on, the byte after: the point squeezed out */
  __m256i boundary = _mm256_xor_si256(nr, _mm256_slli_si256(nr, 1));
  __m256i sign = _mm256_and_si256(_mm256_and_si256(boundary, e), _mm256_set1_epi8(1)); /* the byte before the digits: a sign (e = -1) odd, a comma (-2) or a space (-14) even */
  *weights = _mm256_sad_epu8(_mm256_or_si256(_mm256_and_si256(pa, _mm256_set1_epi8(2)), sign), zero);
  __m256i pairs = _mm256_maddubs_epi16(digits, _mm256_set1_epi16(0x0a01));
  __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00640001));
  return _mm256_madd_epi16(_mm256_packus_epi32(quads, quads), _mm256_set1_epi32(0x27100001));
}

/* The four numbers ending at ends[0..3] (each after a comma or a window's start, certified). */
__attribute__((target("avx2,bmi,bmi2"))) static inline __m128 store_four(const uint8_t* buf, const size_t* ends) {
  __m256i wa, wb;
  __m256i va = store_lanes(buf + ends[0] - 16, buf + ends[2] - 16, &wa);
  __m256i vb = store_lanes(buf + ends[1] - 16, buf + ends[3] - 16, &wb);
  __m256i both = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(va, vb), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  __m256d low = _mm256_cvtepi32_pd(_mm256_castsi256_si128(both)), high = _mm256_cvtepi32_pd(_mm256_extracti128_si256(both, 1));
  __m256d value = _mm256_add_pd(_mm256_mul_pd(high, _mm256_set1_pd(1e8)), low); /* exact: below 10^15 */
  __m256i index = _mm256_add_epi64(_mm256_unpacklo_epi64(wa, wb), _mm256_unpackhi_epi64(wa, wb));
  __m256d divisor = _mm256_i64gather_pd(store_divisors, index, 8);
  return _mm256_cvtpd_ps(_mm256_div_pd(value, divisor));
}

#define STORE_LIST 160
#define STORE_FLUSH 96

/* Stores the listed numbers from floats[leaf - base] on; all of them when `all`, else whole fours,
 * the rest moved to the list's front. Returns how many are left listed. */
__attribute__((target("avx2,bmi,bmi2"))) static size_t store_listed(const uint8_t* buf, size_t* ends, size_t listed, float* out, int all) {
  size_t k = 0;
  for (; k + 4 <= listed; k += 4) _mm_storeu_ps(out + k, store_four(buf, ends + k));
  size_t rest = listed - k;
  if (rest == 0) return 0;
  if (all) {
    size_t four[4];
    for (size_t t = 0; t < 4; t++) four[t] = ends[k + (t < rest ? t : rest - 1)];
    float values[4];
    _mm_storeu_ps(values, store_four(buf, four));
    memcpy(out + k, values, rest * 4);
    return 0;
  }
  for (size_t t = 0; t < rest; t++) ends[t] = ends[k + t];
  return rest;
}

__attribute__((target("avx2,bmi,bmi2"))) static size_t store_block_avx2(const uint8_t* buf, size_t n, size_t at, float* floats, int64_t base,
                                                                       int64_t* leaf_io, int64_t end_leaf) {
  int64_t leaf = *leaf_io, listed_from = leaf;
  size_t ends[STORE_LIST];
  size_t listed = 0;
  size_t start = at, resume = at;
  while (start + BLOCK_ROOM <= n && leaf < end_leaf) {
    size_t window = start - 1;
    if (start > 16 && buf[window] == 0x2c) {
      uint64_t last;
      uint64_t commas = store_window(buf + window, &last);
      int64_t count = (int64_t)__builtin_popcountll(commas);
      if (commas != 0 && count <= end_leaf - leaf) {
        size_t* list = ends + listed;
        uint64_t all = commas | 1ull << 63;
        for (int t = 0; t < 8; t++) {
          list[t] = window + (size_t)__builtin_ctzll(all);
          all &= all - 1;
          all |= 1ull << 63;
        }
        if (count > 8) {
          for (int t = 8; t < count; t++) {
            list[t] = window + (size_t)__builtin_ctzll(all);
            all &= all - 1;
          }
        }
        listed += (size_t)count;
        leaf += count;
        resume = window + (size_t)last;
        start = resume + 1;
        if (listed >= STORE_FLUSH) {
          size_t left = store_listed(buf, ends, listed, floats + (listed_from - base), 0);
          listed_from = leaf - (int64_t)left;
          listed = left;
        }
        continue;
      }
    }
    if (listed != 0) {
      store_listed(buf, ends, listed, floats + (listed_from - base), 1);
      listed = 0;
    }
    int whole = store_window_numbers(buf, &start, &resume, floats, base, &leaf, end_leaf);
    listed_from = leaf;
    if (!whole) break;
  }
  if (listed != 0) store_listed(buf, ends, listed, floats + (listed_from - base), 1);
  *leaf_io = leaf;
  return resume;
}
#endif

static size_t store_float32_run(const uint8_t* buf, size_t n, size_t i, int final, float* floats, int64_t base, int64_t leaf, int64_t end_leaf,
                                int64_t* leaf_out) {
  size_t at = (size_t)i;
  while (at < n && leaf < end_leaf) {
    uint8_t c = buf[at];
    if (c == 0x2c || c == 0x20 || c == 0x5b || c == 0x5d || c == 0x0a || c == 0x0d || c == 0x09) {
      at++;
      continue;
    }
#if defined(__x86_64__)
    if (has_sse41 && at + BLOCK_ROOM <= n) {
      int64_t stored = leaf;
      size_t next = has_avx2 && has_bmi2 ? store_block_avx2(buf, n, at, floats, base, &stored, end_leaf)
                                         : store_block(buf, n, at, floats, base, &stored, end_leaf);
      if (next != at) {
        at = next;
        leaf = stored;
        continue;
      }
    }
#endif
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
  *leaf_out = leaf;
  return at;
}
static size_t number_run(const uint8_t* buf, size_t n, size_t i, int64_t count, int64_t dim, int64_t kinds, int64_t max_length,
                         int64_t* count_out) {
  size_t at = (size_t)i, k0 = (size_t)i;
  while (k0 < n) {
    uint8_t c = buf[k0];
#if defined(__x86_64__)
    if (c == 0x2c && has_sse41 && k0 + BLOCK_ROOM <= n) {
      size_t next = number_block(buf, n, k0, &count, dim, kinds, max_length);
      if (next != k0) {
        k0 = next;
        at = next;
        continue;
      }
    }
#endif
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

  *count_out = count;
  return at;
}

/* ---------- the reader's loops on two cores ---------- */

/*
 * A run over a long stretch of text (a 2 MiB window of a big tensor's values) is split in two at
 * the first comma past its middle: a helper thread runs the second half while the calling thread
 * runs the first, and the call returns when both are done, with what one run over the whole
 * stretch returns. The halves join only where that is exactly so: the first half reached the
 * comma (a run over the text up to and including it ends there, having taken every value before
 * it), and the second half, which began at that comma as the whole run would have, is then the
 * rest of the run; otherwise its work is dropped. The second half does not know how many values
 * come before it: the count starts at 0 (numberRun splits only where its level's length cannot be
 * reached in the stretch), and its floats go to a scratch array copied into place after the join,
 * in pieces of CHECKPOINT_LEAVES whose end positions it records, so that when the stretch holds
 * more values than the caller asked for, the run goes on from the last piece's end on this
 * thread, at most CHECKPOINT_LEAVES values again. One helper thread serves the process; a caller
 * that finds it busy (another worker thread's call) runs the whole stretch itself.
 */
#define SPLIT_FROM (256 * 1024)
#define SPLIT_SEARCH 65536
#define CHECKPOINT_LEAVES 8192

enum { JOB_NONE, JOB_POSTED, JOB_FINISHED };
enum { KIND_COUNT, KIND_STORE };

static struct {
  pthread_mutex_t busy; /* held by the caller whose stretch the helper runs */
  pthread_mutex_t lock; /* guards state */
  pthread_cond_t wake, done;
  int state, kind;
  const uint8_t* buf;
  size_t n, i;
  int final;
  int64_t kinds, max_length, limit;
  float* scratch;
  size_t scratch_capacity;
  size_t* checkpoints;
  size_t checkpoint_capacity, checkpoint_count;
  size_t at;
  int64_t count;
} helper = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, JOB_NONE, 0,
            NULL, 0, 0, 0, 0, 0, 0, NULL, 0, NULL, 0, 0, 0, 0};
static pthread_once_t helper_once = PTHREAD_ONCE_INIT;
static int helper_started;
/* Runs split and joined, and joined runs that went on past the helper's last piece: the tests read them. */
static volatile int64_t splits_joined, splits_resumed;

static void helper_job(void) {
  if (helper.kind == KIND_COUNT) {
    helper.at = number_run(helper.buf, helper.n, helper.i, 0, -1, helper.kinds, helper.max_length, &helper.count);
    return;
  }
  int64_t leaf = 0;
  size_t at = helper.i;
  helper.checkpoint_count = 0;
  while (leaf < helper.limit) {
    int64_t target = leaf + CHECKPOINT_LEAVES < helper.limit ? leaf + CHECKPOINT_LEAVES : helper.limit, next;
    at = store_float32_run(helper.buf, helper.n, at, helper.final, helper.scratch, 0, leaf, target, &next);
    leaf = next;
    if (leaf < target) break;
    helper.checkpoints[helper.checkpoint_count++] = at;
  }
  helper.at = at;
  helper.count = leaf;
}

static void* helper_main(void* unused) {
  (void)unused;
  pthread_mutex_lock(&helper.lock);
  for (;;) {
    while (helper.state != JOB_POSTED) pthread_cond_wait(&helper.wake, &helper.lock);
    pthread_mutex_unlock(&helper.lock);
    helper_job();
    pthread_mutex_lock(&helper.lock);
    helper.state = JOB_FINISHED;
    pthread_cond_signal(&helper.done);
  }
  return NULL;
}

static void helper_start(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 2 || getenv("ST_CONVERT_ONE_CORE_READER") != NULL) return;
  pthread_t thread;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  helper_started = pthread_create(&thread, &attr, helper_main, NULL) == 0;
  pthread_attr_destroy(&attr);
}

/* The comma where [i, n) splits, or 0 when it does not: too short, no helper, or the helper busy
 * (then not taken). On success the caller holds helper.busy and posts a job. */
static size_t split_point(const uint8_t* buf, size_t n, size_t i) {
  if (n - i < SPLIT_FROM) return 0;
  pthread_once(&helper_once, helper_start);
  if (!helper_started) return 0;
  size_t mid = i + (n - i) / 2;
  size_t span = n - mid < SPLIT_SEARCH ? n - mid : SPLIT_SEARCH;
  const uint8_t* comma = memchr(buf + mid, 0x2c, span);
  if (comma == NULL) return 0;
  if (pthread_mutex_trylock(&helper.busy) != 0) return 0;
  return (size_t)(comma - buf);
}

static void helper_post(void) {
  pthread_mutex_lock(&helper.lock);
  helper.state = JOB_POSTED;
  pthread_cond_signal(&helper.wake);
  pthread_mutex_unlock(&helper.lock);
}

static void helper_wait(void) {
  pthread_mutex_lock(&helper.lock);
  while (helper.state != JOB_FINISHED) pthread_cond_wait(&helper.done, &helper.lock);
  helper.state = JOB_NONE;
  pthread_mutex_unlock(&helper.lock);
}

/* Grows the helper's scratch and checkpoints for `limit` leaves; 0 when memory is short. */
static int helper_room(int64_t limit) {
  size_t want = (size_t)limit;
  if (want > helper.scratch_capacity) {
    float* grown = realloc(helper.scratch, want * sizeof *grown);
    if (grown == NULL) return 0;
    helper.scratch = grown;
    helper.scratch_capacity = want;
  }
  size_t pieces = want / CHECKPOINT_LEAVES + 1;
  if (pieces > helper.checkpoint_capacity) {
    size_t* grown = realloc(helper.checkpoints, pieces * sizeof *grown);
    if (grown == NULL) return 0;
    helper.checkpoints = grown;
    helper.checkpoint_capacity = pieces;
  }
  return 1;
}

/* number_run over [i, n), on two cores when long enough; the same result. */
static size_t number_run_split(const uint8_t* buf, size_t n, size_t i, int64_t count, int64_t dim, int64_t kinds, int64_t max_length,
                               int64_t* count_out) {
  /* Each value takes two bytes with its comma: where the level's length could be reached in
   * [i, n), the run may stop there, which the second half, counting from 0, cannot tell. */
  if (dim != -1 && dim - count <= (int64_t)(n - i)) return number_run(buf, n, i, count, dim, kinds, max_length, count_out);
  size_t s = split_point(buf, n, i);
  if (s == 0) return number_run(buf, n, i, count, dim, kinds, max_length, count_out);
  helper.kind = KIND_COUNT;
  helper.buf = buf;
  helper.n = n;
  helper.i = s;
  helper.kinds = kinds;
  helper.max_length = max_length;
  helper_post();
  int64_t first_count;
  size_t at = number_run(buf, s + 1, i, count, dim, kinds, max_length, &first_count);
  helper_wait();
  size_t k = at;
  while (k < s && is_space(buf[k])) k++;
  int64_t second_count = helper.count;
  size_t second_at = helper.at;
  pthread_mutex_unlock(&helper.busy);
  /* Stopped before the comma: that is where the whole run stops too. */
  if (k != s || second_count == 0) {
    *count_out = first_count;
    return at;
  }
  splits_joined++;
  *count_out = first_count + second_count;
  return second_at;
}

/* store_float32_run over [i, n), on two cores when long enough; the same result. */
static size_t store_float32_run_split(const uint8_t* buf, size_t n, size_t i, int final, float* floats, int64_t base, int64_t leaf, int64_t end_leaf,
                                      int64_t* leaf_out) {
  size_t s = split_point(buf, n, i);
  if (s == 0) return store_float32_run(buf, n, i, final, floats, base, leaf, end_leaf, leaf_out);
  /* At most one value in two bytes after the comma, and never more than the caller asked for. */
  int64_t limit = (int64_t)(n - s) / 2 + 1;
  if (limit > end_leaf - leaf) limit = end_leaf - leaf;
  if (limit <= 0 || !helper_room(limit)) {
    pthread_mutex_unlock(&helper.busy);
    return store_float32_run(buf, n, i, final, floats, base, leaf, end_leaf, leaf_out);
  }
  helper.kind = KIND_STORE;
  helper.buf = buf;
  helper.n = n;
  helper.i = s + 1;
  helper.final = final;
  helper.limit = limit;
  helper_post();
  int64_t first_leaf;
  size_t at = store_float32_run(buf, s + 1, i, 0, floats, base, leaf, end_leaf, &first_leaf);
  helper_wait();
  size_t result;
  /* The first half took every value before the comma and stepped over it (so it had not reached
   * end_leaf, where it would have stopped after the value): the run goes on after it. */
  if (at == s + 1) {
    int64_t wanted = end_leaf - first_leaf, second = helper.count;
    splits_joined++;
    if (second < wanted) {
      memcpy(floats + (first_leaf - base), helper.scratch, (size_t)second * sizeof *floats);
      *leaf_out = first_leaf + second;
      result = helper.at;
    } else {
      /* More values than wanted: the pieces before the one holding the last wanted value, then the rest here. */
      size_t pieces = (size_t)(wanted / CHECKPOINT_LEAVES);
      size_t from = pieces == 0 ? s + 1 : helper.checkpoints[pieces - 1];
      int64_t taken = (int64_t)pieces * CHECKPOINT_LEAVES;
      memcpy(floats + (first_leaf - base), helper.scratch, (size_t)taken * sizeof *floats);
      splits_resumed++;
      result = store_float32_run(buf, n, from, final, floats, base, first_leaf + taken, end_leaf, leaf_out);
    }
  } else {
    *leaf_out = first_leaf;
    result = at;
  }
  pthread_mutex_unlock(&helper.busy);
  return result;
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
  int64_t next_leaf;
  size_t at = store_float32_run_split(buf, n, (size_t)i, final, floats, base, leaf, end_leaf, &next_leaf);
  state[0] = (double)next_leaf;
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
  int64_t next_count;
  size_t at = number_run_split(buf, n, (size_t)i, count, dim, kinds, max_length, &next_count);
  state[0] = (double)next_count;
  return number(env, (double)at);
}

/*
 * float32Lossless of valueCodecs: whether no word is a NaN other than the canonical quiet one
 * (0x7fc00000), which the text "NaN" reads back as. Pieces of 4096 words folded without a branch
 * (the compiler's vector loop), then a stop at the first piece that holds one.
 */
static int float32_lossless(const uint32_t* words, size_t n) {
  for (size_t at = 0; at < n; at += 4096) {
    size_t end = n - at < 4096 ? n : at + 4096;
    uint32_t odd = 0;
    for (size_t i = at; i < end; i++) {
      uint32_t w = words[i];
      odd |= (uint32_t)((w & 0x7fffffffu) > 0x7f800000u) & (uint32_t)(w != 0x7fc00000u);
    }
    if (odd != 0) return 0;
  }
  return 1;
}

static napi_value float32_lossless_js(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  uint32_t* words;
  size_t n;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || !typed(env, argv[0], napi_uint32_array, (void**)&words, &n))
    return fail(env, "float32Lossless(words)");
  napi_value result;
  napi_get_boolean(env, float32_lossless(words, n), &result);
  return result;
}

/* Which loops run: 2 the AVX2 ones, 1 SSE4.1's, 0 the plain C (ST_CONVERT_JSON_SIMD lowers it). */
static napi_value json_simd_js(napi_env env, napi_callback_info info) {
  (void)info;
  int level = 0;
#if defined(__x86_64__)
  level = has_avx2 ? 2 : has_sse41 ? 1 : 0;
#endif
  return number(env, level);
}

static napi_value reader_splits_js(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  napi_create_array_with_length(env, 2, &out);
  napi_set_element(env, out, 0, number(env, (double)splits_joined));
  napi_set_element(env, out, 1, number(env, (double)splits_resumed));
  return out;
}

void json_register(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "formatFloat32s", NAPI_AUTO_LENGTH, format_float32s_js, NULL, &fn);
  napi_set_named_property(env, exports, "formatFloat32s", fn);
  napi_create_function(env, "formatFloat32sAsync", NAPI_AUTO_LENGTH, format_float32s_async_js, NULL, &fn);
  napi_set_named_property(env, exports, "formatFloat32sAsync", fn);
  napi_create_function(env, "storeFloat32Run", NAPI_AUTO_LENGTH, store_float32_run_js, NULL, &fn);
  napi_set_named_property(env, exports, "storeFloat32Run", fn);
  napi_create_function(env, "numberRun", NAPI_AUTO_LENGTH, number_run_js, NULL, &fn);
  napi_set_named_property(env, exports, "numberRun", fn);
  napi_create_function(env, "float32Lossless", NAPI_AUTO_LENGTH, float32_lossless_js, NULL, &fn);
  napi_set_named_property(env, exports, "float32Lossless", fn);
  napi_create_function(env, "jsonSimd", NAPI_AUTO_LENGTH, json_simd_js, NULL, &fn);
  napi_set_named_property(env, exports, "jsonSimd", fn);
  napi_create_function(env, "readerSplits", NAPI_AUTO_LENGTH, reader_splits_js, NULL, &fn);
  napi_set_named_property(env, exports, "readerSplits", fn);
}
