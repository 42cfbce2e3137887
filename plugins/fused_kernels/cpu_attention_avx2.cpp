// Causal attention on CPU in fp32 with AVX2 + FMA intrinsics (compiled with
// -O3 -mavx2 -mfma; cpu_attention.cpp checks the CPU before calling): a
// block of query rows at a time, its scores against every key it may see
// kept whole (exact softmax, not online), products of small GEMM tiles held
// in registers. Built for small head_dim (Llama debug: 16), where ATen's
// flash kernel spends its time in per-block overheads, not in FLOPs. Where
// the CPU has AVX-512 and head_dim is a multiple of 16, the GEMM strips and
// the softmax rows run 16 lanes wide (section `wide`, compiled for AVX-512
// by pragma; the rest stays AVX2).
#include "cpu_attention_avx2.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "avx2_math.h"

namespace titan::fused::cpu_attention_avx2 {
namespace {

using avx2::exp8;
using avx2::horizontal_max;
using avx2::horizontal_sum;

// Query rows per block: the block's scores [rows, seq] stay in L1/L2.
constexpr int64_t kRowBlock = 32;

inline int64_t round_up8(int64_t n) { return (n + 7) & ~int64_t{7}; }
// Leading dimension of buffers with one row per head_dim entry or query row
// and one column per key: a cache line more than the keys, so that at seq
// 1024 or 2048 successive rows do not all fall in the same L1 set (4 KiB
// apart), which made the score tiles twice as slow.
inline int64_t key_stride(int64_t seq) { return round_up8(seq) + 16; }
inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

// Lanes j0 + [0, 8) below `limit`.
inline __m256 lanes_below(int64_t j0, int64_t limit) {
  __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(j0)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(limit)), index));
}

// C[MR, 8 NV] = A[MR, K] B[K, 8 NV] where B is given transposed-packed as
// bt[k * ldb + j] and A's rows are a + r * lda (unit stride along K).
template <int MR, int NV>
inline void tile_abt(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k_len, float* c, int64_t ldc) {
  __m256 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m256 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm256_loadu_ps(bt + k * ldb + 8 * v);
    for (int r = 0; r < MR; ++r) {
      __m256 ar = _mm256_broadcast_ss(a + r * lda + k);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(ar, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
}

template <int MR>
inline void rows_abt(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k_len, float* c, int64_t ldc,
                     int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) tile_abt<MR, 2>(a, lda, bt + j, ldb, k_len, c + j, ldc);
  if (j < n) tile_abt<MR, 1>(a, lda, bt + j, ldb, k_len, c + j, ldc);
}

// C[MR, 8 NV] (+)= A[MR, K] B[K, 8 NV]; A's element (r, k) at
// a[r * sar + k * sac] (so A may be a transposed view), B's rows b + k * ldb.
template <int MR, int NV, bool kAccumulate>
inline void tile_ab(const float* a, int64_t sar, int64_t sac, const float* b, int64_t ldb, int64_t k_len, float* c,
                    int64_t ldc) {
  __m256 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = kAccumulate ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m256 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + k * ldb + 8 * v);
    for (int r = 0; r < MR; ++r) {
      __m256 ar = _mm256_broadcast_ss(a + r * sar + k * sac);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
}

template <int MR, bool kAccumulate>
inline void rows_ab(const float* a, int64_t sar, int64_t sac, const float* b, int64_t ldb, int64_t k_len, float* c,
                    int64_t ldc, int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) tile_ab<MR, 4, kAccumulate>(a, sar, sac, b + j, ldb, k_len, c + j, ldc);
  if (j + 16 <= n) {
    tile_ab<MR, 2, kAccumulate>(a, sar, sac, b + j, ldb, k_len, c + j, ldc);
    j += 16;
  }
  if (j < n) tile_ab<MR, 1, kAccumulate>(a, sar, sac, b + j, ldb, k_len, c + j, ldc);
}

// A row's softmax numerator: s[j] = exp(scale (s[j] - max)) for the
// `visible` keys, 0 up to keys_padded; returns the max and the sum.
struct RowSoftmax {
  float max, sum;
};

