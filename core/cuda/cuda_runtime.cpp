// libtitan_cuda.so: Titan's uses of LibTorch's CUDA libraries (graphs,
// streams, the caching allocator's statistics and snapshots, NCCL process
// groups), loaded by libtitan_core only where CUDA can run
// (titan/cuda_runtime.hpp says when and why).
#include "titan/cuda_runtime.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/native/cuda/Resize.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>

namespace titan::internal {
namespace {

c10::DeviceIndex index_of(const c10::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

// `body` on a side stream of device `index`, ordered after the current
// stream's queued work and before its next.
void on_side_stream(c10::DeviceIndex index, const std::function<void()>& body) {
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, index);
  at::cuda::CUDAEvent queued;
  queued.record(current);
  queued.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    body();
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(current);
}

class Graph final : public CudaGraph {
 public:
  explicit Graph(c10::DeviceIndex index) : index_(index) {}

  void capture(const std::function<void()>& body) override {
    // Capture may not overlap work still queued elsewhere (PyTorch's
    // torch.cuda.graph synchronizes the same way).
    c10::cuda::device_synchronize();
    on_side_stream(index_, [&] {
      graph_.capture_begin();
      try {
        body();
      } catch (...) {
        try {
          graph_.capture_end();  // leave the stream out of capture mode
        } catch (...) {
        }
        throw;
      }
      graph_.capture_end();
    });
  }

  void replay() override { graph_.replay(); }

 private:
  c10::DeviceIndex index_;
  at::cuda::CUDAGraph graph_;
};

// LibTorch asks its CUDA hooks once whether CUDA exists and keeps the
// answer: asked before this module loaded, it keeps CUDA off for the process
// (titan/cuda_runtime.hpp). Only the real hooks know the CUDA runtime's version.
bool libtorch_sees_cuda_libraries() {
  try {
    return at::detail::getCUDAHooks().versionCUDART() > 0;
  } catch (const c10::Error&) {
    return false;
  }
}

class Runtime final : public CudaRuntime {
 public:
  bool available() const override { return torch::cuda::is_available(); }

  std::string devices() const override {
    if (!libtorch_sees_cuda_libraries()) {
      return "no (LibTorch settled on no CUDA before Titan's CUDA module loaded: a Titan bug, please report it)";
    }
    if (!available()) return "no (no CUDA device)";
    return "yes, " + std::to_string(torch::cuda::device_count()) + " device(s), " +
           at::cuda::getDeviceProperties(0)->name;
  }

  int compute_capability() const override {
    if (!available()) return 0;
    const cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
    return properties->major * 10 + properties->minor;
  }

  std::unique_ptr<CudaGraph> make_graph(const c10::Device& device) const override {
    return std::make_unique<Graph>(index_of(device));
  }

  void run_on_side_stream(const c10::Device& device, const std::function<void()>& body) const override {
    on_side_stream(index_of(device), body);
  }

  bool capturing_graph(const c10::Device& device) const override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    C10_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(index_of(device)), &status));
    return status != cudaStreamCaptureStatusNone;
  }

  std::string device_name(const c10::Device& device) const override {
    return at::cuda::getDeviceProperties(device.has_index() ? device.index() : 0)->name;
  }

  int64_t memory_allocated(const c10::Device& device) const override {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current;
  }

  compat::DeviceMemoryStats memory_stats(const c10::Device& device) const override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    compat::DeviceMemoryStats out;
    out.peak_active = stats.active_bytes[all].peak;
    out.peak_reserved = stats.reserved_bytes[all].peak;
    out.alloc_retries = stats.num_alloc_retries;
    out.ooms = stats.num_ooms;
    out.capacity = static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
    return out;
  }

  void reset_peak_memory(const c10::Device& device) const override {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }

  void resize_storage_bytes(c10::StorageImpl* storage, size_t bytes) const override {
    at::native::resize_bytes_cuda(storage, bytes);
  }

  void record_memory_history(bool enabled, size_t max_entries) const override {
    // As torch.cuda.memory._record_memory_history(max_entries=...): every
    // action, with its stack (in C++, "all" adds the C++ frames to the none
    // of Python).
    if (enabled) {
      // The allocator's per-device parts exist once CUDA is initialized; the
      // history is switched on in those that exist.
      at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
      torch::cuda::_record_memory_history("all", "all", "all", max_entries);
    } else {
      torch::cuda::_record_memory_history(std::nullopt);
    }
  }

  std::string memory_snapshot_pickle() const override { return torch::cuda::_memory_snapshot_pickled(); }

  c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                     std::chrono::milliseconds timeout) const override {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  }
};

}  // namespace
}  // namespace titan::internal

extern "C" __attribute__((visibility("default"))) const titan::internal::CudaRuntime* titan_cuda_runtime() {
  static const titan::internal::Runtime runtime;
  return &runtime;
}
