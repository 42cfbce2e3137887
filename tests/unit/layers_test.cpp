// The layer seam: modules found and swapped by path, patterns over block
// indices, and wrappers that keep the wrapped layer's parameter names.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>

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
