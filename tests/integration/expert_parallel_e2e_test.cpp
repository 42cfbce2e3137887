// Expert parallelism against the single-process reference, as real Gloo
// jobs under `titan launch`: qwen3 debugmodel_moe shrunk (2 MoE blocks of 8
// experts, top 2, dim 64), 10 fp32 steps, same seed and data, FSDP with the
// experts split over ep. Losses, grad norms, every final parameter (experts
// gathered over efsdp and ep) and every expert bias must agree within 1e-5
// relative, the band of FSDP and DDP: the same sums in another order. The
// routers' loads (tokens per expert, integers summed over dp) are equal.
#include "equivalence_runs.hpp"

#include <map>
#include <string>
#include <vector>
#include <utility>

namespace {

using titan::test::RunOutput;

// A load-balance step large enough that the expert bias changes routing.
const std::string kMoE = " --set model.load_balance_coeff=0.01";

// (step, router) -> max / mean tokens per expert, as rank 0 logged them
// (under PP merged from every stage).
std::map<std::pair<int, std::string>, double> imbalances(const std::filesystem::path& dump) {
  std::map<std::pair<int, std::string>, double> out;
  std::istringstream lines(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    for (const char* layer : {"layers.0", "layers.1"}) {
      const auto& value = record[std::string("moe/") + layer + ".moe.router/imbalance"];
      if (value.is_number()) out[{record["step"].get<int>(), layer}] = value.get<double>();
    }
  }
  return out;
}

// `name`: its own folder per test case, as ctest -j runs them side by side.
RunOutput run_reference(const std::string& name) {
  auto dump = titan::test::temp_dir(name);
  auto result = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                         titan::test::source_dir() + "/configs/qwen3_debugmodel_moe.yaml" +
                                         " --set training.local_batch_size=8" + titan::test::common_sets(dump) + kMoE);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return titan::test::read_run(dump);
}

// configs/qwen3_debugmodel_moe_ep.yaml (FSDP dp_shard 2 x ep 2) on `ranks`
// processes with `extra` settings; the global batch stays 8.
RunOutput run_ep(const std::string& name, int ranks, int port, const std::string& extra,
                 const std::vector<std::string>& logged = {"MoE layers split over ep=2"}) {
  return titan::test::launch_config(name, ranks, port, "qwen3_debugmodel_moe_ep.yaml", kMoE + extra, logged);
}

void check_ep_equivalent(const RunOutput& ep, const RunOutput& reference) {
  REQUIRE(reference.params.contains("layers.1.moe.router.expert_bias"));
  REQUIRE(reference.params.at("layers.0.moe.experts.w1").size(0) == 8);  // gathered whole, all 8 experts
  // The bias moved from zero, so comparing it compares routing.
  CHECK(reference.params.at("layers.0.moe.router.expert_bias").norm().item<double>() > 0);
  titan::test::check_equivalent(ep, reference, 1e-5);
  const auto expected = imbalances(reference.dump), logged = imbalances(ep.dump);
  REQUIRE(logged.size() == expected.size());  // every router, every step
  for (const auto& [key, value] : logged) CHECK_MESSAGE(value == expected.at(key), "step ", key.first, " ", key.second);
}

}  // namespace

TEST_CASE("expert parallel: FSDP dp_shard 2 x ep 2 (2 ranks) and dp_shard 4 x ep 2 (4 ranks) reproduce one process "
          "within 1e-5, experts and expert biases included") {
  RunOutput reference = run_reference("ep_reference_1");
  // The shipped config as it is: 4 experts per rank, efsdp = 1.
  check_ep_equivalent(run_ep("ep_2", 2, 29541, ""), reference);
  // efsdp = 2: each rank's 4 experts also sharded over 2 FSDP ranks.
  check_ep_equivalent(run_ep("ep_4", 4, 29543, " --set plugins.fsdp.dp_shard=4 --set training.local_batch_size=2"),
                      reference);
  // ep 4 on 4 ranks: 2 experts each, efsdp = 1.
  check_ep_equivalent(run_ep("ep_4x4", 4, 29567,
                             " --set plugins.fsdp.dp_shard=4 --set plugins.expert_parallel.expert_parallel_degree=4"
                             " --set training.local_batch_size=2",
                             {"MoE layers split over ep=4"}),
                      reference);
}

