// Generation (titan/generation.hpp) on the three model families built
// through the registry: the KV cache's logits equal the whole sequence's at
// every position (a prompt, a chunk of several tokens, then one at a time),
// greedy decoding with and without the cache gives the same tokens, and the
// sampling rules (temperature, top-k, top-p, seed) do what they say.
#include "doctest_torch.hpp"
#include "error_of.hpp"
#include "test_support.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "titan/config.hpp"
#include "titan/decoder.hpp"
#include "titan/generation.hpp"
#include "titan/model.hpp"
#include "titan/registry.hpp"

namespace {

std::shared_ptr<titan::CausalLM> small_model(const std::string& plugin, const std::string& options_yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + options_yaml, "run.yaml").child("model");
  auto spec = titan::PluginRegistry::instance().create_model(plugin, context);
  spec->set_vocab_size(97);
  auto model = spec->build(c10::Device(c10::kCPU));
  model->init_weights(3);
  // Trained-looking weights: at init attention is nearly uniform, and an
  // off-by-one position in the cache would hardly move the logits.
  at::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    if (item.key().find("norm") == std::string::npos) item.value().mul_(4.0);
  }
  return model;
}

struct Family {
  const char* plugin;
  const char* options;
};
const Family kFamilies[] = {
    {"llama3", "  flavor: debugmodel\n  dim: 64\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  max_seq_len: 32\n"},
    {"qwen3",
     "  flavor: debugmodel_moe\n  dim: 32\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  head_dim: 8\n"
     "  num_experts: 4\n  top_k: 2\n  moe_hidden_dim: 16\n  max_seq_len: 32\n"},
    {"deepseek_v3",
     "  flavor: debugmodel\n  dim: 32\n  n_layers: 2\n  n_heads: 4\n  kv_lora_rank: 32\n  qk_nope_head_dim: 16\n"
     "  qk_rope_head_dim: 8\n  v_head_dim: 16\n  inter_dim: 48\n  num_experts: 8\n  top_k: 2\n  moe_inter_dim: 16\n"
     "  max_seq_len: 32\n"},
};

