// Trainer overhead: step time of Titan's trainer on the debug model against
// a minimal hand-written LibTorch loop (forward, loss, backward, clipping,
// torch::optim::AdamW) over the same model, data and thread count, measured
// in one run. Usage: titan_bench_overhead [steps] [threads]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench_training.hpp"
#include "titan/config.hpp"
#include "titan/data.hpp"
#include "titan/logging.hpp"
#include "titan/registry.hpp"
#include "titan/run_spec.hpp"
#include "titan/trainer.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_overhead {

using titan::bench::seconds_since;

std::string run_yaml(int steps, int threads, const std::string& dump) {
  return titan::bench::debug_model_run(steps, threads, dump, 256);
}

// The reference: the same model built through the same plugin, trained by
// the simplest loop LibTorch allows.
double hand_written_loop(int steps, int warmup, const titan::ConfigNode& config) {
  auto spec = titan::resolve_run(config);
  auto tokenizer = std::shared_ptr<const titan::Tokenizer>(
      titan::load_tokenizer(spec.core.tokenizer_path));
  spec.model->set_vocab_size(tokenizer->vocab_size());
  auto model = spec.model->build(torch::kCPU);
  model->init_weights(0);
  titan::TokenWindowLoader loader(titan::open_dataset("stories"), tokenizer, 256);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(8e-4).weight_decay(0.1));
  std::chrono::steady_clock::time_point start;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) start = std::chrono::steady_clock::now();
    auto windows = loader.next_batch(8);
    auto logits = model->forward(windows.narrow(1, 0, 256));
    auto loss = torch::nn::functional::cross_entropy(logits.flatten(0, 1), windows.narrow(1, 1, 256).flatten());
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    optimizer.zero_grad();
    loss.item<double>();
  }
  return seconds_since(start) / steps;
}

double titan_trainer(int steps, int warmup, int threads) {
  auto dump = std::filesystem::temp_directory_path() / "titan_bench_overhead";
  std::filesystem::remove_all(dump);
  auto time_run = [&](int n) {
    auto config = titan::ConfigNode::parse(run_yaml(n, threads, dump.string()), "bench.yaml");
    auto spec = titan::resolve_run(config);
    auto start = std::chrono::steady_clock::now();
    titan::train(spec);
    return seconds_since(start);
  };
  // The difference of two run lengths cancels start-up (build, init, data).
  double short_run = time_run(warmup);
  double long_run = time_run(warmup + steps);
  return (long_run - short_run) / steps;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  int threads = argc > 2 ? std::atoi(argv[2]) : static_cast<int>(std::thread::hardware_concurrency());
  titan::init_logging(0, "warn");
  at::set_num_threads(threads);
  auto config = titan::ConfigNode::parse(run_yaml(steps, threads, "/tmp/titan_bench_unused"), "bench.yaml");
  double reference = hand_written_loop(steps, 2, config);
  double titan = titan_trainer(steps, 2, threads);
  std::printf("\ntrainer overhead, llama3 debugmodel, batch 8 x seq 256, %d threads, %d timed steps\n", threads, steps);
  std::printf("| loop                  | s/step  | ratio |\n|---|---|---|\n");
  std::printf("| hand-written LibTorch | %.4f | 1.000 |\n", reference);
  std::printf("| titan train           | %.4f | %.3f |\n", titan, titan / reference);
  return 0;
}

}  // namespace titan_bench_overhead
