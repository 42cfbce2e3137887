// LibTorch-version differences (see compat.hpp).
#include "titan/compat.hpp"

#include <cmath>
#include <limits>

#include <ATen/autocast_mode.h>
#include <ATen/native/Resize.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/variable.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>

#include "titan/cuda_runtime.hpp"
#include "titan/error.hpp"
#include "titan/meta_tally.hpp"
#include "titan/peak_memory.hpp"
#include "headed_block.hpp"

#ifdef TITAN_WITH_CUDA
#include <cuda_runtime_api.h>  // CUDART_VERSION only: CUDA's libraries are the module's
#include <nccl.h>              // NCCL_MAJOR, ...
#endif

namespace titan::compat {

namespace {

// A CUDA tensor or device exists only where the module loaded.
const internal::CudaRuntime& loaded_cuda() {
  const internal::CudaRuntime* cuda = internal::cuda_runtime();
  if (!cuda) throw std::runtime_error("CUDA is not loaded in this process: " + internal::cuda_runtime_absence());
  return *cuda;
}

// [batch, 1, seq, seq]: true where a query sees a key of its own document at
// or before it.
at::Tensor block_causal_mask(const at::Tensor& documents, int64_t seq) {
  if (documents.dim() != 2 || documents.size(1) != seq) {
    throw Error("block-causal attention: documents " + c10::str(documents.sizes()) + " for a sequence of " +
                std::to_string(seq) + " tokens; expected [batch, " + std::to_string(seq) + "]");
  }
  at::Tensor earlier = at::ones({seq, seq}, documents.options().dtype(at::kBool)).tril();
  // bitwise_and: logical_and has no meta kernel (titan plan's dry run).
  return documents.unsqueeze(2).eq(documents.unsqueeze(1)).bitwise_and(earlier).unsqueeze(1);
}

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& documents) {
  // enable_gqa: fewer kv heads without repeating them (and, on CUDA, not
  // the slow math path; gpu-facts.md).
  const bool gqa = q.size(1) != k.size(1);
  std::optional<at::Tensor> mask;
  if (documents.defined()) mask = block_causal_mask(documents, q.size(2));
  // Meta tensors (the dry run): SDPA chooses its kernel per device type and
  // meta falls back to the math path, which keeps the whole score matrix.
  // CPU and CUDA run a fused kernel that keeps the output and its
  // logsumexp: take that one (meta_kernels.cpp gives its shapes).
  if (q.is_meta()) {
    return std::get<0>(at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, !mask.has_value(), mask));
  }
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/!mask.has_value(), std::nullopt, gqa);
}

at::Tensor causal_attention_after(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t past) {
  if (past == 0) return causal_attention(q, k, v);
  const bool gqa = q.size(1) != k.size(1);
  // One query sees every key; more see a causal band shifted by `past`.
  std::optional<at::Tensor> mask;
  if (q.size(2) > 1) mask = at::ones({q.size(2), k.size(2)}, q.options().dtype(at::kBool)).tril(past);
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/false, std::nullopt, gqa);
}

