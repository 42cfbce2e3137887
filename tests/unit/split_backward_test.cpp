// The zero-bubble schedules' split backward (core/src/pipeline/split_backward):
// I runs only the activation-gradient path, W only the nodes that consume a
// parameter and the parameter side below them, and together they give a whole
// backward's gradients: through a transposed and a cast weight, a weight used
// twice (W must not count a gradient twice), a node with two outputs, and
// attention (no parameter, activation path only).
#include "pipeline/split_backward.hpp"

#include <torch/csrc/autograd/function.h>

#include "doctest_torch.hpp"
#include "titan/layers.hpp"

namespace {

// Identity forward; counts its backward runs (a marker on a path).
struct Marker : torch::autograd::Function<Marker> {
  static inline int runs = 0;
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    ++runs;
    return {grads[0]};
  }
};

// Identity forward that saves a 1 MiB buffer for its backward: when saved
// tensors are freed (the buffers of the forwards since the last clear).
struct Saving : torch::autograd::Function<Saving> {
  static inline std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> buffers;
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    at::Tensor saved = at::zeros({1 << 18});
    buffers.push_back(saved.storage().getWeakStorageImpl());
    ctx->save_for_backward({saved});
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0]};
  }
};

// (x * w, x + w) for x [.., n] and w [n]: a node with two outputs that
// consumes a parameter. Computes only the gradients autograd asks for.
struct TwoOutputs : torch::autograd::Function<TwoOutputs> {
  static inline int input_gradients = 0, weight_gradients = 0;
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return {x * w, x + w};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    at::Tensor product = grads[0].defined() ? grads[0] : at::zeros_like(x);
    at::Tensor sum = grads[1].defined() ? grads[1] : at::zeros_like(x);
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      ++input_gradients;
      dx = product * w + sum;
    }
    if (ctx->needs_input_grad(1)) {
      ++weight_gradients;
      dw = (product * x + sum).reshape({-1, w.size(0)}).sum(0);
    }
    return {dx, dw};
  }
};

// A stage: linear (transposed weight), a weight used twice through one
// transpose, a double weight cast to float, a norm's scale, a two-output
// node, attention, with markers on the activation and the parameter paths.
struct Stage {
  titan::Linear first{16, 16, at::kFloat};
  at::Tensor shared = torch::randn({16, 16}) * 0.25;             // used twice
  at::Tensor wide = torch::randn({16, 16}, at::kDouble) * 0.25;  // cast to float in forward
  at::Tensor scale = torch::rand({16}) + 0.5;
  at::Tensor pair = torch::randn({16});

  Stage() {
    torch::NoGradGuard no_grad;
    first.weight.normal_(0, 0.25);
    for (at::Tensor* t : {&shared, &wide, &scale, &pair}) t->requires_grad_(true);
  }
  std::vector<at::Tensor> parameters() { return {first.weight, shared, wide, scale, pair}; }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = Marker::apply(first.forward(x));   // the activation path's marker
    at::Tensor shared_t = Marker::apply(shared).t();  // the parameter side's marker
    h = Saving::apply(at::relu(h.matmul(shared_t)));  // the activation path, between two nodes W starts from
    h = at::tanh(h.matmul(shared_t));
    h = at::linear(h, wide.to(at::kFloat));
    h = h * at::rsqrt(h.pow(2).mean(-1, true) + 1e-6) * scale;
    auto outputs = TwoOutputs::apply(h, Saving::apply(pair));  // the parameter side
    h = outputs[0] + outputs[1].sigmoid();
    const at::Tensor q = h.view({2, 4, 4, 4}).transpose(1, 2);  // batch 2, 4 heads of 4
    return at::scaled_dot_product_attention(q, q, q, {}, 0.0, true).transpose(1, 2).reshape({2, 4, 16});
  }
};

void reset_counts() { Marker::runs = TwoOutputs::input_gradients = TwoOutputs::weight_gradients = 0; }

}  // namespace

