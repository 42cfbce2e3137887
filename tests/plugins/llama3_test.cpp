// The llama3 model plugin, loaded through the registry: TorchTitan's sizes,
// FLOPs and init scheme, and a forward pass equal to a plain float64
// reference written out here (RMSNorm, complex RoPE, masked-softmax GQA).
#include "doctest_torch.hpp"
#include "titan/module_path.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "titan/compat.hpp"
#include "titan/config.hpp"
#include "titan/model.hpp"
#include "titan/registry.hpp"

namespace {

std::unique_ptr<titan::ModelSpec> llama3_spec(const std::string& options_yaml) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n" + options_yaml, "run.yaml").child("model");
  return titan::PluginRegistry::instance().create_model("llama3", context);
}

std::unique_ptr<titan::ModelSpec> flavor(const std::string& name) { return llama3_spec("  flavor: " + name + "\n"); }

std::map<std::string, at::Tensor> params_of(titan::CausalLM& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value();
  return out;
}

int64_t numel_of(titan::CausalLM& model) {
  int64_t total = 0;
  for (const auto& param : model.parameters()) total += param.numel();
  return total;
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --- A float64 reference of the Llama 3 forward, written the obvious way ---

struct RefShape {
  int64_t dim, n_heads, n_kv_heads, n_layers;
  bool rope_scaling;
};

// TorchTitan's precompute_freqs_cis (with Llama 3.1 scaling) as complex128.
at::Tensor reference_freqs_cis(int64_t head_dim, int64_t seq, bool scaling) {
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor freqs = 1.0 / at::pow(500000.0, at::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim));
  if (scaling) {
    at::Tensor wavelen = 2 * M_PI / freqs;
    at::Tensor scaled = at::where(wavelen > 8192.0, freqs / 8.0, freqs);
    at::Tensor smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
    freqs = at::where((wavelen >= 2048.0) & (wavelen <= 8192.0), (1 - smooth) * scaled / 8.0 + smooth * scaled,
                      scaled);
  }
  at::Tensor angles = at::outer(at::arange(seq, f64), freqs);
  return at::polar(at::ones_like(angles), angles);
}

at::Tensor reference_rope(const at::Tensor& x, const at::Tensor& cis) {  // x [b, s, h, d]
  auto sizes = x.sizes().vec();
  at::Tensor pairs = at::view_as_complex(x.reshape({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2}).contiguous());
  at::Tensor rotated = pairs * cis.view({1, sizes[1], 1, sizes[3] / 2});
  return at::view_as_real(rotated).reshape(sizes);
}

at::Tensor reference_rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  return x / at::sqrt(x.pow(2).mean(-1, true) + 1e-5) * weight;
}

at::Tensor reference_attention(const at::Tensor& x, std::map<std::string, at::Tensor>& p, const std::string& prefix,
                               const RefShape& shape, const at::Tensor& cis) {
  int64_t b = x.size(0), s = x.size(1), hd = shape.dim / shape.n_heads, rep = shape.n_heads / shape.n_kv_heads;
  at::Tensor q = x.matmul(p[prefix + "wq.weight"].t()).view({b, s, shape.n_heads, hd});
  at::Tensor k = x.matmul(p[prefix + "wk.weight"].t()).view({b, s, shape.n_kv_heads, hd});
  at::Tensor v = x.matmul(p[prefix + "wv.weight"].t()).view({b, s, shape.n_kv_heads, hd});
  q = reference_rope(q, cis);
  k = reference_rope(k, cis);
  // Query head j reads kv head j / rep (TorchTitan's repeat_kv).
  k = k.unsqueeze(3).expand({b, s, shape.n_kv_heads, rep, hd}).reshape({b, s, shape.n_heads, hd});
  v = v.unsqueeze(3).expand({b, s, shape.n_kv_heads, rep, hd}).reshape({b, s, shape.n_heads, hd});
  q = q.transpose(1, 2), k = k.transpose(1, 2), v = v.transpose(1, 2);
  at::Tensor scores = q.matmul(k.transpose(-1, -2)) / std::sqrt(static_cast<double>(hd));
  at::Tensor future = at::ones({s, s}, at::kBool).triu(1);
  at::Tensor weights = at::softmax(scores.masked_fill(future, -INFINITY), -1);
  at::Tensor out = weights.matmul(v).transpose(1, 2).reshape({b, s, shape.dim});
  return out.matmul(p[prefix + "wo.weight"].t());
}

