// titan-conformance on real plugins: the project's adamw passes, plugins
// with a sign error or a non-elementwise update fail naming the check, bad input is a clear error, and
// --json is machine-readable.
#include "doctest_torch.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "conformance_report.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using titan::test::conformance::plugin_dir;
using titan::test::conformance::conformance_json;
using titan::test::conformance::run_conformance;
using titan::test::conformance::test_plugin;

TEST_CASE("titan-conformance: adamw matches its declared float64 AdamW reference and passes every check") {
  auto result = run_conformance("--plugin " + (plugin_dir() / "libtitan_plugin_adamw.so").string());
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("optimizer.reference_step                 PASS") != std::string::npos);
  CHECK(result.output.find("FAIL") == std::string::npos);
}

TEST_CASE("titan-conformance: an optimizer with a sign error fails the reference check by name") {
  auto result = run_conformance("--plugin " + std::string(titan::test::paths::test_plugin_dir) +
                            "/libtitan_plugin_sign_error_sgd.so --json");
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("conformance check failed: optimizer.reference_step") != std::string::npos);
  auto json = nlohmann::json::parse(result.output.substr(0, result.output.find("conformance check failed")));
  CHECK(json["passed"] == false);
  for (const auto& check : json["checks"]) {
    if (check["name"] == "optimizer.reference_step") {
      CHECK(check["result"] == "fail");
      CHECK(check["measured"].get<double>() > 0.1);
    }
  }
}

TEST_CASE("titan-conformance: an optimizer whose update depends on its whole tensor fails sharded_like_whole, "
          "an elementwise one passes it") {
  auto normalized = conformance_json(test_plugin("normalized_sgd"));
  INFO(normalized.output);
  CHECK(normalized.exit_code == 1);
  CHECK(normalized.results["optimizer.sharded_like_whole"] == "fail");
  CHECK(normalized.output.find("conformance check failed: optimizer.sharded_like_whole") != std::string::npos);
  CHECK(normalized.results["optimizer.state_like_params"] == "pass");
  // The sign error is wrong but elementwise: sharding does not change it.
  auto sign_error = conformance_json(test_plugin("sign_error_sgd"));
  INFO(sign_error.output);
  CHECK(sign_error.results["optimizer.reference_step"] == "fail");
  CHECK(sign_error.results["optimizer.sharded_like_whole"] == "pass");
  // A rule declared non-elementwise is skipped, never passed.
  fs::path dir = titan::test::temp_dir("conformance_not_elementwise");
  titan::test::write_file(dir / "declared.yaml", "optimizer:\n  rule: sgd\n  elementwise: false\n"
                                                 "  options: {lr: 0.1, momentum: 0.0, weight_decay: 0.0}\n");
  auto declared = conformance_json(test_plugin("normalized_sgd"), "--declare " + (dir / "declared.yaml").string());
  INFO(declared.output);
  CHECK(declared.results["optimizer.sharded_like_whole"] == "skip");
}

TEST_CASE("titan-conformance: a declaration naming an unknown rule or a missing file is an error naming it") {
  fs::path dir = titan::test::temp_dir("conformance_bad");
  titan::test::write_file(dir / "bad.yaml", "optimizer:\n  rule: adam\n  options: {lr: 0.1}\n");
  auto bad_rule = run_conformance("--plugin " + (plugin_dir() / "libtitan_plugin_adamw.so").string() + " --declare " +
                              (dir / "bad.yaml").string());
  INFO(bad_rule.output);
  CHECK(bad_rule.exit_code == 2);
  CHECK(bad_rule.output.find("optimizer.rule") != std::string::npos);
  auto missing = run_conformance("--plugin " + (plugin_dir() / "libtitan_plugin_adamw.so").string() + " --declare " +
                             (dir / "absent.yaml").string());
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("absent.yaml") != std::string::npos);
}

