// checkpoint.initial_load_path: model weights to start from when there is
// no checkpoint to resume (a checkpoint step folder or a Hugging Face
// safetensors folder), loaded into a possibly sharded model.
#pragma once
#include <string>

#include "titan/checkpointer.hpp"
#include "titan/model.hpp"

namespace titan {

// Loads every parameter of `model` from checkpointer.initial_load_path();
// returns false when that path is empty. Reads one whole tensor at a time
// and keeps this rank's piece of it (per the parameter's layout).
bool load_initial_weights(const Checkpointer& checkpointer, const ModelSpec& spec, CausalLM& model);
// The same from `path`, named `what` in messages; `with_saved_buffers`: from
// a checkpoint step folder also the buffers it saved (a MoE router's expert
// bias), which a model that only runs needs. From a Hugging Face folder the
// buffers the model names there always come.
void load_weights(const Checkpointer& checkpointer, const ModelSpec& spec, CausalLM& model, const std::string& path,
                  const std::string& what, bool with_saved_buffers = false);

}  // namespace titan
