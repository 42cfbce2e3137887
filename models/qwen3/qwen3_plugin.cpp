// The qwen3 plugin's descriptor: a Qwen3Spec built from the `model:` options
// read_qwen3_spec (qwen3_options.cpp) reads and checks.
#include "qwen3_spec.h"
#include "titan/plugin.hpp"

TITAN_PLUGIN_OF(model, titan::qwen3::Qwen3Spec, "1.0",
                "Qwen3 decoder, dense and MoE (flavors debugmodel, 0.6B ... 32B, debugmodel_moe, 30B-A3B, 235B-A22B)",
                titan::qwen3::read_qwen3_spec)
