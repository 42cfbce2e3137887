// AVX2 + FMA math the fused CPU kernels share (cpu_kernels_avx2.cpp,
// cpu_attention_avx2.cpp): include only from TUs built with -mavx2 -mfma.
// Plugin-private header.
#pragma once
#include <immintrin.h>

namespace titan::fused::avx2 {

// exp(x) = 2^n * exp(r), r = x - n ln2 (ln2 in two parts), exp(r) by a
// degree-7 polynomial (Cephes' expf); relative error ~1e-7. Below
// ln(FLT_MIN) it gives 0, above ~88.37 inf. The constants are shared with
// the 16-lane copy in cpu_attention_avx2.cpp, so both give the same lanes.
namespace exp_constants {
constexpr float kMaxArgument = 88.3762626647949f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693359375f;
constexpr float kLn2Low = -2.12194440e-4f;
// exp(r) = 1 + r + r^2 (kPoly[5] + r (kPoly[4] + ... r kPoly[0])).
constexpr float kPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_constants

inline __m256 exp8(__m256 x) {
  using namespace exp_constants;
  // Constant first: max/min return their second operand for a NaN, so NaN stays NaN.
  x = _mm256_min_ps(_mm256_set1_ps(kMaxArgument), _mm256_max_ps(_mm256_set1_ps(-kMaxArgument), x));
  __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kPoly[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n));
}

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float horizontal_max(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace titan::fused::avx2