// Issue 7: the proof the harness works is that every plugin the project
// builds passes it, on 1, 2 and 4 Gloo ranks where the kind is multi-rank.
// In three groups of about 15 s each, so that ctest -j2 runs them beside
// other tests instead of one long tail; the last test keeps the groups
// complete. The plugins whose own tests run exactly this check, with more
// asserted, are not run twice.
namespace {

const std::vector<std::vector<std::string>>& plugin_groups() {
  static const std::vector<std::vector<std::string>> groups = {
      {"fsdp", "context_parallel", "activation_checkpoint", "adamw", "muon", "float8", "flight_recorder"},
      {"tensor_parallel", "ddp", "fused_kernels", "llama3", "qwen3", "deepseek_v3", "lr_schedules"},
      {"loss_parallel", "tensorboard", "expert_parallel", "gpt_oss"},
  };
  return groups;
}

// Plugin -> the test that runs its conformance checks on 1, 2 and 4 ranks
// (its kind's ranks) and asserts every check by name.
const std::map<std::string, std::string>& checked_by_own_test() {
  static const std::map<std::string, std::string> tests = {
      {"dcp", "titan-conformance: dcp loads bit for bit on 1/2/4 ranks, ... (conformance_checkpointer_test.cpp)"},
      {"pp_schedules", "titan-conformance: the built-in pipeline schedules pass, ... (pipeline_e2e_test.cpp)"},
      {"pipeline", "titan-conformance: the pipeline split passes its split checks on 1 2 and 4 stages, ... "
                   "(pipeline_e2e_test.cpp)"},
  };
  return tests;
}

void check_plugins_pass(const std::vector<std::string>& names) {
  for (const auto& name : names) {
    fs::path file = plugin_dir() / ("libtitan_plugin_" + name + ".so");
    REQUIRE_MESSAGE(fs::exists(file), file.string());
    auto result = run_conformance("--plugin " + file.string() + " --ranks 1,2,4 --json");
    INFO(name, "\n", result.output);
    CHECK(result.exit_code == 0);
    auto json = nlohmann::json::parse(result.output.substr(0, result.output.rfind('}') + 1));
    CHECK(json["passed"] == true);
    int checked = 0;
    for (const auto& check : json["checks"]) {
      if (check["result"] == "pass") ++checked;
      // A kind without checks would be skipped wholesale; every project kind has some.
      CHECK_MESSAGE(check["detail"] != "no conformance checks for this kind yet", check["name"]);
    }
    CHECK(checked >= 2);
  }
}

}  // namespace

TEST_CASE("titan-conformance: every plugin the project builds passes its declared checks on 1 2 and 4 ranks - part 1") {
  check_plugins_pass(plugin_groups()[0]);
}

TEST_CASE("titan-conformance: every plugin the project builds passes its declared checks on 1 2 and 4 ranks - part 2") {
  check_plugins_pass(plugin_groups()[1]);
}

TEST_CASE("titan-conformance: every plugin the project builds passes its declared checks on 1 2 and 4 ranks - part 3") {
  check_plugins_pass(plugin_groups()[2]);
}

TEST_CASE("titan-conformance: the three parts and the plugins' own tests name every plugin the project builds, "
          "each once") {
  std::vector<std::string> listed;
  for (const auto& group : plugin_groups()) listed.insert(listed.end(), group.begin(), group.end());
  for (const auto& [plugin, test] : checked_by_own_test()) listed.push_back(plugin);
  std::sort(listed.begin(), listed.end());
  CHECK(std::adjacent_find(listed.begin(), listed.end()) == listed.end());
  std::vector<std::string> built;
  for (const auto& entry : fs::directory_iterator(plugin_dir())) {
    std::string file = entry.path().filename().string();
    if (entry.path().extension() != ".so" || file.rfind("libtitan_plugin_", 0) != 0) continue;
    built.push_back(file.substr(16, file.size() - 16 - 3));
  }
  std::sort(built.begin(), built.end());
  CHECK(built.size() >= 10);
  CHECK(listed == built);  // a new plugin joins one of the parts
}

