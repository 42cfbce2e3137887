// The qwen3 model plugin through the registry: TorchTitan's flavors (the
// parameter counts Hugging Face's Qwen3-0.6B and Qwen3-30B-A3B have), the
// MoE blocks built from core's MoE layer, a forward and backward that reach
// every parameter and count each routed token once, logits equal to a Qwen3
// written out in PyTorch (tests/python/qwen3_reference.py), refusals naming
// the key.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include "titan/config.hpp"
#include "titan/error.hpp"
#include "titan/model.hpp"
#include "titan/moe.hpp"
#include "titan/registry.hpp"
#include "titan/safetensors.hpp"

namespace {

std::unique_ptr<titan::ModelSpec> qwen3(const std::string& options_yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + options_yaml, "run.yaml").child("model");
  return titan::PluginRegistry::instance().create_model("qwen3", context);
}

std::string qwen3_refusal(const std::string& options_yaml) {
  try {
    qwen3(options_yaml);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

using titan::test::has;

const char* kSmallMoE =
    "  flavor: debugmodel_moe\n  dim: 32\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  head_dim: 8\n"
    "  num_experts: 4\n  top_k: 2\n  moe_hidden_dim: 16\n  max_seq_len: 32\n";

}  // namespace

TEST_SUITE("qwen3") {
  TEST_CASE("qwen3 MoE registers its load balancing as a step hook (state: every router's expert bias); the dense "
            "flavor registers none") {
    auto dense = qwen3("  flavor: 0.6B\n")->build(c10::Device(c10::kMeta));
    CHECK(dense->step_hooks().empty());  // a dense model costs the trainer nothing
    auto model = qwen3(kSmallMoE)->build(c10::Device(c10::kMeta));
    const auto hooks = model->step_hooks();
    REQUIRE(hooks.size() == 1);
    CHECK(hooks[0]->name == "MoE load balancing");
    CHECK(has(hooks[0]->host_driven, "token counts the host reads"));
    REQUIRE(hooks[0]->state);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : hooks[0]->state()) names.push_back(name);
    CHECK(names == std::vector<std::string>{"layers.0.moe.router.expert_bias", "layers.1.moe.router.expert_bias"});
  }

  TEST_CASE("qwen3 flavors have Hugging Face's parameter counts (0.6B tied, 30B-A3B with 3.3B active)") {
    auto small = qwen3("  flavor: 0.6B\n");
    // Qwen3-0.6B's head is its embedding matrix, as HF's (596,049,920 parameters).
    CHECK(small->num_params(true) == 596049920);
    auto moe = qwen3("  flavor: 30B-A3B\n");
    CHECK(moe->num_params(true) == 30532122624);
    // Active per token: the dense part and top 8 of 128 experts (HF: "3.3B activated").
    double active = moe->flops_per_token(0) / 6 + 151936.0 * 2048;
    CHECK(active > 3.3e9);
    CHECK(active < 3.4e9);
    auto model = moe->build(c10::Device(c10::kMeta));
    int64_t total = 0;
    for (const auto& p : model->parameters()) total += p.numel();
    CHECK(total == moe->num_params(true));
    auto params = model->named_parameters();
    CHECK(params["layers.0.attention.q_norm.weight"].sizes() == at::IntArrayRef({128}));
    CHECK(params["layers.0.attention.wq.weight"].sizes() == at::IntArrayRef({32 * 128, 2048}));
    CHECK(params["layers.0.attention.wk.weight"].sizes() == at::IntArrayRef({4 * 128, 2048}));
    CHECK(params["layers.47.moe.experts.w1"].sizes() == at::IntArrayRef({128, 768, 2048}));
    CHECK(params["layers.47.moe.experts.w2"].sizes() == at::IntArrayRef({128, 2048, 768}));
    CHECK(params["layers.0.moe.router.gate.weight"].sizes() == at::IntArrayRef({128, 2048}));
    CHECK(params.find("layers.0.moe.shared_experts.w1.weight") == nullptr);  // Qwen3 has none
    auto routers = titan::find_routers(*model);
    REQUIRE(routers.size() == 48);
    const titan::MoEOptions& o = routers[0].second->options();
    CHECK(o.score_func == titan::RouterScore::softmax);
    CHECK(o.route_norm);
    CHECK_FALSE(o.score_before_experts);
    CHECK(routers[0].second->expert_bias.defined());
  }

  TEST_CASE("a small qwen3 MoE: forward and backward reach every parameter, each token counted top_k times") {
    auto spec = qwen3(kSmallMoE);
    spec->set_vocab_size(64);
    auto model = spec->build(c10::Device(c10::kCPU));
    model->init_weights(5);
    at::Tensor tokens = at::randint(0, 64, {2, 12}, at::kLong);
    at::Tensor logits = model->forward(tokens);
    CHECK(logits.sizes() == at::IntArrayRef({2, 12, 64}));
    titan::cross_entropy_loss(logits, tokens).backward();
    for (const auto& item : model->named_parameters()) {
      CAPTURE(item.key());
      REQUIRE(item.value().grad().defined());
      CHECK(item.value().grad().abs().sum().item<double>() > 0);
    }
    for (auto& [path, router] : titan::find_routers(*model)) {
      CAPTURE(path);
      CHECK(router->tokens_per_expert.sum().item<double>() == 2 * 12 * 2);
      CHECK(router->expert_bias.abs().sum().item<double>() == 0);  // zeroed by init, not garbage
    }
  }

  TEST_CASE("qwen3's logits, dense and MoE, match a Qwen3 written out in PyTorch") {
    const std::string python = titan::test::source_dir() + "/.venv/bin/python";
    if (titan::test::run_command("test -x " + python).exit_code != 0) {
      MESSAGE("TITAN_SKIPPED: " << python << " not found (scripts/setup.sh installs torch into .venv)");
      return;
    }
    const auto dir = titan::test::temp_dir("qwen3_reference");
    const char* dense = "  flavor: debugmodel\n  dim: 32\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n"
                        "  head_dim: 8\n  hidden_dim: 48\n  max_seq_len: 32\n";
    std::vector<std::pair<std::string, std::shared_ptr<titan::CausalLM>>> runs;
    std::string arguments;
    for (const auto& [name, yaml] : {std::pair<std::string, std::string>{"dense", dense}, {"moe", kSmallMoE}}) {
      auto spec = qwen3(yaml);
      spec->set_vocab_size(64);
      auto model = spec->build(c10::Device(c10::kCPU));
      model->init_weights(9);
      std::map<std::string, at::Tensor> tensors;
      {
        torch::NoGradGuard no_grad;
        for (auto& item : model->named_parameters()) {
          // Norm weights away from 1 and a trained-looking scale, so a
          // missing or misplaced norm or rotary shows.
          if (item.key().find("norm") != std::string::npos) item.value().uniform_(0.5, 1.5);
          else item.value().mul_(item.key() == "tok_embeddings.weight" ? 1.0 : 10.0);
          tensors[item.key()] = item.value().clone();
        }
        for (auto& [path, router] : titan::find_routers(*model)) {
          router->expert_bias.copy_(at::randn({router->expert_bias.size(0)}) * 0.02);
          tensors[path + ".expert_bias"] = router->expert_bias.clone();
        }
      }
      at::Tensor tokens = at::randint(0, 64, {2, 12}, at::kLong);
      tensors["tokens"] = tokens;
      titan::safetensors::save_file((dir / (name + "_in.safetensors")).string(), tensors,
                                    {{"n_layers", "2"}, {"n_heads", "4"}, {"n_kv_heads", "2"}, {"head_dim", "8"},
                                     {"norm_eps", "1e-06"}, {"rope_theta", "1000000"},
                                     {"moe", name == "moe" ? "1" : "0"}, {"top_k", "2"}});
      tensors.clear();
      torch::NoGradGuard no_grad;
      titan::safetensors::save_file((dir / (name + "_ours.safetensors")).string(), {{"logits", model->forward(tokens)}});
      arguments += " " + (dir / (name + "_in.safetensors")).string() + " " + (dir / (name + "_out.safetensors")).string();
      runs.emplace_back(name, model);
    }
    auto result = titan::test::run_command("timeout 120 " + python + " " + titan::test::source_dir() +
                                           "/tests/python/qwen3_reference.py" + arguments);
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    for (const auto& [name, model] : runs) {
      CAPTURE(name);
      at::Tensor ours = titan::safetensors::File((dir / (name + "_ours.safetensors")).string()).read("logits");
      at::Tensor theirs = titan::safetensors::File((dir / (name + "_out.safetensors")).string()).read("logits");
      REQUIRE(ours.sizes() == theirs.sizes());
      // fp32 both sides, other kernels and summation orders: 1e-5 of the logits' scale.
      double scale = theirs.abs().max().item<double>();
      CHECK(scale > 0.1);
      CHECK((ours - theirs).abs().max().item<double>() <= 1e-5 * (1 + scale));
    }
  }

  TEST_CASE("qwen3 refuses bad MoE options naming the key") {
    std::string message = qwen3_refusal("  flavor: debugmodel_moe\n  num_experts: 4\n  top_k: 5\n");
    CHECK(has(message, "model.top_k"));
    CHECK(has(message, "must be in [1, num_experts = 4], got 5"));
    CHECK(has(qwen3_refusal("  flavor: 0.6B\n  num_experts: 8\n"), "flavor 0.6B is dense"));
    CHECK(has(qwen3_refusal(std::string(kSmallMoE) + "  experts_backend: cutlass\n"), "grouped_mm"));
    CHECK(has(qwen3_refusal(std::string(kSmallMoE) + "  load_balance_coeff: -1\n"), "load_balance_coeff"));
  }
}
