// The `float8` plugin: a PrecisionPolicy whose convert() swaps the model's
// linear layers for float8 ones (TorchTitan's float8 model converter, with
// torchao's recipes), before tensor parallelism as TorchTitan orders it.
// Options are TorchTitan's [float8] knobs; where no CUDA device runs
// `_scaled_mm` (CPU, GPUs before sm_89) the exact emulation is forced and logged.
#include <ATen/ATen.h>

#include <string>
#include <typeinfo>
#include <vector>

#include "float8_grouped_mm.h"
#include "float8_linear.h"
#include "float8_scaled_mm.h"
#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"
#include "titan/plugin.hpp"
#include "titan/precision.hpp"

namespace {

using titan::float8::Float8Linear;
using titan::float8::Float8Settings;

struct Float8Options {
  std::string recipe_name = "tensorwise";
  std::vector<std::string> filter_fqns{"output"};
  std::vector<std::string> moe_fqns;  // MoE layers whose experts multiply in float8 (module path substrings)
  bool auto_filter_small_kn = false;
  bool emulate = false;
  bool enable_fsdp_float8_all_gather = false;
  bool precompute_float8_dynamic_scale_for_fsdp = false;
  c10::ScalarType param_dtype = c10::kFloat;
  c10::ScalarType reduce_dtype = c10::kFloat;
};

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "none" : text;
}

// The first of `fqns` that `path` contains (torchao's and TorchTitan's
// module filters match by substring), or null.
const std::string* first_contained(const std::string& path, const std::vector<std::string>& fqns) {
  for (const auto& fqn : fqns) {
    if (path.find(fqn) != std::string::npos) return &fqn;
  }
  return nullptr;
}

// Why a linear stays in high precision, or "" to convert it: torchao's
// module filter (filter_fqns by substring, dims that _scaled_mm cannot
// take) and, with auto_filter_small_kn, its size thresholds (H100
// measurements: below them float8 is slower than bf16).
std::string kept_because(const std::string& path, int64_t out_features, int64_t in_features,
                         const Float8Options& options) {
  if (const std::string* fqn = first_contained(path, options.filter_fqns)) return "filter_fqns has '" + *fqn + "'";
  if (out_features % 16 != 0 || in_features % 16 != 0) {
    return "weight [" + std::to_string(out_features) + ", " + std::to_string(in_features) +
           "] has a dim not divisible by 16";
  }
  if (options.auto_filter_small_kn) {
    const int64_t k = out_features, n = in_features;  // torchao's names for weight.shape
    bool small = options.recipe_name == "tensorwise" ? (k <= 4096 && n <= 1024)
                                                     : (n <= 2048 || k <= 1024 || (n <= 4096 && k <= 2048));
    if (small) {
      return "auto_filter_small_kn: [" + std::to_string(out_features) + ", " + std::to_string(in_features) +
             "] is below torchao's thresholds for " + options.recipe_name;
    }
  }
  return "";
}

class Float8Policy : public titan::PrecisionPolicy {
 public:
  explicit Float8Policy(Float8Options options) : options_(std::move(options)) {}
  c10::ScalarType param_dtype() const override { return options_.param_dtype; }
  c10::ScalarType reduce_dtype() const override { return options_.reduce_dtype; }
  // Short runs (titan-conformance's 3 SGD steps) measured about 1.5e-5
  // from float32 for every recipe; 5e-3 leaves room for other models and
  // bf16 params while a wrong scale (~4e-2) still fails.
  double loss_tolerance() const override { return 5e-3; }

