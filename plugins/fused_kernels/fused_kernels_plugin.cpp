// The `fused_kernels` plugin (kernel_optimization stage): chooses which of
// RMSNorm, RoPE, SwiGLU and the chunked cross-entropy run as fused CUDA
// kernels. Off = the model's ATen path. The kernels exist only in CUDA
// builds; elsewhere asking for one is refused, since a CPU emulation would
// be slower than ATen, unless `emulate` asks for the emulations on purpose
// (to test the wiring).
#include <ATen/ATen.h>

#include <string>
#include <typeinfo>
#include <vector>

#include "emulated_layers.h"
#include "titan/error.hpp"
#include "titan/module_path.hpp"
#include "titan/logging.hpp"
#include "titan/parallelizer.hpp"
#include "titan/plugin.hpp"

namespace {

struct FusedKernelsOptions {
  bool rmsnorm = true;
  bool rope = true;
  bool swiglu = true;
  bool cross_entropy = true;
  int64_t cross_entropy_chunk = 8192;  // vocabulary columns per chunk
  bool emulate = false;                // run the CPU emulations through the layer seam
};

std::vector<std::string> requested(const FusedKernelsOptions& options) {
  std::vector<std::string> names;
  if (options.rmsnorm) names.push_back("rmsnorm");
  if (options.rope) names.push_back("rope");
  if (options.swiglu) names.push_back("swiglu");
  if (options.cross_entropy) names.push_back("cross_entropy");
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

class FusedKernelsParallelizer : public titan::Parallelizer {
 public:
  explicit FusedKernelsParallelizer(FusedKernelsOptions options) : options_(options) {}
  titan::Stage stage() const override { return titan::Stage::kernel_optimization; }

  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    std::vector<std::string> names = requested(options_);
    if (names.empty()) {
      spdlog::info("fused_kernels: every kernel is off; the model runs its ATen path");
      return;
    }
    if (options_.emulate) {
      wire_emulations(model);
      return;
    }
#ifndef TITAN_WITH_CUDA
    throw titan::Error("fused_kernels: " + joined(names) +
                       " need CUDA, and this Titan was built without it (TITAN_WITH_CUDA off; build against a "
                       "CUDA LibTorch, see README 'GPU'); set those options to false or drop the plugin to use "
                       "the ATen path");
#else
    if (!context.device.is_cuda()) {
      throw titan::Error("fused_kernels: " + joined(names) + " need a CUDA device, but the model is on " +
                         context.device.str() + "; set those options to false or drop the plugin");
    }
    // The kernels and their autograd glue are built (cuda/, cuda_functions.cpp),
    // but the llama3 model offers no core-level hook to swap its RMSNorm,
    // rotary, SwiGLU and loss for them yet: see this plugin's README, "Wiring".
    throw titan::Error("fused_kernels: " + joined(names) +
                       ": the CUDA kernels are built but not yet wired into the model (needs the core hooks listed "
                       "in plugins/fused_kernels/README.md); set the options to false for now");
#endif
  }

 private:
  // RMSNorm, rotary and SwiGLU layers and the output head swapped by path
  // for the emulations.
  void wire_emulations(titan::CausalLM& model) const {
    // The model's own core modules only: a layer another plugin wrapped
    // (TP's norms) keeps its path.
    int norms = 0, rotaries = 0, swiglus = 0;
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      const auto& type = typeid(*item.value());
      if (options_.rmsnorm && type == typeid(titan::RMSNorm)) {
        titan::swap_module(model, item.key(), std::make_shared<titan::fused::EmulatedRMSNorm>(
                                                  std::dynamic_pointer_cast<titan::RMSNorm>(item.value())));
        ++norms;
      } else if (options_.rope && type == typeid(titan::Rotary)) {
        titan::swap_module(model, item.key(), std::make_shared<titan::fused::EmulatedRotary>());
        ++rotaries;
      } else if (options_.swiglu && type == typeid(titan::SwiGLU)) {
        titan::swap_module(model, item.key(), std::make_shared<titan::fused::EmulatedSwiGLU>());
        ++swiglus;
      }
    }
    bool head = false;
    if (options_.cross_entropy) {
      auto output = std::dynamic_pointer_cast<titan::Linear>(titan::find_module(model, "output"));
      if (!output || typeid(*output) != typeid(titan::Linear) || !model.logits_vocab_sharded_over().empty()) {
        throw titan::Error("fused_kernels: cross_entropy needs the model's `output` head as a plain titan::Linear "
                           "(not split by tensor parallelism); set cross_entropy: false with tensor_parallel");
      }
      titan::swap_module(model, "output", std::make_shared<titan::fused::DeferredOutputHead>(output));
      model.set_loss(titan::fused::chunked_linear_cross_entropy(output->weight, options_.cross_entropy_chunk));
      head = true;
    }
    spdlog::info("fused_kernels: CPU emulations wired in: {} RMSNorm, {} rotary, {} SwiGLU layers{}", norms, rotaries,
                 swiglus,
                 head ? ", the output head + loss as chunked linear cross-entropy (chunk " +
                            std::to_string(options_.cross_entropy_chunk) + ")"
                      : "");
  }

  FusedKernelsOptions options_;
};

FusedKernelsOptions read_options(const titan::ConfigNode& node) {
  FusedKernelsOptions options;
  options.rmsnorm = node.get<bool>("rmsnorm", options.rmsnorm, "fused RMSNorm forward+backward");
  options.rope = node.get<bool>("rope", options.rope, "fused rotary embedding on q and k");
  options.swiglu = node.get<bool>("swiglu", options.swiglu, "fused silu(a) * b forward+backward");
  options.cross_entropy = node.get<bool>("cross_entropy", options.cross_entropy,
                                         "output projection + cross-entropy in vocabulary chunks (no fp32 logits)");
  options.cross_entropy_chunk = node.get<int64_t>("cross_entropy_chunk", options.cross_entropy_chunk,
                                                  "vocabulary columns per cross-entropy chunk");
  options.emulate = node.get<bool>(
      "emulate", options.emulate,
      "run the kernels' CPU emulations through the layer seam (slower than ATen; tests the wiring)");
  if (options.cross_entropy_chunk <= 0) node.fail("cross_entropy_chunk", "expected a size > 0");
  return options;
}

void register_fused_kernels(titan::PluginRegistrar& registrar) {
  registrar.parallelizer([](const titan::PluginContext& context) {
    return std::make_unique<FusedKernelsParallelizer>(read_options(context.options));
  });
}

}  // namespace

TITAN_PLUGIN("fused_kernels", "0.1", titan::kind_parallelizer,
             "fused CUDA kernels for RMSNorm, RoPE, SwiGLU and chunked cross-entropy (CUDA builds only)",
             register_fused_kernels)
