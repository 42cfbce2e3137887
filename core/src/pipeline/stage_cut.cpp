// Cutting a model down to one pipeline stage, on the meta device, before any
// parallelizer or weight sees it: a rank never builds another rank's stages.
#include <torch/nn/modules/container/moduledict.h>

#include <set>

#include "titan/error.hpp"
#include "titan/module_path.hpp"
#include "titan/pipeline.hpp"

namespace titan {

PipelineSplitter::~PipelineSplitter() = default;

namespace {

// Keeps `path` (relative to the root) when it is kept or leads to a kept path.
enum class Verdict { keep_whole, descend, drop };

Verdict judge(const std::string& path, const std::set<std::string>& keep) {
  if (keep.count(path)) return Verdict::keep_whole;
  const std::string prefix = path + ".";
  for (const auto& kept : keep) {
    if (kept.compare(0, prefix.size(), prefix) == 0) return Verdict::descend;
  }
  return Verdict::drop;
}

void cut(torch::nn::Module& module, const std::string& path, const std::set<std::string>& keep) {
  std::vector<std::string> dropped;
  for (const auto& child : module.named_children()) {
    const std::string child_path = path.empty() ? child.key() : path + "." + child.key();
    switch (judge(child_path, keep)) {
      case Verdict::keep_whole: break;
      case Verdict::descend: cut(*child.value(), child_path, keep); break;
      case Verdict::drop:
        // A model holds its block dict as a member and runs whatever is in
        // it: the dict stays, emptied.
        if (dynamic_cast<torch::nn::ModuleDictImpl*>(child.value().get())) {
          cut(*child.value(), child_path, keep);
        } else {
          dropped.push_back(child.key());
        }
        break;
    }
  }
  // A ModuleDict keeps its own index beside the children list, and its pop
  // leaves the registration (as Python's does): both go.
  auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(&module);
  for (const auto& name : dropped) {
    if (dict) dict->pop(name);
    module.unregister_module(name);
  }
}

}  // namespace

void cut_to_stage(torch::nn::Module& model, const std::vector<std::string>& keep) {
  std::set<std::string> wanted(keep.begin(), keep.end());
  for (const auto& path : wanted) {
    if (!find_module(model, path)) {
      throw Error("pipeline stage: the model has no module '" + path + "' (check module_fqns_per_model_part)");
    }
  }
  cut(model, "", wanted);
}

}  // namespace titan