RowSoftmax softmax_row(float* s, int64_t visible, int64_t keys_padded, float scale_factor) {
  const __m256 scale = _mm256_set1_ps(scale_factor);
  const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
  __m256 max_v = minus_inf;
  int64_t j = 0;
  for (; j + 8 <= visible; j += 8) max_v = _mm256_max_ps(max_v, _mm256_loadu_ps(s + j));
  if (j < visible)
    max_v = _mm256_max_ps(max_v, _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(s + j), lanes_below(j, visible)));
  const float row_max = horizontal_max(max_v);
  const __m256 shift = _mm256_set1_ps(row_max * scale_factor);
  __m256 sum_v = _mm256_setzero_ps();
  for (j = 0; j + 8 <= visible; j += 8) {
    __m256 e = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), scale, shift));
    sum_v = _mm256_add_ps(sum_v, e);
    _mm256_storeu_ps(s + j, e);
  }
  if (j < visible) {
    __m256 e = _mm256_and_ps(exp8(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), scale, shift)), lanes_below(j, visible));
    sum_v = _mm256_add_ps(sum_v, e);
    _mm256_storeu_ps(s + j, e);
    j += 8;
  }
  for (; j < keys_padded; j += 8) _mm256_storeu_ps(s + j, _mm256_setzero_ps());
  return {row_max, horizontal_sum(sum_v)};
}

// A row of the backward: probabilities s[j] = exp(scale s[j] - lse) and
// dscores ds[j] = s[j] (ds[j] - delta) for the `visible` keys, 0 up to
// keys_padded.
void probs_and_dscores_row(float* s, float* ds, int64_t visible, int64_t keys_padded, float scale_factor, float lse,
                           float delta) {
  const __m256 scale = _mm256_set1_ps(scale_factor);
  const __m256 shift = _mm256_set1_ps(lse);
  const __m256 row_delta = _mm256_set1_ps(delta);
  int64_t j = 0;
  for (; j < visible; j += 8) {
    __m256 pr = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), scale, shift));
    __m256 dsr = _mm256_mul_ps(pr, _mm256_sub_ps(_mm256_loadu_ps(ds + j), row_delta));
    if (j + 8 > visible) {
      const __m256 mask = lanes_below(j, visible);
      pr = _mm256_and_ps(pr, mask);
      dsr = _mm256_and_ps(dsr, mask);
    }
    _mm256_storeu_ps(s + j, pr);
    _mm256_storeu_ps(ds + j, dsr);
  }
  for (; j < keys_padded; j += 8) {
    _mm256_storeu_ps(s + j, _mm256_setzero_ps());
    _mm256_storeu_ps(ds + j, _mm256_setzero_ps());
  }
}

// The same row strips with AVX-512 (16 lanes), for head_dim a multiple of 16
// on CPUs that have it: this project's Zen 5 issues two 512-bit FMAs a cycle,
// as many as 256-bit ones, so the strips run about twice as fast. Compiled
// for AVX-512 here alone (the rest of the file stays AVX2); the AVX2 callers
// call them, out of line, once per strip of rows. A strip may compute up to
// 8 columns past n (rounded up to 16): every buffer's leading dimension and
// packed B leaves that room (key_stride, head_dim a multiple of 16).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12's avx512fintrin.h trips its own -Wuninitialized (_mm512_undefined_*,
// GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace wide {

