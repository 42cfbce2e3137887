// The fused CPU kernels (plugins/fused_kernels/cpu_layers.h) against the
// ATen path the llama3 model runs, forward + backward, at the debug model's
// shapes (batch 8 x seq 128: RMSNorm dim 256, RoPE 16 heads x 16, SwiGLU
// ffn 768, output projection dim 256 x vocab 2048 + cross-entropy), fp32,
// 2 threads; the two alternated in one run after a warm-up, medians.
// Usage: titan_bench_cpu_fused_ops [repeats (50)]
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "cpu_layers.h"
#include "titan/layers.hpp"
#include "titan/model.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_cpu_fused_ops {

using Step = std::function<void()>;

// Gradients by autograd::grad, so nothing accumulates between repeats.
void backward(const at::Tensor &out, const std::vector<at::Tensor> &inputs, const at::Tensor &grad_out) {
  torch::autograd::grad({out}, inputs, {grad_out});
}

struct Row {
  std::string name;
  Step aten, fused;
};

double time_ms(const Step &step) {
  auto start = std::chrono::steady_clock::now();
  step();
  return titan::bench::seconds_since(start) * 1e3;
}

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 50;
  at::set_num_threads(2);
  at::manual_seed(0);
  if (!titan::fused::cpu_kernels_supported()) {
    std::printf(
        "this CPU lacks AVX2 + FMA: the fused layers would take the "
        "ATen path\n");
    return 1;
  }
  const int64_t batch = 8, seq = 128, dim = 256, heads = 16, head_dim = 16, ffn = 768, vocab = 2048;
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  std::vector<Row> rows;

  auto norm = std::make_shared<titan::RMSNorm>(dim, 1e-5, f32);
  {
    at::NoGradGuard no_grad;
    norm->weight.uniform_(0.5, 1.5);
  }
  auto fused_norm = std::make_shared<titan::fused::CpuRMSNorm>(norm);
  at::Tensor norm_x = at::randn({batch, seq, dim}).requires_grad_(), norm_g = at::randn({batch, seq, dim});
  auto norm_step = [=](titan::Layer &layer) {
    return [=, &layer] { backward(layer.forward(norm_x), {norm_x, norm->weight}, norm_g); };
  };
  rows.push_back({"RMSNorm [1024, 256]", norm_step(*norm), norm_step(*fused_norm)});

  at::Tensor angles = at::outer(at::arange(2 * seq, f32), at::rand({head_dim / 2}));
  at::Tensor cos = angles.cos(), sin = angles.sin();
  at::Tensor rope_x = at::randn({batch, seq, heads, head_dim}).requires_grad_(), rope_g = at::randn(rope_x.sizes());
  auto rope = std::make_shared<titan::Rotary>();
  auto fused_rope = std::make_shared<titan::fused::CpuRotary>();
  auto rope_step = [=](titan::Rotary &layer) {
    return [=, &layer] { backward(layer.forward(rope_x, cos, sin), {rope_x}, rope_g); };
  };
  rows.push_back({"RoPE [8, 128, 16, 16]", rope_step(*rope), rope_step(*fused_rope)});

  at::Tensor gate = (at::randn({batch, seq, ffn}) * 3).requires_grad_(), up = at::randn({batch, seq, ffn});
  up.requires_grad_();
  at::Tensor swiglu_g = at::randn({batch, seq, ffn});
  auto swiglu = std::make_shared<titan::SwiGLU>();
  auto fused_swiglu = std::make_shared<titan::fused::CpuSwiGLU>();
  auto swiglu_step = [=](titan::SwiGLU &layer) {
    return [=, &layer] { backward(layer.forward(gate, up), {gate, up}, swiglu_g); };
  };
  rows.push_back({"SwiGLU [8, 128, 768]", swiglu_step(*swiglu), swiglu_step(*fused_swiglu)});

  at::Tensor hidden = at::randn({batch, seq, dim}).requires_grad_();
  at::Tensor weight = (at::randn({vocab, dim}) * 0.05).requires_grad_();
  at::Tensor labels = at::randint(vocab, {batch, seq}, at::kLong);
  at::Tensor one = at::ones({}, f32);
  Step aten_ce = [=] {
    backward(titan::cross_entropy_loss(at::linear(hidden, weight), labels), {hidden, weight}, one);
  };
  for (int64_t chunk : {8192, 512}) {
    titan::LossFn loss = titan::fused::cpu_chunked_linear_cross_entropy(weight, chunk);
    rows.push_back({"linear + CE [1024, 256] x 2048, chunk " + std::to_string(chunk), aten_ce, [=] {
                      backward(loss(hidden, labels), {hidden, weight}, one);
                    }});
  }

  std::printf("fp32, %d threads, median of %d alternated repeats after 5 warm-ups\n\n", at::get_num_threads(), repeats);
  std::printf(
      "| op (fwd + bwd) | ATen ms | fused ms | ATen / fused "
      "|\n|---|---:|---:|---:|\n");
  for (const Row &row : rows) {
    for (int i = 0; i < 5; ++i) {
      row.aten();
      row.fused();
    }
    std::vector<double> aten_ms, fused_ms;
    for (int i = 0; i < repeats; ++i) {
      aten_ms.push_back(time_ms(row.aten));
      fused_ms.push_back(time_ms(row.fused));
    }
    double a = titan::bench::median(aten_ms), f = titan::bench::median(fused_ms);
    std::printf("| %s | %.3f | %.3f | %.2fx |\n", row.name.c_str(), a, f, a / f);
  }
  return 0;
}

}  // namespace titan_bench_cpu_fused_ops
