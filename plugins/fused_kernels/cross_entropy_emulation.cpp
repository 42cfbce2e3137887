// Cross-entropy fused with the output projection, as cuda/cross_entropy.cu
// computes it: vocabulary chunks of `chunk` columns, fp32 logits for one
// chunk at a time (GEMM of T inputs with fp32 accumulation), an online
// logsumexp per token, and a backward that recomputes each chunk's logits,
// rounds (softmax - onehot) * dloss to T, and accumulates grad_hidden in
// fp32. No temporary here is [tokens, vocab].
#include <ATen/ATen.h>

#include <limits>

#include "fused_ops.h"

namespace titan::fused {
namespace {

// fp32 logits [tokens, width] of one chunk: T inputs, fp32 products and sums.
at::Tensor chunk_logits(const at::Tensor& hidden32, const at::Tensor& weight, int64_t c0, int64_t width) {
  return at::mm(hidden32, weight.narrow(0, c0, width).to(at::kFloat).t());
}

// Rows whose label falls in [c0, c0 + width), and the label's column there.
std::pair<at::Tensor, at::Tensor> labels_in_chunk(const at::Tensor& labels, int64_t c0, int64_t width) {
  at::Tensor rows = ((labels >= c0) & (labels < c0 + width)).nonzero().view(-1);
  return {rows, labels.index_select(0, rows) - c0};
}

}  // namespace

CrossEntropyForward emulated_chunked_cross_entropy_forward(const at::Tensor& hidden, const at::Tensor& weight,
                                                           const at::Tensor& labels, int64_t chunk,
                                                           int64_t ignore_index) {
  int64_t tokens = hidden.size(0), vocab = weight.size(0);
  auto f32 = hidden.options().dtype(at::kFloat);
  at::Tensor hidden32 = hidden.to(at::kFloat);
  at::Tensor running_max = at::full({tokens}, -std::numeric_limits<float>::infinity(), f32);
  at::Tensor running_sum = at::zeros({tokens}, f32), target = at::zeros({tokens}, f32);
  for (int64_t c0 = 0; c0 < vocab; c0 += chunk) {
    int64_t width = std::min(chunk, vocab - c0);
    at::Tensor logits = chunk_logits(hidden32, weight, c0, width);
    at::Tensor chunk_max = std::get<0>(logits.max(1));
    at::Tensor chunk_sum = (logits - chunk_max.unsqueeze(1)).exp().sum(1);
    at::Tensor new_max = at::maximum(running_max, chunk_max);
    running_sum = running_sum * (running_max - new_max).exp() + chunk_sum * (chunk_max - new_max).exp();
    running_max = new_max;
    auto [rows, columns] = labels_in_chunk(labels, c0, width);
    target.index_put_({rows}, logits.index({rows, columns}));
  }
  at::Tensor lse = running_max + running_sum.log();
  at::Tensor valid = (labels != ignore_index).to(at::kFloat);
  at::Tensor loss = ((lse - target) * valid).sum() / valid.sum();
  return {loss, lse};
}

CrossEntropyGrads emulated_chunked_cross_entropy_backward(const at::Tensor& hidden, const at::Tensor& weight,
                                                          const at::Tensor& labels, const at::Tensor& lse,
                                                          const at::Tensor& grad_loss, int64_t chunk,
                                                          int64_t ignore_index) {
  int64_t vocab = weight.size(0);
  at::Tensor hidden32 = hidden.to(at::kFloat);
  at::Tensor valid = (labels != ignore_index).to(at::kFloat);
  at::Tensor scale = (valid * (grad_loss.to(at::kFloat) / valid.sum())).unsqueeze(1);
  at::Tensor grad_hidden_sum = at::zeros(hidden32.sizes(), hidden32.options());
  at::Tensor grad_weight = at::empty(weight.sizes(), weight.options());
  for (int64_t c0 = 0; c0 < vocab; c0 += chunk) {
    int64_t width = std::min(chunk, vocab - c0);
    at::Tensor grad_logits = (chunk_logits(hidden32, weight, c0, width) - lse.unsqueeze(1)).exp_();
    auto [rows, columns] = labels_in_chunk(labels, c0, width);
    grad_logits.index_put_({rows, columns}, grad_logits.index({rows, columns}) - 1);
    // Rounded to T: the kernel feeds this chunk to tensor-core GEMMs in T.
    at::Tensor rounded = grad_logits.mul_(scale).to(weight.scalar_type()).to(at::kFloat);
    grad_hidden_sum.addmm_(rounded, weight.narrow(0, c0, width).to(at::kFloat));
    grad_weight.narrow(0, c0, width).copy_(at::mm(rounded.t(), hidden32));
  }
  return {grad_hidden_sum.to(hidden.scalar_type()), grad_weight};
}

}  // namespace titan::fused