std::pair<at::Tensor, at::Tensor> causal_attention_with_weights(const at::Tensor& q, const at::Tensor& k,
                                                                const at::Tensor& v, const at::Tensor& documents) {
  // The math path written out: SDPA does not return the weights.
  const int64_t seq = q.size(2), keys = k.size(2);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor hidden = documents.defined() ? block_causal_mask(documents, seq).bitwise_not()
                                          : at::ones({seq, keys}, q.options().dtype(at::kBool)).triu(1);
  at::Tensor weights = at::softmax(scores.masked_fill(hidden, -std::numeric_limits<double>::infinity()), -1);
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
  if (tensor.is_cuda()) return loaded_cuda().resize_storage_bytes(storage, bytes);
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

bool cuda_available() {
  const internal::CudaRuntime* cuda = internal::cuda_runtime();
  return cuda && cuda->available();
}

std::string cuda_absence() {
  const internal::CudaRuntime* cuda = internal::cuda_runtime();
  if (!cuda) return internal::cuda_runtime_absence();
  return cuda->available() ? "" : "no CUDA device";
}

int cuda_compute_capability() {
  const internal::CudaRuntime* cuda = internal::cuda_runtime();
  return cuda ? cuda->compute_capability() : 0;
}

std::string cuda_summary() {
#ifdef TITAN_WITH_CUDA
  std::string text = "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
                     " compiled in (NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
                     std::to_string(NCCL_PATCH) + "); available: ";
  const internal::CudaRuntime* cuda = internal::cuda_runtime();
  return text + (cuda ? cuda->devices() : "no (" + internal::cuda_runtime_absence() + ")");
#else
  return "CUDA not compiled in (TITAN_WITH_CUDA off)";
#endif
}

struct DeviceGraph::Graph {
  std::unique_ptr<internal::CudaGraph> graph;
};

DeviceGraph::DeviceGraph(const c10::Device& device) {
  if (!device.is_cuda()) throw std::runtime_error("a CUDA graph needs a CUDA device, not " + device.str());
  graph_ = std::make_unique<Graph>(Graph{loaded_cuda().make_graph(device)});
}

DeviceGraph::~DeviceGraph() = default;
void DeviceGraph::capture(const std::function<void()>& body) { graph_->graph->capture(body); }
void DeviceGraph::replay() { graph_->graph->replay(); }

bool capturing_graph(const c10::Device& device) {
  return device.is_cuda() && loaded_cuda().capturing_graph(device);
}

void run_on_side_stream(const c10::Device& device, const std::function<void()>& body) {
  if (!device.is_cuda()) return body();
  loaded_cuda().run_on_side_stream(device, body);
}

std::string device_name(const c10::Device& device) {
  return device.is_cuda() ? loaded_cuda().device_name(device) : device.str();
}

int64_t device_memory_allocated(const c10::Device& device) {
  return device.is_cuda() ? loaded_cuda().memory_allocated(device) : 0;
}

DeviceMemoryStats device_memory_stats(const c10::Device& device) {
  return device.is_cuda() ? loaded_cuda().memory_stats(device) : DeviceMemoryStats{};
}

void reset_device_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) loaded_cuda().reset_peak_memory(device);
}

void record_cuda_memory_history(bool enabled, size_t max_entries) {
  const internal::CudaRuntime* cuda = internal::cuda_runtime();
  if (cuda) return cuda->record_memory_history(enabled, max_entries);
  if (enabled) throw std::runtime_error("a CUDA memory history needs CUDA: " + internal::cuda_runtime_absence());
}

std::string cuda_memory_snapshot_pickle() {
  const internal::CudaRuntime* cuda = internal::cuda_runtime();
  if (!cuda) throw std::runtime_error("a CUDA memory snapshot needs CUDA: " + internal::cuda_runtime_absence());
  return cuda->memory_snapshot_pickle();
}

bool is_out_of_memory(const std::exception& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) || dynamic_cast<const std::bad_alloc*>(&error)) return true;
  // LibTorch 2.11's DefaultCPUAllocator (c10/core/impl/alloc_cpu.cpp) says
  // "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes".
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  return c10_error && c10_error->msg().find("DefaultCPUAllocator: can't allocate memory") != std::string::npos;
}

bool autocast_enabled(c10::DeviceType device_type) {
  // Asking about a device autocast has no key for (meta: the dry run) throws.
  return at::autocast::is_autocast_available(device_type) && at::autocast::is_autocast_enabled(device_type);
}

