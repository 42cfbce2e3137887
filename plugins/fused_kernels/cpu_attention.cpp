// CpuAttention: the AVX2 causal-attention kernel (cpu_attention_avx2.cpp) as
// an autograd function, threaded over (batch, head) forward and (batch, kv
// head) backward so that no two threads write the same dK/dV, with ATen's
// attention wherever the kernel cannot run or was measured slower.
#include "cpu_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <string>
#include <vector>

#include "cpu_attention_avx2.h"
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

kernel::View view_of(const at::Tensor& t) { return {t.data_ptr<float>(), t.stride(0), t.stride(1), t.stride(2)}; }

// Last dimension unit-stride (the kernel's one layout requirement); the
// llama3 model's transposed q/k/v views already are.
at::Tensor unit_last_stride(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// [batch, heads, seq, head_dim] laid out as [batch, seq, heads, head_dim],
// as ATen's flash attention returns it (transposing back is then a view).
at::Tensor empty_bshd(const at::Tensor& like) {
  return at::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options()).transpose(1, 2);
}

kernel::Problem problem_of(const at::Tensor& q, const at::Tensor& k) {
  return {q.size(0), q.size(1), k.size(1),
          q.size(2), q.size(3), static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))))};
}

std::pair<at::Tensor, at::Tensor> run_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const kernel::Problem problem = problem_of(q, k);
  at::Tensor out = empty_bshd(q);
  at::Tensor lse = at::empty({problem.batch, problem.heads, problem.seq}, q.options());
  const kernel::View qv = view_of(q), kv = view_of(k), vv = view_of(v), ov = view_of(out);
  float* lse_data = lse.data_ptr<float>();
  const size_t workspace_floats = kernel::forward_workspace_floats(problem);
  at::parallel_for(0, problem.batch * problem.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> workspace(workspace_floats);
    for (int64_t task = begin; task < end; ++task)
      kernel::forward(problem, qv, kv, vv, ov, lse_data, task / problem.heads, task % problem.heads, workspace.data());
  });
  return {out, lse};
}

struct CausalAttentionFunction : torch::autograd::Function<CausalAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v) {
    auto [out, lse] = run_forward(q, k, v);
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const at::Tensor grad_out = unit_last_stride(grads[0]);
    const kernel::Problem problem = problem_of(q, k);
    at::Tensor dq = empty_bshd(q), dk = empty_bshd(k), dv = empty_bshd(v);
    const kernel::View qv = view_of(q), kv = view_of(k), vv = view_of(v), ov = view_of(out), gv = view_of(grad_out);
    const kernel::View dqv = view_of(dq), dkv = view_of(dk), dvv = view_of(dv);
    const float* lse_data = lse.data_ptr<float>();
    const size_t workspace_floats = kernel::backward_workspace_floats(problem);
    at::parallel_for(0, problem.batch * problem.kv_heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> workspace(workspace_floats);
      for (int64_t task = begin; task < end; ++task)
        kernel::backward(problem, qv, kv, vv, ov, gv, lse_data, dqv, dkv, dvv, task / problem.kv_heads,
                         task % problem.kv_heads, workspace.data());
    });
    return {dq, dk, dv};
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

at::Tensor cpu_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!cpu_attention_kernel_supports(q, k, v))
    throw Error(
        "fused_kernels cpu attention: needs fp32 CPU q [b, h, s, d], "
        "k/v [b, kv_h, s, d] with h a multiple "
        "of kv_h on a CPU with AVX2 and FMA; got q " +
        std::string(q.toString()) + " " + c10::str(q.sizes()) + ", k " + c10::str(k.sizes()) + ", v " +
        c10::str(v.sizes()));
  at::Tensor qs = unit_last_stride(q), ks = unit_last_stride(k), vs = unit_last_stride(v);
  const bool needs_grad = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!needs_grad) return run_forward(qs, ks, vs).first;
  return CausalAttentionFunction::apply(qs, ks, vs);
}

at::Tensor CpuAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& documents) {
  if (documents.defined() || !cpu_attention_takes_kernel(q, k, v)) return AttentionCore::forward(q, k, v, documents);
  return cpu_causal_attention(q, k, v);
}

}  // namespace titan::fused
