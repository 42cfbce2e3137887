#include "cuda_graph_choice.hpp"

#include "titan/error.hpp"

namespace titan {

namespace {

// The first thing of the run a replayed graph cannot hold ("" for none).
std::string uncapturable(const CudaGraphFacts& run) {
  if (run.pipeline) return "the pipeline's schedule runs from the host action by action";
  if (run.world_size > 1) {
    return "collectives across processes are not captured yet (world size " + std::to_string(run.world_size) +
           "; one rank only)";
  }
  if (run.collectives) {
    return "the parallelism plugins' collectives (a device mesh, even of one rank) are not captured yet";
  }
  if (!run.host_driven.empty()) return run.host_driven;
  if (run.varying_loss_weights) {
    return "the loss weights change every step with the labels that carry loss (training.ignore_cross_document_labels, "
           "training.packing with padding or training.chat_template), and a graph would replay the captured ones";
  }
  return "";
}

}  // namespace

CudaGraphChoice choose_cuda_graph(TrainingConfig::CudaGraph setting, const CudaGraphFacts& run) {
  using CudaGraph = TrainingConfig::CudaGraph;
  if (setting == CudaGraph::off || !run.cuda) return {};
  const std::string reason = uncapturable(run);
  if (reason.empty()) return {true, ""};
  if (setting == CudaGraph::on) {
    throw Error("training.cuda_graph: true, but this run's step cannot be captured: " + reason +
                "; set training.cuda_graph to auto (captures where it can) or false");
  }
  return {false, reason};
}

}  // namespace titan
