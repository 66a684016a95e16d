/*
 * st-convert's native helpers for Node on Linux, through Node-API (stable across Node versions):
 *
 *   copyRange(inFd, inOffset, outFd, outOffset, length) -> Promise<number>
 *     copy_file_range(2) on the thread pool: `length` bytes from `inOffset` of one file to
 *     `outOffset` of another (-1: at and advancing the output's file position), without the bytes
 *     passing through user space. Where the two offsets (or the input's offset and the output's
 *     file position) lie at different places within a page and the range is at least
 *     COPY_BUFFERED_MIN, a read and a write through a buffer of the thread's own instead, each
 *     write but the first starting on a page of the output (see copy_buffered). Resolves to the bytes copied (fewer only when the input ended);
 *     rejects with an Error carrying `errno` and `copied` (what was copied before the failure).
 *
 *   copyRangeCrc32(inFd, inOffset, outFd, outOffset, length, previous) -> Promise<number>
 *     copyRange through the buffers (wherever the offsets lie), taking the CRC-32 of the bytes as
 *     they are read, continued from `previous`: one read of the bytes for the copy and a check
 *     (a stored zip member's) or a record (a zip writer's), where copyRange beside crc32Range reads
 *     them twice. Resolves to the CRC; rejects as crc32Range does (an input that ends early: errno 0).
 *
 *   crc32Range(fd, offset, length, previous) -> Promise<number>
 *     The CRC-32 of `length` bytes of a file from `offset`, continuing from `previous`, read on the
 *     thread pool through a buffer of CRC_READ bytes (small enough to stay in the CPU's cache, so a
 *     byte is fetched from memory once, not written out by the read and fetched again by the CRC).
 *     Rejects as copyRange does; `copied` is then the bytes read, and an input that ends early
 *     rejects with `errno` 0.
 *
 *   readRuns(fd, offset, target, targetOffset, run, stride, count, previous) -> Promise<number>
 *     `count * run` bytes of a file from `offset`, read on the thread pool straight into `count`
 *     runs of `run` bytes `stride` apart in the Uint8Array `target` from `targetOffset` (preadv(2)),
 *     their CRC-32 taken in file order as they arrive, continued from `previous`. Resolves to the
 *     CRC; rejects as crc32Range does. Until then the caller leaves `target` alone.
 *
 *   exchangePaths(a, b) -> undefined
 *     Swaps what the two paths name, atomically (renameat2(2) with RENAME_EXCHANGE); throws an
 *     Error carrying `errno` (EINVAL: this file system cannot; ENOENT: one of them is missing).
 *
 *   crc32(bytes, previous) -> number
 *     CRC-32 (ISO-HDLC, as zip and zlib use it) of a Uint8Array, continuing from `previous`:
 *     carry-less multiplication (PCLMULQDQ) folding 64 bytes per step where the CPU has it, a
 *     slice-by-8 table elsewhere.
 *
 * and, from json.c, the JSON form's F32 loops (formatFloat32s, storeFloat32Run, numberRun); from
 * cast.c, the float casts' element loops (castFloats).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <node_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cast.h"
#include "json.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---------- CRC-32 ---------- */

/* table[k][b]: the register after byte b followed by k zero bytes (reflected polynomial 0xEDB88320). */
static uint32_t table[8][256];

static void make_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int k = 1; k < 8; k++) table[k][i] = table[0][table[k - 1][i] & 0xff] ^ (table[k - 1][i] >> 8);
}

static uint32_t le32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Advances the raw register `r` (no pre- or post-inversion) over `n` bytes, eight at a time. */
static uint32_t crc_table(uint32_t r, const uint8_t* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t a = r ^ le32(p), b = le32(p + 4);
    r = table[7][a & 0xff] ^ table[6][(a >> 8) & 0xff] ^ table[5][(a >> 16) & 0xff] ^ table[4][a >> 24] ^
        table[3][b & 0xff] ^ table[2][(b >> 8) & 0xff] ^ table[1][(b >> 16) & 0xff] ^ table[0][b >> 24];
  }
  for (; n > 0; p++, n--) r = table[0][(r ^ *p) & 0xff] ^ (r >> 8);
  return r;
}

#if defined(__x86_64__)
/*
 * The register over `n` >= 64 bytes by folding: four 128-bit lanes each multiplied forward by
 * x^512 (mod P) and added to the next 64 bytes, then folded into one lane by x^128 steps. The lane
 * left is congruent to everything read, so the table finishes it as 16 bytes read from a zero
 * register, then reads the tail. The constants are x^n mod P, bit-reflected and shifted left by one
 * as carry-less multiplication of reflected operands requires: for each lane half, n = 512 + 32 and
 * 512 - 32 (the 64-byte step), 128 + 32 and 128 - 32 (the 16-byte step).
 */
