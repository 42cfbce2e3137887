// Float8 training end to end, emulated on CPU: every recipe trains the
// debug model (shrunk) close to the bf16 run; FSDP2 with float8 all-gather
// equals FSDP2 float8 without it while the flight recorder shows fewer
// bytes gathered, and precomputed scales cost one all-reduce per step; bad
// options end the run with the key named. The 200-step gap per recipe is
// measured by benchmarks/float8_loss_gap.sh (README of plugins/float8).
#include "equivalence_runs.hpp"

#include <nlohmann/json.hpp>

#include "conformance_report.hpp"

namespace {

using titan::test::read_run;
using titan::test::relative;
using titan::test::RunOutput;

const std::string kFloat8Model =
    " --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4 --set training.seq_len=32"
    " --set training.threads=1 --set lr_scheduler.warmup_steps=3 --set metrics.log_freq=1";

std::string sets(const std::filesystem::path& dump, int steps) {
  return kFloat8Model + " --set training.steps=" + std::to_string(steps) + " --set job.dump_folder=" + dump.string() +
         " --set debug.save_final_model=" + (dump / "final.pt").string();
}

// One process (FSDP over one rank, so bf16 mixed precision applies).
RunOutput run_one(const std::string& name, const std::string& plugins, int steps, const std::string& extra = "") {
  auto dump = titan::test::temp_dir(name);
  // A high learning rate so that 25 steps of the shrunk model learn visibly.
  auto result = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " train " +
                                         titan::test::source_dir() + "/configs/llama3_debugmodel.yaml" +
                                         " --set training.local_batch_size=4 --set optimizer.lr=1e-2" +
                                         " --set 'plugins=[" + plugins + "]'" +
                                         sets(dump, steps) + extra);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return read_run(dump);
}

struct FsdpRun {
  RunOutput run;
  nlohmann::json recorder;  // rank 0's flight recorder dump
};

FsdpRun run_fsdp(const std::string& name, int port, const std::string& float8_options, int steps) {
  auto dump = titan::test::temp_dir(name);
  auto result = titan::test::run_command(
      "timeout 300 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port " +
      std::to_string(port) + " --grace-period-s 5 -- " + titan::test::titan_binary() + " train " +
      titan::test::source_dir() + "/configs/llama3_debugmodel.yaml --set training.local_batch_size=2" +
      " --set 'plugins=[{name: fsdp}, {name: float8" + float8_options +
      "}, {name: flight_recorder, dump_on_exit: true, buffer_size: 5000}]'" + sets(dump, steps));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return {read_run(dump), nlohmann::json::parse(titan::test::read_file(dump / "flight_recorder/rank_0.json"))};
}

// Bytes of the blocks' FSDP all-gathers, and collectives whose call site contains `site`.
int64_t block_gather_bytes(const nlohmann::json& dump) {
  int64_t bytes = 0;
  for (const auto& entry : dump["entries"]) {
    std::string site = entry["call_site"], op = entry["op"];
    if (op.find("all_gather") != std::string::npos && site.find("fsdp all_gather layers.") != std::string::npos) {
      bytes += entry["bytes"].get<int64_t>();
    }
  }
  return bytes;
}

int count_sites(const nlohmann::json& dump, const std::string& site) {
  int count = 0;
  for (const auto& entry : dump["entries"]) {
    if (entry["call_site"].get<std::string>().find(site) != std::string::npos) ++count;
  }
  return count;
}

void check_same_training(const RunOutput& a, const RunOutput& b, double tolerance) {
  REQUIRE(a.losses.size() == b.losses.size());
  double worst = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    worst = std::max(worst, relative(a.losses[i], b.losses[i]));
    worst = std::max(worst, relative(a.grad_norms[i], b.grad_norms[i]));
  }
  for (const auto& item : b.params) {
    at::Tensor mine = a.params.at(item.key()).to(at::kDouble), theirs = item.value().to(at::kDouble);
    worst = std::max(worst, (mine - theirs).abs().max().item<double>() / std::max(theirs.abs().max().item<double>(), 1e-12));
  }
  MESSAGE("max relative difference (losses, grad norms, parameters): " << worst);
  CHECK(worst <= tolerance);
}

}  // namespace

