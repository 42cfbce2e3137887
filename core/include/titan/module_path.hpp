// Modules by fully qualified name ("layers.3.attention.wq", "output"), as
// PyTorch's get_submodule / swap does: how plugins find and replace a
// model's layers.
#pragma once
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "titan/layers.hpp"

namespace titan {

// The submodule at `path` ("" is root itself); null when absent.
std::shared_ptr<torch::nn::Module> find_module(const torch::nn::Module& root, const std::string& path);
// Replaces the submodule at `path` by `replacement` (same name, same place in
// its parent, and in the inner layer of a wrapper parent); an error names
// the missing part of the path.
void swap_module(torch::nn::Module& root, const std::string& path, std::shared_ptr<torch::nn::Module> replacement);
// Paths of every submodule matching `pattern`, where `*` stands for one
// whole path component ("layers.*.attention.wq"), in module order.
std::vector<std::string> match_modules(const torch::nn::Module& root, const std::string& pattern);
bool path_matches(const std::string& pattern, const std::string& path);

// The child `name` of `parent` as a Layer, for a model's forward: null when
// absent (e.g. dropped on a pipeline stage); an error when it is there but
// not a Layer (a plugin swapped in something of the wrong kind).
std::shared_ptr<Layer> find_child_layer(const torch::nn::Module& parent, const std::string& name);
// The same, required to exist.
std::shared_ptr<Layer> child_layer(const torch::nn::Module& parent, const std::string& name);

}  // namespace titan
