// CpuAttention: the AVX2 causal-attention kernel (cpu_attention_avx2.cpp) as
// an autograd function, threaded over (batch, head) forward and (batch, kv
// head) backward so that no two threads write the same dK/dV, with ATen's
// attention wherever the kernel cannot run or was measured slower.
#include "cpu_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_attention_avx2.h"
#include "libtorch_threads.h"
#include "titan/error.hpp"

namespace titan::fused {
namespace {

namespace kernel = cpu_attention_avx2;

bool cpu_has_avx2_fma() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

// Where the kernel beats ATen's flash attention, forward + backward at 2
// threads (titan_bench_cpu_attention on this project's 2-core AMD EPYC,
// ours / ATen). AVX2 path (2026-11-26): everywhere measured up to seq 1024
// for head_dim <= 128 (debug shape 0.40; head_dim 64 at seq 1024 0.87;
// head_dim 128 at seq 1024 0.91-0.95) and, beyond, up to seq x head_dim =
// 65536 (head_dim 16 at seq 4096 0.79, head_dim 32 at seq 2048 0.95); slower
// beyond that (head_dim 64 at seq 2048 1.04, head_dim 128 at seq 2048
// 1.14-1.16): there one head's K, V and dK/dV accumulators outgrow the 1 MiB
// L2 and ATen's blocked GEMMs (AVX-512 on this CPU) win. AVX-512 path
// (head_dim a multiple of 16 on a CPU with it, 2026-11-27): everywhere
// measured up to seq 2048 for head_dim <= 128 (debug shape 0.19, head_dim 64
// at seq 2048 0.57, head_dim 128 at seq 2048 0.71).
constexpr int64_t kMaxKernelHeadDim = 128;
constexpr int64_t kKernelAlwaysUpToSeq = 1024;
constexpr int64_t kAvx512KernelAlwaysUpToSeq = 2048;
constexpr int64_t kMaxKernelSeqTimesHeadDim = 65536;

// Last dimension unit-stride (the kernel's one layout requirement); the
// llama3 model's transposed q/k/v views already are.
at::Tensor unit_last_stride(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// [batch, heads, seq, head_dim] laid out as [batch, seq, heads, head_dim],
// as ATen's flash attention returns it (transposing back is then a view).
at::Tensor empty_bshd(const at::Tensor& like) {
  return at::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options()).transpose(1, 2);
}

// A run of one row's tokens that attend causally among themselves: the
// whole row, or under block-causal attention one document of it. The
// kernel runs each as a problem of its own, so keys of other documents are
// never computed, let alone masked.
struct Segment {
  int64_t row, start, length;
};

// Documents are contiguous in a row: each run of equal ids is one.
std::vector<Segment> segments_of(const at::Tensor& documents, int64_t batch, int64_t seq) {
  std::vector<Segment> segments;
  if (!documents.defined() || documents.numel() == 0) {  // empty: autograd's stand-in for none
    for (int64_t row = 0; row < batch; ++row) segments.push_back({row, 0, seq});
    return segments;
  }
  const at::Tensor ids = documents.to(at::kLong).contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t row = 0; row < batch; ++row) {
    int64_t start = 0;
    for (int64_t i = 1; i <= seq; ++i) {
      if (i < seq && id[row * seq + i] == id[row * seq + start]) continue;
      segments.push_back({row, start, i - start});
      start = i;
    }
  }
  return segments;
}

// The longest segment: its problem sizes a thread's workspace for any.
const Segment& longest(const std::vector<Segment>& segments) {
  return *std::max_element(segments.begin(), segments.end(),
                           [](const Segment& a, const Segment& b) { return a.length < b.length; });
}

// A segment of a [batch, heads, seq, head_dim] tensor as a one-row view.
kernel::View view_of(const at::Tensor& t, const Segment& segment) {
  return {t.data_ptr<float>() + segment.row * t.stride(0) + segment.start * t.stride(2), t.stride(0), t.stride(1),
          t.stride(2)};
}

kernel::Problem problem_of(const at::Tensor& q, const at::Tensor& k, const Segment& segment) {
  return {1, q.size(1), k.size(1), segment.length, q.size(3),
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))))};
}

// Each segment's log-sum-exps, [heads, length], one after the other in
// token order ([batch, seq, heads] floats in all).
int64_t lse_offset(const Segment& segment, int64_t heads, int64_t seq) {
  return heads * (segment.row * seq + segment.start);
}

std::pair<at::Tensor, at::Tensor> run_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const std::vector<Segment>& segments) {
  const int64_t heads = q.size(1), seq = q.size(2);
  at::Tensor out = empty_bshd(q);
  at::Tensor lse = at::empty({q.size(0) * seq * heads}, q.options());
  float* lse_data = lse.data_ptr<float>();
  const size_t workspace_floats = kernel::forward_workspace_floats(problem_of(q, k, longest(segments)));
  fused::parallel_for(0, static_cast<int64_t>(segments.size()) * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> workspace(workspace_floats);
    for (int64_t task = begin; task < end; ++task) {
      const Segment& segment = segments[static_cast<size_t>(task / heads)];
      kernel::forward(problem_of(q, k, segment), view_of(q, segment), view_of(k, segment), view_of(v, segment),
                      view_of(out, segment), lse_data + lse_offset(segment, heads, seq), 0, task % heads,
                      workspace.data());
    }
  });
  return {out, lse};
}

