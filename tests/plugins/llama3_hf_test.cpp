// The llama3 plugin's Hugging Face interop: the q/k row permutation against
// its definition, config.json's LlamaConfig fields, and the proof that the
// conversion is right - a Titan model's logits equal those of a float64
// forward written here with HF's conventions (rotate_half rotary, cos/sin
// of cat(freqs, freqs), repeat_kv) over the exported HF tensors.
#include "doctest_torch.hpp"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "titan/config.hpp"
#include "titan/error.hpp"
#include "titan/model.hpp"
#include "titan/registry.hpp"

namespace {

using Tensors = std::map<std::string, at::Tensor>;

std::unique_ptr<titan::ModelSpec> llama3(const std::string& options_yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + options_yaml, "run.yaml").child("model");
  return titan::PluginRegistry::instance().create_model("llama3", context);
}

// Grouped-query attention, head_dim 16 (so the rotary bands of Llama 3.1
// scaling - scaled, blended and kept frequencies - all occur).
const char* kGqa = "  dim: 64\n  n_layers: 2\n  n_heads: 4\n  n_kv_heads: 2\n  max_seq_len: 64\n";

// --- HF's LlamaForCausalLM forward, float64, from config.json + HF tensors ---

at::Tensor hf_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return weight * (x * at::rsqrt(x.pow(2).mean(-1, true) + eps));
}

// transformers' default rotary init with rope_type "llama3".
at::Tensor hf_inv_freq(const nlohmann::json& config) {
  int64_t head_dim = config["head_dim"];
  double base = config["rope_theta"];
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor inv_freq = 1.0 / at::pow(base, at::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim));
  const auto& scaling = config["rope_scaling"];
  if (scaling.is_null()) return inv_freq;
  REQUIRE(scaling["rope_type"] == "llama3");
  double factor = scaling["factor"], low = scaling["low_freq_factor"], high = scaling["high_freq_factor"];
  double old_context = scaling["original_max_position_embeddings"];
  at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor llama = at::where(wavelen > old_context / low, inv_freq / factor, inv_freq);
  at::Tensor smooth = (old_context / wavelen - low) / (high - low);
  at::Tensor smoothed = (1 - smooth) * llama / factor + smooth * llama;
  at::Tensor medium = (wavelen >= old_context / high) & (wavelen <= old_context / low);
  return at::where(medium, smoothed, llama);
}

