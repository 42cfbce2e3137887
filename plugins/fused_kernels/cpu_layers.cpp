// Autograd functions over the fused CPU kernels (cpu_kernels.h), threaded
// with parallel_for (libtorch_threads.h) over rows, and the layers and loss
// that use them. Built at the build's flags with the library's other glue
// (CMakeLists.txt); the loops that do the work are the kernels', at -O3.
#include "cpu_layers.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <string>

#include "cpu_kernels.h"
#include "libtorch_threads.h"
#include "titan/onednn_matmul.hpp"
#include "fused_ops.h"

namespace titan::fused {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Below this many elements per task a thread costs more than it saves.
constexpr int64_t kElementsPerTask = 16384;
constexpr int64_t kIgnoreIndex = -100;

int64_t rows_per_task(int64_t row_elements) {
  return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(1, row_elements));
}

// fp32 strided CPU tensors on a CPU with AVX2 + FMA; anything else (meta in
// `titan plan`, CUDA, bf16) takes the ATen path.
bool runs_on_kernels(std::initializer_list<const at::Tensor *> tensors) {
  if (!cpu_kernels_supported()) return false;
  for (const at::Tensor *t : tensors) {
    if (!t->defined() || !t->device().is_cpu() || t->layout() != at::kStrided || t->scalar_type() != at::kFloat) {
      return false;
    }
  }
  return true;
}

struct CpuRmsNormFunction : torch::autograd::Function<CpuRmsNormFunction> {
  // x [rows, dim] contiguous, weight [dim] contiguous.
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &weight, double eps) {
    int64_t rows = x.size(0), dim = x.size(1);
    at::Tensor y = at::empty_like(x), rstd = at::empty({rows}, x.options());
    const float *xp = x.data_ptr<float>();
    const float *wp = weight.data_ptr<float>();
    float *yp = y.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    fused::parallel_for(0, rows, rows_per_task(dim), [&](int64_t begin, int64_t end) {
      cpu::rmsnorm_forward(xp + begin * dim, wp, yp + begin * dim, rp + begin, end - begin, dim,
                           static_cast<float>(eps));
    });
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    at::Tensor dy = grads[0].contiguous();
    int64_t rows = x.size(0), dim = x.size(1);
    at::Tensor dx = at::empty_like(x);
    // The weight gradient: one partial sum per block of rows, the blocks
    // fixed by the thread count (not by the scheduler), then summed in order.
    int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / 8));
    at::Tensor partial = at::zeros({blocks, dim}, x.options());
    const float *dyp = dy.data_ptr<float>(), *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>();
    const float *rp = rstd.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *pp = partial.data_ptr<float>();
    fused::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        int64_t r0 = rows * block / blocks, r1 = rows * (block + 1) / blocks;
        cpu::rmsnorm_backward(dyp + r0 * dim, xp + r0 * dim, wp, rp + r0, dxp + r0 * dim, pp + block * dim, r1 - r0,
                              dim);
      }
    });
    at::Tensor grad_weight = blocks == 1 ? partial.view({dim}) : partial.sum(0);
    return {dx, grad_weight, at::Tensor()};
  }
};

// cos/sin [seq, head_dim / 2] fp32, head_dim contiguous -> x rotated into a
// new contiguous tensor.
at::Tensor rotate(const at::Tensor &x, const at::Tensor &cos, const at::Tensor &sin, int direction) {
  at::Tensor input = x.stride(3) == 1 ? x : x.contiguous();
  int64_t batch = input.size(0), seq = input.size(1), heads = input.size(2), head_dim = input.size(3);
  at::Tensor tables = at::empty({2, seq, head_dim}, input.options());
  float *cos2 = tables[0].data_ptr<float>(), *sin2 = tables[1].data_ptr<float>();
  cpu::rope_tables(cos.data_ptr<float>(), cos.stride(0), sin.data_ptr<float>(), sin.stride(0), seq, head_dim, direction,
                   cos2, sin2);
  at::Tensor out = at::empty(input.sizes(), input.options());
  const float *xp = input.data_ptr<float>();
  float *op = out.data_ptr<float>();
  int64_t sb = input.stride(0), ss = input.stride(1), sh = input.stride(2);
  fused::parallel_for(0, batch * seq, rows_per_task(heads * head_dim), [&](int64_t begin, int64_t end) {
    cpu::rope_rows(xp, sb, ss, sh, op, cos2, sin2, begin, end, seq, heads, head_dim);
  });
  return out;
}

