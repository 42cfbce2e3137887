// The `ddp` plugin: every rank holds the whole model (replicated over
// dp_replicate, as TorchTitan's DDP); gradients are averaged by bucketed
// all-reduces that start during backward.
#include <ATen/ATen.h>

#include "gradient_buckets.h"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/parallelizer.hpp"
#include "titan/plugin.hpp"

namespace {

struct DdpOptions {
  int64_t dp_replicate = -1;
  double bucket_cap_mb = 25;
};

class DdpParallelizer : public titan::Parallelizer {
 public:
  explicit DdpParallelizer(DdpOptions options) : options_(options) {}
  titan::ApplyOrder apply_order() const override { return titan::ApplyOrder::data_parallel; }
  bool allows_split_backward() const override { return false; }  // buckets fill as gradients accumulate
  std::vector<titan::MeshDimRequest> mesh_dims() const override { return {{"dp_replicate", options_.dp_replicate}}; }

  void parallelize(titan::CausalLM& model, const titan::ParallelizeContext& context) override {
    if (!context.mesh) throw titan::Error("ddp: no device mesh");
    if (context.param_dtype != c10::kFloat) {
      throw titan::Error("ddp: training.mixed_precision_param must be float32 (DDP keeps one fp32 copy); use fsdp "
                         "for bf16 parameters");
    }
    std::vector<at::Tensor> params;
    for (const auto& item : model.named_parameters()) {
      if (!item.value().requires_grad()) continue;
      if (model.layout(item.key())) {
        throw titan::Error("ddp: parameter '" + item.key() + "' is already distributed; DDP replicates whole "
                           "parameters (use fsdp to combine with other parallelisms)");
      }
      titan::TensorLayout layout = titan::TensorLayout::replicated(item.value().sizes().vec());
      layout.mesh_dims = {"dp_replicate"};
      layout.placements = {titan::Placement::replicate()};
      model.set_layout(item.key(), layout);
      params.push_back(item.value());
    }
    // Under context parallelism the cp ranks' gradients (other tokens of the
    // same sequences) are averaged too.
    const std::string average_over = context.mesh->size("cp") > 1 ? "dp_cp" : "dp_replicate";
    auto buckets = std::make_shared<titan::ddp::GradientBuckets>(
        params, static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024), context.mesh->group(average_over));
    titan::CausalLM* model_ptr = &model;
    // Hooks need the materialized leaves, so they go in at the first forward.
    model.add_forward_wrapper([buckets, model_ptr](const at::Tensor& tokens, const titan::ForwardBody& inner) {
      if (!buckets->hooks_installed()) buckets->install_hooks([model_ptr] { return model_ptr->gradient_sync(); });
      return inner(tokens);
    });
    model.add_gradient_finalizer([buckets] { buckets->finish(); });
    spdlog::info("ddp: {} parameters replicated, gradients averaged over {}={}, {} gradient buckets of <= {} MB",
                 params.size(), average_over, context.mesh->size(average_over), buckets->bucket_count(),
                 options_.bucket_cap_mb);
  }

 private:
  DdpOptions options_;
};

DdpOptions read_options(const titan::ConfigNode& node) {
  DdpOptions options;
  options.dp_replicate = node.degree("dp_replicate", options.dp_replicate, "replicas (-1: the rest of the world)");
  options.bucket_cap_mb = node.number("bucket_cap_mb", options.bucket_cap_mb, titan::NumberRange::above(0),
                                      "gradient bucket size; a bucket's all-reduce starts when it is full");
  return options;
}

}  // namespace

TITAN_PLUGIN_OF(parallelizer, DdpParallelizer, "1.0",
                "distributed data parallel: replicated parameters, bucketed gradient all-reduce overlapped with "
                "backward", read_options)