/* The lane `x` multiplied forward by the step whose constants are `k`, added to `next`. */
__attribute__((target("pclmul,sse2"))) static inline __m128i fold_lane(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x11), _mm_clmulepi64_si128(x, k, 0x00)), next);
}

/* One lane folded by 16 bytes onto `next`. */
__attribute__((target("pclmul,sse2"))) static inline __m128i fold16(__m128i x, __m128i next) {
  return fold_lane(x, _mm_set_epi64x(0x0ccaa009e, 0x1751997d0), next);
}

/* Every fold's end: a lane congruent to everything read, then the rest of the bytes. */
__attribute__((target("pclmul,sse2"))) static uint32_t fold_tail(__m128i x, const uint8_t* p, size_t n) {
  for (; n >= 16; p += 16, n -= 16) x = fold16(x, _mm_loadu_si128((const __m128i*)p));
  uint8_t lane[16];
  _mm_storeu_si128((__m128i*)lane, x);
  return crc_table(crc_table(0, lane, 16), p, n);
}

__attribute__((target("pclmul,sse2"))) static uint32_t crc_fold(uint32_t r, const uint8_t* p, size_t n) {
  const __m128i by64 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
  __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i*)p), _mm_cvtsi32_si128((int)r));
  __m128i x1 = _mm_loadu_si128((const __m128i*)(p + 16));
  __m128i x2 = _mm_loadu_si128((const __m128i*)(p + 32));
  __m128i x3 = _mm_loadu_si128((const __m128i*)(p + 48));
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x0 = fold_lane(x0, by64, _mm_loadu_si128((const __m128i*)p));
    x1 = fold_lane(x1, by64, _mm_loadu_si128((const __m128i*)(p + 16)));
    x2 = fold_lane(x2, by64, _mm_loadu_si128((const __m128i*)(p + 32)));
    x3 = fold_lane(x3, by64, _mm_loadu_si128((const __m128i*)(p + 48)));
  }
  return fold_tail(fold16(fold16(fold16(x0, x1), x2), x3), p, n);
}
#endif

#if defined(__x86_64__)
/*
 * crc_fold with VPCLMULQDQ on 512-bit registers (n >= 256): four registers of four lanes each,
 * every lane folded forward by 256 bytes (x^2048 steps: constants for n = 2048 + 32 and 2048 - 32)
 * onto the next 256 bytes; then the four registers into one by 64-byte steps (crc_fold's by64),
 * its four lanes into one by 16-byte steps, and crc_fold's end.
 */
__attribute__((target("vpclmulqdq,avx512f,avx512vl,pclmul"))) static uint32_t crc_fold512(uint32_t r, const uint8_t* p, size_t n) {
  const __m512i by256 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1322d1430, 0x11542778a));
  const __m512i by64 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1c6e41596, 0x154442bd4));
  __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)r)));
  __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
#define FOLD512(x, k, next) \
  (x) = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128((x), (k), 0x11), _mm512_clmulepi64_epi128((x), (k), 0x00), (next), 0x96)
  for (; n >= 256; p += 256, n -= 256) {
    FOLD512(x0, by256, _mm512_loadu_si512(p));
    FOLD512(x1, by256, _mm512_loadu_si512(p + 64));
    FOLD512(x2, by256, _mm512_loadu_si512(p + 128));
    FOLD512(x3, by256, _mm512_loadu_si512(p + 192));
  }
  FOLD512(x0, by64, x1);
  FOLD512(x0, by64, x2);
  FOLD512(x0, by64, x3);
  for (; n >= 64; p += 64, n -= 64) FOLD512(x0, by64, _mm512_loadu_si512(p));
#undef FOLD512
  __m128i x = fold16(_mm512_extracti32x4_epi32(x0, 0), _mm512_extracti32x4_epi32(x0, 1));
  x = fold16(x, _mm512_extracti32x4_epi32(x0, 2));
  x = fold16(x, _mm512_extracti32x4_epi32(x0, 3));
  return fold_tail(x, p, n);
}

/*
 * The same on 256-bit registers (VPCLMULQDQ with AVX2, n >= 128): four registers of two lanes,
 * folded forward by 128 bytes (n = 1024 ± 32), then into one by 32-byte steps (n = 256 ± 32).
 */
__attribute__((target("vpclmulqdq,avx2,pclmul"))) static uint32_t crc_fold256(uint32_t r, const uint8_t* p, size_t n) {
  const __m256i by128 = _mm256_broadcastsi128_si256(_mm_set_epi64x(0x14a7fe880, 0x1e88ef372));
  const __m256i by32 = _mm256_broadcastsi128_si256(_mm_set_epi64x(0x15a546366, 0x0f1da05aa));
  __m256i x0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)p), _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)r)));
  __m256i x1 = _mm256_loadu_si256((const __m256i*)(p + 32)), x2 = _mm256_loadu_si256((const __m256i*)(p + 64));
  __m256i x3 = _mm256_loadu_si256((const __m256i*)(p + 96));
  p += 128;
  n -= 128;
