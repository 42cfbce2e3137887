// Float8 support by LibTorch version. LibTorch 1.13 (Debian's, CPU) has no
// float8 dtypes and no `_scaled_mm`, so both answers are "not here"; a 2.x
// CUDA build adds the real path here (view the uint8 codes as
// at::kFloat8_e4m3fn / kFloat8_e5m2, pass 1 / scale to at::_scaled_mm).
#include "titan/compat_float8.hpp"

#include "titan/error.hpp"
#include "titan/compat.hpp"

namespace titan::compat {

bool float8_scaled_mm_available() { return false; }

at::Tensor scaled_mm(const at::Tensor&, bool, const at::Tensor&, const at::Tensor&, bool, const at::Tensor&,
                     c10::ScalarType) {
  throw Error(std::string("float8: _scaled_mm is not available in LibTorch ") + torch_version_string() +
              " (no float8 dtypes); use the float8 plugin's emulation (emulate: true, forced on CPU)");
}

}  // namespace titan::compat
