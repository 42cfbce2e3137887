// LibTorch-version differences (see compat.hpp).
#include "titan/compat.hpp"

#include <cmath>
#include <limits>

#include <ATen/native/Resize.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <atomic>
#include <cstring>

#include "titan/peak_memory.hpp"

#ifdef TITAN_WITH_CUDA
#include <ATen/native/cuda/Resize.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace titan::compat {

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  bool gqa = q.size(1) != k.size(1);
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, gqa);
#else
  at::Tensor key = k, value = v;
  if (q.size(1) != k.size(1)) {
    int64_t repeats = q.size(1) / k.size(1);
    key = k.repeat_interleave(repeats, 1);
    value = v.repeat_interleave(repeats, 1);
  }
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, key, value, {}, 0.0, /*is_causal=*/true);
#else
  // 1.13 has only the private entry point; it returns (output, weights).
  return std::get<0>(at::_scaled_dot_product_attention(q, key, value, {}, 0.0, false, true));
#endif
#endif
}

std::pair<at::Tensor, at::Tensor> causal_attention_with_weights(const at::Tensor& q, const at::Tensor& k,
                                                                const at::Tensor& v) {
  // The math path written out: no LibTorch version's SDPA returns the
  // weights in a layout every version agrees on.
  const int64_t seq = q.size(2), keys = k.size(2);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor future = at::ones({seq, keys}, q.options().dtype(at::kBool)).triu(1);
  at::Tensor weights = at::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  return {at::matmul(weights, v), weights};
}

void materialize_in_place(at::Tensor& tensor, const c10::Device& device) {
  at::Tensor fresh = at::empty(tensor.sizes(), tensor.options().device(device));
  // set_data() refuses a meta -> dense change of TensorImpl type; the
  // shallow copy it performs after that check is what we need here.
  tensor.unsafeGetTensorImpl()->shallow_copy_from(fresh.getIntrusivePtr());
}

void resize_storage_bytes(const at::Tensor& tensor, size_t bytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
#ifdef TITAN_WITH_CUDA
  if (tensor.is_cuda()) {
    at::native::resize_bytes_cuda(storage, bytes);
    return;
  }
#endif
  at::native::resize_bytes_cpu(storage, bytes);
}

namespace {

struct AccumulatedHook : torch::autograd::FunctionPostHook {
  explicit AccumulatedHook(std::function<void()> ready) : ready(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    ready();
    return outputs;
  }
  std::function<void()> ready;
};

}  // namespace

std::shared_ptr<void> on_gradient_accumulated(const at::Tensor& param, std::function<void()> ready) {
  std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(param);
  if (!accumulator) throw std::runtime_error("on_gradient_accumulated: the tensor is not a leaf that requires grad");
  accumulator->add_post_hook(std::make_unique<AccumulatedHook>(std::move(ready)));
  return accumulator;
}

bool cuda_available() { return torch::cuda::is_available(); }

int64_t device_memory_allocated(const c10::Device& device) {
#ifdef TITAN_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].current;
  }
#endif
  return 0;
}

int64_t device_peak_memory(const c10::Device& device) {
#ifdef TITAN_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;
  }
#endif
  return 0;
}

}  // namespace titan::compat

// peak_cpu_bytes_during (titan/peak_memory.hpp) lives here because its
// allocator wrapper depends on the LibTorch version (copy_data below).
namespace titan {

namespace {

class PeakTrackingAllocator : public c10::Allocator {
 public:
  explicit PeakTrackingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t bytes) const override {
    c10::DataPtr inner = base_->allocate(bytes);
    void* data = inner.get();
    int64_t now = live_ += static_cast<int64_t>(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
    return {data, new Block{std::move(inner), bytes, this}, &PeakTrackingAllocator::release, c10::Device(c10::kCPU)};
  }
  // LibTorch 2.x makes this pure virtual; 1.13 has no such method (hence no `override`).
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
  int64_t peak() const { return peak_; }
  int64_t live() const { return live_; }

 private:
  struct Block {
    c10::DataPtr inner;
    size_t bytes;
    const PeakTrackingAllocator* owner;
  };
  // Blocks may outlive the body (a tensor kept after it): the tracker then
  // must outlive them too, so trackers are never destroyed (see below).
  static void release(void* context) {
    auto* block = static_cast<Block*>(context);
    block->owner->live_ -= static_cast<int64_t>(block->bytes);
    delete block;
  }
  c10::Allocator* base_;
  mutable std::atomic<int64_t> live_{0}, peak_{0};
};

}  // namespace

CpuMemoryWindow cpu_memory_during(const std::function<void()>& body) {
  c10::Allocator* original = c10::GetCPUAllocator();
  // Leaked on purpose: tensors allocated during the body may be freed later.
  auto* tracker = new PeakTrackingAllocator(original);
  c10::SetCPUAllocator(tracker, /*priority=*/255);
  try {
    body();
  } catch (...) {
    c10::SetCPUAllocator(original, 255);
    throw;
  }
  c10::SetCPUAllocator(original, 255);
  return {tracker->peak(), tracker->live()};
}

int64_t peak_cpu_bytes_during(const std::function<void()>& body) { return cpu_memory_during(body).peak; }

}  // namespace titan
