// Tied embeddings (model.enable_weight_tying) in real runs: FSDP on 2 ranks
// reproduces the single process (the one matrix's gradient from both ends,
// reduced once), and so does tensor parallelism on 2 ranks (both ends split
// over the vocabulary: the head reads the embedding's shard), with loss
// parallel and with the logits gathered. Under a pipeline the two ends are on
// different stages: the last holds a copy, the two gradients are summed, and
// the checkpoint holds the matrix once. The HF side (a transformers-saved
// tied Llama) is in real_readers_test.cpp.
#include "equivalence_runs.hpp"

namespace {

using titan::test::check_equivalent;
using titan::test::kSmallModel;
using titan::test::run_command;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;
namespace fs = std::filesystem;

const std::string kTied = kSmallModel + " --set model.enable_weight_tying=true";

}  // namespace

TEST_CASE("tied embeddings: FSDP on 2 ranks and TP on 2 ranks (loss parallel, or the logits gathered) reproduce the "
          "single process, and nothing saves an output head") {
  RunOutput reference = run_single("tied_reference", kTied);
  RunOutput fsdp = run_ranks("tied_fsdp2", 2, 29457, "{name: fsdp}", kTied);
  check_equivalent(fsdp, reference, 1e-5);
  const std::string tp = "{name: tensor_parallel, tensor_parallel_degree: 2}";
  check_equivalent(run_ranks("tied_tp2", 2, 29462, tp + ", {name: loss_parallel}", kTied, /*dp=*/1), reference, 1e-5);
  check_equivalent(run_ranks("tied_tp2_gathered", 2, 29467, tp, kTied, /*dp=*/1), reference, 1e-5);
  CHECK_FALSE(reference.params.contains("output.weight"));
  CHECK(reference.params.contains("tok_embeddings.weight"));
  // The check can fail: the untied model trains another curve from step 2 on.
  RunOutput untied = run_single("tied_untied", kSmallModel);
  CHECK(std::abs(untied.losses.back() - reference.losses.back()) > 1e-3 * reference.losses.back());
}

TEST_CASE("tied embeddings: PP2 (1F1B, and FSDP2 x PP2) reproduces the single process, its checkpoint holds the "
          "matrix once and resumes in one process on the same curve") {
  RunOutput reference = run_single("tied_pp_reference", kTied);
  const std::string pp = "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: 1F1B, "
                         "num_pp_microbatches: 4}";
  const std::string checkpoints =
      " --set checkpoint.enable=true --set checkpoint.interval=5 --set checkpoint.keep_latest_k=0";
  RunOutput pp2 = run_ranks("tied_pp2", 2, 29472, pp, kTied + checkpoints, /*dp=*/1);
  check_equivalent(pp2, reference, 1e-5);
  check_equivalent(run_ranks("tied_fsdp2_pp2", 4, 29477, "{name: fsdp}, " + pp, kTied, /*dp=*/2), reference, 1e-5);

  // The first stage's copy is written, once; the parameter and its AdamW moments.
  const fs::path step5 = pp2.dump / "checkpoint/step-5";
  auto metadata = nlohmann::json::parse(titan::test::read_file(step5 / "metadata.json"));
  const auto& tensors = metadata["tensors"];
  CHECK_FALSE(tensors.contains("model.output.weight"));
  for (const std::string name : {"model.tok_embeddings.weight", "optim.tok_embeddings.weight.exp_avg",
                                 "optim.tok_embeddings.weight.exp_avg_sq"}) {
    INFO(name);
    REQUIRE(tensors.contains(name));
    CHECK(tensors[name]["shards"].size() == 1);
  }
  // Steps 6-10 in one process from PP2's step 5: the curve PP2 trained.
  fs::path dump = titan::test::temp_dir("tied_pp2_resumed");
  fs::create_directories(dump / "checkpoint");
  fs::copy(step5, dump / "checkpoint/step-5", fs::copy_options::recursive);
  auto result = run_command("timeout 300 " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
                            "/configs/llama3_debugmodel.yaml --set training.local_batch_size=8" +
                            titan::test::common_sets(dump) + kTied + checkpoints);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(titan::test::has(result.output, "resumed from checkpoint at step 5"));
  RunOutput resumed = titan::test::read_run(dump);
  REQUIRE(resumed.losses.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(titan::test::relative(resumed.losses[i], reference.losses[5 + i]) <= 1e-5);
}

TEST_CASE("tied embeddings: a schedule with both ends on one rank is refused by name before training, the fused loss "
          "head when it is wired") {
  const std::string titan = "cd " + titan::test::source_dir() + " && timeout 120 " + titan::test::titan_binary();
  const std::string pp = " config check configs/llama3_debugmodel_pp.yaml --world-size 2";
  auto result = run_command(titan + pp + " --set model.enable_weight_tying=true --set "
                                         "plugins.pipeline.pipeline_parallel_schedule=ZBVZeroBubble");
  CHECK(result.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(result.output, "model.enable_weight_tying: the schedule ZBVZeroBubble (v placement"),
                result.output);
  CHECK_MESSAGE(titan::test::has(result.output, "puts the first and the last stage, which both hold the tied "
                                                "embedding matrix, on pp rank 0"),
                result.output);
  CHECK(run_command(titan + pp + " --set model.enable_weight_tying=true").exit_code == 0);
  // The fused loss head multiplies an output weight of its own.
  auto fused = run_command(titan + " train configs/llama3_debugmodel.yaml --set training.steps=1 --set "
                                   "model.enable_weight_tying=true --set 'plugins=[{name: fused_kernels}]'");
  CHECK(fused.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(fused.output, "tied to the embeddings (model.enable_weight_tying); set "
                                               "cross_entropy: false"),
                fused.output);
}
