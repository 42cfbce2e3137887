// GptOssSpec: the titan::ModelSpec of the gpt_oss plugin (build, sizes,
// FLOPs, TP plan, HF names). Plugin-private header.
#pragma once
#include <map>
#include <string>

#include "gpt_oss_args.h"
#include "titan/decoder.hpp"

namespace titan {
class ConfigNode;
}

namespace titan::gpt_oss {

class GptOssSpec : public DecoderSpec<GptOssArgs> {
 public:
  GptOssSpec(std::string flavor, const GptOssArgs& args) : DecoderSpec("gpt_oss", std::move(flavor), args) {}
  std::shared_ptr<CausalLM> build(const c10::Device& device) const override;
  int64_t num_params(bool include_embedding = true) const override;
  double flops_per_token(int64_t seq_len) const override;
  // TorchTitan's gpt_oss plan: projections split over heads with their
  // biases, wo's bias added after the reduction, the sinks split over
  // heads; the MoE layers are the TP plugin's own concern.
  std::map<std::string, TpStyle> tp_plan() const override;
  std::vector<ShardableSize> tp_sizes() const override;
  // Hugging Face interop (gpt_oss_hf.cpp): transformers' GptOssForCausalLM,
  // the experts' weights transposed ([E, in, out] there).
  std::map<std::string, std::string> hf_names() const override;
  at::Tensor to_hf(const std::string& name, const at::Tensor& tensor) const override;
  at::Tensor from_hf(const std::string& name, const at::Tensor& tensor) const override;
  std::string hf_config_json() const override;
};

// The `model:` options (flavor, shape and MoE overrides), read and checked
// (gpt_oss_options.cpp).
GptOssSpec read_gpt_oss_spec(const ConfigNode& options);

}  // namespace titan::gpt_oss
