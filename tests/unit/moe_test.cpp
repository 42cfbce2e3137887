// The core MoE layer (titan/moe.hpp): routing on hand-made scores, the
// experts against a per-token reference, the whole layer's forward and
// backward against PyTorch (tests/python/moe_reference.py), the load-balance
// update and the token counts under a recomputing backward.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <set>

#include "titan/error.hpp"
#include "titan/error.hpp"
#include "titan/feed_forward.hpp"
#include "titan/module_path.hpp"
#include "titan/moe.hpp"
#include "titan/safetensors.hpp"
#include "train/host_read_counter.hpp"

namespace {

using titan::MoEOptions;
using titan::Router;

// A router whose gate is the identity: the logits are the input rows.
std::shared_ptr<Router> identity_router(const MoEOptions& options) {
  auto router = std::make_shared<Router>(options.num_experts, options, at::TensorOptions().dtype(at::kFloat));
  torch::NoGradGuard no_grad;
  std::dynamic_pointer_cast<titan::Linear>(titan::find_module(*router, "gate"))->weight.copy_(at::eye(options.num_experts));
  router->reset_buffers();
  return router;
}

// Row `row`'s experts and gate values, ordered by expert id (top-k leaves them unsorted).
std::vector<std::pair<int64_t, double>> routed(const titan::Routing& routing, int64_t row) {
  std::vector<std::pair<int64_t, double>> pairs;
  for (int64_t k = 0; k < routing.selected.size(1); ++k) {
    pairs.emplace_back(routing.selected[row][k].item<int64_t>(), routing.top_scores[row][k].item<double>());
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_SUITE("moe") {
  TEST_CASE("the router picks the top-k of scores + expert_bias and gates with the unbiased scores") {
    MoEOptions options;
    options.num_experts = 4;
    options.top_k = 2;
    options.score_func = titan::RouterScore::sigmoid;
    options.route_norm = true;
    options.route_scale = 2.0;
    auto router = identity_router(options);
    at::Tensor x = at::tensor({2.0f, -1.0f, 1.0f, 0.0f}).view({1, 4});
    const double s0 = sigmoid(2), s2 = sigmoid(1), s3 = sigmoid(0);

    auto plain = routed(router->forward(x), 0);  // sigmoid order: 0, 2, 3, 1
    REQUIRE(plain.size() == 2);
    CHECK(plain[0].first == 0);
    CHECK(plain[1].first == 2);
    CHECK(plain[0].second == doctest::Approx(2 * s0 / (s0 + s2)).epsilon(1e-6));
    CHECK(plain[1].second == doctest::Approx(2 * s2 / (s0 + s2)).epsilon(1e-6));

    // A bias of 0.5 on expert 3 lifts it over expert 2 (0.5 + 0.5 > 0.73),
    // but its gate value is still its own score, 0.5.
    router->expert_bias.copy_(at::tensor({0.0f, 0.0f, 0.0f, 0.5f}));
    auto biased = routed(router->forward(x), 0);
    CHECK(biased[0].first == 0);
    CHECK(biased[1].first == 3);
    CHECK(biased[0].second == doctest::Approx(2 * s0 / (s0 + s3)).epsilon(1e-6));
    CHECK(biased[1].second == doctest::Approx(2 * s3 / (s0 + s3)).epsilon(1e-6));

    // Softmax without route_norm: gate values are the softmax probabilities, scaled.
    options.score_func = titan::RouterScore::softmax;
    options.route_norm = false;
    options.route_scale = 1.5;
    options.load_balance_coeff = 0;  // no expert_bias at all
    auto softmax_router = identity_router(options);
    CHECK_FALSE(softmax_router->expert_bias.defined());
    at::Tensor probs = at::softmax(x, 1);
    auto soft = routed(softmax_router->forward(x), 0);
    CHECK(soft[0].first == 0);
    CHECK(soft[1].first == 2);
    CHECK(soft[0].second == doctest::Approx(1.5 * probs[0][0].item<double>()).epsilon(1e-6));
    CHECK(soft[1].second == doctest::Approx(1.5 * probs[0][2].item<double>()).epsilon(1e-6));
  }

  TEST_CASE("group-limited routing keeps the experts of the groups with the best top-2 sums") {
    MoEOptions options;
    options.num_experts = 8;  // 4 groups of 2
    options.top_k = 2;
    options.load_balance_coeff = 0;
    // Group sums of sigmoid scores: {3,-3} 1.0, {1,1} 1.46, {.5,.5} 1.25, {-1,-1} 0.54.
    at::Tensor x = at::tensor({3.0f, -3.0f, 1.0f, 1.0f, 0.5f, 0.5f, -1.0f, -1.0f}).view({1, 8});
    auto free_choice = routed(identity_router(options)->forward(x), 0);
    CHECK(free_choice[0].first == 0);  // the best single expert sits in a weak group

    options.num_expert_groups = 4;
    options.num_limited_groups = 2;  // groups 1 and 2 only
    auto limited = routed(identity_router(options)->forward(x), 0);
    CHECK(limited[0].first == 2);
    CHECK(limited[1].first == 3);
    options.num_limited_groups = 1;
    options.hidden_dim = 4;
    options.top_k = 3;  // one group of 2 cannot hold 3 experts
    auto [key, problem] = titan::find_moe_problem(options, 8);
    CHECK(key == "num_limited_groups");
    CHECK(titan::test::has(problem, "cannot hold top_k 3"));
    options.num_expert_groups = 3;
    CHECK(titan::find_moe_problem(options, 8).first == "num_expert_groups");
  }

  TEST_CASE("moe_force_load_balance routes round-robin, exactly balanced") {
    MoEOptions options;
    options.num_experts = 4;
    options.top_k = 2;
    options.force_load_balance = true;
    auto router = identity_router(options);
    router->forward(at::randn({6, 4}));
    CHECK(at::equal(router->tokens_per_expert, at::full({4}, 3.0f)));
  }

  TEST_CASE("moe_force_experts routes round-robin over the listed experts only, and bad lists are refused") {
    MoEOptions options;
    options.num_experts = 8;
    options.top_k = 2;
    options.hidden_dim = 4;
    options.forced_experts = {5, 6, 7};
    auto router = identity_router(options);
    titan::Routing routing = router->forward(at::randn({6, 8}));
    // Slots 0..11 over [5, 6, 7]: a token's two experts always differ.
    CHECK(at::equal(routing.selected, at::tensor({5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6, 7}, at::kLong).view({6, 2})));
    CHECK(at::equal(router->tokens_per_expert, at::tensor({0.f, 0.f, 0.f, 0.f, 0.f, 4.f, 4.f, 4.f})));
    options.forced_experts = {3};
    CHECK(titan::test::has(titan::find_moe_problem(options, 8).second, "fewer than top_k 2"));
    options.forced_experts = {3, 8};
    CHECK(titan::test::has(titan::find_moe_problem(options, 8).second, "expert 8 is not in [0, num_experts = 8)"));
    options.forced_experts = {3, 3};
    CHECK(titan::test::has(titan::find_moe_problem(options, 8).second, "lists expert 3 twice"));
  }

  TEST_CASE("experts given no rows (an ep rank that received none) still give their weights zero gradients and "
            "pass the tokens' backward on, as the ranks that got rows do") {
    const int64_t dim = 8, hidden = 4;
    at::Tensor w1 = at::randn({2, hidden, dim}).requires_grad_(), w2 = at::randn({2, dim, hidden}).requires_grad_(),
               w3 = at::randn({2, hidden, dim}).requires_grad_();
    at::Tensor tokens = at::randn({0, dim}).requires_grad_();
    at::Tensor out = titan::run_experts_loop(w1, w2, w3, tokens, {0, 0});
    CHECK(out.sizes() == at::IntArrayRef({0, dim}));
    REQUIRE(out.requires_grad());  // a detached empty output left the all-to-alls' backward out on this rank
    out.sum().backward();
    for (const auto& w : {w1, w2, w3}) {
      REQUIRE(w.grad().defined());
      CHECK(w.grad().abs().sum().item<double>() == 0);
    }
    CHECK(tokens.grad().defined());
  }

  TEST_CASE("the experts' loop and grouped GEMM (padded groups) equal a per-token reference") {
    torch::manual_seed(3);
    const int64_t experts = 3, dim = 8, hidden = 4;  // fp32 rows of 32 and 16 bytes, as the grouped GEMM needs
    at::Tensor w1 = at::randn({experts, hidden, dim}).requires_grad_(), w2 = at::randn({experts, dim, hidden}).requires_grad_(),
               w3 = at::randn({experts, hidden, dim}).requires_grad_();
    const std::vector<int64_t> counts = {3, 0, 4};
    at::Tensor tokens = at::randn({7, dim});
    std::vector<at::Tensor> rows;
    int64_t row = 0;
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(e)]; ++i, ++row) {
        at::Tensor x = tokens[row];
        rows.push_back(at::mv(w2[e], at::silu(at::mv(w1[e], x)) * at::mv(w3[e], x)));
      }
    }
    at::Tensor reference = at::stack(rows);
    at::Tensor loop = titan::run_experts_loop(w1, w2, w3, tokens, counts);
    CHECK(max_diff(loop, reference) <= 1e-5);
    at::Tensor grad = at::randn_like(reference);
    auto grads_of = [&](const at::Tensor& out) {
      auto g = torch::autograd::grad({out}, {w1, w2, w3}, {grad});
      return at::cat({g[0].flatten(), g[1].flatten(), g[2].flatten()});
    };
    at::Tensor loop_grads = grads_of(loop);
    for (int64_t alignment : {1, 4}) {  // 4: groups of 3, 0, 4 rows padded to 4, 0, 4
      CAPTURE(alignment);
      at::Tensor grouped = titan::run_experts_grouped_mm(w1, w2, w3, tokens, counts, alignment);
      CHECK(max_diff(grouped, reference) <= 1e-5);
      CHECK(max_diff(grads_of(grouped), loop_grads) <= 1e-5);
    }
    CHECK_THROWS_WITH_AS(titan::run_experts_grouped_mm(w1.narrow(1, 0, 3), w2.narrow(2, 0, 3), w3.narrow(1, 0, 3),
                                                       tokens, counts, 1),
                         doctest::Contains("multiples of 4 for Float (16-byte rows)"), titan::Error);
    CHECK_THROWS_WITH_AS(titan::run_experts_loop(w1, w2, w3, tokens, {3, 4}),
                         doctest::Contains("2 groups of 7 rows for 3 experts"), titan::Error);
  }

