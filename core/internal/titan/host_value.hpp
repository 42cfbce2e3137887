// A number read out of a tensor by host code (a loss to log, a norm to
// clip with). In `titan plan`'s dry run every tensor lives on the meta
// device and holds no value: there the number reads 0, and the step goes on
// issuing the same ops and collectives it would issue for real.
#pragma once
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>

namespace titan {

// Never inlined, never left by a tail call (clang makes them at -O1): the
// host-read counter names a read by its callers' frames
// (host_read_counter.cpp), which an optimizing build would otherwise fold.
#if defined(__clang__)
#define TITAN_KEEP_FRAME [[gnu::noinline, clang::disable_tail_calls]]
#else
#define TITAN_KEEP_FRAME [[gnu::noinline]]
#endif
template <class T>
TITAN_KEEP_FRAME T host_value(const at::Tensor& tensor) {
  return tensor.is_meta() ? T(0) : tensor.item<T>();
}
#undef TITAN_KEEP_FRAME

// The tensor on the CPU (a meta tensor: zeros of its shape and dtype).
inline at::Tensor to_host(const at::Tensor& tensor, c10::ScalarType dtype) {
  if (tensor.is_meta()) return at::zeros(tensor.sizes(), at::TensorOptions().dtype(dtype));
  return tensor.to(at::kCPU, dtype);
}

}  // namespace titan
