// Qwen3Spec: the titan::ModelSpec of the qwen3 plugin (build, sizes, FLOPs).
// Plugin-private header.
#pragma once
#include <map>
#include <string>

#include "qwen3_args.h"
#include "titan/decoder.hpp"

namespace titan {
class ConfigNode;
}

namespace titan::qwen3 {

class Qwen3Spec : public DecoderSpec<Qwen3Args> {
 public:
  Qwen3Spec(std::string flavor, const Qwen3Args& args) : DecoderSpec("qwen3", std::move(flavor), args) {}
  std::shared_ptr<CausalLM> build(const c10::Device& device) const override;
  int64_t num_params(bool include_embedding = true) const override;
  double flops_per_token(int64_t seq_len) const override;
  // TorchTitan's qwen3 plan; MoE layers are the TP plugin's own concern.
  std::map<std::string, TpStyle> tp_plan() const override;
  std::vector<ShardableSize> tp_sizes() const override;
  // Hugging Face interop (qwen3_hf.cpp): names as transformers' Qwen3 and
  // Qwen3-MoE, experts one tensor each, no tensor permuted.
  std::map<std::string, std::string> hf_names() const override;
  std::string hf_config_json() const override;
  bool ties_embeddings() const override { return args_.tie_embeddings; }
};

// The `model:` options (flavor, shape and MoE overrides), read and checked
// (qwen3_options.cpp).
Qwen3Spec read_qwen3_spec(const ConfigNode& options);

}  // namespace titan::qwen3