at::Tensor rotate_half(const at::Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor hf_attention(const at::Tensor& x, Tensors& w, const std::string& prefix, const nlohmann::json& config,
                        const at::Tensor& cos, const at::Tensor& sin) {
  int64_t b = x.size(0), s = x.size(1), hd = config["head_dim"];
  int64_t heads = config["num_attention_heads"], kv_heads = config["num_key_value_heads"];
  auto project = [&](const char* name, int64_t n) {
    return x.matmul(w.at(prefix + name).t()).view({b, s, n, hd}).transpose(1, 2);  // [b, n, s, hd]
  };
  at::Tensor q = project("q_proj.weight", heads), k = project("k_proj.weight", kv_heads);
  at::Tensor v = project("v_proj.weight", kv_heads);
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  int64_t rep = heads / kv_heads;  // repeat_kv
  k = k.unsqueeze(2).expand({b, kv_heads, rep, s, hd}).reshape({b, heads, s, hd});
  v = v.unsqueeze(2).expand({b, kv_heads, rep, s, hd}).reshape({b, heads, s, hd});
  at::Tensor scores = q.matmul(k.transpose(2, 3)) / std::sqrt(static_cast<double>(hd));
  scores = scores.masked_fill(at::ones({s, s}, at::kBool).triu(1), -INFINITY);
  at::Tensor out = at::softmax(scores, -1).matmul(v).transpose(1, 2).reshape({b, s, heads * hd});
  return out.matmul(w.at(prefix + "o_proj.weight").t());
}

at::Tensor hf_forward(Tensors w, const nlohmann::json& config, const at::Tensor& tokens) {
  for (auto& [name, tensor] : w) tensor = tensor.to(at::kDouble);
  double eps = config["rms_norm_eps"];
  int64_t seq = tokens.size(1);
  at::Tensor freqs = at::outer(at::arange(seq, at::kDouble), hf_inv_freq(config));
  at::Tensor emb = at::cat({freqs, freqs}, -1);  // [s, hd]
  at::Tensor cos = emb.cos(), sin = emb.sin();
  at::Tensor h = w.at("model.embed_tokens.weight").index_select(0, tokens.flatten()).view({tokens.size(0), seq, -1});
  for (int64_t i = 0; i < config["num_hidden_layers"].get<int64_t>(); ++i) {
    std::string layer = "model.layers." + std::to_string(i) + ".";
    h = h + hf_attention(hf_rms_norm(h, w.at(layer + "input_layernorm.weight"), eps), w, layer + "self_attn.",
                         config, cos, sin);
    at::Tensor x = hf_rms_norm(h, w.at(layer + "post_attention_layernorm.weight"), eps);
    std::string mlp = layer + "mlp.";
    at::Tensor act =
        at::silu(x.matmul(w.at(mlp + "gate_proj.weight").t())) * x.matmul(w.at(mlp + "up_proj.weight").t());
    h = h + act.matmul(w.at(mlp + "down_proj.weight").t());
  }
  return hf_rms_norm(h, w.at("model.norm.weight"), eps).matmul(w.at("lm_head.weight").t());
}

// A Titan model with random weights: norms too, so they are seen, and
// q/k large enough (std 0.3, not 0.02) that attention, and so the rotary
// layout, visibly moves the logits.
std::shared_ptr<titan::CausalLM> random_model(const titan::ModelSpec& spec) {
  auto model = spec.build(c10::Device(c10::kCPU));
  model->init_weights(7);
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    if (name.find("norm") != std::string::npos) item.value().copy_(at::rand(item.value().sizes()) + 0.5);
    if (name.find(".wq.") != std::string::npos || name.find(".wk.") != std::string::npos) item.value().mul_(15.0);
  }
  return model;
}

Tensors export_hf(const titan::ModelSpec& spec, titan::CausalLM& model, bool convert) {
  Tensors out;
  auto names = spec.hf_names();
  for (const auto& item : model.named_parameters()) {
    at::Tensor value = item.value().detach();
    out[names.at(item.key())] = convert ? spec.to_hf(item.key(), value) : value;
  }
  return out;
}

}  // namespace

