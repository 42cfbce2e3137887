// The `whole_model_fsdp` mutant: the real fsdp, except that it first stages
// every whole parameter on the CPU at once, as a naive FSDP would before
// sharding, and keeps them until sharding is done. Training stays exact;
// titan-conformance's parallelizer.memory check must fail it.
#include <ATen/ATen.h>

#include <vector>

#include "fsdp_parallelizer.h"
#include "titan/plugin.hpp"

namespace {

class WholeModelFsdp : public titan::fsdp::FsdpParallelizer {
 public:
  using FsdpParallelizer::FsdpParallelizer;

  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    std::vector<at::Tensor> whole_model_staging;
    for (auto& item : model.named_parameters()) {
      const at::Tensor& param = item.value();
      if (param.requires_grad()) {
        whole_model_staging.push_back(at::zeros(param.sizes(), param.options().device(c10::kCPU)));
      }
    }
    FsdpParallelizer::parallelize(model, context);
  }
};

}  // namespace

TITAN_PLUGIN_OF(parallelizer, WholeModelFsdp, "1.0",
                "fsdp staging every whole parameter before sharding (conformance test)",
                titan::fsdp::read_fsdp_options)
