// Block-causal attention (model.attn_mask_type: block_causal) under every
// layout against the single process, as real Gloo jobs on documents of
// uneven lengths packed into the windows: FSDP2, TP2 (sequence parallel),
// full activation checkpointing, the CPU fused kernels, PP2 with 1F1B and
// ZBVZeroBubble, CP2 ring attention (head-tail balanced) and Ulysses.
// Losses, grad norms and final parameters within 1e-5 relative; and the
// documents change the run (block-causal is not causal on this data).
#include "equivalence_runs.hpp"

namespace {

namespace fs = std::filesystem;
using titan::test::check_equivalent;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

// Four blocks: ZBVZeroBubble's two stages a rank on PP2 each get one.
const std::string kModel = " --set model.dim=64 --set model.n_layers=4 --set model.n_heads=4";

std::string block_causal(const std::string& more = "") {
  static const fs::path documents = titan::test::write_uneven_documents("block_causal_data");
  return kModel + " --set training.dataset_path=" + documents.string() + " --set model.attn_mask_type=block_causal" +
         more;
}

}  // namespace

TEST_CASE("block-causal: FSDP2, TP2, full activation checkpointing and the CPU fused kernels reproduce the single "
          "process; the documents change the run") {
  const RunOutput reference = run_single("bc_reference", block_causal());
  check_equivalent(run_ranks("bc_fsdp2", 2, 29421, "{name: fsdp}", block_causal()), reference, 1e-5);
  check_equivalent(run_ranks("bc_tp2", 2, 29422, "{name: tensor_parallel, tensor_parallel_degree: 2}",
                             block_causal(), 1),
                   reference, 1e-5);
  check_equivalent(run_single("bc_ac_full", block_causal(" --set 'plugins=[{name: activation_checkpoint, mode: full}]'")),
                   reference, 1e-5);
  check_equivalent(
      run_single("bc_fused_cpu", block_causal(" --set 'plugins=[{name: fused_kernels, cross_entropy_chunk: 500}]'")),
      reference, 1e-5);
  // The same data and model with plain causal attention: another curve,
  // 100 times the tolerance away (at init attention is nearly uniform, so
  // the gradients show it first: measured 2.8e-3 at step 1, 5.3e-3 at 10).
  const RunOutput causal = run_single("bc_causal", block_causal(" --set model.attn_mask_type=causal"));
  double apart = 0;
  for (size_t i = 0; i < causal.grad_norms.size(); ++i) {
    apart = std::max(apart, titan::test::relative(causal.grad_norms[i], reference.grad_norms[i]));
  }
  MESSAGE("causal vs block-causal: max relative grad norm difference " << apart);
  CHECK(apart > 1e-3);
}

TEST_CASE("block-causal: PP2 with 1F1B and ZBVZeroBubble, CP2 ring attention and Ulysses reproduce the single "
          "process") {
  const RunOutput reference = run_single("bc_reference_2", block_causal());
  // Every pp and cp rank reads the whole batch (dp = 1).
  check_equivalent(run_ranks("bc_pp2_1f1b", 2, 29423,
                             "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: 1F1B, "
                             "num_pp_microbatches: 4}",
                             block_causal(), 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("bc_pp2_zbv", 2, 29424,
                             "{name: pipeline, pipeline_parallel_degree: 2, pipeline_parallel_schedule: ZBVZeroBubble, "
                             "num_pp_microbatches: 4}",
                             block_causal(), 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("bc_cp2_ring", 2, 29425, "{name: fsdp}, {name: context_parallel, context_parallel_degree: 2}",
                             block_causal(), 1),
                   reference, 1e-5);
  check_equivalent(run_ranks("bc_cp2_ulysses", 2, 29426,
                             "{name: fsdp}, {name: context_parallel, context_parallel_degree: 2, "
                             "context_parallel_method: ulysses}",
                             block_causal(), 1),
                   reference, 1e-5);
}
