// CPU causal attention: ATen's flash attention
// (at::scaled_dot_product_attention, is_causal) against the fused_kernels AVX2
// kernel (cpu_causal_attention), forward + backward in fp32 at 2 threads, for
// the Llama debug shape and larger head_dim / sequence; measured alternately in
// one run after a warm-up, medians printed as a markdown table with the path
// CpuAttention takes for each shape (the measured threshold lives in
// cpu_attention.cpp). Usage: titan_bench_cpu_attention [repeats (15)] [threads
// (2)]
#include "cpu_attention.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_timing.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_cpu_attention {

struct Shape {
  int64_t batch, heads, kv_heads, seq, head_dim;
};

// One forward + backward in milliseconds.
double time_ms(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& attention,
               const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& grad_out) {
  at::Tensor ql = q.detach().requires_grad_(), kl = k.detach().requires_grad_(), vl = v.detach().requires_grad_();
  auto start = std::chrono::steady_clock::now();
  attention(ql, kl, vl).backward(grad_out);
  return titan::bench::seconds_since(start) * 1e3;
}

double time_forward_ms(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& attention,
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::NoGradGuard no_grad;
  auto start = std::chrono::steady_clock::now();
  attention(q, k, v);
  return titan::bench::seconds_since(start) * 1e3;
}

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 15;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  at::set_num_threads(threads);
  auto aten = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt, q.size(1) != k.size(1));
  };
  auto ours = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return titan::fused::cpu_causal_attention(q, k, v);
  };
  // The debug model's shape (and with GQA), then head_dim 16 .. 128 at
  // short and long sequences: where the kernel stops paying off.
  const std::vector<Shape> shapes = {
      {8, 16, 16, 128, 16}, {8, 16, 4, 128, 16}, {2, 8, 8, 2048, 16},  {1, 8, 8, 4096, 16},  {8, 16, 16, 128, 32},
      {4, 8, 8, 1024, 32},  {1, 8, 8, 2048, 32}, {8, 16, 16, 128, 64}, {4, 8, 8, 512, 64},   {2, 8, 8, 1024, 64},
      {1, 8, 8, 2048, 64},  {8, 8, 8, 128, 128}, {2, 8, 8, 512, 128},  {1, 8, 8, 1024, 128}, {1, 8, 8, 2048, 128}};
  std::printf(
      "fp32, %d threads, median of %d alternated runs; q/k/v as [b, s, "
      "h, d] storage viewed as [b, h, s, d]\n\n",
      threads, repeats);
  std::printf(
      "| b, h, kv_h, seq, head_dim | ATen fwd ms | ours fwd ms | ATen fwd+bwd "
      "ms | ours fwd+bwd ms | ours/ATen (fwd+bwd) | CpuAttention path |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    at::manual_seed(0);
    at::Tensor q = at::randn({s.batch, s.seq, s.heads, s.head_dim}).transpose(1, 2);
    at::Tensor k = at::randn({s.batch, s.seq, s.kv_heads, s.head_dim}).transpose(1, 2);
    at::Tensor v = at::randn({s.batch, s.seq, s.kv_heads, s.head_dim}).transpose(1, 2);
    at::Tensor grad_out = at::randn({s.batch, s.heads, s.seq, s.head_dim});
    for (int i = 0; i < 2; ++i) {  // warm-up
      time_ms(aten, q, k, v, grad_out);
      time_ms(ours, q, k, v, grad_out);
    }
    std::vector<double> aten_f, ours_f, aten_fb, ours_fb;
    for (int i = 0; i < repeats; ++i) {
      aten_f.push_back(time_forward_ms(aten, q, k, v));
      ours_f.push_back(time_forward_ms(ours, q, k, v));
      aten_fb.push_back(time_ms(aten, q, k, v, grad_out));
      ours_fb.push_back(time_ms(ours, q, k, v, grad_out));
    }
    const double a = titan::bench::median(aten_fb), o = titan::bench::median(ours_fb);
    std::printf("| %ld, %ld, %ld, %ld, %ld | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", (long)s.batch, (long)s.heads,
                (long)s.kv_heads, (long)s.seq, (long)s.head_dim, titan::bench::median(aten_f),
                titan::bench::median(ours_f), a, o, o / a,
                titan::fused::cpu_attention_takes_kernel(q, k, v) ? "kernel" : "ATen");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace titan_bench_cpu_attention