#define FOLD256(x, k, next) \
  (x) = _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128((x), (k), 0x11), _mm256_clmulepi64_epi128((x), (k), 0x00)), (next))
  for (; n >= 128; p += 128, n -= 128) {
    FOLD256(x0, by128, _mm256_loadu_si256((const __m256i*)p));
    FOLD256(x1, by128, _mm256_loadu_si256((const __m256i*)(p + 32)));
    FOLD256(x2, by128, _mm256_loadu_si256((const __m256i*)(p + 64)));
    FOLD256(x3, by128, _mm256_loadu_si256((const __m256i*)(p + 96)));
  }
  FOLD256(x0, by32, x1);
  FOLD256(x0, by32, x2);
  FOLD256(x0, by32, x3);
  for (; n >= 32; p += 32, n -= 32) FOLD256(x0, by32, _mm256_loadu_si256((const __m256i*)p));
#undef FOLD256
  return fold_tail(fold16(_mm256_castsi256_si128(x0), _mm256_extracti128_si256(x0, 1)), p, n);
}
#endif

/* Which fold crc32_of uses: 0 the table, 1 crc_fold, 2 crc_fold256, 3 crc_fold512 (ST_CONVERT_CRC_FOLD lowers it, for tests). */
static int can_fold;

static uint32_t crc32_of(uint32_t previous, const uint8_t* p, size_t n) {
  uint32_t r = ~previous;
#if defined(__x86_64__)
  if (can_fold == 3 && n >= 256) return ~crc_fold512(r, p, n);
  if (can_fold >= 2 && n >= 128) return ~crc_fold256(r, p, n);
  if (can_fold >= 1 && n >= 64) return ~crc_fold(r, p, n);
#endif
  return ~crc_table(r, p, n);
}

/* ---------- Node-API glue ---------- */

static napi_value fail(napi_env env, const char* message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

static int get_double(napi_env env, napi_value value, double* out) {
  return napi_get_value_double(env, value, out) == napi_ok;
}

static int whole(double value, double min) {
  return value >= min && value <= 9007199254740991.0 && value == (double)(int64_t)value;
}

/* Rejects `deferred` with an Error carrying `errno` and `copied` (bytes done before the failure). */
static void reject_with(napi_env env, napi_deferred deferred, const char* text, int error, int64_t copied) {
  napi_value message, value, code, count;
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &value);
  napi_create_int32(env, error, &code);
  napi_set_named_property(env, value, "errno", code);
  napi_create_double(env, (double)copied, &count);
  napi_set_named_property(env, value, "copied", count);
  napi_reject_deferred(env, deferred, value);
}

static napi_value crc32_js(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) return fail(env, "crc32(bytes, previous)");
  bool is_typed = false;
  napi_is_typedarray(env, argv[0], &is_typed);
  if (!is_typed) return fail(env, "crc32: bytes must be a Uint8Array");
  napi_typedarray_type type;
  size_t length = 0;
  void* data = NULL;
  if (napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL) != napi_ok || type != napi_uint8_array)
    return fail(env, "crc32: bytes must be a Uint8Array");
  uint32_t previous = 0;
  if (argc > 1) {
    napi_valuetype kind;
    napi_typeof(env, argv[1], &kind);
    if (kind != napi_undefined && napi_get_value_uint32(env, argv[1], &previous) != napi_ok) return fail(env, "crc32: previous must be a number");
  }
  napi_value result;
  napi_create_uint32(env, length == 0 ? previous : crc32_of(previous, data, length), &result);
  return result;
}

/* ---------- exchanging two names ---------- */

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* exchangePaths(a, b): renameat2(2) with RENAME_EXCHANGE; throws an Error carrying `errno`. */
static napi_value exchange_paths_js(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  char a[4096], b[4096];
  size_t a_length = 0, b_length = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_string_utf8(env, argv[0], a, sizeof a, &a_length) != napi_ok ||
      napi_get_value_string_utf8(env, argv[1], b, sizeof b, &b_length) != napi_ok)
    return fail(env, "exchangePaths(a, b): two paths");
  /* A path cut at the buffer's end, or holding a NUL, would name another file. */
  if (a_length == 0 || b_length == 0 || a_length >= sizeof a - 1 || b_length >= sizeof b - 1 || strlen(a) != a_length || strlen(b) != b_length)
    return fail(env, "exchangePaths: each path must be 1 to 4094 bytes, without NUL");
  if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0) return NULL;
  int error = errno;
  napi_value message, value, code;
  napi_create_string_utf8(env, strerror(error), NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &value);
  napi_create_int32(env, error, &code);
  napi_set_named_property(env, value, "errno", code);
  napi_throw(env, value);
  return NULL;
}

/* What every job on the pool begins with: its work item and the promise it settles. */
typedef struct {
  napi_async_work work;
  napi_deferred deferred;
} job_head;

