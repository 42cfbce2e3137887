// Test-only: swaps layers.1.feed_forward for a layer whose output drifts
// with every call (a hidden counter), so recomputing it under activation
// checkpointing gives other values; determinism_check must name the block.
#include <ATen/ATen.h>

#include "titan/layers.hpp"
#include "titan/module_path.hpp"
#include "titan/parallelizer.hpp"
#include "test_plugin.hpp"

namespace {

class Drifting : public titan::LayerWrapper {
 public:
  using LayerWrapper::LayerWrapper;
  at::Tensor forward(const at::Tensor& input) override { return inner().forward(input) + 1e-3 * ++calls_; }

 private:
  int64_t calls_ = 0;
};

class DriftingBlock : public titan::Parallelizer {
 public:
  titan::ApplyOrder apply_order() const override { return titan::ApplyOrder::precision_conversion; }
  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext&) override {
    auto layer = std::dynamic_pointer_cast<titan::Layer>(titan::find_module(model, "layers.1.feed_forward"));
    titan::swap_module(model, "layers.1.feed_forward", std::make_shared<Drifting>(layer));
  }
};

}  // namespace

TITAN_TEST_PLUGIN_OF(drifting_block, parallelizer, DriftingBlock, "1.0",
                "test only: layers.1.feed_forward drifts on every call")
