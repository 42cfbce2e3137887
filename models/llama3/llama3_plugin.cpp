// The llama3 plugin's descriptor: a Llama3Spec built from the `model:`
// options read_llama3_spec (llama3_options.cpp) reads and checks.
#include "llama3_spec.h"
#include "titan/plugin.hpp"

TITAN_PLUGIN_OF(model, titan::llama3::Llama3Spec, "1.0",
                "Llama 3 / 3.1 / 3.2 decoder (flavors debugmodel, 1B, 3B, 8B, 70B, 405B)",
                titan::llama3::read_llama3_spec)
