// The core layers' forwards (TorchTitan's math) and LayerWrapper's adoption
// of the inner layer's names.
#include "titan/layers.hpp"

#include <ATen/ATen.h>

#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/module_path.hpp"
#include "linear_function.hpp"
#include "rms_norm_function.hpp"
#include "rotary_function.hpp"
#include "swiglu_function.hpp"

namespace titan {

// Out of line: the key function that gives Layer one type_info across the
// core and plugin libraries, so plugins can dynamic_cast model layers.
Layer::~Layer() = default;

Linear::Linear(int64_t in_features, int64_t out_features, const at::TensorOptions& options, bool with_bias) {
  weight = register_parameter("weight", at::empty({out_features, in_features}, options));
  if (with_bias) bias = register_parameter("bias", at::empty({out_features}, options));
}

at::Tensor Linear::forward(const at::Tensor& input) {
  return bias.defined() ? at::linear(input, weight, bias) : linear_no_bias(input, weight);
}

Embedding::Embedding(int64_t vocab_size, int64_t dim, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({vocab_size, dim}, options));
}

at::Tensor Embedding::forward(const at::Tensor& tokens) { return at::embedding(weight, tokens); }

at::Tensor TiedOutput::forward(const at::Tensor& input) {
  auto embeddings = find_module(*owner_, "tok_embeddings");
  const at::Tensor* weight = embeddings ? embeddings->named_parameters(/*recurse=*/false).find("weight") : nullptr;
  if (!weight) {
    throw Error("output is tied to tok_embeddings.weight (model.enable_weight_tying), which this model or pipeline "
                "stage does not hold; set model.enable_weight_tying=false to train an output head of its own");
  }
  return at::linear(input, *weight);
}

RMSNorm::RMSNorm(int64_t dim, double eps_, const at::TensorOptions& options) : eps(eps_) {
  weight = register_parameter("weight", at::empty({dim}, options));
}

at::Tensor RMSNorm::forward(const at::Tensor& input) { return rms_norm(input, weight, eps); }

AttentionCore::~AttentionCore() = default;

at::Tensor document_ids(const at::Tensor& document_positions) {
  return document_positions.eq(0).cumsum(1);
}

at::Tensor AttentionCore::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& documents) {
  return compat::causal_attention(q, k, v, documents);
}

Rotary::~Rotary() = default;

at::Tensor Rotary::forward_by_token(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = cos.size(-1);
  return forward(x.reshape({1, -1, x.size(2), x.size(3)}), cos.reshape({-1, half}), sin.reshape({-1, half}))
      .view(x.sizes());
}

at::Tensor Rotary::rows_for(const at::Tensor& table, const at::Tensor& x) {
  const int64_t seq = x.size(1), half = table.size(-1);
  // [batch, seq, half] tables: each row's tokens by their own positions.
  if (table.dim() == 3) return table.to(at::kFloat).view({x.size(0), seq, 1, half});
  return table.narrow(0, 0, seq).to(at::kFloat).view({1, seq, 1, half});
}

at::Tensor Rotary::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // Same fp32 steps as TorchTitan's apply_rotary_emb (complex multiply of pairs).
  return rotate_pairs(x, rows_for(cos, x), rows_for(sin, x));
}

at::Tensor RotateHalfRotary::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return rotate_halves(x, rows_for(cos, x), rows_for(sin, x));
}

SwiGLU::~SwiGLU() = default;

at::Tensor SwiGLU::forward(const at::Tensor& gate, const at::Tensor& up) { return swiglu(gate, up); }

LayerWrapper::LayerWrapper(std::shared_ptr<Layer> inner) : inner_(std::move(inner)) {
  for (const auto& item : inner_->named_parameters(/*recurse=*/false)) {
    register_parameter(item.key(), item.value(), item.value().requires_grad());
  }
  for (const auto& item : inner_->named_buffers(/*recurse=*/false)) register_buffer(item.key(), item.value());
  for (const auto& item : inner_->named_children()) register_module(item.key(), item.value());
}

}  // namespace titan