AutocastScope::AutocastScope(c10::DeviceType device_type, c10::ScalarType dtype)
    : device_type_(device_type),
      was_enabled_(at::autocast::is_autocast_enabled(device_type)),
      previous_dtype_(at::autocast::get_autocast_dtype(device_type)) {
  at::autocast::set_autocast_dtype(device_type, dtype);
  at::autocast::set_autocast_enabled(device_type, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  // The outermost scope drops the weights' casts it cached.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

}  // namespace titan::compat

// CpuMemoryTracker and peak_cpu_bytes_during (titan/peak_memory.hpp) live
// here because their allocator wrapper follows c10::Allocator's interface,
// which changes between LibTorch versions.
namespace titan {

class CpuMemoryTracker::Allocator : public c10::Allocator {
 public:
  Allocator(c10::Allocator* base, CpuAllocationListener* listener)
      : base_(base), listener_(listener), listening_(listener != nullptr) {}
  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr inner;
    try {
      inner = base_->allocate(bytes + kHeaderBytes);
    } catch (...) {
      tell([&](CpuAllocationListener& listener) { listener.failed(static_cast<int64_t>(bytes)); });
      throw;
    }
    void* data = Block::wrap(std::move(inner), {bytes, this});
    int64_t now = live_ += static_cast<int64_t>(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
    if (bytes > 0) tell([&](CpuAllocationListener& listener) { listener.allocated(data, static_cast<int64_t>(bytes)); });
    return {data, data, &Allocator::release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Allocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  c10::Allocator* base() const { return base_; }
  int64_t peak() const { return peak_; }
  int64_t live() const { return live_; }
  // An allocation racing with this may lose its part of the old window's peak.
  int64_t take_peak() { return peak_.exchange(live_.load()); }
  // No call reaches the listener once this returns.
  void detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    listener_ = nullptr;
    listening_ = false;
  }

 private:
  struct Counted {
    size_t bytes;
    const Allocator* owner;
  };
  using Block = HeadedBlock<Counted>;  // the base allocator's block, the caller's bytes one unit in
  static constexpr size_t kHeaderBytes = Block::kHeaderBytes;
  // Blocks may outlive the tracker (a tensor kept after it): the allocator
  // then must outlive them too, so allocators are never destroyed.
  static void release(void* data) {
    if (data == nullptr) return;
    auto [inner, counted] = Block::unwrap(data);
    const size_t bytes = counted.bytes;
    const Allocator* owner = counted.owner;
    owner->live_ -= static_cast<int64_t>(bytes);
    if (bytes > 0) owner->tell([&](CpuAllocationListener& listener) { listener.freed(data, static_cast<int64_t>(bytes)); });
  }  // `inner` frees the block (or hands it back to an outer tracker) here
  // One call at a time, from any thread; none after detach().
  template <typename Call>
  void tell(const Call& call) const {
    if (!listening_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (listener_) call(*listener_);
  }
  c10::Allocator* base_;
  mutable std::atomic<int64_t> live_{0}, peak_{0};
  mutable std::mutex mutex_;
  CpuAllocationListener* listener_;  // guarded by mutex_
  std::atomic<bool> listening_;
};

CpuMemoryTracker::CpuMemoryTracker(CpuAllocationListener* listener)
    : allocator_(new Allocator(c10::GetCPUAllocator(), listener)) {
  c10::SetCPUAllocator(allocator_, /*priority=*/255);
}

CpuMemoryTracker::~CpuMemoryTracker() {
  c10::SetCPUAllocator(allocator_->base(), 255);
  allocator_->detach();
}

int64_t CpuMemoryTracker::live() const { return allocator_->live(); }
int64_t CpuMemoryTracker::peak() const { return allocator_->peak(); }
int64_t CpuMemoryTracker::take_peak() { return allocator_->take_peak(); }

CpuMemoryWindow cpu_memory_during(const std::function<void()>& body) {
  if (internal::MetaTally* counted = internal::current_meta_tally(); counted && counted->counting) {
    // The dry run's tensors are meta: measure its count instead.
    internal::MetaTally& tally = *counted;
    const int64_t start = tally.live, outer_peak = tally.peak;
    const std::string outer_at = tally.peak_at;
    tally.peak = start;
    body();
    const CpuMemoryWindow window{tally.peak - start, tally.live - start};
    if (outer_peak >= tally.peak) {
      tally.peak = outer_peak;
      tally.peak_at = outer_at;
    }
    return window;
  }
  CpuMemoryTracker tracker;
  body();
  return {tracker.peak(), tracker.live()};
}

int64_t peak_cpu_bytes_during(const std::function<void()>& body) { return cpu_memory_during(body).peak; }

// The dry run's meta allocator (titan/meta_tally.hpp): meta tensors hold no
// data, so the block is only a note of its size and its thread's tally.
namespace {

class MetaCountingAllocator : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    internal::MetaTally* counted = internal::current_meta_tally();
    if (!counted || !counted->counting) return {nullptr, nullptr, &release, c10::Device(c10::kMeta)};
    internal::MetaTally& tally = *counted;
    const int64_t now = tally.live += static_cast<int64_t>(bytes);
    if (now > tally.peak) {
      tally.in_backward = torch::autograd::get_current_graph_task_id() != -1;
      tally.peak = now;
      tally.peak_at = tally.where();
    }
    return {nullptr, new Block{&tally, static_cast<int64_t>(bytes)}, &release_block, c10::Device(c10::kMeta)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* /*dest*/, const void* /*src*/, std::size_t /*count*/) const override {}

 private:
  struct Block {
    internal::MetaTally* tally;
    int64_t bytes;
  };
  static void release(void* /*context*/) {}
  static void release_block(void* context) {
    auto* block = static_cast<Block*>(context);
    block->tally->live -= block->bytes;
    delete block;
  }
};

}  // namespace

void internal::install_meta_allocator() {
  static MetaCountingAllocator allocator;  // lives as long as any meta tensor may
  static std::once_flag once;
  std::call_once(once, [] { c10::SetAllocator(c10::kMeta, &allocator, /*priority=*/255); });
}

}  // namespace titan
