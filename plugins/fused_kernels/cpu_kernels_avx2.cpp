// The fused CPU kernels (cpu_kernels.h) in AVX2 + FMA intrinsics, fp32
// math, exp inlined (Cephes' expf, relative error ~1e-7; a call to Sleef per 8
// values left SwiGLU slower than ATen's AVX-512 kernels).
// This TU is built with -mavx2 -mfma and includes no ATen or c10 header, so
// no inline library function compiled for AVX2 can be picked by the linker
// for code that runs on older CPUs.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "avx2_math.h"
#include "cpu_kernels.h"

namespace titan::fused::cpu {
namespace {

using avx2::exp8;
using avx2::horizontal_max;
using avx2::horizontal_sum;

constexpr int64_t kLanes = 8;

// sum of a[j] * b[j] in fp32 (two accumulators, then the tail).
inline float dot(const float *a, const float *b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + kLanes), _mm256_loadu_ps(b + j + kLanes), acc1);
  }
  for (; j + kLanes <= n; j += kLanes) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc0);
  float sum = horizontal_sum(_mm256_add_ps(acc0, acc1));
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

}  // namespace

void rmsnorm_forward(const float *x, const float *weight, float *y, float *rstd, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * dim;
    float *yr = y + r * dim;
    // The model's steps: mean in fp32, + eps, rsqrt, (x * rstd) * weight.
    float inv = 1.0f / std::sqrt(dot(xr, xr, dim) / static_cast<float>(dim) + eps);
    rstd[r] = inv;
    __m256 vinv = _mm256_set1_ps(inv);
    int64_t j = 0;
    for (; j + kLanes <= dim; j += kLanes) {
      __m256 normed = _mm256_mul_ps(_mm256_loadu_ps(xr + j), vinv);
      _mm256_storeu_ps(yr + j, _mm256_mul_ps(normed, _mm256_loadu_ps(weight + j)));
    }
    for (; j < dim; ++j) yr[j] = (xr[j] * inv) * weight[j];
  }
}

void rmsnorm_backward(const float *dy, const float *x, const float *weight, const float *rstd, float *dx,
                      float *grad_weight_sum, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *dyr = dy + r * dim;
    const float *xr = x + r * dim;
    float *dxr = dx + r * dim;
    float inv = rstd[r];
    // mean(d_normed * normed) with d_normed = dy * w, normed = x * rstd.
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + kLanes <= dim; j += kLanes) {
      __m256 d_normed = _mm256_mul_ps(_mm256_loadu_ps(dyr + j), _mm256_loadu_ps(weight + j));
      acc = _mm256_fmadd_ps(d_normed, _mm256_loadu_ps(xr + j), acc);
    }
    float sum = horizontal_sum(acc);
    for (; j < dim; ++j) sum += dyr[j] * weight[j] * xr[j];
    float mean_dot = sum * inv / static_cast<float>(dim);
    __m256 vinv = _mm256_set1_ps(inv), vmean = _mm256_set1_ps(mean_dot);
    j = 0;
    for (; j + kLanes <= dim; j += kLanes) {
      __m256 g = _mm256_loadu_ps(dyr + j);
      __m256 normed = _mm256_mul_ps(_mm256_loadu_ps(xr + j), vinv);
      __m256 d_normed = _mm256_mul_ps(g, _mm256_loadu_ps(weight + j));
      _mm256_storeu_ps(dxr + j, _mm256_mul_ps(vinv, _mm256_fnmadd_ps(normed, vmean, d_normed)));
      _mm256_storeu_ps(grad_weight_sum + j, _mm256_fmadd_ps(g, normed, _mm256_loadu_ps(grad_weight_sum + j)));
    }
    for (; j < dim; ++j) {
      float normed = xr[j] * inv;
      dxr[j] = inv * (dyr[j] * weight[j] - normed * mean_dot);
      grad_weight_sum[j] += dyr[j] * normed;
    }
  }
}

void rope_tables(const float *cos, int64_t cos_row_stride, const float *sin, int64_t sin_row_stride, int64_t seq,
                 int64_t head_dim, int direction, float *cos2, float *sin2) {
  float sign = direction >= 0 ? 1.0f : -1.0f;
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      float c = cos[s * cos_row_stride + i], sn = sin[s * sin_row_stride + i];
      cos2[s * head_dim + 2 * i] = c;
      cos2[s * head_dim + 2 * i + 1] = c;
      sin2[s * head_dim + 2 * i] = -sign * sn;
      sin2[s * head_dim + 2 * i + 1] = sign * sn;
    }
  }
}