typedef struct {
  job_head head;
  int in_fd, out_fd;
  int64_t in_offset, out_offset, length, copied;
  int error;
  int with_crc; /* copyRangeCrc32: the CRC-32 of the bytes read, continued from `crc` */
  uint32_t crc;
} copy_job;

#define PAGE 4096
/* 512 KiB, not 2 MiB: large writes cost more past a few GiB here (4 GiB reshard: benchmarks.md). */
#define COPY_BUFFER (512 * 1024)
#define COPY_BUFFERED_MIN (1024 * 1024)

/*
 * A buffered copy of COPY_PIPELINE_MIN or more reads ahead on a thread of its own, into a ring of
 * COPY_RING buffers, while the pool thread writes: the reads (page cache to buffer) and the writes
 * (buffer to page cache) then run on both cores instead of one after the other. 1 GiB at offsets
 * 128 bytes apart: 0.20–0.23 s against 0.27–0.29 s for the read-then-write loop (and 0.25–0.27 s
 * for cp of the same file; 5 alternating runs each, 2026-12-06, a C harness).
 */
#define COPY_RING 4
#define COPY_PIPELINE_MIN (4 * 1024 * 1024)

/* Each pool thread's copy buffers, made on its first buffered copy and kept (no page faults after). */
static __thread uint8_t* copy_buffers[COPY_RING];

static int copy_buffers_made(void) {
  for (int k = 0; k < COPY_RING; k++) {
    if (copy_buffers[k] != NULL) continue;
    void* buffer = NULL;
    if (posix_memalign(&buffer, PAGE, COPY_BUFFER) != 0) return 0;
    copy_buffers[k] = buffer;
  }
  return 1;
}

/* Writes `length` bytes where the job's range goes on (its offset plus `copied`, or the output's position), adding them to `copied`: 0, or an errno. */
static int copy_write(copy_job* job, const uint8_t* bytes, size_t length) {
  for (size_t put = 0; put < length;) {
    /* At the output's file position (advancing it) when the caller asked for that. */
    ssize_t wrote = job->out_offset < 0 ? write(job->out_fd, bytes + put, length - put)
                                        : pwrite(job->out_fd, bytes + put, length - put, (off_t)(job->out_offset + job->copied));
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (wrote == 0) return EIO; /* a regular file takes at least a byte, or fails */
    put += (size_t)wrote;
    job->copied += wrote;
  }
  return 0;
}

/* Reads up to `want` bytes from `at` within the job's input range: the count (0: the input ended), or -errno. */
static ssize_t copy_read(const copy_job* job, uint8_t* into, size_t want, int64_t at) {
  for (;;) {
    ssize_t got = pread(job->in_fd, into, want, (off_t)(job->in_offset + at));
    if (got >= 0) return got;
    if (errno != EINTR) return -errno;
  }
}

/* The ring between the reader thread (fills slots in turn) and the pool thread (empties them in turn). */
typedef struct {
  copy_job* job;
  uint8_t* buffers[COPY_RING]; /* the pool thread's */
  size_t first;              /* the first piece: up to the output's next page */
  size_t filled[COPY_RING];  /* bytes in a full slot, 0 in an empty one */
  int ended;                 /* the reader is done: no slot will be filled again */
  int error;                 /* the reader's errno, if a read failed */
  int stop;                  /* the writer failed: read no more */
  pthread_mutex_t lock;
  pthread_cond_t changed;
} copy_ring;

static void* copy_reader(void* data) {
  copy_ring* ring = data;
  copy_job* job = ring->job;
  size_t want = ring->first != 0 ? ring->first : COPY_BUFFER;
  int error = 0;
  for (int64_t at = 0, k = 0; at < job->length; k = (k + 1) % COPY_RING) {
    pthread_mutex_lock(&ring->lock);
    while (ring->filled[k] != 0 && !ring->stop) pthread_cond_wait(&ring->changed, &ring->lock);
    int stop = ring->stop;
    pthread_mutex_unlock(&ring->lock);
    if (stop) break;
    if ((int64_t)want > job->length - at) want = (size_t)(job->length - at);
    ssize_t got = copy_read(job, ring->buffers[k], want, at);
    if (got <= 0) {
      error = (int)-got; /* 0: the input ended */
      break;
    }
    /* Folded here, on the reading thread, while the buffer is still in the CPU's cache. */
    if (job->with_crc) job->crc = crc32_of(job->crc, ring->buffers[k], (size_t)got);
    at += got;
    want = COPY_BUFFER;
    pthread_mutex_lock(&ring->lock);
    ring->filled[k] = (size_t)got;
    pthread_cond_broadcast(&ring->changed);
    pthread_mutex_unlock(&ring->lock);
  }
  pthread_mutex_lock(&ring->lock);
  ring->ended = 1;
  ring->error = error;
  pthread_cond_broadcast(&ring->changed);
  pthread_mutex_unlock(&ring->lock);
  return NULL;
}
/*
 * The copy of a range whose input and output offsets differ within a page. copy_file_range then
 * moves every page of the page cache in two parts, and took 0.53–0.60 s for 1 GiB here against
 * 0.39–0.41 s for a copy placed alike in both files; a pread and a pwrite through a reused buffer,
 * the writes starting on the output's pages, took 0.40–0.43 s (2026-12-03, 4 runs each). Ranges
 * of COPY_PIPELINE_MIN or more are read ahead on a thread of their own (copy_reader).
 * Returns 0 when done (or when the input ended), else an errno with `copied` so far in the job.
 */