TEST_CASE("split backward: I runs only the activation path and W only the parameters' nodes; I + W equal a "
          "whole backward") {
  torch::manual_seed(3);
  Stage stage;
  const at::Tensor input = torch::randn({2, 4, 16});
  const at::Tensor grad_output = torch::randn({2, 4, 16});

  // The whole backward, the reference.
  at::Tensor whole_input = input.clone().requires_grad_(true);
  torch::autograd::backward({stage.forward(whole_input)}, {grad_output});
  std::vector<at::Tensor> whole;
  for (at::Tensor& p : stage.parameters()) {
    whole.push_back(p.grad().clone());
    p.mutable_grad() = at::Tensor();
  }

  reset_counts();
  Saving::buffers.clear();
  at::Tensor split_input = input.clone().requires_grad_(true);
  at::Tensor output = stage.forward(split_input);
  std::weak_ptr<torch::autograd::Node> output_node = output.grad_fn();
  titan::SplitBackward split = titan::backward_input(output, grad_output, split_input, stage.parameters());
  CHECK(Marker::runs == 1);  // the activation path's marker; the parameter side's waits for W
  CHECK(TwoOutputs::input_gradients == 1);
  CHECK(TwoOutputs::weight_gradients == 0);
  CHECK(split.input_gradient.allclose(whole_input.grad(), 1e-5, 1e-6));
  for (at::Tensor& p : stage.parameters()) CHECK_FALSE(p.grad().defined());
  // W starts from the first linear's, the shared weight's two, the cast
  // weight's matmuls, the norm scale's multiply and the two-output node.
  CHECK(split.weight->start_nodes() == 6);
  CHECK(split.weight->kept_gradient_bytes() > 0);

  // The activation path's saved tensors are gone, also below the nodes W
  // starts from, and dropping the output frees the nodes above them.
  output = at::Tensor();
  CHECK(output_node.expired());
  REQUIRE(Saving::buffers.size() == 2);
  CHECK(Saving::buffers[0].expired());
  CHECK_FALSE(Saving::buffers[1].expired());  // W needs it
  reset_counts();
  split.weight->run();
  CHECK(Saving::buffers[1].expired());  // W freed what I kept for it
  CHECK(Marker::runs == 1);             // only the parameter side's: the activation path did not run again
  CHECK(TwoOutputs::input_gradients == 0);
  CHECK(TwoOutputs::weight_gradients == 1);
  CHECK(split.weight->kept_gradient_bytes() == 0);
  const auto params = stage.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(params[i].grad().defined());
    CHECK(params[i].grad().allclose(whole[i], 1e-5, 1e-6));
  }
}

TEST_CASE("split backward: W accumulates onto gradients already there, as a whole backward does") {
  torch::manual_seed(4);
  Stage stage;
  const at::Tensor grad_output = torch::randn({2, 4, 16});
  std::vector<at::Tensor> inputs = {torch::randn({2, 4, 16}), torch::randn({2, 4, 16})};
  for (const at::Tensor& input : inputs) {
    torch::autograd::backward({stage.forward(input.clone().requires_grad_(true))}, {grad_output});
  }
  std::vector<at::Tensor> whole;
  for (at::Tensor& p : stage.parameters()) {
    whole.push_back(p.grad().clone());
    p.mutable_grad() = at::Tensor();
  }
  // Two microbatches' I first, then their W in the other order.
  std::vector<titan::SplitBackward> splits;
  for (const at::Tensor& input : inputs) {
    at::Tensor leaf = input.clone().requires_grad_(true);
    splits.push_back(titan::backward_input(stage.forward(leaf), grad_output, leaf, stage.parameters()));
  }
  splits[1].weight->run();
  splits[0].weight->run();
  const auto params = stage.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(params[i].grad().allclose(whole[i], 1e-5, 1e-6));
  }
}

TEST_CASE("split backward: on a first stage (no input) the embedding ends the activation path: I accumulates "
          "its gradient and W the others'") {
  torch::manual_seed(5);
  Stage stage;
  titan::Embedding embedding(32, 16, at::kFloat);
  {
    torch::NoGradGuard no_grad;
    embedding.weight.normal_();
  }
  std::vector<at::Tensor> parameters = stage.parameters();
  parameters.insert(parameters.begin() + 2, embedding.weight);  // not first in the list: found by use
  const at::Tensor tokens = torch::randint(32, {2, 4});
  const at::Tensor grad_output = torch::randn({2, 4, 16});
  torch::autograd::backward({stage.forward(embedding.forward(tokens))}, {grad_output});
  std::vector<at::Tensor> whole;
  for (at::Tensor& p : parameters) {
    whole.push_back(p.grad().clone());
    p.mutable_grad() = at::Tensor();
  }

  reset_counts();
  titan::SplitBackward split =
      titan::backward_input(stage.forward(embedding.forward(tokens)), grad_output, at::Tensor(), parameters);
  CHECK_FALSE(split.input_gradient.defined());
  CHECK(Marker::runs == 1);
  CHECK(TwoOutputs::weight_gradients == 0);
  REQUIRE(embedding.weight.grad().defined());
  CHECK(embedding.weight.grad().allclose(whole[2], 1e-5, 1e-6));
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (i != 2) CHECK_FALSE(parameters[i].grad().defined());
  }
  CHECK(split.weight->start_nodes() == 6);
  reset_counts();
  split.weight->run();
  CHECK(Marker::runs == 1);
  CHECK(TwoOutputs::input_gradients == 0);
  for (size_t i = 0; i < parameters.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(parameters[i].grad().defined());
    CHECK(parameters[i].grad().allclose(whole[i], 1e-5, 1e-6));
  }
}
