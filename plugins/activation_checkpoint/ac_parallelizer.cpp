// The block wrapper and the memory-budget planner.
//
// memory_budget: on the first step with autograd on, each block is probed
// (run, its output kept, then dropped) under each policy (none; partial:
// only its composite sub-layers, llama3's feed_forward, checkpointed; full)
// to measure the bytes its forward leaves for backward and its forward
// time. Blocks are chosen for in order: each gets the cheapest-to-recompute
// policy that still lets the remaining blocks, fully checkpointed, fit
// memory_budget x the projected no-AC bytes (the blocks not yet measured
// projected like this one). Ranks agree on the measurements (max over the
// world), so all make the same choice. The choice holds from then on and is
// logged once.
#include "ac_parallelizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <array>
#include <typeinfo>
#include <chrono>
#include <memory>
#include <sstream>

#include "checkpoint_block.h"
#include "per_op_sac.h"
#include "titan/comm.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/module_path.hpp"
#include "titan/peak_memory.hpp"

namespace titan::activation_checkpoint {

namespace {

enum class Policy { unchosen, none, partial, full };
const char* policy_name(Policy policy) {
  switch (policy) {
    case Policy::none: return "none";
    case Policy::partial: return "partial";
    case Policy::full: return "full";
    case Policy::unchosen: break;
  }
  return "unplanned";
}

struct BudgetChoice {
  double budget = 1;
  std::vector<Policy> blocks;
  int64_t kept_total = 0, no_ac_total = 0;
  double recompute_total_ms = 0;
  bool logged = false;

  // bytes[p] and ms[p] for p = none, partial, full, measured on block `index`.
  Policy decide(int64_t index, const std::array<int64_t, 3>& bytes, const std::array<double, 3>& ms) {
    const int64_t remaining = static_cast<int64_t>(blocks.size()) - index - 1;
    no_ac_total += bytes[0];
    const double allowed = budget * static_cast<double>(no_ac_total + bytes[0] * remaining);
    const Policy order[] = {Policy::none, Policy::partial, Policy::full};
    int chosen = 2;
    for (int p = 0; p < 2; ++p) {
      if (static_cast<double>(kept_total + bytes[p] + bytes[2] * remaining) <= allowed) {
        chosen = p;
        break;
      }
    }
    kept_total += bytes[chosen];
    // Recompute cost: the forward run again in backward (none: nothing).
    double recompute = chosen == 0 ? 0 : chosen == 2 ? ms[0] : ms[0] - ms[1] + ms[2];
    recompute_total_ms += std::max(0.0, recompute);
    blocks[static_cast<size_t>(index)] = order[chosen];
    return order[chosen];
  }

  void log_once() {
    if (logged) return;
    for (Policy policy : blocks) {
      if (policy == Policy::unchosen) return;
    }
    logged = true;
    std::ostringstream choice;
    for (size_t i = 0; i < blocks.size(); ++i) choice << (i ? ", " : "") << i << ":" << policy_name(blocks[i]);
    spdlog::info("activation_checkpoint: memory_budget {} choice [{}]: keeps {:.2f} of {:.2f} MiB of activations ({:.3f}), "
                 "recomputes about {:.1f} ms of forward per step",
                 budget, choice.str(), kept_total / 1048576.0, no_ac_total / 1048576.0,
                 no_ac_total ? static_cast<double>(kept_total) / static_cast<double>(no_ac_total) : 0.0,
                 recompute_total_ms);
  }
};

// A composite sub-layer of a block (llama3: feed_forward) checkpointed on
// its own when its block's policy is partial.
class PartialCheckpoint : public LayerWrapper {
 public:
  PartialCheckpoint(std::shared_ptr<Layer> inner, std::shared_ptr<BudgetChoice> choice, int64_t block, CheckpointSettings settings)
      : LayerWrapper(std::move(inner)), choice_(std::move(choice)), block_(block), settings_(std::move(settings)) {}
  at::Tensor forward(const at::Tensor& input) override {
    if (!at::GradMode::is_enabled() || choice_->blocks[static_cast<size_t>(block_)] != Policy::partial) {
      return inner().forward(input);
    }
    auto layer = inner_ptr();
    return checkpoint_block(input, [layer](const at::Tensor& x) { return layer->forward(x); }, settings_);
  }

