// The canonical order in which the trainer applies model transformations
// (TorchTitan's parallelize_llama order). A plugin declares its stage; the
// user may list plugins in any order.
#pragma once
#include <string>

namespace titan {

enum class Stage : int {
  pipeline_split = 0,
  precision_conversion = 1,  // e.g. float8 linears
  tensor_parallel = 2,       // tensor / sequence parallel
  loss_parallel = 3,         // the loss on vocab-sharded logits (after TP shards the head)
  context_parallel = 4,
  activation_checkpoint = 5,
  kernel_optimization = 6,   // fused kernels, graphs
  data_parallel = 7,         // FSDP / HSDP / DDP
};

inline const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::pipeline_split: return "pipeline_split";
    case Stage::precision_conversion: return "precision_conversion";
    case Stage::tensor_parallel: return "tensor_parallel";
    case Stage::loss_parallel: return "loss_parallel";
    case Stage::context_parallel: return "context_parallel";
    case Stage::activation_checkpoint: return "activation_checkpoint";
    case Stage::kernel_optimization: return "kernel_optimization";
    case Stage::data_parallel: return "data_parallel";
  }
  return "unknown";
}

}  // namespace titan
