// The parameter-init helpers model plugins share (titan/param_init.hpp).
#include "titan/param_init.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include <torch/nn/module.h>

#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a: stable across compilers and runs, unlike std::hash.
uint64_t name_hash(const std::string& name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001B3ull;
  return hash;
}

}  // namespace

at::Generator parameter_generator(uint64_t seed, const std::string& name) {
  return at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed ^ splitmix64(name_hash(name))));
}

void trunc_normal(at::Tensor& t, double mean, double std, double a, double b, at::Generator& gen) {
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  double low = cdf((a - mean) / std), high = cdf((b - mean) / std);
  t.uniform_(2 * low - 1, 2 * high - 1, gen);
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.add_(mean);
  t.clamp_(a, b);
}

int64_t block_index_of(const std::string& name, const std::string& model) {
  const std::string prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) throw Error(model + ": '" + name + "' is not inside a block");
  return std::stoll(name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size()));
}

bool name_ends_with(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool name_ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const char* suffix : suffixes) {
    if (name_ends_with(name, suffix)) return true;
  }
  return false;
}

void install_rope_tables(const torch::nn::Module& model, at::Tensor& freqs_cos, at::Tensor& freqs_sin,
                         const std::pair<at::Tensor, at::Tensor>& tables, const std::string& model_name) {
  c10::Device device = freqs_cos.device();
  if (device.is_meta()) {
    for (const auto& param : model.parameters()) {
      if (!param.is_meta()) device = param.device();
    }
    if (device.is_meta()) throw Error(model_name + ": rotary tables cannot be computed on the meta device");
    compat::materialize_in_place(freqs_cos, device);
    compat::materialize_in_place(freqs_sin, device);
  }
  at::NoGradGuard no_grad;
  freqs_cos.set_data(tables.first.to(device));
  freqs_sin.set_data(tables.second.to(device));
}

}  // namespace titan
