// titan-conformance on the single-process kinds: llama3 passes the model
// checks, lr_schedules the LR checks; a correct and a broken test plugin for
// schedules and for precision policies pass and fail by check name; bad
// declarations are errors naming the key.
#include "doctest_torch.hpp"

#include "conformance_report.hpp"

namespace fs = std::filesystem;
using namespace titan::test::conformance;

TEST_CASE("titan-conformance: llama3 passes every model check on its declared small flavor") {
  check_all_pass(conformance_json(plugin_dir() / "libtitan_plugin_llama3.so"),
                 {"model.meta_build", "model.forward_shape", "model.init_deterministic",
                  "model.init_seed_changes_values", "model.init_order_independent", "model.num_params",
                  "model.gradients_finite", "model.initial_loss", "model.learns"});
}

TEST_CASE("titan-conformance: lr_schedules is finite, non-negative and deterministic over its declared run") {
  check_all_pass(conformance_json(plugin_dir() / "libtitan_plugin_lr_schedules.so"),
                 {"lr_schedule.finite_nonnegative", "lr_schedule.deterministic"});
}

TEST_CASE("titan-conformance: a reverse-order accumulation schedule equals one whole-batch pass; forgetting 1/N or "
          "averaging the microbatch means fails microbatch_runner.loss and microbatch_runner.grads") {
  check_all_pass(conformance_json(test_plugin("reverse_accumulation")),
                 {"microbatch_runner.loss", "microbatch_runner.grads", "microbatch_runner.gradient_sync"});
  Report broken = conformance_json(test_plugin("unscaled_accumulation"));
  INFO(broken.output);
  CHECK(broken.exit_code == 1);
  CHECK(broken.results["microbatch_runner.loss"] == "fail");
  CHECK(broken.results["microbatch_runner.grads"] == "fail");
  CHECK(broken.results["microbatch_runner.gradient_sync"] == "pass");
  CHECK(broken.output.find("conformance check failed: microbatch_runner.loss") != std::string::npos);
  // Averaging the microbatch means is right only when every microbatch
  // holds as many labels that carry loss: the check's first microbatch
  // holds fewer.
  Report mean_of_means = conformance_json(test_plugin("mean_of_means_accumulation"));
  INFO(mean_of_means.output);
  CHECK(mean_of_means.exit_code == 1);
  CHECK(mean_of_means.results["microbatch_runner.loss"] == "fail");
  CHECK(mean_of_means.results["microbatch_runner.grads"] == "fail");
  CHECK(mean_of_means.results["microbatch_runner.gradient_sync"] == "pass");
}

TEST_CASE("titan-conformance: a bf16 policy stays within its honest loss tolerance, and one claiming 1e-9 fails "
          "precision.loss") {
  check_all_pass(conformance_json(test_plugin("bf16_policy")), {"precision.dtypes", "precision.loss"});
  Report overconfident = conformance_json(test_plugin("overconfident_bf16_policy"));
  INFO(overconfident.output);
  CHECK(overconfident.exit_code == 1);
  CHECK(overconfident.results["precision.dtypes"] == "pass");
  CHECK(overconfident.results["precision.loss"] == "fail");
  CHECK(overconfident.output.find("conformance check failed: precision.loss") != std::string::npos);
}

TEST_CASE("titan-conformance: bad single-process declarations are errors naming the key") {
  fs::path dir = titan::test::temp_dir("conformance_kinds_bad");
  titan::test::write_file(dir / "microbatches.yaml", "microbatch_runner:\n  microbatches: 3\nmodel:\n  batch: 8\n");
  Report split = conformance_json(test_plugin("reverse_accumulation"), "--declare " + (dir / "microbatches.yaml").string());
  INFO(split.output);
  CHECK(split.exit_code == 2);
  CHECK(split.output.find("microbatch_runner.microbatches") != std::string::npos);

  titan::test::write_file(dir / "other_model.yaml", "model:\n  plugin: gpt2\n");
  Report other = conformance_json(plugin_dir() / "libtitan_plugin_llama3.so",
                                  "--declare " + (dir / "other_model.yaml").string());
  INFO(other.output);
  CHECK(other.exit_code == 2);
  CHECK(other.output.find("model.plugin") != std::string::npos);

  titan::test::write_file(dir / "steps.yaml", "lr_schedule:\n  training_steps: 0\n");
  Report steps = conformance_json(plugin_dir() / "libtitan_plugin_lr_schedules.so",
                                  "--declare " + (dir / "steps.yaml").string());
  INFO(steps.output);
  CHECK(steps.exit_code == 2);
  CHECK(steps.output.find("lr_schedule.training_steps") != std::string::npos);
}
