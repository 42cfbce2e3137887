// The pipeline executor. Every rank walks its own lowered list in order; the
// static check (check_pipeline) proved that, with non-blocking sends and each
// recv waited where it stands, all lists finish together.
#include "pipeline_executor.hpp"

#include <torch/csrc/autograd/autograd.h>
#include <ATen/ATen.h>
#include <torch/utils.h>

#include <fstream>

#include "split_backward.hpp"
#include "titan/host_value.hpp"
#include "titan/profile_range.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace {

// Gloo moves a point-to-point message only once both ends posted it (the
// recv announces itself, then the sender's transport thread writes the
// data): a recv posted where it stands in the list pays that hand-shake and
// the transfer on the critical path, after the sender may long have been
// done. Each rank posts all of a step's recvs as the step starts instead
// (posting them later, one by one, waits on Gloo's per-peer lock while a
// transfer is under way), so that the data lands while it computes. The
// memory this costs: one boundary activation per recv of the step, a few
// MiB at the debug model's sizes.

// Tags at and above this carry the first step's shape headers.
constexpr int kHeaderTagOffset = 1 << 30;
constexpr int64_t kHeaderLength = 10;  // dtype, rank, up to 8 sizes

// Headers travel with the activations (NCCL moves CUDA tensors), except in
// a dry run: meta tensors carry no values, so its headers stay on the CPU.
c10::Device header_device(const c10::Device& device) { return device.is_meta() ? c10::Device(c10::kCPU) : device; }

at::Tensor shape_header(const at::Tensor& tensor) {
  if (tensor.dim() > kHeaderLength - 2) throw Error("pipeline: a stage output has more than 8 dims");
  at::Tensor header = at::zeros({kHeaderLength}, at::kLong);
  header[0] = static_cast<int64_t>(tensor.scalar_type());
  header[1] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) header[2 + d] = tensor.size(d);
  return header.to(header_device(tensor.device()));
}

bool is_forward(ActionType type) {
  return type == ActionType::forward || type == ActionType::send_forward || type == ActionType::recv_forward;
}

}  // namespace

struct PipelineExecutor::Slot {
  at::Tensor input;        // tokens on the first stage, else a leaf that collects the input gradient
  at::Tensor target;       // where backward starts: the scaled loss (last stage) or the stage output
  at::Tensor output;       // the stage output, detached: what goes downstream
  at::Tensor grad_output;  // d loss / d output, received or handed over (not on the last stage)
  at::Tensor grad_input;   // d loss / d input, for the stage before
  std::unique_ptr<WeightGradientPass> weight_pass;  // what I kept for W (split backward)
};

struct PipelineExecutor::Run {
  std::vector<at::Tensor> inputs, labels;  // per microbatch
  std::vector<at::Tensor> document_positions;  // per microbatch; empty: causal
  std::vector<double> weights;  // per microbatch: its share of the step's loss (loss_weight)
  bool last_batch = true;
  bool forward_only = false;  // evaluate(): no gradients, the lists' forwards only
  StageShapes* shapes = nullptr;  // of what this rank's stages receive
  bool send_headers = false;      // the pass that learns them
  std::map<std::pair<int64_t, int64_t>, Slot> slots;  // (stage, microbatch)
  std::vector<int64_t> weight_passes;                 // per local part, this batch
  std::vector<std::pair<std::unique_ptr<CommWork>, at::Tensor>> sends;  // in flight, with their buffers
  std::map<size_t, std::pair<std::unique_ptr<CommWork>, at::Tensor>> recvs;  // posted ahead, by list position
  at::Tensor loss_sum;
};

PipelineExecutor::PipelineExecutor(PipelineProgram program, std::vector<std::shared_ptr<CausalLM>> parts,
                                   std::vector<int64_t> stages, Comm* pp, int64_t pp_rank,
                                   PipelineExecutorOptions options)
    : program_(std::move(program)),
      parts_(std::move(parts)),
      stages_(std::move(stages)),
      pp_(pp),
      pp_rank_(pp_rank),
      options_(std::move(options)) {
  if (parts_.size() != stages_.size()) throw Error("pipeline executor: one model part per stage");
  for (const auto& part : parts_) {
    std::vector<at::Tensor> params;
    for (const auto& param : part->parameters()) {
      if (param.requires_grad()) params.push_back(param);
    }
    part_parameters_.push_back(std::move(params));
  }
}

PipelineExecutor::~PipelineExecutor() {
  try {
    write_trace();
  } catch (const std::exception& error) {
    spdlog::warn("pipeline_parallel_trace not written: {}", error.what());
  }
}

