// The validation section: a no-grad eval pass over a held-out set every
// `freq` steps, from the set's start each time, the same under FSDP and
// through pipeline schedules (forward only) as on one process; `steps: -1`
// runs the whole set once and the ranks stop together.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <regex>

#include "test_support.hpp"

namespace fs = std::filesystem;
using titan::test::has;

namespace {

struct Validation {
  int64_t step;
  double loss;
  int64_t batches;
};

std::vector<Validation> validations(const fs::path& dump) {
  std::vector<Validation> out;
  std::istringstream lines(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    if (!record.contains("validation_metrics/loss")) continue;
    out.push_back({record["step"].get<int64_t>(), record["validation_metrics/loss"].get<double>(),
                   static_cast<int64_t>(record["validation_metrics/batches"].get<double>())});
  }
  return out;
}

// The debug model shrunk to seconds; `extra` adds --set options.
std::string train_validated(const fs::path& dump, const std::string& extra) {
  return titan::test::titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.threads=1 --set training.steps=4 --set checkpoint.enable=false"
         " --set validation.enable=true --set validation.freq=2 --set job.dump_folder=" +
         dump.string() + extra;
}

// A small held-out file, so steps: -1 (the whole set) is a few batches;
// the --set options that validate on it.
std::string whole_heldout_set(const fs::path& dir) {
  std::string docs;
  for (int i = 0; i < 9; ++i) {
    docs += "{\"text\": \"Held-out story " + std::to_string(i) +
            ": a small fox found a red ball near the river and played with it until the sun went down.\"}\n";
  }
  titan::test::write_file(dir / "heldout.jsonl", docs);
  return " --set validation.steps=-1 --set validation.dataset_path=" + (dir / "heldout.jsonl").string();
}

// Each rank's logged validation losses ("validation at step 2: loss 7.5940")
// by step, as printed.
std::map<int64_t, std::map<int, std::string>> logged_losses(const std::string& output) {
  std::map<int64_t, std::map<int, std::string>> by_step;
  const std::regex line(R"(\[rank (\d+)\][^\n]*validation at step (\d+): loss +([-0-9.naif]+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    by_step[std::stoll((*it)[2])][std::stoi((*it)[1])] = (*it)[3];
  }
  return by_step;
}

void check_same_validations(const std::vector<Validation>& reference, const std::vector<Validation>& run) {
  REQUIRE(reference.size() == 2);
  REQUIRE(run.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    CHECK(reference[i].batches >= 2);
    CHECK(run[i].step == reference[i].step);
    CHECK(run[i].batches == reference[i].batches);
    CHECK(std::abs(run[i].loss - reference[i].loss) <= 1e-5 * std::abs(reference[i].loss));
  }
}

std::string launch(int ranks, int port) {
  return titan::test::titan_binary() + " launch --nproc-per-node " + std::to_string(ranks) + " --master-port " +
         std::to_string(port) + " --grace-period-s 5 -- ";
}

}  // namespace