template <int MR, int NV>
inline void tile_abt(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k_len, float* c, int64_t ldc) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(bt + k * ldb + 16 * v);
    for (int r = 0; r < MR; ++r) {
      __m512 ar = _mm512_set1_ps(a[r * lda + k]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

template <int MR>
__attribute__((noinline)) void rows_abt(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k_len,
                                        float* c, int64_t ldc, int64_t n) {
  int64_t j = 0;
  for (; j + 16 < n; j += 32) tile_abt<MR, 2>(a, lda, bt + j, ldb, k_len, c + j, ldc);
  if (j < n) tile_abt<MR, 1>(a, lda, bt + j, ldb, k_len, c + j, ldc);
}

template <int MR, int NV, bool kAccumulate>
inline void tile_ab(const float* a, int64_t sar, int64_t sac, const float* b, int64_t ldb, int64_t k_len, float* c,
                    int64_t ldc) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = kAccumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + k * ldb + 16 * v);
    for (int r = 0; r < MR; ++r) {
      __m512 ar = _mm512_set1_ps(a[r * sar + k * sac]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

template <int MR, bool kAccumulate>
__attribute__((noinline)) void rows_ab(const float* a, int64_t sar, int64_t sac, const float* b, int64_t ldb,
                                       int64_t k_len, float* c, int64_t ldc, int64_t n) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) tile_ab<MR, 4, kAccumulate>(a, sar, sac, b + j, ldb, k_len, c + j, ldc);
  if (j + 32 <= n) {
    tile_ab<MR, 2, kAccumulate>(a, sar, sac, b + j, ldb, k_len, c + j, ldc);
    j += 32;
  }
  if (j < n) tile_ab<MR, 1, kAccumulate>(a, sar, sac, b + j, ldb, k_len, c + j, ldc);
}

// exp8 (avx2_math.h) on 16 lanes: the same steps, the same results per lane.
inline __m512 exp16(__m512 x) {
  using namespace avx2::exp_constants;
  x = _mm512_min_ps(_mm512_set1_ps(kMaxArgument), _mm512_max_ps(_mm512_set1_ps(-kMaxArgument), x));
  __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), _mm512_set1_ps(0.5f)),
                                  _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kPoly[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512i pow2n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(pow2n));
}

// Lanes j0 + [0, 16) below `limit`.
inline __mmask16 lanes_below16(int64_t j0, int64_t limit) {
  const int64_t n = limit - j0;
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// softmax_row and probs_and_dscores_row above, 16 lanes at a time.
__attribute__((noinline)) RowSoftmax softmax_row(float* s, int64_t visible, int64_t keys_padded, float scale_factor) {
  const __m512 scale = _mm512_set1_ps(scale_factor);
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
  __m512 max_v = minus_inf;
  int64_t j = 0;
  for (; j + 16 <= visible; j += 16) max_v = _mm512_max_ps(max_v, _mm512_loadu_ps(s + j));
  if (j < visible) max_v = _mm512_mask_max_ps(max_v, lanes_below16(j, visible), max_v, _mm512_loadu_ps(s + j));
  const float row_max = _mm512_reduce_max_ps(max_v);
  const __m512 shift = _mm512_set1_ps(row_max * scale_factor);
  __m512 sum_v = _mm512_setzero_ps();
  for (j = 0; j < visible; j += 16) {
    const __m512 e =
        _mm512_maskz_mov_ps(lanes_below16(j, visible), exp16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), scale, shift)));
    sum_v = _mm512_add_ps(sum_v, e);
    _mm512_storeu_ps(s + j, e);
  }
  for (; j < keys_padded; j += 16) _mm512_storeu_ps(s + j, _mm512_setzero_ps());
  return {row_max, _mm512_reduce_add_ps(sum_v)};
}

__attribute__((noinline)) void probs_and_dscores_row(float* s, float* ds, int64_t visible, int64_t keys_padded,
                                                     float scale_factor, float lse, float delta) {
  const __m512 scale = _mm512_set1_ps(scale_factor);
  const __m512 shift = _mm512_set1_ps(lse);
  const __m512 row_delta = _mm512_set1_ps(delta);
  int64_t j = 0;
  for (; j < visible; j += 16) {
    const __mmask16 mask = lanes_below16(j, visible);
    const __m512 pr = _mm512_maskz_mov_ps(mask, exp16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), scale, shift)));
    _mm512_storeu_ps(s + j, pr);
    _mm512_storeu_ps(ds + j, _mm512_mul_ps(pr, _mm512_sub_ps(_mm512_loadu_ps(ds + j), row_delta)));
  }
  for (; j < keys_padded; j += 16) {
    _mm512_storeu_ps(s + j, _mm512_setzero_ps());
    _mm512_storeu_ps(ds + j, _mm512_setzero_ps());
  }
}

}  // namespace wide
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

// A strip of MR rows, AVX-512 (kWide) or AVX2.
template <bool kWide, int MR>
inline void strip_abt(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k_len, float* c, int64_t ldc,
                      int64_t n) {
  if constexpr (kWide)
    wide::rows_abt<MR>(a, lda, bt, ldb, k_len, c, ldc, n);
  else
    rows_abt<MR>(a, lda, bt, ldb, k_len, c, ldc, n);
}