at::Tensor reference_forward(titan::CausalLM& model, const RefShape& shape, const at::Tensor& tokens) {
  std::map<std::string, at::Tensor> p;
  for (const auto& [name, value] : params_of(model)) p[name] = value.detach().to(at::kDouble);
  at::Tensor h = p["tok_embeddings.weight"].index_select(0, tokens.flatten()).view({tokens.size(0), tokens.size(1), -1});
  at::Tensor cis = reference_freqs_cis(shape.dim / shape.n_heads, tokens.size(1), shape.rope_scaling);
  for (int64_t i = 0; i < shape.n_layers; ++i) {
    std::string layer = "layers." + std::to_string(i) + ".";
    h = h + reference_attention(reference_rms_norm(h, p[layer + "attention_norm.weight"]), p, layer + "attention.",
                                shape, cis);
    at::Tensor x = reference_rms_norm(h, p[layer + "ffn_norm.weight"]);
    std::string ffn = layer + "feed_forward.";
    at::Tensor gated = at::silu(x.matmul(p[ffn + "w1.weight"].t())) * x.matmul(p[ffn + "w3.weight"].t());
    h = h + gated.matmul(p[ffn + "w2.weight"].t());
  }
  return reference_rms_norm(h, p["norm.weight"]).matmul(p["output.weight"].t());
}

// Norm weights are ones after init; random ones make the check see them.
void randomize_norms(titan::CausalLM& model) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  for (auto& [name, param] : params_of(model)) {
    if (name.find("norm") != std::string::npos) param.copy_(at::rand(param.sizes()) + 0.5);
  }
}

void check_matches_reference(const std::string& options, const RefShape& shape) {
  auto spec = llama3_spec(options);
  auto model = spec->build(c10::Device(c10::kCPU));
  model->init_weights(11);
  randomize_norms(*model);
  torch::manual_seed(5);
  at::Tensor tokens = at::randint(spec->vocab_size(), {2, 48}, at::kLong);
  at::Tensor logits = model->forward(tokens);
  at::Tensor expected = reference_forward(*model, shape, tokens);
  double error = (logits.to(at::kDouble) - expected).abs().max().item<double>();
  double scale = expected.abs().max().item<double>();
  INFO("max abs error " << error << " of logits up to " << scale);
  CHECK(scale > 0.1);
  CHECK(error < 2e-5 * scale + 1e-6);
}

}  // namespace

TEST_CASE("llama3: every flavor's parameter count, from shapes and built on meta, matches the known totals") {
  // 1B and 3B: Llama 3.2's totals, tied.
  const std::map<std::string, int64_t> known = {{"1B", 1235814400LL},
                                                {"3B", 3212749824LL},
                                                {"8B", 8030261248LL},
                                                {"70B", 70553706496LL},
                                                {"405B", 405853388800LL}};
  for (const std::string name : {"debugmodel", "1B", "3B", "8B", "70B", "405B"}) {
    CAPTURE(name);
    auto spec = flavor(name);
    CHECK(spec->flavor() == name);
    auto model = spec->build(c10::Device(c10::kMeta));
    CHECK(numel_of(*model) == spec->num_params());
    CHECK(spec->num_params(false) == spec->num_params() - spec->vocab_size() * model->named_parameters()["tok_embeddings.weight"].size(1));
    if (known.count(name)) CHECK(spec->num_params() == known.at(name));
  }
  CHECK(flavor("8B")->vocab_size() == 128256);
}

TEST_CASE("llama3: the tokenizer's vocabulary sets the embedding and output sizes") {
  auto spec = flavor("debugmodel");
  CHECK(spec->vocab_size() == 2048);  // TorchTitan's debugmodel until a tokenizer says otherwise
  spec->set_vocab_size(1000);
  auto params = params_of(*spec->build(c10::Device(c10::kMeta)));
  CHECK(params["tok_embeddings.weight"].sizes() == at::IntArrayRef({1000, 256}));
  CHECK(params["output.weight"].sizes() == at::IntArrayRef({1000, 256}));
  CHECK_THROWS_AS(spec->set_vocab_size(0), titan::Error);
}

