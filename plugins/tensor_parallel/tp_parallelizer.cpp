// The TP plan applied: validation of the model's sizes against the degree,
// then one swap per planned layer, in module order.
#include "tp_parallelizer.h"

#include <ATen/ATen.h>

#include "titan/autograd_collectives.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/module_path.hpp"
#include "tp_layers.h"
#include "tp_moe.h"
#include "tp_weights.h"

namespace titan::tensor_parallel {

namespace {

// A handle to the layer's weight (named_parameters() returns its dict by
// value: a reference into it dangled once the statement ended, which the
// dry run's other ranks, allocating in between, turned into crashes).
at::Tensor weight_of(torch::nn::Module& layer, const std::string& path) {
  const auto params = layer.named_parameters(/*recurse=*/false);
  const at::Tensor* weight = params.find("weight");
  if (!weight) throw Error("tensor_parallel: layer '" + path + "' has no parameter 'weight' to shard");
  return *weight;
}

// A Linear's bias goes with its weight: split with a colwise one's output
// features (`split`), whole with the others.
void lay_out_bias(CausalLM& model, const Layer& layer, const std::string& path, const Comm& tp, bool split) {
  const at::Tensor* bias = linear_bias(layer);
  if (!bias) return;
  const std::string name = path + ".bias";
  model.set_layout(name, split ? shard_weight(*bias, 0, tp, name) : whole_over_tp(*bias));
}

// Every direct parameter of the module at `path` split over tp along dim 0
// (its heads); used only for this rank's heads, so no collective.
void shard_per_head_parameters(CausalLM& model, const std::string& path, const Comm& tp) {
  auto module = find_module(model, path);
  if (!module) throw Error("tensor_parallel: the plan names '" + path + "', which the model does not have");
  const auto params = module->named_parameters(/*recurse=*/false);
  if (params.is_empty()) throw Error("tensor_parallel: '" + path + "' (per_head in the plan) has no parameter of its own");
  for (const auto& item : params) {
    const std::string name = path + "." + item.key();
    model.set_layout(name, shard_weight(item.value(), 0, tp, name));
  }
}

}  // namespace

void TpParallelizer::validate(const ValidateContext& context) const {
  auto found = context.degrees.find("tp");
  if (found == context.degrees.end() || found->second <= 1) return;  // unknown yet, or nothing to split
  const int64_t tp = found->second;
  auto pp = context.degrees.find("pp");
  if (options_.sequence_parallel && pp != context.degrees.end() && pp->second > 1) {
    throw Error("tensor_parallel: enable_sequence_parallel with pipeline_parallel_degree = " +
                std::to_string(pp->second) + " is not supported yet (stage boundaries would pass sequence shards); " +
                "set enable_sequence_parallel: false");
  }
  if (context.spec.tp_plan().empty()) {
    throw Error("tensor_parallel: model flavor '" + context.spec.flavor() +
                "' has no tensor-parallel plan (ModelSpec::tp_plan); remove the tensor_parallel plugin");
  }
  for (const auto& size : context.spec.tp_sizes()) {
    if (size.value % tp == 0) continue;
    std::string works;
    for (int64_t d = tp - 1; d >= 1; --d) {
      if (size.value % d == 0) {
        works = std::to_string(d);
        break;
      }
    }
    throw Error("tensor_parallel: " + size.key + ": " + size.what + " = " + std::to_string(size.value) +
                " is not divisible by tensor_parallel_degree " + std::to_string(tp) + "; use a degree dividing " +
                std::to_string(size.value) + " (e.g. " + works + ") or change " + size.key);
  }
  if (options_.sequence_parallel && context.seq_len % tp != 0) {
    throw Error("tensor_parallel: training.seq_len = " + std::to_string(context.seq_len) +
                " is not divisible by tensor_parallel_degree " + std::to_string(tp) +
                " with enable_sequence_parallel on; use a multiple of " + std::to_string(tp) +
                " or set enable_sequence_parallel: false");
  }
}

void TpParallelizer::parallelize(CausalLM& model, const ParallelizeContext& context) {
  if (!context.mesh) throw Error("tensor_parallel: no device mesh (the trainer builds one when a plugin asks for mesh dims)");
  Comm& comm = context.mesh->group("tp");
  std::map<std::string, int64_t> degrees{{"tp", comm.size()}};
  validate(ValidateContext{context.spec, degrees, /*seq_len=*/0, {}});  // the sizes; seq_len was checked by the trainer
  TpContext tp{&comm, options_.sequence_parallel, options_.async};
  int swapped = 0;
  const std::map<std::string, TpStyle> plan = context.spec.tp_plan();
  for (const auto& [pattern, style] : plan) {
    for (const auto& path : match_modules(model, pattern)) {
      if (style == TpStyle::per_head) {
        shard_per_head_parameters(model, path, comm);
        ++swapped;
        continue;
      }
      auto layer = std::dynamic_pointer_cast<Layer>(find_module(model, path));
      if (!layer) throw Error("tensor_parallel: the plan names '" + path + "', which is not a titan::Layer");
      if (std::dynamic_pointer_cast<TiedOutput>(layer)) {
        // The head tied to the embeddings reads the vocabulary-parallel
        // embedding's shard: its logits are that shard's, and the shard's
        // gradient gathers both uses. Only the input's gather is added.
        auto embedding = plan.find("tok_embeddings");
        if (style != TpStyle::colwise || embedding == plan.end() ||
            embedding->second != TpStyle::rowwise) {
          throw Error("tensor_parallel: the output head '" + path + "' is tied to the embeddings "
                      "(model.enable_weight_tying), which needs the model's plan to split both over the vocabulary "
                      "(tok_embeddings rowwise, output colwise); set model.enable_weight_tying=false");
        }
        swap_module(model, path, std::make_shared<ColwiseLinear>(layer, tp, path));
        model.set_logits_vocab_sharded_over("tp");
        ++swapped;
        continue;
      }
      const at::Tensor weight = weight_of(*layer, path);
      const std::string name = path + ".weight";
      std::shared_ptr<Layer> replacement;
      switch (style) {
        case TpStyle::colwise:
          model.set_layout(name, shard_weight(weight, 0, comm, name));
          lay_out_bias(model, *layer, path, comm, /*split=*/true);
          replacement = std::make_shared<ColwiseLinear>(layer, tp, path);
          // A model-level colwise layer is the output head: its logits leave
          // the model split over the vocabulary.
          if (path.find('.') == std::string::npos) model.set_logits_vocab_sharded_over("tp");
          break;
        case TpStyle::rowwise:
          if (std::dynamic_pointer_cast<Embedding>(layer)) {
            TensorLayout layout = shard_weight(weight, 0, comm, name);
            replacement = std::make_shared<VocabParallelEmbedding>(layer, tp, path, layout.local_offset[0]);
            model.set_layout(name, layout);
          } else {
            model.set_layout(name, shard_weight(weight, 1, comm, name));
            lay_out_bias(model, *layer, path, comm, /*split=*/false);
            replacement = std::make_shared<RowwiseLinear>(layer, tp, path);
          }
          break;
        case TpStyle::per_head:
          break;  // handled above
        case TpStyle::sequence_parallel_norm:
          model.set_layout(name, whole_over_tp(weight));
          replacement = std::make_shared<ParallelNorm>(layer, tp, path);
          break;
        case TpStyle::no_parallel:
          if (options_.async && options_.sequence_parallel && linear_weight(*layer)) {
            // Async TP leaves the norms' output on the sequence shard for
            // the colwise layers to gather; a linear run whole reads it too
            // (DeepSeek-V3's kv latent), and would get the shard.
            throw Error("tensor_parallel: enable_async_tensor_parallel: the model's plan runs the linear '" + path +
                        "' whole on every rank (no_parallel), which async TP does not support yet; set "
                        "enable_async_tensor_parallel: false");
          }
          model.set_layout(name, whole_over_tp(weight));
          lay_out_bias(model, *layer, path, comm, /*split=*/false);
          replacement = std::make_shared<NoParallelLayer>(layer, tp, path);
          break;
      }
      swap_module(model, path, replacement);
      ++swapped;
    }
  }
  if (swapped == 0) throw Error("tensor_parallel: the model's TP plan matched none of its modules");
  // Expert parallelism holding the experts (ep > 1, its ranks borrowed from
  // tp among others) splits the MoE layers' tokens over tp; else their
  // experts' width is split.
  const bool split_tokens = context.mesh->size("ep") > 1;
  const int moe_layers = parallelize_moe_layers(model, tp, split_tokens);
  if (moe_layers > 0) {
    spdlog::info("tensor_parallel: {} MoE layers: {}", moe_layers,
                 split_tokens ? "tokens split over tp (experts held by expert parallelism)"
                              : "each expert's and the shared expert's width split over tp");
  }
  if (!model.logits_vocab_sharded_over().empty()) {
    // Without loss parallel the vocab-sharded logits are gathered whole for
    // the model's loss; every rank then computes the same loss.
    Comm* tp_comm = &comm;
    LossFn whole_loss = model.loss();
    model.set_loss([tp_comm, whole_loss](const at::Tensor& logits, const at::Tensor& labels) {
      CallSite site("tp all_gather logits");
      return whole_loss(all_gather_to_replicate(logits, *tp_comm, -1), labels);
    });
  }
  spdlog::info("tensor_parallel: {} layers split over tp={} (sequence parallel {}, async {})", swapped, comm.size(),
               options_.sequence_parallel ? "on" : "off", options_.async ? "on" : "off");
}

}  // namespace titan::tensor_parallel
