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
