// Test-only: a parallelizer whose gradient finalizer all-reduces a norm
// over the world, where rank 1 sends a tensor of another shape (or, as
// `skipped_collective`, no collective at all). `titan plan` must catch
// it before launch, naming the group, the ranks and the call site.
#include <ATen/ATen.h>

#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/parallelizer.hpp"
#include "test_plugin.hpp"

namespace {

enum class Skew { shape, skipped_on_rank_1 };

template <Skew kSkew>
class SkewedCollective : public titan::Parallelizer {
 public:
  titan::ApplyOrder apply_order() const override { return titan::ApplyOrder::precision_conversion; }
  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    const titan::DeviceMesh* mesh = context.mesh;
    if (!mesh) return;
    model.add_gradient_finalizer([mesh] {
      titan::Comm& world = mesh->group("world");
      titan::CallSite site("skewed_collective norm sum");
      if (kSkew == Skew::skipped_on_rank_1 && world.rank() == 1) return;
      const int64_t size = kSkew == Skew::shape && world.rank() == 1 ? 2 : 1;
      at::Tensor norms = at::zeros({size}, at::kDouble);
      world.all_reduce(norms);
    });
  }
};

}  // namespace

TITAN_TEST_PLUGIN_OF(skipped_collective, parallelizer, SkewedCollective<Skew::skipped_on_rank_1>, "1.0",
                     "test only: rank 1 skips the all-reduce of the gradient finalizer")
TITAN_TEST_PLUGIN_OF(skewed_collective, parallelizer, SkewedCollective<Skew::shape>, "1.0",
                "test only: rank 1 all-reduces another shape (or nothing) in the gradient finalizer")
