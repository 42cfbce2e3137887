// Test-only: a parallelizer whose gradient finalizer all-reduces a norm
// over the world, where rank 1 sends a tensor of another shape (or, built
// with TITAN_SKIP_ON_RANK_1, no collective at all). `titan plan` must catch
// it before launch, naming the group, the ranks and the call site.
#include <ATen/ATen.h>

#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/parallelizer.hpp"
#include "titan/plugin.hpp"

namespace {

class SkewedCollective : public titan::Parallelizer {
 public:
  titan::ApplyOrder apply_order() const override { return titan::ApplyOrder::precision_conversion; }
  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    const titan::DeviceMesh* mesh = context.mesh;
    if (!mesh) return;
    model.add_gradient_finalizer([mesh] {
      titan::Comm& world = mesh->group("world");
      titan::CallSite site("skewed_collective norm sum");
#ifdef TITAN_SKIP_ON_RANK_1
      if (world.rank() == 1) return;
      at::Tensor norms = at::zeros({1}, at::kDouble);
#else
      at::Tensor norms = at::zeros({world.rank() == 1 ? 2 : 1}, at::kDouble);
#endif
      world.all_reduce(norms);
    });
  }
};

}  // namespace

TITAN_PLUGIN_OF(parallelizer, SkewedCollective, "1.0",
                "test only: rank 1 all-reduces another shape (or nothing) in the gradient finalizer")
