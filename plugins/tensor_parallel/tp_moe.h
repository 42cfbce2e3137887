// A MoE layer under tensor parallelism, as TorchTitan's apply_moe_ep_tp.
// The layer's input is whole on every tp rank (the ffn norm gathered it)
// and the router scores every token on every rank, so its counts and
// expert bias are the whole batch's, the same on every tp rank. Then:
//   experts over ep (expert parallelism borrowed the tp ranks): each rank
//     sends only its sequence shard of the tokens to the experts, so the
//     dispatch and the experts' work are split over tp, not repeated; the
//     output is that shard (the residual stream's own under sequence
//     parallelism; gathered whole without it);
//   experts whole (ep = 1): each expert's and the shared expert's FFN width
//     is split over tp (w1, w3 by rows, w2 by columns), every rank runs
//     every token, and the partial outputs are summed as a rowwise
//     layer's (all-reduce, or reduce-scatter along the sequence).
// Weights every rank holds whole but uses on its own share (the router
// gate; the shared expert when tokens are split) have their gradients
// summed over tp.
#pragma once
#include <memory>
#include <string>

#include "tp_layers.h"

namespace titan {
class CausalLM;
class MoE;
}  // namespace titan

namespace titan::tensor_parallel {

class TpMoE : public TpLayer {
 public:
  TpMoE(std::shared_ptr<Layer> wrapped, std::shared_ptr<MoE> moe, TpContext tp, std::string path, bool split_tokens);
  at::Tensor forward(const at::Tensor& input) override;

 private:
  std::shared_ptr<MoE> moe_;
  bool split_tokens_;
};

// Every MoE layer of `model` made tensor-parallel: weights cut on the meta
// model with their layouts, the layer swapped for a TpMoE. `split_tokens`:
// expert parallelism holds the experts (the mesh has ep > 1), so tokens are
// split over tp instead of the experts' width. Returns how many.
int parallelize_moe_layers(CausalLM& model, TpContext tp, bool split_tokens);

}  // namespace titan::tensor_parallel
