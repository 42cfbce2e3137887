// How model plugins draw a parameter's initial values (TorchTitan's
// schemes): one CPU generator per (seed, parameter name), so a value does
// not depend on init order, device or sharding, and torch.nn.init's
// truncated normal.
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace torch::nn {
class Module;
}

namespace titan {

// A CPU generator seeded by a stable hash of (seed, name).
at::Generator parameter_generator(uint64_t seed, const std::string& name);
// As torch.nn.init.trunc_normal_: inverse CDF of a uniform draw; a, b absolute.
void trunc_normal(at::Tensor& values, double mean, double std, double a, double b, at::Generator& generator);
// "layers.7.attention.wo.weight" -> 7; an Error naming `model` for a name outside the blocks.
int64_t block_index_of(const std::string& name, const std::string& model);
bool name_ends_with(const std::string& name, const std::string& suffix);
bool name_ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes);
// Puts rotary tables {cos, sin} into a model's two buffers by set_data, so
// they stay fp32 in a bf16 model. Buffers still on meta (a materialization
// that skipped them) go to the device of `model`'s parameters; an Error
// naming `model_name` when every parameter is on meta too.
void install_rope_tables(const torch::nn::Module& model, at::Tensor& freqs_cos, at::Tensor& freqs_sin,
                         const std::pair<at::Tensor, at::Tensor>& tables, const std::string& model_name);

}  // namespace titan
