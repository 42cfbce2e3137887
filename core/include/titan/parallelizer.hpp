// A Parallelizer transforms the model in place (TP, CP, AC, FSDP, ...), at
// its declared Stage, on the mesh dims it asks for.
#pragma once
#include <string>
#include <vector>

#include "titan/model.hpp"
#include "titan/stage.hpp"

namespace titan {

class DeviceMesh;

struct MeshDimRequest {
  std::string dim;      // pp, dp_replicate, dp_shard, cp, tp
  int64_t degree = 1;   // -1: whatever the world size leaves
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

class Parallelizer {
 public:
  virtual ~Parallelizer() = default;
  virtual Stage stage() const = 0;
  virtual std::vector<MeshDimRequest> mesh_dims() const { return {}; }
  virtual void parallelize(CausalLM& model, const ParallelizeContext& context) = 0;
};

}  // namespace titan
