// Shape functions (Meta kernels) for the ATen ops Titan's models run that
// LibTorch's C++ build has none for: PyTorch registers them from Python
// (torch/_meta_registrations.py), which a C++ process never imports. Each
// returns an empty meta tensor of the shape, dtype and layout the CPU
// kernel would give, so the dry run (titan plan) runs the real step on meta
// tensors. The matmul and attention kernels also count their FLOPs into
// the dry-run rank's tally (2 per multiply-add, as FlopCounterMode).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <mutex>

#include "dry_rank.hpp"

namespace titan {
namespace {

at::Tensor index_select_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  std::vector<int64_t> shape = self.sizes().vec();
  if (!shape.empty()) shape[static_cast<size_t>(at::maybe_wrap_dim(dim, self.dim()))] = index.numel();
  return at::empty(shape, self.options());
}

at::Tensor where_meta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  const std::vector<int64_t> shape = at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  return at::empty(shape, self.options().dtype(at::result_type(self, other)));
}

at::Tensor& where_out_meta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                           at::Tensor& out) {
  const at::Tensor shaped = where_meta(condition, self, other);
  out.resize_(shaped.sizes());
  return out;
}

at::Tensor embedding_dense_backward_meta(const at::Tensor& grad_output, const at::Tensor& /*indices*/,
                                         c10::SymInt num_weights, c10::SymInt /*padding_idx*/, bool /*by_freq*/) {
  return at::empty({num_weights.expect_int(), grad_output.size(-1)}, grad_output.options());
}

// The fused AdamW updates in place and returns nothing: on meta there is
// nothing to update, only the call to accept (a run with
// optimizer.implementation: fused is planned like any other).
void fused_adamw_meta(at::TensorList /*params*/, at::TensorList /*grads*/, at::TensorList /*exp_avgs*/,
                      at::TensorList /*exp_avg_sqs*/, at::TensorList /*max_exp_avg_sqs*/, at::TensorList /*steps*/,
                      double /*lr*/, double /*beta1*/, double /*beta2*/, double /*weight_decay*/, double /*eps*/,
                      bool /*amsgrad*/, bool /*maximize*/, const std::optional<at::Tensor>& /*grad_scale*/,
                      const std::optional<at::Tensor>& /*found_inf*/) {}

// Gradient clipping's norms on the GPU path: one 0-dim norm per tensor.
std::vector<at::Tensor> foreach_norm_meta(at::TensorList tensors, const at::Scalar& /*ord*/,
                                          std::optional<at::ScalarType> dtype) {
  std::vector<at::Tensor> norms;
  norms.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    norms.push_back(at::empty({}, tensor.options().dtype(dtype.value_or(tensor.scalar_type()))));
  }
  return norms;
}

void count(double flops) {
  if (DryRank* rank = current_dry_rank()) rank->tally.add_flops(flops);
}

// q [b, h, s_q, d], k [b, h_kv, s_k, d]: QK^T and PV, 2 s_q s_k d each per
// head (causal sparsity not counted, as TorchTitan's MFU).
double attention_flops(const at::Tensor& query, const at::Tensor& key) {
  return 4.0 * static_cast<double>(query.size(0)) * query.size(1) * query.size(2) * static_cast<double>(key.size(2)) *
         query.size(3);
}

std::tuple<at::Tensor, at::Tensor> flash_attention_cpu_meta(const at::Tensor& query, const at::Tensor& key,
                                                            const at::Tensor& value, double /*dropout*/,
                                                            bool /*causal*/, const std::optional<at::Tensor>& /*mask*/,
                                                            std::optional<double> /*scale*/) {
  count(attention_flops(query, key));
  // [batch, heads, q_len, head_dim] laid out as the CPU kernel's.
  const int64_t batch = query.size(0), heads = query.size(1), length = query.size(2);
  at::Tensor output = at::empty({batch, length, heads, value.size(3)}, query.options()).transpose(1, 2);
  at::Tensor logsumexp = at::empty({batch, length, heads}, query.options().dtype(at::kFloat)).transpose(1, 2);
  return {output, logsumexp};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_cpu_backward_meta(
    const at::Tensor& /*grad_out*/, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& /*out*/, const at::Tensor& /*logsumexp*/, double /*dropout*/, bool /*causal*/,
    const std::optional<at::Tensor>& /*mask*/, std::optional<double> /*scale*/) {
  count(2.0 * attention_flops(query, key));  // four products of the same size
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

// Unary ops LibTorch implements through their out= form on every device.
at::Tensor& unary_out_meta(const at::Tensor& self, at::Tensor& out) {
  out.resize_(self.sizes());
  return out;
}

at::Tensor full_reduction_meta(const at::Tensor& self) { return at::empty({}, self.options()); }

// The matmuls' own Meta kernels (LibTorch's) with their FLOPs counted:
// [.., m, k] x [.., k, n] is 2 m k n per batch.
at::Tensor mm_meta(const at::Tensor& a, const at::Tensor& b) {
  count(2.0 * a.size(0) * a.size(1) * static_cast<double>(b.size(1)));
  return at::empty({a.size(0), b.size(1)}, a.options());
}

at::Tensor addmm_meta(const at::Tensor& /*self*/, const at::Tensor& a, const at::Tensor& b, const at::Scalar& /*beta*/,
                      const at::Scalar& /*alpha*/) {
  return mm_meta(a, b);
}

at::Tensor bmm_meta(const at::Tensor& a, const at::Tensor& b) {
  count(2.0 * a.size(0) * a.size(1) * a.size(2) * static_cast<double>(b.size(2)));
  return at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
}

at::Tensor baddbmm_meta(const at::Tensor& /*self*/, const at::Tensor& a, const at::Tensor& b,
                        const at::Scalar& /*beta*/, const at::Scalar& /*alpha*/) {
  return bmm_meta(a, b);
}

}  // namespace

// Registered when a dry run starts, in place of LibTorch's Meta kernels of
// the same ops (which count nothing): only the dry run computes on meta.
void install_counting_matmuls() {
  static std::once_flag once;
  std::call_once(once, [] {
    static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
    library.impl("mm", mm_meta);
    library.impl("addmm", addmm_meta);
    library.impl("bmm", bmm_meta);
    library.impl("baddbmm", baddbmm_meta);
  });
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("index_select", index_select_meta);
  m.impl("_fused_adamw_", fused_adamw_meta);
  m.impl("_foreach_norm.Scalar", foreach_norm_meta);
  m.impl("where.self", where_meta);
  m.impl("where.self_out", where_out_meta);
  m.impl("embedding_dense_backward", embedding_dense_backward_meta);
  m.impl("abs.out", unary_out_meta);
  m.impl("max", full_reduction_meta);
  m.impl("min", full_reduction_meta);
  m.impl("logical_not.out", unary_out_meta);
  m.impl("_scaled_dot_product_flash_attention_for_cpu", flash_attention_cpu_meta);
  m.impl("_scaled_dot_product_flash_attention_for_cpu_backward", flash_attention_cpu_backward_meta);
}

}  // namespace titan