TEST_CASE("titan-conformance: an fsdp that leaves one gradient unreduced fails the parallelizer checks by name") {
  auto result = run_conformance("--plugin " + std::string(titan::test::paths::test_plugin_dir) +
                            "/libtitan_plugin_unreduced_fsdp.so --ranks 1,2 --json");
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("conformance check failed: parallelizer.params@2") != std::string::npos);
  auto json = nlohmann::json::parse(result.output.substr(0, result.output.find("conformance check failed")));
  for (const auto& check : json["checks"]) {
    std::string name = check["name"];
    // One rank has nothing to reduce: the bug shows only with two.
    if (name.find("@1") != std::string::npos) CHECK_MESSAGE(check["result"] != "fail", name);
    if (name == "parallelizer.params@2" || name == "parallelizer.grad_norm@2") {
      CHECK_MESSAGE(check["result"] == "fail", name);
      CHECK(check["measured"].get<double>() > 10 * check["limit"].get<double>());
    }
    if (name == "parallelizer.sharding@2") CHECK(check["result"] == "pass");  // the layout is right; the values are not
  }
}

TEST_CASE("titan-conformance: an fsdp that rounds its norms' gradients to fp16 fails parallelizer.param_grads only") {
  auto report = conformance_json(test_plugin("rounded_norms_fsdp"), "--ranks 2");
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.output.find("conformance check failed: parallelizer.param_grads@2") != std::string::npos);
  // The loss, the global norm and the parameters stay within their
  // tolerances: the error sits in small parameters.
  for (const auto& [name, result] : report.results) {
    bool per_parameter = name.rfind("parallelizer.param_grads@", 0) == 0;
    if (result != "skip") CHECK_MESSAGE(result == (per_parameter ? "fail" : "pass"), name);
  }
  CHECK(report.results["parallelizer.param_grads@2"] == "fail");
}

TEST_CASE("titan-conformance: an fsdp that stages the whole model before sharding fails parallelizer.memory only") {
  auto report = conformance_json(test_plugin("whole_model_fsdp"), "--ranks 2");
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.output.find("conformance check failed: parallelizer.memory@2") != std::string::npos);
  for (const auto& [name, result] : report.results) {
    bool memory = name.rfind("parallelizer.memory@", 0) == 0;
    if (result != "skip") CHECK_MESSAGE(result == (memory ? "fail" : "pass"), name);  // training stays exact
  }
  CHECK(report.results["parallelizer.memory@2"] == "fail");
}

TEST_CASE("titan-conformance: a tensor_parallel whose rowwise layers skip their reduction fails the parallelizer "
          "checks by name") {
  auto report = conformance_json(test_plugin("unreduced_tp"), "--ranks 2");
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.output.find("conformance check failed: parallelizer.loss@2") != std::string::npos);
  for (const char* name : {"parallelizer.loss@2", "parallelizer.grad_norm@2", "parallelizer.params@2"}) {
    CHECK_MESSAGE(report.results[name] == "fail", name);
  }
  // Its layouts and memory are right; only the numbers are wrong.
  CHECK(report.results["parallelizer.sharding@2"] == "pass");
  CHECK(report.results["parallelizer.memory@2"] == "pass");
}

TEST_CASE("titan-conformance: an activation checkpointing that keeps every activation fails activation_memory only") {
  auto report = conformance_json(test_plugin("keeping_ac"), "--ranks 1");
  INFO(report.output);
  CHECK(report.exit_code == 1);
  for (const auto& [name, result] : report.results) {
    bool memory = name.rfind("parallelizer.activation_memory@", 0) == 0;
    if (result != "skip") CHECK_MESSAGE(result == (memory ? "fail" : "pass"), name);  // training stays exact
  }
  CHECK(report.results["parallelizer.activation_memory@1"] == "fail");
}

