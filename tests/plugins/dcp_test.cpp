// The `dcp` checkpointer plugin (plugins/dcp) through the registry, in one
// process: its options with TorchTitan's checkpoint defaults, when it
// saves, where its folder is, what keep_latest_k, load_step and a
// model-only last save do, and bad options refused naming the key and what
// was expected. Saves across layouts and world sizes, resume, async saves
// and corrupt checkpoints on real ranks: integration/dcp_e2e_test.cpp.
#include "plugin_support.hpp"

#include <filesystem>

#include "titan/checkpointer.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::error_of;
using titan::test::has;

// The dcp checkpointer with `options`, in a job whose dump folder is `dump`.
std::unique_ptr<titan::Checkpointer> dcp(const std::string& options, const fs::path& dump = "/dump",
                                         int64_t training_steps = 1000) {
  titan::PluginContext context = titan::test::plugin_context(options);
  context.dump_folder = dump.string();
  context.training_steps = training_steps;
  auto checkpointer = titan::PluginRegistry::instance().create_checkpointer("dcp", context);
  checkpointer->attach(titan::CheckpointEnv{});  // one process
  return checkpointer;
}

std::string dcp_refusal(const std::string& options) {
  return error_of([&] { dcp(options); });
}

// A model weight and its optimizer state, whole (one process).
titan::TrainState small_state() {
  titan::TrainState state;
  state.tensors["model.w"] = torch::arange(6, torch::kFloat).reshape({2, 3});
  state.tensors["optim.w.exp_avg"] = torch::full({2, 3}, 0.5);
  state.values["step"] = "1";
  return state;
}

}  // namespace

TEST_CASE("dcp plugin: off by default; folder checkpoint, interval 500, keep_latest_k 10 and synchronous saves "
          "unless set; each option documented") {
  titan::PluginContext context = titan::test::plugin_context("");
  auto off = titan::PluginRegistry::instance().create_checkpointer("dcp", context);
  titan::test::check_documented(context.options,
                                {"enable", "folder", "interval", "async_mode", "keep_latest_k", "load_step",
                                 "initial_load_path", "last_save_model_only", "export_dtype"});
  titan::ConfigNode resolved = titan::test::resolved(context.options);
  CHECK(resolved.get<bool>("enable", true) == false);
  CHECK(resolved.get<std::string>("folder", "") == "checkpoint");
  CHECK(resolved.get<int64_t>("interval", 0) == 500);
  CHECK(resolved.get<std::string>("async_mode", "") == "disabled");
  CHECK(resolved.get<int64_t>("keep_latest_k", 0) == 10);
  CHECK(resolved.get<int64_t>("load_step", 0) == -1);
  CHECK(resolved.get<std::string>("initial_load_path", "?") == "");
  CHECK(resolved.get<bool>("last_save_model_only", true) == false);
  CHECK(resolved.get<std::string>("export_dtype", "") == "float32");

  CHECK_FALSE(off->enabled());
  CHECK_FALSE(off->should_save(500, false));
  CHECK_FALSE(off->should_save(1000, true));  // not even the last step
  CHECK(off->initial_load_path().empty());
}

TEST_CASE("dcp plugin: once enabled it saves every interval steps and at the last step; initial_load_path is "
          "passed on as given") {
  auto every_10 = dcp("{enable: true, interval: 10}");
  CHECK(every_10->enabled());
  CHECK(every_10->should_save(10, false));
  CHECK(every_10->should_save(20, false));
  CHECK_FALSE(every_10->should_save(15, false));
  CHECK(every_10->should_save(15, true));
  auto every_500 = dcp("{enable: true}");
  CHECK(every_500->should_save(500, false));
  CHECK_FALSE(every_500->should_save(10, false));
  CHECK(dcp("{initial_load_path: /weights/step-100}")->initial_load_path() == "/weights/step-100");
}

TEST_CASE("dcp plugin: the folder is under job.dump_folder unless absolute, keep_latest_k prunes, load_step must "
          "be saved, and the last save can hold the model only in export_dtype") {
  const fs::path dump = titan::test::temp_dir("dcp_plugin");
  auto kept_2 = dcp("{enable: true, keep_latest_k: 2}", dump);
  for (int64_t step = 1; step <= 3; ++step) kept_2->save(step, small_state());
  CHECK_FALSE(fs::exists(dump / "checkpoint" / "step-1"));
  CHECK(fs::exists(dump / "checkpoint" / "step-2" / "metadata.json"));
  CHECK(fs::exists(dump / "checkpoint" / "step-3" / "metadata.json"));
  titan::TrainState loaded = small_state();
  loaded.tensors["model.w"].zero_();
  auto step = kept_2->load(loaded);
  REQUIRE(step.has_value());
  CHECK(*step == 3);
  CHECK(torch::equal(loaded.tensors["model.w"], small_state().tensors["model.w"]));

  std::string missing = error_of([&] {
    titan::TrainState state = small_state();
    dcp("{enable: true, load_step: 7}", dump)->load(state);
  });
  CHECK(has(missing, "checkpoint.load_step is 7 but '" + (dump / "checkpoint").string() + "' has no committed step-7"));

  const fs::path elsewhere = dump / "elsewhere";
  dcp("{enable: true, folder: '" + elsewhere.string() + "'}", dump / "unused")->save(1, small_state());
  CHECK(fs::exists(elsewhere / "step-1" / "metadata.json"));
  CHECK_FALSE(fs::exists(dump / "unused"));

  // training.steps = 2: step 2 is the last save.
  auto model_only =
      dcp("{enable: true, folder: model_only, last_save_model_only: true, export_dtype: bfloat16}", dump, 2);
  model_only->save(1, small_state());
  model_only->save(2, small_state());
  const std::string full = (dump / "model_only" / "step-1").string();
  const std::string last = (dump / "model_only" / "step-2").string();
  CHECK(model_only->model_tensor_names(last) == std::vector<std::string>{"w"});
  CHECK((model_only->read_model_tensor(last, "w").scalar_type() == at::kBFloat16));
  CHECK((model_only->read_model_tensor(full, "w").scalar_type() == at::kFloat));
}

TEST_CASE("dcp plugin: bad options are refused naming the key and what was expected") {
  std::string interval = dcp_refusal("{interval: 0}");
  CHECK(has(interval, "run.yaml:1:"));
  CHECK(has(interval, "interval: expected a positive integer"));
  CHECK(has(dcp_refusal("{keep_latest_k: -1}"), "keep_latest_k: expected >= 0"));
  CHECK(has(dcp_refusal("{load_step: -2}"), "load_step: expected -1 or a step number"));
  CHECK(has(dcp_refusal("{async_mode: later}"),
            "async_mode: expected one of {disabled, async, async_with_pinned_mem}, got \"later\""));
  CHECK(has(dcp_refusal("{export_dtype: fp8}"), "export_dtype: expected one of {float32, bfloat16, float16}, got \"fp8\""));
  CHECK(has(dcp_refusal("{enable: maybe}"), "enable: expected bool, got \"maybe\""));
  CHECK(has(dcp_refusal("{interval: 2.5}"), "interval: expected int, got \"2.5\""));
}
