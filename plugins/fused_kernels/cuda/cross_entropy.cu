// Cross-entropy fused with the output projection, chunked over the
// vocabulary. Forward: per chunk, cuBLAS makes fp32 logits [tokens, chunk]
// and one block per token folds them into a running (max, sum of exp)
// pair, so only O(tokens x chunk) logits ever exist. Backward recomputes
// each chunk's logits, turns them into (softmax - onehot) * dloss in T, and
// multiplies that into grad_hidden (fp32 accumulator) and into the chunk's
// own rows of grad_weight.
#include <climits>

#include "device_common.cuh"

namespace titan::fused_cuda {
namespace {

using detail::block_reduce;
using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace carved into typed pieces, each 256-byte aligned.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <class U>
  U* take(size_t count) {
    U* piece = reinterpret_cast<U*>(base_ + used_);
    used_ += align_up(count * sizeof(U));
    return piece;
  }

 private:
  char* base_;
  size_t used_ = 0;
};

template <class T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t cuda_type<__nv_bfloat16>() { return CUDA_R_16BF; }

Status cublas_status(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? nullptr : cublasGetStatusString(status);
}

// Row-major C[m, n] = A[m, k] @ op(B) where cuBLAS is column-major: we ask
// for C^T = op(B)^T A^T, i.e. swap operands. b_transposed: B is stored [n, k].
Status gemm_row_major(cublasHandle_t cublas, int64_t m, int64_t n, int64_t k, const void* a, cudaDataType_t a_type,
                      bool a_transposed, const void* b, cudaDataType_t b_type, bool b_transposed, void* c,
                      cudaDataType_t c_type, float beta) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) return "chunked_cross_entropy: GEMM size over INT_MAX";
  float alpha = 1.f;
  // Column-major view: A row-major [m, k] is A^T col-major [k, m] (ld k);
  // stored [k, m] (a_transposed) it is col-major [m, k] (ld m).
  int lda = static_cast<int>(a_transposed ? m : k);
  int ldb = static_cast<int>(b_transposed ? k : n);
  return cublas_status(cublasGemmEx(cublas, b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                    static_cast<int>(m), static_cast<int>(k), &alpha, b, b_type, ldb, a, a_type, lda,
                                    &beta, c, c_type, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
}

__global__ void init_running_kernel(float* running_max, float* running_sum, float* target, int64_t tokens) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < tokens;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    running_max[i] = -INFINITY;
    running_sum[i] = 0.f;
    target[i] = 0.f;
  }
}

// One block per token: merges the chunk [c0, c0 + width) into the running
// logsumexp and picks up the label's logit when it falls in the chunk.
__global__ void online_logsumexp_kernel(const float* logits, const int64_t* labels, float* running_max,
                                        float* running_sum, float* target, int64_t c0, int64_t width) {
  const float* row = logits + blockIdx.x * width;
  float chunk_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) chunk_max = fmaxf(chunk_max, row[j]);
  chunk_max = block_reduce(chunk_max, detail::MaxOp{}, -INFINITY);
  float chunk_sum = 0.f;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) chunk_sum += __expf(row[j] - chunk_max);
  chunk_sum = block_reduce(chunk_sum, detail::SumOp{}, 0.f);
  if (threadIdx.x == 0) {
    float old_max = running_max[blockIdx.x];
    float new_max = fmaxf(old_max, chunk_max);
    running_sum[blockIdx.x] = running_sum[blockIdx.x] * __expf(old_max - new_max) + chunk_sum * __expf(chunk_max - new_max);
    running_max[blockIdx.x] = new_max;
    int64_t label = labels[blockIdx.x];
    if (label >= c0 && label < c0 + width) target[blockIdx.x] = row[label - c0];
  }
}

// One block: lse per token, the mean loss over tokens whose label counts,
// and that count (saved for backward). No host read-back.
__global__ void finish_loss_kernel(const float* running_max, const float* running_sum, const float* target,
                                   const int64_t* labels, float* lse, float* loss, float* count, int64_t tokens,
                                   int64_t ignore_index) {
  float loss_sum = 0.f, valid = 0.f;
  for (int64_t i = threadIdx.x; i < tokens; i += blockDim.x) {
    float token_lse = running_max[i] + __logf(running_sum[i]);
    lse[i] = token_lse;
    if (labels[i] != ignore_index) {
      loss_sum += token_lse - target[i];
      valid += 1.f;
    }
  }
  loss_sum = block_reduce(loss_sum, detail::SumOp{}, 0.f);
  valid = block_reduce(valid, detail::SumOp{}, 0.f);
  if (threadIdx.x == 0) {
    *count = valid;
    *loss = loss_sum / valid;  // NaN when every label is ignored, as PyTorch
  }
}

