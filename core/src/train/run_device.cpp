#include "run_device.hpp"

#include <ATen/ATen.h>

#include "titan/compat.hpp"
#include "titan/cpu_threads.hpp"
#include "titan/error.hpp"
#include "titan/plugin.hpp"

namespace titan {

c10::Device training_device(const TrainingConfig& training) {
  if (training.device == "cuda") {
    if (!compat::cuda_available()) {
      throw Error("training.device is 'cuda' but this titan has no CUDA (LibTorch " +
                  std::string(torch_version_string()) + "; " + compat::cuda_absence() + "); use training.device=cpu");
    }
    return c10::Device(c10::kCUDA, 0);
  }
  return c10::Device(c10::kCPU);
}

void set_threads_and_seed(const TrainingConfig& training) {
  const int threads = training.threads > 0 ? static_cast<int>(training.threads) : default_threads();
  at::set_num_threads(threads);
  at::manual_seed(static_cast<uint64_t>(training.seed));
  if (training.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
}

}  // namespace titan