static int copy_buffered(copy_job* job, int64_t out_at) {
  if (!copy_buffers_made()) return ENOMEM;
  /* The first piece reaches the output's next page boundary; the others are whole buffers. */
  size_t first = (size_t)((PAGE - out_at % PAGE) % PAGE);
  copy_ring ring = {.job = job, .first = first};
  pthread_t reader;
  int piped = job->length >= COPY_PIPELINE_MIN && pthread_mutex_init(&ring.lock, NULL) == 0;
  if (piped && pthread_cond_init(&ring.changed, NULL) != 0) {
    pthread_mutex_destroy(&ring.lock);
    piped = 0;
  }
  if (piped) {
    for (int k = 0; k < COPY_RING; k++) ring.buffers[k] = copy_buffers[k];
    if (pthread_create(&reader, NULL, copy_reader, &ring) != 0) {
      pthread_cond_destroy(&ring.changed);
      pthread_mutex_destroy(&ring.lock);
      piped = 0;
    }
  }
  if (!piped) {
    /* One thread: a read, then its write. */
    while (job->copied < job->length) {
      int64_t left = job->length - job->copied;
      size_t want = first != 0 ? first : COPY_BUFFER;
      first = 0;
      if ((int64_t)want > left) want = (size_t)left;
      ssize_t got = copy_read(job, copy_buffers[0], want, job->copied);
      if (got <= 0) return (int)-got; /* 0: the input ended */
      if (job->with_crc) job->crc = crc32_of(job->crc, copy_buffers[0], (size_t)got);
      int error = copy_write(job, copy_buffers[0], (size_t)got);
      if (error != 0) return error;
    }
    return 0;
  }
  /* The pool thread writes each slot as the reader fills it, in turn, until the reader is done. */
  int error = 0;
  for (int k = 0;; k = (k + 1) % COPY_RING) {
    pthread_mutex_lock(&ring.lock);
    while (ring.filled[k] == 0 && !ring.ended) pthread_cond_wait(&ring.changed, &ring.lock);
    size_t filled = ring.filled[k];
    pthread_mutex_unlock(&ring.lock);
    if (filled == 0) break; /* the reader is done, and every slot it filled is written */
    error = copy_write(job, ring.buffers[k], filled);
    pthread_mutex_lock(&ring.lock);
    ring.filled[k] = 0;
    if (error != 0) ring.stop = 1;
    pthread_cond_broadcast(&ring.changed);
    pthread_mutex_unlock(&ring.lock);
    if (error != 0) break;
  }
  pthread_join(reader, NULL);
  pthread_cond_destroy(&ring.changed);
  pthread_mutex_destroy(&ring.lock);
  return error != 0 ? error : ring.error;
}

/* Runs on a thread of the pool: no JavaScript, no Node-API calls. */
static void copy_run(napi_env env, void* data) {
  (void)env;
  copy_job* job = data;
  if (job->with_crc || job->length >= COPY_BUFFERED_MIN) {
    /* Where the output is written: its offset, or its file position (none for a pipe: -1). */
    int64_t out_at = job->out_offset >= 0 ? job->out_offset : (int64_t)lseek(job->out_fd, 0, SEEK_CUR);
    /* With the CRC the bytes pass through the process anyway, wherever the offsets lie. */
    if (job->with_crc || (out_at >= 0 && job->in_offset % PAGE != out_at % PAGE)) {
      job->error = copy_buffered(job, out_at >= 0 ? out_at : 0);
      return;
    }
  }
  loff_t in = job->in_offset, out = job->out_offset;
  while (job->copied < job->length) {
    int64_t left = job->length - job->copied;
    size_t step = left > (1 << 30) ? (size_t)1 << 30 : (size_t)left;
    ssize_t done = copy_file_range(job->in_fd, &in, job->out_fd, job->out_offset < 0 ? NULL : &out, step, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      job->error = errno;
      return;
    }
    if (done == 0) return; /* the input ended */
    job->copied += done;
  }
}

