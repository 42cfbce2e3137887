// The ModelSpec / CausalLM contract on one process: a meta build allocates
// nothing, forward is shaped [batch, seq, vocab], init is a pure function of
// (seed, parameter name), num_params() is true, gradients are finite, a
// fresh model's loss is near ln(vocab), and a few SGD steps lower it.
#pragma once
#include <string>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

// `plugin` is the model plugin's path; the declaration's `model:` section
// sizes it, the optional `model_checks:` section sets the limits.
CheckResults check_model(const std::string& plugin, const ConfigNode& declaration);

}  // namespace titan::conformance
