// A Parallelizer transforms the model in place (TP, CP, AC, FSDP, ...), at
// its declared place in the ApplyOrder, on the mesh dims it asks for.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "titan/model.hpp"
#include "titan/apply_order.hpp"

namespace titan {

class DeviceMesh;

struct MeshDimRequest {
  std::string dim;      // pp, dp_replicate, dp_shard, cp, tp
  int64_t degree = 1;   // -1: whatever the world size leaves
};

// A dim a plugin declares over ranks the dense dims already hold: the ranks
// of `span` (a dim, or a flattened name such as dp_shard_cp) regrouped as
// `outer` x `inner`, inner fastest, with `inner_degree` ranks along inner.
// Expert parallelism's sparse mesh: {"dp_shard_cp_tp", "efsdp", "ep", 4}
// puts every 4 consecutive ranks of dp_shard_cp_tp in one ep group, and
// ranks that hold the same experts in one efsdp group.
struct MeshSplitRequest {
  std::string span;
  std::string outer;
  std::string inner;
  int64_t inner_degree = 1;
};

struct ParallelizeContext {
  const ModelSpec& spec;
  c10::Device device;
  const DeviceMesh* mesh = nullptr;  // null on a single process
  // training.mixed_precision_param / _reduce: the dtype parameters are
  // gathered and computed in, and the dtype gradients are reduced in.
  c10::ScalarType param_dtype = c10::kFloat;
  c10::ScalarType reduce_dtype = c10::kFloat;
};

// What a parallelizer checks before any weight exists, in `titan config
// check` and at the start of `titan train`.
struct ValidateContext {
  const ModelSpec& spec;  // its vocabulary set from the tokenizer
  // Resolved degree per mesh dim; a dim asked for with -1 is absent when the
  // world size is unknown (`config check` without --world-size).
  std::map<std::string, int64_t> degrees;
  int64_t seq_len = 0;  // training.seq_len
  // Where every parallelizer of the run applies (for rules across plugins,
  // e.g. context parallelism needs a data-parallel plugin).
  std::vector<ApplyOrder> apply_orders;
};

class Parallelizer {
 public:
  virtual ~Parallelizer() = default;
  virtual ApplyOrder apply_order() const = 0;
  virtual std::vector<MeshDimRequest> mesh_dims() const { return {}; }
  virtual std::vector<MeshSplitRequest> mesh_splits() const { return {}; }
  // Throws an Error naming the config key, its value and what would work
  // when the model or the job cannot be parallelized this way.
  virtual void validate(const ValidateContext& /*context*/) const {}
  // False for a parallelizer whose hooks act when a block's input gradient
  // is computed (FSDP's and DDP's gradient reductions, activation
  // checkpointing's recompute): a pipeline's zero-bubble schedules then run
  // the whole backward in I and nothing in W, since computing the weight
  // gradients in a second pass would miss those hooks.
  virtual bool allows_split_backward() const { return true; }
  virtual void parallelize(CausalLM& model, const ParallelizeContext& context) = 0;
};

}  // namespace titan
