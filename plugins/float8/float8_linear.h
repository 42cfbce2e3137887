// The float8 linear: wraps the model's titan::Linear (its weight keeps its
// name) and computes y = x W^T, grad_input and grad_weight with operands
// cast as the recipe says. Emulated: exact float8 codes, the matmul in
// float32 on their values / scale (torchao's emulate mode); with a float8
// LibTorch on a GPU, `_scaled_mm` through float8_scaled_mm.h. With FSDP and
// `enable_fsdp_float8_all_gather` it also tells FSDP to gather its weight
// as e4m3 codes (titan/all_gather_extension.hpp). Plugin-private header.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "float8_scaling.h"
#include "titan/all_gather_extension.hpp"
#include "titan/layers.hpp"

namespace titan::float8 {

class Float8Linear;

// precompute_float8_dynamic_scale_for_fsdp: the scales of every gathered
// weight from one MAX all-reduce of their shards' amaxes, made at the
// step's first gather (when FSDP holds every parameter as its shard) and
// kept until the step's gradients are final.
class PrecomputedScales {
 public:
  void add(Float8Linear* layer) { layers_.push_back(layer); }
  at::Tensor scale_of(const Float8Linear* layer, Comm& group);
  void invalidate() { stale_ = true; }

 private:
  std::vector<Float8Linear*> layers_;
  at::Tensor scales_;  // [layers], float32
  bool stale_ = true;
};

struct Float8Settings {
  Recipe recipe;
  bool emulate = true;
  bool fsdp_float8_all_gather = false;
  std::shared_ptr<PrecomputedScales> precomputed;  // null unless precompute_float8_dynamic_scale_for_fsdp
};

// The three matmuls of a linear on x [M, K] and weight [N, K] (autograd:
// gradients for both). `gathered_weight`, when its codes are defined, is
// the weight already cast (FSDP's float8 all-gather): used as is for every
// matmul whose weight cast is tensorwise. `emulate` false: on a CUDA device
// that runs `_scaled_mm` the matmuls multiply the codes there (the same
// casts); elsewhere, and with `emulate`, in float32 on their values.
at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& weight, const Recipe& recipe,
                         const Quantized& gathered_weight = {}, bool emulate = true);

class Float8Linear : public LayerWrapper, public AllGatherExtension {
 public:
  Float8Linear(std::shared_ptr<Linear> inner, std::shared_ptr<const Float8Settings> settings, std::string path);
  at::Tensor forward(const at::Tensor& input) override;
  const at::Tensor& weight() const { return linear_->weight; }
  const std::string& path() const { return path_; }

  at::Tensor extended_parameter() const override;
  c10::ScalarType wire_dtype() const override { return at::kByte; }
  at::Tensor pre_all_gather(const at::Tensor& shard, Comm& group) override;
  at::Tensor post_all_gather(const at::Tensor& gathered, c10::ScalarType dtype) override;

 private:
  std::shared_ptr<Linear> linear_;
  std::shared_ptr<const Float8Settings> settings_;
  std::string path_;
  at::Tensor gather_scale_;  // the scale of the codes the last pre_all_gather sent
  Quantized gathered_;       // the whole weight's codes after the last gather
};

}  // namespace titan::float8