TEST_CASE("titan-conformance: on a model with dropout, activation checkpointing that replays the generator passes and "
          "one that recomputes with a fresh generator fails by name") {
  // The mutant's declaration (tests/harness_plugins/ac_rng.conformance.yaml), copied beside it by the build.
  const std::string declaration =
      (test_plugin("fresh_rng_ac").parent_path() / "libtitan_plugin_fresh_rng_ac.conformance.yaml").string();
  const std::string path = "TITAN_PLUGIN_PATH=" + test_plugin("fresh_rng_ac").parent_path().string() + " ";
  auto run = [&](const std::filesystem::path& plugin) {
    namespace conformance = titan::test::conformance;
    return titan::test::run_command(conformance::with_scratch_in_test_tmp(
        path + (conformance::build_bin() / "titan-conformance").string() +
                                                " --ranks 1 --plugin " + plugin.string() + " --declare " + declaration));
  };
  auto replaying = run(plugin_dir() / "libtitan_plugin_activation_checkpoint.so");
  INFO(replaying.output);
  CHECK(replaying.exit_code == 0);
  auto fresh = run(test_plugin("fresh_rng_ac"));
  INFO(fresh.output);
  CHECK(fresh.exit_code == 1);
  // The forward (so the loss) is the original one; the gradients come from the wrong recompute.
  CHECK(fresh.output.find("conformance check failed: parallelizer.grad_norm@1") != std::string::npos);
  CHECK(fresh.output.find("conformance check failed: parallelizer.params@1") != std::string::npos);
  CHECK(fresh.output.find("conformance check failed: parallelizer.loss@1") == std::string::npos);
  CHECK(fresh.output.find("conformance check failed: parallelizer.activation_memory@1") == std::string::npos);
}

TEST_CASE("titan-conformance: --ranks must be a list of world sizes") {
  auto result = run_conformance("--plugin " + (plugin_dir() / "libtitan_plugin_fsdp.so").string() + " --ranks 1,two");
  INFO(result.output);
  CHECK(result.exit_code == 2);
  CHECK(result.output.find("--ranks") != std::string::npos);
}

TEST_CASE("titan-conformance: a plugin of two kinds (metrics sink and parallelizer) runs both kinds' checks") {
  fs::path dir = titan::test::temp_dir("conformance_echo");
  titan::test::write_file(dir / "echo.yaml", "metrics_sink:\n  options: {path: " + (dir / "echo.txt").string() +
                                                 "}\nparallelizer:\n  shards_over: []\n  world_sizes: [1]\n");
  auto result = run_conformance("--plugin " + std::string(titan::test::paths::test_plugin_dir) +
                            "/libtitan_plugin_echo.so --declare " + (dir / "echo.yaml").string());
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("metrics_sink.accepts_steps               PASS") != std::string::npos);
  CHECK(result.output.find("parallelizer.params@1                    PASS") != std::string::npos);
  CHECK(result.output.find("parallelizer.run@2                       SKIP") != std::string::npos);
  // The sink really received every step's metrics: 400 training steps x 9
  // keys and 100 validation lines x 2.
  std::ifstream echoed(dir / "echo.txt");
  int lines = 0;
  for (std::string line; std::getline(echoed, line);) ++lines;
  CHECK(lines == 400 * 9 + 100 * 2);
}

// One deliberately wrong plugin per remaining kind: each fails the check
// written for its bug, and only that check.
TEST_CASE("titan-conformance: a model initialized from the global generator fails the init checks by name") {
  auto report = conformance_json(test_plugin("global_rng_model"));
  INFO(report.output);
  CHECK(report.exit_code == 1);
  for (const auto& [name, result] : report.results) {
    bool expected_to_fail = name == "model.init_deterministic" || name == "model.init_order_independent";
    CHECK_MESSAGE(result == (expected_to_fail ? "fail" : "pass"), name);
  }
  CHECK(report.results.size() == 9);
}

TEST_CASE("titan-conformance: a comm observer that keeps every event fails bounded_memory by name") {
  auto report = conformance_json(test_plugin("unbounded_observer"));
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.results["comm_observer.bounded_memory"] == "fail");
  CHECK(report.results["comm_observer.results_unchanged"] == "pass");
}

TEST_CASE("titan-conformance: a metrics sink that throws on a NaN loss fails accepts_steps by name") {
  auto report = conformance_json(test_plugin("nan_intolerant_sink"));
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.results["metrics_sink.accepts_steps"] == "fail");
  CHECK(report.output.find("loss is not finite at step 7") != std::string::npos);
  CHECK(report.results["metrics_sink.write_cost"] == "pass");
}