static void copy_done(napi_env env, napi_status status, void* data) {
  copy_job* job = data;
  if (status != napi_ok || job->error != 0) {
    reject_with(env, job->head.deferred, status != napi_ok ? "copy cancelled" : strerror(job->error), job->error, job->copied);
  } else if (job->with_crc) {
    /* A CRC of fewer bytes than asked for checks nothing: an input that ended early rejects (errno 0). */
    if (job->copied < job->length) {
      reject_with(env, job->head.deferred, "the file ended", 0, job->copied);
    } else {
      napi_value crc;
      napi_create_uint32(env, job->crc, &crc);
      napi_resolve_deferred(env, job->head.deferred, crc);
    }
  } else {
    napi_value copied;
    napi_create_double(env, (double)job->copied, &copied);
    napi_resolve_deferred(env, job->head.deferred, copied);
  }
  napi_delete_async_work(env, job->head.work);
  free(job);
}

/*
 * Queues `job` (whose first member is its job_head, as in copy_job and crc_job) on the thread
 * pool: `run` there, `done` back on the main thread. Returns the promise `done` settles, or
 * throws `failure` and frees the job.
 */
static napi_value queue_job(napi_env env, const char* name, napi_async_execute_callback run, napi_async_complete_callback done, void* job,
                            const char* failure) {
  job_head* head = job;
  napi_value promise, resource;
  napi_create_promise(env, &head->deferred, &promise);
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource);
  if (napi_create_async_work(env, NULL, resource, run, done, job, &head->work) != napi_ok || napi_queue_async_work(env, head->work) != napi_ok) {
    free(job);
    return fail(env, failure);
  }
  return promise;
}

/* ---------- CRC-32 of a file range, on the pool ---------- */

/* 256 KiB: measured 0.13 s/GiB from the page cache, against 0.16 s with 2 MiB and 0.45 s with 64 MiB. */
#define CRC_READ (256 * 1024)

typedef struct {
  job_head head;
  int fd;
  int64_t offset, length, done;
  uint32_t crc;
  int error;
} crc_job;

/*
 * What a read of a job that reads to its range's end returned: the bytes read (> 0), 0 to read
 * again (interrupted), or -1 with `*error` set (the errno, or -1 where the input ended early).
 */
static ssize_t read_settled(ssize_t got, int* error) {
  if (got > 0) return got;
  if (got < 0 && errno == EINTR) return 0;
  *error = got < 0 ? errno : -1;
  return -1;
}

static void crc_run(napi_env env, void* data) {
  (void)env;
  crc_job* job = data;
  uint8_t* buffer = malloc(CRC_READ);
  if (buffer == NULL) {
    job->error = ENOMEM;
    return;
  }
  while (job->done < job->length) {
    int64_t left = job->length - job->done;
    size_t step = left > CRC_READ ? CRC_READ : (size_t)left;
    ssize_t got = read_settled(pread(job->fd, buffer, step, (off_t)(job->offset + job->done)), &job->error);
    if (got == 0) continue;
    if (got < 0) break;
    job->crc = crc32_of(job->crc, buffer, (size_t)got);
    job->done += got;
  }
  free(buffer);
}

/*
 * Settles a job that reads bytes and takes their CRC-32: resolved with the CRC, or rejected with
 * `cancelled`, "the file ended" (error -1) or the errno's text, `done` bytes in.
 */
static void settle_crc(napi_env env, napi_status status, napi_deferred deferred, const char* cancelled, int error, int64_t done, uint32_t crc) {
  if (status != napi_ok) reject_with(env, deferred, cancelled, 0, done);
  else if (error == -1) reject_with(env, deferred, "the file ended", 0, done);
  else if (error != 0) reject_with(env, deferred, strerror(error), error, done);
  else {
    napi_value value;
    napi_create_uint32(env, crc, &value);
    napi_resolve_deferred(env, deferred, value);
  }
}

static void crc_done(napi_env env, napi_status status, void* data) {
  crc_job* job = data;
  settle_crc(env, status, job->head.deferred, "CRC cancelled", job->error, job->done, job->crc);
  napi_delete_async_work(env, job->head.work);
  free(job);
}

static napi_value crc32_range_js(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  double fd, offset, length, previous;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 || !get_double(env, argv[0], &fd) ||
      !get_double(env, argv[1], &offset) || !get_double(env, argv[2], &length) || !get_double(env, argv[3], &previous) ||
      !whole(fd, 0) || fd > 2147483647.0 || !whole(offset, 0) || !whole(length, 0) || !whole(previous, 0) || previous > 4294967295.0)
    return fail(env, "crc32Range(fd, offset, length, previous): whole numbers, previous a uint32");
  crc_job* job = calloc(1, sizeof *job);
  if (job == NULL) return fail(env, "crc32Range: out of memory");
  job->fd = (int)fd;
  job->offset = (int64_t)offset;
  job->length = (int64_t)length;
  job->crc = (uint32_t)previous;
  return queue_job(env, "st-convert.crc32Range", crc_run, crc_done, job, "crc32Range: cannot queue the CRC");
}

/* ---------- a read scattered into runs, on the pool ---------- */

