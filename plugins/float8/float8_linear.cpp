// The float8 linear's autograd function and its FSDP all-gather extension.
#include "float8_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include "float8_scaled_mm.h"
#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan::float8 {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The contraction dim of each matmul is the one scaled along (axiswise):
//   output      = input[M,K] @ weight[N,K]^T      input per row, weight per row (over K)
//   grad_input  = grad_out[M,N] @ weight[N,K]     grad_out per row, weight per column (over N)
//   grad_weight = grad_out[M,N]^T @ input[M,K]    both per column (over M)
at::Tensor operand(const at::Tensor& x, const CastSpec& spec, int64_t contraction_dim, const Recipe& recipe) {
  if (spec.high_precision) return x.to(at::kFloat);
  return dequantize(cast(x, spec, contraction_dim, recipe));
}

// On a GPU that runs `_scaled_mm` (and unless `emulate`), the three matmuls
// multiply the codes there; the casts are the same as the emulation's.
bool on_scaled_mm(const at::Tensor& x) { return x.is_cuda() && scaled_mm_available(); }

Quantized transposed(const Quantized& q) {
  return {q.codes.t(), q.scale.dim() == 0 ? q.scale : q.scale.t(), q.format};
}

// a [M, K] @ b [N, K]^T, both cast along K, by `_scaled_mm`.
at::Tensor scaled_mm_of(const Quantized& a, const Quantized& b, c10::ScalarType out_dtype) {
  return scaled_mm(a.codes, a.format == Format::e5m2, a.scale, b.codes, b.format == Format::e5m2, b.scale, out_dtype);
}

// x [M, K] @ y [K, N]: x cast along dim 1 and y along dim 0 (the contraction
// dim), multiplied by `_scaled_mm`, or in float32 where an operand stays in
// high precision.
at::Tensor gpu_matmul(const at::Tensor& x, const CastSpec& x_spec, const at::Tensor& y, const CastSpec& y_spec,
                      const Recipe& recipe, c10::ScalarType out_dtype) {
  if (x_spec.high_precision || y_spec.high_precision) {
    return at::mm(operand(x, x_spec, 1, recipe), operand(y, y_spec, 0, recipe)).to(out_dtype);
  }
  return scaled_mm_of(cast(x, x_spec, 1, recipe), transposed(cast(y, y_spec, 0, recipe)), out_dtype);
}

const Recipe& recipe_of(AutogradContext* ctx) {
  return *reinterpret_cast<const Recipe*>(ctx->saved_data["recipe"].toInt());
}

struct Float8MatmulFunction : torch::autograd::Function<Float8MatmulFunction> {
  // x2 [M, K], weight [N, K]; `gathered`: the weight already cast (a
  // Quantized*, or 0). Autograd takes only defined tensors as inputs.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x2, const at::Tensor& weight,
                            int64_t recipe_handle, int64_t gathered_handle, bool gpu) {
    const Recipe& recipe = *reinterpret_cast<const Recipe*>(recipe_handle);
    const auto* gathered = reinterpret_cast<const Quantized*>(gathered_handle);
    ctx->saved_data["recipe"] = recipe_handle;
    const bool pre_cast = gathered && gathered->codes.defined() && !recipe.weight.high_precision &&
                          recipe.weight.granularity == Granularity::tensorwise;
    Quantized w = pre_cast ? *gathered : cast(weight, recipe.weight, 1, recipe);
    ctx->saved_data["gpu"] = gpu;
    at::Tensor out = gpu ? scaled_mm_of(cast(x2, recipe.input, 1, recipe), w, x2.scalar_type())
                         : at::mm(operand(x2, recipe.input, 1, recipe), dequantize(w).t());
    // The weight as cast for grad_input, when that is the forward's cast
    // (tensorwise): reused, as torchao reuses a float8 weight.
    if (recipe.weight_for_grad_input.granularity == Granularity::tensorwise &&
        recipe.weight.granularity == Granularity::tensorwise &&
        recipe.weight_for_grad_input.format == recipe.weight.format) {
      ctx->saved_data["weight_codes"] = w.codes;
      ctx->saved_data["weight_scale"] = w.scale;
    }
    ctx->save_for_backward({x2, weight});
    return out.to(x2.scalar_type());
  }

  // Each gradient only where autograd asks for it: the pipeline's split
  // backward runs this node twice, the input's gradient in I and the
  // weight's in W.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Recipe& recipe = recipe_of(ctx);
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x2 = saved[0];
    const at::Tensor& weight = saved[1];
    at::Tensor grad_out = grads[0].contiguous();
    at::Tensor grad_x, grad_w;
    if (ctx->saved_data["gpu"].toBool()) {
      if (ctx->needs_input_grad(0)) {
        grad_x = ctx->saved_data.count("weight_codes")
                     ? scaled_mm_of(cast(grad_out, recipe.grad_output, 1, recipe),
                                    transposed({ctx->saved_data["weight_codes"].toTensor(),
                                                ctx->saved_data["weight_scale"].toTensor(),
                                                recipe.weight_for_grad_input.format}),
                                    x2.scalar_type())
                     : gpu_matmul(grad_out, recipe.grad_output, weight, recipe.weight_for_grad_input, recipe,
                                  x2.scalar_type());
      }
      if (ctx->needs_input_grad(1)) {
        grad_w = gpu_matmul(grad_out.t(), recipe.grad_output_for_grad_weight, x2, recipe.input_for_grad_weight,
                            recipe, weight.scalar_type());
      }
      return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    if (ctx->needs_input_grad(0)) {
      at::Tensor weight_for_input =
          ctx->saved_data.count("weight_codes")
              ? dequantize({ctx->saved_data["weight_codes"].toTensor(), ctx->saved_data["weight_scale"].toTensor(),
                            recipe.weight_for_grad_input.format})
              : operand(weight, recipe.weight_for_grad_input, 0, recipe);
      grad_x = at::mm(operand(grad_out, recipe.grad_output, 1, recipe), weight_for_input).to(x2.scalar_type());
    }
    if (ctx->needs_input_grad(1)) {
      grad_w = at::mm(operand(grad_out, recipe.grad_output_for_grad_weight, 0, recipe).t(),
                      operand(x2, recipe.input_for_grad_weight, 0, recipe))
                   .to(weight.scalar_type());
    }
    return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& weight, const Recipe& recipe,
                         const Quantized& gathered_weight, bool emulate) {
  const int64_t in_features = x.size(-1);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = weight.size(0);
  at::Tensor out = Float8MatmulFunction::apply(x.reshape({-1, in_features}), weight, reinterpret_cast<int64_t>(&recipe),
                                               reinterpret_cast<int64_t>(&gathered_weight),
                                               !emulate && on_scaled_mm(x));
  return out.reshape(out_shape);
}

