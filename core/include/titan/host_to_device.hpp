// Host memory onto a device without making the host wait for the device.
// A plain `tensor.to(cuda)` from pageable memory is a blocking copy: ATen
// synchronizes the stream after it, so the host waits for every kernel
// queued before it; in a training step that drains the GPU's queue each
// step (the small models' steps are bound by the host: ../docs/benchmarks.md).
#pragma once
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace titan {

// `host` (CPU memory) on `device`, cast to `dtype` on the host first if one
// is given. On CUDA it goes through page-locked memory and is copied in
// stream order (the caching host allocator keeps the page-locked block
// until the copy is done); on other devices it is copied as is (the meta
// device of `titan plan`: no values), and on the CPU it is `host` itself.
// Inside a CUDA graph's capture it throws: the graph would copy the host
// memory of the capture again at every replay.
at::Tensor host_to_device(const at::Tensor& host, const c10::Device& device,
                          std::optional<c10::ScalarType> dtype = std::nullopt);

}  // namespace titan
