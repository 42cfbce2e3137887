// The titan binary end to end: `config check` on bad inputs exits non-zero
// with one clear message (no trace), `plugins list/inspect` work.
#include "doctest_torch.hpp"

#include "test_support.hpp"

using titan::test::run_command;
using titan::test::titan_binary;

namespace {
titan::test::CommandResult check_config(const std::string& name, const std::string& yaml,
                                        const std::string& extra = "") {
  auto dir = titan::test::temp_dir("cli_" + name);
  titan::test::write_file(dir / "run.yaml", yaml);
  return run_command(titan_binary() + " config check " + (dir / "run.yaml").string() + " " + extra);
}
const char* kGood = "model:\n  name: llama3\n  flavor: debugmodel\ntraining:\n  steps: 5\n";
}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("config check accepts the shipped configs") {
    for (const char* config : {"llama3_debugmodel", "llama3_8b", "llama3_70b", "llama3_405b"}) {
      auto result = run_command(titan_binary() + " config check " + titan::test::source_dir() + "/configs/" +
                                config + ".yaml");
      CHECK_MESSAGE(result.exit_code == 0, config, ": ", result.output);
    }
  }

  TEST_CASE("config check: malformed YAML") {
    auto result = check_config("malformed", "training:\n  steps: [1,\n");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("titan: error: ") == 0);
    CHECK(result.output.find("YAML syntax error") != std::string::npos);
  }

  TEST_CASE("config check: unknown key") {
    auto result = check_config("unknown_key", std::string(kGood) + "  seq_lenn: 4\n");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("training.seq_lenn: unknown key; did you mean 'seq_len'?") != std::string::npos);
  }

  TEST_CASE("config check: wrong type") {
    auto result = check_config("wrong_type", std::string(kGood) + "  local_batch_size: many\n");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find(":6:21: training.local_batch_size: expected int, got \"many\"") != std::string::npos);
  }

  TEST_CASE("config check: unknown plugin") {
    auto result = check_config("unknown_plugin", std::string(kGood) + "plugins:\n  - name: tensor_paralel\n");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("plugin 'tensor_paralel' not found") != std::string::npos);
  }

  TEST_CASE("config check: a bad plugin option and a bad --set") {
    auto result = check_config("bad_option", kGood, "--set model.flavor=9B");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("--set model.flavor: model.flavor: expected one of") != std::string::npos);
    result = check_config("bad_optimizer_option", std::string(kGood) + "optimizer:\n  betaa1: 0.9\n");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("optimizer.betaa1: unknown key; did you mean 'beta1'?") != std::string::npos);
  }

  TEST_CASE("no stack traces in error output") {
    auto result = check_config("no_trace", "training: 3\n");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("Exception raised from") == std::string::npos);
    CHECK(result.output.find("training: expected a mapping") != std::string::npos);
  }

  TEST_CASE("plugins list shows the tree's plugins with their kinds") {
    auto result = run_command(titan_binary() + " plugins list");
    CHECK(result.exit_code == 0);
    CHECK(result.output.find("llama3") != std::string::npos);
    CHECK(result.output.find("model") != std::string::npos);
    CHECK(result.output.find("adamw") != std::string::npos);
    CHECK(result.output.find("optimizer") != std::string::npos);
  }

  TEST_CASE("plugins inspect lists a plugin's options with defaults") {
    auto result = run_command(titan_binary() + " plugins inspect adamw");
    CHECK(result.exit_code == 0);
    CHECK(result.output.find("kinds:        optimizer") != std::string::npos);
    CHECK(result.output.find("weight_decay") != std::string::npos);
    CHECK(result.output.find("beta2") != std::string::npos);
  }

  TEST_CASE("unknown commands and options are usage errors") {
    CHECK(run_command(titan_binary() + " trian").exit_code == 2);
    auto result = run_command(titan_binary() + " train x.yaml --sett a=b");
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("unknown option '--sett'") != std::string::npos);
    CHECK(run_command(titan_binary() + " --help").exit_code == 0);
  }
}
