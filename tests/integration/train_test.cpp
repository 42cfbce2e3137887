// `titan train` end to end on a tiny Llama 3: it learns, resumes
// bit-for-bit, applies the non-finite loss policy and a precision plugin's
// dtypes, stops cleanly on SIGTERM, and turns bad inputs into one clear
// error with a non-zero exit.
#include "doctest_torch.hpp"
#include <signal.h>
#include <spawn.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.hpp"

extern char** environ;

namespace fs = std::filesystem;
using titan::test::read_file;
using titan::test::relative;
using titan::test::run_command;

namespace {

// A small model and batch so that each run takes seconds on one thread.
const char* kTinyRun = R"(job:
  dump_folder: DUMP
model:
  name: llama3
  flavor: debugmodel
  dim: 64
  n_layers: 2
  n_heads: 4
  max_seq_len: 64
  tokenizer_path: assets/tokenizer/stories_bpe.json
optimizer:
  name: AdamW
  lr: 3.0e-3
lr_scheduler:
  warmup_steps: 5
training:
  local_batch_size: 4
  seq_len: 32
  steps: 20
  threads: 1
  dataset: stories
metrics:
  log_freq: 1
checkpoint:
  enable: true
  interval: 10
  keep_latest_k: 0
)";

fs::path write_run(const std::string& name, const std::string& extra = "") {
  fs::path dir = titan::test::temp_dir("train_" + name);
  std::string yaml = kTinyRun;
  yaml.replace(yaml.find("DUMP"), 4, (dir / "out").string());
  titan::test::write_file(dir / "run.yaml", yaml + extra);
  return dir;
}

titan::test::CommandResult train(const fs::path& dir, const std::string& args = "") {
  return run_command("cd " + titan::test::source_dir() + " && " + titan::test::titan_binary() + " train " +
                     (dir / "run.yaml").string() + " " + args);
}

