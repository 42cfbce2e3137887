// The gpt_oss plugin's descriptor: a GptOssSpec built from the `model:`
// options read_gpt_oss_spec (gpt_oss_options.cpp) reads and checks.
#include "gpt_oss_spec.h"
#include "titan/plugin.hpp"

TITAN_PLUGIN_OF(model, titan::gpt_oss::GptOssSpec, "1.0",
                "GPT-OSS decoder: attention sinks, alternating sliding-window and full attention, MoE with biases and "
                "a clamped SwiGLU, YaRN rotary (flavors debugmodel, 20b, 120b)",
                titan::gpt_oss::read_gpt_oss_spec)
