// The layer seam: modules found and swapped by path, patterns over block
// indices, and wrappers that keep the wrapped layer's parameter names.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>

#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/layers.hpp"
#include "titan/module_path.hpp"

namespace {

// A two-block toy: blocks.{0,1}.proj (Linear) and head (Linear).
struct Block : torch::nn::Module {
  Block() { register_module("proj", std::make_shared<titan::Linear>(4, 4, at::kFloat)); }
};

struct Toy : torch::nn::Module {
  Toy() {
    auto blocks = register_module("blocks", torch::nn::ModuleDict());
    for (const char* index : {"0", "1"}) {
      blocks->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
          {index, std::make_shared<Block>()}});
    }
    register_module("head", std::make_shared<titan::Linear>(4, 2, at::kFloat));
  }
};

// Doubles what its inner layer returns.
struct Doubling : titan::LayerWrapper {
  using LayerWrapper::LayerWrapper;
  at::Tensor forward(const at::Tensor& input) override { return 2 * inner().forward(input); }
};

std::vector<std::string> names(const torch::nn::Module& module) {
  std::vector<std::string> out;
  for (const auto& item : module.named_parameters()) out.push_back(item.key());
  return out;
}

}  // namespace

TEST_CASE("layers: modules are found by path, patterns match whole components") {
  Toy toy;
  CHECK(titan::find_module(toy, "blocks.1.proj") != nullptr);
  CHECK(titan::find_module(toy, "blocks.2.proj") == nullptr);
  CHECK(titan::find_module(toy, "head.weight") == nullptr);  // a parameter is not a module
  CHECK(titan::match_modules(toy, "blocks.*.proj") == std::vector<std::string>{"blocks.0.proj", "blocks.1.proj"});
  CHECK(titan::match_modules(toy, "head") == std::vector<std::string>{"head"});
  CHECK(titan::match_modules(toy, "*").size() == 2);  // blocks, head
  CHECK_FALSE(titan::path_matches("blocks.*", "blocks.0.proj"));
  CHECK(titan::path_matches("blocks.*.proj", "blocks.10.proj"));
}

TEST_CASE("layers: a swapped-in wrapper runs in place of the layer and keeps every parameter name") {
  Toy toy;
  std::vector<std::string> before = names(toy);
  auto proj = std::dynamic_pointer_cast<titan::Layer>(titan::find_module(toy, "blocks.0.proj"));
  REQUIRE(proj);
  at::Tensor x = at::randn({3, 4});
  at::Tensor plain = proj->forward(x);
  titan::swap_module(toy, "blocks.0.proj", std::make_shared<Doubling>(proj));
  CHECK(names(toy) == before);  // blocks.0.proj.weight, not blocks.0.proj.inner.weight
  auto swapped = titan::child_layer(*titan::find_module(toy, "blocks.0"), "proj");
  CHECK(at::allclose(swapped->forward(x), 2 * plain));
  // The wrapper holds the same parameter: an update through either is seen by both.
  at::Tensor weight = toy.named_parameters()["blocks.0.proj.weight"];
  CHECK(weight.is_same(std::dynamic_pointer_cast<titan::Linear>(proj)->weight));
  CHECK_THROWS_WITH_AS(titan::swap_module(toy, "blocks.7.proj", std::make_shared<Doubling>(proj)),
                       doctest::Contains("no module 'blocks.7'"), titan::Error);
  CHECK_THROWS_WITH_AS(titan::swap_module(toy, "tail", std::make_shared<Doubling>(proj)),
                       doctest::Contains("no module 'tail'"), titan::Error);
}

// Runs its "proj" child, as a layer that calls its parts by name.
struct Calling : titan::Layer {
  Calling() { register_module("proj", std::make_shared<titan::Linear>(4, 4, at::kFloat)); }
  at::Tensor forward(const at::Tensor& input) override { return titan::child_layer(*this, "proj")->forward(input); }
};

struct WrappedHolder : torch::nn::Module {
  WrappedHolder() { register_module("layer", std::make_shared<Doubling>(std::make_shared<Calling>())); }
};

TEST_CASE("layers: a child swapped below a wrapper is swapped in the wrapped layer too, which is what runs") {
  WrappedHolder holder;
  auto proj = std::dynamic_pointer_cast<titan::Layer>(titan::find_module(holder, "layer.proj"));
  REQUIRE(proj);
  at::Tensor x = at::randn({3, 4});
  at::Tensor before = titan::child_layer(holder, "layer")->forward(x);  // 2 * proj(x)
  titan::swap_module(holder, "layer.proj", std::make_shared<Doubling>(proj));
  // Without the inner swap the wrapped layer would still call the old proj: 2 * proj(x).
  CHECK(at::allclose(titan::child_layer(holder, "layer")->forward(x), 2 * before));
}

