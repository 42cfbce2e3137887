// Naming scheme of the train state: model.<param>, optim.<param>.<state>,
// rng.cpu (per rank); values step, data.position and data.cursor (JSON). Optimizer states
// shaped like their parameter share its layout. The model's step hooks'
// state (MoE routers' expert biases: buffers, not parameters, but training
// state) is model.<name>: model.<router>.expert_bias.
#include "train_state.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "titan/error.hpp"

namespace titan {

namespace {
at::Tensor cpu_rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }
}  // namespace

TrainStateView::TrainStateView(CausalLM& model, Optimizer& optimizer, BatchPrefetcher& batches)
    : model_(model), optimizer_(optimizer), batches_(batches) {
  for (const auto& item : model_.named_parameters()) {
    slots_.tensors["model." + item.key()] = item.value();
    if (const TensorLayout* layout = model_.layout(item.key())) slots_.layouts["model." + item.key()] = *layout;
  }
  // The step hooks' state (MoE's expert biases): whole on every rank that
  // holds it (the hook keeps it equal); a whole layout, so under pipelining
  // the stage's own rank writes it.
  for (const StepHook* hook : model_.step_hooks()) {
    if (!hook->state) continue;
    for (const auto& [name, tensor] : hook->state()) {
      slots_.tensors["model." + name] = tensor;
      slots_.layouts["model." + name] = TensorLayout::replicated(tensor.sizes().vec());
    }
  }
  for (const auto& [key, tensor] : optimizer_.state_tensors()) {
    slots_.tensors["optim." + key] = tensor;
    std::string param = key.substr(0, key.rfind('.'));
    const TensorLayout* layout = model_.layout(param);
    if (layout && tensor.sizes().vec() == layout->local_shape) {
      slots_.layouts["optim." + key] = *layout;
    } else if (layout) {
      // Whole wherever its parameter is (a step count): replicated over the
      // parameter's mesh dims, so written by the first copy of the
      // parameter's ranks (under pipelining not rank 0; for a parameter both
      // pipeline ends hold, the first stage's).
      TensorLayout whole = TensorLayout::replicated(tensor.sizes().vec());
      whole.mesh_dims = layout->mesh_dims;
      whole.placements.assign(layout->mesh_dims.size(), Placement::replicate());
      slots_.layouts["optim." + key] = whole;
    }
  }
  slots_.rank_local["rng.cpu"] = cpu_rng_state();
}

TrainState TrainStateView::capture(int64_t step) {
  TrainState state = slots_;
  state.rank_local["rng.cpu"] = cpu_rng_state();
  state.values["step"] = std::to_string(step);
  state.values["data.position"] = std::to_string(batches_.position());
  if (!batches_.cursor().is_null()) state.values["data.cursor"] = batches_.cursor().dump();
  return state;
}

int64_t TrainStateView::restore(const TrainState& state) {
  auto value = [&](const std::string& key) -> int64_t {
    auto found = state.values.find(key);
    if (found == state.values.end()) throw Error("checkpoint has no '" + key + "' value");
    return std::stoll(found->second);
  };
  // The cursor continues without reading what came before; checkpoints
  // written before it existed replay the stream up to their position.
  auto cursor = state.values.find("data.cursor");
  if (cursor != state.values.end()) {
    batches_.seek(nlohmann::json::parse(cursor->second));
  } else {
    batches_.set_position(value("data.position"));
  }
  auto rng = state.rank_local.find("rng.cpu");
  if (rng != state.rank_local.end() && rng->second.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng->second);
  }
  return value("step");
}

}  // namespace titan
