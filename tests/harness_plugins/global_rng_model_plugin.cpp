// A deliberately wrong model: a bigram LM (embedding -> output head) whose
// init_parameter draws from the process-wide generator instead of one
// seeded by (seed, name). Its values then depend on init order and on what
// ran before, so a sharded init differs from a single-process one;
// titan-conformance's model.init_deterministic and
// model.init_order_independent must fail it.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "titan/model.hpp"
#include "test_plugin.hpp"

namespace {

// A submodule holding one `weight`, so parameters are named like a real model's.
struct Weight : torch::nn::Module {
  Weight(int64_t rows, int64_t cols, const c10::Device& device) {
    weight = register_parameter("weight", at::empty({rows, cols}, at::TensorOptions().device(device)));
  }
  at::Tensor weight;
};

class BigramLM : public titan::CausalLM {
 public:
  BigramLM(int64_t vocab, int64_t dim, const c10::Device& device) {
    embedding_ = register_module("tok_embeddings", std::make_shared<Weight>(vocab, dim, device))->weight;
    output_ = register_module("output", std::make_shared<Weight>(vocab, dim, device))->weight;
  }
  at::Tensor forward(const at::Tensor& tokens) override {
    return at::matmul(at::embedding(embedding_, tokens), output_.t());
  }
  int64_t num_blocks() const override { return 0; }
  std::shared_ptr<torch::nn::Module> block(int64_t /*index*/) override { return nullptr; }
  void init_parameter(const std::string& /*name*/, at::Tensor& values, uint64_t /*seed*/) const override {
    values.normal_(0.0, 0.3);  // the bug: the global generator, never seeded from (seed, name)
  }
  void init_buffers() override {}

 private:
  at::Tensor embedding_, output_;
};

class BigramSpec : public titan::ModelSpec {
 public:
  explicit BigramSpec(int64_t dim) : dim_(dim) {}
  std::string flavor() const override { return "bigram"; }
  void set_vocab_size(int64_t vocab_size) override { vocab_ = vocab_size; }
  std::shared_ptr<titan::CausalLM> build(const c10::Device& device) const override {
    return std::make_shared<BigramLM>(vocab_, dim_, device);
  }
  int64_t vocab_size() const override { return vocab_; }
  int64_t num_params(bool /*include_embedding*/) const override { return 2 * vocab_ * dim_; }
  double flops_per_token(int64_t /*seq_len*/) const override { return 6.0 * static_cast<double>(vocab_ * dim_); }

 private:
  int64_t dim_;
  int64_t vocab_ = 256;
};

void register_global_rng_model(titan::PluginRegistrar& registrar) {
  registrar.model([](const titan::PluginContext& context) {
    return std::make_unique<BigramSpec>(context.options.get<int64_t>("dim", 32, "embedding width"));
  });
}

}  // namespace

TITAN_TEST_PLUGIN(global_rng_model, "1.0", titan::kind_model, "test plugin: init from the global generator",
             register_global_rng_model)
