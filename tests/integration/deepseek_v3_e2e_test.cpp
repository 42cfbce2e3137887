// The deepseek_v3 debug model with expert parallelism against one process,
// as real Gloo jobs under `titan launch`: configs/deepseek_v3_debugmodel_fsdp_ep.yaml
// shrunk (dim 64; a dense block then a MoE block of 8 experts, top 3, 2
// shared; MLA with 4 heads of 16 + 8 rope over a 32-wide kv latent), 10
// fp32 steps, same seed and data. Losses, grad norms, every final parameter
// (experts gathered over efsdp and ep) and the expert bias agree within
// 1e-5 relative (the band of FSDP and DDP: the same sums in another order);
// the router's load (tokens per expert, integers summed over dp) is equal.
#include "equivalence_runs.hpp"

#include <map>
#include <string>
#include <vector>

namespace {

using titan::test::kDeepseekSmall;
using titan::test::RunOutput;

std::string config() { return titan::test::source_dir() + "/configs/deepseek_v3_debugmodel_fsdp_ep.yaml"; }

// step -> max / mean tokens per expert of the MoE block, as rank 0 logged it.
std::map<int, double> deepseek_imbalances(const std::filesystem::path& dump) {
  std::map<int, double> out;
  std::istringstream lines(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    const auto& value = record["moe/layers.1.moe.router/imbalance"];
    if (value.is_number()) out[record["step"].get<int>()] = value.get<double>();
  }
  return out;
}

RunOutput run_deepseek_reference(const std::string& name) {
  auto dump = titan::test::temp_dir(name);
  auto result = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " + config() +
                                         " --set 'plugins=[]' --set training.local_batch_size=8" +
                                         titan::test::common_sets(dump) + kDeepseekSmall);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return titan::test::read_run(dump);
}

RunOutput run_deepseek_ep(const std::string& name, int ranks, int port, const std::string& extra,
                 const std::vector<std::string>& logged = {"MoE layers split over ep=2"}) {
  return titan::test::launch_config(name, ranks, port, "deepseek_v3_debugmodel_fsdp_ep.yaml", kDeepseekSmall + extra, logged);
}

// `moved_bias`: a router's expert bias the run moved away from zero.
void check_deepseek_ep_equivalent(const RunOutput& ep, const RunOutput& reference,
                                  const std::string& moved_bias = "layers.1.moe.router.expert_bias") {
  REQUIRE(reference.params.contains(moved_bias));
  REQUIRE(reference.params.at("layers.1.moe.experts.w1").size(0) == 8);  // gathered whole, all 8 experts
  REQUIRE(reference.params.contains("layers.1.moe.shared_experts.w1.weight"));
  REQUIRE(reference.params.contains("layers.0.attention.wkv_b.weight"));
  // The bias moved from zero, so comparing it compares routing.
  CHECK(reference.params.at(moved_bias).norm().item<double>() > 0);
  titan::test::check_equivalent(ep, reference, 1e-5);
  const auto expected = deepseek_imbalances(reference.dump), logged = deepseek_imbalances(ep.dump);
  REQUIRE(expected.size() == 10);
  REQUIRE(logged.size() == expected.size());
  for (const auto& [step, value] : logged) CHECK_MESSAGE(value == expected.at(step), "step ", step);
}

}  // namespace

TEST_CASE("deepseek_v3 expert parallel: FSDP dp_shard 2 x ep 2 (2 ranks) and dp_shard 4 x ep 2 (4 ranks) reproduce "
          "one process within 1e-5, experts, shared experts and the expert bias included") {
  RunOutput reference = run_deepseek_reference("deepseek_v3_ep_reference");
  // efsdp = 1: each rank holds 4 whole experts.
  check_deepseek_ep_equivalent(run_deepseek_ep("deepseek_v3_ep_2", 2, 29561,
                             " --set plugins.fsdp.dp_shard=2 --set training.local_batch_size=4"),
                      reference);
  // The shipped layout: efsdp = 2, each rank's 4 experts also sharded over 2 FSDP ranks.
  check_deepseek_ep_equivalent(run_deepseek_ep("deepseek_v3_ep_4", 4, 29563, ""), reference);
}

