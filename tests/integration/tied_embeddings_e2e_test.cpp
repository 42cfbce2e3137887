// Tied embeddings (model.enable_weight_tying) in real runs: FSDP on 2 ranks
// reproduces the single process (the one matrix's gradient from both ends,
// reduced once), and so does tensor parallelism on 2 ranks (both ends split
// over the vocabulary: the head reads the embedding's shard), with loss
// parallel and with the logits gathered; a pipeline, which would put the two
// ends on different stages, is refused by name before training. The HF side (a transformers-saved tied Llama) is
// in real_readers_test.cpp.
#include "equivalence_runs.hpp"

namespace {

using titan::test::check_equivalent;
using titan::test::kSmallModel;
using titan::test::run_command;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

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

TEST_CASE("tied embeddings: a pipeline is refused by name before training, the fused loss head when it is wired") {
  const std::string titan = "cd " + titan::test::source_dir() + " && timeout 120 " + titan::test::titan_binary();
  const std::string pp = " config check configs/llama3_debugmodel_pp.yaml --world-size 2";
  auto result = run_command(titan + pp + " --set model.enable_weight_tying=true");
  CHECK(result.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(result.output, "model.enable_weight_tying: the output head tied to the embeddings is "
                                                "not supported with pipeline parallelism"),
                result.output);
  CHECK(run_command(titan + pp).exit_code == 0);
  // The fused loss head multiplies an output weight of its own.
  auto fused = run_command(titan + " train configs/llama3_debugmodel.yaml --set training.steps=1 --set "
                                   "model.enable_weight_tying=true --set 'plugins=[{name: fused_kernels}]'");
  CHECK(fused.exit_code != 0);
  CHECK_MESSAGE(titan::test::has(fused.output, "tied to the embeddings (model.enable_weight_tying); set "
                                               "cross_entropy: false"),
                fused.output);
}
