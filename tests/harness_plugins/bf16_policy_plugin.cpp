// A bfloat16 precision policy (parameters and compute in bf16, gradients
// reduced in fp32) with an honest loss tolerance: titan-conformance passes
// it and the trainer runs with it. Its sibling `overconfident_bf16_policy`
// claims a tolerance bf16 cannot meet (must fail precision.loss).
#include "test_plugin.hpp"
#include "titan/precision.hpp"

namespace {

class Bf16Policy : public titan::PrecisionPolicy {
 public:
  explicit Bf16Policy(double claimed_loss_tolerance) : loss_tolerance_(claimed_loss_tolerance) {}
  c10::ScalarType param_dtype() const override { return c10::kBFloat16; }
  c10::ScalarType reduce_dtype() const override { return c10::kFloat; }
  double loss_tolerance() const override { return loss_tolerance_; }

 private:
  double loss_tolerance_;
};

double honest_tolerance(const titan::ConfigNode&) {
  return 2e-2;  // bf16 keeps 8 mantissa bits: ~0.4% per op, a few steps
}
double overconfident_tolerance(const titan::ConfigNode&) { return 1e-9; }

}  // namespace

TITAN_TEST_PLUGIN_OF(bf16_policy, precision, Bf16Policy, "1.0",
                     "bf16 parameters, fp32 reduction (conformance test)", honest_tolerance)
TITAN_TEST_PLUGIN_OF(overconfident_bf16_policy, precision, Bf16Policy, "1.0",
                     "bf16 claiming an fp32 tolerance (conformance test)", overconfident_tolerance)
