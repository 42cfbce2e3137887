// Tied embeddings (model.enable_weight_tying) in llama3 and qwen3: one
// matrix, no output.weight; the logits are the untied model's with the head
// set to the embeddings, and the matrix's gradient is the sum of both uses;
// the published tied flavors tie by default with transformers' parameter
// counts; the tied matrix is drawn by the head's init rule.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include "titan/config.hpp"
#include "titan/model.hpp"
#include "titan/registry.hpp"

namespace {

std::unique_ptr<titan::ModelSpec> tied_test_spec(const std::string& plugin, const std::string& options_yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + options_yaml, "run.yaml").child("model");
  auto spec = titan::PluginRegistry::instance().create_model(plugin, context);
  spec->set_vocab_size(97);
  return spec;
}

const char* kTiedLlama = "  flavor: debugmodel\n  dim: 64\n  n_layers: 2\n  n_heads: 4\n  max_seq_len: 32\n";
const char* kTiedQwen = "  flavor: debugmodel\n  dim: 32\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  head_dim: 8\n"
                        "  max_seq_len: 32\n";

}  // namespace

TEST_SUITE("tied embeddings") {
  TEST_CASE("tied: one matrix, the untied model's logits with the head set to it, and its gradient the sum of both "
            "uses (llama3, qwen3)") {
    for (const auto& [plugin, options] : {std::pair{"llama3", kTiedLlama}, std::pair{"qwen3", kTiedQwen}}) {
      CAPTURE(plugin);
      auto tied_spec = tied_test_spec(plugin, std::string(options) + "  enable_weight_tying: true\n");
      auto untied_spec = tied_test_spec(plugin, options);
      CHECK(tied_spec->ties_embeddings());
      CHECK_FALSE(untied_spec->ties_embeddings());
      auto tied = tied_spec->build(c10::Device(c10::kCPU));
      auto untied = untied_spec->build(c10::Device(c10::kCPU));
      tied->init_weights(1);
      untied->init_weights(1);
      auto tied_params = tied->named_parameters();
      auto untied_params = untied->named_parameters();
      CHECK(tied_params.find("output.weight") == nullptr);
      CHECK(tied_params.size() + 1 == untied_params.size());
      int64_t count = 0;
      for (const auto& item : tied_params) count += item.value().numel();
      CHECK(count == tied_spec->num_params());
      CHECK(tied_spec->num_params() + 97 * tied_params["tok_embeddings.weight"].size(1) == untied_spec->num_params());
      // The head's compute is still there: the same FLOPs as untied.
      CHECK(tied_spec->flops_per_token(32) == doctest::Approx(untied_spec->flops_per_token(32)));
      CHECK(tied_spec->hf_names().count("output.weight") == 0);
      CHECK(nlohmann::json::parse(tied_spec->hf_config_json())["tie_word_embeddings"] == true);
      CHECK(nlohmann::json::parse(untied_spec->hf_config_json())["tie_word_embeddings"] == false);

      {
        at::NoGradGuard no_grad;
        for (const auto& item : tied_params) untied_params[item.key()].copy_(item.value());
        untied_params["output.weight"].copy_(tied_params["tok_embeddings.weight"]);
      }
      torch::manual_seed(2);
      const at::Tensor tokens = at::randint(0, 97, {2, 16}, at::kLong);
      const at::Tensor tied_logits = tied->forward(tokens), untied_logits = untied->forward(tokens);
      CHECK((tied_logits - untied_logits).abs().max().item<double>() == 0.0);
      tied_logits.pow(2).mean().backward();
      untied_logits.pow(2).mean().backward();
      const at::Tensor both = untied_params["tok_embeddings.weight"].grad() + untied_params["output.weight"].grad();
      const at::Tensor grad = tied_params["tok_embeddings.weight"].grad();
      CHECK((grad - both).abs().max().item<double>() <= 1e-6 * both.abs().max().item<double>());
      // The check can fail: either use alone is far from the sum.
      CHECK((grad - untied_params["output.weight"].grad()).abs().max().item<double>() >
            1e-2 * both.abs().max().item<double>());

      // Drawn by the head's rule (std 1/sqrt(dim), truncated at 3 std), not the embedding's N(0, 1).
      const at::Tensor embedding = tied_params["tok_embeddings.weight"];
      const double std = 1.0 / std::sqrt(static_cast<double>(embedding.size(1)));
      CHECK(embedding.std().item<double>() == doctest::Approx(std).epsilon(0.15));
      CHECK(embedding.abs().max().item<double>() <= 3 * std + 1e-6);
    }
  }

  TEST_CASE("tied by default where the published checkpoints tie, with transformers' parameter counts") {
    // transformers' LlamaForCausalLM / Qwen3ForCausalLM with tie_word_embeddings, on meta (unique parameters).
    const std::pair<const char*, int64_t> llama[] = {{"1B", 1235814400LL}, {"3B", 3212749824LL}};
    for (const auto& [flavor, count] : llama) {
      CAPTURE(flavor);
      auto spec = tied_test_spec("llama3", std::string("  flavor: ") + flavor + "\n");
      spec->set_vocab_size(128256);
      CHECK(spec->ties_embeddings());
      CHECK(spec->num_params() == count);
    }
    const std::pair<const char*, int64_t> qwen[] = {{"0.6B", 596049920LL}, {"1.7B", 1720574976LL}, {"4B", 4022468096LL}};
    for (const auto& [flavor, count] : qwen) {
      CAPTURE(flavor);
      auto spec = tied_test_spec("qwen3", std::string("  flavor: ") + flavor + "\n");
      spec->set_vocab_size(151936);
      CHECK(spec->ties_embeddings());
      CHECK(spec->num_params() == count);
      int64_t built = 0;
      for (const auto& param : spec->build(c10::Device(c10::kMeta))->parameters()) built += param.numel();
      CHECK(built == count);
    }
    CHECK_FALSE(tied_test_spec("llama3", "  flavor: 8B\n")->ties_embeddings());
    CHECK_FALSE(tied_test_spec("qwen3", "  flavor: 8B\n")->ties_embeddings());
    CHECK_FALSE(tied_test_spec("llama3", "  flavor: 1B\n  enable_weight_tying: false\n")->ties_embeddings());
  }
}