size_t PipelineExecutor::local_index(int64_t stage) const {
  for (size_t i = 0; i < stages_.size(); ++i) {
    if (stages_[i] == stage) return i;
  }
  throw Error("pipeline: stage " + std::to_string(stage) + " is not on pp rank " + std::to_string(pp_rank_));
}

void PipelineExecutor::split(Run& run, const Microbatch& batch, int64_t batches) const {
  const int64_t microbatches = program_.shape.microbatches;
  if (batch.inputs.size(0) % microbatches != 0) {
    throw Error("pipeline: a batch of " + std::to_string(batch.inputs.size(0)) + " rows does not split into " +
                std::to_string(microbatches) + " microbatches; set training.local_batch_size (or " +
                "validation.local_batch_size) to a multiple of num_pp_microbatches");
  }
  run.inputs = batch.inputs.chunk(microbatches, 0);
  run.labels = batch.labels.chunk(microbatches, 0);
  if (batch.document_positions.defined()) run.document_positions = batch.document_positions.chunk(microbatches, 0);
  const int64_t rows = batch.inputs.size(0) / microbatches;
  run.weights.clear();
  for (int64_t m = 0; m < microbatches; ++m) {
    run.weights.push_back(loss_weight(batch, 1.0 / static_cast<double>(batches), m * rows, (m + 1) * rows));
  }
  run.weight_passes.assign(parts_.size(), 0);
  // On the batch's device: the loss stays there until a log step reads it.
  run.loss_sum = at::zeros({1}, batch.inputs.options().dtype(at::kDouble));
}

at::Tensor PipelineExecutor::forward_backward(CausalLM& /*model*/, const std::vector<Microbatch>& batches,
                                  const LossFn& /*loss*/) {
  at::Tensor loss_sum;
  for (size_t b = 0; b < batches.size(); ++b) {
    Run run;
    split(run, batches[b], static_cast<int64_t>(batches.size()));
    run.last_batch = b + 1 == batches.size();
    run.shapes = &forward_shapes_;
    run.send_headers = steps_run_ == 0;
    run_actions(run);
    loss_sum = loss_sum.defined() ? loss_sum + run.loss_sum : run.loss_sum;
  }
  ++steps_run_;
  return loss_sum.squeeze(0);
}

at::Tensor PipelineExecutor::evaluate(const Microbatch& batch) {
  torch::NoGradGuard no_grad;
  Run run;
  split(run, batch, 1);
  run.forward_only = true;
  run.shapes = &evaluate_shapes_;
  run.send_headers = evaluations_run_ == 0;
  run_actions(run);
  ++evaluations_run_;
  return run.loss_sum.squeeze(0);
}

void PipelineExecutor::run_actions(Run& run) {
  const auto& actions = program_.actions.at(static_cast<size_t>(pp_rank_));
  post_recvs(run);
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& action = actions[i];
    if (run.forward_only && !is_forward(action.type)) continue;
    CallSite site("pp " + action.to_string());
    const double start = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
    run_action(run, action, i);
    if (!options_.trace_path.empty()) {
      const double end = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
      trace_.push_back({(run.forward_only ? "eval " : "") + action.to_string(), start, end});
    }
  }
  for (auto& [work, buffer] : run.sends) work->wait();
  run.sends.clear();
}

void PipelineExecutor::post_recvs(Run& run) {
  // The first pass learns the shapes (from the headers and its own stage
  // outputs): it posts each recv where it stands.
  if (run.send_headers) return;
  const auto& actions = program_.actions.at(static_cast<size_t>(pp_rank_));
  const c10::Device device = run.inputs.front().device();
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& action = actions[i];
    const bool recv_forward = action.type == ActionType::recv_forward;
    if (!recv_forward && (action.type != ActionType::recv_backward || run.forward_only)) continue;
    // A received activation has the shape of the header, a gradient that of
    // the stage output it belongs to.
    const StageShapes& shapes = recv_forward ? *run.shapes : output_shapes_;
    auto shape = shapes.find(action.stage);
    if (shape == shapes.end()) continue;
    at::Tensor buffer = at::empty(shape->second.first, at::TensorOptions().dtype(shape->second.second).device(device));
    CallSite site("pp " + action.to_string());  // what the flight recorder names, as if posted in place
    PointToPoint p2p = point_to_point(action, program_.placement, program_.shape);
    // The buffer lives in the map (stable address) until its wait: a Comm
    // may hold on to the tensor it was given, not a copy.
    auto& posted = run.recvs[i];
    posted.second = std::move(buffer);
    posted.first = pp_->recv_async(posted.second, static_cast<int>(p2p.peer), p2p.tag);
  }
}

