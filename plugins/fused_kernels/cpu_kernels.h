// The fused CPU kernels' raw entry points (cpu_kernels_avx2.cpp, built with
// AVX2 + FMA): fp32, contiguous rows unless a stride says otherwise, one
// thread each; cpu_layers.cpp splits the rows over threads and calls them
// only where the CPU has AVX2 and FMA. Plugin-private header.
#pragma once
#include <cstdint>

namespace titan::fused::cpu {

// y = (x * rstd) * weight per row, rstd = 1 / sqrt(mean(x^2) + eps) saved per
// row.
void rmsnorm_forward(const float *x, const float *weight, float *y, float *rstd, int64_t rows, int64_t dim, float eps);
// grad_x per row; grad_weight_sum[dim] += sum over these rows of dy * x * rstd.
void rmsnorm_backward(const float *dy, const float *x, const float *weight, const float *rstd, float *dx,
                      float *grad_weight_sum, int64_t rows, int64_t dim);

// Tables for one rotation direction (+1 forward, -1 backward) from cos/sin
// [seq, head_dim / 2] (row stride given): cos2 [seq, head_dim] repeats each
// cosine for its pair; sin2 carries the signs, so out = x * cos2 +
// swap_pairs(x) * sin2.
void rope_tables(const float *cos, int64_t cos_row_stride, const float *sin, int64_t sin_row_stride, int64_t seq,
                 int64_t head_dim, int direction, float *cos2, float *sin2);
// Rotates the (batch, position) rows [first, last) of x [batch, seq, heads,
// head_dim] (strides of batch, seq, heads given; head_dim contiguous) into
// out, contiguous [batch, seq, heads, head_dim].
void rope_rows(const float *x, int64_t stride_batch, int64_t stride_seq, int64_t stride_head, float *out,
               const float *cos2, const float *sin2, int64_t first, int64_t last, int64_t seq, int64_t heads,
               int64_t head_dim);

// out = silu(a) * b over n elements; sigmoid(a) kept where sigmoid is not
// null (for the backward, which then needs no exp).
void swiglu_forward(const float *a, const float *b, float *out, float *sigmoid, int64_t n);
// grad_a = grad * b * silu'(a), grad_b = grad * silu(a), from sigmoid(a).
void swiglu_backward(const float *grad, const float *a, const float *b, const float *sigmoid, float *grad_a,
                     float *grad_b, int64_t n);

// Cross-entropy of logit rows [rows, vocab] (contiguous) against labels:
// row_loss[r] = logsumexp(row) - row[label] (0 where label == ignore_index).
// With write_grad, each row is overwritten by its logits' gradient
// (softmax - onehot) * grad_scale (zeros for ignored rows).
void cross_entropy_rows(float *logits, const int64_t *labels, int64_t rows, int64_t vocab, int64_t ignore_index,
                        bool write_grad, float grad_scale, float *row_loss);

}  // namespace titan::fused::cpu