  void convert(titan::CausalLM& model) override {
    auto settings = std::make_shared<Float8Settings>();
    settings->recipe = titan::float8::recipe_from_name(options_.recipe_name);
    settings->emulate = options_.emulate;
    if (!settings->emulate && !titan::float8::scaled_mm_available()) {
      spdlog::info("float8: emulate forced on: no CUDA device here runs _scaled_mm ({}); the emulation casts "
                   "exactly as the GPU does and multiplies in float32",
                   titan::compat::cuda_summary());
      settings->emulate = true;
    }
    settings->fsdp_float8_all_gather = options_.enable_fsdp_float8_all_gather;
    if (options_.precompute_float8_dynamic_scale_for_fsdp) {
      settings->precomputed = std::make_shared<titan::float8::PrecomputedScales>();
      auto precomputed = settings->precomputed;
      model.add_gradient_finalizer([precomputed] { precomputed->invalidate(); });  // the weights change next
    }
    std::vector<std::string> converted, kept;
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      const torch::nn::Module& module = *item.value();
      if (typeid(module) != typeid(titan::Linear)) continue;
      auto linear = std::dynamic_pointer_cast<titan::Linear>(item.value());
      std::string why = kept_because(item.key(), linear->weight.size(0), linear->weight.size(1), options_);
      if (!why.empty()) {
        kept.push_back(item.key() + " (" + why + ")");
        continue;
      }
      auto layer = std::make_shared<Float8Linear>(linear, settings, item.key());
      if (settings->precomputed) settings->precomputed->add(layer.get());
      titan::swap_module(model, item.key(), layer);
      converted.push_back(item.key());
    }
    const int experts = convert_experts(model, *settings);
    spdlog::info("float8: recipe {} ({}): {} linear layers{} converted{}; kept in high precision: {}",
                 options_.recipe_name, settings->emulate ? "emulated" : "_scaled_mm", converted.size(),
                 experts > 0 ? " and the experts of " + std::to_string(experts) + " MoE layers" : std::string(),
                 options_.enable_fsdp_float8_all_gather
                     ? std::string(", FSDP gathers their weights as float8") +
                           (settings->precomputed ? " (scales precomputed, one all-reduce per step)" : "")
                     : "",
                 joined(kept));
    if (experts > 0) {
      spdlog::info("float8: the experts multiply {} where experts_backend is grouped_mm (CUDA's default), else "
                   "expert by expert",
                   settings->emulate ? "in the exact emulation"
                   : titan::float8::grouped_scaled_mm_available()
                       ? "as one _scaled_grouped_mm per product (bfloat16 activations; _scaled_mm per expert otherwise)"
                       : "by _scaled_mm per expert (this GPU has no _scaled_grouped_mm: it needs sm_90 or sm_100)");
    }
    if (converted.empty() && experts == 0) {
      spdlog::warn("float8: no linear layer was converted; the run trains in high precision");
    }
  }

 private:
  // TorchTitan's float8 grouped experts (rowwise): each expert's three
  // products cast as the float8 linear casts them. Where the experts
  // multiply as one grouped GEMM (experts_backend grouped_mm, the default on
  // CUDA) all experts in one call: `_scaled_grouped_mm` on sm_90/sm_100,
  // else `_scaled_mm` per expert, else (and on CPU) the exact emulation;
  // where they loop, each expert through the float8 linear.
  int convert_experts(titan::CausalLM& model, const Float8Settings& settings) const {
    if (options_.moe_fqns.empty()) return 0;
    int converted = 0;
    for (const auto& [path, moe] : titan::find_moe_layers(model)) {
      const std::string experts_path = path + ".experts";
      if (!first_contained(experts_path, options_.moe_fqns)) continue;
      auto experts = std::dynamic_pointer_cast<titan::GroupedExperts>(titan::find_module(*moe, "experts"));
      if (!experts) throw titan::Error("float8: " + experts_path + " is not a titan::GroupedExperts");
      const titan::float8::Recipe recipe = settings.recipe;
      const bool emulate = settings.emulate;
      experts->matmul = [recipe, emulate](const at::Tensor& x, const at::Tensor& weight) {
        return titan::float8::float8_linear(x, weight, recipe, {}, emulate);
      };
      experts->grouped_matmul = [recipe, emulate](const at::Tensor& x, const at::Tensor& weights,
                                                  const at::Tensor& group_ends, const std::vector<int64_t>& rows) {
        return titan::float8::float8_grouped_linear(x, weights, group_ends, rows, recipe, emulate);
      };
      ++converted;
    }
    if (converted == 0) {
      throw titan::Error("float8: moe_fqns_prototype [" + joined(options_.moe_fqns) +
                         "] matched no MoE layer's experts in this model; its MoE layers' paths look like "
                         "layers.1.moe.experts (an empty list keeps every expert in high precision)");
    }
    return converted;
  }

  Float8Options options_;
};