TEST_CASE("layers: a child that is not a Layer is refused by name") {
  Toy toy;
  CHECK(titan::find_child_layer(toy, "missing") == nullptr);
  CHECK_THROWS_WITH_AS(titan::child_layer(toy, "blocks"), doctest::Contains("not a titan::Layer"), titan::Error);
  CHECK_THROWS_WITH_AS(titan::child_layer(toy, "missing"), doctest::Contains("no submodule 'missing'"), titan::Error);
}

TEST_CASE("layers: the core RMSNorm normalizes in fp32 and scales") {
  titan::RMSNorm norm(4, 1e-6, at::kFloat);
  norm.weight.data().fill_(2);
  at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 4});
  at::Tensor expected = 2 * x / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  CHECK(at::allclose(norm.forward(x), expected));
}

TEST_CASE("layers: RMSNorm's one autograd node gives the composition's output bit for bit and its gradients "
          "within 1e-6, in float32 and with bfloat16 inputs") {
  // The composition RMSNorm ran before it became one node: autograd's own.
  auto composition = [](const at::Tensor& input, const at::Tensor& weight, double eps) {
    at::Tensor x = input.to(at::kFloat);
    at::Tensor normed = x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return normed.to(input.scalar_type()) * weight;
  };
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(3);
    titan::RMSNorm norm(48, 1e-5, at::TensorOptions().dtype(dtype));
    norm.weight.data().copy_(at::rand({48}) + 0.5);
    // Rows far apart in size, so that each row's scale matters.
    const at::Tensor values = (at::randn({2, 5, 48}) * at::logspace(-3, 2, 5).view({1, 5, 1})).to(dtype);
    const at::Tensor upstream = at::randn({2, 5, 48}).to(dtype);
    auto run = [&](bool one_node) {
      at::Tensor x = values.clone().requires_grad_(true);
      norm.weight.mutable_grad() = at::Tensor();
      at::Tensor out = one_node ? norm.forward(x) : composition(x, norm.weight, norm.eps);
      out.backward(upstream);
      return std::vector<at::Tensor>{out.detach(), x.grad(), norm.weight.grad().clone()};
    };
    const std::vector<at::Tensor> node = run(true), reference = run(false);
    INFO(c10::toString(dtype));
    CHECK(at::equal(node[0], reference[0]));
    for (size_t i = 1; i < node.size(); ++i) {
      // Per row: rows 1e5 apart in size each get their own tolerance.
      const at::Tensor a = node[i].to(at::kDouble), e = reference[i].to(at::kDouble);
      const double error = ((a - e).abs() / e.abs().amax(-1, /*keepdim=*/true).clamp_min(1e-30)).max().item<double>();
      const std::string what = std::string(c10::toString(dtype)) + (i == 1 ? " grad input" : " grad weight");
      MESSAGE(what << ": relative error " << error);
      CHECK(error <= (dtype == at::kFloat ? 1e-6 : 1e-2));
    }
  }
}

TEST_CASE("layers: Rotary's and RotateHalfRotary's one autograd node give the composition's output and input "
          "gradient bit for bit, in float32 and bfloat16") {
  auto pairs = [](const at::Tensor& x, const at::Tensor& c, const at::Tensor& s) {
    at::Tensor pairs = x.to(at::kFloat).reshape({x.size(0), x.size(1), x.size(2), x.size(3) / 2, 2});
    at::Tensor even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
    return at::stack({even * c - odd * s, even * s + odd * c}, -1).flatten(3).to(x.scalar_type());
  };
  auto halves = [](const at::Tensor& x, const at::Tensor& c, const at::Tensor& s) {
    const int64_t half = x.size(3) / 2;
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor first = xf.narrow(3, 0, half), second = xf.narrow(3, half, half);
    return at::cat({first * c - second * s, second * c + first * s}, 3).to(x.scalar_type());
  };
  for (bool rotate_half : {false, true}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      at::manual_seed(4);
      const at::Tensor angles = at::rand({6, 8}) * 6.3;  // [seq, half]
      const at::Tensor cos = angles.cos(), sin = angles.sin();
      const at::Tensor values = at::randn({2, 6, 3, 16}).to(dtype), upstream = at::randn({2, 6, 3, 16}).to(dtype);
      auto run = [&](bool one_node) {
        at::Tensor x = values.clone().requires_grad_(true);
        std::shared_ptr<titan::Rotary> rotary =
            rotate_half ? std::make_shared<titan::RotateHalfRotary>() : std::make_shared<titan::Rotary>();
        const at::Tensor c = titan::Rotary::rows_for(cos, x), s = titan::Rotary::rows_for(sin, x);
        at::Tensor out = one_node ? rotary->forward(x, cos, sin) : (rotate_half ? halves(x, c, s) : pairs(x, c, s));
        out.backward(upstream);
        return std::make_pair(out.detach(), x.grad());
      };
      const auto node = run(true), reference = run(false);
      const std::string which = (rotate_half ? "rotate_half " : "pairs ") + std::string(c10::toString(dtype));
      INFO(which);
      CHECK(at::equal(node.first, reference.first));
      CHECK(at::equal(node.second, reference.second));
      CHECK(node.second.abs().sum().item<double>() > 0);
    }
  }
}