  TEST_CASE("the grouped GEMM laid out on the device from counts left there gives the host layout's numbers, bit for "
            "bit: outputs and the tokens' and weights' gradients") {
    torch::manual_seed(5);
    const int64_t experts = 4, dim = 8, hidden = 12;
    const at::Tensor w1 = at::randn({experts, hidden, dim}).requires_grad_(),
                     w2 = at::randn({experts, dim, hidden}).requires_grad_(),
                     w3 = at::randn({experts, hidden, dim}).requires_grad_();
    const std::vector<int64_t> counts = {3, 0, 6, 2};  // an expert without rows; groups padded unevenly
    const at::Tensor tokens = at::randn({11, dim}).requires_grad_();
    const at::Tensor grad = at::randn({11, dim});
    auto run = [&](const at::Tensor& out) {
      auto g = torch::autograd::grad({out}, {tokens, w1, w2, w3}, {grad});
      return std::vector<at::Tensor>{out.detach(), g[0], g[1], g[2], g[3]};
    };
    for (int64_t alignment : {1, 4, 16}) {
      CAPTURE(alignment);
      const auto host = run(titan::run_experts_grouped_mm(w1, w2, w3, tokens, counts, alignment));
      const auto device = run(titan::run_experts_grouped_mm_on_device(w1, w2, w3, tokens,
                                                                      at::tensor(counts, at::kLong), alignment));
      for (size_t i = 0; i < host.size(); ++i) {
        CAPTURE(i);  // output, then the gradients of tokens, w1, w2, w3
        CHECK(at::equal(host[i], device[i]));
      }
    }
    CHECK_THROWS_WITH_AS(titan::run_experts_grouped_mm_on_device(w1, w2, w3, tokens, at::tensor({3, 8}, at::kLong), 4),
                         doctest::Contains("counts of shape [2] for 4 experts"), titan::Error);
  }