Float8Options read_options(const titan::ConfigNode& node) {
  Float8Options options;
  options.recipe_name = node.choice("recipe_name", options.recipe_name, {"tensorwise", "rowwise", "rowwise_with_gw_hp"},
                                    "torchao's float8 recipe: tensorwise (e4m3 / e5m2 gradients, one scale per "
                                    "tensor), rowwise (e4m3, per-row scales, powers of 2), rowwise_with_gw_hp "
                                    "(rowwise, grad_weight in high precision)");
  options.filter_fqns = node.get<std::vector<std::string>>(
      "filter_fqns", options.filter_fqns, "linear layers whose module path contains one of these stay high precision");
  options.moe_fqns = node.get<std::vector<std::string>>(
      "moe_fqns_prototype", options.moe_fqns,
      "MoE layers whose experts multiply in float8, by module path substring (e.g. [experts]; recipe rowwise; "
      "TorchTitan's float8 grouped experts)");
  options.auto_filter_small_kn = node.get<bool>(
      "auto_filter_small_kn", options.auto_filter_small_kn,
      "also keep layers below torchao's size thresholds (where float8 is slower on H100) in high precision");
  options.emulate = node.get<bool>("emulate", options.emulate,
                                   "cast exactly but multiply in float32 instead of _scaled_mm (forced where no "
                                   "CUDA device of compute capability 8.9+ is present, e.g. on CPU)");
  options.enable_fsdp_float8_all_gather = node.get<bool>(
      "enable_fsdp_float8_all_gather", options.enable_fsdp_float8_all_gather,
      "FSDP gathers the float8 weights as e4m3 codes + a scale instead of high-precision rows (tensorwise only)");
  options.precompute_float8_dynamic_scale_for_fsdp = node.get<bool>(
      "precompute_float8_dynamic_scale_for_fsdp", options.precompute_float8_dynamic_scale_for_fsdp,
      "compute every gathered weight's scale with one all-reduce per step (needs enable_fsdp_float8_all_gather)");
  const std::vector<std::pair<std::string, c10::ScalarType>> dtypes = {{"float32", c10::kFloat},
                                                                        {"bfloat16", c10::kBFloat16}};
  options.param_dtype = node.choice("param_dtype", options.param_dtype, dtypes,
                                    "dtype parameters are gathered and computed in (replaces "
                                    "training.mixed_precision_param: one precision plugin per run)");
  options.reduce_dtype = node.choice("reduce_dtype", options.reduce_dtype, dtypes,
                                     "dtype gradients are reduced in (replaces training.mixed_precision_reduce)");
  if (options.enable_fsdp_float8_all_gather && options.recipe_name != "tensorwise") {
    node.fail("enable_fsdp_float8_all_gather",
              "works with recipe_name: tensorwise only (the gathered codes share one scale per weight), got "
              "recipe_name: " + options.recipe_name + "; set it to false or use tensorwise");
  }
  if (!options.moe_fqns.empty() && options.recipe_name != "rowwise") {
    node.fail("moe_fqns_prototype", "float8 experts take recipe_name: rowwise only (TorchTitan's), got recipe_name: " +
                                        options.recipe_name + "; set recipe_name: rowwise or drop moe_fqns_prototype");
  }
  if (options.precompute_float8_dynamic_scale_for_fsdp && !options.enable_fsdp_float8_all_gather) {
    node.fail("precompute_float8_dynamic_scale_for_fsdp",
              "precomputes the scales of FSDP's float8 all-gather; set enable_fsdp_float8_all_gather: true too, or "
              "drop it");
  }
  return options;
}

// titan plan's float8: tensorwise, the output head in high precision,
// bf16 parameters; FSDP gathers float8 weights unless TP wraps the layers
// (its float8 all-gather does not reach them).
std::string plan_entry(const titan::PlannedLayout& layout, const std::string& name) {
  if (!layout.float8) return "";
  const std::string gather_float8 = layout.tp == 1 ? "true" : "false";
  return "  - name: " + name +
         "\n    recipe_name: tensorwise\n    filter_fqns: [output]\n    param_dtype: bfloat16\n"
         "    reduce_dtype: float32\n    enable_fsdp_float8_all_gather: " + gather_float8 +
         "\n    precompute_float8_dynamic_scale_for_fsdp: " + gather_float8 + "\n";
}

}  // namespace

TITAN_PLUGIN_OF_PLANNED(precision, Float8Policy, "0.1",
                        "float8 linear layers (torchao recipes tensorwise, rowwise, rowwise_with_gw_hp; FSDP float8 "
                        "all-gather; exact CPU emulation)", plan_entry, read_options)