/*
 * readRuns: `count` runs of `run` bytes, read in one pass over the file from `offset` (they lie
 * there one after the other), each put `stride` bytes after the one before in the target: one
 * preadv(2) per RUNS_BATCH runs, so that a distributed checkpoint's piece of a row group goes from
 * the page cache to its place among the other pieces' columns in one copy, with no buffer between.
 * The CRC-32 of the bytes is folded in their file order after each batch, while they are in the
 * CPU's cache (one batch is about RUNS_BATCH_BYTES).
 */
#define RUNS_BATCH_BYTES (512 * 1024)
#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

typedef struct {
  job_head head;
  napi_ref target_ref; /* keeps the target alive while the pool writes into it */
  uint8_t* target;
  int fd;
  int64_t offset, run, stride, count, done; /* done: bytes read */
  uint32_t crc;
  int error;
} runs_job;

static void runs_run(napi_env env, void* data) {
  (void)env;
  runs_job* job = data;
  int batch = job->run >= RUNS_BATCH_BYTES ? 1 : (int)(RUNS_BATCH_BYTES / job->run);
  if (batch > IOV_MAX) batch = IOV_MAX;
  struct iovec* iov = malloc(sizeof *iov * (size_t)batch);
  if (iov == NULL) {
    job->error = ENOMEM;
    return;
  }
  int64_t total = job->run * job->count;
  while (job->done < total) {
    /* The runs from the one `done` falls in, the first of them possibly begun by a short read. */
    int64_t first = job->done / job->run, into = job->done % job->run;
    int n = 0;
    for (int64_t i = first; i < job->count && n < batch; i++, n++) {
      int64_t skip = i == first ? into : 0;
      iov[n].iov_base = job->target + i * job->stride + skip;
      iov[n].iov_len = (size_t)(job->run - skip);
    }
    ssize_t got = read_settled(preadv(job->fd, iov, n, (off_t)(job->offset + job->done)), &job->error);
    if (got == 0) continue;
    if (got < 0) break;
    for (int k = 0; k < n && got > 0; k++) {
      size_t take = (size_t)got < iov[k].iov_len ? (size_t)got : iov[k].iov_len;
      job->crc = crc32_of(job->crc, iov[k].iov_base, take);
      got -= (ssize_t)take;
      job->done += (int64_t)take;
    }
  }
  free(iov);
}

static void runs_done(napi_env env, napi_status status, void* data) {
  runs_job* job = data;
  settle_crc(env, status, job->head.deferred, "read cancelled", job->error, job->done, job->crc);
  napi_delete_reference(env, job->target_ref);
  napi_delete_async_work(env, job->head.work);
  free(job);
}

static napi_value read_runs_js(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  const char* usage =
      "readRuns(fd, offset, target, targetOffset, run, stride, count, previous): whole numbers, target a Uint8Array holding every run, "
      "run > 0, stride >= run, previous a uint32";
  double fd, offset, target_offset, run, stride, count, previous;
  bool is_typed = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 8 || !get_double(env, argv[0], &fd) ||
      !get_double(env, argv[1], &offset) || napi_is_typedarray(env, argv[2], &is_typed) != napi_ok || !is_typed ||
      !get_double(env, argv[3], &target_offset) || !get_double(env, argv[4], &run) || !get_double(env, argv[5], &stride) ||
      !get_double(env, argv[6], &count) || !get_double(env, argv[7], &previous) || !whole(fd, 0) || fd > 2147483647.0 || !whole(offset, 0) ||
      !whole(target_offset, 0) || !whole(run, 1) || !whole(stride, run) || !whole(count, 0) || !whole(previous, 0) || previous > 4294967295.0)
    return fail(env, usage);
  napi_typedarray_type type;
  size_t length = 0;
  void* data = NULL;
  if (napi_get_typedarray_info(env, argv[2], &type, &length, &data, NULL, NULL) != napi_ok || type != napi_uint8_array) return fail(env, usage);
  /* The last run ends within the target (compared in doubles: every operand is below 2^53 and the check is for refusal only). */
  if (count > 0 && target_offset + (count - 1) * stride + run > (double)length) return fail(env, usage);
  runs_job* job = calloc(1, sizeof *job);
  if (job == NULL) return fail(env, "readRuns: out of memory");
  if (napi_create_reference(env, argv[2], 1, &job->target_ref) != napi_ok) {
    free(job);
    return fail(env, "readRuns: cannot hold the target");
  }
  job->target = (uint8_t*)data + (size_t)target_offset;
  job->fd = (int)fd;
  job->offset = (int64_t)offset;
  job->run = (int64_t)run;
  job->stride = (int64_t)stride;
  job->count = (int64_t)count;
  job->crc = (uint32_t)previous;
  napi_value promise, resource;
  napi_create_promise(env, &job->head.deferred, &promise);
  napi_create_string_utf8(env, "st-convert.readRuns", NAPI_AUTO_LENGTH, &resource);
  if (napi_create_async_work(env, NULL, resource, runs_run, runs_done, job, &job->head.work) != napi_ok ||
      napi_queue_async_work(env, job->head.work) != napi_ok) {
    napi_delete_reference(env, job->target_ref);
    free(job);
    return fail(env, "readRuns: cannot queue the read");
  }
  return promise;
}