at::Tensor PrecomputedScales::scale_of(const Float8Linear* layer, Comm& group) {
  if (stale_) {
    std::vector<at::Tensor> amaxes;
    for (const Float8Linear* each : layers_) amaxes.push_back(amax_of(each->weight(), Granularity::tensorwise, 0));
    at::Tensor all = at::stack(amaxes);
    CallSite site("float8 precompute scales (" + std::to_string(layers_.size()) + " weights)");
    group.all_reduce(all, ReduceOp::max);
    scales_ = amax_to_scale(all, Format::e4m3fn, /*round_to_power_of_2=*/false);
    stale_ = false;
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i] == layer) return scales_[static_cast<int64_t>(i)];
  }
  throw Error("float8: layer '" + layer->path() + "' has no precomputed scale");
}

Float8Linear::Float8Linear(std::shared_ptr<Linear> inner, std::shared_ptr<const Float8Settings> settings,
                           std::string path)
    : LayerWrapper(inner), linear_(std::move(inner)), settings_(std::move(settings)), path_(std::move(path)) {}

at::Tensor Float8Linear::forward(const at::Tensor& input) {
  const at::Tensor& weight = linear_->weight;
  // After FSDP's float8 all-gather the codes of exactly this weight are at hand.
  const bool gathered = gathered_.codes.defined() && gathered_.codes.sizes() == weight.sizes();
  at::Tensor out = float8_linear(input, weight, settings_->recipe, gathered ? gathered_ : Quantized{}, settings_->emulate);
  return linear_->bias.defined() ? out + linear_->bias : out;  // the bias in high precision, as torchao's
}

at::Tensor Float8Linear::extended_parameter() const {
  return settings_->fsdp_float8_all_gather ? linear_->weight : at::Tensor();
}

at::Tensor Float8Linear::pre_all_gather(const at::Tensor& shard, Comm& group) {
  // The tensorwise scale of the whole weight: the MAX of every shard's amax.
  if (settings_->precomputed) {
    gather_scale_ = settings_->precomputed->scale_of(this, group);
  } else {
    at::Tensor amax = amax_of(shard, Granularity::tensorwise, 0).reshape({1});
    CallSite site("float8 amax " + path_);
    group.all_reduce(amax, ReduceOp::max);
    gather_scale_ = amax_to_scale(amax[0], Format::e4m3fn, /*round_to_power_of_2=*/false);
  }
  return quantize_with_scale(shard, Format::e4m3fn, gather_scale_).codes;
}

at::Tensor Float8Linear::post_all_gather(const at::Tensor& gathered, c10::ScalarType dtype) {
  gathered_ = Quantized{gathered, gather_scale_, Format::e4m3fn};
  return dequantize(gathered_).to(dtype);
}

}  // namespace titan::float8