__global__ void count_valid_kernel(const int64_t* labels, float* count, int64_t tokens, int64_t ignore_index) {
  float valid = 0.f;
  for (int64_t i = threadIdx.x; i < tokens; i += blockDim.x) valid += labels[i] != ignore_index ? 1.f : 0.f;
  valid = block_reduce(valid, detail::SumOp{}, 0.f);
  if (threadIdx.x == 0) *count = valid;
}

// d loss / d logits for one chunk: (softmax - onehot) * grad_loss / count,
// zero for ignored tokens; one block per token.
template <class T>
__global__ void chunk_logit_grad_kernel(const float* logits, const int64_t* labels, const float* lse,
                                        const float* grad_loss, const float* count, T* grad_logits, int64_t c0,
                                        int64_t width, int64_t ignore_index) {
  const float* row = logits + blockIdx.x * width;
  T* out = grad_logits + blockIdx.x * width;
  int64_t label = labels[blockIdx.x];
  float scale = label == ignore_index ? 0.f : *grad_loss / *count;
  float token_lse = lse[blockIdx.x];
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    float g = __expf(row[j] - token_lse) - (c0 + j == label ? 1.f : 0.f);
    out[j] = from_float<T>(g * scale);
  }
}

template <class T>
__global__ void cast_kernel(const float* in, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(in[i]);
}

Status check_shape(const CrossEntropyShape& s) {
  if (s.tokens <= 0 || s.dim <= 0 || s.vocab <= 0 || s.chunk <= 0) return "chunked_cross_entropy: sizes must be > 0";
  if (s.tokens > INT_MAX) return "chunked_cross_entropy: more tokens than one grid holds";
  return nullptr;
}

int64_t chunk_width(const CrossEntropyShape& s) { return s.chunk < s.vocab ? s.chunk : s.vocab; }

}  // namespace

size_t chunked_cross_entropy_forward_workspace_bytes(CrossEntropyShape s) {
  size_t tokens = static_cast<size_t>(s.tokens);
  return align_up(tokens * chunk_width(s) * sizeof(float)) + 3 * align_up(tokens * sizeof(float)) +
         align_up(sizeof(float));
}

size_t chunked_cross_entropy_backward_workspace_bytes(CrossEntropyShape s) {
  size_t tokens = static_cast<size_t>(s.tokens), width = static_cast<size_t>(chunk_width(s));
  return align_up(tokens * width * sizeof(float)) + align_up(tokens * width * sizeof(float)) +
         align_up(tokens * s.dim * sizeof(float)) + align_up(sizeof(float));
}

template <class T>
Status chunked_cross_entropy_forward(cublasHandle_t cublas, const T* hidden, const T* weight, const int64_t* labels,
                                     float* loss, float* lse, void* workspace, CrossEntropyShape s,
                                     cudaStream_t stream) {
  if (Status status = check_shape(s)) return status;
  if (Status status = cublas_status(cublasSetStream(cublas, stream))) return status;
  Carver carve(workspace);
  float* logits = carve.take<float>(s.tokens * chunk_width(s));
  float* running_max = carve.take<float>(s.tokens);
  float* running_sum = carve.take<float>(s.tokens);
  float* target = carve.take<float>(s.tokens);
  float* count = carve.take<float>(1);
  unsigned tokens = static_cast<unsigned>(s.tokens);
  init_running_kernel<<<detail::elementwise_blocks(s.tokens, kThreads), kThreads, 0, stream>>>(
      running_max, running_sum, target, s.tokens);
  if (Status status = detail::launch_status()) return status;
  for (int64_t c0 = 0; c0 < s.vocab; c0 += s.chunk) {
    int64_t width = s.vocab - c0 < s.chunk ? s.vocab - c0 : s.chunk;
    // logits [tokens, width] = hidden [tokens, dim] @ weight[c0:c0+width]^T
    if (Status status = gemm_row_major(cublas, s.tokens, width, s.dim, hidden, cuda_type<T>(), false,
                                       weight + c0 * s.dim, cuda_type<T>(), true, logits, CUDA_R_32F, 0.f))
      return status;
    online_logsumexp_kernel<<<tokens, kThreads, 0, stream>>>(logits, labels, running_max, running_sum, target, c0,
                                                             width);
    if (Status status = detail::launch_status()) return status;
  }
  finish_loss_kernel<<<1, 1024, 0, stream>>>(running_max, running_sum, target, labels, lse, loss, count, s.tokens,
                                             s.ignore_index);
  return detail::launch_status();
}

