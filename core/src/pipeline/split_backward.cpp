// The split backward of the zero-bubble schedules. Written from the idea of
// PyTorch's torch/distributed/pipelining/_backward.py, with two differences:
// one engine run for all parameters (a node below two joining nodes, a cast
// weight used twice, gets both gradients in one pass), and every input of a
// joining node with more than one is kept (PyTorch's keeps one). W never
// walks the activation path: the joining nodes' edges into it are cut once I
// has run, and that path's saved tensors are freed then, not at W.
#include "split_backward.hpp"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "titan/error.hpp"

namespace titan {

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;

struct WeightGradientPass::State {
  // A node where a parameter's gradient path joins the activation path, with
  // the gradients that flowed into its inputs during I.
  struct Start {
    std::shared_ptr<Node> node;
    variable_list grads;
    bool reached = false;  // I ran it
  };
  std::vector<Start> starts;
  torch::autograd::edge_list parameters;  // the gradient edges (AccumulateGrad)
                                          // of the parameters W reaches
};

namespace {

// Keeps the gradients flowing into one node during I (a node pre-hook runs
// once all its inputs have arrived, just before the node runs).
class KeepGradients : public torch::autograd::FunctionPreHook {
 public:
  explicit KeepGradients(WeightGradientPass::State::Start& start) : start_(start) {}
  variable_list operator()(const variable_list& grads) override {
    start_.grads = grads;
    start_.reached = true;
    return grads;
  }

 private:
  WeightGradientPass::State::Start& start_;
};

// The nodes under `root`, each with the nodes that have an edge to it.
std::unordered_map<Node*, std::vector<Node*>> consumers_under(Node* root) {
  std::unordered_map<Node*, std::vector<Node*>> consumers;
  consumers[root];
  std::vector<Node*> stack{root};  // graphs are thousands of nodes deep: no recursion
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      Node* next = edge.function.get();
      if (!next) continue;
      auto [found, inserted] = consumers.try_emplace(next);
      found->second.push_back(node);
      if (inserted) stack.push_back(next);
    }
  }
  return consumers;
}

// Frees a node's saved tensors as soon as it has run (what a backward that
// does not keep the graph does to every node).
class ReleaseAfterRun : public torch::autograd::FunctionPostHook {
 public:
  explicit ReleaseAfterRun(Node& node) : node_(node) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    node_.release_variables();
    return outputs;
  }

 private:
  Node& node_;
};

// Removes the hooks it added, whatever happens in between.
class Hooks {
 public:
  void add(Node& node, std::unique_ptr<torch::autograd::FunctionPreHook> hook) {
    pre_.emplace_back(&node, hook.get());
    node.add_pre_hook(std::move(hook));
  }
  void add(Node& node, std::unique_ptr<torch::autograd::FunctionPostHook> hook) {
    post_.emplace_back(&node, node.add_post_hook(std::move(hook)));
  }
  ~Hooks() {
    for (auto [node, hook] : pre_) {
      auto& hooks = node->pre_hooks();
      hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [hook = hook](const auto& h) { return h.get() == hook; }),
                  hooks.end());
    }
    for (auto [node, key] : post_) node->del_post_hook(key);
  }

 private:
  std::vector<std::pair<Node*, torch::autograd::FunctionPreHook*>> pre_;
  std::vector<std::pair<Node*, uintptr_t>> post_;
};

}  // namespace

WeightGradientPass::WeightGradientPass(std::unique_ptr<State> state) : state_(std::move(state)) {}
WeightGradientPass::~WeightGradientPass() = default;

size_t WeightGradientPass::start_nodes() const { return state_->starts.size(); }

int64_t WeightGradientPass::kept_gradient_bytes() const {
  std::unordered_set<const void*> storages;
  int64_t bytes = 0;
  for (const auto& start : state_->starts) {
    for (const at::Tensor& grad : start.grads) {
      if (grad.defined() && storages.insert(grad.storage().data()).second) bytes += grad.storage().nbytes();
    }
  }
  return bytes;
}

void WeightGradientPass::run() {
  torch::autograd::edge_list roots;
  variable_list grads;
  for (auto& start : state_->starts) {
    if (!start.reached) continue;  // I never ran it: no gradient reached it, none goes on
    for (size_t i = 0; i < start.grads.size(); ++i) {
      if (!start.grads[i].defined()) continue;
      roots.emplace_back(start.node, static_cast<uint32_t>(i));
      grads.push_back(std::move(start.grads[i]));
    }
  }
  state_->starts.clear();  // the roots hold the nodes now
  if (!roots.empty()) {
    // Not keeping the graph: each node frees its saved tensors once it ran.
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true,
                                                          state_->parameters);
  }
  state_->parameters.clear();
}

