// Fused SwiGLU elementwise part, silu(a) * b, forward and backward: one
// pass over memory instead of ATen's silu, multiply and their backwards.
#include "device_common.cuh"

namespace titan::fused_cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

template <class T>
__global__ void swiglu_forward_kernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x = to_float(a[i]);
    out[i] = from_float<T>(x * sigmoid(x) * to_float(b[i]));
  }
}

// d silu(a)/da = s (1 + a (1 - s)) with s = sigmoid(a).
template <class T>
__global__ void swiglu_backward_kernel(const T* grad_out, const T* a, const T* b, T* grad_a, T* grad_b, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x = to_float(a[i]), g = to_float(grad_out[i]), s = sigmoid(x);
    grad_a[i] = from_float<T>(g * to_float(b[i]) * s * (1.f + x * (1.f - s)));
    grad_b[i] = from_float<T>(g * x * s);
  }
}

}  // namespace

template <class T>
Status swiglu_forward(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return nullptr;
  swiglu_forward_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(a, b, out, n);
  return detail::launch_status();
}

template <class T>
Status swiglu_backward(const T* grad_out, const T* a, const T* b, T* grad_a, T* grad_b, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return nullptr;
  swiglu_backward_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(grad_out, a, b, grad_a,
                                                                                             grad_b, n);
  return detail::launch_status();
}

#define TITAN_INSTANTIATE_SWIGLU(T)                                                 \
  template Status swiglu_forward<T>(const T*, const T*, T*, int64_t, cudaStream_t); \
  template Status swiglu_backward<T>(const T*, const T*, const T*, T*, T*, int64_t, cudaStream_t);
TITAN_INSTANTIATE_SWIGLU(float)
TITAN_INSTANTIATE_SWIGLU(__nv_bfloat16)

}  // namespace titan::fused_cuda