TEST_CASE("layers: a bias-free Linear's one autograd node gives at::linear's output and both gradients bit for bit, "
          "and each gradient alone where only it is asked for") {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(5);
    titan::Linear linear(48, 80, at::TensorOptions().dtype(dtype));
    linear.weight.data().copy_(at::randn({80, 48}) * 0.1);
    const at::Tensor values = at::randn({3, 7, 48}).to(dtype), upstream = at::randn({3, 7, 80}).to(dtype);
    auto run = [&](bool one_node) {
      at::Tensor x = values.clone().requires_grad_(true);
      linear.weight.mutable_grad() = at::Tensor();
      at::Tensor out = one_node ? linear.forward(x) : at::linear(x, linear.weight);
      out.backward(upstream);
      return std::vector<at::Tensor>{out.detach(), x.grad(), linear.weight.grad().clone()};
    };
    const std::vector<at::Tensor> node = run(true), reference = run(false);
    INFO(std::string(c10::toString(dtype)));
    for (size_t i = 0; i < node.size(); ++i) CHECK(at::equal(node[i], reference[i]));
    // The input's gradient alone (a pipeline's split backward: I before W).
    at::Tensor x = values.clone().requires_grad_(true);
    linear.weight.mutable_grad() = at::Tensor();
    const auto only_input = torch::autograd::grad({linear.forward(x)}, {x}, {upstream});
    CHECK(at::equal(only_input[0], reference[1]));
    CHECK_FALSE(linear.weight.grad().defined());
  }
}

TEST_CASE("layers: under autocast (bfloat16 on CPU) a bias-free Linear is at::linear's, forward and backward") {
  at::manual_seed(6);
  titan::Linear linear(32, 16, at::TensorOptions().dtype(at::kFloat));
  linear.weight.data().copy_(at::randn({16, 32}) * 0.1);
  const at::Tensor values = at::randn({2, 5, 32}), upstream = at::randn({2, 5, 16});
  auto run = [&](bool titan_linear) {
    at::Tensor x = values.clone().requires_grad_(true);
    linear.weight.mutable_grad() = at::Tensor();
    at::Tensor out;
    {
      titan::compat::AutocastScope autocast(at::kCPU, at::kBFloat16);
      out = titan_linear ? linear.forward(x) : at::linear(x, linear.weight);
    }
    out.backward(upstream.to(out.scalar_type()));
    return std::vector<at::Tensor>{out.detach(), x.grad(), linear.weight.grad().clone()};
  };
  const std::vector<at::Tensor> titan_side = run(true), reference = run(false);
  CHECK((titan_side[0].scalar_type() == at::kBFloat16));
  for (size_t i = 0; i < titan_side.size(); ++i) CHECK(at::equal(titan_side[i], reference[i]));
}

TEST_CASE("layers: SwiGLU's one autograd node gives silu(gate) * up's output and both gradients bit for bit") {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(7);
    const at::Tensor gates = (at::randn({2, 5, 24}) * 3).to(dtype), ups = at::randn({2, 5, 24}).to(dtype);
    const at::Tensor upstream = at::randn({2, 5, 24}).to(dtype);
    auto run = [&](bool one_node) {
      at::Tensor gate = gates.clone().requires_grad_(true), up = ups.clone().requires_grad_(true);
      titan::SwiGLU swiglu;
      at::Tensor out = one_node ? swiglu.forward(gate, up) : at::silu(gate) * up;
      out.backward(upstream);
      return std::vector<at::Tensor>{out.detach(), gate.grad(), up.grad()};
    };
    const std::vector<at::Tensor> node = run(true), reference = run(false);
    const std::string which = c10::toString(dtype);
    INFO(which);
    for (size_t i = 0; i < node.size(); ++i) CHECK(at::equal(node[i], reference[i]));
  }
}