std::vector<nlohmann::json> train_metrics_of(const fs::path& dir) {
  std::vector<nlohmann::json> lines;
  std::stringstream text(read_file(dir / "out" / "metrics.jsonl"));
  for (std::string line; std::getline(text, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

std::map<int64_t, double> train_losses_of(const fs::path& dir) {
  std::map<int64_t, double> losses;
  for (const auto& line : train_metrics_of(dir)) {
    // JSON has no NaN: a non-finite loss is written as null.
    losses[line["step"].get<int64_t>()] = line["loss_metrics/global_avg_loss"].is_number() ? line["loss_metrics/global_avg_loss"].get<double>() : std::nan("");
  }
  return losses;
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_SUITE("train") {
  TEST_CASE("the loss falls and metrics.jsonl has every documented field, each holding what docs/metrics.md says") {
    fs::path dir = write_run("learns");
    // A peak far below the real one: MFU is capped at 100% with one warning.
    auto result = train(dir, "--set training.steps=40 --set checkpoint.enable=false --set metrics.peak_flops=1");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    auto lines = train_metrics_of(dir);
    REQUIRE(lines.size() == 40);
    size_t warnings = 0;
    for (size_t at = 0; (at = result.output.find("logged as 100%", at)) != std::string::npos; ++at) ++warnings;
    CHECK(warnings == 1);
    const double capacity = [] {  // RAM, or the cgroup's limit when lower
      std::istringstream meminfo(read_file("/proc/meminfo"));
      std::string key;
      double kib = 0;
      meminfo >> key >> kib;
      double bytes = kib * 1024;
      std::ifstream limit("/sys/fs/cgroup/memory.max");
      std::string value;
      if (limit >> value && value != "max") bytes = std::min(bytes, std::stod(value));
      return bytes;
    }();
    const double flops_per_token = lines[0]["tflops"].get<double>() / lines[0]["throughput(tps)"].get<double>();
    for (const auto& line : lines) {
      CAPTURE(line.dump());
      const double step = line["step"].get<double>();
      CHECK(line["loss_metrics/global_max_loss"] == line["loss_metrics/global_avg_loss"]);  // one rank
      CHECK(line["n_tokens_seen"].get<double>() == step * 4 * 32);
      CHECK(line["mfu(%)"].get<double>() == 100.0);
      CHECK(line["tflops"].get<double>() / line["throughput(tps)"].get<double>() ==
            doctest::Approx(flops_per_token).epsilon(1e-9));
      CHECK(line["time_metrics/end_to_end(s)"].get<double>() > 0);
      CHECK(line["time_metrics/data_loading(s)"].get<double>() < line["time_metrics/end_to_end(s)"].get<double>());
      CHECK(line["time_metrics/data_loading(%)"].get<double>() >= 0);
      CHECK(line["time_metrics/data_loading(%)"].get<double>() < 100);
      for (const char* memory : {"memory/max_active", "memory/max_reserved"}) {
        const double gib = line[std::string(memory) + "(GiB)"].get<double>();
        CHECK(gib > 0);
        CHECK(gib * double(1ull << 30) / (line[std::string(memory) + "(%)"].get<double>() / 100) ==
              doctest::Approx(capacity).epsilon(1e-6));
      }
      CHECK(line["memory/num_ooms"].get<double>() == 0);  // CPU
    }
    // At least 6 FLOPs per token for each of the model's more than 100k parameters.
    CHECK(flops_per_token * 1e12 > 6 * 100e3);
    for (const char* key : {"step", "loss_metrics/global_avg_loss", "loss_metrics/global_max_loss", "grad_norm", "lr",
                            "throughput(tps)", "tflops", "mfu(%)", "n_tokens_seen", "time_metrics/end_to_end(s)",
                            "time_metrics/data_loading(s)", "time_metrics/data_loading(%)", "time_metrics/elapsed(s)",
                            "memory/max_active(GiB)", "memory/max_active(%)", "memory/max_reserved(GiB)",
                            "memory/max_reserved(%)", "memory/num_alloc_retries", "memory/num_ooms",
                            "memory/state(GiB)"}) {
      CHECK_MESSAGE(lines.back().contains(key), key);
    }
    double first = lines.front()["loss_metrics/global_avg_loss"], last = lines.back()["loss_metrics/global_avg_loss"];
    CHECK(first > 6.5);  // ~ln(1444) = 7.3 at init
    CHECK(last < 0.75 * first);
    CHECK(fs::exists(dir / "out" / "config.resolved.yaml"));
    CHECK(read_file(dir / "out" / "config.resolved.yaml").find("warmup_steps: 5") != std::string::npos);
  }

  TEST_CASE("20 straight steps equal 10 steps + crash + resume + 10 steps, bit for bit (the resumed half with "
            "glibc's default host allocator: the allocator changes no number)") {
    fs::path straight = write_run("straight");
    auto a = train(straight);
    REQUIRE_MESSAGE(a.exit_code == 0, a.output);
    CHECK_MESSAGE(a.output.find("host allocator: caching") != std::string::npos, a.output);
    // The same 20-step run, "crashed" right after its step-10 checkpoint:
    // remove everything it produced later, then start it again.
    fs::path resumed = write_run("resumed");
    auto b1 = train(resumed);
    REQUIRE_MESSAGE(b1.exit_code == 0, b1.output);
    fs::remove_all(resumed / "out/checkpoint/step-20");
    fs::remove(resumed / "out/metrics.jsonl");
    auto b2 = train(resumed, "--set training.cpu_allocator=system");
    REQUIRE_MESSAGE(b2.exit_code == 0, b2.output);
    CHECK_MESSAGE(b2.output.find("host allocator: system") != std::string::npos, b2.output);
    CHECK(b2.output.find("resumed from checkpoint at step 10") != std::string::npos);
    auto straight_losses = train_losses_of(straight), resumed_losses = train_losses_of(resumed);
    REQUIRE(resumed_losses.size() == 10);
    for (int64_t step = 11; step <= 20; ++step) {
      CHECK_MESSAGE(straight_losses[step] == resumed_losses[step], "step ", step);  // exact
    }
    // Parameters, optimizer states and RNG after step 20: identical bytes.
    CHECK(bytes_of(straight / "out/checkpoint/step-20/shard-00000.bin") ==
          bytes_of(resumed / "out/checkpoint/step-20/shard-00000.bin"));
  }

  TEST_CASE("a non-finite loss stops with a clear error by default, or is skipped") {
    fs::path dir = write_run("nan_error");
    // The step reads nothing on the host: the bad step is named at the next
    // log step (15 here), before any later checkpoint is written.
    auto result = train(dir, "--set debug.inject_nonfinite_loss_at_step=13 --set metrics.log_freq=5");
    CHECK(result.exit_code == 1);
    CHECK_MESSAGE(result.output.find("titan: error: step 13: the loss or the gradient norm is not finite") !=
                      std::string::npos, result.output);
    CHECK(result.output.find("step     15") == std::string::npos);  // no log line of the diverged step
    CHECK(result.output.find("training.on_nonfinite_loss=skip") != std::string::npos);
    CHECK(fs::exists(dir / "out/checkpoint/step-10/metadata.json"));  // saved work is kept

    fs::path skip = write_run("nan_skip");
    result = train(skip, "--set debug.inject_nonfinite_loss_at_step=13 --set training.on_nonfinite_loss=skip");
    CHECK_MESSAGE(result.exit_code == 0, result.output);
    CHECK(result.output.find("step 13: non-finite loss") != std::string::npos);
    CHECK(train_losses_of(skip).size() == 20);
  }

  TEST_CASE("a precision plugin's dtypes replace training.mixed_precision_* and the run still learns") {
    fs::path dir = write_run("precision_plugin", "plugins:\n  - name: fsdp\n  - name: bf16_policy\n");
    auto result = train(dir, "--set checkpoint.enable=false --set job.plugin_path=[" +
                                 std::string(titan::test::paths::test_plugin_dir) + "]");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK(result.output.find("precision policy: params BFloat16 / reduce Float") != std::string::npos);
    CHECK(result.output.find("params BFloat16 / reduce Float, reshard") != std::string::npos);  // fsdp got them
    auto losses = train_losses_of(dir);
    REQUIRE(losses.size() == 20);
    for (const auto& [step, loss] : losses) CHECK_MESSAGE(std::isfinite(loss), "step ", step);
    // Batches differ step to step: compare the means of the first and last four.
    double first = (losses[1] + losses[2] + losses[3] + losses[4]) / 4;
    double last = (losses[17] + losses[18] + losses[19] + losses[20]) / 4;
    CHECK(last < first - 0.1);
  }

  TEST_CASE("training.mixed_precision_param=bfloat16 with no parallelizer autocasts the forward, as TorchTitan: "
            "the float32 curve within 1e-2, yet not equal to it; with FSDP, FSDP applies it") {
    const std::string run = "--set checkpoint.enable=false --set training.steps=4 --set metrics.log_freq=1 ";
    fs::path fp32 = write_run("fp32_no_parallelizer");
    auto result = train(fp32, run);
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    fs::path bf16 = write_run("bf16_no_parallelizer");
    result = train(bf16, run + "--set training.mixed_precision_param=bfloat16");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK(result.output.find("training.mixed_precision_param=bfloat16: float32 weights, the forward under "
                             "autocast") != std::string::npos);
    CHECK(result.output.find("takes effect through a parallelizer") == std::string::npos);
    const auto fp32_losses = train_losses_of(fp32), bf16_losses = train_losses_of(bf16);
    REQUIRE(fp32_losses.size() == 4);
    REQUIRE(bf16_losses.size() == 4);
    double worst = 0;
    for (const auto& [step, loss] : fp32_losses) worst = std::max(worst, relative(bf16_losses.at(step), loss));
    MESSAGE("autocast bf16 vs float32 loss: max relative difference " << worst);
    CHECK(worst <= 1e-2);
    CHECK(worst > 0);  // the matmuls really ran in bf16
    fs::path fsdp = write_run("bf16_fsdp", "plugins:\n  - name: fsdp\n");
    result = train(fsdp, run + "--set training.mixed_precision_param=bfloat16");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK(result.output.find("under autocast") == std::string::npos);
  }

  TEST_CASE("SIGTERM stops after the current step and saves a checkpoint") {
    fs::path dir = write_run("sigterm");
    std::string command = "cd " + titan::test::source_dir() + " && exec " + titan::test::titan_binary() +
                          " train " + (dir / "run.yaml").string() +
                          " --set training.steps=100000 --set checkpoint.interval=100000 > " +
                          (dir / "log.txt").string() + " 2>&1";
    pid_t pid = 0;
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline &&
           (!fs::exists(dir / "out/metrics.jsonl") || train_metrics_of(dir).size() < 3)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    REQUIRE(kill(pid, SIGTERM) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    std::string log = read_file(dir / "log.txt");
    CHECK(log.find("received signal 15; stopped cleanly after step") != std::string::npos);
    int64_t last = train_metrics_of(dir).back()["step"];
    CHECK(last < 100000);
    CHECK(fs::exists(dir / "out/checkpoint" / ("step-" + std::to_string(last)) / "metadata.json"));
  }

  TEST_CASE("bad inputs: one clear error, non-zero exit, no trace") {
    auto expect_error = [](const std::string& name, const std::string& args, const std::string& message) {
      fs::path dir = write_run(name);
      auto result = train(dir, args + " --set checkpoint.enable=false");
      CHECK_MESSAGE(result.exit_code == 1, name, ": ", result.output);
      CHECK_MESSAGE(result.output.find(message) != std::string::npos, name, ": ", result.output);
      CHECK(result.output.find("Exception raised from") == std::string::npos);
      CHECK(result.output.find("internal error") == std::string::npos);
    };
    expect_error("missing_tokenizer", "--set model.tokenizer_path=/nonexistent/tok.json", "/nonexistent/tok.json");
    fs::path empty = titan::test::temp_dir("train_empty_data") / "empty.jsonl";
    titan::test::write_file(empty, "");
    expect_error("empty_dataset", "--set training.dataset_path=" + empty.string(), "no documents");
    expect_error("unreadable_data", "--set training.dataset_path=/nonexistent/data.jsonl", "/nonexistent/data.jsonl");
    fs::path garbage = titan::test::temp_dir("train_garbage") / "data.jsonl";
    titan::test::write_file(garbage, "{\"text\": \"fine\"}\nnot json at all\n");
    expect_error("malformed_data", "--set training.dataset_path=" + garbage.string(), "line 2");
    expect_error("bad_allocator", "--set training.cpu_allocator=jemalloc", "cpu_allocator");
  }

  TEST_CASE("a corrupt checkpoint is refused by name and resume falls back to the newest intact one") {
    fs::path dir = write_run("corrupt");
    auto result = train(dir);
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    fs::path latest = dir / "out/checkpoint/step-20/shard-00000.bin";
    std::string before10 = bytes_of(dir / "out/checkpoint/step-10/shard-00000.bin");
    {
      std::fstream file(latest, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(-64, std::ios::end);
      file.write("CORRUPTED", 9);
    }
    result = train(dir, "--set training.steps=30 --set checkpoint.load_step=20");
    CHECK_MESSAGE(result.exit_code == 1, result.output);
    CHECK_MESSAGE(result.output.find("step-20/shard-00000.bin' fails its checksum") != std::string::npos, result.output);
    CHECK(result.output.find("nothing was loaded") != std::string::npos);
    result = train(dir, "--set training.steps=30");
    CHECK_MESSAGE(result.exit_code == 0, result.output);
    CHECK(result.output.find("step-20 is unusable") != std::string::npos);
    CHECK(result.output.find("resumed from checkpoint at step 10") != std::string::npos);
    CHECK(result.output.find("the newest intact checkpoint") != std::string::npos);
    CHECK(bytes_of(dir / "out/checkpoint/step-10/shard-00000.bin") == before10);
  }
}
