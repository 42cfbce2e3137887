// The fused kernels' wiring through the layer seam: the CPU kernels (the
// plugin's default on a CPU device) and the CUDA kernels' CPU emulations
// (`emulate: true`) each swap in every RMSNorm, rotary embedding, SwiGLU and
// the output head + loss (linear cross-entropy, no [tokens, vocab] logits
// kept), the CPU kernels also the attention core, and train like the ATen
// path: same curve within 1e-5, alone and under FSDP2 (the CPU kernels also
// under PP2). The CUDA kernels themselves need a GPU (tests/cuda).
#include "equivalence_runs.hpp"

namespace {

using titan::test::check_equivalent;
using titan::test::run_command;
using titan::test::run_ranks;
using titan::test::run_single;
using titan::test::RunOutput;

using titan::test::kSmallModel;
const std::string kFused = "{name: fused_kernels, emulate: true, cross_entropy_chunk: 500}";
const std::string kCpuKernels = "{name: fused_kernels, cross_entropy_chunk: 500}";

}  // namespace

TEST_CASE("fused kernels (CPU and emulated): RMSNorm, RoPE, SwiGLU, attention and the loss head train like the ATen "
          "path, alone and under FSDP2") {
  RunOutput reference = run_single("fused_reference", kSmallModel);
  RunOutput fused = run_single("fused_single", kSmallModel + " --set 'plugins=[" + kFused + "]'");
  check_equivalent(fused, reference, 1e-5);
  RunOutput fsdp = run_ranks("fused_fsdp_reference", 2, 29946, "{name: fsdp}", kSmallModel);
  RunOutput fsdp_fused = run_ranks("fused_fsdp", 2, 29951, "{name: fsdp}, " + kFused, kSmallModel);
  check_equivalent(fsdp_fused, fsdp, 1e-5);

  // The CPU kernels, on the same references; the log shows they were wired.
  RunOutput cpu = titan::test::launch_config("fused_cpu_single", 1, 29975, "llama3_debugmodel.yaml",
                                             kSmallModel + " --set 'plugins=[" + kCpuKernels + "]'",
                                             {"CPU kernels wired in: 5 RMSNorm, 2 rotary, 2 SwiGLU, 2 attention, 14 linear layers"});
  check_equivalent(cpu, reference, 1e-5);
  RunOutput fsdp_cpu = titan::test::launch_config(
      "fused_cpu_fsdp", 2, 29977, "llama3_debugmodel.yaml",
      kSmallModel + " --set training.local_batch_size=4 --set 'plugins=[{name: fsdp}, " + kCpuKernels + "]'",
      {"CPU kernels wired in"});
  check_equivalent(fsdp_cpu, fsdp, 1e-5);
  // Under PP2 the first stage has no head: only the last fuses the loss.
  RunOutput pp_cpu = titan::test::launch_config(
      "fused_cpu_pp", 2, 29979, "llama3_debugmodel.yaml",
      kSmallModel + " --set 'plugins=[{name: pipeline, pipeline_parallel_degree: 2}, " + kCpuKernels + "]'",
      {"the output head + loss as chunked linear cross-entropy"});
  check_equivalent(pp_cpu, reference, 1e-5);
}

TEST_CASE("fused kernels (emulated): what cannot be wired is refused with what to set") {
  auto dump = titan::test::temp_dir("fused_refused");
  auto under_tp = run_command("timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port "
                              "29956 -- " + titan::test::titan_binary() + " train " + titan::test::source_dir() +
                              "/configs/llama3_debugmodel.yaml" + kSmallModel + " --set training.steps=1 --set job.dump_folder=" +
                              dump.string() + " --set 'plugins=[{name: tensor_parallel, tensor_parallel_degree: 2}, " +
                              kFused + "]'");
  INFO(under_tp.output);
  CHECK(under_tp.exit_code != 0);
  CHECK(under_tp.output.find("set cross_entropy: false with tensor_parallel") != std::string::npos);
}
