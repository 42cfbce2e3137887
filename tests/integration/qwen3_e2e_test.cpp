// The qwen3 MoE debug config trained by `titan train`: deterministic, its
// loss falls, the MoE loads reach metrics.jsonl, activation checkpointing
// changes no number, DDP on 2 ranks (the expert-bias counts summed over
// dp) reproduces one process, and a resumed run (expert biases in the
// checkpoint) continues the loss curve exactly.
#include "equivalence_runs.hpp"

namespace {

using titan::test::RunOutput;

// configs/qwen3_debugmodel_moe.yaml as it is, 10 steps of 8 x 64 tokens;
// a load-balance step large enough that the bias changes routing within them.
const double kCoeff = 0.01;
const std::string kMoE = " --set training.local_batch_size=8 --set model.load_balance_coeff=0.01";

RunOutput run_moe(const std::string& name, const std::string& extra, std::vector<nlohmann::json>* lines = nullptr) {
  auto dump = titan::test::temp_dir(name);
  auto result = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                         titan::test::source_dir() + "/configs/qwen3_debugmodel_moe.yaml" +
                                         titan::test::common_sets(dump) + kMoE + extra);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  if (lines) {
    std::istringstream text(titan::test::read_file(dump / "metrics.jsonl"));
    for (std::string line; std::getline(text, line);) lines->push_back(nlohmann::json::parse(line));
  }
  return titan::test::read_run(dump);
}

}  // namespace

TEST_CASE("qwen3 debugmodel_moe trains deterministically, its loss falls, and each router's load is logged") {
  std::vector<nlohmann::json> lines;
  RunOutput first = run_moe("qwen3_moe_a", "", &lines);
  RunOutput second = run_moe("qwen3_moe_b", "");
  REQUIRE(first.losses.size() == 10);
  for (size_t i = 0; i < first.losses.size(); ++i) CHECK(first.losses[i] == second.losses[i]);
  for (const auto& item : first.params) CHECK_MESSAGE(at::equal(second.params.at(item.key()), item.value()), item.key());
  CHECK(first.losses.back() < first.losses.front() - 0.05);
  REQUIRE(lines.size() == 10);
  for (const char* layer : {"layers.0", "layers.1"}) {
    CAPTURE(layer);
    const std::string prefix = std::string("moe/") + layer + ".moe.router/";
    // One update from zero on uneven counts gives a nonzero bias.
    CHECK(lines.front()[prefix + "expert_bias_norm"].get<double>() > 0);
    for (size_t step = 1; step <= lines.size(); ++step) {
      CAPTURE(step);
      const auto& line = lines[step - 1];
      double imbalance = line[prefix + "imbalance"].get<double>();
      CHECK(imbalance >= 1.0);
      CHECK(imbalance <= 4.0);  // each token picks 2 distinct experts of 8: at most 1/2 on one, 4x the mean
      // Each update moves every expert by at most 2 * coeff (the step and the centring).
      CHECK(line[prefix + "expert_bias_norm"].get<double>() <= step * 2 * kCoeff * std::sqrt(8.0) + 1e-6);
    }
  }
}

TEST_CASE("qwen3 MoE: full activation checkpointing trains bit for bit like none") {
  RunOutput reference = run_moe("qwen3_moe_ref", "");
  RunOutput ac = run_moe("qwen3_moe_ac", " --set 'plugins=[{name: activation_checkpoint, mode: full}]'");
  REQUIRE(ac.losses.size() == reference.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) CHECK(ac.losses[i] == reference.losses[i]);
}

TEST_CASE("qwen3 MoE: DDP on 2 ranks, expert-bias counts summed over dp, reproduces one process within 1e-5") {
  RunOutput reference = run_moe("qwen3_moe_single", "");
  auto dump = titan::test::temp_dir("qwen3_moe_ddp");
  auto result = titan::test::run_command(
      "timeout 300 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port 29863 "
      "--grace-period-s 5 -- " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
      "/configs/qwen3_debugmodel_moe.yaml --set 'plugins=[{name: ddp}]'" + titan::test::common_sets(dump) + kMoE +
      " --set training.local_batch_size=4");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // fp32, the gradient mean over 2 ranks in another order: the llama3 DDP band.
  titan::test::check_equivalent(titan::test::read_run(dump), reference, 1e-5);
}

TEST_CASE("qwen3 MoE: 6 straight steps equal 3 + resume + 3, bit for bit (expert biases are checkpointed)") {
  const std::string checkpoint = " --set training.steps=6 --set checkpoint.enable=true --set checkpoint.interval=3";
  RunOutput straight = run_moe("qwen3_moe_straight", checkpoint);
  auto dump = titan::test::temp_dir("qwen3_moe_resumed");
  const std::string command = "timeout 300 " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
                              "/configs/qwen3_debugmodel_moe.yaml" + titan::test::common_sets(dump) + kMoE + checkpoint;
  RunOutput resumed = titan::test::resumed_after_step_3(command, dump);
  REQUIRE(straight.losses.size() == 6);
  REQUIRE(resumed.losses.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK_MESSAGE(resumed.losses[i] == straight.losses[i + 3], "step ", i + 4);
}