at::Tensor PipelineExecutor::take_recv(Run& run, const Action& action, size_t position, at::Tensor buffer) {
  auto posted = run.recvs.find(position);
  if (posted != run.recvs.end()) {
    posted->second.first->wait();
    buffer = std::move(posted->second.second);
    run.recvs.erase(posted);
    return buffer;
  }
  PointToPoint p2p = point_to_point(action, program_.placement, program_.shape);
  pp_->recv_async(buffer, static_cast<int>(p2p.peer), p2p.tag)->wait();
  return buffer;
}

void PipelineExecutor::run_action(Run& run, const Action& action, size_t position) {
  ProfileRange range((run.forward_only ? "pipeline eval " : "pipeline ") + action.to_string());
  const int64_t s = action.stage, m = action.microbatch;
  const int64_t last_stage = program_.shape.stages - 1;
  Slot& slot = run.slots[{s, m}];
  switch (action.type) {
    case ActionType::forward: {
      CausalLM& part = *parts_[local_index(s)];
      at::Tensor input = run.inputs.at(static_cast<size_t>(m));
      if (s > 0) {
        if (!slot.input.defined()) {
          // The stage before is on this rank: its output is handed over in memory.
          const Slot& up = run.slots[{s - 1, m}];
          if (!up.output.defined()) throw Error("pipeline: " + action.to_string() + " runs before its input exists");
          slot.input = up.output.detach().requires_grad_(!run.forward_only);
        }
        input = slot.input;
      }
      // Every stage's attention needs the microbatch's documents.
      const at::Tensor documents =
          run.document_positions.empty() ? at::Tensor() : run.document_positions.at(static_cast<size_t>(m));
      // The stage with the head also gets the token ids (multi-token prediction embeds those ahead).
      if (s == last_stage && s > 0) part.set_stage_tokens(run.inputs.at(static_cast<size_t>(m)));
      at::Tensor out = part.run(input, documents);
      if (s == last_stage && s > 0) part.set_stage_tokens(at::Tensor());
      if (s == last_stage) {
        slot.target = weighted_loss(part.training_loss()(out, run.labels.at(static_cast<size_t>(m))),
                                    run.weights.at(static_cast<size_t>(m)));
        run.loss_sum += slot.target.detach().to(at::kDouble).reshape({1});
      } else {
        slot.target = out;
        slot.output = out.detach();
        if (!run.forward_only) output_shapes_[s] = {out.sizes().vec(), out.scalar_type()};
      }
      return;
    }
    case ActionType::full_backward: return backward(run, action, true, true);
    case ActionType::backward_input: return backward(run, action, true, !options_.split_backward);
    case ActionType::backward_weight:
      if (options_.split_backward) backward(run, action, false, true);
      return;
    case ActionType::send_forward: return send(run, action, slot.output);
    case ActionType::send_backward: return send(run, action, slot.grad_input);
    case ActionType::recv_forward:
      slot.input = recv_forward(run, action, position).requires_grad_(!run.forward_only);
      return;
    case ActionType::recv_backward: {
      if (!slot.output.defined()) throw Error("pipeline: " + action.to_string() + " before its forward");
      const bool posted = run.recvs.count(position) > 0;
      slot.grad_output = take_recv(run, action, position, posted ? at::Tensor() : at::empty_like(slot.output));
      return;
    }
  }
}

void PipelineExecutor::send(Run& run, const Action& action, const at::Tensor& tensor) {
  if (!tensor.defined()) throw Error("pipeline: " + action.to_string() + " has nothing to send");
  PointToPoint p2p = point_to_point(action, program_.placement, program_.shape);
  if (p2p.tag >= kHeaderTagOffset) throw Error("pipeline: too many stages x microbatches for the p2p tags");
  at::Tensor payload = tensor.contiguous();
  if (action.type == ActionType::send_forward && run.send_headers) {
    at::Tensor header = shape_header(payload);
    run.sends.emplace_back(pp_->send_async(header, static_cast<int>(p2p.peer), p2p.tag + kHeaderTagOffset), header);
  }
  run.sends.emplace_back(pp_->send_async(payload, static_cast<int>(p2p.peer), p2p.tag), payload);
}