TEST_CASE("deepseek_v3 tensor parallel: TP 2 (MLA heads split, the experts' and shared experts' width split) and "
          "FSDP 2 x TP 2 x ep 2 (4 ranks: each tp rank's tokens to the experts, the shared experts whole) reproduce "
          "one process within 1e-5") {
  RunOutput reference = run_deepseek_reference("deepseek_v3_tp_reference");
  check_deepseek_ep_equivalent(run_deepseek_ep("deepseek_v3_tp_2", 2, 29587,
                             " --set 'plugins=[{name: tensor_parallel, tensor_parallel_degree: 2}]'"
                             " --set training.local_batch_size=8",
                             {"width split over tp"}),
                      reference);
  check_deepseek_ep_equivalent(run_deepseek_ep("deepseek_v3_fsdp_tp_ep", 4, 29589,
                             " --set 'plugins=[{name: fsdp, dp_shard: 2}, {name: tensor_parallel, "
                             "tensor_parallel_degree: 2, enable_sequence_parallel: false}, {name: expert_parallel, "
                             "expert_parallel_degree: 2}]' --set training.local_batch_size=4",
                             {"MoE layers split over ep=2", "tokens split over tp"}),
                      reference);
  // Async TP would hand the kv latent's linear the norm's sequence shard.
  auto async = titan::test::run_command(
      "timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port 29591 "
      "--grace-period-s 5 -- " + titan::test::titan_binary() + " train " + config() +
      titan::test::common_sets(titan::test::temp_dir("deepseek_v3_tp_async")) + kDeepseekSmall +
      " --set 'plugins=[{name: tensor_parallel, tensor_parallel_degree: 2, enable_async_tensor_parallel: true}]'");
  CHECK(async.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(async.output, "runs the linear 'layers.0.attention.wkv_a' whole on every rank"),
                async.output);
}

TEST_CASE("deepseek_v3 multi-token prediction: 2 depths join the loss and train; FSDP 2 x ep 2 and pipeline 1F1B "
          "over 2 stages reproduce one process within 1e-5; context parallelism is refused by name") {
  const std::string mtp = " --set model.num_mtp_layers=2";
  RunOutput plain = run_deepseek_reference("deepseek_v3_mtp_plain");
  auto dump = titan::test::temp_dir("deepseek_v3_mtp_reference");
  auto result = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " + config() +
                                         " --set 'plugins=[]' --set training.local_batch_size=8" +
                                         titan::test::common_sets(dump) + kDeepseekSmall + mtp);
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  RunOutput reference = titan::test::read_run(dump);
  // The main blocks start from the same values (init by name): the first
  // loss is the main loss plus 0.3 x the depths' mean, about 1.3 x.
  REQUIRE(reference.losses.size() == 10);
  CHECK(reference.losses[0] > 1.2 * plain.losses[0]);
  CHECK(reference.losses.back() < reference.losses.front() - 0.05);
  // Both depths' blocks, eh_proj and norms trained.
  for (const char* name : {"mtp_layers.0.eh_proj.weight", "mtp_layers.1.moe.experts.w1", "mtp_layers.1.hnorm.weight"}) {
    REQUIRE_MESSAGE(reference.params.contains(name), name);
  }
  CHECK(reference.params.at("mtp_layers.1.hnorm.weight").sub(1).abs().max().item<double>() > 0);
  // (Layer 1's bias happens to be back at zero after step 10; depth 1's is not.)
  check_deepseek_ep_equivalent(
      run_deepseek_ep("deepseek_v3_mtp_ep", 2, 29593,
                      mtp + " --set plugins.fsdp.dp_shard=2 --set training.local_batch_size=4"),
      reference, "mtp_layers.0.moe.router.expert_bias");
  // Pipeline 1F1B over 2 stages (8 microbatches of 1): the MTP blocks on
  // the last stage with a copy of the embeddings and the token ids.
  RunOutput pp = titan::test::launch_config(
      "deepseek_v3_mtp_pp", 2, 29597, "deepseek_v3_debugmodel_fsdp_ep.yaml",
      kDeepseekSmall + mtp + " --set training.local_batch_size=8 --set 'plugins=[{name: pipeline, "
      "pipeline_parallel_degree: 2, pipeline_parallel_schedule: 1F1B, pipeline_parallel_microbatch_size: 1}]'",
      {"mtp_layers (and tok_embeddings, for the head)"});
  titan::test::check_equivalent(pp, reference, 1e-5);
  auto refused = titan::test::run_command(
      "timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port 29595 "
      "--grace-period-s 5 -- " + titan::test::titan_binary() + " train " + config() +
      titan::test::common_sets(titan::test::temp_dir("deepseek_v3_mtp_refused")) + kDeepseekSmall + mtp +
      " --set 'plugins=[{name: fsdp, dp_shard: 1}, {name: context_parallel, context_parallel_degree: 2}]'");
  CHECK(refused.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(refused.output, "multi-token prediction (model.num_mtp_layers) with context "
                                                 "parallelism"),
                refused.output);
}
