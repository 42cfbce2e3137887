// Autograd functions over the fused CUDA kernels (cuda/fused_kernels.h), and
// the layers and loss that use them, as emulated_layers.cpp does with the
// emulations. Every launch goes on the current stream of the inputs' device
// with scratch from the caching allocator (so it is reused in stream order)
// and nothing waits on the host. Operands are checked here, since a kernel
// handed a wrong pointer or layout faults far from the cause, if at all.
#include "cuda_layers.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "cuda/fused_kernels.h"
#include "titan/error.hpp"

namespace titan::fused {
namespace {

namespace kernels = titan::fused_cuda;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

[[noreturn]] void fail(const char* kernel, const std::string& problem) {
  throw Error(std::string("fused_kernels ") + kernel + ": " + problem);
}

std::string describe(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + " " + c10::str(t.sizes()) + " on " + t.device().str();
}

// `dims` < 0: any number of dimensions.
void check_layout(const char* kernel, const std::string& name, const at::Tensor& t, int64_t dims) {
  if (dims >= 0 && t.dim() != dims) {
    fail(kernel, name + " is " + describe(t) + ", expected " + std::to_string(dims) + " dimensions");
  }
  if (!t.is_contiguous()) {
    fail(kernel, name + " (" + describe(t) + ", strides " + c10::str(t.strides()) +
                     ") must be contiguous; the kernels index it densely");
  }
}

// The first input of a kernel: it fixes the device and the dtype of the rest.
void check_input(const char* kernel, const std::string& name, const at::Tensor& t, int64_t dims) {
  if (!t.defined()) fail(kernel, name + " is undefined");
  if (!t.is_cuda()) {
    fail(kernel, name + " is " + describe(t) +
                     "; the fused kernels run on a CUDA device (on CPU: set the option to false, or emulate: true)");
  }
  if (t.scalar_type() != at::kFloat && t.scalar_type() != at::kBFloat16) {
    fail(kernel, name + " is " + describe(t) + "; the fused kernels take Float or BFloat16");
  }
  check_layout(kernel, name, t, dims);
}

// Another operand: on the input's device, in `dtype`, contiguous.
void check_operand(const char* kernel, const std::string& name, const at::Tensor& t, const at::Tensor& input,
                   at::ScalarType dtype, int64_t dims) {
  if (!t.defined()) fail(kernel, name + " is undefined");
  if (t.device() != input.device()) {
    fail(kernel, name + " is on " + t.device().str() + " but the input is on " + input.device().str());
  }
  if (t.scalar_type() != dtype) {
    fail(kernel, name + " is " + describe(t) + " but must be " + c10::toString(dtype) +
                     (dtype == input.scalar_type() ? " like the input (the kernels take one dtype)" : ""));
  }
  check_layout(kernel, name, t, dims);
}

void check_sizes(const char* kernel, const std::string& name, const at::Tensor& t, at::IntArrayRef expected) {
  if (t.sizes() != expected) fail(kernel, name + " is " + describe(t) + ", expected sizes " + c10::str(expected));
}

void check_queued(const char* kernel, kernels::Status status) {
  if (status != nullptr) fail(kernel, std::string("the CUDA launch failed: ") + status);
}

// Calls body(Tag<T>{}) with T the kernels' element type of a checked dtype.
template <class T>
struct Tag {
  using type = T;
};
template <class Body>
void with_element_type(at::ScalarType dtype, Body&& body) {
  if (dtype == at::kFloat) {
    body(Tag<float>{});
  } else {
    body(Tag<__nv_bfloat16>{});  // at::BFloat16 and __nv_bfloat16: the same 16 bits
  }
}

template <class T>
const T* read_ptr(const at::Tensor& t) {
  return static_cast<const T*>(t.const_data_ptr());
}
template <class T>
T* write_ptr(const at::Tensor& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}

cudaStream_t current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

at::Tensor workspace(size_t bytes, const at::Tensor& input) {
  return at::empty({static_cast<int64_t>(bytes)}, input.options().dtype(at::kByte));
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    check_input("rmsnorm", "x", x, 2);
    check_operand("rmsnorm", "weight", weight, x, x.scalar_type(), 1);
    int64_t rows = x.size(0), dim = x.size(1);
    if (dim == 0) fail("rmsnorm", "x is " + describe(x) + "; the normalized dimension must not be empty");
    check_sizes("rmsnorm", "weight", weight, {dim});
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor y = at::empty(x.sizes(), x.options());
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    if (rows > 0) {
      with_element_type(x.scalar_type(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        check_queued("rmsnorm", kernels::rmsnorm_forward<T>(read_ptr<T>(x), read_ptr<T>(weight), write_ptr<T>(y),
                                                            rstd.mutable_data_ptr<float>(), rows, dim,
                                                            static_cast<float>(eps), current_stream()));
      });
    }
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    at::Tensor grad_y = grads[0].contiguous();
    check_operand("rmsnorm backward", "grad_y", grad_y, x, x.scalar_type(), 2);
    check_sizes("rmsnorm backward", "grad_y", grad_y, x.sizes());
    int64_t rows = x.size(0), dim = x.size(1);
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor grad_x = at::empty(x.sizes(), x.options());
    if (rows == 0) return {grad_x, at::zeros(weight.sizes(), weight.options()), at::Tensor()};
    at::Tensor grad_weight = at::empty(weight.sizes(), weight.options());
    at::Tensor scratch = workspace(kernels::rmsnorm_backward_workspace_bytes(rows, dim), x);
    with_element_type(x.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      check_queued("rmsnorm backward",
                   kernels::rmsnorm_backward<T>(read_ptr<T>(grad_y), read_ptr<T>(x), read_ptr<T>(weight),
                                                rstd.const_data_ptr<float>(), write_ptr<T>(grad_x),
                                                write_ptr<T>(grad_weight), scratch.mutable_data_ptr(), rows, dim,
                                                current_stream()));
    });
    return {grad_x, grad_weight, at::Tensor()};
  }
};