namespace {

// The parameter the earliest forward op consumed (the embedding on a first
// stage): the one whose gradient path runs through the whole graph.
at::Tensor earliest_parameter(const std::unordered_map<Node*, std::vector<Node*>>& consumers,
                              const std::vector<at::Tensor>& parameters) {
  at::Tensor earliest;
  uint64_t first = std::numeric_limits<uint64_t>::max();
  for (const at::Tensor& parameter : parameters) {
    std::shared_ptr<Node> accumulate = torch::autograd::impl::try_get_grad_accumulator(parameter);
    auto found = accumulate ? consumers.find(accumulate.get()) : consumers.end();
    if (found == consumers.end()) continue;
    for (Node* consumer : found->second) {
      if (consumer->sequence_nr() < first) {
        first = consumer->sequence_nr();
        earliest = parameter;
      }
    }
  }
  return earliest;
}

}  // namespace

SplitBackward backward_input(const at::Tensor& target, const at::Tensor& grad_output, const at::Tensor& input,
                             const std::vector<at::Tensor>& parameters) {
  namespace impl = torch::autograd::impl;
  const std::shared_ptr<Node> root = target.grad_fn();
  if (!root) throw Error("pipeline: the stage's output has no gradient to run back through");
  const auto consumers = consumers_under(root.get());
  // Without an input (the first stage) the earliest parameter stands in for
  // it: I runs the activation path down to it and accumulates its gradient.
  const at::Tensor path_end = input.defined() ? input : earliest_parameter(consumers, parameters);
  const std::shared_ptr<Node> input_node =
      path_end.defined() ? impl::try_get_grad_accumulator(path_end) : std::shared_ptr<Node>();
  if (!input_node || !consumers.count(input_node.get())) {
    throw Error(input.defined() ? "pipeline: the stage's output does not depend on its input"
                                : "pipeline: the first stage's output depends on none of its parameters");
  }

  // The activation path: every node I runs, the ones from which the input is
  // reached.
  std::unordered_set<Node*> activation_path{input_node.get()};
  std::vector<Node*> queue{input_node.get()};
  while (!queue.empty()) {
    Node* node = queue.back();
    queue.pop_back();
    for (Node* consumer : consumers.at(node)) {
      if (activation_path.insert(consumer).second) queue.push_back(consumer);
    }
  }

  // From each parameter up through the nodes off that path (a transpose, a
  // cast) to the first ones on it: where W starts.
  auto state = std::make_unique<WeightGradientPass::State>();
  std::vector<Node*> starts;
  std::unordered_set<Node*> seen;
  for (const at::Tensor& parameter : parameters) {
    std::shared_ptr<Node> accumulate = impl::try_get_grad_accumulator(parameter);
    if (!accumulate || !consumers.count(accumulate.get())) continue;  // not used by this stage's graph
    if (accumulate == input_node || !seen.insert(accumulate.get()).second) continue;
    state->parameters.emplace_back(accumulate, 0);
    queue.push_back(accumulate.get());
    while (!queue.empty()) {
      Node* node = queue.back();
      queue.pop_back();
      for (Node* consumer : consumers.at(node)) {
        if (!seen.insert(consumer).second) continue;
        if (activation_path.count(consumer)) {
          starts.push_back(consumer);
        } else {
          queue.push_back(consumer);
        }
      }
    }
  }
  // The start nodes' slots must not move once the hooks point at them.
  state->starts.resize(starts.size());
  for (size_t i = 0; i < starts.size(); ++i) state->starts[i].node = starts[i]->getptr();

  std::unordered_set<Node*> start_set(starts.begin(), starts.end());

  SplitBackward result;
  {
    Hooks hooks;
    for (auto& start : state->starts) hooks.add(*start.node, std::make_unique<KeepGradients>(start));
    // The activation path's nodes never run again: each frees its saved
    // tensors once it ran, so that I's peak holds the kept gradients in
    // their place, not on top of them.
    for (Node* node : activation_path) {
      if (node != input_node.get() && !start_set.count(node))
        hooks.add(*node, std::make_unique<ReleaseAfterRun>(*node));
    }
    variable_list grad_outputs;
    if (grad_output.defined()) grad_outputs.push_back(grad_output);
    // The graph stays for W; only the activation path's nodes run (autograd
    // computes a node's output only where an edge leads to the input).
    if (input.defined()) {
      result.input_gradient = torch::autograd::grad({target}, {input}, grad_outputs, /*retain_graph=*/true)[0];
    } else {
      torch::autograd::backward({target}, grad_outputs, /*retain_graph=*/true, /*create_graph=*/false, {path_end});
    }
  }
  // Cut the start nodes' edges into the activation path: W computes only the
  // parameter side of each, and a start node's saved input, which still
  // refers to the path's nodes below it, holds none of their saved tensors.
  for (auto& start : state->starts) {
    for (Edge& edge : start.node->next_edges()) {
      if (edge.function && activation_path.count(edge.function.get())) edge = Edge();
    }
  }
  result.weight = std::make_unique<WeightGradientPass>(std::move(state));
  return result;
}

}  // namespace titan
