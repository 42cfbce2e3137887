// What Titan does with CUDA, behind one interface that libtitan_cuda.so
// implements (core/cuda/cuda_runtime.cpp). That module links LibTorch's CUDA
// libraries; libtitan_core, the trainer and the titan program do not, so a
// process on a machine without a CUDA driver never maps the ~1 GB of CUDA,
// cuDNN, cuBLAS and NCCL libraries nor registers their kernels (about 0.2 s
// and 350 MB a process; docs/testing.md).
//
// libtitan_core loads the module while it is itself being loaded, before any
// program code runs: LibTorch decides once, at the first question asked of
// its CUDA hooks, whether CUDA exists for the process, so the module must be
// in place before that question (at::manual_seed asks it). TITAN_CUDA picks:
// unset or "auto" loads it where a CUDA driver (libcuda.so.1) is present,
// "on" always (a CUDA build that cannot load it says why), "off" never; any
// other value leaves it unloaded, which `titan --version` and a CUDA run's
// error name.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include "titan/compat.hpp"

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace titan::internal {

// A captured CUDA graph (compat::DeviceGraph's body).
class CudaGraph {
 public:
  virtual ~CudaGraph() = default;
  virtual void capture(const std::function<void()>& body) = 0;
  virtual void replay() = 0;
};

class CudaRuntime {
 public:
  virtual ~CudaRuntime() = default;
  // "yes, 1 device(s), NVIDIA H100 80GB HBM3" or "no (no CUDA device)".
  virtual std::string devices() const = 0;
  virtual bool available() const = 0;
  // The current device's compute capability as major * 10 + minor (90 for
  // sm_90); 0 without a device.
  virtual int compute_capability() const = 0;
  virtual std::unique_ptr<CudaGraph> make_graph(const c10::Device& device) const = 0;
  virtual void run_on_side_stream(const c10::Device& device, const std::function<void()>& body) const = 0;
  // Whether the device's current stream is capturing a graph.
  virtual bool capturing_graph(const c10::Device& device) const = 0;
  virtual std::string device_name(const c10::Device& device) const = 0;
  virtual int64_t memory_allocated(const c10::Device& device) const = 0;
  virtual compat::DeviceMemoryStats memory_stats(const c10::Device& device) const = 0;
  virtual void reset_peak_memory(const c10::Device& device) const = 0;
  virtual void resize_storage_bytes(c10::StorageImpl* storage, size_t bytes) const = 0;
  virtual void record_memory_history(bool enabled, size_t max_entries) const = 0;
  virtual std::string memory_snapshot_pickle() const = 0;
  // An NCCL backend for one process group (connected at its first
  // collective, on the current CUDA device).
  virtual c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                             int size, std::chrono::milliseconds timeout) const = 0;
};

// The loaded module's runtime, or nullptr where it was not loaded (no CUDA
// driver, TITAN_CUDA=off, a CPU-only build, or a load that failed).
const CudaRuntime* cuda_runtime();
// Why cuda_runtime() is null, in words for an error message; empty when it
// is not.
const std::string& cuda_runtime_absence();

}  // namespace titan::internal

// The module's one entry point (dlsym'd by libtitan_core).
extern "C" const titan::internal::CudaRuntime* titan_cuda_runtime();