TEST_CASE("titan-conformance: a plugin that throws while its checks run fails its kind by name (exit 1)") {
  // throwing_factory throws from every factory: not bad input, a broken plugin.
  fs::path dir = titan::test::temp_dir("conformance_throwing");
  titan::test::write_file(dir / "throwing.yaml", "metrics_sink: {}\n");
  auto report = conformance_json(test_plugin("throwing_factory"),
                                                           "--declare " + (dir / "throwing.yaml").string());
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.output.find("the checks stopped on an exception") != std::string::npos);
}

TEST_CASE("titan-conformance: a context_parallel whose causal mask ignores where each chunk sits fails the "
          "parallelizer checks by name") {
  auto report = conformance_json(test_plugin("local_mask_cp"), "--ranks 2");
  INFO(report.output);
  CHECK(report.exit_code == 1);
  for (const char* name : {"parallelizer.loss@2", "parallelizer.grad_norm@2", "parallelizer.params@2",
                           "parallelizer.loss@2:alltoall"}) {
    CHECK_MESSAGE(report.results[name] == "fail", name);
  }
  // Ulysses attends with the model's own mask: the mutant's variant passes.
  CHECK(report.results["parallelizer.loss@2:ulysses"] == "pass");
  CHECK(report.results["parallelizer.sharding@2"] == "pass");
}

// Expert parallelism's two mutants (tests/harness_plugins): a dispatcher bug
// the loss sees at once, and a load-balancing bug only the expert biases
// show.
TEST_CASE("titan-conformance: an expert_parallel that feeds the experts its arrived rows unregrouped fails the "
          "parallelizer checks by name") {
  auto result = run_conformance("--json --ranks 2 --plugin " + test_plugin("unpermuted_ep").string());
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("conformance check failed: parallelizer.params@2") != std::string::npos);
  auto json = nlohmann::json::parse(result.output.substr(0, result.output.find("\nconformance check failed")));
  std::map<std::string, std::string> results;
  for (const auto& check : json["checks"]) {
    const std::string name = check["name"];
    results[name] = check["result"];
    // The wrong experts' gradients move their weights (lr 1 in the declaration).
    if (name == "parallelizer.params@2") CHECK(check["measured"].get<double>() > 10 * check["limit"].get<double>());
  }
  CHECK(results["parallelizer.params@2"] == "fail");
  CHECK(results["parallelizer.loss@2"] == "fail");
  // Every row reaches an expert of the right rank and comes back to its
  // place: the layouts, the gradients' shapes and the memory are right.
  for (const char* name : {"parallelizer.sharding@2", "parallelizer.gradients@2", "parallelizer.memory@2",
                           "parallelizer.replicas_agree@2", "parallelizer.expert_bias@2"}) {
    CHECK_MESSAGE(results[name] == "pass", name);
  }
}

TEST_CASE("titan-conformance: an expert_parallel that moves the expert bias by its own rank's token counts fails "
          "parallelizer.expert_bias by name on 2 ranks, not on 1") {
  auto report = conformance_json(test_plugin("local_bias_ep"), "--ranks 1,2");
  INFO(report.output);
  CHECK(report.exit_code == 1);
  CHECK(report.output.find("conformance check failed: parallelizer.expert_bias@2") != std::string::npos);
  CHECK(report.results["parallelizer.expert_bias@2"] == "fail");
  // One rank's counts are the job's: nothing to reduce, nothing wrong.
  CHECK(report.results["parallelizer.expert_bias@1:ep1"] == "pass");
  CHECK(report.results["parallelizer.loss@1:ep1"] == "pass");
  // The experts, their tokens and their gradients are right.
  for (const char* name : {"parallelizer.sharding@2", "parallelizer.gradients@2", "parallelizer.replicas_agree@2"}) {
    CHECK_MESSAGE(report.results[name] == "pass", name);
  }
}
