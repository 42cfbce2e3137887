#include "titan/host_to_device.hpp"

#include <ATen/ATen.h>

#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace titan {

at::Tensor host_to_device(const at::Tensor& host, const c10::Device& device, std::optional<c10::ScalarType> dtype) {
  if (!host.device().is_cpu()) {
    throw Error("host_to_device: expected a tensor in host memory, got one on " + host.device().str());
  }
  const at::Tensor source = dtype && *dtype != host.scalar_type() ? host.to(*dtype) : host;
  if (device.is_cpu()) return source;
  if (!device.is_cuda()) return source.to(device, /*non_blocking=*/true);
  if (compat::capturing_graph(device)) {
    throw Error("host_to_device: a copy from host memory to " + device.str() + " inside a CUDA graph's capture would "
                "replay the capture's host memory at every step; make the tensor before the capture (or set "
                "training.cuda_graph=false)");
  }
  at::Tensor pinned = at::empty(source.sizes(), source.options().pinned_memory(true));
  pinned.copy_(source);
  return pinned.to(device, /*non_blocking=*/true);
}

}  // namespace titan