TEST_SUITE("validation") {
  TEST_CASE("validation: each pass starts the held-out set afresh and sees the model as trained so far") {
    fs::path frozen = titan::test::temp_dir("validation_frozen") / "out";
    auto result = titan::test::run_command("timeout 300 " + train_validated(frozen, " --set training.local_batch_size=4"
                                                                          " --set validation.steps=3"
                                                                          " --set optimizer.lr=0"));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    auto same = validations(frozen);
    REQUIRE(same.size() == 2);
    CHECK(same[0].step == 2);
    CHECK(same[1].step == 4);
    CHECK(same[0].batches == 3);
    // lr 0: the model does not change, so a fresh pass gives the same loss.
    CHECK(same[0].loss == same[1].loss);
    CHECK(has(result.output, "validation at step 2: loss"));

    fs::path trained = titan::test::temp_dir("validation_trained") / "out";
    result = titan::test::run_command("timeout 300 " + train_validated(trained, " --set training.local_batch_size=4"
                                                                      " --set validation.steps=3"));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    auto moved = validations(trained);
    REQUIRE(moved.size() == 2);
    CHECK(moved[0].loss != moved[1].loss);
    CHECK(moved[1].loss != same[1].loss);
  }

  TEST_CASE("validation: FSDP on 2 ranks gives the single process's validation losses, the whole set once included") {
    fs::path dir = titan::test::temp_dir("validation_fsdp");
    const std::string whole = whole_heldout_set(dir);
    auto one = titan::test::run_command("timeout 300 " + train_validated(dir / "one", " --set training.local_batch_size=4" + whole));
    REQUIRE_MESSAGE(one.exit_code == 0, one.output);
    auto two = titan::test::run_command("timeout 300 " + launch(2, 29993) +
                                        train_validated(dir / "two", " --set training.local_batch_size=2 --set 'plugins=[{name: fsdp}]'" +
                                                               whole));
    REQUIRE_MESSAGE(two.exit_code == 0, two.output);
    check_same_validations(validations(dir / "one"), validations(dir / "two"));
  }

  TEST_CASE("validation: through 1F1B, InterleavedZeroBubble and 1F1B x FSDP on 2 pipeline stages the losses are "
            "the single process's, the whole set once, the same on every rank") {
    fs::path dir = titan::test::temp_dir("validation_pp");
    const std::string whole = whole_heldout_set(dir);
    auto one = titan::test::run_command("timeout 300 " + train_validated(dir / "one", " --set training.local_batch_size=4" + whole));
    REQUIRE_MESSAGE(one.exit_code == 0, one.output);
    const auto reference = validations(dir / "one");
    struct Pipelined {
      std::string schedule, plugins;
      int ranks, local_batch_size, port;
    };
    // 2 layers: 2 stages, or 4 (one per module group) for the interleaved
    // schedule, whose W actions (split weight gradients) the pass skips.
    for (const Pipelined& run : {Pipelined{"1F1B", "", 2, 4, 29995}, Pipelined{"InterleavedZeroBubble", "", 2, 4, 29997},
                                 Pipelined{"1F1B", ", {name: fsdp}", 4, 2, 29999}}) {
      const std::string name = run.schedule + (run.plugins.empty() ? "" : "_fsdp");
      CAPTURE(name);
      const std::string plugins = " --set 'plugins=[{name: pipeline, pipeline_parallel_degree: 2, "
                                  "pipeline_parallel_schedule: " +
                                  run.schedule + ", num_pp_microbatches: 2}" + run.plugins + "]'";
      auto pp = titan::test::run_command(
          "timeout 300 " + launch(run.ranks, run.port) +
          train_validated(dir / name, " --set training.local_batch_size=" + std::to_string(run.local_batch_size) + plugins +
                                whole));
      REQUIRE_MESSAGE(pp.exit_code == 0, pp.output);
      check_same_validations(reference, validations(dir / name));
      // Only the last stage computes the loss; every rank logs the sum.
      const auto logged = logged_losses(pp.output);
      REQUIRE_MESSAGE(logged.size() == 2, pp.output);
      for (const auto& [step, by_rank] : logged) {
        CAPTURE(step);
        CHECK(by_rank.size() == static_cast<size_t>(run.ranks));
        for (const auto& [rank, loss] : by_rank) CHECK(loss == by_rank.at(0));
      }
    }
  }

  TEST_CASE("validation: bad settings are refused naming the key") {
    auto check = titan::test::run_command(titan::test::titan_binary() + " config check " +
                                          titan::test::source_dir() + "/configs/llama3_debugmodel.yaml" +
                                          " --set validation.steps=0");
    CHECK(check.exit_code != 0);
    CHECK_MESSAGE(has(check.output, "validation.steps: expected a count >= 1, or -1"), check.output);
    // Through a pipeline the batch splits into the schedule's microbatches.
    auto split = titan::test::run_command(
        titan::test::titan_binary() + " config check " + titan::test::source_dir() +
        "/configs/llama3_debugmodel.yaml --set validation.enable=true --set training.local_batch_size=4"
        " --set validation.local_batch_size=3"
        " --set 'plugins=[{name: pipeline, pipeline_parallel_degree: 2, num_pp_microbatches: 2}]'");
    CHECK(split.exit_code != 0);
    CHECK_MESSAGE(has(split.output, "validation.local_batch_size (3) does not split into the pipeline's 2 microbatches"),
                  split.output);
  }
}
