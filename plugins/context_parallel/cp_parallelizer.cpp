// Context parallelism's checks and its changes to the model.
#include "cp_parallelizer.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "ring_attention.h"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/module_path.hpp"
#include "ulysses_attention.h"

namespace titan::context_parallel {

namespace {

int64_t degree_of(const ValidateContext& context, const std::string& dim) {
  auto found = context.degrees.find(dim);
  return found == context.degrees.end() ? 1 : found->second;
}

}  // namespace

void CpParallelizer::validate(const ValidateContext& context) const {
  const int64_t cp = degree_of(context, "cp");
  if (cp <= 1) return;
  const int64_t pp = degree_of(context, "pp");
  if (pp > 1) {
    throw Error("context_parallel: context_parallel_degree = " + std::to_string(cp) +
                " with pipeline_parallel_degree = " + std::to_string(pp) +
                " is not supported yet (stage boundaries would pass sequence shards); use one or the other");
  }
  // Each cp rank's gradients come from its piece of the sequence: a
  // data-parallel plugin averages them over cp too (FSDP over dp_shard x cp,
  // as TorchTitan always applies it with context parallelism).
  if (std::find(context.apply_orders.begin(), context.apply_orders.end(), ApplyOrder::data_parallel) ==
      context.apply_orders.end()) {
    throw Error("mesh dim cp=" + std::to_string(cp) +
                " needs a data-parallel plugin to average gradients over the sequence pieces; add {name: fsdp} to "
                "plugins (it shards over dp_shard x cp; dp_shard may be 1)");
  }
  const int64_t tp = degree_of(context, "tp");
  const bool head_tail = options_.load_balancer == "headtail" && options_.method == "ring";
  // Each rank's piece is cut again by sequence parallelism (when TP is on).
  const int64_t multiple = (head_tail ? 2 * cp : cp) * tp;
  if (context.seq_len > 0 && context.seq_len % multiple != 0) {
    std::string why = head_tail ? "2 x context_parallel_degree " + std::to_string(cp) + " (head-tail chunks)"
                                : "context_parallel_degree " + std::to_string(cp);
    if (tp > 1) why += " x tensor_parallel_degree " + std::to_string(tp) + " (sequence parallelism)";
    throw Error("context_parallel: training.seq_len = " + std::to_string(context.seq_len) + " is not divisible by " +
                why + " = " + std::to_string(multiple) + "; use a multiple of " + std::to_string(multiple));
  }
  if (options_.method != "ulysses") return;
  for (const auto& size : context.spec.tp_sizes()) {
    if (size.what != "attention heads") continue;
    if (size.value % tp != 0 || (size.value / tp) % cp != 0) {
      throw Error("context_parallel: Ulysses splits attention heads over context_parallel_degree " +
                  std::to_string(cp) + ", but " + size.key + " = " + std::to_string(size.value) +
                  (tp > 1 ? " / tensor_parallel_degree " + std::to_string(tp) : std::string()) +
                  " does not divide; use context_parallel_method: ring or a degree that divides the heads");
    }
  }
}

void CpParallelizer::parallelize(CausalLM& model, const ParallelizeContext& context) {
  if (!context.mesh) throw Error("context_parallel: no device mesh (the trainer builds one when a plugin asks for mesh dims)");
  auto setup = std::make_shared<RingSetup>();
  setup->comm = &context.mesh->group("cp");
  const bool ulysses = options_.method == "ulysses";
  // Ulysses attends over the whole sequence on every rank: balancing buys nothing.
  setup->layout = SequenceLayout(setup->comm->size(), options_.load_balancer == "headtail" && !ulysses);
  setup->point_to_point = options_.rotate_method == "alltoall";

  std::vector<std::string> cores;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (std::dynamic_pointer_cast<AttentionCore>(item.value())) cores.push_back(item.key());
  }
  if (cores.empty()) {
    throw Error("context_parallel: the model has no titan::AttentionCore to replace (its attention must call one, "
                "as llama3's layers.*.attention.sdpa does); remove the context_parallel plugin");
  }
  for (const auto& path : cores) {
    std::shared_ptr<AttentionCore> replacement;
    if (ulysses) {
      replacement = std::make_shared<UlyssesAttention>(setup);
    } else {
      replacement = std::make_shared<RingAttention>(setup);
    }
    swap_module(model, path, replacement);
  }

  const int64_t rank = setup->comm->rank(), ranks = setup->comm->size();
  const SequenceLayout layout = setup->layout;
  model.set_positions([layout, rank, ranks](int64_t seq) { return layout.positions(seq * ranks, rank); });
  model.add_forward_wrapper([layout, rank](const at::Tensor& tokens, const ForwardBody& inner) {
    return inner(layout.shard(tokens, 1, rank));
  });
  // The data-parallel plugin averages gradients over cp and the trainer the
  // logged loss: each rank's loss is its piece's mean weighted by the
  // piece's share of the sequence's labels that carry loss (-100, PyTorch's
  // ignore_index: none) x cp, so the average is the whole sequence's mean
  // however the ignored labels fall. (Without ignored labels the weight is
  // exactly 1.)
  LossFn piece_loss = model.loss();
  model.set_loss([piece_loss, layout, rank, ranks](const at::Tensor& logits, const at::Tensor& labels) {
    const at::Tensor piece = layout.shard(labels, 1, rank);
    const at::Tensor carrying = piece.ne(-100).sum();
    const at::Tensor share = carrying.to(at::kFloat) * static_cast<double>(ranks) /
                             labels.ne(-100).sum().clamp_min(1).to(at::kFloat);
    // A piece with none has a NaN mean (0 / 0): it adds nothing.
    const at::Tensor mean = piece_loss(logits, piece);
    return at::where(carrying > 0, mean * share, at::zeros_like(mean));
  });
  spdlog::info("context_parallel: {} attention cores -> {} over cp={} ({}{})", cores.size(),
               ulysses ? "Ulysses all-to-all" : "ring attention", ranks,
               ulysses ? "" : "K/V by " + options_.rotate_method + ", ",
               ulysses ? "positions in rank order" : "load balancer " + options_.load_balancer);
}

}  // namespace titan::context_parallel