struct CpuRotaryFunction : torch::autograd::Function<CpuRotaryFunction> {
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &cos, const at::Tensor &sin) {
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, +1);
  }
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], -1), at::Tensor(), at::Tensor()};
  }
};

// silu(gate) * up for contiguous gate and up of one shape; sigmoid(gate)
// written too where `sigmoid` is defined.
at::Tensor swiglu(const at::Tensor &gate, const at::Tensor &up, const at::Tensor &sigmoid) {
  at::Tensor out = at::empty_like(gate);
  const float *ap = gate.data_ptr<float>(), *bp = up.data_ptr<float>();
  float *op = out.data_ptr<float>(), *sp = sigmoid.defined() ? sigmoid.data_ptr<float>() : nullptr;
  fused::parallel_for(0, gate.numel(), kElementsPerTask, [&](int64_t begin, int64_t end) {
    cpu::swiglu_forward(ap + begin, bp + begin, op + begin, sp ? sp + begin : nullptr, end - begin);
  });
  return out;
}

struct CpuSwigluFunction : torch::autograd::Function<CpuSwigluFunction> {
  // gate, up contiguous, same shape. Saves gate, up and sigmoid(gate) (as
  // many tensors as ATen's silu + mul save) so the backward needs no exp.
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &gate, const at::Tensor &up) {
    at::Tensor sigmoid = at::empty_like(gate);
    at::Tensor out = swiglu(gate, up, sigmoid);
    ctx->save_for_backward({gate, up, sigmoid});
    return out;
  }
  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1], &sigmoid = saved[2];
    at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_gate = at::empty_like(gate), grad_up = at::empty_like(up);
    const float *gp = grad.data_ptr<float>(), *ap = gate.data_ptr<float>(), *bp = up.data_ptr<float>();
    const float *sp = sigmoid.data_ptr<float>();
    float *gap = grad_gate.data_ptr<float>(), *gbp = grad_up.data_ptr<float>();
    fused::parallel_for(0, gate.numel(), kElementsPerTask, [&](int64_t begin, int64_t end) {
      cpu::swiglu_backward(gp + begin, ap + begin, bp + begin, sp + begin, gap + begin, gbp + begin, end - begin);
    });
    return {grad_gate, grad_up};
  }
};

