// Float64 references of the optimizer rules a plugin may declare it
// implements (its conformance declaration names one). Each is written from
// the rule's definition, independent of any plugin's code.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "titan/config.hpp"

namespace titan::conformance {

class ReferenceRule {
 public:
  virtual ~ReferenceRule() = default;
  // One step of every parameter (float64) with its gradient (float64).
  virtual void step(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, double lr) = 0;
};

// "adamw", "lion", "sgd" or "muon"; its hyper-parameters are read (required) from
// the same options node the plugin's factory reads. Unknown rule: an error
// naming the key.
std::unique_ptr<ReferenceRule> make_reference_rule(const ConfigNode& declaration, const ConfigNode& options);

}  // namespace titan::conformance