TEST_CASE("expert parallel: with fewer experts per rank than efsdp ranks (dp_shard 4 x ep 2, 2 experts) FSDP "
          "shards the experts on dim 1 and reproduces one process within 1e-5; its checkpoint loads bit for bit in "
          "one process") {
  const std::string two_experts = " --set model.num_experts=2 --set model.top_k=1";
  auto reference_dump = titan::test::temp_dir("ep_dim1_reference");
  auto single = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                         titan::test::source_dir() + "/configs/qwen3_debugmodel_moe.yaml" +
                                         titan::test::common_sets(reference_dump) + kMoE + two_experts);
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  RunOutput reference = titan::test::read_run(reference_dump);
  const std::string checkpoint = " --set checkpoint.enable=true --set checkpoint.interval=10";
  // efsdp = 4 / 2 = 2 ranks share each rank's one expert: w1 [1, 64, 64]
  // is split into [1, 32, 64] pieces.
  RunOutput sharded = run_ep("ep_dim1", 4, 29577,
                             " --set plugins.fsdp.dp_shard=4 --set training.local_batch_size=2" + two_experts +
                                 checkpoint,
                             {"MoE layers split over ep=2", "sharded on dim 1"});
  REQUIRE(reference.params.at("layers.0.moe.experts.w1").size(0) == 2);
  // A 2-expert softmax router's gate rows get mirrored gradients, small
  // differences of nearly equal terms that AdamW normalizes: summation
  // order shows there as 1.3e-5 to 1.8e-5 (measured; as much with ep 2 on
  // dim 0 and dp_shard 2), so the gates get 5e-5 and the rest 1e-5.
  RunOutput sharded_rest = sharded, reference_rest = reference;
  sharded_rest.params = sharded.params.copy();  // c10::Dict copies share their entries
  reference_rest.params = reference.params.copy();
  for (const char* gate : {"layers.0.moe.router.gate.weight", "layers.1.moe.router.gate.weight"}) {
    const at::Tensor& want = reference.params.at(gate);
    CHECK_MESSAGE((sharded.params.at(gate) - want).norm().item<double>() <= 5e-5 * want.norm().item<double>(), gate);
    CHECK(sharded_rest.params.erase(gate) == 1);
    CHECK(reference_rest.params.erase(gate) == 1);
  }
  titan::test::check_equivalent(sharded_rest, reference_rest, 1e-5);
  const auto expected = imbalances(reference.dump), logged = imbalances(sharded.dump);
  REQUIRE(logged.size() == expected.size());
  bool moved = false;  // routing is uneven at some step, so the bias moves
  for (const auto& [key, value] : expected) moved = moved || value > 1.0;
  CHECK(moved);
  for (const auto& [key, value] : logged) CHECK_MESSAGE(value == expected.at(key), "step ", key.first, " ", key.second);
  // The step-10 checkpoint, loaded by one process that trains no step.
  auto whole = titan::test::temp_dir("ep_dim1_whole");
  std::filesystem::create_directories(whole / "checkpoint");
  std::filesystem::copy(sharded.dump / "checkpoint" / "step-10", whole / "checkpoint" / "step-10",
                        std::filesystem::copy_options::recursive);
  auto loaded_run = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                             titan::test::source_dir() + "/configs/qwen3_debugmodel_moe.yaml" +
                                             titan::test::common_sets(whole) + kMoE + two_experts + checkpoint);
  INFO(loaded_run.output);
  REQUIRE(loaded_run.exit_code == 0);
  CHECK(titan::test::has(loaded_run.output, "resumed from checkpoint at step 10"));
  RunOutput loaded = titan::test::read_run(whole);
  REQUIRE(loaded.params.size() == sharded.params.size());
  for (const auto& item : sharded.params) CHECK_MESSAGE(at::equal(loaded.params.at(item.key()), item.value()), item.key());
}

