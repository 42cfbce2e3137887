// The loss over the global batch's labels that carry loss: with
// training.ignore_cross_document_labels on documents of 1 to 24 words,
// rows, microbatches and ranks hold very different counts of such labels,
// and the step's loss is still their sum over the whole global batch divided
// by their count. So FSDP2 (4 rows a rank), gradient accumulation (two
// microbatches of 4), PP2 with 4 microbatches and CP2 (ring attention:
// uneven pieces of each sequence) reproduce one process on the batch of 8
// in loss, grad norm, parameters and validation loss (measured within
// 1.7e-7), where a mean of per-microbatch (or per-rank) means does not:
// with the weights off (and CP's piece share 1), grad norms were 1.1e-3 to
// 1.7e-3 and parameters 1.8e-3 to 2.9e-3 off, 100 times the tolerance.
#include "equivalence_runs.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::check_equivalent;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

std::string ignored_labels() {
  static const fs::path documents = titan::test::write_uneven_documents("loss_normalization_data");
  return titan::test::kSmallModel + " --set training.dataset_path=" + documents.string() +
         " --set training.ignore_cross_document_labels=true --set validation.enable=true --set validation.freq=5"
         " --set validation.steps=2 --set validation.dataset_path=" + documents.string();
}

std::vector<double> validation_losses(const RunOutput& run) {
  std::vector<double> losses;
  std::istringstream lines(titan::test::read_file(run.dump / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.contains("validation_metrics/loss")) losses.push_back(record["validation_metrics/loss"].get<double>());
  }
  return losses;
}

void check_same_validation(const RunOutput& run, const RunOutput& reference) {
  const std::vector<double> ours = validation_losses(run), theirs = validation_losses(reference);
  REQUIRE(theirs.size() == 2);
  REQUIRE(ours.size() == theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) CHECK(titan::test::relative(ours[i], theirs[i]) <= 1e-5);
}

}  // namespace

TEST_CASE("loss normalization: with ignored labels, FSDP2, gradient accumulation, PP2 and CP2 reproduce one process "
          "over the global batch's real labels, validation included") {
  const RunOutput reference = run_single("ln_reference", ignored_labels());
  const RunOutput fsdp = run_ranks("ln_fsdp2", 2, 29427, "{name: fsdp}", ignored_labels());
  check_equivalent(fsdp, reference, 1e-5);
  check_same_validation(fsdp, reference);
  const RunOutput accumulated = run_single("ln_accumulated", ignored_labels() +
                                                                 " --set training.local_batch_size=4"
                                                                 " --set training.global_batch_size=8"
                                                                 " --set validation.local_batch_size=8");
  check_equivalent(accumulated, reference, 1e-5);
  check_same_validation(accumulated, reference);
  const RunOutput pipelined = run_ranks("ln_pp2", 2, 29428,
                                        "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: "
                                        "1F1B, num_pp_microbatches: 4}",
                                        ignored_labels(), 1);
  check_equivalent(pipelined, reference, 1e-5);
  check_same_validation(pipelined, reference);
  check_equivalent(run_ranks("ln_cp2", 2, 29429, "{name: fsdp}, {name: context_parallel, context_parallel_degree: 2}",
                             ignored_labels(), 1),
                   reference, 1e-5);
}

TEST_CASE("loss normalization: first_fit packing (whole documents, padding that carries no loss) with block-causal "
          "attention: FSDP2 and PP2 reproduce one process") {
  static const fs::path documents = titan::test::write_uneven_documents("packing_data");
  const std::string packed = titan::test::kSmallModel + " --set training.dataset_path=" + documents.string() +
                             " --set training.packing=first_fit --set model.attn_mask_type=block_causal";
  const RunOutput reference = run_single("packed_reference", packed);
  check_equivalent(run_ranks("packed_fsdp2", 2, 29430, "{name: fsdp}", packed), reference, 1e-5);
  check_equivalent(run_ranks("packed_pp2", 2, 29431,
                             "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: 1F1B, "
                             "num_pp_microbatches: 4}",
                             packed, 1),
                   reference, 1e-5);
}

namespace {

// 200 conversations of 1 to 3 turns and uneven lengths (chat_data.jsonl),
// and the debug tokenizer with Llama 3's chat tokens added
// (chat_tokenizer.json).
fs::path write_chat_data(const std::string& name) {
  const fs::path dir = titan::test::temp_dir(name);
  nlohmann::json tokenizer =
      nlohmann::json::parse(titan::test::read_file(titan::test::source_dir() + "/assets/tokenizer/stories_bpe.json"));
  int64_t id = 0;
  for (const auto& token : tokenizer["added_tokens"]) id = std::max<int64_t>(id, token["id"].get<int64_t>() + 1);
  for (const char* name : {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}) {
    tokenizer["added_tokens"].push_back({{"id", id++}, {"content", name}, {"special", true}});
  }
  titan::test::write_file(dir / "chat_tokenizer.json", tokenizer.dump());
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "why", "did", "it", "run", "far", "home"};
  uint32_t state = 11;
  auto sentence = [&] {
    state = state * 1664525u + 1013904223u;
    std::string text;
    for (int i = 0, length = 1 + static_cast<int>(state >> 27) % 16; i < length; ++i) {
      state = state * 1664525u + 1013904223u;
      text += std::string(i ? " " : "") + words[(state >> 24) % 12];
    }
    return text;
  };
  std::ofstream out(dir / "chat_data.jsonl");
  for (int conversation = 0; conversation < 200; ++conversation) {
    nlohmann::json messages = nlohmann::json::array();
    for (int turn = 0, turns = 1 + conversation % 3; turn < turns; ++turn) {
      messages.push_back({{"role", "user"}, {"content", sentence()}});
      messages.push_back({{"role", "assistant"}, {"content", sentence()}});
    }
    out << nlohmann::json{{"messages", messages}}.dump() << "\n";
  }
  return dir;
}

}  // namespace

TEST_CASE("loss normalization: SFT conversations (llama3 template, prompts without loss), first_fit packing and "
          "block-causal attention: FSDP2 reproduces one process") {
  static const fs::path data = write_chat_data("sft_data");
  const std::string chats = titan::test::kSmallModel + " --set training.dataset_path=" +
                            (data / "chat_data.jsonl").string() + " --set model.tokenizer_path=" +
                            (data / "chat_tokenizer.json").string() +
                            " --set training.chat_template=llama3 --set training.packing=first_fit"
                            " --set model.attn_mask_type=block_causal";
  const RunOutput reference = run_single("sft_reference", chats);
  check_equivalent(run_ranks("sft_fsdp2", 2, 29432, "{name: fsdp}", chats), reference, 1e-5);
}
