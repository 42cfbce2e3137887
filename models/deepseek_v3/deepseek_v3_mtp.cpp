// DeepSeek-V3's multi-token prediction (TorchTitan's MTPDecoder and
// MTPLoss): after the main blocks, depth k (1..D) takes the previous
// depth's hidden state (the main model's before its final norm, for k = 1)
// and the embeddings of the tokens k ahead (the last k positions of a row
// have none: token 0, and the hidden state zeroed), runs one block, and
// predicts through the shared output head the token k after the next. The
// sequence keeps its length; the labels of depth k are the main labels
// shifted left by k, the last k ignored. Under a pipeline the blocks sit on
// the last stage, which holds a copy of the embeddings (their gradients
// summed with the first stage's) and is handed the token ids.
#include <ATen/ATen.h>

#include "deepseek_v3_model.h"
#include "titan/error.hpp"
#include "titan/feed_forward.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"

namespace titan::deepseek_v3 {

namespace {

std::shared_ptr<torch::nn::Module> mtp_ffn(const DeepSeekV3Args& args, const at::TensorOptions& options) {
  // The last main block's kind (TorchTitan copies its config).
  if (args.n_layers > args.n_dense_layers) return std::make_shared<MoE>(args.dim, args.moe_options, options);
  return std::make_shared<FeedForward>(args.dim, args.inter_dim, options);
}

// x shifted left by k along dim 1, the last k slots `fill`.
at::Tensor shifted_left(const at::Tensor& x, int64_t k, int64_t fill) {
  const int64_t seq = x.size(1);
  at::Tensor tail = at::full({x.size(0), std::min(k, seq)}, fill, x.options());
  return k >= seq ? tail : at::cat({x.narrow(1, k, seq - k), tail}, 1);
}

}  // namespace

MtpBlock::MtpBlock(const DeepSeekV3Args& args, int64_t depth, const at::TensorOptions& options)
    : DecoderBlock(args.n_layers + depth, std::make_shared<Attention>(args, options),
                   args.n_layers > args.n_dense_layers ? "moe" : "feed_forward", mtp_ffn(args, options), args.dim,
                   args.norm_eps, options) {
  register_module("enorm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
  register_module("hnorm", std::make_shared<RMSNorm>(args.dim, args.norm_eps, options));
  register_module("eh_proj", std::make_shared<Linear>(2 * args.dim, args.dim, options));
  register_module("mtp_norm", std::make_shared<RMSNorm>(args.dim, args.final_norm_eps, options));
}

at::Tensor MtpBlock::forward_mtp(const at::Tensor& previous, const at::Tensor& embedded,
                                 const AttentionContext& context) {
  // The embedding first: DeepSeek's released weights (and TorchTitan, HF, vLLM) order eh_proj's input so.
  at::Tensor x = child_layer(*this, "eh_proj")
                     ->forward(at::cat({child_layer(*this, "enorm")->forward(embedded),
                                        child_layer(*this, "hnorm")->forward(previous)},
                                       -1));
  return child_layer(*this, "mtp_norm")->forward(forward(x, context));
}

at::Tensor Transformer::forward(const at::Tensor& tokens) {
  // Refused before the blocks run: what MTP cannot go with fails there first otherwise.
  if (args_.num_mtp_layers > 0 && is_training() && find_child_layer(*this, "output")) check_mtp_layout(tokens);
  return Decoder::forward(tokens);
}

void Transformer::check_mtp_layout(const at::Tensor& tokens) const {
  auto refuse = [](const std::string& what) {
    throw Error("deepseek_v3: multi-token prediction (model.num_mtp_layers) " + what +
                " is not supported yet (TorchTitan refuses it too); set model.num_mtp_layers=0 to train without it");
  };
  // A later pipeline stage takes hidden states; the pipeline hands it the token ids too.
  if (at::isFloatingType(tokens.scalar_type()) && !stage_tokens().defined()) {
    refuse("on a pipeline stage that is not given the token ids");
  }
  if (has_positions()) refuse("with context parallelism (each rank holds a piece of the sequence)");
  if (document_positions().defined()) refuse("with block-causal attention (model.attn_mask_type: block_causal)");
  if (const TensorLayout* layout = this->layout("tok_embeddings.weight")) {
    for (const auto& dim : layout->mesh_dims) {
      if (dim == "tp") refuse("with tensor parallelism");
    }
  }
}

at::Tensor Transformer::head(const at::Tensor& h, const at::Tensor& tokens, const AttentionContext& context) {
  at::Tensor main = Decoder::head(h, tokens, context);
  auto output = find_child_layer(*this, "output");
  // Validation and generation score the main head only; a stage without
  // the head passes its hidden states on.
  if (args_.num_mtp_layers == 0 || !is_training() || context.cache || !output) return main;
  auto embeddings = find_child_layer(*this, "tok_embeddings");
  if (!embeddings) throw Error("deepseek_v3: multi-token prediction needs tok_embeddings on this model or stage");
  auto depths = find_module(*this, "mtp_layers");
  // On a later pipeline stage, the ids the pipeline handed over.
  const at::Tensor& ids = at::isFloatingType(tokens.scalar_type()) ? stage_tokens() : tokens;
  const int64_t seq = ids.size(1);
  std::vector<at::Tensor> logits = {main};
  at::Tensor previous = h;
  for (int64_t k = 1; k <= args_.num_mtp_layers; ++k) {
    auto block = std::dynamic_pointer_cast<MtpBlock>(find_module(*depths, std::to_string(k - 1)));
    if (!block) throw Error("deepseek_v3: mtp_layers." + std::to_string(k - 1) + " is missing or not an MtpBlock");
    // Positions whose token k ahead is past the row: no input there.
    at::Tensor valid = (at::arange(seq, ids.options()) < seq - k).to(previous.scalar_type()).view({1, seq, 1});
    previous = block->forward_mtp(previous * valid, embeddings->forward(shifted_left(ids, k, 0)), context);
    logits.push_back(output->forward(previous));
  }
  return at::cat(logits, 0);
}

CausalLM::Objective mtp_objective(int64_t depths, double scale) {
  return [depths, scale](const at::Tensor& output, const at::Tensor& labels, const LossFn& loss) {
    const int64_t batch = labels.size(0), seq = labels.size(1);
    if (output.size(0) == batch) return loss(output, labels);  // the main logits alone (validation)
    if (output.size(0) != (depths + 1) * batch) {
      throw Error("deepseek_v3: multi-token prediction expects " + std::to_string(depths + 1) + " x " +
                  std::to_string(batch) + " rows of logits, got " + std::to_string(output.size(0)));
    }
    at::Tensor main = loss(output.narrow(0, 0, batch), labels);
    // Each depth's mean over its own labels, back to a sum, over the main
    // labels' count (on the device: no host read).
    at::Tensor main_count = (labels != -100).sum().to(at::kFloat);
    at::Tensor depth_sum = at::zeros({}, main.options());
    for (int64_t k = 1; k <= depths && k < seq; ++k) {
      at::Tensor shifted = shifted_left(labels, k, -100);
      at::Tensor count = (shifted != -100).sum().to(at::kFloat);
      depth_sum = depth_sum + loss(output.narrow(0, k * batch, batch), shifted) * count / main_count;
    }
    return main + scale / static_cast<double>(depths) * depth_sum;
  };
}

}  // namespace titan::deepseek_v3
