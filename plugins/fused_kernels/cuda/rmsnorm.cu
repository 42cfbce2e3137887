// Fused RMSNorm forward and backward: one block per row, fp32 statistics.
// The weight gradient is summed per row group into fp32 scratch and then
// reduced by a second kernel: deterministic, no atomics.
#include <climits>

#include "device_common.cuh"

namespace titan::fused_cuda {
namespace {

using detail::block_reduce;
using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;
constexpr int64_t kMaxRowGroups = 512;  // ~4 blocks per SM on an H100

int64_t row_groups(int64_t rows) { return rows < kMaxRowGroups ? rows : kMaxRowGroups; }

template <class T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* weight, T* y, float* rstd, int64_t dim, float eps) {
  const T* x_row = x + blockIdx.x * dim;
  T* y_row = y + blockIdx.x * dim;
  float sum_sq = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = to_float(x_row[i]);
    sum_sq += v * v;
  }
  sum_sq = block_reduce(sum_sq, detail::SumOp{}, 0.f);
  float r = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  // Rounded to T before the weight multiply, as the ATen path does.
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float normed = to_float(from_float<T>(to_float(x_row[i]) * r));
    y_row[i] = from_float<T>(normed * to_float(weight[i]));
  }
}

// Block b handles rows b, b + gridDim.x, ...; each thread owns the same
// columns in every row, so its partial weight-gradient sums need no sync.
template <class T>
__global__ void rmsnorm_backward_kernel(const T* grad_y, const T* x, const T* weight, const float* rstd, T* grad_x,
                                        float* partial_grad_weight, int64_t rows, int64_t dim) {
  float* partial = partial_grad_weight + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) partial[i] = 0.f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x_row = x + row * dim;
    const T* dy_row = grad_y + row * dim;
    float r = rstd[row];
    float dot = 0.f;  // sum_j dn_j * n_j
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      float n = to_float(x_row[i]) * r, dy = to_float(dy_row[i]);
      dot += dy * to_float(weight[i]) * n;
      partial[i] += dy * n;
    }
    float mean_dot = block_reduce(dot, detail::SumOp{}, 0.f) / static_cast<float>(dim);
    T* dx_row = grad_x + row * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      float n = to_float(x_row[i]) * r;
      float dn = to_float(dy_row[i]) * to_float(weight[i]);
      dx_row[i] = from_float<T>(r * (dn - n * mean_dot));
    }
  }
}

template <class T>
__global__ void sum_row_groups_kernel(const float* partial, T* out, int64_t groups, int64_t dim) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x) {
    float sum = 0.f;
    for (int64_t g = 0; g < groups; ++g) sum += partial[g * dim + i];
    out[i] = from_float<T>(sum);
  }
}

}  // namespace

template <class T>
Status rmsnorm_forward(const T* x, const T* weight, T* y, float* rstd, int64_t rows, int64_t dim, float eps,
                       cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return rows == 0 ? nullptr : "rmsnorm_forward: dim must be > 0";
  if (rows > INT_MAX) return "rmsnorm_forward: more rows than one grid holds";
  rmsnorm_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, y, rstd, dim, eps);
  return detail::launch_status();
}

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim) {
  return static_cast<size_t>(row_groups(rows)) * static_cast<size_t>(dim) * sizeof(float);
}

template <class T>
Status rmsnorm_backward(const T* grad_y, const T* x, const T* weight, const float* rstd, T* grad_x, T* grad_weight,
                        void* workspace, int64_t rows, int64_t dim, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return "rmsnorm_backward: rows and dim must be > 0";
  int64_t groups = row_groups(rows);
  auto* partial = static_cast<float*>(workspace);
  rmsnorm_backward_kernel<T><<<static_cast<unsigned>(groups), kThreads, 0, stream>>>(grad_y, x, weight, rstd,
                                                                                     grad_x, partial, rows, dim);
  if (Status status = detail::launch_status()) return status;
  sum_row_groups_kernel<T><<<detail::elementwise_blocks(dim, kThreads), kThreads, 0, stream>>>(partial, grad_weight,
                                                                                              groups, dim);
  return detail::launch_status();
}

#define TITAN_INSTANTIATE_RMSNORM(T)                                                                           \
  template Status rmsnorm_forward<T>(const T*, const T*, T*, float*, int64_t, int64_t, float, cudaStream_t);    \
  template Status rmsnorm_backward<T>(const T*, const T*, const T*, const float*, T*, T*, void*, int64_t, int64_t, \
                                      cudaStream_t);
TITAN_INSTANTIATE_RMSNORM(float)
TITAN_INSTANTIATE_RMSNORM(__nv_bfloat16)

}  // namespace titan::fused_cuda
