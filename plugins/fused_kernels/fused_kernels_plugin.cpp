// The `fused_kernels` plugin (ApplyOrder::kernel_optimization): chooses which
// of RMSNorm, RoPE, SwiGLU, the chunked cross-entropy and (on CPU) causal
// attention and the linear layers' GEMMs (through oneDNN) run as fused
// kernels. Off = the model's ATen path. The model's
// device picks the set: the CUDA kernels on a CUDA device (CUDA builds), the
// vectorized CPU kernels on the CPU; `emulate` asks for the CUDA kernels'
// CPU emulations on purpose (to test the wiring). All go in the same way.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "cpu_attention.h"
#include "cpu_layers.h"
#include "cpu_linear.h"
#include "titan/onednn_matmul.hpp"
#include "emulated_layers.h"
#ifdef TITAN_WITH_CUDA
#include "cuda_layers.h"
#endif
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
  bool attention = true;               // CPU only: CUDA keeps ATen's flash attention
  bool linear = true;                  // CPU only: the linears' products through oneDNN
  int64_t cross_entropy_chunk = 8192;  // vocabulary columns per chunk
  bool emulate = false;                // run the CPU emulations through the layer seam
};

std::vector<std::string> requested(const FusedKernelsOptions& options) {
  std::vector<std::string> names;
  if (options.rmsnorm) names.push_back("rmsnorm");
  if (options.rope) names.push_back("rope");
  if (options.swiglu) names.push_back("swiglu");
  if (options.cross_entropy) names.push_back("cross_entropy");
  if (options.attention) names.push_back("attention");
  if (options.linear) names.push_back("linear");
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// What the wiring puts in place of the model's layers: the CPU kernels, the
// CUDA kernels' CPU emulations or the CUDA kernels themselves.
struct FusedLayers {
  std::string name;  // for the log
  std::shared_ptr<torch::nn::Module> (*rmsnorm)(std::shared_ptr<titan::RMSNorm> norm);
  std::shared_ptr<torch::nn::Module> (*rotary)();
  std::shared_ptr<torch::nn::Module> (*swiglu)();
  titan::LossFn (*linear_cross_entropy)(at::Tensor weight, int64_t chunk);
  // Null where the set has no attention kernel: the model keeps its SDPA.
  std::shared_ptr<torch::nn::Module> (*attention)() = nullptr;
  // Null where the set has no linear layer: the model keeps ATen's.
  std::shared_ptr<torch::nn::Module> (*linear)(std::shared_ptr<titan::Linear> inner) = nullptr;
};

template <class Norm, class Rope, class Glu>
FusedLayers fused_layers(std::string name, titan::LossFn (*linear_cross_entropy)(at::Tensor, int64_t)) {
  return {std::move(name),
          [](std::shared_ptr<titan::RMSNorm> norm) -> std::shared_ptr<torch::nn::Module> {
            return std::make_shared<Norm>(std::move(norm));
          },
          []() -> std::shared_ptr<torch::nn::Module> { return std::make_shared<Rope>(); },
          []() -> std::shared_ptr<torch::nn::Module> { return std::make_shared<Glu>(); }, linear_cross_entropy};
}

FusedLayers cpu_layers() {
  namespace fused = titan::fused;
  FusedLayers layers = fused_layers<fused::CpuRMSNorm, fused::CpuRotary, fused::CpuSwiGLU>(
      "CPU kernels", &fused::cpu_chunked_linear_cross_entropy);
  layers.attention = []() -> std::shared_ptr<torch::nn::Module> { return std::make_shared<fused::CpuAttention>(); };
  layers.linear = [](std::shared_ptr<titan::Linear> inner) -> std::shared_ptr<torch::nn::Module> {
    return std::make_shared<fused::CpuLinear>(std::move(inner));
  };
  return layers;
}

FusedLayers emulated_layers() {
  namespace fused = titan::fused;
  return fused_layers<fused::EmulatedRMSNorm, fused::EmulatedRotary, fused::EmulatedSwiGLU>(
      "CPU emulations", &fused::chunked_linear_cross_entropy);
}

#ifdef TITAN_WITH_CUDA
FusedLayers cuda_layers() {
  namespace fused = titan::fused;
  return fused_layers<fused::CudaRMSNorm, fused::CudaRotary, fused::CudaSwiGLU>(
      "CUDA kernels", &fused::cuda_chunked_linear_cross_entropy);
}
#endif

class FusedKernelsParallelizer : public titan::Parallelizer {
 public:
  explicit FusedKernelsParallelizer(FusedKernelsOptions options) : options_(options) {}
  titan::ApplyOrder apply_order() const override { return titan::ApplyOrder::kernel_optimization; }

  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    std::vector<std::string> names = requested(options_);
    if (names.empty()) {
      spdlog::info("fused_kernels: every kernel is off; the model runs its ATen path");
      return;
    }
    if (options_.emulate) {
      wire(model, emulated_layers());
      return;
    }
    // Meta: `titan plan`'s dry run. The CPU layers take the ATen path on
    // meta tensors, so the plan sees the same modules as the run.
    if (context.device.is_cpu() || context.device.is_meta()) {
      wire(model, cpu_layers());
      return;
    }
#ifndef TITAN_WITH_CUDA
    throw titan::Error("fused_kernels: " + joined(names) + " on " + context.device.str() +
                       " need CUDA, and this Titan was built without it (TITAN_WITH_CUDA off; build against a "
                       "CUDA LibTorch, see docs/building.md); set those options to false or drop the plugin to use "
                       "the ATen path");
#else
    if (!context.device.is_cuda()) {
      throw titan::Error("fused_kernels: " + joined(names) + " have CPU and CUDA kernels, but the model is on " +
                         context.device.str() +
                         " (training.device); set those options to false or drop the plugin to use the ATen path");
    }
    wire(model, cuda_layers());
#endif
  }

 private:
  // RMSNorm, rotary and SwiGLU layers and the output head swapped by path.
  void wire(titan::CausalLM& model, const FusedLayers& layers) const {
    // The model's own core modules only: a layer another plugin wrapped
    // (TP's norms) keeps its path.
    int norms = 0, rotaries = 0, swiglus = 0, attentions = 0, linears = 0;
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      const torch::nn::Module& module = *item.value();
      const auto& type = typeid(module);
      if (options_.rmsnorm && type == typeid(titan::RMSNorm)) {
        titan::swap_module(model, item.key(), layers.rmsnorm(std::dynamic_pointer_cast<titan::RMSNorm>(item.value())));
        ++norms;
      } else if (options_.rope && type == typeid(titan::Rotary)) {
        titan::swap_module(model, item.key(), layers.rotary());
        ++rotaries;
      } else if (options_.swiglu && type == typeid(titan::SwiGLU)) {
        titan::swap_module(model, item.key(), layers.swiglu());
        ++swiglus;
      } else if (options_.attention && layers.attention && type == typeid(titan::AttentionCore)) {
        // Only the plain core: context parallelism's or selective
        // checkpointing's attention keeps its own path.
        titan::swap_module(model, item.key(), layers.attention());
        ++attentions;
      } else if (options_.linear && layers.linear && type == typeid(titan::Linear) &&
                 !std::dynamic_pointer_cast<titan::Linear>(item.value())->bias.defined() &&  // the kernel has none
                 !(options_.cross_entropy && item.key() == "output")) {  // the loss takes the head below
        titan::swap_module(model, item.key(), layers.linear(std::dynamic_pointer_cast<titan::Linear>(item.value())));
        ++linears;
      }
    }
    bool head = false;
    // A pipeline stage without the head has no loss to fuse.
    auto head_module = titan::find_module(model, "output");
    if (options_.cross_entropy && head_module) {
      if (std::dynamic_pointer_cast<titan::TiedOutput>(head_module)) {
        throw titan::Error("fused_kernels: cross_entropy fuses an output head of its own, and this model's is tied to "
                           "the embeddings (model.enable_weight_tying); set cross_entropy: false");
      }
      auto output = std::dynamic_pointer_cast<titan::Linear>(head_module);
      const torch::nn::Module& head_layer = *head_module;
      if (!output || typeid(head_layer) != typeid(titan::Linear) || !model.logits_vocab_sharded_over().empty()) {
        throw titan::Error("fused_kernels: cross_entropy needs the model's `output` head as a plain titan::Linear "
                           "(not split by tensor parallelism); set cross_entropy: false with tensor_parallel");
      }
      titan::swap_module(model, "output", std::make_shared<titan::fused::DeferredOutputHead>(output));
      model.set_loss(layers.linear_cross_entropy(output->weight, options_.cross_entropy_chunk));
      head = true;
    }
    spdlog::info("fused_kernels: {} wired in: {} RMSNorm, {} rotary, {} SwiGLU, {} attention, {} linear layers{}{}",
                 layers.name, norms, rotaries, swiglus, attentions, linears,
                 linears > 0 ? (titan::onednn_matmul_preferred()
                                    ? " (their products through oneDNN)"
                                    : " (their products through ATen's BLAS: this CPU lacks AVX-512)")
                             : "",
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
  options.attention = node.get<bool>("attention", options.attention,
                                     "fused causal attention forward+backward (CPU; CUDA keeps ATen's flash attention)");
  options.linear = node.get<bool>("linear", options.linear,
                                  "linear layers' products through oneDNN where it beats ATen's BLAS (CPU)");
  options.emulate = node.get<bool>(
      "emulate", options.emulate,
      "run the kernels' CPU emulations through the layer seam (slower than ATen; tests the wiring)");
  if (options.cross_entropy_chunk <= 0) node.fail("cross_entropy_chunk", "expected a size > 0");
  return options;
}

}  // namespace

TITAN_PLUGIN_OF(parallelizer, FusedKernelsParallelizer, "0.2",
                "fused CPU and CUDA kernels for RMSNorm, RoPE, SwiGLU, chunked cross-entropy; on CPU also attention and oneDNN linears",
                read_options)
