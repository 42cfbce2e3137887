// Context parallelism: peak memory per rank of one forward + backward
// against sequence length for CP1 / CP2 / CP4 (ring attention, all-to-all
// rotation), and the per-rank attention compute with and without head-tail
// balancing, measured in one run: this binary launches itself under
// `titan launch` once per degree and prints the tables.
// Usage: titan_bench_context_parallel [max_seq (8192)] [cap_mib (0: none)]
#include <ATen/ATen.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "titan/config.hpp"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/logging.hpp"
#include "titan/module_path.hpp"
#include "titan/parallelizer.hpp"
#include "titan/peak_memory.hpp"
#include "titan/registry.hpp"
#include "titan/world.hpp"

// The program's body: its main() is generated (CMakeLists.txt).
namespace titan_bench_context_parallel {

constexpr int64_t kVocab = 2048;
// Attention-dominated: one block, 4 heads of 16, so the [seq, seq] scores
// are what grows.
const std::string kModel = "{flavor: debugmodel, dim: 64, n_layers: 1, n_heads: 4, max_seq_len: ";

titan::PluginContext context(const std::string& yaml) {
  titan::PluginContext out;
  out.options = titan::ConfigNode::parse(yaml, "bench");
  return out;
}

// CPU time of this thread: a rank waiting for its peers burns none of it.
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

std::shared_ptr<titan::CausalLM> build(int64_t seq, const titan::DeviceMesh* mesh, const std::string& cp_options) {
  auto& registry = titan::PluginRegistry::instance();
  auto spec = registry.create_model("llama3", context(kModel + std::to_string(seq) + "}"));
  spec->set_vocab_size(kVocab);
  auto model = spec->build(c10::Device(c10::kMeta));
  if (mesh) {
    titan::ParallelizeContext parallel{*spec, c10::Device(c10::kCPU), mesh};
    registry.create_parallelizer("context_parallel", context(cp_options))->parallelize(*model, parallel);
  }
  titan::materialize_module(*model, c10::Device(c10::kCPU));
  model->init_weights(0);
  return model;
}

// One rank's part: "RESULT memory seq rank peak_mib" and
// "RESULT balance balancer seq rank cpu_ms" lines on stdout.
int worker(int64_t max_seq) {
  titan::World world = titan::detect_world();
  titan::init_logging(world.rank, "warn");
  at::set_num_threads(1);
  auto& registry = titan::PluginRegistry::instance();
  registry.load("llama3");
  registry.load("context_parallel");
  std::unique_ptr<titan::DistRuntime> runtime;
  std::unique_ptr<titan::DeviceMesh> mesh;
  const int cp = world.world_size;
  if (cp > 1) {
    runtime = std::make_unique<titan::DistRuntime>(world, titan::DistTimeouts{});
    mesh = std::make_unique<titan::DeviceMesh>(*runtime, std::map<std::string, int64_t>{{"cp", cp}});
  }
  const std::string degree = "context_parallel_degree: " + std::to_string(cp);
  for (int64_t seq = 2048; seq <= max_seq; seq *= 2) {
    auto model = build(seq, mesh.get(), "{" + degree + ", context_parallel_rotate_method: alltoall}");
    at::manual_seed(0);
    at::Tensor windows = at::randint(kVocab, {1, seq + 1}, at::kLong);
    int64_t peak = titan::peak_cpu_bytes_during([&] {
      at::Tensor loss = model->loss()(model->run(windows.narrow(1, 0, seq)), windows.narrow(1, 1, seq));
      loss.backward();
    });
    std::printf("RESULT memory %ld %d %.1f\n", static_cast<long>(seq), world.rank, peak / 1048576.0);
    std::fflush(stdout);
  }
  if (cp == 1) return 0;
  // The attention core alone, on this rank's piece: its compute time.
  const int64_t seq = std::min<int64_t>(max_seq, 8192);
  for (const std::string balancer : {"headtail", "none"}) {
    auto model = build(seq, mesh.get(), "{" + degree + ", context_parallel_load_balancer: " + balancer + "}");
    auto core = std::dynamic_pointer_cast<titan::AttentionCore>(titan::find_module(*model, "layers.0.attention.sdpa"));
    const int64_t local = seq / cp;
    at::Tensor q = at::randn({1, 4, local, 16}).requires_grad_(), k = at::randn({1, 4, local, 16}).requires_grad_(),
               v = at::randn({1, 4, local, 16}).requires_grad_();
    double best = 1e30;
    for (int repeat = 0; repeat < 5; ++repeat) {
      double start = thread_cpu_seconds();
      core->forward(q, k, v, /*documents=*/{}).sum().backward();
      best = std::min(best, thread_cpu_seconds() - start);
    }
    std::printf("RESULT balance %s %ld %d %.2f\n", balancer.c_str(), static_cast<long>(seq), world.rank, best * 1e3);
    std::fflush(stdout);
  }
  return 0;
}

std::string run(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  pclose(pipe);
  return output;
}

int main(int argc, char** argv) {
  const int64_t max_seq = argc > 1 ? std::atol(argv[1]) : 8192;
  const double cap_mib = argc > 2 ? std::atof(argv[2]) : 0;
  if (std::getenv("TITAN_BENCH_CP_WORKER")) return worker(max_seq);
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  const std::string titan = (self.parent_path() / "titan").string();
  // memory[seq][cp] = the largest rank's peak; balance[balancer][cp] = per-rank ms.
  std::map<int64_t, std::map<int, double>> memory;
  std::map<std::string, std::map<int, std::vector<double>>> balance;
  for (int cp : {1, 2, 4}) {
    std::string command = "TITAN_BENCH_CP_WORKER=1 " + titan + " launch --nproc-per-node " + std::to_string(cp) +
                          " --master-port " + std::to_string(29990 + cp) + " -- " + self.string() + " " +
                          std::to_string(max_seq) + " 2>&1";
    std::istringstream lines(run(command));
    for (std::string line; std::getline(lines, line);) {
      auto at = line.find("RESULT ");
      if (at == std::string::npos) continue;
      std::istringstream fields(line.substr(at + 7));
      std::string what;
      fields >> what;
      if (what == "memory") {
        long seq;
        int rank;
        double mib;
        fields >> seq >> rank >> mib;
        memory[seq][cp] = std::max(memory[seq][cp], mib);
      } else {
        std::string balancer;
        long seq;
        int rank;
        double ms;
        fields >> balancer >> seq >> rank >> ms;
        balance[balancer][cp].push_back(ms);
      }
    }
  }
  std::printf("\ncontext parallelism, llama3 1 block (dim 64, 4 heads of 16), vocab %ld, fp32, 1 thread per rank:\n"
              "peak MiB of one forward + backward on the busiest rank (ring attention, K/V by alltoall)\n",
              static_cast<long>(kVocab));
  std::printf("| seq | CP1 | CP2 | CP4 | CP2 / CP1 | CP4 / CP1 |%s\n|---|---|---|---|---|---|%s\n",
              cap_mib > 0 ? " fits the cap |" : "", cap_mib > 0 ? "---|" : "");
  for (const auto& [seq, by_cp] : memory) {
    auto get = [&](int cp) { auto f = by_cp.find(cp); return f == by_cp.end() ? 0.0 : f->second; };
    std::string fits;
    if (cap_mib > 0) {
      for (int cp : {1, 2, 4}) {
        if (get(cp) > 0 && get(cp) <= cap_mib) fits += (fits.empty() ? "CP" : ", CP") + std::to_string(cp);
      }
      fits = " " + (fits.empty() ? std::string("none") : fits) + " |";
    }
    std::printf("| %ld | %.1f | %.1f | %.1f | %.3f | %.3f |%s\n", static_cast<long>(seq), get(1), get(2), get(4),
                get(2) / get(1), get(4) / get(1), fits.c_str());
  }
  // The work each rank's ring attention does, counted by the plugin's rule:
  // a query chunk computes against every key chunk not wholly in its
  // future (in units of one (S / 2cp)^2 chunk pair).
  std::printf("\nattention work per rank, in (seq / 2cp)^2 chunk pairs computed (the plugin's skipping rule)\n");
  std::printf("| balancer | cp | per rank | max / min |\n|---|---|---|---|\n");
  for (const bool head_tail : {true, false}) {
    for (int cp : {2, 4}) {
      std::vector<double> work;
      for (int rank = 0; rank < cp; ++rank) {
        // Without balancing a rank's one chunk is two head-tail chunks long.
        std::vector<int> chunks = head_tail ? std::vector<int>{rank, 2 * cp - 1 - rank} : std::vector<int>{rank};
        double pairs = 0;
        for (int query : chunks) pairs += head_tail ? query + 1 : 4.0 * (query + 1);
        work.push_back(pairs);
      }
      std::string list;
      for (double w : work) list += (list.empty() ? "" : ", ") + std::to_string(static_cast<int>(w));
      std::printf("| %s | %d | %s | %.2f |\n", head_tail ? "headtail" : "none", cp, list.c_str(),
                  *std::max_element(work.begin(), work.end()) / *std::min_element(work.begin(), work.end()));
    }
  }
  std::printf("\nattention forward + backward CPU ms per rank (seq %ld; thread CPU time of the rank's main thread,\n"
              "which also counts its waits inside collectives: noisy on a loaded machine)\n",
              static_cast<long>(std::min<int64_t>(max_seq, 8192)));
  std::printf("| balancer | cp | per rank | max / min |\n|---|---|---|---|\n");
  for (const auto& [balancer, by_cp] : balance) {
    for (const auto& [cp, times] : by_cp) {
      std::string list;
      for (double t : times) list += (list.empty() ? "" : ", ") + std::to_string(static_cast<int>(t + 0.5));
      double low = *std::min_element(times.begin(), times.end()), high = *std::max_element(times.begin(), times.end());
      std::printf("| %s | %d | %s | %.2f |\n", balancer.c_str(), cp, list.c_str(), high / low);
    }
  }
  return 0;
}

}  // namespace titan_bench_context_parallel