TEST_CASE("expert parallel with float8 (emulated): FSDP 2 x ep 2 reproduces FSDP 2 in float8 within 1e-5; the dense "
          "linears compute in float8, the routed experts and the router stay high precision") {
  // The reference is FSDP 2 without EP, not one process: tensorwise scales
  // come from each rank's own activations, so float8 runs are comparable
  // only at the same per-rank batch.
  const std::string float8 = "{name: float8}";
  RunOutput reference = run_ep("ep_float8_reference", 2, 29585,
                               " --set 'plugins=[{name: fsdp}, {name: expert_parallel, expert_parallel_degree: 1}, " +
                                   float8 + "]'",
                               {"8 linear layers converted", "experts stay whole on every rank"});
  check_ep_equivalent(run_ep("ep_float8", 2, 29579,
                             " --set 'plugins=[{name: fsdp}, {name: expert_parallel, expert_parallel_degree: 2}, " +
                                 float8 + "]'",
                             {"MoE layers split over ep=2", "8 linear layers converted"}),
                      reference);
}

TEST_CASE("expert parallel: HSDP (2 replicas of dp_shard 2) x ep 2 with full activation checkpointing reproduces one "
          "process within 1e-5") {
  // Experts averaged over efsdp and the replicas; the all-to-alls run again
  // in the recompute.
  check_ep_equivalent(run_ep("ep_hsdp_ac", 4, 29545,
                             " --set 'plugins=[{name: fsdp, dp_shard: 2, dp_replicate: 2}, {name: expert_parallel, "
                             "expert_parallel_degree: 2}, {name: activation_checkpoint, mode: full}]'"
                             " --set training.local_batch_size=2"),
                      run_reference("ep_reference_2"));
}

TEST_CASE("expert parallel: with PP (1F1B pp 2 x FSDP 2 x ep 2, 4 ranks) and with CP (cp 2 x ep 2, 2 ranks) "
          "reproduces one process within 1e-5") {
  RunOutput reference = run_reference("ep_reference_3");
  // Each stage's one MoE block dispatches over the ep group of its stage,
  // per microbatch.
  check_ep_equivalent(run_ep("ep_pp", 4, 29551,
                             " --set 'plugins=[{name: fsdp, dp_shard: 2}, {name: expert_parallel, "
                             "expert_parallel_degree: 2}, {name: pipeline, pipeline_parallel_degree: 2, "
                             "pipeline_parallel_schedule: 1F1B, pipeline_parallel_microbatch_size: 2}]'"
                             " --set training.local_batch_size=4"),
                      reference);
  // ep spans the cp ranks: each holds half the sequence and half the experts.
  check_ep_equivalent(run_ep("ep_cp", 2, 29553,
                             " --set 'plugins=[{name: fsdp, dp_shard: 1}, {name: context_parallel, "
                             "context_parallel_degree: 2}, {name: expert_parallel, expert_parallel_degree: 2}]'"
                             " --set training.local_batch_size=8"),
                      reference);
}

TEST_CASE("expert parallel with tensor parallelism: FSDP 2 x TP 2 with ep 2 borrowing the tp ranks (4 ranks), "
          "TP 2 x ep 2 without sequence parallelism, and TP 2 splitting the experts' width (ep 1, async TP) "
          "reproduce one process within 1e-5") {
  RunOutput reference = run_reference("ep_reference_4");
  // Each tp rank routes its sequence shard of the tokens to the experts of
  // its ep group (= its tp group); the router scores every token.
  check_ep_equivalent(run_ep("ep_fsdp_tp", 4, 29581,
                             " --set 'plugins=[{name: fsdp, dp_shard: 2}, {name: tensor_parallel, "
                             "tensor_parallel_degree: 2}, {name: expert_parallel, expert_parallel_degree: 2}]'",
                             {"MoE layers split over ep=2", "tokens split over tp"}),
                      reference);
  // Without SP the MoE output shards are gathered whole again.
  check_ep_equivalent(run_ep("ep_tp_nosp", 2, 29583,
                             " --set 'plugins=[{name: tensor_parallel, tensor_parallel_degree: 2, "
                             "enable_sequence_parallel: false}, {name: expert_parallel, expert_parallel_degree: 2}]'"
                             " --set training.local_batch_size=8"),
                      reference);
  // ep 1: every rank holds every expert's w1/w3 rows and w2 columns of its
  // width slice; the partial outputs are reduce-scattered.
  check_ep_equivalent(titan::test::launch_config("tp_moe_width", 2, 29565, "qwen3_debugmodel_moe.yaml",
                                                  kMoE + " --set 'plugins=[{name: tensor_parallel, "
                                                         "tensor_parallel_degree: 2, enable_async_tensor_parallel: true}]'",
                                                  {"width split over tp"}),
                      reference);
}