TEST_CASE("float8 (emulated): every recipe trains the debug model within 3% of the bf16 run (25 steps)") {
  const int steps = 25;
  RunOutput bf16 = run_one("float8_bf16", "{name: fsdp}", steps, " --set training.mixed_precision_param=bfloat16");
  RunOutput fp32 = run_one("float8_fp32", "{name: fsdp}", steps);
  REQUIRE(bf16.losses.size() == steps);
  CHECK(bf16.losses.back() < bf16.losses.front());
  for (const std::string recipe : {"tensorwise", "rowwise", "rowwise_with_gw_hp"}) {
    RunOutput f8 = run_one("float8_" + recipe,
                           std::string("{name: fsdp}, {name: float8, param_dtype: bfloat16, recipe_name: ") + recipe + "}",
                           steps);
    REQUIRE(f8.losses.size() == steps);
    double gap = relative(f8.losses.back(), bf16.losses.back());
    MESSAGE(recipe << ": final loss " << f8.losses.back() << " vs bf16 " << bf16.losses.back() << " (gap "
                   << gap * 100 << "%), fp32 " << fp32.losses.back());
    CHECK(gap <= 0.03);
    CHECK(f8.losses.back() < f8.losses.front() - 1.0);  // it learns
    // Float8 really ran: its curve is not bf16's.
    CHECK(f8.losses[steps / 2] != bf16.losses[steps / 2]);
  }
}

TEST_CASE("float8 experts (emulated, rowwise): a small qwen3 MoE with only its experts in float8 trains within 3% of "
          "the bf16 run (25 steps), and as one grouped GEMM per product exactly as the loop") {
  const int steps = 25;
  const std::string moe =
      " --set model.name=qwen3 --set model.flavor=debugmodel_moe --set model.n_kv_heads=2 --set model.head_dim=16"
      " --set model.num_experts=4 --set model.top_k=2 --set model.moe_hidden_dim=32";
  RunOutput bf16 = run_one("float8_experts_bf16", "{name: fsdp}", steps, moe + " --set training.mixed_precision_param=bfloat16");
  auto dump = titan::test::temp_dir("float8_experts");
  const std::string float8_experts =
      "timeout 300 " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
      "/configs/llama3_debugmodel.yaml --set training.local_batch_size=4 --set optimizer.lr=1e-2 --set 'plugins=["
      "{name: fsdp}, {name: float8, param_dtype: bfloat16, recipe_name: rowwise, filter_fqns: [layers, output], "
      "moe_fqns_prototype: [experts]}]'" + moe;
  auto result = titan::test::run_command(float8_experts + sets(dump, steps));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(titan::test::has(result.output, "0 linear layers and the experts of 2 MoE layers converted"));
  CHECK(titan::test::has(result.output, "the experts multiply in the exact emulation where experts_backend is "
                                        "grouped_mm"));
  RunOutput f8 = read_run(dump);
  REQUIRE(f8.losses.size() == steps);
  const double gap = relative(f8.losses.back(), bf16.losses.back());
  MESSAGE("float8 experts: final loss " << f8.losses.back() << " vs bf16 " << bf16.losses.back() << " (gap "
                                        << gap * 100 << "%)");
  CHECK(gap <= 0.03);
  CHECK(f8.losses.back() < f8.losses.front() - 1.0);  // it learns
  CHECK(f8.losses[steps / 2] != bf16.losses[steps / 2]);  // the experts really ran in float8

  // The experts as one grouped GEMM per product (the plugin's grouped seam:
  // `_scaled_grouped_mm` on an H100, its emulation here) train as the loop.
  auto grouped_dump = titan::test::temp_dir("float8_experts_grouped");
  auto grouped = titan::test::run_command(float8_experts + " --set model.experts_backend=grouped_mm" +
                                          sets(grouped_dump, steps));
  INFO(grouped.output);
  REQUIRE(grouped.exit_code == 0);
  RunOutput one_call = read_run(grouped_dump);
  REQUIRE(one_call.losses.size() == steps);
  for (int i = 0; i < steps; ++i) CHECK(relative(one_call.losses[i], f8.losses[i]) <= 1e-6);

  // Only rowwise, and only where the list finds MoE layers.
  auto refused = titan::test::run_command(
      "timeout 120 " + titan::test::titan_binary() + " config check " + titan::test::source_dir() +
      "/configs/llama3_debugmodel.yaml --set 'plugins=[{name: float8, moe_fqns_prototype: [experts]}]'");
  CHECK(refused.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(refused.output, "float8 experts take recipe_name: rowwise only"), refused.output);
  auto dense = titan::test::run_command(
      "timeout 120 " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
      "/configs/llama3_debugmodel.yaml --set training.steps=1 --set 'plugins=[{name: float8, recipe_name: rowwise, "
      "moe_fqns_prototype: [experts]}]'");
  CHECK(dense.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(dense.output, "matched no MoE layer's experts"), dense.output);
}

