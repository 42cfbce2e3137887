// The activation_checkpoint plugin's options (TorchTitan's
// activation_checkpoint section).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan::activation_checkpoint {

struct AcOptions {
  std::string mode = "selective";         // none | full | selective | memory_budget
  std::string selective_ac_option = "2";  // "op" or N: every N-th block
  bool preserve_rng_state = false;
  std::string determinism_check = "default";  // none | default (shapes, dtypes) | values
  std::vector<std::string> per_op_sac_force_recompute_mm_shapes_by_fqns;
  double memory_budget = 0.5;             // memory_budget mode: fraction of the no-AC activation bytes
};

}  // namespace titan::activation_checkpoint