TEST_CASE("expert parallel: a degree that does not divide the experts or dp_shard, or a model without MoE, is "
          "refused naming the key") {
  const std::string check = titan::test::titan_binary() + " config check " + titan::test::source_dir() +
                            "/configs/qwen3_debugmodel_moe_ep.yaml --world-size ";
  auto experts = titan::test::run_command(check + "2 --set model.num_experts=5");
  CHECK(experts.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(experts.output, "expert_parallel.expert_parallel_degree = 2 does not divide the 5 "
                                                 "routed experts of layers.0.moe"),
                experts.output);
  auto ranks = titan::test::run_command(check + "3 --set plugins.fsdp.dp_shard=3");
  CHECK(ranks.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(ranks.output, "expert_parallel.expert_parallel_degree = 2 does not divide "
                                               "data_parallel_shard_degree x context_parallel_degree x "
                                               "tensor_parallel_degree = 3 x 1 x 1 = 3"),
                ranks.output);
  auto dense = titan::test::run_command(check + "2 --set model.flavor=debugmodel --set model.num_experts=0 "
                                        "--set model.top_k=0 --set model.moe_hidden_dim=0");
  CHECK(dense.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(dense.output, "has no MoE layers"), dense.output);
}

TEST_CASE("expert parallel: an FSDP 4 x ep 4 checkpoint (2 experts a rank) loads bit for bit under ep 2, ep 1 and "
          "in one process") {
  const std::string checkpoint = " --set training.steps=3 --set checkpoint.enable=true --set checkpoint.interval=3";
  RunOutput saved = run_ep("ep4_saved", 4, 29569,
                           checkpoint + " --set plugins.fsdp.dp_shard=4 --set training.local_batch_size=2"
                                        " --set plugins.expert_parallel.expert_parallel_degree=4",
                           {"MoE layers split over ep=4"});
  REQUIRE(saved.params.contains("layers.1.moe.router.expert_bias"));
  // Each loader resumes at step 3 of 3: it loads, trains no step, and
  // writes the loaded parameters as its final model.
  struct Loader {
    std::string name;
    int ranks;
    std::string sets;
  };
  const std::vector<Loader> loaders = {
      {"ep4_as_ep2", 4, " --set plugins.fsdp.dp_shard=4 --set training.local_batch_size=2"},
      {"ep4_as_ep1", 2, " --set plugins.expert_parallel.expert_parallel_degree=1"},
      {"ep4_as_one", 1, " --set 'plugins=[]' --set training.local_batch_size=8"}};
  int port = 29571;
  for (const auto& loader : loaders) {
    auto dump = titan::test::temp_dir(loader.name);
    std::filesystem::create_directories(dump / "checkpoint");
    std::filesystem::copy(saved.dump / "checkpoint" / "step-3", dump / "checkpoint" / "step-3",
                          std::filesystem::copy_options::recursive);
    auto result = titan::test::run_command(
        "timeout 300 " + titan::test::titan_binary() + " launch --nproc-per-node " + std::to_string(loader.ranks) +
        " --master-port " + std::to_string(port) + " --grace-period-s 5 -- " + titan::test::titan_binary() +
        " train " + titan::test::source_dir() + "/configs/qwen3_debugmodel_moe_ep.yaml" +
        titan::test::common_sets(dump) + kMoE + checkpoint + loader.sets);
    port += 2;
    INFO(loader.name, "\n", result.output);
    REQUIRE(result.exit_code == 0);
    CHECK(titan::test::has(result.output, "resumed from checkpoint at step 3"));
    RunOutput loaded = titan::test::read_run(dump);
    CHECK(loaded.losses.empty());
    REQUIRE(loaded.params.size() == saved.params.size());
    for (const auto& item : saved.params) {
      CHECK_MESSAGE(at::equal(loaded.params.at(item.key()), item.value()), loader.name, " ", item.key());
    }
  }
}

