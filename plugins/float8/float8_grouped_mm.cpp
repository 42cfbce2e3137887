// The float8 experts' grouped GEMM (float8_grouped_mm.h): the casts of the
// three products, then one of three engines multiplies the codes.
#include "float8_grouped_mm.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include <numeric>
#include <optional>
#include <string>

#include "float8_scaled_mm.h"
#include "titan/error.hpp"

namespace titan::float8 {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum class Engine : int64_t { emulated, scaled_mm, scaled_grouped_mm };

Engine engine_for(const at::Tensor& x, bool emulate) {
  if (emulate || !x.is_cuda() || !scaled_mm_available()) return Engine::emulated;
  // bfloat16 is the only output `_scaled_grouped_mm` writes.
  if (x.scalar_type() == at::kBFloat16 && grouped_scaled_mm_available()) return Engine::scaled_grouped_mm;
  return Engine::scaled_mm;
}

// Codes of x [rows, C] cast per column over each expert's rows (grad_weight's
// contraction dim): `scales` [E, C], `row_scales` the same spread over the rows.
struct GroupColumnCast {
  at::Tensor codes, scales, row_scales;
};

GroupColumnCast cast_per_group_column(const at::Tensor& x, const at::Tensor& lengths, const CastSpec& spec,
                                      const Recipe& recipe) {
  at::Tensor magnitude = x.detach().to(at::kFloat).abs();
  // unsafe: the lengths are the host's own counts (checked), and the check would read them back from the device.
  at::Tensor amax = at::segment_reduce(magnitude, "max", lengths, std::nullopt, std::nullopt, /*axis=*/0,
                                       /*unsafe=*/true, /*initial=*/0.0);
  at::Tensor scales = amax_to_scale(amax, spec.format, recipe.round_scales_to_power_of_2);
  at::Tensor row_scales = at::repeat_interleave(scales, lengths, /*dim=*/0, /*output_size=*/x.size(0));
  return {quantize_with_scale(x, spec.format, row_scales).codes, scales, row_scales};
}

// a [rows, C] (scale [rows, 1]) @ b[e] [N, C]^T (scale [E, N, 1]) for each
// expert's rows -> [rows, N].
at::Tensor products_by_expert(const Quantized& a, const Quantized& b, const at::Tensor& group_ends,
                              const std::vector<int64_t>& group_rows, Engine engine, c10::ScalarType out_dtype) {
  if (engine == Engine::scaled_grouped_mm) {
    return scaled_grouped_mm(a.codes, a.scale, b.codes, b.scale, group_ends).to(out_dtype);
  }
  const at::Tensor a_values = engine == Engine::emulated ? dequantize(a) : at::Tensor();
  const at::Tensor b_values = engine == Engine::emulated ? dequantize(b) : at::Tensor();
  std::vector<at::Tensor> pieces;
  int64_t start = 0;
  for (size_t e = 0; e < group_rows.size(); ++e) {
    const int64_t rows = group_rows[e];
    const auto expert = static_cast<int64_t>(e);
    if (engine == Engine::emulated) {
      pieces.push_back(at::mm(a_values.narrow(0, start, rows), b_values[expert].t()).to(out_dtype));
    } else if (rows > 0) {
      pieces.push_back(scaled_mm(a.codes.narrow(0, start, rows), false, a.scale.narrow(0, start, rows),
                                 b.codes[expert], false, b.scale[expert], out_dtype));
    }
    start += rows;
  }
  if (pieces.empty()) return at::empty({0, b.codes.size(1)}, a.codes.options().dtype(out_dtype));
  return at::cat(pieces, 0);
}

// grad_output[e rows]^T @ x[e rows] for each expert -> [E, N, K]; an expert
// without rows gets a zero gradient.
at::Tensor weight_products_by_expert(const GroupColumnCast& g, const GroupColumnCast& x, const at::Tensor& group_ends,
                                     const std::vector<int64_t>& group_rows, Engine engine,
                                     c10::ScalarType out_dtype) {
  const int64_t experts = static_cast<int64_t>(group_rows.size());
  const int64_t n = g.codes.size(1), k = x.codes.size(1);
  at::Tensor out;
  if (engine == Engine::scaled_grouped_mm) {
    // grad_output^T [N, rows] by x^T [K, rows], grouped along the rows.
    out = scaled_grouped_mm(g.codes.t(), g.scales, x.codes.t(), x.scales, group_ends).to(out_dtype);
    for (int64_t e = 0; e < experts; ++e) {
      if (group_rows[static_cast<size_t>(e)] == 0) out[e].zero_();  // a group of no rows is never written
    }
    return out;
  }
  auto values = [&](const GroupColumnCast& q) {
    return engine == Engine::emulated ? dequantize({q.codes, q.row_scales, Format::e4m3fn}) : at::Tensor();
  };
  const at::Tensor g_values = values(g), x_values = values(x);
  std::vector<at::Tensor> pieces;
  int64_t start = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t rows = group_rows[static_cast<size_t>(e)];
    if (engine == Engine::emulated) {
      pieces.push_back(at::mm(g_values.narrow(0, start, rows).t(), x_values.narrow(0, start, rows)).to(out_dtype));
    } else if (rows == 0) {
      pieces.push_back(at::zeros({n, k}, g.codes.options().dtype(out_dtype)));
    } else {
      pieces.push_back(scaled_mm(g.codes.narrow(0, start, rows).t(), false, g.scales[e].reshape({n, 1}),
                                 x.codes.narrow(0, start, rows).t(), false, x.scales[e].reshape({k, 1}), out_dtype));
    }
    start += rows;
  }
  return at::stack(pieces, 0);
}

