#include "fault_hooks.hpp"

#include <csignal>
#include <cmath>

#include "titan/test_signal.hpp"

namespace titan {

FaultHooks::FaultHooks(const DebugConfig& debug, int rank) : debug_(debug), rank_(rank) {}

void FaultHooks::before_rendezvous() { test_signal_point("startup", 0); }  // a rank lost before the job meets

void FaultHooks::attach(CausalLM& first_stage) {
  const bool forward = test_signal_armed("forward"), backward = test_signal_armed("backward");
  const int64_t out_of_memory_at = debug_.inject_out_of_memory_at_step;
  if (!forward && !backward && out_of_memory_at < 0) return;
  std::shared_ptr<int64_t> step = step_;
  first_stage.add_forward_wrapper([step, forward, backward, out_of_memory_at](const at::Tensor& tokens,
                                                                             const ForwardBody& inner) {
    if (forward) test_signal_point("forward", *step);
    // 1 PiB: no allocator grants it, and none touches memory refusing it.
    if (*step == out_of_memory_at) at::empty({int64_t{1} << 50}, tokens.options().dtype(at::kByte));
    at::Tensor out = inner(tokens);
    if (backward && out.requires_grad()) {
      out.register_hook([step](const at::Tensor& grad) {
        test_signal_point("backward", *step);
        return grad;
      });
    }
    return out;
  });
}

at::Tensor FaultHooks::loss_seen(const at::Tensor& loss) {
  return *step_ == debug_.inject_nonfinite_loss_at_step ? at::full_like(loss, std::nan("")) : loss;
}

void FaultHooks::before_optimizer() { test_signal_point("optimizer", *step_); }

void FaultHooks::after_step() {
  if (rank_ == debug_.crash_rank && *step_ == debug_.crash_at_step) std::raise(SIGKILL);
}

}  // namespace titan
