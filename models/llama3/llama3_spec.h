// Llama3Spec: the titan::ModelSpec of the llama3 plugin (build, sizes,
// FLOPs, TP plan, HF names). Plugin-private header.
#pragma once
#include <string>

#include "llama3_args.h"
#include "titan/decoder.hpp"

namespace titan {
class ConfigNode;
}

namespace titan::llama3 {

class Llama3Spec : public DecoderSpec<Llama3Args> {
 public:
  Llama3Spec(std::string flavor, const Llama3Args& args) : DecoderSpec("llama3", std::move(flavor), args) {}
  std::shared_ptr<CausalLM> build(const c10::Device& device) const override;
  int64_t num_params(bool include_embedding = true) const override;
  double flops_per_token(int64_t seq_len) const override;
  std::map<std::string, TpStyle> tp_plan() const override;
  std::vector<ShardableSize> tp_sizes() const override;
  std::map<std::string, std::string> hf_names() const override;
  // llama3_hf.cpp: `name` is the Titan parameter name in both directions;
  // wq/wk rows are permuted between Meta's and HF's rotary layouts.
  at::Tensor to_hf(const std::string& name, const at::Tensor& tensor) const override;
  at::Tensor from_hf(const std::string& name, const at::Tensor& tensor) const override;
  std::string hf_config_json() const override;
  bool ties_embeddings() const override { return args_.tie_embeddings; }
};

// The `model:` options (flavor, shape overrides), read and checked
// (llama3_options.cpp).
Llama3Spec read_llama3_spec(const ConfigNode& options);

}  // namespace titan::llama3
