/*
 * The float casts' element loops, as core's castKernels.ts has them (bit for bit: core's tests
 * compare the two over every 16-bit pattern and over random and edge-case 32- and 64-bit values):
 *
 *   castFloats(op, src, dst, count, table) -> undefined
 *     Casts `count` elements of src (native-endian, any alignment) into dst. `op`:
 *       CAST_F32_BF16  c10's round_to_nearest_even; NaN gives 0x7FC0
 *       CAST_F32_F16   to nearest even, subnormals, overflow to ±inf; NaN keeps its sign and top
 *                      payload bits, quieted (what F16C's vcvtps2ph does)
 *       CAST_F64_F32   to nearest even (the C conversion); NaN's bits made by hand
 *       CAST_F32_F64   exact; NaN's bits made by hand
 *       CAST_BF16_F32  a shift
 *       CAST_F32_BYTE  a float32 through `table` (0x20000 bytes), indexed by its top 16 bits and
 *                      whether the low 16 are zero
 *       CAST_BYTE_TABLE, CAST_HALF_TABLE  an 8- or 16-bit pattern through `table`, one entry per
 *                      pattern of 1, 2, 4 or 8 bytes (the table's length says which)
 *     Float casts cannot fail; a bad argument throws a TypeError.
 *
 * The loops are plain C over memcpy'd words; on x86-64 the three that most conversions make
 * (F32 -> BF16, BF16 -> F32, F32 -> F16) go eight elements at a time in SSE2 (every x86-64 CPU
 * has it), then finish in C. At -O2 the compiler vectorizes none of them itself.
 */
#include <node_api.h>
#include <stdint.h>
#include <string.h>

#include "cast.h"
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

enum {
  CAST_F32_BF16 = 0,
  CAST_F32_F16 = 1,
  CAST_F64_F32 = 2,
  CAST_F32_F64 = 3,
  CAST_BF16_F32 = 4,
  CAST_F32_BYTE = 5,
  CAST_BYTE_TABLE = 6,
  CAST_HALF_TABLE = 7,
};

static uint32_t load32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint16_t load16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

#if defined(__x86_64__)
/* Four float32s to BF16 as int32 lanes holding the result sign-extended, ready for packs_epi32. */
static __m128i bf16_lanes(__m128i x) {
  __m128i lsb = _mm_and_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(1));
  /* Unsigned sums (lanes wrap as uint32 does); the arithmetic shift then gives the top half sign-extended. */
  __m128i r = _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(x, _mm_set1_epi32(0x7fff)), lsb), 16);
  __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(x, _mm_set1_epi32(0x7fffffff)), _mm_set1_epi32(0x7f800000));
  return _mm_or_si128(_mm_and_si128(nan, _mm_set1_epi32(0x7fc0)), _mm_andnot_si128(nan, r));
}
#endif

static void f32_to_bf16(const uint8_t* src, uint8_t* dst, size_t count) {
  size_t i = 0;
#if defined(__x86_64__)
  for (; i + 8 <= count; i += 8) {
    __m128i a = bf16_lanes(_mm_loadu_si128((const __m128i*)(src + 4 * i)));
    __m128i b = bf16_lanes(_mm_loadu_si128((const __m128i*)(src + 4 * i + 16)));
    _mm_storeu_si128((__m128i*)(dst + 2 * i), _mm_packs_epi32(a, b));
  }
#endif
  for (; i < count; i++) {
    uint32_t u = load32(src + 4 * i);
    uint16_t r = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0 : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    memcpy(dst + 2 * i, &r, 2);
  }
}

/* The F16 result of float32 bits outside the inline range: subnormal, zero, overflow, inf, NaN. */
static uint16_t f16_slow(uint32_t u) {
  uint32_t sign = u >> 31;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff));
  if (a == 0x7f800000u) return (uint16_t)(sign << 15 | 0x7c00);
  uint32_t q;
  if (a >= 0x38800000u) {
    uint32_t r = a - 0x38000000u;
    q = (r + 0xfffu + ((r >> 13) & 1)) >> 13;
  } else {
    uint32_t e = a >> 23;
    uint32_t significand = e == 0 ? a : (a & 0x7fffffu) | 0x800000u;
    int s = 151 - 15 - 10 - (e == 0 ? 1 : (int)e);
    if (s > 25) {
      q = 0;
    } else {
      q = significand >> s;
      uint32_t rest = significand & ((1u << s) - 1);
      uint32_t half = 1u << (s - 1);
      if (rest > half || (rest == half && (q & 1))) q++;
    }
  }
  if (q > 0x7bffu) return (uint16_t)(sign << 15 | 0x7c00);
  return (uint16_t)(sign << 15 | q);
}