// x [batch, seq, heads, head_dim] rotated by the first seq rows of the fp32
// tables [>= seq, head_dim / 2]; `backward` rotates by the opposite angle.
at::Tensor rotate(const char* kernel, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  bool backward) {
  int64_t seq = x.size(1), head_dim = x.size(3);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  // Each call rotates one tensor: the kernel's k operand is left empty.
  kernels::RopeShape shape{x.size(0), seq, x.size(2), /*kv_heads=*/0, head_dim};
  with_element_type(x.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const float *c = cos.const_data_ptr<float>(), *s = sin.const_data_ptr<float>();
    check_queued(kernel, backward ? kernels::rope_backward<T>(read_ptr<T>(x), nullptr, write_ptr<T>(out), nullptr,
                                                              c, s, shape, current_stream())
                                  : kernels::rope_forward<T>(read_ptr<T>(x), nullptr, write_ptr<T>(out), nullptr, c,
                                                             s, shape, current_stream()));
  });
  return out;
}

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    check_input("rope", "x", x, 4);
    int64_t seq = x.size(1), head_dim = x.size(3);
    if (head_dim == 0 || head_dim % 2 != 0) {
      fail("rope", "x is " + describe(x) + "; head_dim (its last size) must be even and > 0");
    }
    auto check_table = [&](const char* name, const at::Tensor& table) {
      check_operand("rope", name, table, x, at::kFloat, 2);
      if (table.size(0) < seq || table.size(1) != head_dim / 2) {
        fail("rope", std::string(name) + " is " + describe(table) + ", expected at least " + std::to_string(seq) +
                         " rows (the sequence) of " + std::to_string(head_dim / 2) + " (head_dim / 2)");
      }
    };
    check_table("cos", cos);
    check_table("sin", sin);
    ctx->save_for_backward({cos, sin});
    return rotate("rope", x, cos, sin, /*backward=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor grad_out = grads[0].contiguous();  // attention's transposes make it strided
    check_input("rope backward", "grad_out", grad_out, 4);
    return {rotate("rope backward", grad_out, saved[0], saved[1], /*backward=*/true), at::Tensor(), at::Tensor()};
  }
};

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    check_input("swiglu", "gate", gate, -1);
    check_operand("swiglu", "up", up, gate, gate.scalar_type(), -1);
    check_sizes("swiglu", "up", up, gate.sizes());
    const c10::cuda::CUDAGuard guard(gate.device());
    at::Tensor out = at::empty(gate.sizes(), gate.options());
    with_element_type(gate.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      check_queued("swiglu", kernels::swiglu_forward<T>(read_ptr<T>(gate), read_ptr<T>(up), write_ptr<T>(out),
                                                        gate.numel(), current_stream()));
    });
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    at::Tensor grad_out = grads[0].contiguous();
    check_operand("swiglu backward", "grad_out", grad_out, gate, gate.scalar_type(), -1);
    check_sizes("swiglu backward", "grad_out", grad_out, gate.sizes());
    const c10::cuda::CUDAGuard guard(gate.device());
    at::Tensor grad_gate = at::empty(gate.sizes(), gate.options()), grad_up = at::empty(up.sizes(), up.options());
    with_element_type(gate.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      check_queued("swiglu backward",
                   kernels::swiglu_backward<T>(read_ptr<T>(grad_out), read_ptr<T>(gate), read_ptr<T>(up),
                                               write_ptr<T>(grad_gate), write_ptr<T>(grad_up), gate.numel(),
                                               current_stream()));
    });
    return {grad_gate, grad_up};
  }
};

