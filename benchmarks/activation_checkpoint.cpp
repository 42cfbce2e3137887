// Activation checkpointing: activation bytes (what a forward leaves alive
// for backward), peak bytes over forward + backward, and forward + backward
// time per mode, on the debug model and on an 8B-shaped model cut to 2
// blocks, measured in one run; ratios against no AC on the same machine.
// Usage: titan_bench_activation_checkpoint [repeats] [threads]
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "titan/config.hpp"
#include "titan/logging.hpp"
#include "titan/parallelizer.hpp"
#include "titan/peak_memory.hpp"
#include "titan/registry.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_activation_checkpoint {

using titan::bench::median;
using titan::bench::seconds_since;

struct Shape {
  std::string name;
  std::string model_options;  // YAML for the llama3 plugin
  int64_t batch, seq;
};

struct Mode {
  std::string name;
  std::string options;  // YAML for activation_checkpoint; empty: no plugin
};

struct Measured {
  double activation_mib = 0, peak_mib = 0, seconds = 0;
};

titan::PluginContext context(const std::string& yaml) {
  titan::PluginContext out;
  out.options = titan::ConfigNode::parse(yaml, "bench");
  return out;
}

Measured measure(const Shape& shape, const Mode& mode, int repeats) {
  auto& registry = titan::PluginRegistry::instance();
  registry.load("llama3");
  auto spec = registry.create_model("llama3", context(shape.model_options));
  spec->set_vocab_size(2048);
  auto model = spec->build(c10::Device(c10::kMeta));
  if (!mode.options.empty()) {
    registry.load("activation_checkpoint");
    titan::ParallelizeContext parallel{*spec, c10::Device(c10::kCPU)};
    registry.create_parallelizer("activation_checkpoint", context(mode.options))->parallelize(*model, parallel);
  }
  titan::materialize_module(*model, c10::Device(c10::kCPU));
  model->init_weights(0);
  at::manual_seed(0);
  at::Tensor windows = at::randint(2048, {shape.batch, shape.seq + 1}, at::kLong);
  at::Tensor inputs = windows.narrow(1, 0, shape.seq), labels = windows.narrow(1, 1, shape.seq);
  auto step = [&] {
    at::Tensor loss = model->loss()(model->run(inputs), labels);
    loss.backward();
    model->zero_grad();
  };
  step();  // the memory-budget choice is made here; gradients exist from here on
  Measured out;
  at::Tensor kept;
  out.activation_mib = titan::cpu_memory_during([&] { kept = model->loss()(model->run(inputs), labels); }).retained /
                       1048576.0;
  kept = at::Tensor();
  out.peak_mib = titan::peak_cpu_bytes_during(step) / 1048576.0;
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(seconds_since(start));
  }
  out.seconds = median(times);
  return out;
}

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  int threads = argc > 2 ? std::atoi(argv[2]) : static_cast<int>(std::thread::hardware_concurrency());
  titan::init_logging(0, "warn");
  at::set_num_threads(threads);
  const std::vector<Shape> shapes = {
      {"debugmodel (dim 256, 6 blocks), batch 8 x seq 256", "{flavor: debugmodel, max_seq_len: 512}", 8, 256},
      {"8B shape cut to 2 blocks (dim 4096, 32/8 heads, FFN 14336), batch 1 x seq 128",
       "{flavor: 8B, n_layers: 2, max_seq_len: 512}", 1, 128},
  };
  const std::vector<Mode> modes = {{"none", ""},
                                   {"full", "{mode: full}"},
                                   {"selective, every 2nd block", "{mode: selective, selective_ac_option: '2'}"},
                                   {"memory_budget 0.5", "{mode: memory_budget, memory_budget: 0.5}"},
                                   {"per-op selective (op)", "{mode: selective, selective_ac_option: op}"}};
  for (const auto& shape : shapes) {
    std::printf("\nactivation checkpointing, llama3 %s, vocab 2048, fp32, %d threads, median of %d steps\n",
                shape.name.c_str(), threads, repeats);
    std::printf("| mode | activations MiB | ratio | peak MiB (fwd+bwd) | ratio | s/step | ratio |\n"
                "|---|---|---|---|---|---|---|\n");
    Measured base;
    for (const auto& mode : modes) {
      Measured m = measure(shape, mode, repeats);
      if (mode.options.empty()) base = m;
      std::printf("| %s | %.1f | %.3f | %.1f | %.3f | %.3f | %.2f |\n", mode.name.c_str(), m.activation_mib,
                  m.activation_mib / base.activation_mib, m.peak_mib, m.peak_mib / base.peak_mib, m.seconds,
                  m.seconds / base.seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace titan_bench_activation_checkpoint
