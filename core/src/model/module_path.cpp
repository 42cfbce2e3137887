// Submodule lookup, swap and pattern matching by dotted path.
#include "titan/module_path.hpp"

#include "titan/error.hpp"

namespace titan {

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  if (path.empty()) return parts;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::shared_ptr<torch::nn::Module> named_child(const torch::nn::Module& parent, const std::string& name) {
  auto children = parent.named_children();
  const auto* found = children.find(name);
  return found ? *found : nullptr;
}

}  // namespace

std::shared_ptr<torch::nn::Module> find_module(const torch::nn::Module& root, const std::string& path) {
  const torch::nn::Module* current = &root;
  std::shared_ptr<torch::nn::Module> held;
  for (const auto& part : split_path(path)) {
    held = named_child(*current, part);
    if (!held) return nullptr;
    current = held.get();
  }
  if (!held) throw Error("find_module: the empty path names the root, which is not held by a shared_ptr here");
  return held;
}

void swap_module(torch::nn::Module& root, const std::string& path, std::shared_ptr<torch::nn::Module> replacement) {
  size_t dot = path.rfind('.');
  std::string parent_path = dot == std::string::npos ? "" : path.substr(0, dot);
  std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  torch::nn::Module* parent = &root;
  std::shared_ptr<torch::nn::Module> held;
  if (!parent_path.empty()) {
    held = find_module(root, parent_path);
    if (!held) throw Error("swap_module: the model has no module '" + parent_path + "' (while swapping '" + path + "')");
    parent = held.get();
  }
  if (!named_child(*parent, name)) {
    throw Error("swap_module: the model has no module '" + path + "' to replace");
  }
  parent->replace_module(name, replacement);
  // A wrapper registers its inner layer's children under the same names,
  // but the inner layer calls its own: swap there too.
  while (auto* wrapper = dynamic_cast<LayerWrapper*>(parent)) {
    parent = &wrapper->inner();
    if (!named_child(*parent, name)) break;
    parent->replace_module(name, replacement);
  }
}

bool path_matches(const std::string& pattern, const std::string& path) {
  auto want = split_path(pattern), have = split_path(path);
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != "*" && want[i] != have[i]) return false;
  }
  return true;
}

std::vector<std::string> match_modules(const torch::nn::Module& root, const std::string& pattern) {
  std::vector<std::string> paths;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    if (path_matches(pattern, item.key())) paths.push_back(item.key());
  }
  return paths;
}

std::shared_ptr<Layer> find_child_layer(const torch::nn::Module& parent, const std::string& name) {
  auto found = named_child(parent, name);
  if (!found) return nullptr;
  auto layer = std::dynamic_pointer_cast<Layer>(found);
  if (!layer) {
    throw Error("submodule '" + name + "' of " + parent.name() + " is a " + found->name() +
                ", which is not a titan::Layer (one tensor in, one out); a plugin swapped in the wrong kind of module");
  }
  return layer;
}

std::shared_ptr<Layer> child_layer(const torch::nn::Module& parent, const std::string& name) {
  auto found = find_child_layer(parent, name);
  if (!found) throw Error(parent.name() + " has no submodule '" + name + "'");
  return found;
}

}  // namespace titan
