// One closeness check for the fused kernels' tests: the largest absolute
// error within `tolerance` x the reference's largest magnitude (in fp64),
// with both numbers in the failure message.
#pragma once
#include <cmath>
#include <string>

#include "doctest_torch.hpp"

namespace titan::test {

inline void check_close_to_reference(const at::Tensor& actual, const at::Tensor& expected, double tolerance,
                                     const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  at::Tensor a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  const double worst = (a - e).abs().max().item<double>(), scale = e.abs().max().item<double>();
  INFO("max abs error " << worst << ", reference max abs " << scale);
  CHECK(std::isfinite(worst));
  CHECK(worst <= tolerance * scale);
}

}  // namespace titan::test