TEST_CASE("expert parallel: the shipped qwen3 MoE configs pass config check at their world sizes") {
  for (const auto& [name, world] : std::vector<std::pair<std::string, int>>{{"qwen3_debugmodel_moe_ep.yaml", 2},
                                                                            {"qwen3_30b_a3b.yaml", 8}}) {
    auto ok = titan::test::run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() +
                                       "/configs/" + name + " --world-size " + std::to_string(world));
    CHECK_MESSAGE(ok.exit_code == 0, name, "\n", ok.output);
  }
  // 30B-A3B's 128 experts over ep 16 of 8 ranks cannot be.
  auto bad = titan::test::run_command(titan::test::titan_binary() + " config check " + titan::test::source_dir() +
                                      "/configs/qwen3_30b_a3b.yaml --world-size 8 --set "
                                      "'plugins=[{name: fsdp}, {name: expert_parallel, expert_parallel_degree: 16}]'");
  CHECK(bad.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(bad.output, "expert_parallel_degree = 16 does not divide"), bad.output);
}

TEST_CASE("expert parallel: 6 straight steps equal 3 + resume + 3 at the same degree, bit for bit (each rank's "
          "experts and the expert biases are checkpointed); the ep 2 checkpoint resumes in one process within 1e-5") {
  const std::string checkpoint = " --set training.steps=6 --set checkpoint.enable=true --set checkpoint.interval=3";
  RunOutput straight = run_ep("ep_straight", 2, 29547, checkpoint);
  auto dump = titan::test::temp_dir("ep_resumed");
  const std::string command =
      "timeout 300 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port 29549 "
      "--grace-period-s 5 -- " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
      "/configs/qwen3_debugmodel_moe_ep.yaml" + titan::test::common_sets(dump) + kMoE + checkpoint;
  RunOutput resumed = titan::test::resumed_after_step_3(command, dump);
  REQUIRE(straight.losses.size() == 6);
  REQUIRE(resumed.losses.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK_MESSAGE(resumed.losses[i] == straight.losses[i + 3], "step ", i + 4);
  for (const auto& item : straight.params) CHECK_MESSAGE(at::equal(resumed.params.at(item.key()), item.value()), item.key());

  // Resharding: the step-3 checkpoint of FSDP 2 x ep 2, each rank holding
  // 4 of the 8 experts, loaded by one process without FSDP or EP. Steps
  // 4-6 follow the ep run within 1e-5 (the same sums in another order).
  auto whole = titan::test::temp_dir("ep_resumed_whole");
  std::filesystem::create_directories(whole / "checkpoint");
  std::filesystem::copy(dump / "checkpoint" / "step-3", whole / "checkpoint" / "step-3",
                        std::filesystem::copy_options::recursive);
  auto single = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                         titan::test::source_dir() + "/configs/qwen3_debugmodel_moe.yaml" +
                                         titan::test::common_sets(whole) + kMoE + checkpoint +
                                         " --set training.local_batch_size=8");
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  CHECK(titan::test::has(single.output, "resumed from checkpoint at step 3"));
  RunOutput one = titan::test::read_run(whole);
  REQUIRE(one.losses.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK_MESSAGE(titan::test::relative(one.losses[i], straight.losses[i + 3]) <= 1e-5, "step ", i + 4);
    CHECK_MESSAGE(titan::test::relative(one.grad_norms[i], straight.grad_norms[i + 3]) <= 1e-5, "step ", i + 4);
  }
  REQUIRE(one.params.size() == straight.params.size());
  for (const auto& item : straight.params) {
    const at::Tensor& got = one.params.at(item.key());
    CHECK_MESSAGE((got - item.value()).norm().item<double>() <= 1e-5 * item.value().norm().item<double>() + 1e-12,
                  item.key());
  }
}