void rope_rows(const float *x, int64_t stride_batch, int64_t stride_seq, int64_t stride_head, float *out,
               const float *cos2, const float *sin2, int64_t first, int64_t last, int64_t seq, int64_t heads,
               int64_t head_dim) {
  for (int64_t row = first; row < last; ++row) {
    int64_t b = row / seq, s = row % seq;
    const float *c = cos2 + s * head_dim;
    const float *sn = sin2 + s * head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      const float *src = x + b * stride_batch + s * stride_seq + h * stride_head;
      float *dst = out + (row * heads + h) * head_dim;
      int64_t j = 0;
      for (; j + kLanes <= head_dim; j += kLanes) {
        __m256 v = _mm256_loadu_ps(src + j);
        __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x1, x0, x3, x2, ...)
        _mm256_storeu_ps(dst + j,
                         _mm256_fmadd_ps(v, _mm256_loadu_ps(c + j), _mm256_mul_ps(swapped, _mm256_loadu_ps(sn + j))));
      }
      for (; j + 1 < head_dim; j += 2) {
        float even = src[j], odd = src[j + 1];
        dst[j] = even * c[j] + odd * sn[j];
        dst[j + 1] = odd * c[j + 1] + even * sn[j + 1];
      }
    }
  }
}

void swiglu_forward(const float *a, const float *b, float *out, float *sigmoid, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    __m256 va = _mm256_loadu_ps(a + j);
    __m256 denominator = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, va)));
    if (sigmoid) {
      __m256 s = _mm256_div_ps(one, denominator);
      _mm256_storeu_ps(sigmoid + j, s);
      _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_mul_ps(va, s), _mm256_loadu_ps(b + j)));
    } else {
      // ATen's silu: x / (1 + exp(-x)).
      _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_div_ps(va, denominator), _mm256_loadu_ps(b + j)));
    }
  }
  for (; j < n; ++j) {
    float denominator = 1.0f + std::exp(-a[j]);
    if (sigmoid) {
      sigmoid[j] = 1.0f / denominator;
      out[j] = (a[j] * sigmoid[j]) * b[j];
    } else {
      out[j] = (a[j] / denominator) * b[j];
    }
  }
}

void swiglu_backward(const float *grad, const float *a, const float *b, const float *sigmoid, float *grad_a,
                     float *grad_b, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    __m256 va = _mm256_loadu_ps(a + j), g = _mm256_loadu_ps(grad + j), s = _mm256_loadu_ps(sigmoid + j);
    // ATen's silu_backward: dy * sigmoid * (1 + x * (1 - sigmoid)), dy = grad *
    // b.
    __m256 d_silu = _mm256_mul_ps(g, _mm256_loadu_ps(b + j));
    __m256 factor = _mm256_fmadd_ps(va, _mm256_sub_ps(one, s), one);
    _mm256_storeu_ps(grad_a + j, _mm256_mul_ps(_mm256_mul_ps(d_silu, s), factor));
    _mm256_storeu_ps(grad_b + j, _mm256_mul_ps(g, _mm256_mul_ps(va, s)));
  }
  for (; j < n; ++j) {
    float s = sigmoid[j];
    grad_a[j] = grad[j] * b[j] * s * (1.0f + a[j] * (1.0f - s));
    grad_b[j] = grad[j] * (a[j] * s);
  }
}

void cross_entropy_rows(float *logits, const int64_t *labels, int64_t rows, int64_t vocab, int64_t ignore_index,
                        bool write_grad, float grad_scale, float *row_loss) {
  for (int64_t r = 0; r < rows; ++r) {
    float *row = logits + r * vocab;
    int64_t label = labels[r];
    if (label == ignore_index) {
      row_loss[r] = 0.0f;
      if (write_grad) std::memset(row, 0, sizeof(float) * vocab);
      continue;
    }
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + kLanes <= vocab; j += kLanes) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
    float max = horizontal_max(vmax);
    for (; j < vocab; ++j) max = std::fmax(max, row[j]);
    float target = row[label];
    // exp(l - max) summed; kept in the row when the gradient is wanted.
    __m256 vm = _mm256_set1_ps(max), acc = _mm256_setzero_ps();
    j = 0;
    for (; j + kLanes <= vocab; j += kLanes) {
      __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
      if (write_grad) _mm256_storeu_ps(row + j, e);
      acc = _mm256_add_ps(acc, e);
    }
    float sum = horizontal_sum(acc);
    for (; j < vocab; ++j) {
      float e = std::exp(row[j] - max);
      if (write_grad) row[j] = e;
      sum += e;
    }
    row_loss[r] = (max + std::log(sum)) - target;
    if (!write_grad) continue;
    float factor = grad_scale / sum;
    __m256 vf = _mm256_set1_ps(factor);
    j = 0;
    for (; j + kLanes <= vocab; j += kLanes) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), vf));
    for (; j < vocab; ++j) row[j] *= factor;
    row[label] -= grad_scale;
  }
}

}  // namespace titan::fused::cpu
