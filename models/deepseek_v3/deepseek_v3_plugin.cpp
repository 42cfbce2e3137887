// The deepseek_v3 plugin's descriptor: a DeepSeekV3Spec built from the
// `model:` options read_deepseek_v3_spec (deepseek_v3_options.cpp) reads and checks.
#include "deepseek_v3_spec.h"
#include "titan/plugin.hpp"

TITAN_PLUGIN_OF(model, titan::deepseek_v3::DeepSeekV3Spec, "1.0",
                "DeepSeek-V3: multi-head latent attention, dense first blocks then MoE with shared experts "
                "(flavors debugmodel, 16B, 236B, 671B)",
                titan::deepseek_v3::read_deepseek_v3_spec)
