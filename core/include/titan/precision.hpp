// PrecisionPolicy: the dtypes parameters live, compute and reduce in, and an
// optional module conversion (e.g. float8 linears).
#pragma once
#include <c10/core/ScalarType.h>

#include "titan/model.hpp"

namespace titan {

// The dtypes the trainer gathers, computes and reduces in: float32 and
// bfloat16 (a policy asking for another is refused before training).
inline bool trainer_supports_dtype(c10::ScalarType dtype) { return dtype == c10::kFloat || dtype == c10::kBFloat16; }

class PrecisionPolicy {
 public:
  virtual ~PrecisionPolicy() = default;
  virtual c10::ScalarType param_dtype() const = 0;
  virtual c10::ScalarType reduce_dtype() const = 0;
  // Largest relative loss difference to fp32 this policy promises.
  virtual double loss_tolerance() const = 0;
  virtual void convert(CausalLM& /*model*/) {}
};

}  // namespace titan