#if defined(__x86_64__)
/*
 * Four float32s whose F16 is normal and finite to F16 as sign-extended int32 lanes, or 0 when
 * one of them is not (then the caller goes element by element): rebiased, rounded to nearest
 * even at bit 13, the sign put back as the lane's sign.
 */
static int f16_lanes(__m128i x, __m128i* out) {
  __m128i a = _mm_and_si128(x, _mm_set1_epi32(0x7fffffff));
  __m128i low = _mm_cmplt_epi32(a, _mm_set1_epi32(0x38800000));
  __m128i high = _mm_cmpgt_epi32(a, _mm_set1_epi32(0x477ff000 - 1));
  if (_mm_movemask_epi8(_mm_or_si128(low, high)) != 0) return 0;
  __m128i b = _mm_sub_epi32(a, _mm_set1_epi32(0x38000000));
  __m128i lsb = _mm_and_si128(_mm_srli_epi32(b, 13), _mm_set1_epi32(1));
  __m128i q = _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(b, _mm_set1_epi32(0xfff)), lsb), 13);
  __m128i sign = _mm_and_si128(_mm_srai_epi32(x, 16), _mm_set1_epi32((int)0xffff8000u));
  *out = _mm_or_si128(q, sign);
  return 1;
}
#endif

static void f32_to_f16(const uint8_t* src, uint8_t* dst, size_t count) {
  size_t i = 0;
#if defined(__x86_64__)
  for (; i + 8 <= count; i += 8) {
    __m128i a, b;
    if (!f16_lanes(_mm_loadu_si128((const __m128i*)(src + 4 * i)), &a) || !f16_lanes(_mm_loadu_si128((const __m128i*)(src + 4 * i + 16)), &b)) {
      for (size_t j = i; j < i + 8; j++) {
        uint16_t r = f16_slow(load32(src + 4 * j));
        memcpy(dst + 2 * j, &r, 2);
      }
      continue;
    }
    _mm_storeu_si128((__m128i*)(dst + 2 * i), _mm_packs_epi32(a, b));
  }
#endif
  for (; i < count; i++) {
    uint32_t u = load32(src + 4 * i);
    uint32_t a = u & 0x7fffffffu;
    uint16_t r;
    if (a >= 0x38800000u && a < 0x477ff000u) {
      uint32_t b = a - 0x38000000u;
      r = (uint16_t)(((u >> 16) & 0x8000) | ((b + 0xfffu + ((b >> 13) & 1)) >> 13));
    } else {
      r = f16_slow(u);
    }
    memcpy(dst + 2 * i, &r, 2);
  }
}

static void f64_to_f32(const uint8_t* src, uint8_t* dst, size_t count) {
  for (size_t i = 0; i < count; i++) {
    double x;
    memcpy(&x, src + 8 * i, 8);
    uint32_t bits;
    if (x == x) {
      float f = (float)x;
      memcpy(&bits, &f, 4);
    } else {
      uint64_t w;
      memcpy(&w, &x, 8);
      uint32_t hi = (uint32_t)(w >> 32), lo = (uint32_t)w;
      bits = (hi & 0x80000000u) | 0x7fc00000u | ((hi & 0xfffffu) << 3) | (lo >> 29);
    }
    memcpy(dst + 4 * i, &bits, 4);
  }
}

static void f32_to_f64(const uint8_t* src, uint8_t* dst, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t bits = load32(src + 4 * i);
    uint64_t w;
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      uint32_t payload = bits & 0x7fffffu;
      w = (uint64_t)((bits & 0x80000000u) | 0x7ff80000u | (payload >> 3)) << 32 | (uint64_t)((payload & 7) << 29);
    } else {
      float f;
      memcpy(&f, &bits, 4);
      double d = f;
      memcpy(&w, &d, 8);
    }
    memcpy(dst + 8 * i, &w, 8);
  }
}