 private:
  std::shared_ptr<BudgetChoice> choice_;
  int64_t block_;
  CheckpointSettings settings_;
};

// The block run once under `policy` with autograd on and its result
// dropped: the bytes its forward left alive and its time.
std::pair<int64_t, double> probe(BudgetChoice& choice, int64_t index, Policy policy, const BlockBody& body,
                                 const at::Tensor& hidden) {
  choice.blocks[static_cast<size_t>(index)] = policy;
  at::Tensor input = hidden.detach().requires_grad_(true);
  at::Tensor output;
  auto start = std::chrono::steady_clock::now();
  CpuMemoryWindow window = cpu_memory_during([&] { output = body(input); });
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  choice.blocks[static_cast<size_t>(index)] = Policy::unchosen;
  return {window.retained, ms};
}

}  // namespace

void AcParallelizer::parallelize(CausalLM& model, const ParallelizeContext& context) {
  const AcOptions options = options_;
  const int64_t blocks = model.num_blocks();
  if (options.mode == "none") {
    spdlog::info("activation_checkpoint: mode none");
    return;
  }
  const bool per_op = options.mode == "selective" && options.selective_ac_option == "op";
  const int64_t every = options.mode == "selective" && !per_op ? std::stoll(options.selective_ac_option) : 1;
  const bool budgeted = options.mode == "memory_budget";
  auto choice = std::make_shared<BudgetChoice>();
  choice->budget = options.memory_budget;
  choice->blocks.assign(static_cast<size_t>(blocks), Policy::unchosen);
  auto settings_for = [options, per_op](const std::string& label) {
    return CheckpointSettings{label, options.preserve_rng_state, options.determinism_check, per_op};
  };
  int sac_linears = 0, sac_attention = 0;
  if (per_op) {
    for (int64_t i = 0; i < blocks; ++i) {
      const std::string prefix = "layers." + std::to_string(i) + ".";
      for (const auto& item : model.block(i)->named_modules("", /*include_self=*/false)) {
        const std::string path = prefix + item.key();
        const torch::nn::Module& module = *item.value();
        // Only the core layers themselves: a layer another plugin wrapped
        // (TP's collectives, float8) is recomputed, never replayed.
        // A biased linear is recomputed (the replay keeps only the product).
        if (typeid(module) == typeid(Linear) && !static_cast<const Linear&>(module).bias.defined()) {
          const auto& forced = options.per_op_sac_force_recompute_mm_shapes_by_fqns;
          bool always_recompute = std::find(forced.begin(), forced.end(), item.key()) != forced.end();
          swap_module(model, path, std::make_shared<SacLinear>(std::dynamic_pointer_cast<Layer>(item.value()),
                                                               always_recompute));
          ++sac_linears;
        } else if (typeid(module) == typeid(AttentionCore)) {
          swap_module(model, path, std::make_shared<SacAttention>(std::dynamic_pointer_cast<AttentionCore>(item.value())));
          ++sac_attention;
        }
      }
    }
  }
  int partial_layers = 0;
  if (budgeted) {
    for (int64_t i = 0; i < blocks; ++i) {
      const std::string prefix = "layers." + std::to_string(i);
      for (const auto& item : model.block(i)->named_children()) {
        auto layer = std::dynamic_pointer_cast<Layer>(item.value());
        if (!layer || layer->children().empty()) continue;  // leaves (norms) are cheap to keep
        const std::string path = prefix + "." + item.key();
        swap_module(model, path, std::make_shared<PartialCheckpoint>(layer, choice, i, settings_for(path)));
        ++partial_layers;
      }
    }
  }

  // Every rank must checkpoint the same blocks (a recompute may issue
  // collectives): the probes' measurements are agreed on (max over ranks).
  Comm* world = context.mesh && context.mesh->world_size() > 1 ? &context.mesh->group("world") : nullptr;
  model.add_block_wrapper([every, per_op, choice, budgeted, settings_for, world](int64_t index, const at::Tensor& hidden,
                                                                       const BlockBody& inner) {
    if (!at::GradMode::is_enabled()) return inner(hidden);  // nothing is kept for backward anyway
    bool checkpoint = false;
    if (budgeted) {
      if (choice->blocks[static_cast<size_t>(index)] == Policy::unchosen) {
        std::array<int64_t, 3> bytes{};
        std::array<double, 3> ms{};
        const Policy policies[] = {Policy::none, Policy::partial, Policy::full};
        for (int p = 0; p < 3; ++p) {
          BlockBody body = p == 2 ? BlockBody([&](const at::Tensor& x) {
            return checkpoint_block(x, inner, settings_for("layers." + std::to_string(index)));
          })
                                  : inner;
          std::tie(bytes[p], ms[p]) = probe(*choice, index, policies[p], body, hidden);
        }
        if (world) {
          at::Tensor measured = at::tensor({static_cast<double>(bytes[0]), static_cast<double>(bytes[1]),
                                            static_cast<double>(bytes[2]), ms[0], ms[1], ms[2]},
                                           at::kDouble);
          CallSite site("activation_checkpoint all_reduce plan of layers." + std::to_string(index));
          world->all_reduce(measured, ReduceOp::max);
          for (int p = 0; p < 3; ++p) {
            bytes[p] = static_cast<int64_t>(measured[p].item<double>());
            ms[p] = measured[3 + p].item<double>();
          }
        }
        choice->decide(index, bytes, ms);
      }
      checkpoint = choice->blocks[static_cast<size_t>(index)] == Policy::full;
    } else {
      // TorchTitan counts blocks from 1: every N-th is the N-th, 2N-th, ...
      checkpoint = per_op || (index + 1) % every == 0;
    }
    return checkpoint ? checkpoint_block(hidden, inner, settings_for("layers." + std::to_string(index)))
                      : inner(hidden);
  });
  if (budgeted) model.add_gradient_finalizer([choice] { choice->log_once(); });
  std::string detail;
  if (budgeted) {
    detail = " " + std::to_string(options.memory_budget) + " (" + std::to_string(partial_layers) +
             " sub-layers may be checkpointed alone)";
  } else if (per_op) {
    detail = ", per op: every block, keeping the attention outputs and every other matmul of " +
             std::to_string(sac_linears) + " linears, " + std::to_string(sac_attention) + " attention cores";
  } else if (options.mode == "selective") {
    detail = ", every " + std::to_string(every) + " blocks";
  }
  spdlog::info("activation_checkpoint: mode {}{}", options.mode, detail);
}

}  // namespace titan::activation_checkpoint