template <bool kWide, int MR, bool kAccumulate>
inline void strip_ab(const float* a, int64_t sar, int64_t sac, const float* b, int64_t ldb, int64_t k_len, float* c,
                     int64_t ldc, int64_t n) {
  if constexpr (kWide)
    wide::rows_ab<MR, kAccumulate>(a, sar, sac, b, ldb, k_len, c, ldc, n);
  else
    rows_ab<MR, kAccumulate>(a, sar, sac, b, ldb, k_len, c, ldc, n);
}

// Scores of query rows [row0, row0 + m) against keys [0, n) (n a multiple
// of 8): each tile of 4 rows stops at the 8-column group holding its last
// row's diagonal, so C is written only where j < round_up8(row + 1).
template <bool kWide>
void scores_causal(const float* a, int64_t lda, const float* bt, int64_t ldb, int64_t k_len, float* c, int64_t ldc,
                   int64_t m, int64_t n, int64_t row0) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    strip_abt<kWide, 4>(a + i * lda, lda, bt, ldb, k_len, c + i * ldc, ldc, smaller(n, round_up8(row0 + i + 4)));
  int64_t tail_n = smaller(n, round_up8(row0 + m));
  switch (m - i) {
    case 3:
      strip_abt<kWide, 3>(a + i * lda, lda, bt, ldb, k_len, c + i * ldc, ldc, tail_n);
      break;
    case 2:
      strip_abt<kWide, 2>(a + i * lda, lda, bt, ldb, k_len, c + i * ldc, ldc, tail_n);
      break;
    case 1:
      strip_abt<kWide, 1>(a + i * lda, lda, bt, ldb, k_len, c + i * ldc, ldc, tail_n);
      break;
    default:
      break;
  }
}

// C[m, n] (+)= A[m, K] B[K, n], n a multiple of 8. With row0 >= 0 the rows
// are query rows row0 + i of a causal product: a tile of rows needs only
// K < its last row + 1 (A is zero beyond each row's diagonal). With key0 >= 0
// the rows are keys i and K runs over query rows key0 + k (A = P^T): a tile
// needs only query rows at or after its first key.
template <bool kWide, bool kAccumulate>
void gemm_ab(const float* a, int64_t sar, int64_t sac, const float* b, int64_t ldb, int64_t k_len, float* c,
             int64_t ldc, int64_t m, int64_t n, int64_t row0, int64_t key0 = -1) {
  auto k_for = [&](int64_t i_end) { return row0 < 0 ? k_len : smaller(k_len, row0 + i_end); };
  if constexpr (kAccumulate) {  // key-causal products accumulate (dK, dV)
    if (key0 >= 0) {
      // Keys before key0 see every query row of the block.
      const int64_t full = smaller(m, key0);
      if (full > 0) gemm_ab<kWide, true>(a, sar, sac, b, ldb, k_len, c, ldc, full, n, -1);
      for (int64_t i = full; i < m; i += 4) {
        const int64_t first_k = i - key0;
        if (first_k >= k_len) break;
        const float* ai = a + i * sar + first_k * sac;
        const float* bi = b + first_k * ldb;
        float* ci = c + i * ldc;
        const int64_t len = k_len - first_k;
        switch (smaller(4, m - i)) {
          case 4:
            strip_ab<kWide, 4, true>(ai, sar, sac, bi, ldb, len, ci, ldc, n);
            break;
          case 3:
            strip_ab<kWide, 3, true>(ai, sar, sac, bi, ldb, len, ci, ldc, n);
            break;
          case 2:
            strip_ab<kWide, 2, true>(ai, sar, sac, bi, ldb, len, ci, ldc, n);
            break;
          default:
            strip_ab<kWide, 1, true>(ai, sar, sac, bi, ldb, len, ci, ldc, n);
            break;
        }
      }
      return;
    }
  }
  int64_t i = 0;
  // 3 rows x 32 columns (12 accumulators), or 4 x 16 when n is small
  // (6 x 16 measured slower at head_dim 16).
  if (kWide && n == 16) {  // one vector a row: 8 rows measured faster than 4
    for (; i + 8 <= m; i += 8)
      strip_ab<kWide, 8, kAccumulate>(a + i * sar, sar, sac, b, ldb, k_for(i + 8), c + i * ldc, ldc, n);
  }
  if (n >= 32) {
    for (; i + 3 <= m; i += 3)
      strip_ab<kWide, 3, kAccumulate>(a + i * sar, sar, sac, b, ldb, k_for(i + 3), c + i * ldc, ldc, n);
  } else {
    for (; i + 4 <= m; i += 4)
      strip_ab<kWide, 4, kAccumulate>(a + i * sar, sar, sac, b, ldb, k_for(i + 4), c + i * ldc, ldc, n);
  }
  const float* at = a + i * sar;
  float* ct = c + i * ldc;
  switch (m - i) {
    case 5:
      strip_ab<kWide, 5, kAccumulate>(at, sar, sac, b, ldb, k_for(m), ct, ldc, n);
      break;
    case 4:
      strip_ab<kWide, 4, kAccumulate>(at, sar, sac, b, ldb, k_for(m), ct, ldc, n);
      break;
    case 3:
      strip_ab<kWide, 3, kAccumulate>(at, sar, sac, b, ldb, k_for(m), ct, ldc, n);
      break;
    case 2:
      strip_ab<kWide, 2, kAccumulate>(at, sar, sac, b, ldb, k_for(m), ct, ldc, n);
      break;
    case 1:
      strip_ab<kWide, 1, kAccumulate>(at, sar, sac, b, ldb, k_for(m), ct, ldc, n);
      break;
    default:
      break;
  }
}

