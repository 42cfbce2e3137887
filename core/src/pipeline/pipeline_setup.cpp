// build_pipeline_model and the whole-model gather over pp.
#include "pipeline_setup.hpp"

#include <c10/util/StringUtil.h>
#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace {

// Split backward (I then W) runs autograd twice over a stage; plugins that
// reduce gradients or recompute when a block's input gradient is computed
// (data parallelism, activation checkpointing) need the whole backward at I.
// The plugins that need the whole backward in one pass (none: it may split).
std::vector<std::string> whole_backward_plugins(const RunSpec& spec) {
  std::vector<std::string> names;
  for (const auto& [name, parallelizer] : spec.parallelizers) {
    if (!parallelizer->allows_split_backward()) names.push_back(name);
  }
  return names;
}

std::string trace_file(const std::string& prefix, int rank) {
  std::string stem = prefix;
  const std::string json = ".json";
  if (stem.size() > json.size() && stem.compare(stem.size() - json.size(), json.size(), json) == 0) {
    stem.resize(stem.size() - json.size());
  }
  return stem + "_rank" + std::to_string(rank) + ".json";
}

// Tied embeddings (or multi-token prediction): the stage with the head
// keeps the embedding module too, for the matrix its head multiplies or the
// tokens ahead it embeds (the blocks' input there is hidden states).
std::vector<std::string> with_tied_embeddings(std::vector<std::string> modules) {
  const auto holds = [&](const char* name) { return std::find(modules.begin(), modules.end(), name) != modules.end(); };
  if (holds("output") && !holds("tok_embeddings")) modules.push_back("tok_embeddings");
  return modules;
}

// After the step's backward, the first and the last stage's copies of the
// tied matrix each hold their end's gradient (already reduced over data
// parallelism by the parts' finalizers): each rank adds the other's, so both
// hold the single process's gradient, bit for bit the same (a + b = b + a),
// and AdamW keeps the copies equal. The layout names pp, so the gradient
// norm counts the matrix once and a checkpoint writes the first stage's.
constexpr int kTiedGradientTag = (1 << 30) - 1;  // below the executor's header tags, above its stage tags

void share_tied_embeddings(ModelParts& model, const PipelineProgram& program, const DeviceMesh& mesh) {
  const std::string name = "tok_embeddings.weight";
  const int64_t pp_rank = mesh.coordinate("pp");
  const int64_t last = stage_to_rank(program.placement, program.shape, program.shape.stages - 1);
  if (pp_rank != 0 && pp_rank != last) return;
  const auto params = model.named_parameters();
  const at::Tensor* param = params.find(name);
  const TensorLayout* layout = model.layout(name);
  if (!param || !layout) {
    throw Error("pipeline: the model's head needs " + name + " (a tied head or multi-token prediction) but stage " +
                std::to_string(pp_rank == 0 ? 0 : program.shape.stages - 1) + " holds no such parameter");
  }
  TensorLayout shared = *layout;
  shared.mesh_dims.push_back("pp");
  shared.placements.push_back(Placement::replicate());
  model.set_layout(name, shared);
  Comm& pp = mesh.group("pp");
  const int peer = static_cast<int>(pp_rank == 0 ? last : 0);
  model.add_gradient_finalizer([tensor = *param, &pp, peer] {
    const at::Tensor& grad = tensor.grad();
    if (!grad.defined()) throw Error("pipeline: the shared tok_embeddings.weight has no gradient after backward");
    at::Tensor mine = grad.contiguous();
    at::Tensor theirs = at::empty_like(mine);
    auto sent = pp.send_async(mine, peer, kTiedGradientTag);
    auto received = pp.recv_async(theirs, peer, kTiedGradientTag);
    sent->wait();
    received->wait();
    grad.add_(theirs);
  });
}

}  // namespace

PipelineModel build_pipeline_model(const RunSpec& spec, const PipelineRun& run, const DeviceMesh* mesh,
                                   int global_rank, const c10::Device& device,
                                   const std::function<void(CausalLM&)>& transform) {
  const int64_t pp_rank = mesh ? mesh->coordinate("pp") : 0;
  const std::vector<int64_t> stages = rank_to_stages(run.program.placement, run.program.shape, pp_rank);
  const bool tied = spec.model->head_needs_embeddings();
  std::vector<std::shared_ptr<CausalLM>> parts;
  for (int64_t stage : stages) {
    std::shared_ptr<CausalLM> part = spec.model->build(c10::Device(c10::kMeta));
    const std::vector<std::string>& modules = run.stage_modules.at(static_cast<size_t>(stage));
    const std::vector<std::string> kept = tied ? with_tied_embeddings(modules) : modules;
    cut_to_stage(*part, kept);
    spdlog::info("pipeline stage {} on pp rank {}: {}{}", stage, pp_rank, c10::Join(", ", modules),
                 kept != modules ? " (and tok_embeddings, for the head)" : "");
    transform(*part);
    parts.push_back(part);
  }
  PipelineModel built;
  built.model = std::make_shared<ModelParts>(parts);
  if (tied && mesh && run.program.shape.ranks > 1) share_tied_embeddings(*built.model, run.program, *mesh);
  for (const auto& part : parts) materialize_module(*part, device);
  PipelineExecutorOptions options;
  const std::vector<std::string> whole_backward = whole_backward_plugins(spec);
  options.split_backward = whole_backward.empty();
  const PipelineSettings& settings = spec.pipeline->settings();
  if (!settings.trace.empty()) options.trace_path = trace_file(settings.trace, global_rank);
  const bool splits = [&] {
    for (const auto& list : run.program.compute) {
      for (const auto& action : list) {
        if (action.type == ActionType::backward_weight) return true;
      }
    }
    return false;
  }();
  spdlog::info("pipeline: schedule {}, {}, {} placement; theoretical bubble {:.3f}{}", run.program.name,
               run.program.shape.to_string(), placement_name(run.program.placement), run.program.timeline.bubble_fraction,
               splits && !options.split_backward
                   ? "; I runs the whole backward and W nothing (" + c10::Join(", ", whole_backward) +
                         " act when a block's input gradient is computed)"
                   : std::string());
  Comm* pp = run.program.shape.ranks > 1 ? &mesh->group("pp") : nullptr;
  built.executor = std::make_unique<PipelineExecutor>(run.program, std::move(parts), stages, pp, pp_rank,
                                                      std::move(options));
  return built;
}

void gather_pipeline_stages(c10::Dict<std::string, at::Tensor>& tensors, const DeviceMesh* mesh) {
  if (!mesh || mesh->size("pp") == 1) return;
  Comm& pp = mesh->group("pp");
  const std::vector<char> mine = torch::jit::pickle_save(c10::IValue(tensors));
  for (int root = 1; root < pp.size(); ++root) {
    at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
    pp.broadcast(length, root);
    at::Tensor bytes = at::empty({length.item<int64_t>()}, at::kByte);
    if (pp.rank() == root) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
    pp.broadcast(bytes, root);
    if (pp.rank() != 0) continue;
    const char* data = static_cast<const char*>(bytes.data_ptr());
    auto theirs = c10::impl::toTypedDict<std::string, at::Tensor>(
        torch::jit::pickle_load(std::vector<char>(data, data + bytes.numel())).toGenericDict());
    for (const auto& item : theirs) tensors.insert(item.key(), item.value());
  }
}

}  // namespace titan