static void bf16_to_f32(const uint8_t* src, uint8_t* dst, size_t count) {
  size_t i = 0;
#if defined(__x86_64__)
  for (; i + 8 <= count; i += 8) {
    __m128i v = _mm_loadu_si128((const __m128i*)(src + 2 * i));
    _mm_storeu_si128((__m128i*)(dst + 4 * i), _mm_unpacklo_epi16(_mm_setzero_si128(), v));
    _mm_storeu_si128((__m128i*)(dst + 4 * i + 16), _mm_unpackhi_epi16(_mm_setzero_si128(), v));
  }
#endif
  for (; i < count; i++) {
    uint32_t r = (uint32_t)load16(src + 2 * i) << 16;
    memcpy(dst + 4 * i, &r, 4);
  }
}

static void f32_to_byte(const uint8_t* src, uint8_t* dst, size_t count, const uint8_t* table) {
  for (size_t i = 0; i < count; i++) {
    uint32_t u = load32(src + 4 * i);
    dst[i] = table[(u >> 16) << 1 | ((u & 0xffffu) != 0)];
  }
}

/* Source patterns of `in` bytes (1 or 2) through a table of `entry`-byte results. */
static void through_table(const uint8_t* src, uint8_t* dst, size_t count, int in, const uint8_t* table, size_t entry) {
  for (size_t i = 0; i < count; i++) {
    size_t x = in == 1 ? src[i] : load16(src + 2 * i);
    memcpy(dst + entry * i, table + entry * x, entry);
  }
}

static napi_value fail(napi_env env, const char* message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

static int bytes_arg(napi_env env, napi_value value, uint8_t** data, size_t* length) {
  bool is_typed = false;
  napi_typedarray_type type;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed) return 0;
  if (napi_get_typedarray_info(env, value, &type, length, (void**)data, NULL, NULL) != napi_ok) return 0;
  return type == napi_uint8_array;
}

static napi_value cast_floats_js(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  int32_t op;
  double count_d;
  uint8_t *src, *dst, *table = NULL;
  size_t src_length, dst_length, table_length = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 || napi_get_value_int32(env, argv[0], &op) != napi_ok ||
      !bytes_arg(env, argv[1], &src, &src_length) || !bytes_arg(env, argv[2], &dst, &dst_length) ||
      napi_get_value_double(env, argv[3], &count_d) != napi_ok || !(count_d >= 0 && count_d <= 9007199254740991.0) ||
      count_d != (double)(int64_t)count_d)
    return fail(env, "castFloats(op, src, dst, count, table?): two Uint8Arrays and a count");
  size_t count = (size_t)count_d;
  static const int in_width[] = {4, 4, 8, 4, 2, 4, 1, 2};
  static const int out_width[] = {2, 2, 4, 8, 4, 1, 0, 0};
  if (op < 0 || op > CAST_HALF_TABLE) return fail(env, "castFloats: unknown op");
  size_t entry = (size_t)out_width[op];
  if (op >= CAST_F32_BYTE) {
    if (argc < 5 || !bytes_arg(env, argv[4], &table, &table_length)) return fail(env, "castFloats: this op needs a table");
    if (op == CAST_F32_BYTE) {
      if (table_length != 0x20000) return fail(env, "castFloats: a float32 → byte table has 0x20000 entries");
    } else {
      size_t patterns = op == CAST_BYTE_TABLE ? 0x100 : 0x10000;
      entry = table_length / patterns;
      if (table_length % patterns != 0 || (entry != 1 && entry != 2 && entry != 4 && entry != 8))
        return fail(env, "castFloats: a pattern table holds 1, 2, 4 or 8 bytes per pattern");
    }
  }
  if (count > src_length / (size_t)in_width[op] || count > dst_length / entry) return fail(env, "castFloats: count past the end of src or dst");
  switch (op) {
    case CAST_F32_BF16:
      f32_to_bf16(src, dst, count);
      break;
    case CAST_F32_F16:
      f32_to_f16(src, dst, count);
      break;
    case CAST_F64_F32:
      f64_to_f32(src, dst, count);
      break;
    case CAST_F32_F64:
      f32_to_f64(src, dst, count);
      break;
    case CAST_BF16_F32:
      bf16_to_f32(src, dst, count);
      break;
    case CAST_F32_BYTE:
      f32_to_byte(src, dst, count, table);
      break;
    default:
      through_table(src, dst, count, op == CAST_BYTE_TABLE ? 1 : 2, table, entry);
      break;
  }
  return NULL;
}

void cast_register(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "castFloats", NAPI_AUTO_LENGTH, cast_floats_js, NULL, &fn);
  napi_set_named_property(env, exports, "castFloats", fn);
}
