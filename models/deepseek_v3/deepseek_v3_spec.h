// DeepSeekV3Spec: the titan::ModelSpec of the deepseek_v3 plugin (build,
// sizes, FLOPs, Hugging Face names). Plugin-private header.
#pragma once
#include <map>
#include <string>

#include "deepseek_v3_args.h"
#include "titan/decoder.hpp"

namespace titan {
class ConfigNode;
}

namespace titan::deepseek_v3 {

class DeepSeekV3Spec : public DecoderSpec<DeepSeekV3Args> {
 public:
  DeepSeekV3Spec(std::string flavor, const DeepSeekV3Args& args) : DecoderSpec("deepseek_v3", std::move(flavor), args) {}
  std::shared_ptr<CausalLM> build(const c10::Device& device) const override;
  int64_t num_params(bool include_embedding = true) const override;
  double flops_per_token(int64_t seq_len) const override;
  // TorchTitan's plan for MLA and the dense blocks; MoE layers are the TP
  // plugin's own concern.
  std::map<std::string, TpStyle> tp_plan() const override;
  std::vector<ShardableSize> tp_sizes() const override;
  // Hugging Face interop (deepseek_v3_hf.cpp): transformers'
  // DeepseekV3ForCausalLM names (rope_interleave: no tensor permuted),
  // experts one tensor each, the expert bias as e_score_correction_bias.
  std::map<std::string, std::string> hf_names() const override;
  std::string hf_config_json() const override;
  // Multi-token prediction embeds the tokens ahead on the stage with the head.
  bool head_needs_embeddings() const override { return args_.num_mtp_layers > 0; }
};

// The `model:` options (flavor, shape, attention, rotary and MoE
// overrides), read and checked (deepseek_v3_options.cpp).
DeepSeekV3Spec read_deepseek_v3_spec(const ConfigNode& options);

}  // namespace titan::deepseek_v3
