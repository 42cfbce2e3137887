// The layers tensor parallelism swaps in, each wrapping the model's own
// layer (so its parameter names stay) and adding the collectives its
// ParallelStyle implies, each with its autograd adjoint:
//   colwise   input full (or gathered here, async) -> output features local
//   rowwise   input features local -> partial output -> all-reduce, or
//             reduce-scatter along the sequence (SP)
//   vocab embedding  masked lookup of the local vocabulary -> partial output
//             -> all-reduce / reduce-scatter as rowwise
//   norm      SP: runs on the sequence shard and all-gathers the sequence
//             for the colwise layers it feeds; no SP: whole, and its output
//             collects the colwise layers' partial input gradients.
#pragma once
#include <string>

#include "titan/layers.hpp"

namespace titan {
class Comm;
}

namespace titan::tensor_parallel {

// Activations are [batch, seq, features]; sequence parallelism shards dim 1.
constexpr int64_t kSequenceDim = 1;

struct TpContext {
  Comm* comm = nullptr;
  bool sequence_parallel = true;
  bool async = false;          // colwise layers gather, rowwise layers scatter, chunked
  int64_t async_chunks = 2;    // chunks per rank's sequence shard
};

// What every tensor-parallel layer keeps: its group and options, and its
// module path for the call sites the flight recorder shows.
class TpLayer : public LayerWrapper {
 public:
  TpLayer(std::shared_ptr<Layer> inner, TpContext tp, std::string path)
      : LayerWrapper(std::move(inner)), tp_(tp), path_(std::move(path)) {}

 protected:
  TpContext tp_;
  std::string path_;
};

class ColwiseLinear : public TpLayer {
 public:
  using TpLayer::TpLayer;
  at::Tensor forward(const at::Tensor& input) override;
};

// A bias (whole on every rank) is added after the reduction; on a sequence
// shard its gradient covers this rank's rows only and is summed over tp.
class RowwiseLinear : public TpLayer {
 public:
  // Refuses a bias inside another plugin's wrapper: its forward would add
  // the bias before the reduction, once per rank.
  RowwiseLinear(std::shared_ptr<Layer> inner, TpContext tp, std::string path);
  at::Tensor forward(const at::Tensor& input) override;

 private:
  const Linear* biased_ = nullptr;  // the inner Linear when it has a bias
};

class VocabParallelEmbedding : public TpLayer {
 public:
  // The local weight holds rows [vocab_begin, vocab_begin + local rows).
  VocabParallelEmbedding(std::shared_ptr<Layer> inner, TpContext tp, std::string path, int64_t vocab_begin)
      : TpLayer(std::move(inner), tp, std::move(path)), vocab_begin_(vocab_begin) {}
  at::Tensor forward(const at::Tensor& tokens) override;

 private:
  int64_t vocab_begin_;
};

class ParallelNorm : public TpLayer {
 public:
  ParallelNorm(std::shared_ptr<Layer> inner, TpContext tp, std::string path);
  at::Tensor forward(const at::Tensor& input) override;
};

// A layer every rank runs whole (TorchTitan's NoParallel): the forward is
// the layer's own; each rank uses the output for its own heads, so its
// weight gradient covers those only and is summed over tp.
class NoParallelLayer : public TpLayer {
 public:
  NoParallelLayer(std::shared_ptr<Layer> inner, TpContext tp, std::string path);
  at::Tensor forward(const at::Tensor& input) override { return inner().forward(input); }
};

// Registers on each trainable parameter of `module` (not its children) a
// gradient hook that sums the gradient over tp: for weights every rank
// holds whole but uses on its own share of the work (sequence rows, heads,
// tokens). `path` names the call site.
void sum_gradients_over_tp(torch::nn::Module& module, Comm& tp, const std::string& path);
// The same for one parameter, named `name` at the call site.
void sum_gradient_over_tp(at::Tensor& parameter, Comm& tp, const std::string& name);

// Partial (or sharded) output rows -> what the residual stream holds: the
// whole sum (all-reduce), or this rank's sequence shard of it (SP). In
// tp_reduction.cpp, beside RowwiseLinear::forward.
at::Tensor reduce_partial_output(const at::Tensor& partial, const TpContext& tp);

// The weight of `layer` when it is a plain Linear without a bias (what the
// fused async matmuls take), else null.
const at::Tensor* linear_weight(const Layer& layer);
// The bias of `layer` when it is a Linear with one (found through its
// wrappers' inner layers), else null.
const at::Tensor* linear_bias(const Layer& layer);

}  // namespace titan::tensor_parallel
