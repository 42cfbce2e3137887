// The deepseek_v3 model plugin through the registry: TorchTitan's flavors
// (the parameter counts of Hugging Face's DeepSeek-V3, 671B with 37B
// active), MLA and the dense-then-MoE blocks, a forward and backward that
// reach every parameter, YaRN's rotary tables as TorchTitan's
// precompute_freqs_cis, HF names and config.json, refusals naming the key.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "titan/config.hpp"
#include "titan/error.hpp"
#include "titan/hf_weights.hpp"
#include "titan/model.hpp"
#include "titan/moe.hpp"
#include "titan/registry.hpp"

namespace {

std::unique_ptr<titan::ModelSpec> deepseek_v3(const std::string& options_yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + options_yaml, "run.yaml").child("model");
  return titan::PluginRegistry::instance().create_model("deepseek_v3", context);
}

std::string deepseek_refusal(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string deepseek_refusal(const std::string& options_yaml) {
  return deepseek_refusal([&] { deepseek_v3(options_yaml); });
}

using titan::test::has;

// The debug flavor shrunk: a dense block then a MoE block (8 experts, top 2,
// 2 shared), MLA with a 32-wide kv latent and 4 heads of 16 + 8 rope, v 16.
const char* kSmall =
    "  flavor: debugmodel\n  dim: 32\n  n_layers: 2\n  n_heads: 4\n  kv_lora_rank: 32\n  qk_nope_head_dim: 16\n"
    "  qk_rope_head_dim: 8\n  v_head_dim: 16\n  inter_dim: 48\n  num_experts: 8\n  top_k: 2\n  moe_inter_dim: 16\n"
    "  max_seq_len: 32\n";

}  // namespace

