// `titan generate` on a checkpoint step folder a short run wrote: greedy
// text with the decoding rate, sampled ids that follow the seed, and one
// clear error (non-zero exit) for each kind of bad input. Its equality with
// transformers' generate() is in real_readers_test.cpp.
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::has;

std::string generate_titan() { return "cd " + titan::test::source_dir() + " && timeout 300 " + titan::test::titan_binary(); }

// The one JSON line of `titan generate --json` (logs go to stderr, before it).
nlohmann::json generate_json(const titan::test::CommandResult& result) {
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  std::istringstream lines(result.output);
  std::string json;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') json = line;
  }
  REQUIRE(!json.empty());
  return nlohmann::json::parse(json);
}

}  // namespace

TEST_CASE("titan generate: a step folder's greedy text and decoding rate, sampled ids that follow the seed, and a "
          "clear error for each bad input") {
  const fs::path dump = titan::test::temp_dir("generate_command");
  auto trained = titan::test::run_command(
      generate_titan() +
      " train configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
      " --set training.seq_len=32 --set training.local_batch_size=2 --set training.threads=1 --set training.steps=2"
      " --set checkpoint.enable=true --set checkpoint.interval=2 --set job.dump_folder=" +
      dump.string());
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  const std::string step = (dump / "checkpoint/step-2").string();
  const std::string generate = generate_titan() + " generate " + step + " --set training.threads=1";

  auto greedy = titan::test::run_command(generate + " --prompt 'Once upon a time' --max-new-tokens 8 --ignore-eos");
  CHECK_MESSAGE(greedy.exit_code == 0, greedy.output);
  CHECK_MESSAGE(has(greedy.output, "Once upon a time"), greedy.output);
  CHECK_MESSAGE(has(greedy.output, "8 tokens (greedy): prompt of 5 tokens"), greedy.output);
  CHECK_MESSAGE(has(greedy.output, "tokens/s with a KV cache"), greedy.output);

  // The same model as a Hugging Face folder (with the run's config) continues the same way.
  auto greedy_ids = [&](const std::string& command) {
    return generate_json(titan::test::run_command(command + " --prompt 'Once upon a time' --max-new-tokens 8"
                                                            " --ignore-eos --json"))["ids"];
  };
  const std::string hf = (dump / "hf").string();
  auto exported = titan::test::run_command(generate_titan() + " checkpoint export " + step + " --out " + hf);
  REQUIRE_MESSAGE(exported.exit_code == 0, exported.output);
  CHECK(greedy_ids(generate_titan() + " generate " + hf + " --config " + step + "/config.yaml") == greedy_ids(generate));

  auto sampled = [&](int seed) {
    auto out = generate_json(titan::test::run_command(
        generate + " --prompt 'Once' --max-new-tokens 10 --ignore-eos --json --temperature 1.0 --top-k 200"
                   " --top-p 0.95 --seed " + std::to_string(seed)));
    CHECK(out["ids"].size() == 10);
    CHECK(out["tokens_per_sec"].get<double>() > 0);
    return out["ids"];
  };
  const auto first = sampled(3);
  CHECK(sampled(3) == first);
  CHECK(sampled(4) != first);  // a model two steps from init samples nearly uniformly from 200 tokens

  struct BadInput {
    std::string args, says;
  };
  const BadInput bad[] = {
      {step + " --max-new-tokens 4", "--prompt TEXT is required"},
      {(dump / "nowhere").string() + " --prompt hi", "is not a folder"},
      {dump.string() + " --prompt hi", "has no config.yaml; expected a checkpoint step folder"},
      {hf + " --prompt hi", "is a Hugging Face folder: give the run config of its model with --config"},
      {step + " --prompt hi --top-p 1.5", "--top-p must be in (0, 1]"},
      {step + " --prompt hi --temperature -1", "--temperature must be >= 0"},
      {step + " --prompt hi --max-new-tokens x", "--max-new-tokens: expected an integer >= 0, got 'x'"},
      {step + " --prompt hi --beams 4", "unknown option '--beams'"},
  };
  for (const auto& [args, says] : bad) {
    CAPTURE(args);
    auto result = titan::test::run_command(generate_titan() + " generate " + args);
    CHECK(result.exit_code != 0);
    CHECK_MESSAGE(has(result.output, says), result.output);
  }
}
