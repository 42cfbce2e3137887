// titan_tp_checks: the loss of a tensor-parallel model, with and without
// loss_parallel, on real ranks: both give the single-process loss and
// logits gradient, and loss parallel's peak memory stays a fraction of the
// whole [tokens, vocab] logits (which the gathered loss must build).
//
//   titan launch --nproc-per-node N -- titan_tp_checks
//
// Prints "peak_bytes with_loss_parallel=A gathered=B whole_logits=C" and
// "CHECK tp_loss ok" on success; otherwise the failures and exit status 1.
#include <ATen/ATen.h>

#include <cstdio>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/dist_runtime.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/parallelizer.hpp"
#include "titan/peak_memory.hpp"
#include "titan/plugin.hpp"
#include "titan/registry.hpp"
#include "titan/world.hpp"

namespace {

using namespace titan;

constexpr int64_t kVocab = 8192, kBatch = 2, kSeq = 256;

PluginContext options(const std::string& yaml) {
  PluginContext context;
  context.options = ConfigNode::parse(yaml, "tp_checks");
  return context;
}

struct LossRun {
  double loss = 0, reference_loss = 0;
  at::Tensor grad, reference_grad;  // whole logits gradients
  int64_t peak = 0;
};

// [batch, seq, vocab / tp] pieces -> the whole [batch, seq, vocab].
at::Tensor gather_vocab(const at::Tensor& piece, Comm& tp) {
  return tp.all_gather(piece.movedim(-1, 0).contiguous()).movedim(0, -1);
}

LossRun run(const DeviceMesh& mesh, bool loss_parallel) {
  auto& registry = PluginRegistry::instance();
  registry.load("llama3");
  auto spec = registry.create_model("llama3", options("{flavor: debugmodel, dim: 64, n_layers: 1, n_heads: 4}"));
  spec->set_vocab_size(kVocab);
  auto model = spec->build(c10::Device(c10::kMeta));
  ParallelizeContext context{*spec, c10::Device(c10::kCPU), &mesh};
  registry.load("tensor_parallel");
  registry.create_parallelizer("tensor_parallel", options("{tensor_parallel_degree: -1}"))->parallelize(*model, context);
  if (loss_parallel) {
    registry.load("loss_parallel");
    registry.create_parallelizer("loss_parallel", options("{}"))->parallelize(*model, context);
  }
  materialize_module(*model, c10::Device(c10::kCPU));
  model->init_weights(0);
  at::manual_seed(1);
  at::Tensor tokens = at::randint(kVocab, {kBatch, kSeq + 1}, at::kLong);
  at::Tensor logits = model->run(tokens.narrow(1, 0, kSeq)).detach().requires_grad_(true);
  at::Tensor labels = tokens.narrow(1, 1, kSeq);
  LossRun out;
  at::Tensor loss;
  out.peak = peak_cpu_bytes_during([&] {
    loss = model->loss()(logits, labels);
    loss.backward();
  });
  out.loss = loss.item<double>();
  Comm& tp = mesh.group("tp");
  out.grad = gather_vocab(logits.grad(), tp);
  // The single-process reference on the whole logits.
  at::Tensor whole = gather_vocab(logits.detach(), tp).requires_grad_(true);
  at::Tensor expected = titan::cross_entropy_loss(whole, labels);
  expected.backward();
  out.reference_loss = expected.item<double>();
  out.reference_grad = whole.grad();
  return out;
}

}  // namespace

int main() {
  std::vector<std::string> failures;
  try {
    World world = detect_world();
    init_logging(world.rank, "warn");
    DistRuntime runtime(world, DistTimeouts{});
    DeviceMesh mesh(runtime, {{"tp", world.world_size}});
    const int64_t whole_logits = kBatch * kSeq * kVocab * static_cast<int64_t>(sizeof(float));
    LossRun parallel = run(mesh, true), gathered = run(mesh, false);
    for (const auto* result : {&parallel, &gathered}) {
      const char* name = result == &parallel ? "loss_parallel" : "gathered";
      double loss_diff = std::abs(result->loss - result->reference_loss) / std::abs(result->reference_loss);
      double grad_diff = (result->grad - result->reference_grad).abs().max().item<double>() /
                         result->reference_grad.abs().max().item<double>();
      std::printf("rank %d %s: loss %.8f (reference %.8f), relative loss diff %.3g, relative grad diff %.3g\n",
                  world.rank, name, result->loss, result->reference_loss, loss_diff, grad_diff);
      if (loss_diff > 1e-6) failures.push_back(std::string(name) + ": loss differs from the reference");
      if (grad_diff > 1e-5) failures.push_back(std::string(name) + ": logits gradient differs from the reference");
    }
    std::printf("peak_bytes rank=%d with_loss_parallel=%lld gathered=%lld whole_logits=%lld tp=%lld\n", world.rank,
                static_cast<long long>(parallel.peak), static_cast<long long>(gathered.peak),
                static_cast<long long>(whole_logits), static_cast<long long>(mesh.size("tp")));
    // Loss parallel holds a few [tokens, vocab / tp] temporaries at most;
    // the gathered loss holds the whole logits at least.
    if (parallel.peak >= whole_logits) failures.push_back("loss parallel's peak reaches the whole logits' size");
    if (parallel.peak > 3 * whole_logits / mesh.size("tp")) {
      failures.push_back("loss parallel's peak exceeds 3 x tokens x vocab / tp floats");
    }
    if (gathered.peak < whole_logits) failures.push_back("the gathered loss's peak is below the whole logits' size");
  } catch (const std::exception& error) {
    failures.push_back(std::string("error: ") + error.what());
  }
  for (const auto& failure : failures) std::printf("FAIL %s\n", failure.c_str());
  if (failures.empty()) std::printf("CHECK tp_loss ok\n");
  std::fflush(stdout);
  return failures.empty() ? 0 : 1;
}