template <class T>
Status chunked_cross_entropy_backward(cublasHandle_t cublas, const T* hidden, const T* weight, const int64_t* labels,
                                      const float* lse, const float* grad_loss, T* grad_hidden, T* grad_weight,
                                      void* workspace, CrossEntropyShape s, cudaStream_t stream) {
  if (Status status = check_shape(s)) return status;
  if (Status status = cublas_status(cublasSetStream(cublas, stream))) return status;
  Carver carve(workspace);
  int64_t max_width = chunk_width(s);
  float* logits = carve.take<float>(s.tokens * max_width);
  T* grad_logits = carve.take<T>(s.tokens * max_width);
  float* grad_hidden_sum = carve.take<float>(s.tokens * s.dim);  // fp32 over all chunks
  float* count = carve.take<float>(1);
  unsigned tokens = static_cast<unsigned>(s.tokens);
  count_valid_kernel<<<1, 1024, 0, stream>>>(labels, count, s.tokens, s.ignore_index);
  if (Status status = detail::launch_status()) return status;
  for (int64_t c0 = 0; c0 < s.vocab; c0 += s.chunk) {
    int64_t width = s.vocab - c0 < s.chunk ? s.vocab - c0 : s.chunk;
    const T* weight_chunk = weight + c0 * s.dim;
    if (Status status = gemm_row_major(cublas, s.tokens, width, s.dim, hidden, cuda_type<T>(), false, weight_chunk,
                                       cuda_type<T>(), true, logits, CUDA_R_32F, 0.f))
      return status;
    chunk_logit_grad_kernel<T><<<tokens, kThreads, 0, stream>>>(logits, labels, lse, grad_loss, count, grad_logits,
                                                                c0, width, s.ignore_index);
    if (Status status = detail::launch_status()) return status;
    // grad_hidden [tokens, dim] += grad_logits [tokens, width] @ weight_chunk [width, dim]
    if (Status status = gemm_row_major(cublas, s.tokens, s.dim, width, grad_logits, cuda_type<T>(), false,
                                       weight_chunk, cuda_type<T>(), false, grad_hidden_sum, CUDA_R_32F,
                                       c0 == 0 ? 0.f : 1.f))
      return status;
    // grad_weight[c0:c0+width] [width, dim] = grad_logits^T [width, tokens] @ hidden [tokens, dim]
    if (Status status = gemm_row_major(cublas, width, s.dim, s.tokens, grad_logits, cuda_type<T>(), true, hidden,
                                       cuda_type<T>(), false, grad_weight + c0 * s.dim, cuda_type<T>(), 0.f))
      return status;
  }
  cast_kernel<T><<<detail::elementwise_blocks(s.tokens * s.dim, kThreads), kThreads, 0, stream>>>(
      grad_hidden_sum, grad_hidden, s.tokens * s.dim);
  return detail::launch_status();
}

#define TITAN_INSTANTIATE_CROSS_ENTROPY(T)                                                                       \
  template Status chunked_cross_entropy_forward<T>(cublasHandle_t, const T*, const T*, const int64_t*, float*,     \
                                                   float*, void*, CrossEntropyShape, cudaStream_t);               \
  template Status chunked_cross_entropy_backward<T>(cublasHandle_t, const T*, const T*, const int64_t*,          \
                                                    const float*, const float*, T*, T*, void*, CrossEntropyShape, \
                                                    cudaStream_t);
TITAN_INSTANTIATE_CROSS_ENTROPY(float)
TITAN_INSTANTIATE_CROSS_ENTROPY(__nv_bfloat16)

}  // namespace titan::fused_cuda
