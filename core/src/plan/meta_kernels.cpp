// Shape functions (Meta kernels) for the ATen ops Titan's models run that
// LibTorch's C++ build has none for: PyTorch registers them from Python
// (torch/_meta_registrations.py), which a C++ process never imports. Each
// returns an empty meta tensor of the shape and dtype the CPU kernel would
// give, so the dry run (titan plan) runs the real step on meta tensors.
#include <ATen/ATen.h>
#include <torch/library.h>

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

std::tuple<at::Tensor, at::Tensor> flash_attention_cpu_meta(const at::Tensor& query, const at::Tensor& /*key*/,
                                                            const at::Tensor& value, double /*dropout*/,
                                                            bool /*causal*/, const std::optional<at::Tensor>& /*mask*/,
                                                            std::optional<double> /*scale*/) {
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
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("index_select", index_select_meta);
  m.impl("where.self", where_meta);
  m.impl("where.self_out", where_out_meta);
  m.impl("embedding_dense_backward", embedding_dense_backward_meta);
  m.impl("_scaled_dot_product_flash_attention_for_cpu", flash_attention_cpu_meta);
  m.impl("_scaled_dot_product_flash_attention_for_cpu_backward", flash_attention_cpu_backward_meta);
}

}  // namespace titan