// dst[j, d] for j < rows, d < cols from a [rows, cols] view, zero to
// [rows_padded, cols_padded].
void pack_rows(const float* src, int64_t stride, int64_t rows, int64_t cols, float* dst, int64_t rows_padded,
               int64_t cols_padded) {
  for (int64_t j = 0; j < rows; ++j) {
    std::memcpy(dst + j * cols_padded, src + j * stride, sizeof(float) * cols);
    for (int64_t d = cols; d < cols_padded; ++d) dst[j * cols_padded + d] = 0.f;
  }
  if (rows_padded > rows) std::memset(dst + rows * cols_padded, 0, sizeof(float) * (rows_padded - rows) * cols_padded);
}

// 8 x 8 block: out[c * ldo + r] = in[r * ldi + c].
inline void transpose8x8(const float* in, int64_t ldi, float* out, int64_t ldo) {
  __m256 r0 = _mm256_loadu_ps(in + 0 * ldi), r1 = _mm256_loadu_ps(in + 1 * ldi);
  __m256 r2 = _mm256_loadu_ps(in + 2 * ldi), r3 = _mm256_loadu_ps(in + 3 * ldi);
  __m256 r4 = _mm256_loadu_ps(in + 4 * ldi), r5 = _mm256_loadu_ps(in + 5 * ldi);
  __m256 r6 = _mm256_loadu_ps(in + 6 * ldi), r7 = _mm256_loadu_ps(in + 7 * ldi);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
         u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
         u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
         u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
         u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(out + 0 * ldo, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(out + 1 * ldo, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(out + 2 * ldo, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(out + 3 * ldo, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(out + 4 * ldo, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(out + 5 * ldo, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(out + 6 * ldo, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(out + 7 * ldo, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// dst[d, j] = src[j, d] (d < cols), columns j >= rows zero up to rows_padded.
void pack_transposed(const float* src, int64_t stride, int64_t rows, int64_t cols, float* dst, int64_t rows_padded) {
  const int64_t rows8 = rows & ~int64_t{7}, cols8 = cols & ~int64_t{7};
  for (int64_t j = 0; j < rows8; j += 8)
    for (int64_t d = 0; d < cols8; d += 8)
      transpose8x8(src + j * stride + d, stride, dst + d * rows_padded + j, rows_padded);
  for (int64_t d = 0; d < cols; ++d) {
    float* out = dst + d * rows_padded;
    for (int64_t j = d < cols8 ? rows8 : 0; j < rows; ++j) out[j] = src[j * stride + d];
    for (int64_t j = rows; j < rows_padded; ++j) out[j] = 0.f;
  }
}

}  // namespace

size_t forward_workspace_floats(const Problem& p) {
  int64_t sp = key_stride(p.seq), dp = round_up8(p.head_dim);
  return static_cast<size_t>(2 * sp * dp + kRowBlock * sp + kRowBlock * dp + kRowBlock);
}

namespace {

template <bool kWide>
void forward_head(const Problem& p, const View& q, const View& k, const View& v, const View& out, float* lse, int64_t b,
                  int64_t h, float* workspace) {
  const int64_t seq = p.seq, dim = p.head_dim, sp = key_stride(seq), dp = round_up8(dim);
  const int64_t kv_head = h / (p.heads / p.kv_heads);
  float* kt = workspace;                  // [dim, sp]
  float* vp = kt + sp * dp;               // [sp, dp]
  float* scores = vp + sp * dp;           // [kRowBlock, sp]: scores, then probabilities
  float* acc = scores + kRowBlock * sp;   // [kRowBlock, dp]
  float* inv_sum = acc + kRowBlock * dp;  // [kRowBlock]
  pack_transposed(k.row(b, kv_head, 0), k.stride_seq, seq, dim, kt, sp);
  pack_rows(v.row(b, kv_head, 0), v.stride_seq, seq, dim, vp, sp, dp);
  float* lse_row = lse + (b * p.heads + h) * seq;
  for (int64_t i0 = 0; i0 < seq; i0 += kRowBlock) {
    const int64_t rows = smaller(kRowBlock, seq - i0), keys = i0 + rows, keys_padded = round_up8(keys);
    scores_causal<kWide>(q.row(b, h, i0), q.stride_seq, kt, sp, dim, scores, sp, rows, keys_padded, i0);
    for (int64_t r = 0; r < rows; ++r) {
      const RowSoftmax row = kWide ? wide::softmax_row(scores + r * sp, i0 + r + 1, keys_padded, p.scale)
                                   : softmax_row(scores + r * sp, i0 + r + 1, keys_padded, p.scale);
      inv_sum[r] = 1.f / row.sum;
      lse_row[i0 + r] = row.max * p.scale + std::log(row.sum);
    }
    gemm_ab<kWide, false>(scores, sp, 1, vp, dp, keys, acc, dp, rows, dp, i0);
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out.row(b, h, i0 + r);
      const float* a = acc + r * dp;
      const __m256 inv = _mm256_set1_ps(inv_sum[r]);
      int64_t d = 0;
      for (; d + 8 <= dim; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), inv));
      for (; d < dim; ++d) o[d] = a[d] * inv_sum[r];
    }
  }
}

}  // namespace

bool uses_avx512(int64_t head_dim) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  return has_avx512 && head_dim % 16 == 0;
}

void forward(const Problem& p, const View& q, const View& k, const View& v, const View& out, float* lse, int64_t b,
             int64_t h, float* workspace) {
  if (uses_avx512(p.head_dim))
    forward_head<true>(p, q, k, v, out, lse, b, h, workspace);
  else
    forward_head<false>(p, q, k, v, out, lse, b, h, workspace);
}

size_t backward_workspace_floats(const Problem& p) {
  int64_t sp = key_stride(p.seq), dp = round_up8(p.head_dim);
  return static_cast<size_t>(7 * sp * dp + sp + 2 * kRowBlock * sp + kRowBlock * dp);
}

namespace {

template <bool kWide>
void backward_head(const Problem& p, const View& q, const View& k, const View& v, const View& out, const View& grad_out,
                   const float* lse, const View& dq, const View& dk, const View& dv, int64_t b, int64_t kv_head,
                   float* workspace) {
  const int64_t seq = p.seq, dim = p.head_dim, sp = key_stride(seq), dp = round_up8(dim);
  const int64_t group = p.heads / p.kv_heads;
  float* kt = workspace;                       // [dim, sp]
  float* kp = kt + sp * dp;                    // [sp, dp]
  float* vt = kp + sp * dp;                    // [dim, sp]
  float* dk_acc = vt + sp * dp;                // [sp, dp]
  float* dv_acc = dk_acc + sp * dp;            // [sp, dp]
  float* qp = dv_acc + sp * dp;                // [sp, dp]
  float* dop = qp + sp * dp;                   // [sp, dp]
  float* delta = dop + sp * dp;                // [sp]: rowsum(dO * O)
  float* probs = delta + sp;                   // [kRowBlock, sp]
  float* dscores = probs + kRowBlock * sp;     // [kRowBlock, sp]
  float* dq_block = dscores + kRowBlock * sp;  // [kRowBlock, dp]
  pack_transposed(k.row(b, kv_head, 0), k.stride_seq, seq, dim, kt, sp);
  pack_rows(k.row(b, kv_head, 0), k.stride_seq, seq, dim, kp, sp, dp);
  pack_transposed(v.row(b, kv_head, 0), v.stride_seq, seq, dim, vt, sp);
  std::memset(dk_acc, 0, sizeof(float) * 2 * sp * dp);
  const __m256 scale = _mm256_set1_ps(p.scale);
  for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    pack_rows(q.row(b, h, 0), q.stride_seq, seq, dim, qp, sp, dp);
    pack_rows(grad_out.row(b, h, 0), grad_out.stride_seq, seq, dim, dop, sp, dp);
    for (int64_t i = 0; i < seq; ++i) {
      const float* o = out.row(b, h, i);
      const float* g = dop + i * dp;
      __m256 sum_v = _mm256_setzero_ps();
      int64_t d = 0;
      for (; d + 8 <= dim; d += 8) sum_v = _mm256_fmadd_ps(_mm256_loadu_ps(o + d), _mm256_loadu_ps(g + d), sum_v);
      float sum = horizontal_sum(sum_v);
      for (; d < dim; ++d) sum += o[d] * g[d];
      delta[i] = sum;
    }
    const float* lse_row = lse + (b * p.heads + h) * seq;
    for (int64_t i0 = 0; i0 < seq; i0 += kRowBlock) {
      const int64_t rows = smaller(kRowBlock, seq - i0), keys = i0 + rows, keys_padded = round_up8(keys);
      scores_causal<kWide>(qp + i0 * dp, dp, kt, sp, dim, probs, sp, rows, keys_padded, i0);
      scores_causal<kWide>(dop + i0 * dp, dp, vt, sp, dim, dscores, sp, rows, keys_padded, i0);
      for (int64_t r = 0; r < rows; ++r) {
        if constexpr (kWide)
          wide::probs_and_dscores_row(probs + r * sp, dscores + r * sp, i0 + r + 1, keys_padded, p.scale,
                                      lse_row[i0 + r], delta[i0 + r]);
        else
          probs_and_dscores_row(probs + r * sp, dscores + r * sp, i0 + r + 1, keys_padded, p.scale, lse_row[i0 + r],
                                delta[i0 + r]);
      }
      // dV[j] += sum_i P[i, j] dO[i];  dK[j] += sum_i dS[i, j] Q[i] (scaled at
      // the end).
      gemm_ab<kWide, true>(probs, 1, sp, dop + i0 * dp, dp, rows, dv_acc, dp, keys, dp, -1, i0);
      gemm_ab<kWide, true>(dscores, 1, sp, qp + i0 * dp, dp, rows, dk_acc, dp, keys, dp, -1, i0);
      // dQ[i] = scale sum_j dS[i, j] K[j].
      gemm_ab<kWide, false>(dscores, sp, 1, kp, dp, keys, dq_block, dp, rows, dp, i0);
      for (int64_t r = 0; r < rows; ++r) {
        float* out_row = dq.row(b, h, i0 + r);
        const float* a = dq_block + r * dp;
        int64_t d = 0;
        for (; d + 8 <= dim; d += 8) _mm256_storeu_ps(out_row + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), scale));
        for (; d < dim; ++d) out_row[d] = a[d] * p.scale;
      }
    }
  }
  for (int64_t j = 0; j < seq; ++j) {
    float* dk_row = dk.row(b, kv_head, j);
    float* dv_row = dv.row(b, kv_head, j);
    for (int64_t d = 0; d < dim; ++d) {
      dk_row[d] = dk_acc[j * dp + d] * p.scale;
      dv_row[d] = dv_acc[j * dp + d];
    }
  }
}

}  // namespace

void backward(const Problem& p, const View& q, const View& k, const View& v, const View& out, const View& grad_out,
              const float* lse, const View& dq, const View& dk, const View& dv, int64_t b, int64_t kv_head,
              float* workspace) {
  if (uses_avx512(p.head_dim))
    backward_head<true>(p, q, k, v, out, grad_out, lse, dq, dk, dv, b, kv_head, workspace);
  else
    backward_head<false>(p, q, k, v, out, grad_out, lse, dq, dk, dv, b, kv_head, workspace);
}

}  // namespace titan::fused::cpu_attention_avx2
