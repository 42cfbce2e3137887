// With the fused CUDA kernels wired in (the fused_kernels plugin on a CUDA
// device), the debug model trains like the ATen path on the same GPU; the
// kernels alone are checked against their emulations in
// fused_kernels_cuda_test.cpp (titan_cuda_tests). Skipped where there is no
// CUDA device.
#include "cuda_skip.hpp"

#include <string>

#include "../integration/equivalence_runs.hpp"

TEST_CASE("fused_kernels CUDA: with the kernels wired in, the debug model trains like the ATen path on the GPU "
          "(10 steps, within 1e-4)") {
  TITAN_REQUIRE_CUDA("to train the debug model with the kernels and without");
  const std::string gpu_run = titan::test::kSmallModel + " --set training.device=cuda";
  titan::test::RunOutput reference = titan::test::run_single("fused_cuda_reference", gpu_run);
  titan::test::RunOutput with_kernels = titan::test::run_single(
      "fused_cuda", gpu_run + " --set 'plugins=[{name: fused_kernels, cross_entropy_chunk: 500}]'");
  titan::test::check_equivalent(with_kernels, reference, 1e-4);
}
