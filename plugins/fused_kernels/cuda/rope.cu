// Fused rotary embedding on q and k (Meta's interleaved pairs): one thread
// per pair, fp32 rotation, one read and one write of each element.
#include "device_common.cuh"

namespace titan::fused_cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;

// direction +1 rotates by the angle (forward), -1 by its opposite (backward:
// the Jacobian of a rotation is the rotation, its transpose the inverse).
template <class T>
__global__ void rope_kernel(const T* in, T* out, const float* cos, const float* sin, int64_t pairs, int64_t seq,
                            int64_t heads, int64_t half, float direction) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t i = p % half;
    int64_t position = (p / (half * heads)) % seq;
    float c = cos[position * half + i], s = direction * sin[position * half + i];
    float even = to_float(in[2 * p]), odd = to_float(in[2 * p + 1]);
    out[2 * p] = from_float<T>(even * c - odd * s);
    out[2 * p + 1] = from_float<T>(even * s + odd * c);
  }
}

template <class T>
Status rotate(const T* q, const T* k, T* q_out, T* k_out, const float* cos, const float* sin, RopeShape shape,
              float direction, cudaStream_t stream) {
  if (shape.head_dim % 2 != 0) return "rope: head_dim must be even";
  int64_t half = shape.head_dim / 2;
  struct Part {
    const T* in;
    T* out;
    int64_t heads;
  } parts[2] = {{q, q_out, shape.q_heads}, {k, k_out, shape.kv_heads}};
  for (const Part& part : parts) {
    int64_t pairs = shape.batch * shape.seq * part.heads * half;
    if (pairs == 0 || part.in == nullptr) continue;
    rope_kernel<T><<<detail::elementwise_blocks(pairs, kThreads), kThreads, 0, stream>>>(
        part.in, part.out, cos, sin, pairs, shape.seq, part.heads, half, direction);
    if (Status status = detail::launch_status()) return status;
  }
  return nullptr;
}

}  // namespace

template <class T>
Status rope_forward(const T* q, const T* k, T* q_out, T* k_out, const float* cos, const float* sin,
                    RopeShape shape, cudaStream_t stream) {
  return rotate(q, k, q_out, k_out, cos, sin, shape, 1.f, stream);
}

template <class T>
Status rope_backward(const T* grad_q_out, const T* grad_k_out, T* grad_q, T* grad_k, const float* cos,
                     const float* sin, RopeShape shape, cudaStream_t stream) {
  return rotate(grad_q_out, grad_k_out, grad_q, grad_k, cos, sin, shape, -1.f, stream);
}

#define TITAN_INSTANTIATE_ROPE(T)                                                                              \
  template Status rope_forward<T>(const T*, const T*, T*, T*, const float*, const float*, RopeShape, cudaStream_t); \
  template Status rope_backward<T>(const T*, const T*, T*, T*, const float*, const float*, RopeShape, cudaStream_t);
TITAN_INSTANTIATE_ROPE(float)
TITAN_INSTANTIATE_ROPE(__nv_bfloat16)

}  // namespace titan::fused_cuda
