// A bfloat16 precision policy (parameters and compute in bf16, gradients
// reduced in fp32) with an honest loss tolerance: titan-conformance passes
// it and the trainer runs with it. Built a second time with
// TITAN_TEST_CLAIMED_LOSS_TOLERANCE set to a tolerance bf16 cannot meet
// (must fail precision.loss).
#include "titan/plugin.hpp"
#include "titan/precision.hpp"

#ifndef TITAN_TEST_CLAIMED_LOSS_TOLERANCE
#define TITAN_TEST_CLAIMED_LOSS_TOLERANCE 2e-2  // bf16 keeps 8 mantissa bits: ~0.4% per op, a few steps
#endif

namespace {

class Bf16Policy : public titan::PrecisionPolicy {
 public:
  c10::ScalarType param_dtype() const override { return c10::kBFloat16; }
  c10::ScalarType reduce_dtype() const override { return c10::kFloat; }
  double loss_tolerance() const override { return TITAN_TEST_CLAIMED_LOSS_TOLERANCE; }
};

}  // namespace

TITAN_PLUGIN_OF(precision, Bf16Policy, "1.0",
                "bf16 parameters, fp32 reduction (conformance test)")
