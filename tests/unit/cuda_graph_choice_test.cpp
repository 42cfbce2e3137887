// training.cuda_graph's choice, without a GPU: auto captures a CUDA run's
// step wherever the run allows it and says why not where it does not;
// true refuses such a run with the reason; false and CPU runs never capture.
// The capture itself runs in tests/cuda/cuda_graph_step_test.cpp (GPU only).
#include "doctest_torch.hpp"

#include "test_support.hpp"
#include "titan/config.hpp"
#include "titan/error.hpp"
#include "train/cuda_graph_choice.hpp"

namespace {

using CudaGraph = titan::TrainingConfig::CudaGraph;
using titan::CudaGraphFacts;

CudaGraphFacts cuda_run() {
  CudaGraphFacts facts;
  facts.cuda = true;
  return facts;
}

}  // namespace

TEST_CASE("training.cuda_graph: auto captures a one-rank CUDA run and nothing on CPU; false never captures") {
  CHECK(titan::choose_cuda_graph(CudaGraph::automatic, cuda_run()).capture);
  CHECK(titan::choose_cuda_graph(CudaGraph::on, cuda_run()).capture);
  CHECK_FALSE(titan::choose_cuda_graph(CudaGraph::off, cuda_run()).capture);
  CHECK(titan::choose_cuda_graph(CudaGraph::off, cuda_run()).why_not.empty());
  const auto cpu = titan::choose_cuda_graph(CudaGraph::automatic, CudaGraphFacts{});
  CHECK_FALSE(cpu.capture);
  CHECK(cpu.why_not.empty());  // nothing to say where there is no GPU

  const auto config = titan::read_core_config(titan::ConfigNode::parse("training:\n  steps: 5\n", "ok.yaml"));
  CHECK((config.training.cuda_graph == CudaGraph::automatic));
  const auto off = titan::read_core_config(titan::ConfigNode::parse("training:\n  cuda_graph: false\n", "off.yaml"));
  CHECK((off.training.cuda_graph == CudaGraph::off));
}

TEST_CASE("training.cuda_graph: auto runs a pipeline, a multi-rank run, an MoE model, a device mesh of one rank and "
          "varying loss weights eagerly with the reason; true refuses them with it") {
  struct Refused {
    CudaGraphFacts facts;
    std::string reason;
  };
  std::vector<Refused> cases(5, {cuda_run(), ""});
  cases[0].facts.pipeline = true;
  cases[0].reason = "the pipeline's schedule runs from the host action by action";
  cases[1].facts.world_size = 4;
  cases[1].reason = "collectives across processes are not captured yet (world size 4; one rank only)";
  cases[2].facts.host_driven = "MoE routing sizes each expert's rows from token counts the host reads every step";
  cases[2].reason = cases[2].facts.host_driven;  // a model step hook's (add_moe_step_hook)
  cases[3].facts.collectives = true;
  cases[3].reason = "the parallelism plugins' collectives (a device mesh, even of one rank) are not captured yet";
  cases[4].facts.varying_loss_weights = true;
  cases[4].reason = "the loss weights change every step with the labels that carry loss "
                    "(training.ignore_cross_document_labels, training.packing with padding or training.chat_template), "
                    "and a graph would replay the captured ones";
  for (const auto& refused : cases) {
    INFO(refused.reason);
    const auto choice = titan::choose_cuda_graph(CudaGraph::automatic, refused.facts);
    CHECK_FALSE(choice.capture);
    CHECK(choice.why_not == refused.reason);
    std::string error;
    try {
      titan::choose_cuda_graph(CudaGraph::on, refused.facts);
    } catch (const titan::Error& e) {
      error = e.what();
    }
    CHECK(error == "training.cuda_graph: true, but this run's step cannot be captured: " + refused.reason +
                       "; set training.cuda_graph to auto (captures where it can) or false");
  }
}
