// The `dcp` checkpointer: exact values across layouts and world sizes
// (titan_dcp_checks on real Gloo ranks), training resumed under another
// layout on the uninterrupted loss curve, bit-for-bit resume, async saves,
// corrupt checkpoints refused by name with fallback, and retention.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using titan::test::run_command;

std::string launch(int ranks, int port) {
  return "timeout 300 " + titan::test::titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) +
         " --master-port " + std::to_string(port) + " --grace-period-s 5 -- ";
}

// Save with one layout, then load with each of `loads` ("ranks:layout").
void save_then_load(const std::string& name, int port, int save_ranks, const std::string& save_layout,
                    const std::vector<std::pair<int, std::string>>& loads, bool async = false) {
  fs::path dir = titan::test::temp_dir("dcp_checks_" + name) / "checkpoint";
  std::string binary = titan::test::dcp_checks_binary();
  auto run = [&](int ranks, const std::string& what) {
    std::string command = ranks == 1 ? "timeout 120 " + binary + " " + what : launch(ranks, port) + binary + " " + what;
    auto result = run_command("DCP_SAVED_WORLD=" + std::to_string(save_ranks) + " " + command);
    int ok_lines = 0;
    for (size_t at = result.output.find("DCP ok"); at != std::string::npos; at = result.output.find("DCP ok", at + 1)) {
      ++ok_lines;
    }
    CHECK_MESSAGE(result.exit_code == 0, command, "\n", result.output);
    CHECK_MESSAGE(ok_lines == ranks, command, "\n", result.output);
  };
  std::string save_layout_arg = save_ranks == 1 ? "single" : save_layout;
  run(save_ranks, "save " + dir.string() + " " + save_layout_arg + (async ? " async" : ""));
  for (const auto& [ranks, layout] : loads) run(ranks, "load " + dir.string() + " " + layout);
}

// A small Llama so that each multi-process run takes seconds.
std::string tiny_sets(const fs::path& dump, int64_t steps) {
  return " --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4 --set model.n_kv_heads=2"
         " --set training.seq_len=32 --set training.threads=1 --set lr_scheduler.warmup_steps=3"
         " --set metrics.log_freq=1 --set checkpoint.enable=true --set checkpoint.interval=10"
         " --set checkpoint.keep_latest_k=0 --set training.steps=" + std::to_string(steps) +
         " --set job.dump_folder=" + dump.string();
}

struct Run {
  int exit_code = 0;
  std::string output;
  std::map<int64_t, double> losses;
};

// `ranks` processes with the parallelism `plugin` ("" for none), global
// batch 8 windows per step in every layout (same data, same steps).
Run train(const fs::path& dump, int ranks, int port, const std::string& plugin, int64_t steps,
          const std::string& extra = "") {
  std::string command = (ranks == 1 ? std::string("timeout 300 ") : launch(ranks, port)) +
                        titan::test::titan_binary() + " train " + titan::test::source_dir() +
                        "/configs/llama3_debugmodel.yaml --set training.local_batch_size=" + std::to_string(8 / ranks) +
                        (plugin.empty() ? "" : " --set 'plugins=[" + plugin + "]'") + tiny_sets(dump, steps) + extra;
  auto result = run_command(command);
  Run run{result.exit_code, result.output, {}};
  std::ifstream lines(dump / "metrics.jsonl");
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    run.losses[record["step"].get<int64_t>()] = record["loss_metrics/global_avg_loss"].get<double>();
  }
  return run;
}

using titan::test::relative;

// A dump folder whose checkpoint folder holds `source`'s step-10 only.
fs::path with_step10_of(const fs::path& source, const std::string& name) {
  fs::path dump = titan::test::temp_dir(name);
  fs::create_directories(dump / "checkpoint");
  fs::copy(source / "checkpoint/step-10", dump / "checkpoint/step-10", fs::copy_options::recursive);
  return dump;
}

std::string bytes_of(const fs::path& path) { return titan::test::read_file(path); }

}  // namespace