TEST_CASE("llama3: building 405B on meta allocates no memory and takes well under a second") {
  auto spec = flavor("405B");
  int64_t before = resident_bytes();
  auto start = std::chrono::steady_clock::now();
  auto model = spec->build(c10::Device(c10::kMeta));
  double seconds = seconds_since(start);
  int64_t grown = resident_bytes() - before;
  MESSAGE("405B on meta: " << seconds * 1e3 << " ms, resident memory grew " << grown / 1024 << " KiB");
  CHECK(seconds < 1.0);
  CHECK(grown < 64 * 1024 * 1024);
  for (const auto& param : model->parameters()) CHECK(param.is_meta());
  CHECK(model->num_blocks() == 126);
}

TEST_CASE("llama3: SwiGLU hidden sizes follow TorchTitan's rule (multiple_of, ffn_dim_multiplier)") {
  const std::map<std::string, std::pair<int64_t, int64_t>> hidden_and_dim = {
      {"debugmodel", {768, 256}}, {"1B", {8192, 2048}},  {"3B", {8192, 3072}},
      {"8B", {14336, 4096}},      {"70B", {28672, 8192}}, {"405B", {53248, 16384}}};
  for (const auto& [name, expected] : hidden_and_dim) {
    CAPTURE(name);
    auto params = params_of(*flavor(name)->build(c10::Device(c10::kMeta)));
    CHECK(params["layers.0.feed_forward.w1.weight"].sizes() == at::IntArrayRef({expected.first, expected.second}));
    CHECK(params["layers.0.feed_forward.w2.weight"].sizes() == at::IntArrayRef({expected.second, expected.first}));
  }
  auto params = params_of(*flavor("8B")->build(c10::Device(c10::kMeta)));
  CHECK(params["layers.31.attention.wk.weight"].sizes() == at::IntArrayRef({1024, 4096}));  // 8 kv heads
  CHECK(params.count("layers.32.attention.wk.weight") == 0);
}

TEST_CASE("llama3: FLOPs per token are TorchTitan's 6N + 12 l h q t") {
  auto spec = flavor("8B");
  // 6 * (8,030,261,248 - 128256 * 4096) + 12 * 32 layers * 32 heads * 128 * 8192
  CHECK(spec->flops_per_token(8192) == 57914449920.0);
  CHECK(spec->flops_per_token(2048) == 6.0 * spec->num_params(false) + 12.0 * 32 * 32 * 128 * 2048);
}

TEST_CASE("llama3: debugmodel forward gives [batch, seq, vocab] logits and a finite loss with finite gradients") {
  auto spec = flavor("debugmodel");
  auto model = spec->build(c10::Device(c10::kCPU));
  model->init_weights(0);
  torch::manual_seed(0);
  at::Tensor tokens = at::randint(2048, {2, 33}, at::kLong);
  at::Tensor inputs = tokens.narrow(1, 0, 32), labels = tokens.narrow(1, 1, 32);
  at::Tensor logits = model->forward(inputs);
  CHECK(logits.sizes() == at::IntArrayRef({2, 32, 2048}));
  at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 2048}), labels.reshape({-1}));
  double value = loss.item<double>();
  CHECK(std::isfinite(value));
  CHECK(std::abs(value - std::log(2048.0)) < 1.0);  // near-uniform predictions at init
  loss.backward();
  for (const auto& [name, param] : params_of(*model)) {
    CAPTURE(name);
    REQUIRE(param.grad().defined());
    CHECK(param.grad().isfinite().all().item<bool>());
  }
  CHECK_THROWS_AS(model->forward(at::zeros({1, 131073}, at::kLong)), titan::Error);
}

TEST_CASE("llama3: a later token never changes earlier logits (causal attention)") {
  auto model = flavor("debugmodel")->build(c10::Device(c10::kCPU));
  model->init_weights(1);
  torch::manual_seed(1);
  at::Tensor tokens = at::randint(2048, {2, 40}, at::kLong);
  at::Tensor changed = tokens.clone();
  changed.select(1, 25).fill_(7);
  changed.select(1, 25).add_(tokens.select(1, 25).eq(7).to(at::kLong));  // really a different token
  at::Tensor before = model->forward(tokens), after = model->forward(changed);
  CHECK(at::equal(before.narrow(1, 0, 25), after.narrow(1, 0, 25)));
  CHECK((before.narrow(1, 25, 15) - after.narrow(1, 25, 15)).abs().max().item<double>() > 1e-4);
}