  TEST_CASE("the MoE layer hands core's grouped experts their counts on the device, and reads them on the host for a "
            "replaced dispatcher or the loop") {
    // Experts whose host-count forward refuses: the layer must not call it.
    struct DeviceOnly : titan::GroupedExperts {
      using GroupedExperts::GroupedExperts;
      at::Tensor forward(const at::Tensor&, const std::vector<int64_t>&) override {
        throw titan::Error("the counts were read on the host");
      }
    };
    struct Replaced : titan::TokenDispatcher {};  // as expert parallelism's: the host path
    torch::manual_seed(13);
    MoEOptions options;
    options.num_experts = 4;
    options.top_k = 2;
    options.hidden_dim = 12;
    options.backend = titan::ExpertsBackend::grouped_mm;
    options.token_group_alignment = 4;
    const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat);
    auto experts = std::make_shared<DeviceOnly>(options.num_experts, 8, options.hidden_dim, options, fp32);
    titan::MoE moe(8, options, fp32, experts);
    titan::MoEOptions looped = options;
    looped.backend = titan::ExpertsBackend::loop;
    titan::MoE reference(8, looped, fp32);
    {
      torch::NoGradGuard no_grad;
      auto from = moe.named_parameters(), to = reference.named_parameters();
      for (auto& item : from) {
        item.value().normal_(0, 0.5);
        to[item.key()].copy_(item.value());
      }
    }
    const at::Tensor x = at::randn({6, 8});
    CHECK(max_diff(moe.forward(x), reference.forward(x)) <= 1e-5);
    CHECK(experts->runs_on_device_counts(x));
    moe.replace_module("dispatcher", std::make_shared<Replaced>());
    CHECK_THROWS_WITH_AS(moe.forward(x), doctest::Contains("read on the host"), titan::Error);
    experts->grouped_matmul = [](const at::Tensor& a, const at::Tensor& w, const at::Tensor& ends,
                                 const std::vector<int64_t>&) { return at::_grouped_mm(a, w.transpose(-2, -1), ends); };
    CHECK_FALSE(experts->runs_on_device_counts(x));  // a product seam takes the sizes on the host
  }

  TEST_CASE("the MoE layer's forward and backward match a per-token PyTorch MoE") {
    const std::string python = titan::test::source_dir() + "/.venv/bin/python";
    if (titan::test::run_command("test -x " + python).exit_code != 0) {
      MESSAGE("TITAN_SKIPPED: " << python << " not found (scripts/setup.sh installs torch into .venv)");
      return;
    }
    struct Case {
      const char* name;
      titan::RouterScore score;
      bool route_norm, score_before;
      double scale;
      int64_t groups, limited;
      titan::ExpertsBackend backend;
    };
    const Case cases[] = {
        {"softmax, route_norm, gates after the experts (Qwen3)", titan::RouterScore::softmax, true, false, 1.0, 0, 0,
         titan::ExpertsBackend::loop},
        {"sigmoid, 2 of 4 groups, gates before the experts, grouped GEMM", titan::RouterScore::sigmoid, false, true,
         2.5, 4, 2, titan::ExpertsBackend::grouped_mm}};
    for (const Case& c : cases) {
      CAPTURE(c.name);
      torch::manual_seed(11);
      const int64_t dim = 8, tokens = 10;
      MoEOptions options;
      options.num_experts = 8;
      options.top_k = 2;
      options.hidden_dim = 12;  // 48-byte rows: the grouped GEMM takes them
      options.num_shared_experts = 1;
      options.score_func = c.score;
      options.route_norm = c.route_norm;
      options.score_before_experts = c.score_before;
      options.route_scale = c.scale;
      options.num_expert_groups = c.groups;
      options.num_limited_groups = c.limited;
      options.backend = c.backend;
      options.token_group_alignment = 4;
      titan::MoE moe(dim, options, at::TensorOptions().dtype(at::kFloat));
      std::map<std::string, at::Tensor> weights;
      {
        torch::NoGradGuard no_grad;
        for (auto& item : moe.named_parameters()) item.value().normal_(0, 0.5);
        auto router = std::dynamic_pointer_cast<Router>(titan::find_module(moe, "router"));
        router->reset_buffers();
        router->expert_bias.copy_(at::randn({8}) * 0.05);
        weights["expert_bias"] = router->expert_bias.clone();
      }
      at::Tensor x = at::randn({2, tokens / 2, dim}).requires_grad_();
      at::Tensor out = moe.forward(x);
      at::Tensor grad_out = at::randn_like(out);
      out.backward(grad_out);

      auto param = [&](const std::string& name) { return moe.named_parameters()[name]; };
      const std::pair<const char*, const char*> names[] = {
          {"gate", "router.gate.weight"}, {"w1", "experts.w1"}, {"w2", "experts.w2"}, {"w3", "experts.w3"},
          {"shared_w1", "shared_experts.w1.weight"}, {"shared_w2", "shared_experts.w2.weight"},
          {"shared_w3", "shared_experts.w3.weight"}};
      for (const auto& [ref, ours] : names) weights[ref] = param(ours).detach();
      weights["x"] = x.detach().view({tokens, dim});
      weights["grad_out"] = grad_out.view({tokens, dim});
      const auto dir = titan::test::temp_dir("moe_reference");
      titan::safetensors::save_file(
          (dir / "in.safetensors").string(), weights,
          {{"top_k", "2"}, {"score_func", c.score == titan::RouterScore::softmax ? "softmax" : "sigmoid"},
           {"route_norm", c.route_norm ? "1" : "0"}, {"route_scale", std::to_string(c.scale)},
           {"score_before_experts", c.score_before ? "1" : "0"}, {"num_expert_groups", std::to_string(c.groups)},
           {"num_limited_groups", std::to_string(c.limited)}});
      auto result = titan::test::run_command("timeout 120 " + python + " " + titan::test::source_dir() +
                                             "/tests/python/moe_reference.py " + (dir / "in.safetensors").string() +
                                             " " + (dir / "out.safetensors").string());
      REQUIRE_MESSAGE(result.exit_code == 0, result.output);
      titan::safetensors::File reference((dir / "out.safetensors").string());
      // fp32 both sides, sums of a few products in another order: 1e-5 of the values' scale.
      auto close = [](const at::Tensor& ours, const at::Tensor& theirs) {
        return max_diff(ours, theirs) <= 1e-5 * (1 + theirs.abs().max().item<double>());
      };
      CHECK(close(out.detach().view({tokens, dim}), reference.read("out")));
      CHECK(close(x.grad().view({tokens, dim}), reference.read("grad_x")));
      for (const auto& [ref, ours] : names) {
        CAPTURE(ours);
        CHECK(close(param(ours).grad(), reference.read(std::string("grad_") + ref)));
      }
    }
  }

  TEST_CASE("the load-balance update: coeff * sign(mean - counts), centred, from counts summed over ranks") {
    at::Tensor delta = titan::expert_bias_delta(at::tensor({4.0f, 1.0f, 1.0f, 1.0f, 1.0f}), 0.1);
    // mean 1.6: signs -1, 1, 1, 1, 1 (mean 0.6), centred.
    CHECK(max_diff(delta, at::tensor({-0.16f, 0.04f, 0.04f, 0.04f, 0.04f})) <= 1e-7);

    // Two MoE layers in one model; the reduction stands in for two ranks that saw the same tokens.
    struct Model : torch::nn::Module {};
    auto owner = std::make_shared<Model>();  // named_modules() needs the root in a shared_ptr
    Model& model = *owner;
    MoEOptions options;
    options.num_experts = 4;
    options.top_k = 1;
    options.hidden_dim = 4;
    options.load_balance_coeff = 0.01;
    model.register_module("a", std::make_shared<titan::MoE>(4, options, at::TensorOptions()));
    options.load_balance_coeff = 0;  // this one only reports its load
    model.register_module("b", std::make_shared<titan::MoE>(4, options, at::TensorOptions()));
    auto routers = titan::find_routers(model);
    REQUIRE(routers.size() == 2);
    CHECK(routers[0].first == "a.router");
    for (auto& [path, router] : routers) router->reset_buffers();
    routers[0].second->tokens_per_expert.copy_(at::tensor({5.0f, 1.0f, 3.0f, 3.0f}));
    routers[1].second->tokens_per_expert.copy_(at::tensor({2.0f, 2.0f, 2.0f, 2.0f}));
    int calls = 0;
    auto loads = titan::balance_experts(model, [&](at::Tensor& counts) {
      ++calls;
      CHECK(counts.sizes() == at::IntArrayRef({2, 4}));
      counts.mul_(2);
    });
    CHECK(calls == 1);  // one collective for every layer
    CHECK(max_diff(routers[0].second->expert_bias, at::tensor({-0.01f, 0.01f, 0.0f, 0.0f})) <= 1e-7);
    CHECK(routers[0].second->tokens_per_expert.sum().item<double>() == 0);
    CHECK(routers[1].second->tokens_per_expert.sum().item<double>() == 0);
    REQUIRE(loads.size() == 2);
    CHECK(loads[0].imbalance == doctest::Approx(10.0 / 6.0));
    CHECK(loads[0].expert_bias_norm == doctest::Approx(std::sqrt(2e-4)).epsilon(1e-5));
    CHECK(loads[1].imbalance == doctest::Approx(1.0));
    auto metrics = titan::moe_metrics(loads);
    CHECK(metrics.at("moe/a.router/imbalance") == doctest::Approx(10.0 / 6.0));
    CHECK(metrics.count("moe/b.router/expert_bias_norm") == 1);
  }

  TEST_CASE("tokens_per_expert counts each forward once, not again in a recomputing backward") {
    // What activation checkpointing does: forward without autograd, the
    // same body again with autograd inside the backward.
    struct Recompute : torch::autograd::Function<Recompute> {
      static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, titan::MoE* moe) {
        ctx->saved_data["moe"] = reinterpret_cast<int64_t>(moe);
        ctx->save_for_backward({x});
        return moe->forward(x);
      }
      static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                     torch::autograd::variable_list grads) {
        auto* moe = reinterpret_cast<titan::MoE*>(ctx->saved_data["moe"].toInt());
        at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_();
        at::Tensor out;
        {
          at::AutoGradMode enable(true);
          out = moe->forward(x);
        }
        torch::autograd::backward({out}, {grads[0]});
        return {x.grad(), at::Tensor()};
      }
    };
    MoEOptions options;
    options.num_experts = 4;
    options.top_k = 2;
    options.hidden_dim = 4;
    titan::MoE moe(4, options, at::TensorOptions());
    {
      torch::NoGradGuard no_grad;
      for (auto& p : moe.parameters()) p.normal_(0, 0.3);
    }
    auto router = std::dynamic_pointer_cast<Router>(titan::find_module(moe, "router"));
    router->reset_buffers();
    at::Tensor x = at::randn({3, 4}).requires_grad_();
    Recompute::apply(x, &moe).sum().backward();
    CHECK(x.grad().defined());
    CHECK(router->tokens_per_expert.sum().item<double>() == 3 * 2);  // 12 if the recompute counted
    moe.forward(x).sum().backward();  // a plain forward counts too
    CHECK(router->tokens_per_expert.sum().item<double>() == 2 * 3 * 2);
  }

  TEST_CASE("the experts' rows are counted on the ids' device as at::bincount counts them, with nothing read on the "
            "host") {
    at::manual_seed(11);
    const at::Tensor selected = at::randint(0, 5, {40, 3}, at::kLong);  // 7 experts: 5 and 6 get none
    const at::Tensor counts = titan::count_per_expert(selected, 7);
    CHECK(at::equal(counts, at::bincount(selected.view(-1), {}, 7)));
    CHECK(counts.sum().item<int64_t>() == 40 * 3);
    CHECK_THROWS(titan::count_per_expert(at::full({2, 1}, int64_t{7}), 7));  // an id past the experts
    // On a device (meta here), no copy the host waits for.
    titan::HostReadCounter counter(/*on_device=*/true);
    const at::Tensor on_meta = titan::count_per_expert(at::empty({40, 3}, at::TensorOptions().dtype(at::kLong).device(at::kMeta)), 7);
    CHECK(on_meta.is_meta());
    CHECK(on_meta.sizes() == at::IntArrayRef{7});
    CHECK(counter.take().count == 0);
  }
}
