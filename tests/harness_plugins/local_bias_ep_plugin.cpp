// The `local_bias_ep` mutant: the real expert_parallel (a subclass of its
// ExpertParallelizer, with its own descriptor), plus the load-balancing bug
// a plugin can have: it balances its routers itself, after each backward
// (a gradient finalizer, which runs before the trainer's load balancing),
// moving every expert bias by this rank's own token counts and zeroing them,
// so the trainer's sum over dp and cp finds nothing left to sum. The bias is
// updated from local counts without the reduction. One rank has nothing to
// reduce; on two, each rank's biases part from one process's, and
// titan-conformance's parallelizer.expert_bias must fail it.
#include "ep_parallelizer.h"
#include "titan/moe.hpp"
#include "titan/plugin.hpp"

namespace {

class LocalBiasExpertParallelizer : public titan::expert_parallel::ExpertParallelizer {
 public:
  using ExpertParallelizer::ExpertParallelizer;

  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    ExpertParallelizer::parallelize(model, context);
    auto routers = titan::find_routers(model);
    model.add_gradient_finalizer([routers] {
      for (const auto& [path, router] : routers) router->update_expert_bias(router->tokens_per_expert);
    });
  }
};

titan::expert_parallel::EpOptions read_options(const titan::ConfigNode& node) {
  titan::expert_parallel::EpOptions options;
  options.degree = node.degree("expert_parallel_degree", options.degree, "as expert_parallel's",
                               titan::Degree::at_least_one);
  return options;
}

}  // namespace

TITAN_PLUGIN_OF(parallelizer, LocalBiasExpertParallelizer, "1.0",
                "expert_parallel balancing its experts from this rank's token counts alone (conformance test)",
                read_options)