TEST_CASE("llama3: the forward pass equals a float64 reference (RMSNorm, complex RoPE, masked-softmax attention)") {
  SUBCASE("multi-head attention, Llama 3.1 rope scaling") {
    check_matches_reference("  flavor: debugmodel\n  n_layers: 2\n", {256, 16, 16, 2, true});
  }
  SUBCASE("grouped-query attention: 16 query heads share 4 kv heads") {
    check_matches_reference("  flavor: debugmodel\n  n_layers: 2\n  n_kv_heads: 4\n", {256, 16, 4, 2, true});
  }
  SUBCASE("without rope scaling, 4 heads of 64") {
    check_matches_reference("  flavor: debugmodel\n  n_layers: 1\n  n_heads: 4\n  n_kv_heads: 2\n  rope_scaling: false\n",
                            {256, 4, 2, 1, false});
  }
}

TEST_CASE("llama3: rotary tables are TorchTitan's frequencies, scaled as in Llama 3.1") {
  auto tables = [](const std::string& options) {
    auto model = llama3_spec(options)->build(c10::Device(c10::kCPU));
    auto buffers = model->named_buffers();
    return std::pair{buffers["freqs_cos"], buffers["freqs_sin"]};
  };
  auto [cos, sin] = tables("  flavor: 8B\n  n_layers: 1\n  max_seq_len: 4096\n");
  REQUIRE(cos.sizes() == at::IntArrayRef({4096, 64}));
  at::Tensor cis = reference_freqs_cis(128, 4096, true);
  CHECK((cos.to(at::kDouble) - at::real(cis)).abs().max().item<double>() < 2e-3);
  CHECK((sin.to(at::kDouble) - at::imag(cis)).abs().max().item<double>() < 2e-3);
  // Scaling leaves the fast rotations alone and slows the slowest 8x.
  auto [cos_plain, sin_plain] = tables("  flavor: 8B\n  n_layers: 1\n  max_seq_len: 4096\n  rope_scaling: false\n");
  CHECK(at::equal(sin.narrow(1, 0, 8), sin_plain.narrow(1, 0, 8)));
  double slowest = std::asin(sin[1][63].item<double>()), slowest_plain = std::asin(sin_plain[1][63].item<double>());
  CHECK(slowest * 8 == doctest::Approx(slowest_plain).epsilon(1e-4));
}

TEST_CASE("llama3: init_weights is deterministic per seed and per parameter name") {
  auto spec = flavor("debugmodel");
  auto first = spec->build(c10::Device(c10::kCPU)), second = spec->build(c10::Device(c10::kCPU));
  auto third = spec->build(c10::Device(c10::kCPU));
  first->init_weights(7);
  second->init_weights(7);
  third->init_weights(8);
  auto a = params_of(*first), b = params_of(*second), c = params_of(*third);
  for (const auto& [name, value] : a) {
    CAPTURE(name);
    CHECK(at::equal(value, b[name]));
    if (name.find("norm") == std::string::npos) CHECK(!at::equal(value, c[name]));
  }
  // Values do not depend on which other layers exist, nor on the dtype.
  auto shallow = llama3_spec("  flavor: debugmodel\n  n_layers: 2\n")->build(c10::Device(c10::kCPU));
  shallow->to(at::kBFloat16);
  shallow->init_weights(7);
  for (const auto& [name, value] : params_of(*shallow)) {
    CAPTURE(name);
    CHECK((value.scalar_type() == at::kBFloat16));
    CHECK(at::equal(value, a[name].to(at::kBFloat16)));
  }
}

TEST_CASE("llama3: a model built on meta, materialized and initialized equals one built on the CPU") {
  auto spec = llama3_spec("  flavor: debugmodel\n  n_layers: 2\n");
  auto on_cpu = spec->build(c10::Device(c10::kCPU));
  on_cpu->init_weights(4);
  auto from_meta = spec->build(c10::Device(c10::kMeta));
  for (auto& param : from_meta->parameters()) titan::compat::materialize_in_place(param, c10::Device(c10::kCPU));
  from_meta->init_weights(4);  // also materializes and fills the rotary tables
  at::Tensor tokens = at::randint(2048, {1, 16}, at::kLong);
  CHECK(at::equal(from_meta->forward(tokens), on_cpu->forward(tokens)));
  for (const auto& buffer : from_meta->buffers()) CHECK(!buffer.is_meta());
}