TEST_SUITE("dcp") {
  TEST_CASE("dcp: an FSDP x4 save loads exactly under FSDP x2 / one process / HSDP 2x2 / DDP x2 / FSDP x4") {
    save_then_load("fsdp4", 29711, 4, "fsdp",
                   {{2, "fsdp"}, {1, "single"}, {4, "hsdp"}, {2, "ddp"}, {4, "fsdp"}});
  }

  TEST_CASE("dcp: an async HSDP 2x2 save holds the values at save time and loads under FSDP x2 / x3 / one process") {
    save_then_load("hsdp_async", 29712, 4, "hsdp", {{2, "fsdp"}, {3, "fsdp"}, {1, "single"}}, /*async=*/true);
  }

  TEST_CASE("dcp: a DDP x2 save loads under FSDP x4 and column pieces (TP-style x3)") {
    save_then_load("ddp2", 29713, 2, "ddp", {{4, "fsdp"}, {3, "tp"}});
  }

  TEST_CASE("dcp: a save in column pieces (TP-style x4) loads under FSDP x2 and one process") {
    save_then_load("tp4", 29710, 4, "tp", {{2, "fsdp"}, {1, "single"}, {2, "tp"}});
  }

  TEST_CASE("dcp: training resumed from an FSDP x4 checkpoint under another layout continues the same loss curve") {
    fs::path reference_dump = titan::test::temp_dir("dcp_resume_reference");
    Run reference = train(reference_dump, 4, 29714, "{name: fsdp}", 20);
    REQUIRE_MESSAGE(reference.exit_code == 0, reference.output);
    REQUIRE(reference.losses.size() == 20);
    struct Target {
      std::string name;
      int ranks;
      std::string plugin;
    };
    for (const Target& target : {Target{"fsdp2", 2, "{name: fsdp}"}, Target{"single", 1, ""},
                                 Target{"hsdp", 4, "{name: fsdp, dp_replicate: 2}"}, Target{"ddp2", 2, "{name: ddp}"}}) {
      fs::path dump = with_step10_of(reference_dump, "dcp_resume_" + target.name);
      Run resumed = train(dump, target.ranks, 29715, target.plugin, 20);
      REQUIRE_MESSAGE(resumed.exit_code == 0, target.name, "\n", resumed.output);
      CHECK_MESSAGE(resumed.output.find("resumed from checkpoint at step 10 (data position 80)") != std::string::npos,
                    target.name, "\n", resumed.output);
      REQUIRE_MESSAGE(resumed.losses.size() == 10, target.name);
      double worst = 0;
      for (const auto& [step, loss] : resumed.losses) worst = std::max(worst, relative(loss, reference.losses.at(step)));
      MESSAGE(target.name << ": max relative loss difference over steps 11-20: " << worst);
      CHECK_MESSAGE(worst <= 1e-5, target.name);
    }
  }

  TEST_CASE("dcp: FSDP x2 20 steps straight (async saves) equal 10 + resume + 10 bit for bit") {
    fs::path straight = titan::test::temp_dir("dcp_bitwise_straight");
    Run a = train(straight, 2, 29716, "{name: fsdp}", 20, " --set checkpoint.async_mode=async");
    REQUIRE_MESSAGE(a.exit_code == 0, a.output);
    fs::path resumed = with_step10_of(straight, "dcp_bitwise_resumed");
    Run b = train(resumed, 2, 29717, "{name: fsdp}", 20);
    REQUIRE_MESSAGE(b.exit_code == 0, b.output);
    REQUIRE(b.losses.size() == 10);
    for (const auto& [step, loss] : b.losses) CHECK_MESSAGE(loss == a.losses.at(step), "step ", step);  // exact
    for (const char* shard : {"shard-00000.bin", "shard-00001.bin"}) {
      CHECK_MESSAGE(bytes_of(straight / "checkpoint/step-20" / shard) == bytes_of(resumed / "checkpoint/step-20" / shard),
                    shard);
    }
  }

  TEST_CASE("dcp: a mixture of Parquet and zstd JSONL resumed from its data cursor continues bit for bit, and under "
            "one process on the same curve") {
    const fs::path data = titan::test::temp_dir("dcp_mixture_data");
    std::string documents;
    for (int i = 0; i < 80; ++i) {
      std::string text = "story " + std::to_string(i) + ":";
      for (int word = 0; word < 3 + (i * 7) % 30; ++word) text += word % 3 ? " and the river" : " once";
      documents += nlohmann::json{{"text", text}}.dump() + "\n";
    }
    titan::test::write_file(data / "docs.jsonl", documents);
    const std::string python = titan::test::source_dir() + "/.venv/bin/python";
    if (run_command(python + " -c 'import pyarrow'").exit_code != 0) {
      MESSAGE("TITAN_SKIPPED: no pyarrow in .venv (scripts/setup.sh installs it)");
      return;
    }
    auto written = run_command(python + " " + titan::test::source_dir() + "/tests/python/dataset_files.py " +
                               (data / "docs.jsonl").string() + " " + data.string());
    REQUIRE_MESSAGE(written.exit_code == 0, written.output);
    const std::string mixture = " --set 'training.datasets=[{path: " + (data / "docs.parquet").string() +
                                ", weight: 2}, {path: " + (data / "docs.jsonl.zst").string() +
                                ", weight: 1}]' --set training.packing=first_fit";
    fs::path straight = titan::test::temp_dir("dcp_mixture_straight");
    Run a = train(straight, 2, 29433, "{name: fsdp}", 20, mixture);
    REQUIRE_MESSAGE(a.exit_code == 0, a.output);
    REQUIRE(a.losses.size() == 20);
    const std::string metadata = titan::test::read_file(straight / "checkpoint/step-10/metadata.json");
    CHECK_MESSAGE(metadata.find("data.cursor") != std::string::npos, "the checkpoint holds the data cursor");
    Run same = train(with_step10_of(straight, "dcp_mixture_resumed"), 2, 29434, "{name: fsdp}", 20, mixture);
    REQUIRE_MESSAGE(same.exit_code == 0, same.output);
    REQUIRE(same.losses.size() == 10);
    for (const auto& [step, loss] : same.losses) CHECK_MESSAGE(loss == a.losses.at(step), "step ", step);  // exact
    Run single = train(with_step10_of(straight, "dcp_mixture_single"), 1, 0, "", 20, mixture);
    REQUIRE_MESSAGE(single.exit_code == 0, single.output);
    REQUIRE(single.losses.size() == 10);
    for (const auto& [step, loss] : single.losses) CHECK(relative(loss, a.losses.at(step)) <= 1e-5);
  }

  TEST_CASE("dcp: a rank killed at step 13 under titan launch --max-restarts 1 resumes from step 10 on the same curve") {
    fs::path straight = titan::test::temp_dir("dcp_restart_straight");
    Run a = train(straight, 2, 29718, "{name: fsdp}", 20);
    REQUIRE_MESSAGE(a.exit_code == 0, a.output);
    // The first attempt's rank 1 SIGKILLs itself after step 13; the
    // launcher restarts both ranks, which resume from step-10.
    fs::path dump = titan::test::temp_dir("dcp_restart");
    std::string train_command = titan::test::titan_binary() + " train " + titan::test::source_dir() +
                                "/configs/llama3_debugmodel.yaml --set training.local_batch_size=4 --set "
                                "'plugins=[{name: fsdp}]'" + tiny_sets(dump, 20);
    std::string command = "timeout 300 " + titan::test::titan_binary() +
                          " launch --nproc-per-node 2 --master-port 29719 --grace-period-s 5 --max-restarts 1 -- "
                          "sh -c 'if [ \"$TITAN_RESTART_COUNT\" = 0 ]; then exec \"$0\" \"$@\" "
                          "--set debug.crash_rank=1 --set debug.crash_at_step=13; else exec \"$0\" \"$@\"; fi' " +
                          train_command;
    auto result = run_command(command);
    REQUIRE_MESSAGE(result.exit_code == 0, command, "\n", result.output);
    CHECK_MESSAGE(result.output.find("restarting all 2 ranks") != std::string::npos, result.output);
    CHECK_MESSAGE(result.output.find("resumed from checkpoint at step 10") != std::string::npos, result.output);
    std::map<int64_t, double> losses;
    std::ifstream lines(dump / "metrics.jsonl");
    for (std::string line; std::getline(lines, line);) {
      auto record = nlohmann::json::parse(line);
      losses[record["step"].get<int64_t>()] = record["loss_metrics/global_avg_loss"].get<double>();  // the restart's lines win
    }
    REQUIRE(losses.size() == 20);
    for (const auto& [step, loss] : losses) CHECK_MESSAGE(loss == a.losses.at(step), "step ", step);  // exact
  }

  TEST_CASE("dcp: a truncated shard / a missing shard / unparsable metadata are refused by name and resume falls back") {
    fs::path original = titan::test::temp_dir("dcp_corrupt_original");
    Run first = train(original, 1, 0, "", 20);
    REQUIRE_MESSAGE(first.exit_code == 0, first.output);
    struct Damage {
      std::string name;
      std::function<void(const fs::path& step20)> apply;
      std::string message;
    };
    std::vector<Damage> damages = {
        {"truncated", [](const fs::path& step) { fs::resize_file(step / "shard-00000.bin", 1000); },
         "shard-00000.bin' has 1000 bytes"},
        {"missing", [](const fs::path& step) { fs::remove(step / "shard-00000.bin"); },
         "shard-00000.bin' is missing"},
        {"metadata", [](const fs::path& step) { titan::test::write_file(step / "metadata.json", "{\"format\": "); },
         "metadata.json' does not parse"},
    };
    for (const auto& damage : damages) {
      fs::path dump = titan::test::temp_dir("dcp_corrupt_" + damage.name);
      fs::copy(original / "checkpoint", dump / "checkpoint", fs::copy_options::recursive);
      damage.apply(dump / "checkpoint/step-20");
      Run explicit_step = train(dump, 1, 0, "", 30, " --set checkpoint.load_step=20");
      CHECK_MESSAGE(explicit_step.exit_code == 1, damage.name, "\n", explicit_step.output);
      CHECK_MESSAGE(explicit_step.output.find(damage.message) != std::string::npos, damage.name, "\n",
                    explicit_step.output);
      Run fallback = train(dump, 1, 0, "", 30);
      CHECK_MESSAGE(fallback.exit_code == 0, damage.name, "\n", fallback.output);
      CHECK_MESSAGE(fallback.output.find(damage.message) != std::string::npos, damage.name, "\n", fallback.output);
      CHECK_MESSAGE(fallback.output.find("resumed from checkpoint at step 10") != std::string::npos, damage.name);
      CHECK(fallback.losses.size() == 20);
    }
  }

  TEST_CASE("dcp: a failed background save stops training with a clear error on a later step") {
    fs::path dump = titan::test::temp_dir("dcp_async_failure");
    titan::test::write_file(dump / "blocker", "a file where the checkpoint folder should be\n");
    Run run = train(dump, 1, 0, "", 20,
                    " --set checkpoint.async_mode=async --set checkpoint.folder=" + (dump / "blocker/ckpt").string());
    CHECK_MESSAGE(run.exit_code == 1, run.output);
    CHECK_MESSAGE(run.output.find("checkpoint of step 10 was not committed") != std::string::npos, run.output);
    CHECK(run.losses.count(11) == 1);  // training went on while the save ran
  }

  TEST_CASE("dcp: keep_latest_k prunes after commits and the last save can be model-only in bfloat16") {
    fs::path dump = titan::test::temp_dir("dcp_retention");
    Run run = train(dump, 1, 0, "", 20,
                    " --set checkpoint.interval=5 --set checkpoint.keep_latest_k=2"
                    " --set checkpoint.last_save_model_only=true --set checkpoint.export_dtype=bfloat16");
    REQUIRE_MESSAGE(run.exit_code == 0, run.output);
    std::vector<std::string> steps;
    for (const auto& entry : fs::directory_iterator(dump / "checkpoint")) steps.push_back(entry.path().filename());
    std::sort(steps.begin(), steps.end());
    CHECK(steps == std::vector<std::string>{"step-15", "step-20"});
    auto metadata = nlohmann::json::parse(bytes_of(dump / "checkpoint/step-20/metadata.json"));
    CHECK(metadata["model_only"].get<bool>());
    for (const auto& [name, entry] : metadata["tensors"].items()) {
      CHECK_MESSAGE(name.rfind("model.", 0) == 0, name);
      CHECK_MESSAGE(entry["dtype"] == "bfloat16", name);
    }
    CHECK(fs::exists(dump / "checkpoint/step-20/config.yaml"));
  }
}
