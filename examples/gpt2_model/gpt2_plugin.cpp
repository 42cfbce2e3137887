// The `gpt2` plugin: its ModelSpec (flavors, sizes, FLOPs) and descriptor.
// Reads and checks the YAML `model:` options; the model is in gpt2_model.cpp.
#include "gpt2_model.h"
#include "titan/error.hpp"
#include "titan/plugin.hpp"

namespace {

using gpt2::Gpt2Args;

class Gpt2Spec : public titan::ModelSpec {
 public:
  Gpt2Spec(std::string flavor, const Gpt2Args& args) : flavor_(std::move(flavor)), args_(args) {}
  std::string flavor() const override { return flavor_; }
  void set_vocab_size(int64_t vocab_size) override {
    if (vocab_size <= 0) throw titan::Error("gpt2: vocabulary size must be positive, got " + std::to_string(vocab_size));
    args_.vocab_size = vocab_size;
  }
  std::shared_ptr<titan::CausalLM> build(const c10::Device& device) const override {
    return std::make_shared<gpt2::Gpt2>(args_, device);
  }
  int64_t vocab_size() const override { return args_.vocab_size; }
  int64_t num_params(bool include_embedding) const override {
    const Gpt2Args& a = args_;
    int64_t block = (a.dim * 3 * a.dim + 3 * a.dim) + (a.dim * a.dim + a.dim) +  // attention
                    (a.dim * 4 * a.dim + 4 * a.dim) + (4 * a.dim * a.dim + a.dim) +  // MLP
                    4 * a.dim;                                                       // two LayerNorms
    int64_t body = a.n_layers * block + 2 * a.dim + a.vocab_size * a.dim;  // + ln_f + lm_head
    return include_embedding ? body + (a.vocab_size + a.max_seq_len) * a.dim : body;
  }
  double flops_per_token(int64_t seq_len) const override {
    // 6 per non-embedding parameter (forward + backward matmuls), plus the
    // attention scores and weighted values: 12 * layers * dim * seq.
    return 6.0 * static_cast<double>(num_params(false)) +
           12.0 * static_cast<double>(args_.n_layers * args_.dim) * static_cast<double>(seq_len);
  }
  // No tp_plan(): tensor parallelism is not offered for this example model.

 private:
  std::string flavor_;
  Gpt2Args args_;
};

Gpt2Args flavor_args(const std::string& flavor) {
  Gpt2Args args;
  if (flavor == "small") {  // GPT-2 small (124M with its 50257-token vocabulary)
    args.dim = 768;
    args.n_layers = 12;
    args.n_heads = 12;
  }
  return args;  // "tiny": the defaults, for tests and CPU runs
}

Gpt2Spec read_spec(const titan::ConfigNode& options) {
  std::string flavor = options.choice("flavor", "tiny", {"tiny", "small"}, "model size: tiny, small");
  Gpt2Args args = flavor_args(flavor);
  // Shape overrides for experiments and tests; 0 keeps the flavor's value.
  const std::pair<const char*, int64_t*> overrides[] = {
      {"dim", &args.dim}, {"n_layers", &args.n_layers}, {"n_heads", &args.n_heads}};
  for (auto [key, field] : overrides) {
    int64_t value = options.get<int64_t>(key, 0, std::string("override the flavor's ") + key + " (0: keep)");
    if (value < 0) options.fail(key, "expected >= 0 (0 keeps the flavor's value), got " + std::to_string(value));
    if (value > 0) *field = value;
  }
  args.max_seq_len = options.get<int64_t>("max_seq_len", args.max_seq_len, "positions the model has embeddings for");
  if (args.max_seq_len <= 0) options.fail("max_seq_len", "expected a positive integer");
  if (args.dim % args.n_heads != 0) {
    options.fail("n_heads", "dim " + std::to_string(args.dim) + " is not divisible by n_heads " +
                                std::to_string(args.n_heads));
  }
  return Gpt2Spec(flavor, args);
}

}  // namespace

TITAN_PLUGIN_OF(model, Gpt2Spec, "1.0",
                "GPT-2-style decoder: learned positions, LayerNorm, GELU MLP (flavors tiny, small)", read_spec)