TEST_CASE("float8 + FSDP2 on 2 ranks: the float8 all-gather trains exactly like gathering float32 and moves about a "
          "quarter of the bytes; precomputed scales take one all-reduce per step") {
  const int steps = 4;
  FsdpRun plain = run_fsdp("float8_fsdp_plain", 29960, "", steps);
  FsdpRun gathered = run_fsdp("float8_fsdp_gather", 29961, ", enable_fsdp_float8_all_gather: true", steps);
  FsdpRun precomputed = run_fsdp("float8_fsdp_precompute", 29962,
                                 ", enable_fsdp_float8_all_gather: true, precompute_float8_dynamic_scale_for_fsdp: true",
                                 steps);
  check_same_training(gathered.run, plain.run, 1e-6);
  check_same_training(precomputed.run, plain.run, 1e-6);
  const int64_t float32_bytes = block_gather_bytes(plain.recorder), float8_bytes = block_gather_bytes(gathered.recorder);
  REQUIRE(float32_bytes > 0);
  const double ratio = static_cast<double>(float8_bytes) / static_cast<double>(float32_bytes);
  MESSAGE("blocks' all-gather bytes per rank: float32 " << float32_bytes << ", float8 " << float8_bytes << " (ratio "
                                                        << ratio << ")");
  // Linear weights as 1-byte codes, the two norms still float32.
  CHECK(ratio < 0.3);
  CHECK(ratio > 0.25);
  CHECK(block_gather_bytes(precomputed.recorder) == float8_bytes);
  // Without precompute: one amax all-reduce per weight per gather; with it, one per step.
  CHECK(count_sites(plain.recorder, "float8") == 0);
  CHECK(count_sites(gathered.recorder, "float8 amax layers.0.attention.wq") >= steps);
  CHECK(count_sites(precomputed.recorder, "float8 amax") == 0);
  CHECK(count_sites(precomputed.recorder, "float8 precompute scales") == steps);
}

TEST_CASE("float8: unknown options and recipes end the run with the key, the value and what works") {
  auto check = [](const std::string& set, const std::string& expected) {
    auto result = titan::test::run_command("timeout 60 " + titan::test::titan_binary() + " config check " +
                                           titan::test::source_dir() + "/configs/llama3_debugmodel_float8.yaml" + set);
    INFO(result.output);
    CHECK(result.exit_code != 0);
    CHECK(result.output.find(expected) != std::string::npos);
  };
  check(" --set plugins.float8.recipe=rowwise", "plugins[0].recipe: unknown key (known here: auto_filter_small_kn");
  check(" --set plugins.float8.recipe_name=blockwise",
        "recipe_name: expected one of {tensorwise, rowwise, rowwise_with_gw_hp}, got \"blockwise\"");
  check(" --set plugins.float8.recipe_name=rowwise --set plugins.float8.enable_fsdp_float8_all_gather=true",
        "enable_fsdp_float8_all_gather: works with recipe_name: tensorwise only");
}

TEST_CASE("titan-conformance: float8 passes the precision checks for every recipe; one that applies its scale twice "
          "fails precision.loss by name") {
  namespace conformance = titan::test::conformance;
  conformance::check_all_pass(conformance::conformance_json(conformance::plugin_dir() / "libtitan_plugin_float8.so"),
                              {"precision.dtypes", "precision.loss", "precision.loss:rowwise",
                               "precision.loss:rowwise_with_gw_hp"});
  conformance::Report twice = conformance::conformance_json(conformance::test_plugin("double_scaled_float8"));
  INFO(twice.output);
  CHECK(twice.exit_code == 1);
  CHECK(twice.output.find("conformance check failed: precision.loss ") != std::string::npos);
  for (const char* name : {"precision.loss", "precision.loss:rowwise", "precision.loss:rowwise_with_gw_hp"}) {
    CHECK_MESSAGE(twice.results[name] == "fail", name);
  }
  CHECK(twice.results["precision.dtypes"] == "pass");
}
