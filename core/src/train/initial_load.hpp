// checkpoint.initial_load_path: model weights to start from when there is
// no checkpoint to resume (a checkpoint step folder or a Hugging Face
// safetensors folder), loaded into a possibly sharded model.
#pragma once
#include "titan/checkpointer.hpp"
#include "titan/model.hpp"

namespace titan {

// Loads every parameter of `model` from checkpointer.initial_load_path();
// returns false when that path is empty. Reads one whole tensor at a time
// and keeps this rank's piece of it (per the parameter's layout).
bool load_initial_weights(const Checkpointer& checkpointer, const ModelSpec& spec, CausalLM& model);

}  // namespace titan
