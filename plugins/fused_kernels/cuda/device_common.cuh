// Device helpers shared by the fused kernels (not part of the launch API):
// fp32 <-> T conversion and block-wide reductions.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "fused_kernels.h"

namespace titan::fused_cuda::detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces one value per thread over the block and gives every thread the
// result. blockDim.x must be a multiple of 32; all threads must call it.
template <class Op>
__device__ float block_reduce(float value, Op op, float identity) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset >>= 1) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : identity;
    for (int offset = 16; offset > 0; offset >>= 1) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
    if (lane == 0) partial[0] = value;
  }
  __syncthreads();
  value = partial[0];
  __syncthreads();  // partial is reused by the next call
  return value;
}

inline Status launch_status() {
  cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

// Grid size for grid-stride elementwise loops: enough blocks to fill the GPU.
inline unsigned elementwise_blocks(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace titan::fused_cuda::detail