struct CausalAttentionFunction : torch::autograd::Function<CausalAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& documents) {
    auto [out, lse] = run_forward(q, k, v, segments_of(documents, q.size(0), q.size(2)));
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["documents"] = documents;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const at::Tensor grad_out = unit_last_stride(grads[0]);
    const int64_t heads = q.size(1), kv_heads = k.size(1), seq = q.size(2);
    const std::vector<Segment> segments = segments_of(ctx->saved_data["documents"].toTensor(), q.size(0), seq);
    at::Tensor dq = empty_bshd(q), dk = empty_bshd(k), dv = empty_bshd(v);
    const float* lse_data = lse.data_ptr<float>();
    const size_t workspace_floats = kernel::backward_workspace_floats(problem_of(q, k, longest(segments)));
    // A task per (segment, kv head): no two write the same dK/dV rows.
    fused::parallel_for(0, static_cast<int64_t>(segments.size()) * kv_heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> workspace(workspace_floats);
      for (int64_t task = begin; task < end; ++task) {
        const Segment& segment = segments[static_cast<size_t>(task / kv_heads)];
        kernel::backward(problem_of(q, k, segment), view_of(q, segment), view_of(k, segment), view_of(v, segment),
                         view_of(out, segment), view_of(grad_out, segment), lse_data + lse_offset(segment, heads, seq),
                         view_of(dq, segment), view_of(dk, segment), view_of(dv, segment), 0, task % kv_heads,
                         workspace.data());
      }
    });
    return {dq, dk, dv, at::Tensor()};
  }
};

}  // namespace

bool cpu_attention_kernel_supports(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!t->defined() || t->device().type() != at::kCPU || t->layout() != at::kStrided ||
        t->scalar_type() != at::kFloat || t->dim() != 4)
      return false;
  }
  if (k.sizes() != v.sizes() || q.size(0) != k.size(0) || q.size(2) != k.size(2) || q.size(3) != k.size(3))
    return false;
  if (k.size(1) == 0 || q.size(1) % k.size(1) != 0 || q.numel() == 0) return false;
  // The kernel indexes with int32 lanes along the sequence.
  if (q.size(2) >= (int64_t{1} << 30)) return false;
  return cpu_has_avx2_fma();
}

bool cpu_attention_takes_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t seq = q.size(2), head_dim = q.size(3);
  if (!cpu_attention_kernel_supports(q, k, v) || head_dim > kMaxKernelHeadDim) return false;
  const int64_t always_up_to = kernel::uses_avx512(head_dim) ? kAvx512KernelAlwaysUpToSeq : kKernelAlwaysUpToSeq;
  return seq <= always_up_to || seq * head_dim <= kMaxKernelSeqTimesHeadDim;
}

at::Tensor cpu_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& documents) {
  if (!cpu_attention_kernel_supports(q, k, v))
    throw Error(
        "fused_kernels cpu attention: needs fp32 CPU q [b, h, s, d], "
        "k/v [b, kv_h, s, d] with h a multiple "
        "of kv_h on a CPU with AVX2 and FMA; got q " +
        std::string(q.toString()) + " " + c10::str(q.sizes()) + ", k " + c10::str(k.sizes()) + ", v " +
        c10::str(v.sizes()));
  at::Tensor qs = unit_last_stride(q), ks = unit_last_stride(k), vs = unit_last_stride(v);
  const bool needs_grad = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  const bool documents_fit = !documents.defined() || (documents.dim() == 2 && documents.size(0) == q.size(0) &&
                                                       documents.size(1) == q.size(2) && documents.device().is_cpu());
  if (!documents_fit) {
    throw Error("fused_kernels cpu attention: document ids must be [batch, seq] = [" + std::to_string(q.size(0)) +
                ", " + std::to_string(q.size(2)) + "] on the CPU, got " + c10::str(documents.sizes()) + " on " +
                documents.device().str());
  }
  if (!needs_grad) return run_forward(qs, ks, vs, segments_of(documents, q.size(0), q.size(2))).first;
  // Autograd's apply() takes no undefined tensor: an empty one stands for none.
  return CausalAttentionFunction::apply(qs, ks, vs, documents.defined() ? documents : at::empty({0}, at::kLong));
}

at::Tensor CpuAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& documents) {
  if (!cpu_attention_takes_kernel(q, k, v)) return AttentionCore::forward(q, k, v, documents);
  return cpu_causal_attention(q, k, v, documents);
}

}  // namespace titan::fused
