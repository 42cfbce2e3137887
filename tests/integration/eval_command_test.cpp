// `titan eval`: the loss and perplexity of the model a run would resume
// with, on its validation set. Its loss is the one the training run logged
// for the same checkpoint's validation, to the bit; under FSDP on 2 ranks
// (the checkpoint resharded) it is the same within fp32 summation order; and
// with nothing to load it says it evaluated the initial weights.
#include "doctest_torch.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::has;

// A small llama3, a checkpoint at step 6 and a validation there (4 batches).
std::string run_sets(const fs::path& dump) {
  return titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.local_batch_size=4 --set training.threads=1"
         " --set training.steps=6 --set checkpoint.enable=true --set checkpoint.interval=6"
         " --set validation.freq=6 --set validation.steps=4 --set job.dump_folder=" +
         dump.string();
}

double logged_validation_loss(const fs::path& dump, int64_t step) {
  std::istringstream lines(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.contains("validation_metrics/loss") && record["step"] == step) {
      return record["validation_metrics/loss"].get<double>();
    }
  }
  FAIL("no validation loss logged at step " << step);
  return 0;
}

nlohmann::json eval_json(const titan::test::CommandResult& result, const fs::path& dump) {
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(titan::test::read_file(dump / "eval.json"));
}

}  // namespace

TEST_CASE("titan eval: a checkpoint's loss is the validation loss its run logged, in one process and under FSDP "
          "on 2 ranks; perplexity is exp(loss)") {
  const fs::path dump = titan::test::temp_dir("eval_command");
  const std::string titan = "timeout 300 " + titan::test::titan_binary();
  auto trained = titan::test::run_command(titan + " train " + run_sets(dump) + " --set validation.enable=true");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  const double logged = logged_validation_loss(dump, 6);

  auto one = titan::test::run_command(titan + " eval " + run_sets(dump));
  const nlohmann::json single = eval_json(one, dump);
  CHECK(has(one.output, "eval: loss "));
  CHECK(single["step"] == 6);
  CHECK(single["loaded"] == true);
  CHECK(single["batches"] == 4);
  CHECK(single["loss"].get<double>() == logged);
  CHECK(single["perplexity"].get<double>() == doctest::Approx(std::exp(logged)).epsilon(1e-12));

  // The same 4 batches of 4: each rank reads half of every batch.
  auto sharded = titan::test::run_command(titan + " launch --nproc-per-node 2 --master-port 29351 -- " +
                                          titan::test::titan_binary() + " eval " + run_sets(dump) +
                                          " --set 'plugins=[{name: fsdp}]' --set training.local_batch_size=2");
  const nlohmann::json fsdp = eval_json(sharded, dump);
  CHECK(fsdp["step"] == 6);
  CHECK(fsdp["loss"].get<double>() == doctest::Approx(logged).epsilon(1e-6));
}

TEST_CASE("titan eval: with no checkpoint and no initial_load_path it evaluates the initial weights and says so") {
  const fs::path dump = titan::test::temp_dir("eval_command_fresh");
  auto result = titan::test::run_command("timeout 300 " + titan::test::titan_binary() + " eval " + run_sets(dump));
  const nlohmann::json json = eval_json(result, dump);
  CHECK(json["loaded"] == false);
  CHECK(json["step"] == 0);
  CHECK(has(result.output, "evaluating the initial weights"));
  CHECK(has(result.output, "the initial weights ("));
  // Near ln(vocab) for a model that has learned nothing.
  CHECK(std::abs(json["loss"].get<double>() - std::log(1444.0)) < 1.0);
}