TEST_SUITE("llama3 hf") {
  TEST_CASE("to_hf reorders each head's q/k rows from interleaved pairs to halves, and from_hf undoes it") {
    auto spec = llama3(kGqa);  // head_dim 16: q has 4 heads (64 rows), k has 2 (32 rows)
    int64_t head_dim = 16, half = 8;
    for (auto [name, heads] : {std::pair<const char*, int64_t>{"layers.1.attention.wq.weight", 4},
                               {"layers.0.attention.wk.weight", 2}}) {
      CAPTURE(name);
      int64_t rows = heads * head_dim;
      // Row r holds the value r: after to_hf, HF row (h, j, i) must hold
      // Meta row (h, 2i + j), by the definition of the two layouts.
      at::Tensor meta = at::arange(rows, at::kFloat).unsqueeze(1).repeat({1, 64});
      at::Tensor hf = spec->to_hf(name, meta);
      REQUIRE(hf.sizes() == meta.sizes());
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t j = 0; j < 2; ++j) {
          for (int64_t i = 0; i < half; ++i) {
            CHECK(hf[h * head_dim + j * half + i][5].item<float>() == static_cast<float>(h * head_dim + 2 * i + j));
          }
        }
      }
      at::Tensor random = at::randn({rows, 64});
      CHECK(spec->from_hf(name, spec->to_hf(name, random)).equal(random));
      CHECK(spec->to_hf(name, spec->from_hf(name, random)).equal(random));
      CHECK_FALSE(spec->to_hf(name, random).equal(random));
    }
    at::Tensor other = at::randn({64, 64});
    for (const char* name : {"layers.0.attention.wv.weight", "layers.0.attention.wo.weight", "output.weight"}) {
      CHECK(spec->to_hf(name, other).equal(other));
      CHECK(spec->from_hf(name, other).equal(other));
    }
    std::string message;
    try {
      spec->to_hf("layers.0.attention.wk.weight", at::randn({64, 64}));  // q's shape, k's name
    } catch (const titan::Error& error) {
      message = error.what();
    }
    CHECK(message.find("'layers.0.attention.wk.weight' has shape [64, 64], expected [32, *]") != std::string::npos);
  }

  TEST_CASE("the logits of a Titan model equal HF's Llama forward (rotate_half) on the exported tensors") {
    for (std::string scaling : {"  rope_scaling: true\n", "  rope_scaling: false\n"}) {
      CAPTURE(scaling);
      auto spec = llama3(kGqa + scaling);
      spec->set_vocab_size(300);
      auto model = random_model(*spec);
      nlohmann::json config = nlohmann::json::parse(spec->hf_config_json());
      torch::manual_seed(5);
      at::Tensor tokens = at::randint(300, {2, 24}, at::kLong);
      at::Tensor titan_logits = model->forward(tokens).to(at::kDouble);
      at::Tensor hf_logits = hf_forward(export_hf(*spec, *model, true), config, tokens);
      double scale = hf_logits.abs().max().item<double>();
      double error = (titan_logits - hf_logits).abs().max().item<double>();
      // Without the permutation the same weights give other logits: the
      // comparison can tell a right conversion from a wrong one.
      double unpermuted =
          (titan_logits - hf_forward(export_hf(*spec, *model, false), config, tokens)).abs().max().item<double>();
      MESSAGE("max |titan - hf| " << error << ", without the permutation " << unpermuted << ", logits up to " << scale);
      CHECK(scale > 0.1);
      CHECK(error < 2e-5 * scale + 1e-6);
      CHECK(unpermuted > 1e-2 * scale);

      // Back: a fresh model loaded through from_hf gives the same logits.
      auto names = spec->hf_names();
      Tensors hf = export_hf(*spec, *model, true);
      auto copy = spec->build(c10::Device(c10::kCPU));
      copy->init_weights(99);
      torch::NoGradGuard no_grad;
      for (auto& item : copy->named_parameters()) {
        item.value().copy_(spec->from_hf(item.key(), hf.at(names.at(item.key()))));
      }
      CHECK(copy->forward(tokens).equal(model->forward(tokens)));
    }
  }

  TEST_CASE("config.json carries LlamaConfig's fields with the model's values") {
    auto spec = llama3(kGqa);
    spec->set_vocab_size(300);
    auto config = nlohmann::json::parse(spec->hf_config_json());
    auto params = spec->build(c10::Device(c10::kMeta))->named_parameters();
    CHECK(config["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
    CHECK(config["model_type"] == "llama");
    CHECK(config["hidden_size"] == 64);
    CHECK(config["intermediate_size"] == params["layers.0.feed_forward.w1.weight"].size(0));
    CHECK(config["num_attention_heads"] == 4);
    CHECK(config["num_key_value_heads"] == 2);
    CHECK(config["num_hidden_layers"] == 2);
    CHECK(config["head_dim"] == 16);
    CHECK(config["rms_norm_eps"] == 1e-5);
    CHECK(config["rope_theta"] == 500000.0);
    CHECK(config["vocab_size"] == 300);
    CHECK(config["max_position_embeddings"] == 64);
    CHECK(config["tie_word_embeddings"] == false);
    CHECK(config["hidden_act"] == "silu");
    CHECK(config["torch_dtype"] == "float32");
    CHECK(config["rope_scaling"] == nlohmann::json{{"rope_type", "llama3"},
                                                   {"factor", 8.0},
                                                   {"low_freq_factor", 1.0},
                                                   {"high_freq_factor", 4.0},
                                                   {"original_max_position_embeddings", 8192}});
    CHECK(nlohmann::json::parse(llama3("  rope_scaling: false\n")->hf_config_json())["rope_scaling"].is_null());
    auto eight_b = nlohmann::json::parse(llama3("  flavor: 8B\n")->hf_config_json());
    CHECK(eight_b["intermediate_size"] == 14336);  // Meta's published Llama 3.1 8B config
    CHECK(eight_b["num_key_value_heads"] == 8);
    CHECK(eight_b["vocab_size"] == 128256);
  }
}
