// The canonical order in which the trainer applies model transformations
// (TorchTitan's parallelize_llama order). A parallelizer declares its place
// in it, so the user may list plugins in any order. Not to be confused with
// pipeline stages, the pieces a pipeline cuts the model into.
#pragma once
#include <string>

namespace titan {

enum class ApplyOrder : int {
  precision_conversion = 1,  // e.g. float8 linears
  tensor_parallel = 2,       // tensor / sequence parallel
  loss_parallel = 3,         // the loss on vocab-sharded logits (after TP shards the head)
  context_parallel = 4,
  activation_checkpoint = 5,
  kernel_optimization = 6,   // fused kernels, graphs
  data_parallel = 7,         // FSDP / HSDP / DDP
};

inline const char* apply_order_name(ApplyOrder order) {
  switch (order) {
    case ApplyOrder::precision_conversion: return "precision_conversion";
    case ApplyOrder::tensor_parallel: return "tensor_parallel";
    case ApplyOrder::loss_parallel: return "loss_parallel";
    case ApplyOrder::context_parallel: return "context_parallel";
    case ApplyOrder::activation_checkpoint: return "activation_checkpoint";
    case ApplyOrder::kernel_optimization: return "kernel_optimization";
    case ApplyOrder::data_parallel: return "data_parallel";
  }
  return "unknown";
}

}  // namespace titan