TEST_CASE("llama3: init follows TorchTitan's scheme (depth-scaled out projections, truncated output)") {
  auto model = flavor("debugmodel")->build(c10::Device(c10::kCPU));
  model->init_weights(0);
  auto p = params_of(*model);
  auto std_of = [&](const std::string& name) { return p[name].std().item<double>(); };
  CHECK(std_of("layers.0.attention.wo.weight") == doctest::Approx(0.02 / std::sqrt(2.0)).epsilon(0.03));
  CHECK(std_of("layers.5.attention.wo.weight") == doctest::Approx(0.02 / std::sqrt(12.0)).epsilon(0.03));
  CHECK(std_of("layers.2.feed_forward.w2.weight") == doctest::Approx(0.02 / std::sqrt(6.0)).epsilon(0.03));
  CHECK(std_of("layers.2.feed_forward.w3.weight") == doctest::Approx(0.02 / std::sqrt(6.0)).epsilon(0.03));
  CHECK(std_of("layers.3.attention.wq.weight") == doctest::Approx(0.02).epsilon(0.03));
  CHECK(std_of("layers.3.feed_forward.w1.weight") == doctest::Approx(0.02).epsilon(0.03));
  CHECK(std_of("tok_embeddings.weight") == doctest::Approx(1.0).epsilon(0.03));
  // Output: std dim^-0.5 truncated at 3 std (a truncated normal's std is 0.9866 of it).
  CHECK(std_of("output.weight") == doctest::Approx(0.9866 / 16).epsilon(0.03));
  CHECK(p["output.weight"].abs().max().item<double>() <= 3.0 / 16 + 1e-7);
  CHECK(p["output.weight"].abs().max().item<double>() > 2.9 / 16);
  CHECK(at::equal(p["layers.4.ffn_norm.weight"], at::ones({256})));
  CHECK(at::equal(p["norm.weight"], at::ones({256})));
  // The rotary tables are recomputed too.
  auto buffers = model->named_buffers();
  at::Tensor saved = buffers["freqs_cos"].clone();
  buffers["freqs_cos"].zero_();
  model->init_weights(0);
  CHECK(at::equal(buffers["freqs_cos"], saved));
  CHECK_THROWS_AS(flavor("debugmodel")->build(c10::Device(c10::kMeta))->init_weights(0), titan::Error);
}

TEST_CASE("llama3: the TP plan and the Hugging Face names cover every parameter") {
  auto spec = flavor("8B");
  auto plan = spec->tp_plan();
  auto hf = spec->hf_names();
  auto model = spec->build(c10::Device(c10::kMeta));
  std::set<std::string> hf_targets;
  for (const auto& item : model->named_parameters()) {
    std::string name = item.key();
    CAPTURE(name);
    // Exactly one pattern of the plan matches the parameter's module path.
    std::string module = name.substr(0, name.rfind('.'));
    int matches = 0;
    for (const auto& [pattern, style] : plan) matches += titan::path_matches(pattern, module) ? 1 : 0;
    CHECK(matches == 1);
    REQUIRE(hf.count(name) == 1);
    hf_targets.insert(hf[name]);
  }
  CHECK(hf.size() == model->named_parameters().size());
  CHECK(hf_targets.size() == hf.size());
  CHECK(plan["layers.*.attention.wq"] == titan::TpStyle::colwise);
  CHECK(plan["layers.*.feed_forward.w3"] == titan::TpStyle::colwise);
  CHECK(plan["layers.*.attention.wo"] == titan::TpStyle::rowwise);
  CHECK(plan["tok_embeddings"] == titan::TpStyle::rowwise);
  CHECK(plan["output"] == titan::TpStyle::colwise);
  CHECK(plan["norm"] == titan::TpStyle::sequence_parallel_norm);
  CHECK(plan["layers.*.feed_forward.w2"] == titan::TpStyle::rowwise);
  CHECK(plan["layers.*.ffn_norm"] == titan::TpStyle::sequence_parallel_norm);
  CHECK(hf["layers.31.attention.wq.weight"] == "model.layers.31.self_attn.q_proj.weight");
  CHECK(hf["layers.0.feed_forward.w1.weight"] == "model.layers.0.mlp.gate_proj.weight");
  CHECK(hf["layers.0.feed_forward.w2.weight"] == "model.layers.0.mlp.down_proj.weight");
  CHECK(hf["layers.0.ffn_norm.weight"] == "model.layers.0.post_attention_layernorm.weight");
  CHECK(hf["tok_embeddings.weight"] == "model.embed_tokens.weight");
  CHECK(hf["output.weight"] == "lm_head.weight");
}