struct CpuLinearCrossEntropyFunction : torch::autograd::Function<CpuLinearCrossEntropyFunction> {
  // hidden [tokens, dim], weight [vocab, dim], labels [tokens] int64, all
  // contiguous.
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &hidden, const at::Tensor &weight,
                            const at::Tensor &labels, int64_t chunk, bool want_grad_hidden, bool want_grad_weight) {
    int64_t tokens = hidden.size(0), dim = hidden.size(1), vocab = weight.size(0);
    const int64_t *label = labels.data_ptr<int64_t>();
    int64_t valid = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      if (label[t] == kIgnoreIndex) continue;
      TORCH_CHECK(label[t] >= 0 && label[t] < vocab, "fused_kernels cpu cross_entropy: label ", label[t], " of token ",
                  t, " is outside [0, ", vocab, ") and not the ignore index ", kIgnoreIndex);
      ++valid;
    }
    bool want_grad = want_grad_hidden || want_grad_weight;
    float scale = valid > 0 ? 1.0f / static_cast<float>(valid) : 0.0f;
    // A block's logits hold at most tokens x chunk elements.
    int64_t block = std::clamp<int64_t>(tokens * chunk / vocab, 1, tokens);
    auto f32 = hidden.options();
    at::Tensor row_loss = at::empty({tokens}, f32);
    // One block (the common case) makes the results themselves; several
    // fill and sum into them.
    const bool one_block = block == tokens;
    at::Tensor grad_hidden = want_grad_hidden && !one_block ? at::empty({tokens, dim}, f32) : at::Tensor();
    at::Tensor grad_weight = want_grad_weight && !one_block ? at::zeros({vocab, dim}, f32) : at::Tensor();
    at::Tensor weight_t = weight.t();
    for (int64_t t0 = 0; t0 < tokens; t0 += block) {
      int64_t n = std::min(block, tokens - t0);
      at::Tensor h = hidden.narrow(0, t0, n), z = matmul_nt(h, weight);
      float *zp = z.data_ptr<float>();
      float *lp = row_loss.data_ptr<float>() + t0;
      fused::parallel_for(0, n, rows_per_task(vocab), [&](int64_t begin, int64_t end) {
        cpu::cross_entropy_rows(zp + begin * vocab, label + t0 + begin, end - begin, vocab, kIgnoreIndex, want_grad,
                                scale, lp + begin);
      });
      if (want_grad_hidden) {
        if (one_block) {
          grad_hidden = matmul_nt(z, weight_t);
        } else {
          grad_hidden.narrow(0, t0, n).copy_(matmul_nt(z, weight_t));
        }
      }
      if (want_grad_weight) {
        if (one_block) {
          grad_weight = matmul_nt(z.t(), h.t());
        } else {
          grad_weight.add_(matmul_nt(z.t(), h.t()));
        }
      }
    }
    double total = 0;
    const float *lp = row_loss.data_ptr<float>();
    for (int64_t t = 0; t < tokens; ++t) total += lp[t];
    // 0 / 0 = nan with no valid label, as ATen's mean.
    double loss = total / static_cast<double>(valid);
    ctx->save_for_backward({grad_hidden, grad_weight});
    return at::scalar_tensor(loss, f32);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    // A CPU kernel: the incoming gradient is host memory, read in place.
    const float grad_loss = *grads[0].to(at::kFloat).contiguous().data_ptr<float>();
    auto scaled = [&](const at::Tensor &g) { return !g.defined() || grad_loss == 1.0f ? g : g * grad_loss; };
    return {scaled(saved[0]), scaled(saved[1]), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool cpu_kernels_supported() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

at::Tensor CpuRMSNorm::forward(const at::Tensor &input) {
  const at::Tensor &weight = norm_->weight;
  if (!runs_on_kernels({&input, &weight}) || input.dim() == 0 || weight.dim() != 1 ||
      input.size(-1) != weight.size(0)) {
    return norm_->forward(input);
  }
  at::Tensor rows = input.reshape({-1, input.size(-1)}).contiguous();
  return CpuRmsNormFunction::apply(rows, weight.contiguous(), norm_->eps).view(input.sizes());
}

at::Tensor CpuRotary::forward(const at::Tensor &x, const at::Tensor &cos, const at::Tensor &sin) {
  if (cos.dim() == 3 && x.dim() == 4) return forward_by_token(x, cos, sin);
  if (!runs_on_kernels({&x}) || x.dim() != 4 || x.size(3) % 2 != 0 || !cos.device().is_cpu() ||
      !sin.device().is_cpu() || cos.dim() != 2 || sin.dim() != 2 || cos.size(0) < x.size(1) ||
      sin.size(0) < x.size(1) || cos.size(1) != x.size(3) / 2 || sin.size(1) != x.size(3) / 2) {
    return Rotary::forward(x, cos, sin);
  }
  auto table = [&](const at::Tensor &t) {
    at::Tensor rows = t.narrow(0, 0, x.size(1)).to(at::kFloat);
    return rows.stride(1) == 1 ? rows : rows.contiguous();
  };
  return CpuRotaryFunction::apply(x, table(cos), table(sin));
}

at::Tensor CpuSwiGLU::forward(const at::Tensor &gate, const at::Tensor &up) {
  if (!runs_on_kernels({&gate, &up}) || gate.sizes() != up.sizes()) return SwiGLU::forward(gate, up);
  if (at::GradMode::is_enabled() && (gate.requires_grad() || up.requires_grad())) {
    return CpuSwigluFunction::apply(gate.contiguous(), up.contiguous());
  }
  return swiglu(gate.contiguous(), up.contiguous(), at::Tensor());
}

LossFn cpu_chunked_linear_cross_entropy(at::Tensor weight, int64_t chunk) {
  TORCH_CHECK(chunk > 0, "fused_kernels cpu cross_entropy: chunk must be positive, got ", chunk);
  return [weight, chunk](const at::Tensor &hidden, const at::Tensor &labels) {
    at::Tensor rows = hidden.reshape({-1, hidden.size(-1)}), flat = labels.reshape({-1});
    if (!runs_on_kernels({&rows, &weight}) || !flat.device().is_cpu() || flat.scalar_type() != at::kLong ||
        weight.dim() != 2 || weight.size(1) != rows.size(1) || rows.size(0) == 0 || rows.size(0) != flat.size(0)) {
      return reference_linear_cross_entropy(rows, weight, flat, kIgnoreIndex);
    }
    bool grad_mode = at::GradMode::is_enabled();
    return CpuLinearCrossEntropyFunction::apply(rows.contiguous(), weight.contiguous(), flat.contiguous(), chunk,
                                                grad_mode && rows.requires_grad(), grad_mode && weight.requires_grad());
  };
}

}  // namespace titan::fused
