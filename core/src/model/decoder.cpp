// The decoder skeleton's forward (the pipeline and context-parallel
// contract), its blocks and the init of its own parameters.
#include "titan/decoder.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>

#include <cmath>
#include <optional>

#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/host_to_device.hpp"
#include "titan/feed_forward.hpp"
#include "titan/layers.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"
#include "titan/param_init.hpp"

namespace titan {

std::pair<at::Tensor, at::Tensor> KvCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  if (layer < 0) throw Error("KvCache: keys of no block (AttentionContext::layer is unset)");
  const int64_t seq = k.size(2), end = length_ + seq;
  if (end > capacity_) {
    throw Error("KvCache: " + std::to_string(end) + " positions do not fit its capacity of " +
                std::to_string(capacity_));
  }
  if (static_cast<int64_t>(layers_.size()) <= layer) layers_.resize(layer + 1);
  auto& [keys, values] = layers_[layer];
  if (!keys.defined()) {
    keys = at::empty({k.size(0), k.size(1), capacity_, k.size(3)}, k.options());
    values = at::empty({v.size(0), v.size(1), capacity_, v.size(3)}, v.options());
  }
  keys.narrow(2, length_, seq).copy_(k);
  values.narrow(2, length_, seq).copy_(v);
  return {keys.narrow(2, 0, end), values.narrow(2, 0, end)};
}

void KvCache::advance(int64_t seq) { length_ += seq; }

at::Tensor attend(AttentionCore& core, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const AttentionContext& context) {
  if (!context.cache) return core.forward(q, k, v, context.documents);
  auto [keys, values] = context.cache->append(context.layer, k, v);
  return compat::causal_attention_after(q, keys, values, context.cache->length());
}

GroupedQueryAttention::GroupedQueryAttention(const Shape& shape, std::shared_ptr<Rotary> rope,
                                             const at::TensorOptions& options)
    : model_(shape.model), head_dim_(shape.head_dim), qk_norm_(shape.qk_norm_eps > 0) {
  register_module("wq", std::make_shared<Linear>(shape.dim, shape.n_heads * head_dim_, options));
  register_module("wk", std::make_shared<Linear>(shape.dim, shape.n_kv_heads * head_dim_, options));
  register_module("wv", std::make_shared<Linear>(shape.dim, shape.n_kv_heads * head_dim_, options));
  register_module("wo", std::make_shared<Linear>(shape.n_heads * head_dim_, shape.dim, options));
  if (qk_norm_) {
    register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, shape.qk_norm_eps, options));
    register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, shape.qk_norm_eps, options));
  }
  register_module("rope", std::move(rope));
  register_module("sdpa", std::make_shared<AttentionCore>());
}

at::Tensor GroupedQueryAttention::forward(const at::Tensor& x, const AttentionContext& context) {
  // Under tensor parallelism the widths are n_heads / tp and n_kv_heads /
  // tp; the sequence is the projections' too (sequence parallelism gathers
  // it before wq/wk/wv).
  at::Tensor q = child_layer(*this, "wq")->forward(x);
  at::Tensor k = child_layer(*this, "wk")->forward(x);
  at::Tensor v = child_layer(*this, "wv")->forward(x);
  const int64_t batch = q.size(0), seq = q.size(1);
  q = q.view({batch, seq, q.size(2) / head_dim_, head_dim_});
  k = k.view({batch, seq, k.size(2) / head_dim_, head_dim_});
  v = v.view({batch, seq, v.size(2) / head_dim_, head_dim_});
  if (qk_norm_) {
    q = child_layer(*this, "q_norm")->forward(q);
    k = child_layer(*this, "k_norm")->forward(k);
  }
  auto rope = std::dynamic_pointer_cast<Rotary>(find_module(*this, "rope"));
  if (!rope) throw Error(model_ + ": rotary embedding 'rope' is missing or not a titan::Rotary");
  q = rope->forward(q, context.cos, context.sin);
  k = rope->forward(k, context.cos, context.sin);
  auto core = std::dynamic_pointer_cast<AttentionCore>(find_module(*this, "sdpa"));
  if (!core) throw Error(model_ + ": attention core 'sdpa' is missing or not a titan::AttentionCore");
  at::Tensor out = attend(*core, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), context);
  out = out.transpose(1, 2).contiguous().view({batch, seq, -1});
  return child_layer(*this, "wo")->forward(out);
}