Quantized transposed_experts(const Quantized& q) {  // [E, A, B] -> [E, B, A]
  return {q.codes.transpose(1, 2), q.scale.transpose(1, 2), q.format};
}

struct Float8GroupedLinearFunction : torch::autograd::Function<Float8GroupedLinearFunction> {
  // x [rows, K], weights [E, N, K]; `rows_handle` a std::vector<int64_t>*
  // (copied: it does not outlive the forward).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weights,
                            const at::Tensor& group_ends, int64_t recipe_handle, int64_t rows_handle,
                            int64_t engine_id) {
    const Recipe& recipe = *reinterpret_cast<const Recipe*>(recipe_handle);
    const auto& group_rows = *reinterpret_cast<const std::vector<int64_t>*>(rows_handle);
    const auto engine = static_cast<Engine>(engine_id);
    ctx->saved_data["recipe"] = recipe_handle;
    ctx->saved_data["engine"] = engine_id;
    ctx->saved_data["group_rows"] = group_rows;
    ctx->save_for_backward({x, weights, group_ends});
    return products_by_expert(cast(x, recipe.input, 1, recipe), cast(weights, recipe.weight, 2, recipe), group_ends,
                              group_rows, engine, x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Recipe& recipe = *reinterpret_cast<const Recipe*>(ctx->saved_data["recipe"].toInt());
    const auto engine = static_cast<Engine>(ctx->saved_data["engine"].toInt());
    const std::vector<int64_t> group_rows = ctx->saved_data["group_rows"].toIntVector();
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weights = saved[1];
    const at::Tensor& group_ends = saved[2];
    const at::Tensor grad_out = grads[0].contiguous();
    at::Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(0)) {
      // grad_out [rows, N] @ weights[e] [N, K]: the weights cast over N.
      grad_x = products_by_expert(cast(grad_out, recipe.grad_output, 1, recipe),
                                  transposed_experts(cast(weights, recipe.weight_for_grad_input, 1, recipe)),
                                  group_ends, group_rows, engine, x.scalar_type());
    }
    if (ctx->needs_input_grad(1)) {
      // Each expert's rows from the ends already on the device (no second copy from the host).
      const at::Tensor lengths = at::diff(group_ends, 1, 0, at::zeros({1}, group_ends.options()));
      grad_w = weight_products_by_expert(
          cast_per_group_column(grad_out, lengths, recipe.grad_output_for_grad_weight, recipe),
          cast_per_group_column(x, lengths, recipe.input_for_grad_weight, recipe), group_ends, group_rows, engine,
          weights.scalar_type());
    }
    return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

bool rowwise(const CastSpec& spec) {
  return !spec.high_precision && spec.granularity == Granularity::axiswise && spec.format == Format::e4m3fn;
}

void check_arguments(const at::Tensor& x, const at::Tensor& weights, const std::vector<int64_t>& group_rows,
                     const Recipe& recipe, Engine engine) {
  for (const CastSpec* spec : {&recipe.input, &recipe.weight, &recipe.grad_output, &recipe.weight_for_grad_input,
                               &recipe.input_for_grad_weight, &recipe.grad_output_for_grad_weight}) {
    if (!rowwise(*spec)) {
      throw Error("float8 grouped experts: recipe " + recipe.name + " does not cast every operand e4m3 per row; "
                  "float8 experts take recipe_name: rowwise");
    }
  }
  const int64_t rows = std::accumulate(group_rows.begin(), group_rows.end(), int64_t{0});
  if (x.dim() != 2 || weights.dim() != 3 || x.size(1) != weights.size(2) ||
      static_cast<int64_t>(group_rows.size()) != weights.size(0) || rows != x.size(0)) {
    throw Error("float8 grouped experts: expected x [rows, K], weights [E, N, K] and E group sizes summing to rows; "
                "got x " + std::to_string(x.dim()) + "-d with " + std::to_string(x.size(0)) + " rows, weights " +
                std::to_string(weights.dim()) + "-d and " + std::to_string(group_rows.size()) + " groups of " +
                std::to_string(rows) + " rows");
  }
  if (engine == Engine::emulated) return;
  bool aligned = x.size(1) % 16 == 0 && weights.size(1) % 16 == 0;
  for (int64_t count : group_rows) aligned = aligned && count % 16 == 0;
  if (!aligned) {
    throw Error("float8 grouped experts: the GPU's float8 GEMMs need K (" + std::to_string(x.size(1)) + "), N (" +
                std::to_string(weights.size(1)) + ") and every expert's rows to be multiples of 16 (rows are padded "
                "to model.token_group_alignment: leave it 0 or set 16); or set the float8 plugin's emulate: true");
  }
}

}  // namespace

at::Tensor float8_grouped_linear(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& group_ends,
                                 const std::vector<int64_t>& group_rows, const Recipe& recipe, bool emulate) {
  const Engine engine = engine_for(x, emulate);
  check_arguments(x, weights, group_rows, recipe, engine);
  return Float8GroupedLinearFunction::apply(x, weights, group_ends, reinterpret_cast<int64_t>(&recipe),
                                            reinterpret_cast<int64_t>(&group_rows), static_cast<int64_t>(engine));
}

}  // namespace titan::float8