TEST_SUITE("deepseek_v3") {
  TEST_CASE("deepseek_v3 flavors have Hugging Face's parameter counts (671B with 37B active, 16B) and TorchTitan's "
            "routing") {
    auto big = deepseek_v3("  flavor: 671B\n");
    // transformers' DeepseekV3ForCausalLM (no MTP layer) on the meta device: 671,026,404,352.
    CHECK(big->num_params(true) == 671026404352);
    // Active per token: dense part, routers, shared experts, 8 of 256 routed experts (DeepSeek: "37B activated").
    const int64_t routed = 58LL * 3 * 256 * 2048 * 7168, embedding = 129280LL * 7168;
    CHECK(big->flops_per_token(0) / 6 == doctest::Approx(double(671026404352 - routed + routed / 32 - embedding)));
    CHECK(deepseek_v3("  flavor: 16B\n")->num_params(true) == 15706484224);
    auto model = big->build(c10::Device(c10::kMeta));
    int64_t total = 0;
    for (const auto& p : model->parameters()) total += p.numel();
    CHECK(total == big->num_params(true));
    auto params = model->named_parameters();
    CHECK(params["layers.0.attention.wq_a.weight"].sizes() == at::IntArrayRef({1536, 7168}));
    CHECK(params["layers.0.attention.q_norm.weight"].sizes() == at::IntArrayRef({1536}));
    CHECK(params["layers.0.attention.wq_b.weight"].sizes() == at::IntArrayRef({128 * 192, 1536}));
    CHECK(params["layers.0.attention.wkv_a.weight"].sizes() == at::IntArrayRef({512 + 64, 7168}));
    CHECK(params["layers.0.attention.kv_norm.weight"].sizes() == at::IntArrayRef({512}));
    CHECK(params["layers.0.attention.wkv_b.weight"].sizes() == at::IntArrayRef({128 * (128 + 128), 512}));
    CHECK(params["layers.0.attention.wo.weight"].sizes() == at::IntArrayRef({7168, 128 * 128}));
    CHECK(params.find("layers.0.attention.wq.weight") == nullptr);  // q_lora_rank 1536: wq_a, q_norm, wq_b
    CHECK(params["layers.2.feed_forward.w1.weight"].sizes() == at::IntArrayRef({18432, 7168}));  // 3 dense blocks
    CHECK(params.find("layers.3.feed_forward.w1.weight") == nullptr);
    CHECK(params["layers.3.moe.experts.w1"].sizes() == at::IntArrayRef({256, 2048, 7168}));
    CHECK(params["layers.60.moe.experts.w2"].sizes() == at::IntArrayRef({256, 7168, 2048}));
    CHECK(params["layers.3.moe.shared_experts.w1.weight"].sizes() == at::IntArrayRef({2048, 7168}));
    CHECK(params["layers.3.moe.router.gate.weight"].sizes() == at::IntArrayRef({256, 7168}));
    auto routers = titan::find_routers(*model);
    REQUIRE(routers.size() == 58);
    CHECK(routers[0].first == "layers.3.moe.router");
    const titan::MoEOptions& o = routers[0].second->options();
    CHECK(o.score_func == titan::RouterScore::sigmoid);
    CHECK(o.route_norm);
    CHECK(o.route_scale == 2.5);
    CHECK(o.num_expert_groups == 8);
    CHECK(o.num_limited_groups == 4);
    CHECK(o.top_k == 8);
    CHECK_FALSE(o.score_before_experts);
    CHECK(routers[0].second->expert_bias.defined());
    // debugmodel: softmax, no route_norm, 2 shared experts, one plain wq.
    auto debug = deepseek_v3("  flavor: debugmodel\n")->build(c10::Device(c10::kMeta));
    CHECK(debug->named_parameters()["layers.0.attention.wq.weight"].sizes() == at::IntArrayRef({16 * 192, 256}));
    CHECK(debug->named_parameters()["layers.1.moe.shared_experts.w1.weight"].sizes() == at::IntArrayRef({512, 256}));
    auto debug_routers = titan::find_routers(*debug);
    REQUIRE(debug_routers.size() == 5);
    CHECK(debug_routers[0].second->options().score_func == titan::RouterScore::softmax);
    CHECK_FALSE(debug_routers[0].second->options().route_norm);
    CHECK(debug_routers[0].second->options().top_k == 3);
  }

  TEST_CASE("a small deepseek_v3, plain wq and low-rank q: forward and backward reach every parameter, MoE blocks "
            "count each token top_k times") {
    for (const char* q : {"", "  q_lora_rank: 24\n"}) {
      CAPTURE(q);
      auto spec = deepseek_v3(std::string(kSmall) + q);
      spec->set_vocab_size(64);
      auto model = spec->build(c10::Device(c10::kCPU));
      model->init_weights(5);
      at::Tensor tokens = at::randint(0, 64, {2, 12}, at::kLong);
      at::Tensor logits = model->forward(tokens);
      CHECK(logits.sizes() == at::IntArrayRef({2, 12, 64}));
      titan::cross_entropy_loss(logits, tokens).backward();
      int64_t count = 0;
      for (const auto& item : model->named_parameters()) {
        CAPTURE(item.key());
        REQUIRE(item.value().grad().defined());
        CHECK(item.value().grad().abs().sum().item<double>() > 0);
        count += item.value().numel();
      }
      CHECK(count == spec->num_params(true));
      auto routers = titan::find_routers(*model);
      REQUIRE(routers.size() == 1);  // block 0 is dense
      CHECK(routers[0].first == "layers.1.moe.router");
      CHECK(routers[0].second->tokens_per_expert.sum().item<double>() == 2 * 12 * 2);
      CHECK(routers[0].second->expert_bias.abs().sum().item<double>() == 0);  // zeroed by init, not garbage
    }
  }

  TEST_CASE("deepseek_v3 rotary tables: plain RoPE up to original_seq_len, YaRN beyond it as TorchTitan's "
            "precompute_freqs_cis") {
    auto angles_at_1 = [](const std::string& yaml) {
      auto model = deepseek_v3(yaml)->build(c10::Device(c10::kCPU));
      auto buffers = model->named_buffers();
      at::Tensor cos = buffers["freqs_cos"], sin = buffers["freqs_sin"];
      REQUIRE(cos.size(1) == 32);  // qk_rope_head_dim 64 / 2
      return at::atan2(sin[1], cos[1]).to(at::kDouble);  // position 1: the frequencies themselves
    };
    at::Tensor plain = angles_at_1("  flavor: debugmodel\n  max_seq_len: 4096\n");
    at::Tensor yarn = angles_at_1("  flavor: debugmodel\n  max_seq_len: 4097\n");
    for (int64_t i = 0; i < 32; ++i) {
      CAPTURE(i);
      double freq = std::pow(10000.0, -2.0 * double(i) / 64.0);
      CHECK(plain[i].item<double>() == doctest::Approx(freq).epsilon(1e-6));
      // YaRN's correction range for dim 64, base 1e4, 4096 positions, beta 32 / 1:
      // floor(10.47) = 10 .. ceil(22.5) = 23; below it unchanged, above it / rope_factor 40, a ramp between.
      double ramp = std::clamp((double(i) - 10.0) / 13.0, 0.0, 1.0);
      double expected = freq / 40.0 * ramp + freq * (1 - ramp);
      CHECK(yarn[i].item<double>() == doctest::Approx(expected).epsilon(1e-6));
    }
  }

  TEST_CASE("deepseek_v3 Hugging Face names and config.json: DeepseekV3ForCausalLM's, the expert bias as "
            "e_score_correction_bias; routing HF cannot express is refused by name") {
    auto spec = deepseek_v3("  flavor: 671B\n");
    auto names = spec->hf_names();
    auto model = spec->build(c10::Device(c10::kMeta));
    size_t buffers = 0;
    for (const auto& item : model->named_parameters()) CHECK_MESSAGE(names.count(item.key()), item.key());
    for (const auto& item : model->named_buffers()) buffers += names.count(item.key());
    CHECK(buffers == 58);  // every MoE block's expert_bias, no token counts, no rotary tables
    CHECK(names.size() == model->named_parameters().size() + 58);
    CHECK(names["layers.3.moe.router.expert_bias"] == "model.layers.3.mlp.gate.e_score_correction_bias");
    CHECK(names["layers.3.moe.experts.w1"] == std::string("model.layers.3.mlp.experts.") + titan::kHfExpert +
                                                  ".gate_proj.weight");
    CHECK(names["layers.3.moe.experts.w2"] == std::string("model.layers.3.mlp.experts.") + titan::kHfExpert +
                                                  ".down_proj.weight");
    CHECK(names["layers.3.moe.shared_experts.w3.weight"] == "model.layers.3.mlp.shared_experts.up_proj.weight");
    CHECK(names["layers.0.attention.wkv_a.weight"] == "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
    CHECK(names["layers.0.attention.kv_norm.weight"] == "model.layers.0.self_attn.kv_a_layernorm.weight");
    CHECK(names["layers.0.attention.q_norm.weight"] == "model.layers.0.self_attn.q_a_layernorm.weight");
    CHECK(names["layers.0.attention.wq_b.weight"] == "model.layers.0.self_attn.q_b_proj.weight");
    CHECK(names["layers.0.feed_forward.w2.weight"] == "model.layers.0.mlp.down_proj.weight");
    auto config = nlohmann::json::parse(spec->hf_config_json());
    CHECK(config["architectures"][0] == "DeepseekV3ForCausalLM");
    CHECK(config["n_routed_experts"] == 256);
    CHECK(config["n_shared_experts"] == 1);
    CHECK(config["num_experts_per_tok"] == 8);
    CHECK(config["n_group"] == 8);
    CHECK(config["topk_group"] == 4);
    CHECK(config["routed_scaling_factor"] == 2.5);
    CHECK(config["norm_topk_prob"] == true);
    CHECK(config["first_k_dense_replace"] == 3);
    CHECK(config["q_lora_rank"] == 1536);
    CHECK(config["rope_interleave"] == true);
    CHECK(config["rope_scaling"].is_null());  // max_seq_len 4096 = original_seq_len
    auto yarn = nlohmann::json::parse(deepseek_v3("  flavor: 671B\n  max_seq_len: 16384\n")->hf_config_json());
    CHECK(yarn["rope_scaling"]["type"] == "yarn");
    CHECK(yarn["rope_scaling"]["factor"] == 40.0);
    CHECK(yarn["rope_scaling"]["original_max_position_embeddings"] == 4096);
    CHECK(yarn["rope_scaling"]["mscale_all_dim"] == 1.0);
    auto debug = nlohmann::json::parse(deepseek_v3("  flavor: debugmodel\n  score_func: sigmoid\n")->hf_config_json());
    CHECK(debug["q_lora_rank"].is_null());
    CHECK(debug["n_group"] == 1);  // ungrouped routing: one group of every expert
    CHECK(debug["topk_group"] == 1);
    // TorchTitan's debugmodel and 16B score with a softmax, which HF's DeepSeek-V3 cannot.
    auto softmax = deepseek_v3("  flavor: debugmodel\n");
    CHECK(has(deepseek_refusal([&] { softmax->hf_names(); }), "softmax router scores"));
    CHECK(has(deepseek_refusal([&] { deepseek_v3("  flavor: 671B\n  num_shared_experts: 0\n")->hf_config_json(); }),
              "without shared experts"));
    // With load balancing off there is no bias to name.
    CHECK(deepseek_v3("  flavor: 671B\n  load_balance_coeff: 0\n")->hf_names().count("layers.3.moe.router.expert_bias") == 0);
  }

  TEST_CASE("deepseek_v3 refuses bad options naming the key") {
    CHECK(has(deepseek_refusal("  flavor: debugmodel\n  n_dense_layers: 7\n"), "model.n_dense_layers"));
    CHECK(has(deepseek_refusal("  flavor: debugmodel\n  qk_rope_head_dim: 7\n"), "must be positive and even"));
    std::string top_k = deepseek_refusal("  flavor: debugmodel\n  top_k: 9\n");
    CHECK(has(top_k, "model.top_k"));
    CHECK(has(top_k, "must be in [1, num_experts = 8], got 9"));
    CHECK(has(deepseek_refusal("  flavor: debugmodel\n  moe_inter_dim: -1\n"), "model.moe_inter_dim"));
    CHECK(has(deepseek_refusal("  flavor: debugmodel\n  num_limited_groups: 2\n"), "needs num_expert_groups > 0"));
    CHECK(has(deepseek_refusal("  flavor: debugmodel\n  score_func: relu\n"), "sigmoid"));
    CHECK(has(deepseek_refusal("  flavor: 1T\n"), "671B"));
    // A dense-only model needs no MoE options to be valid.
    CHECK(deepseek_refusal("  flavor: debugmodel\n  n_dense_layers: 6\n  num_experts: 0\n").empty());
  }
}