DecoderBlock::DecoderBlock(int64_t id, std::shared_ptr<DecoderAttention> attention, std::string ffn_name,
                           std::shared_ptr<torch::nn::Module> ffn, int64_t dim, double norm_eps,
                           const at::TensorOptions& options)
    : layer_id(id), ffn_name_(std::move(ffn_name)) {
  // In this order: the parameters' order is the optimizer's and FSDP's.
  register_module("attention", std::move(attention));
  register_module(ffn_name_, std::move(ffn));
  register_module("attention_norm", std::make_shared<RMSNorm>(dim, norm_eps, options));
  register_module("ffn_norm", std::make_shared<RMSNorm>(dim, norm_eps, options));
}

std::shared_ptr<DecoderBlock> DecoderBlock::make(int64_t layer_id, std::shared_ptr<DecoderAttention> attention,
                                                int64_t dim, double norm_eps, int64_t hidden_dim, const MoEOptions* moe,
                                                const at::TensorOptions& options) {
  if (moe) {
    return std::make_shared<DecoderBlock>(layer_id, std::move(attention), "moe",
                                          std::make_shared<MoE>(dim, *moe, options), dim, norm_eps, options);
  }
  return std::make_shared<DecoderBlock>(layer_id, std::move(attention), "feed_forward",
                                        std::make_shared<FeedForward>(dim, hidden_dim, options), dim, norm_eps, options);
}

at::Tensor DecoderBlock::forward(const at::Tensor& x, const AttentionContext& context) {
  auto attention = std::dynamic_pointer_cast<DecoderAttention>(find_module(*this, "attention"));
  if (!attention) {
    throw Error("layers." + std::to_string(layer_id) + ".attention is missing or not a titan::DecoderAttention");
  }
  at::Tensor normed = child_layer(*this, "attention_norm")->forward(x);
  at::Tensor h;
  if (context.cache) {
    AttentionContext mine = context;
    mine.layer = layer_id;  // whose keys and values the cache holds
    h = x + attention->forward(normed, mine);
  } else {
    h = x + attention->forward(normed, context);
  }
  return h + child_layer(*this, ffn_name_)->forward(child_layer(*this, "ffn_norm")->forward(h));
}

Decoder::Decoder(DecoderShape shape, const c10::Device& device, const BlockFactory& make_block, RopeTables rope_tables)
    : shape_(std::move(shape)), rope_tables_(std::move(rope_tables)) {
  auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  register_module("tok_embeddings", std::make_shared<Embedding>(shape_.vocab_size, shape_.dim, options));
  layers_ = register_module("layers", torch::nn::ModuleDict());
  for (int64_t i = 0; i < shape_.n_layers; ++i) {
    layers_->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
        {std::to_string(i), make_block(i, options)}});
  }
  register_module("norm", std::make_shared<RMSNorm>(shape_.dim, shape_.final_norm_eps, options));
  if (shape_.tie_embeddings) {
    register_module("output", std::make_shared<TiedOutput>(*this));
  } else {
    register_module("output", std::make_shared<Linear>(shape_.dim, shape_.vocab_size, options));
  }
  freqs_cos_ = register_buffer("freqs_cos", at::empty({shape_.max_seq_len, shape_.rope_dim / 2}, options));
  freqs_sin_ = register_buffer("freqs_sin", at::empty({shape_.max_seq_len, shape_.rope_dim / 2}, options));
  if (!device.is_meta()) Decoder::init_buffers();
}

int64_t Decoder::num_blocks() const { return static_cast<int64_t>(layers_->named_children().size()); }

std::shared_ptr<torch::nn::Module> Decoder::block(int64_t index) {
  auto blocks = layers_->named_children();
  if (index < 0 || index >= static_cast<int64_t>(blocks.size())) {
    throw Error(shape_.model + ": block " + std::to_string(index) + " out of range [0, " +
                std::to_string(blocks.size()) + ")");
  }
  return blocks[index].value();
}

void Decoder::init_buffers() { install_rope_tables(*this, freqs_cos_, freqs_sin_, rope_tables_(), shape_.model); }

at::Tensor Decoder::forward(const at::Tensor& tokens, KvCache& cache) {
  if (has_positions() || document_positions().defined()) {
    throw Error(shape_.model + ": a forward with a KV cache takes no positions or documents (generation runs on "
                "one process, one document a row)");
  }
  cache_ = &cache;
  at::Tensor logits;
  try {
    logits = forward(tokens);
  } catch (...) {
    cache_ = nullptr;
    throw;
  }
  cache_ = nullptr;
  cache.advance(tokens.size(1));
  return logits;
}