kernels::CrossEntropyShape cross_entropy_shape(const at::Tensor& hidden, const at::Tensor& weight, int64_t chunk) {
  kernels::CrossEntropyShape shape;
  shape.tokens = hidden.size(0);
  shape.dim = hidden.size(1);
  shape.vocab = weight.size(0);
  shape.chunk = chunk;
  return shape;  // ignore_index: PyTorch's -100, as the model's default loss
}

struct LinearCrossEntropyFunction : torch::autograd::Function<LinearCrossEntropyFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t chunk) {
    const char* kernel = "cross_entropy";
    check_input(kernel, "hidden", hidden, 2);
    check_operand(kernel, "output weight", weight, hidden, hidden.scalar_type(), 2);
    check_operand(kernel, "labels", labels, hidden, at::kLong, 1);
    if (hidden.size(0) == 0 || hidden.size(1) == 0 || weight.size(0) == 0) {
      fail(kernel, "hidden " + describe(hidden) + " and output weight " + describe(weight) +
                       ": tokens, dim and vocabulary must not be empty");
    }
    check_sizes(kernel, "output weight", weight, {weight.size(0), hidden.size(1)});
    check_sizes(kernel, "labels", labels, {hidden.size(0)});
    if (chunk <= 0) fail(kernel, "cross_entropy_chunk is " + std::to_string(chunk) + ", expected > 0");
    kernels::CrossEntropyShape shape = cross_entropy_shape(hidden, weight, chunk);
    const c10::cuda::CUDAGuard guard(hidden.device());
    auto f32 = hidden.options().dtype(at::kFloat);
    at::Tensor loss = at::empty({}, f32), lse = at::empty({shape.tokens}, f32);
    at::Tensor scratch = workspace(kernels::chunked_cross_entropy_forward_workspace_bytes(shape), hidden);
    with_element_type(hidden.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      // The current handle: bound to the current stream, with its workspace.
      check_queued(kernel, kernels::chunked_cross_entropy_forward<T>(
                               at::cuda::getCurrentCUDABlasHandle(), read_ptr<T>(hidden), read_ptr<T>(weight),
                               labels.const_data_ptr<int64_t>(), loss.mutable_data_ptr<float>(),
                               lse.mutable_data_ptr<float>(), scratch.mutable_data_ptr(), shape, current_stream()));
    });
    ctx->save_for_backward({hidden, weight, labels, lse});
    ctx->saved_data["chunk"] = chunk;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const char* kernel = "cross_entropy backward";
    auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &labels = saved[2], &lse = saved[3];
    // One fp32 on the device: the kernel reads it there (no host sync).
    at::Tensor grad_loss = grads[0].to(at::kFloat).contiguous();
    check_operand(kernel, "grad_loss", grad_loss, hidden, at::kFloat, 0);
    kernels::CrossEntropyShape shape = cross_entropy_shape(hidden, weight, ctx->saved_data["chunk"].toInt());
    const c10::cuda::CUDAGuard guard(hidden.device());
    at::Tensor grad_hidden = at::empty(hidden.sizes(), hidden.options());
    at::Tensor grad_weight = at::empty(weight.sizes(), weight.options());
    at::Tensor scratch = workspace(kernels::chunked_cross_entropy_backward_workspace_bytes(shape), hidden);
    with_element_type(hidden.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      check_queued(kernel, kernels::chunked_cross_entropy_backward<T>(
                               at::cuda::getCurrentCUDABlasHandle(), read_ptr<T>(hidden), read_ptr<T>(weight),
                               labels.const_data_ptr<int64_t>(), lse.const_data_ptr<float>(),
                               grad_loss.const_data_ptr<float>(), write_ptr<T>(grad_hidden),
                               write_ptr<T>(grad_weight), scratch.mutable_data_ptr(), shape, current_stream()));
    });
    return {grad_hidden, grad_weight, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CudaRMSNorm::forward(const at::Tensor& input) {
  at::Tensor rows = input.reshape({-1, input.size(-1)}).contiguous();
  return RmsNormFunction::apply(rows, norm_->weight, norm_->eps).view(input.sizes());
}

at::Tensor CudaRotary::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (cos.dim() == 3) return forward_by_token(x, cos, sin);
  // The tables as the kernel reads them: dense fp32 rows (the model's are).
  return RotaryFunction::apply(x.contiguous(), cos.to(at::kFloat).contiguous(), sin.to(at::kFloat).contiguous());
}

at::Tensor CudaSwiGLU::forward(const at::Tensor& gate, const at::Tensor& up) {
  return SwigluFunction::apply(gate.contiguous(), up.contiguous());
}

LossFn cuda_chunked_linear_cross_entropy(at::Tensor weight, int64_t chunk) {
  return [weight, chunk](const at::Tensor& hidden, const at::Tensor& labels) {
    return LinearCrossEntropyFunction::apply(hidden.reshape({-1, hidden.size(-1)}).contiguous(), weight,
                                             labels.reshape({-1}).contiguous(), chunk);
  };
}

}  // namespace titan::fused
