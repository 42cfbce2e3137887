// training.cuda_graph on a GPU: a captured graph replays tensor work on new
// inputs exactly as eager runs it, and a run whose forward and backward are
// replayed from the graph after 2 eager steps (the default on CUDA,
// training.cuda_graph: auto) follows the eager run's
// losses, grad norms and final parameters (so the graph's gradients reach
// the optimizer every step). Without a GPU: skipped; the config refusal on
// CPU is in tests/unit/config_test.cpp.
#include "cuda_skip.hpp"

#include "../integration/equivalence_runs.hpp"
#include "titan/compat.hpp"

namespace {

TEST_CASE("cuda graph step: a captured graph replays on the inputs copied into its static tensors") {
  TITAN_REQUIRE_CUDA("to capture a CUDA graph");
  const at::Device device(at::kCUDA, 0);
  at::Tensor weight = at::randn({64, 64}, at::TensorOptions().device(device));
  at::Tensor input = at::zeros({8, 64}, weight.options());
  at::Tensor output;
  titan::compat::run_on_side_stream(device, [&] { output = at::relu(input.matmul(weight)).sum(1); });
  titan::compat::DeviceGraph graph(device);
  graph.capture([&] { output = at::relu(input.matmul(weight)).sum(1); });
  for (int i = 0; i < 3; ++i) {
    at::Tensor fresh = at::randn({8, 64}, weight.options());
    input.copy_(fresh);
    graph.replay();
    CHECK(at::allclose(output, at::relu(fresh.matmul(weight)).sum(1), 1e-5, 1e-5));
  }
}

TEST_CASE("cuda graph step: a CUDA run is replayed from a graph by default (training.cuda_graph: auto) and follows "
          "the eager run") {
  TITAN_REQUIRE_CUDA("to train with training.cuda_graph");
  const std::string gpu =
      " --set training.device=cuda --set training.cuda_graph_warmup_steps=2";
  titan::test::RunOutput eager = titan::test::run_single("cuda_graph_eager", gpu + " --set training.cuda_graph=false");
  auto dump = titan::test::temp_dir("cuda_graph_replayed");
  auto result = titan::test::run_command(
      "timeout 300 " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
      "/configs/llama3_debugmodel.yaml --set training.local_batch_size=8" + titan::test::common_sets(dump) + gpu);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("training.cuda_graph: captured") != std::string::npos);
  titan::test::RunOutput graphed = titan::test::read_run(dump);
  // Same kernels on the same data; what may differ is the order of
  // atomics in a few backward kernels.
  titan::test::check_equivalent(graphed, eager, 1e-4);
}

}  // namespace