at::Tensor Decoder::forward(const at::Tensor& tokens) {
  // A later pipeline stage's input is hidden states, not token ids: it embeds
  // nothing (the last stage holds tok_embeddings too when the head is tied).
  auto embeddings = at::isFloatingType(tokens.scalar_type()) ? nullptr : find_child_layer(*this, "tok_embeddings");
  at::Tensor h = embeddings ? embeddings->forward(tokens) : tokens;
  // The tokens' length, not h's: under sequence parallelism h holds a shard.
  const int64_t seq = tokens.size(1);
  const int64_t first = cache_ ? cache_->length() : 0;  // generation: after the cached tokens
  const int64_t last = cache_ ? first + seq - 1 : last_position(seq);  // read in host memory
  if (last >= freqs_cos_.size(0)) {
    throw Error(shape_.model + ": position " + std::to_string(last) + " is past the rotary tables (max_seq_len " +
                std::to_string(freqs_cos_.size(0)) + "); raise model.max_seq_len" + shape_.rope_note);
  }
  AttentionContext context;
  // Rows of the whole sequence this forward's tokens are (context
  // parallelism's piece of it), in host memory.
  const std::optional<at::Tensor> rows = has_positions() ? std::optional(positions(seq)) : std::nullopt;
  if (const at::Tensor& by_document = document_positions(); by_document.defined()) {
    // Each row's tokens by their position within their document.
    at::Tensor mine = rows ? by_document.index_select(1, host_to_device(*rows, by_document.device())) : by_document;
    at::Tensor flat = mine.reshape({-1}).to(freqs_cos_.device());
    context.cos = freqs_cos_.index_select(0, flat).view({mine.size(0), mine.size(1), -1});
    context.sin = freqs_sin_.index_select(0, flat).view({mine.size(0), mine.size(1), -1});
    context.documents = document_ids(by_document);
  } else if (rows) {
    // A piece of a longer sequence (context parallelism): its global rows.
    at::Tensor global = host_to_device(*rows, freqs_cos_.device());
    context.cos = freqs_cos_.index_select(0, global);
    context.sin = freqs_sin_.index_select(0, global);
  } else {
    context.cos = freqs_cos_.narrow(0, first, seq);
    context.sin = freqs_sin_.narrow(0, first, seq);
  }
  context.cache = cache_;
  auto blocks = layers_->named_children();
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto block = std::dynamic_pointer_cast<DecoderBlock>(blocks[i].value());
    if (!block) throw Error(shape_.model + ": layers." + blocks[i].key() + " is not a titan::DecoderBlock");
    // By value: activation checkpointing runs the body again in backward.
    h = run_block(static_cast<int64_t>(i), h, [block, context](const at::Tensor& x) { return block->forward(x, context); });
  }
  return head(h, tokens, context);
}

at::Tensor Decoder::head(const at::Tensor& h, const at::Tensor& /*tokens*/, const AttentionContext& /*context*/) {
  at::Tensor out = h;
  if (auto norm = find_child_layer(*this, "norm")) out = norm->forward(out);
  if (auto output = find_child_layer(*this, "output")) out = output->forward(out);
  return out;
}

bool Decoder::init_skeleton_parameter(const std::string& name, at::Tensor& values, at::Generator& generator) const {
  if (name == "tok_embeddings.weight" && !shape_.tie_embeddings) {
    values.normal_(0.0, 1.0, generator);
  } else if (name == "output.weight" || name == "tok_embeddings.weight") {
    const double std = 1.0 / std::sqrt(static_cast<double>(shape_.dim));
    trunc_normal(values, 0.0, std, -3 * std, 3 * std, generator);
  } else if (name_ends_with(name, "norm.weight")) {  // the blocks' and the final norm, and any inside attention
    values.fill_(1.0);
  } else {
    return false;
  }
  return true;
}

double Decoder::depth_std(const std::string& name, bool depth_init) const {
  const int64_t depth = depth_init ? block_index_of(name, shape_.model) + 1 : shape_.n_layers;
  return 0.02 / std::sqrt(2.0 * static_cast<double>(depth));
}

}  // namespace titan
