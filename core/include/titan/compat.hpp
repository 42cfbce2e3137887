// What Titan needs from LibTorch beyond its public API (internals that change
// between versions: storage resizing, grad-accumulator hooks, allocator
// statistics) and what differs between its CPU and CUDA builds lives here and
// in compat.cpp, never in #ifs scattered over the code. Titan supports one
// LibTorch: 2.11 (the torch wheel's).
#pragma once
#include <torch/version.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>

namespace titan {

inline const char* torch_version_string() { return TORCH_VERSION; }

namespace compat {

// Causal scaled-dot-product attention on [batch, heads, seq, head_dim]
// tensors; kv heads may be fewer than q heads (GQA). With `documents`
// ([batch, seq] int64, each token's document: document_ids() in
// layers.hpp) a query sees only earlier keys of its own document
// (block-causal).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& documents = at::Tensor());
// The same on equal head counts, also returning the attention weights
// (softmax probabilities [batch, heads, seq, seq]) a replaying backward needs.
std::pair<at::Tensor, at::Tensor> causal_attention_with_weights(const at::Tensor& q, const at::Tensor& k,
                                                                const at::Tensor& v,
                                                                const at::Tensor& documents = at::Tensor());
// Causal attention of queries that follow `past` earlier keys (generation
// with a KV cache): k and v hold past + seq positions, query i sits at
// position past + i and sees keys 0..past + i.
at::Tensor causal_attention_after(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t past);

// Gives a tensor (e.g. a parameter built on the meta device) fresh,
// uninitialized storage on `device` in place, keeping its identity and
// autograd leaf status, as `Module::to_empty` does in Python.
void materialize_in_place(at::Tensor& tensor, const c10::Device& device);

// Frees (bytes = 0) or re-allocates a tensor's storage in place, keeping
// the storage object, so views and autograd's saved tensors follow it (FSDP
// frees unsharded parameters between forward and backward this way). The
// contents after re-allocation are undefined.
void resize_storage_bytes(const at::Tensor& tensor, size_t bytes);

// Calls `ready` each time autograd has accumulated a gradient into the leaf
// `param`'s .grad (after the add, unlike a tensor hook). The returned
// handle keeps the hook (and the leaf's grad accumulator) alive; drop it to
// stop. Call only once `param` has its final device, dtype and shape.
std::shared_ptr<void> on_gradient_accumulated(const at::Tensor& param, std::function<void()> ready);

// Autocast on `device_type` to `dtype` while it lives (matmuls and
// attention in `dtype`, reductions and the loss in float32, as
// torch.autocast does), the previous state restored and the cast weights
// dropped at the end. Forward passes only: autograd's backward follows the
// dtypes the forward chose.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device_type, c10::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_type_;
  bool was_enabled_;
  c10::ScalarType previous_dtype_;
};

// True inside an autocast region for `device_type` (an AutocastScope's);
// false for devices autocast does not know (meta).
bool autocast_enabled(c10::DeviceType device_type);

// True when this LibTorch was built with CUDA and a device is present.
bool cuda_available();
// Why cuda_available() is false, in words for an error message ("no CUDA
// driver: libcuda.so.1 not found", "no CUDA device", ...); empty when true.
std::string cuda_absence();
// The current CUDA device's compute capability as major * 10 + minor (90
// for sm_90); 0 without CUDA.
int cuda_compute_capability();
// What `titan --version` says of CUDA: compiled in or not (CUDA and NCCL
// versions), and the devices present, e.g. "CUDA 13.0 compiled in (NCCL
// 2.28.9); available: no (no CUDA driver: libcuda.so.1 not found)".
std::string cuda_summary();

// A CUDA graph of the kernels a function launches. capture() records them
// on a side stream (nothing runs; memory comes from the graph's own pool
// and stays reserved while the graph lives); replay() launches them again on
// the current stream, on the same memory. Constructing one on a CPU device
// or in a CPU-only build throws.
class DeviceGraph {
 public:
  explicit DeviceGraph(const c10::Device& device);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;
  void capture(const std::function<void()>& body);
  void replay();

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;
};

// Whether the current stream of a CUDA `device` is being captured into a
// CUDA graph; false on other devices.
bool capturing_graph(const c10::Device& device);

// Runs `body` on a side stream of a CUDA `device`, after the current
// stream's work and before its next: the warm-up a capture needs, so that
// lazily made handles and workspaces exist outside the graph. On CPU it
// just runs `body`.
void run_on_side_stream(const c10::Device& device, const std::function<void()>& body);

// The device's name as its driver reports it (e.g. "NVIDIA H100 80GB HBM3");
// "cpu" for the CPU.
std::string device_name(const c10::Device& device);

// Bytes currently allocated on a device (CUDA caching allocator), 0 on CPU.
int64_t device_memory_allocated(const c10::Device& device);

// The CUDA caching allocator's peaks since the last reset and its counts
// since the start, and the device's memory; all 0 on CPU.
struct DeviceMemoryStats {
  int64_t peak_active = 0, peak_reserved = 0;
  int64_t alloc_retries = 0, ooms = 0;
  int64_t capacity = 0;
};
DeviceMemoryStats device_memory_stats(const c10::Device& device);
void reset_device_peak_memory(const c10::Device& device);

// Memory snapshots (profiling.enable_memory_snapshot): the CUDA caching
// allocator records each allocation and free with its C++ stack, keeping the
// last `max_entries` (record_cuda_memory_history(false, 0) stops it); the
// snapshot is its segments, blocks and that history, pickled as PyTorch's
// torch.cuda.memory._snapshot() is, which pytorch.org/memory_viz reads.
// Both throw std::runtime_error where CUDA is not compiled in.
void record_cuda_memory_history(bool enabled, size_t max_entries);
std::string cuda_memory_snapshot_pickle();

// Whether an error is an allocator running out of memory: the CUDA caching
// allocator's c10::OutOfMemoryError, std::bad_alloc, or LibTorch's CPU
// allocator refusing an allocation (a plain c10::Error, known by its text).
bool is_out_of_memory(const std::exception& error);

}  // namespace compat
}  // namespace titan