at::Tensor PipelineExecutor::recv_forward(Run& run, const Action& action, size_t position) {
  if (run.recvs.count(position)) return take_recv(run, action, position, at::Tensor());
  PointToPoint p2p = point_to_point(action, program_.placement, program_.shape);
  const c10::Device device = run.inputs.front().device();
  if (run.send_headers) {
    at::Tensor header = at::zeros({kHeaderLength}, at::TensorOptions().dtype(at::kLong).device(header_device(device)));
    pp_->recv_async(header, static_cast<int>(p2p.peer), p2p.tag + kHeaderTagOffset)->wait();
    header = header.cpu();
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < header[1].item<int64_t>(); ++d) sizes.push_back(header[2 + d].item<int64_t>());
    (*run.shapes)[action.stage] = {sizes, static_cast<c10::ScalarType>(header[0].item<int64_t>())};
  }
  const auto& [sizes, dtype] = run.shapes->at(action.stage);
  return take_recv(run, action, position, at::empty(sizes, at::TensorOptions().dtype(dtype).device(device)));
}

void PipelineExecutor::backward(Run& run, const Action& action, bool input_gradient, bool weight_gradient) {
  const int64_t s = action.stage, m = action.microbatch;
  const size_t i = local_index(s);
  Slot& slot = run.slots[{s, m}];
  const bool weight_only = !input_gradient;
  if (weight_only ? !slot.weight_pass : !slot.target.defined()) {
    throw Error("pipeline: " + action.to_string() + " has no forward to run back through");
  }
  std::vector<at::Tensor> grads;
  if (s < program_.shape.stages - 1 && slot.target.defined()) {
    if (!slot.grad_output.defined()) {
      // The stage after is on this rank: its input gradient is handed over in memory.
      const Slot& down = run.slots[{s + 1, m}];
      if (!down.grad_input.defined()) throw Error("pipeline: " + action.to_string() + " before its output's gradient");
      slot.grad_output = down.grad_input;
    }
    grads.push_back(slot.grad_output);
  }
  if (weight_gradient) {
    // Data parallelism reduces on the stage's last weight pass of the step.
    // (A split I on the first stage accumulates the embedding's gradient, so
    // plugins that reduce as gradients accumulate refuse the split.)
    const int64_t microbatches = program_.shape.microbatches;
    parts_[i]->set_gradient_sync(run.last_batch && run.weight_passes[i] + 1 == microbatches);
  }
  const bool has_input = s > 0;
  if (input_gradient && weight_gradient) {
    torch::autograd::backward({slot.target}, grads);
    if (has_input) slot.grad_input = slot.input.grad();
  } else if (input_gradient) {
    // Only the activation path runs (on the first stage down to the
    // embedding); what W needs is kept in the weight pass and the rest of
    // the stage's graph goes with the target.
    SplitBackward split = backward_input(slot.target, grads.empty() ? at::Tensor() : grads[0],
                                         has_input ? slot.input : at::Tensor(), part_parameters_[i]);
    slot.grad_input = std::move(split.input_gradient);
    slot.weight_pass = std::move(split.weight);
    if (run.send_headers && m == 0) {
      spdlog::info("pipeline: stage {}'s W starts from {} autograd nodes and keeps {:.2f} MiB of I's "
                   "gradients per microbatch until it runs",
                   s, slot.weight_pass->start_nodes(), slot.weight_pass->kept_gradient_bytes() / 1048576.0);
    }
    slot.target = at::Tensor();
    slot.grad_output = at::Tensor();
  } else {
    slot.weight_pass->run();
    slot.weight_pass.reset();
  }
  if (has_input && input_gradient && !slot.grad_input.defined()) {
    throw Error("pipeline: " + action.to_string() + " produced no gradient for the stage's input");
  }
  if (weight_gradient) {
    ++run.weight_passes[i];
    slot.target = at::Tensor();  // frees the stage's saved activations
    slot.grad_output = at::Tensor();
  }
}

void PipelineExecutor::write_trace() const {
  if (options_.trace_path.empty() || trace_.empty()) return;
  std::ofstream out(options_.trace_path);
  out << "{\"traceEvents\": [\n";
  for (size_t i = 0; i < trace_.size(); ++i) {
    const TraceEvent& event = trace_[i];
    out << "  {\"name\": \"" << event.name << "\", \"cat\": \"pipeline\", \"ph\": \"X\", \"pid\": " << pp_rank_
        << ", \"tid\": 0, \"ts\": " << event.start_us << ", \"dur\": " << (event.end_us - event.start_us) << "}"
        << (i + 1 < trace_.size() ? ",\n" : "\n");
  }
  out << "], \"displayTimeUnit\": \"ms\"}\n";
  if (!out) throw Error("cannot write '" + options_.trace_path + "'");
  spdlog::info("pipeline trace: {} actions written to {}", trace_.size(), options_.trace_path);
}

}  // namespace titan
