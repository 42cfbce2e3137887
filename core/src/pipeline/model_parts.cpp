// ModelParts: the parts' modules registered under their global names.
#include "model_parts.hpp"

#include <torch/nn/modules/container/moduledict.h>

#include "titan/error.hpp"

namespace titan {

ModelParts::ModelParts(std::vector<std::shared_ptr<CausalLM>> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw Error("ModelParts: a pipeline rank holds at least one stage");
  for (const auto& part : parts_) {
    for (const auto& child : part->named_children()) {
      const std::string& name = child.key();
      auto dict = std::dynamic_pointer_cast<torch::nn::ModuleDictImpl>(child.value());
      if (!named_children().contains(name)) {
        // A dict gets its own copy here: the next part adds its blocks to it.
        if (dict) {
          register_module(name, torch::nn::ModuleDict());
        } else {
          register_module(name, child.value());
          continue;
        }
      }
      auto mine = std::dynamic_pointer_cast<torch::nn::ModuleDictImpl>(named_children()[name]);
      if (!dict || !mine) throw Error("pipeline: module '" + name + "' is on two stages of this rank");
      for (const auto& item : dict->items()) {
        if (mine->contains(item.first)) {
          throw Error("pipeline: module '" + name + "." + item.first + "' is on two stages of this rank");
        }
        mine->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{item});
      }
    }
    for (const auto& item : part->named_parameters()) {
      const TensorLayout* layout = part->layout(item.key());
      set_layout(item.key(), layout ? *layout : TensorLayout::replicated(item.value().sizes().vec()));
    }
    add_gradient_finalizer([part = part.get()] { part->finalize_gradients(); });
  }
  // Every parameter of every part must be reachable here, or it would miss
  // init, the optimizer and checkpoints.
  size_t in_parts = 0;
  for (const auto& part : parts_) in_parts += part->named_parameters().size();
  if (named_parameters().size() != in_parts) {
    throw Error("ModelParts: the stages hold " + std::to_string(in_parts) + " parameters but " +
                std::to_string(named_parameters().size()) + " are reachable by name; a stage holds a module "
                "outside its top-level modules and blocks");
  }
}

std::vector<const StepHook*> ModelParts::step_hooks() const {
  std::vector<const StepHook*> hooks;
  for (const auto& part : parts_) {
    for (const StepHook* hook : part->step_hooks()) hooks.push_back(hook);
  }
  return hooks;
}

at::Tensor ModelParts::forward(const at::Tensor& /*tokens*/) {
  throw Error("ModelParts::forward: a pipeline rank runs its stages through the pipeline executor");
}

int64_t ModelParts::num_blocks() const {
  int64_t blocks = 0;
  for (const auto& part : parts_) blocks += part->num_blocks();
  return blocks;
}

std::shared_ptr<torch::nn::Module> ModelParts::block(int64_t index) {
  for (const auto& part : parts_) {
    if (index < part->num_blocks()) return part->block(index);
    index -= part->num_blocks();
  }
  throw Error("ModelParts: block index past this rank's stages");
}

void ModelParts::init_parameter(const std::string& name, at::Tensor& values, uint64_t seed) const {
  // The rule is the model's, by name: any part knows it.
  parts_.front()->init_parameter(name, values, seed);
}

void ModelParts::init_buffers() {
  for (const auto& part : parts_) part->init_buffers();
}

void ModelParts::train(bool on) {
  CausalLM::train(on);
  for (const auto& part : parts_) part->train(on);
}

}  // namespace titan
