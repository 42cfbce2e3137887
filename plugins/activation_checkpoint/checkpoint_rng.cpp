// The CPU generator's state, read and set: one generator, shared by every
// thread, so a setter holds its lock.
#include "checkpoint_rng.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <mutex>

namespace titan::activation_checkpoint {

at::Tensor cpu_rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }

void set_cpu_rng_state(const at::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle on the one generator
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace titan::activation_checkpoint