TEST_CASE("llama3: every block runs through the wrapper chain, and dropped modules are skipped") {
  auto model = llama3_spec("  flavor: debugmodel\n  n_layers: 3\n")->build(c10::Device(c10::kCPU));
  model->init_weights(2);
  at::Tensor tokens = at::randint(2048, {1, 8}, at::kLong);
  at::Tensor plain = model->forward(tokens);
  std::vector<int64_t> seen;
  model->add_block_wrapper([&](int64_t block, const at::Tensor& h, const titan::BlockBody& inner) {
    seen.push_back(block);
    return inner(h);
  });
  CHECK(at::equal(model->forward(tokens), plain));
  CHECK(seen == std::vector<int64_t>{0, 1, 2});
  CHECK(model->num_blocks() == 3);
  CHECK(model->block(2)->named_parameters().contains("attention.wq.weight"));
  CHECK_THROWS_AS(model->block(3), titan::Error);
  // A wrapper that skips block 1 changes the result: the model really uses it.
  model->add_block_wrapper([](int64_t block, const at::Tensor& h, const titan::BlockBody& inner) {
    return block == 1 ? h : inner(h);
  });
  CHECK(!at::equal(model->forward(tokens), plain));
  // A last pipeline stage without output layer returns hidden states.
  model->unregister_module("norm");
  model->unregister_module("output");
  CHECK(model->forward(tokens).sizes() == at::IntArrayRef({1, 8, 256}));
}

TEST_CASE("llama3: bad options are config errors naming the key") {
  auto message_of = [](const std::string& options) {
    try {
      llama3_spec(options);
    } catch (const titan::ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  std::string bad_flavor = message_of("  flavor: 9B\n");
  CHECK(bad_flavor.find("model.flavor") != std::string::npos);
  CHECK(bad_flavor.find("9B") != std::string::npos);
  CHECK(bad_flavor.find("405B") != std::string::npos);  // lists the choices
  CHECK(message_of("  flavor: debugmodel\n  n_kv_heads: 5\n").find("model.n_kv_heads") != std::string::npos);
  CHECK(message_of("  flavor: debugmodel\n  n_heads: 7\n").find("model.n_heads") != std::string::npos);
  CHECK(message_of("  max_seq_len: 0\n").find("model.max_seq_len") != std::string::npos);
  CHECK(message_of("  rope_scaling: maybe\n").find("model.rope_scaling") != std::string::npos);
  // Every option is read, so a misspelt key is caught by the host.
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("model:\n  flavr: 8B\n", "run.yaml").child("model");
  titan::PluginRegistry::instance().create_model("llama3", context);
  CHECK_THROWS_WITH_AS(context.options.check_unknown_keys(), doctest::Contains("flavr"), titan::ConfigError);
}

TEST_CASE("llama3 benchmark: debugmodel forward+backward, batch 8 x seq 256" * doctest::skip()) {
  int threads = at::get_num_threads();
  at::set_num_threads(2);
  auto model = flavor("debugmodel")->build(c10::Device(c10::kCPU));
  model->init_weights(0);
  at::Tensor tokens = at::randint(2048, {8, 257}, at::kLong);
  auto step = [&] {
    at::Tensor logits = model->forward(tokens.narrow(1, 0, 256));
    at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, 2048}), tokens.narrow(1, 1, 256).reshape({-1}));
    loss.backward();
  };
  step();
  std::vector<double> times;
  for (int i = 0; i < 7; ++i) {
    auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(seconds_since(start) * 1e3);
  }
  std::sort(times.begin(), times.end());
  MESSAGE("debugmodel fwd+bwd 8x256 on 2 threads: min " << times.front() << " ms, median " << times[3] << " ms");
  at::set_num_threads(threads);
}