double largest_difference(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_SUITE("generation") {
  TEST_CASE("with a KV cache every family's logits equal the whole sequence's: prompt, a chunk, then one token at "
            "a time") {
    for (const Family& family : kFamilies) {
      CAPTURE(family.plugin);
      auto model = small_model(family.plugin, family.options);
      auto& decoder = dynamic_cast<titan::Decoder&>(*model);
      at::NoGradGuard no_grad;
      torch::manual_seed(5);
      const at::Tensor tokens = at::randint(0, 97, {2, 12}, at::kLong);
      const at::Tensor whole = model->forward(tokens);
      const double scale = whole.abs().max().item<double>();
      CHECK(scale > 1.0);

      titan::KvCache cache(12);
      std::vector<at::Tensor> pieces{decoder.forward(tokens.narrow(1, 0, 5), cache)};
      CHECK(cache.length() == 5);
      pieces.push_back(decoder.forward(tokens.narrow(1, 5, 3), cache));  // several after a prompt: a shifted band
      for (int64_t i = 8; i < 12; ++i) pieces.push_back(decoder.forward(tokens.narrow(1, i, 1), cache));
      CHECK(cache.length() == 12);
      CHECK(largest_difference(at::cat(pieces, 1), whole) <= 1e-5 * scale);

      // The check can fail: the same tokens at other rotary positions (a
      // cache that forgot to advance) give other logits.
      titan::KvCache stale(12);
      decoder.forward(tokens.narrow(1, 0, 5), stale);
      at::Tensor without_past = model->forward(tokens.narrow(1, 5, 3));
      CHECK(largest_difference(without_past, whole.narrow(1, 5, 3)) > 100 * 1e-5 * scale);

      // Full: a clear refusal, and the cache unchanged.
      CHECK(titan::test::has(titan::test::error_of([&] { decoder.forward(tokens.narrow(1, 0, 1), cache); }),
                             "13 positions do not fit its capacity of 12"));
    }
  }

  TEST_CASE("greedy decoding with and without the cache gives the same tokens, and stops at the stop token") {
    for (const Family& family : kFamilies) {
      CAPTURE(family.plugin);
      auto model = small_model(family.plugin, family.options);
      titan::GenerationOptions options;
      options.max_new_tokens = 10;
      const std::vector<int64_t> prompt{1, 17, 42, 5};
      const titan::Generation cached = titan::generate(*model, prompt, options);
      CHECK(cached.cached);
      REQUIRE(cached.tokens.size() == 10);
      options.use_cache = false;
      const titan::Generation plain = titan::generate(*model, prompt, options);
      CHECK_FALSE(plain.cached);
      CHECK(plain.tokens == cached.tokens);
      // Not one token repeated ten times: the positions matter.
      CHECK(std::set<int64_t>(cached.tokens.begin(), cached.tokens.end()).size() > 1);

      options.use_cache = true;
      options.stop_id = cached.tokens[3];
      const titan::Generation stopped = titan::generate(*model, prompt, options);
      CHECK(stopped.stopped);
      const auto first_stop = std::find(cached.tokens.begin(), cached.tokens.end(), cached.tokens[3]);
      CHECK(stopped.tokens == std::vector<int64_t>(cached.tokens.begin(), first_stop + 1));
    }
  }

  TEST_CASE("the prompt and the cache must fit the rotary tables: past max_seq_len is refused by name") {
    auto model = small_model(kFamilies[0].plugin, kFamilies[0].options);  // max_seq_len 32
    titan::GenerationOptions options;
    options.max_new_tokens = 40;
    const std::string message = titan::test::error_of([&] { titan::generate(*model, {1, 2, 3}, options); });
    CHECK_MESSAGE(titan::test::has(message, "past the rotary tables (max_seq_len 32)"), message);
  }

  TEST_CASE("sampling: temperature, top-k and top-p keep what they say, draws follow the probabilities and the "
            "seed") {
    const at::Tensor logits = at::log(at::tensor({0.05, 0.15, 0.5, 0.3}, at::kFloat));
    auto draws = [&](const titan::SamplingOptions& options, uint64_t seed, int n) {
      at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
      std::vector<int> counts(4, 0);
      std::vector<int64_t> sequence;
      for (int i = 0; i < n; ++i) {
        const int64_t token = titan::next_token(logits, options, generator);
        ++counts.at(token);
        sequence.push_back(token);
      }
      return std::make_pair(counts, sequence);
    };
    titan::SamplingOptions greedy;
    at::Generator unused = at::make_generator<at::CPUGeneratorImpl>(0);
    CHECK(titan::next_token(logits, greedy, unused) == 2);

    titan::SamplingOptions plain{1.0, 0, 1.0};
    auto [counts, sequence] = draws(plain, 7, 4000);
    CHECK(counts[2] / 4000.0 == doctest::Approx(0.5).epsilon(0.08));
    CHECK(counts[3] / 4000.0 == doctest::Approx(0.3).epsilon(0.1));
    CHECK(counts[0] / 4000.0 == doctest::Approx(0.05).epsilon(0.3));
    CHECK(draws(plain, 7, 50).second == std::vector<int64_t>(sequence.begin(), sequence.begin() + 50));
    CHECK(draws(plain, 8, 50).second != std::vector<int64_t>(sequence.begin(), sequence.begin() + 50));

    // Top-k 2: only tokens 2 and 3, in the ratio 0.5 : 0.3.
    auto top2 = draws({1.0, 2, 1.0}, 7, 4000).first;
    CHECK(top2[0] + top2[1] == 0);
    CHECK(top2[2] / 4000.0 == doctest::Approx(0.625).epsilon(0.06));
    // Top-p 0.7: 0.5 does not reach it, 0.5 + 0.3 does: tokens 2 and 3 only.
    auto nucleus = draws({1.0, 0, 0.7}, 7, 4000).first;
    CHECK(nucleus[0] + nucleus[1] == 0);
    CHECK(nucleus[3] > 0);
    // Top-p 0.5: token 2 alone reaches it.
    CHECK(draws({1.0, 0, 0.5}, 7, 200).first[2] == 200);
    // A low temperature sharpens: token 2 nearly always.
    CHECK(draws({0.05, 0, 1.0}, 7, 400).first[2] >= 398);

    CHECK(titan::test::has(titan::sampling_problem({-1.0, 0, 1.0}), "--temperature must be >= 0"));
    CHECK(titan::test::has(titan::sampling_problem({1.0, -2, 1.0}), "--top-k must be >= 0"));
    CHECK(titan::test::has(titan::sampling_problem({1.0, 0, 0.0}), "--top-p must be in (0, 1]"));
    CHECK(titan::test::has(titan::sampling_problem({1.0, 0, 1.5}), "--top-p must be in (0, 1]"));
    CHECK(titan::sampling_problem({0.7, 40, 0.9}).empty());
  }
}
