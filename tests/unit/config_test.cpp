// Config: typed reads, defaults written back, every error class with its
// file:line:col and key path, unknown keys with did-you-mean, overrides.
#include "doctest_torch.hpp"

#include <cstdlib>
#include <thread>

#include "titan/config.hpp"
#include "titan/cpu_threads.hpp"
#include "titan/job_config.hpp"

using titan::ConfigError;
using titan::ConfigNode;

namespace {
std::string config_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "<no error>";
}
}  // namespace

TEST_SUITE("config") {
  TEST_CASE("typed reads return values and write defaults back") {
    ConfigNode root = ConfigNode::parse("training:\n  steps: 20\n  max_norm: 0.5\n  dataset: x\n", "run.yaml");
    ConfigNode training = root.child("training");
    CHECK(training.get<int64_t>("steps", 1) == 20);
    CHECK(training.get<double>("max_norm", 1.0) == doctest::Approx(0.5));
    CHECK(training.get<std::string>("dataset", "y") == "x");
    CHECK(training.get<int64_t>("seq_len", 2048) == 2048);
    CHECK(training.get<bool>("deterministic", false) == false);
    CHECK(root.dump().find("seq_len: 2048") != std::string::npos);
    CHECK(training.documented().size() == 5);
  }

  TEST_CASE("a wrong type names file, line, column, key and expected type") {
    ConfigNode root = ConfigNode::parse("training:\n  steps: twenty\n", "configs/run.yaml");
    std::string message = config_error_of([&] { root.child("training").get<int64_t>("steps", 1); });
    CHECK(message == "configs/run.yaml:2:10: training.steps: expected int, got \"twenty\"");
    CHECK(config_error_of([&] { root.child("training").get<bool>("steps", false); }).find("expected bool") !=
          std::string::npos);
  }

  TEST_CASE("an int does not silently accept a float") {
    ConfigNode root = ConfigNode::parse("steps: 1.5\n", "a.yaml");
    CHECK(config_error_of([&] { root.get<int64_t>("steps", 1); }).find("expected int, got \"1.5\"") != std::string::npos);
  }

  TEST_CASE("choice lists the allowed values and suggests the closest") {
    ConfigNode root = ConfigNode::parse("fsdp:\n  reshard_after_forward: alway\n", "b.yaml");
    std::string message = config_error_of(
        [&] { root.child("fsdp").choice("reshard_after_forward", "default", {"default", "always", "never"}); });
    CHECK(message.find("b.yaml:2:26: fsdp.reshard_after_forward: expected one of {default, always, never}, got "
                       "\"alway\"") == 0);
    CHECK(message.find("did you mean \"always\"") != std::string::npos);
  }

  TEST_CASE("an enum choice maps names and synonyms to values and lists every name in errors") {
    enum class Reshard { by_default, always, never };
    const std::vector<std::pair<std::string, Reshard>> table = {{"default", Reshard::by_default},
                                                                {"always", Reshard::always},
                                                                {"never", Reshard::never},
                                                                {"true", Reshard::always},
                                                                {"false", Reshard::never}};
    ConfigNode fsdp = ConfigNode::parse("a: never\nb: true\nc: sometimes\nd: alway\n", "k.yaml");
    CHECK((fsdp.choice("a", Reshard::by_default, table) == Reshard::never));
    CHECK((fsdp.choice("b", Reshard::by_default, table) == Reshard::always));
    CHECK((fsdp.choice("absent", Reshard::never, table) == Reshard::never));
    CHECK(fsdp.dump().find("absent: never") != std::string::npos);  // the default written back by its name
    CHECK(fsdp.documented().front().doc == "{default, always, never, true, false}");
    CHECK(config_error_of([&] { fsdp.choice("c", Reshard::by_default, table); }) ==
          "k.yaml:3:4: c: expected one of {default, always, never, true, false}, got \"sometimes\"");
    CHECK(config_error_of([&] { fsdp.choice("d", Reshard::by_default, table); }).find("did you mean \"always\"") !=
          std::string::npos);
    // A default missing from the table is the plugin's bug, not the user's.
    CHECK_THROWS_AS(fsdp.choice("e", Reshard::never, {{"always", Reshard::always}}), titan::Error);
  }

  TEST_CASE("degree accepts >= 1 and -1 (the rest of the world), or >= 1 only when asked") {
    ConfigNode mesh = ConfigNode::parse("tp: 2\nrest: -1\nzero: 0\nlow: -2\n", "j.yaml");
    CHECK(mesh.degree("tp", 1, "ranks") == 2);
    CHECK(mesh.degree("rest", 1, "ranks") == -1);
    CHECK(mesh.degree("absent", -1, "ranks") == -1);
    CHECK(mesh.degree("tp", 1, "replicas", titan::Degree::at_least_one) == 2);
    CHECK(config_error_of([&] { mesh.degree("zero", 1, "ranks"); }) ==
          "j.yaml:3:7: zero: expected a degree >= 1 or -1 (-1: the rest of the world), got 0");
    CHECK(config_error_of([&] { mesh.degree("low", 1, "ranks"); }).find("low: expected a degree >= 1 or -1") !=
          std::string::npos);
    CHECK(config_error_of([&] { mesh.degree("rest", 1, "replicas", titan::Degree::at_least_one); }) ==
          "j.yaml:2:7: rest: expected a degree >= 1, got -1");
  }

  TEST_CASE("number checks its range, and its errors name the key, the range and the value") {
    using titan::NumberRange;
    ConfigNode optimizer = ConfigNode::parse("beta: 1.5\nlr: -0.001\neps: .nan\nbig: .inf\nok: 0.25\n", "l.yaml");
    CHECK(optimizer.number("ok", 0.5, NumberRange::half_open(0, 1)) == doctest::Approx(0.25));
    CHECK(optimizer.number("absent", 0.5, NumberRange::closed(0, 1), "a doc") == doctest::Approx(0.5));
    CHECK(config_error_of([&] { optimizer.number("beta", 0.9, NumberRange::half_open(0, 1)); }) ==
          "l.yaml:1:7: beta: expected a number in [0, 1), got 1.5");
    CHECK(config_error_of([&] { optimizer.number("ok", 1.0, NumberRange::closed(0.5, 1)); }) ==
          "l.yaml:5:5: ok: expected a number in [0.5, 1], got 0.25");
    CHECK(config_error_of([&] { optimizer.number("lr", 0.1, NumberRange::at_least(0)); }) ==
          "l.yaml:2:5: lr: expected a finite number >= 0, got -0.001");
    CHECK(config_error_of([&] { optimizer.number("ok", 1.0, NumberRange::above(0.25)); }).find(
              "ok: expected a finite number > 0.25, got 0.25") != std::string::npos);
    // NaN and infinity are outside every range, even an unbounded one.
    CHECK(config_error_of([&] { optimizer.number("eps", 1e-8, NumberRange::at_least(0)); }).find(
              "eps: expected a finite number >= 0, got ") != std::string::npos);
    CHECK(config_error_of([&] { optimizer.number("big", 1.0, NumberRange::above(0)); }).find(
              "big: expected a finite number > 0, got inf") != std::string::npos);
  }

  TEST_CASE("unknown keys are errors with a did-you-mean") {
    ConfigNode root = ConfigNode::parse("training:\n  stpes: 3\n  seq_len: 8\n", "c.yaml");
    root.child("training").get<int64_t>("steps", 1);
    root.child("training").get<int64_t>("seq_len", 1);
    std::string message = config_error_of([&] { root.check_unknown_keys(); });
    CHECK(message.find("c.yaml:2:3: training.stpes: unknown key; did you mean 'steps'?") == 0);
  }

  TEST_CASE("an unknown section is reported at the root") {
    ConfigNode root = ConfigNode::parse("trainig:\n  steps: 3\n", "d.yaml");
    titan::read_core_config(root);
    std::string message = config_error_of([&] { root.check_unknown_keys(); });
    CHECK(message.find("d.yaml:1:1: trainig: unknown key; did you mean 'training'?") == 0);
  }

  TEST_CASE("malformed YAML is a syntax error with its position") {
    std::string message = config_error_of([] { ConfigNode::parse("training:\n  steps: [1, 2\n", "e.yaml"); });
    CHECK(message.find("e.yaml:") == 0);
    CHECK(message.find("YAML syntax error") != std::string::npos);
  }

  TEST_CASE("a missing file is a clear error") {
    CHECK(config_error_of([] { ConfigNode::load_file("/nonexistent/run.yaml"); }).find("cannot be read") !=
          std::string::npos);
  }

  TEST_CASE("--set overrides values, creates keys and selects list elements by name") {
    ConfigNode root = ConfigNode::parse(
        "training:\n  steps: 3\nplugins:\n  - name: fsdp\n    dp_shard: 2\n  - name: ddp\n", "f.yaml");
    root.apply_override("training.steps=7");
    root.apply_override("metrics.log_freq=1");
    root.apply_override("plugins.fsdp.dp_shard=-1");
    root.apply_override("plugins.1.bucket_mb=25");
    CHECK(root.child("training").get<int64_t>("steps", 0) == 7);
    CHECK(root.child("metrics").get<int64_t>("log_freq", 0) == 1);
    auto plugins = root.children("plugins");
    REQUIRE(plugins.size() == 2);
    CHECK(plugins[0].get<int64_t>("dp_shard", 0) == -1);
    CHECK(plugins[1].get<int64_t>("bucket_mb", 0) == 25);
  }

  TEST_CASE("an overridden bad value is attributed to --set") {
    ConfigNode root = ConfigNode::parse("training:\n  steps: 3\n", "g.yaml");
    root.apply_override("training.steps=abc");
    CHECK(config_error_of([&] { root.child("training").get<int64_t>("steps", 0); }) ==
          "--set training.steps: training.steps: expected int, got \"abc\"");
    CHECK(config_error_of([&] { root.apply_override("training.steps"); }).find("expected key.path=value") !=
          std::string::npos);
    ConfigNode with_list = ConfigNode::parse("plugins:\n  - name: ddp\n", "i.yaml");
    CHECK(config_error_of([&] { with_list.apply_override("plugins.fsdp.x=1"); }) ==
          "--set plugins.fsdp.x=1: 'plugins' has no element named or numbered 'fsdp'");
  }

  TEST_CASE("core config validates values") {
    auto bad = [](const std::string& yaml) {
      return config_error_of([&] { titan::read_core_config(ConfigNode::parse(yaml, "h.yaml")); });
    };
    CHECK(bad("training:\n  local_batch_size: 0\n").find("training.local_batch_size: expected a positive") !=
          std::string::npos);
    CHECK(bad("training:\n  device: tpu\n").find("expected one of {cpu, cuda}") != std::string::npos);
    CHECK(bad("training:\n  cuda_graph: true\n").find("training.cuda_graph: a CUDA graph needs training.device=cuda") !=
          std::string::npos);
    CHECK(bad("training:\n  cuda_graph: maybe\n").find("training.cuda_graph") != std::string::npos);
    CHECK(bad("training:\n  cuda_graph_warmup_steps: 0\n")
              .find("training.cuda_graph_warmup_steps: expected a positive integer, got 0") != std::string::npos);
    CHECK(bad("metrics:\n  log_freq: -1\n").find("metrics.log_freq") != std::string::npos);
    CHECK(bad("training:\n  global_batch_size: 0\n").find("global_batch_size") != std::string::npos);
    auto config = titan::read_core_config(ConfigNode::parse("training:\n  steps: 5\n", "ok.yaml"));
    CHECK(config.training.steps == 5);
    CHECK(config.training.local_batch_size == 8);
  }

  TEST_CASE("training.threads 0 takes OMP_NUM_THREADS where a launcher set it, else every core; ranks share the "
            "cores") {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const char* saved = std::getenv("OMP_NUM_THREADS");
    const std::string kept = saved ? saved : "";
    ::setenv("OMP_NUM_THREADS", "3", 1);
    CHECK(titan::default_threads() == 3);
    ::setenv("OMP_NUM_THREADS", "three", 1);  // not a count: ignored, as OpenMP ignores it
    CHECK(titan::default_threads() == cores);
    ::unsetenv("OMP_NUM_THREADS");
    CHECK(titan::default_threads() == cores);
    if (saved) ::setenv("OMP_NUM_THREADS", kept.c_str(), 1);
    CHECK(titan::threads_per_rank(1) == cores);
    CHECK(titan::threads_per_rank(2) == std::max(1, cores / 2));
    CHECK(titan::threads_per_rank(4 * cores) == 1);
  }

  TEST_CASE("closest_match finds near spellings only") {
    CHECK(titan::closest_match("tensor_paralel", {"ddp", "fsdp", "tensor_parallel"}) == "tensor_parallel");
    CHECK(titan::closest_match("zzzzzz", {"ddp", "fsdp"}).empty());
  }
}