/*
 * The job of copyRange (five arguments) or copyRangeCrc32 (six, the last the CRC to continue
 * from), or NULL having thrown a TypeError (or an Error when out of memory).
 */
static copy_job* copy_job_of(napi_env env, napi_callback_info info, int with_crc, const char* usage) {
  size_t argc = 6;
  napi_value argv[6];
  double in_fd, in_offset, out_fd, out_offset, length, previous = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < (size_t)(5 + with_crc) || !get_double(env, argv[0], &in_fd) ||
      !get_double(env, argv[1], &in_offset) || !get_double(env, argv[2], &out_fd) || !get_double(env, argv[3], &out_offset) ||
      !get_double(env, argv[4], &length) || (with_crc && !get_double(env, argv[5], &previous)) || !whole(in_fd, 0) || !whole(out_fd, 0) ||
      in_fd > 2147483647.0 || out_fd > 2147483647.0 || !whole(in_offset, 0) || !whole(out_offset, -1) || !whole(length, 0) ||
      !whole(previous, 0) || previous > 4294967295.0) {
    fail(env, usage);
    return NULL;
  }
  copy_job* job = calloc(1, sizeof *job);
  if (job == NULL) {
    fail(env, "copyRange: out of memory");
    return NULL;
  }
  job->in_fd = (int)in_fd;
  job->out_fd = (int)out_fd;
  job->in_offset = (int64_t)in_offset;
  job->out_offset = (int64_t)out_offset;
  job->length = (int64_t)length;
  job->with_crc = with_crc;
  job->crc = (uint32_t)previous;
  return job;
}

static napi_value copy_range_js(napi_env env, napi_callback_info info) {
  copy_job* job = copy_job_of(env, info, 0, "copyRange(inFd, inOffset, outFd, outOffset, length): whole numbers, outOffset -1 for the file position");
  if (job == NULL) return NULL;
  return queue_job(env, "st-convert.copyRange", copy_run, copy_done, job, "copyRange: cannot queue the copy");
}

static napi_value copy_range_crc32_js(napi_env env, napi_callback_info info) {
  copy_job* job = copy_job_of(env, info, 1,
                              "copyRangeCrc32(inFd, inOffset, outFd, outOffset, length, previous): whole numbers, outOffset -1 for the file "
                              "position, previous a uint32");
  if (job == NULL) return NULL;
  return queue_job(env, "st-convert.copyRangeCrc32", copy_run, copy_done, job, "copyRangeCrc32: cannot queue the copy");
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Once per process, whichever thread (main or a batch's worker) loads the module first. */
static void initialize(void) {
  make_table();
  json_initialize();
#if defined(__x86_64__)
  __builtin_cpu_init();
  can_fold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
  if (can_fold && __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx2")) can_fold = 2;
  if (can_fold == 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) can_fold = 3;
  /* A lower fold on request, so that the tests can compare every one this CPU has. */
  const char* cap = getenv("ST_CONVERT_CRC_FOLD");
  if (cap != NULL && cap[0] >= '0' && cap[0] <= '3' && cap[0] - '0' < can_fold) can_fold = cap[0] - '0';
#endif
}

NAPI_MODULE_INIT() {
  pthread_once(&once, initialize);
  napi_value fn, flag;
  napi_create_function(env, "copyRange", NAPI_AUTO_LENGTH, copy_range_js, NULL, &fn);
  napi_set_named_property(env, exports, "copyRange", fn);
  napi_create_function(env, "copyRangeCrc32", NAPI_AUTO_LENGTH, copy_range_crc32_js, NULL, &fn);
  napi_set_named_property(env, exports, "copyRangeCrc32", fn);
  napi_create_function(env, "crc32Range", NAPI_AUTO_LENGTH, crc32_range_js, NULL, &fn);
  napi_set_named_property(env, exports, "crc32Range", fn);
  napi_create_function(env, "readRuns", NAPI_AUTO_LENGTH, read_runs_js, NULL, &fn);
  napi_set_named_property(env, exports, "readRuns", fn);
  napi_create_function(env, "crc32", NAPI_AUTO_LENGTH, crc32_js, NULL, &fn);
  napi_set_named_property(env, exports, "crc32", fn);
  napi_create_function(env, "exchangePaths", NAPI_AUTO_LENGTH, exchange_paths_js, NULL, &fn);
  napi_set_named_property(env, exports, "exchangePaths", fn);
  json_register(env, exports);
  cast_register(env, exports);
  napi_get_boolean(env, can_fold != 0, &flag);
  napi_set_named_property(env, exports, "crc32Folds", flag);
  napi_create_int32(env, can_fold, &flag);
  napi_set_named_property(env, exports, "crc32Fold", flag);
  return exports;
}
