// The training loop. Plugins transform the model in canonical order before
// it is materialized, so no stage ever holds more than its shards.
#include "titan/trainer.hpp"

#include <torch/torch.h>

#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "accumulation_schedule.hpp"
#include "collective_verifier.hpp"
#include "graphed_step.hpp"
#include "initial_load.hpp"
#include "parallel_setup.hpp"
#include "pipeline_setup.hpp"
#include "step_metrics.hpp"
#include "stop_signal.hpp"
#include "train_state.hpp"
#include "titan/assets.hpp"
#include "titan/compat.hpp"
#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/grad_clip.hpp"
#include "titan/logging.hpp"
#include "titan/test_signal.hpp"
#include "titan/tokenizer.hpp"

namespace titan {

namespace {

c10::Device choose_device(const TrainingConfig& training) {
  if (training.device == "cuda") {
    if (!compat::cuda_available()) {
      throw Error("training.device is 'cuda' but this titan has no CUDA (LibTorch " +
                  std::string(torch_version_string()) + " without CUDA, or no GPU visible); use training.device=cpu");
    }
    return c10::Device(c10::kCUDA, 0);
  }
  return c10::Device(c10::kCPU);
}

int64_t bytes_of(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.numel() * tensor.element_size()) : 0;
}

// Parameters, their gradients and the optimizer's state held by this rank.
int64_t state_bytes(const std::vector<at::Tensor>& parameters, Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& param : parameters) bytes += bytes_of(param) + bytes_of(param.grad());
  for (const auto& [name, tensor] : optimizer.state_tensors()) bytes += bytes_of(tensor);
  return bytes;
}

// Every parameter gathered whole (collective), written by rank 0.
void save_full_model(CausalLM& model, const DeviceMesh* mesh, int rank, const std::string& path) {
  c10::Dict<std::string, at::Tensor> tensors;
  for (const auto& item : model.named_parameters()) {
    const TensorLayout* layout = model.layout(item.key());
    at::Tensor full = layout && mesh ? full_tensor(item.value().detach(), *layout, *mesh) : item.value().detach();
    tensors.insert(item.key(), full.cpu().clone());
  }
  gather_pipeline_stages(tensors, mesh);
  if (rank != 0) return;
  std::vector<char> bytes = torch::pickle_save(c10::IValue(tensors));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error("cannot write debug.save_final_model file '" + path + "'");
}

void write_resolved_config(const RunPlan& plan) {
  std::filesystem::create_directories(plan.core.job.dump_folder);
  std::string path = plan.core.job.dump_folder + "/config.resolved.yaml";
  std::ofstream out(path);
  out << plan.root.dump() << "\n";
  if (!out) throw Error("cannot write '" + path + "' (check job.dump_folder)");
}

int64_t accumulation_steps(const TrainingConfig& training, int64_t dp_degree) {
  if (training.global_batch_size == -1) return 1;
  int64_t per_step = training.local_batch_size * dp_degree;
  if (training.global_batch_size % per_step != 0) {
    throw Error("training.global_batch_size (" + std::to_string(training.global_batch_size) +
                ") must be a multiple of training.local_batch_size x data-parallel degree (" +
                std::to_string(training.local_batch_size) + " x " + std::to_string(dp_degree) + ")");
  }
  return training.global_batch_size / per_step;
}

// A precision plugin decides the dtypes the parallelizers gather, compute
// and reduce in, in place of training.mixed_precision_param / _reduce.
void apply_precision_policy(const RunPlan& plan, const TrainingConfig& training, ParallelizeContext& context) {
  if (!plan.precision) return;
  c10::ScalarType param = plan.precision->param_dtype(), reduce = plan.precision->reduce_dtype();
  if (!trainer_supports_dtype(param) || !trainer_supports_dtype(reduce)) {
    throw Error(std::string("the precision plugin asks for params ") + c10::toString(param) + " / reduce " +
                c10::toString(reduce) + "; the trainer supports Float and BFloat16");
  }
  if (training.mixed_precision_param != "float32" || training.mixed_precision_reduce != "float32") {
    spdlog::warn("training.mixed_precision_param / _reduce ({} / {}) are replaced by the precision plugin's",
                 training.mixed_precision_param, training.mixed_precision_reduce);
  }
  context.param_dtype = param;
  context.reduce_dtype = reduce;
  spdlog::info("precision policy: params {} / reduce {}, loss within {} of float32", c10::toString(param),
               c10::toString(reduce), plan.precision->loss_tolerance());
}

// Test-only (TITAN_TEST_SIGNAL): the fault matrix's forward and backward
// phases, as the outermost forward wrapper and a hook on its output.
void add_test_signal_hooks(CausalLM& model, const std::shared_ptr<int64_t>& step) {
  const bool forward = test_signal_armed("forward"), backward = test_signal_armed("backward");
  if (!forward && !backward) return;
  model.add_forward_wrapper([step, forward, backward](const at::Tensor& tokens, const ForwardBody& inner) {
    if (forward) test_signal_point("forward", *step);
    at::Tensor out = inner(tokens);
    if (backward && out.requires_grad()) {
      out.register_hook([step](const at::Tensor& grad) {
        test_signal_point("backward", *step);
        return grad;
      });
    }
    return out;
  });
}

// What a replayed CUDA graph cannot hold: host-driven pipeline actions and
// collectives across processes (not verified under capture yet).
void check_cuda_graph_plan(const RunPlan& plan, const World& world) {
  if (!plan.core.training.cuda_graph) return;
  if (plan.pipeline) {
    throw Error("training.cuda_graph: the pipeline's schedule runs from the host step by step and cannot be "
                "captured; remove the pipeline plugin or set training.cuda_graph=false");
  }
  if (world.distributed()) {
    throw Error("training.cuda_graph: supported on one rank only (world size is " +
                std::to_string(world.world_size) + "); set training.cuda_graph=false for multi-rank runs");
  }
}

}  // namespace

TrainResult train(RunPlan& plan, const World& world) {
  const CoreConfig& core = plan.core;
  const TrainingConfig& training = core.training;
  if (world.rank == 0) write_resolved_config(plan);
  check_cuda_graph_plan(plan, world);
  // LibTorch starts with one intra-op thread here; use the machine unless told.
  int threads = training.threads > 0 ? static_cast<int>(training.threads)
                                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  at::manual_seed(static_cast<uint64_t>(training.seed));
  if (training.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  c10::Device device = choose_device(training);

  auto tokenizer = std::shared_ptr<const Tokenizer>(load_tokenizer(resolve_asset(core.tokenizer_path)));
  plan.model->set_vocab_size(tokenizer->vocab_size());
  std::string data = training.dataset_path.empty() ? training.dataset : resolve_asset(training.dataset_path);
  // Observers (e.g. the flight recorder) see every collective from here on.
  CollectiveVerifier verifier;
  struct ObserverScope {
    ObserverScope(RunPlan& plan, CollectiveVerifier* verifier) {
      for (auto& observer : plan.comm_observers) add_comm_observer(observer.get());
      if (verifier) add_comm_observer(verifier);
    }
    ~ObserverScope() { clear_comm_observers(); }
  } observer_scope(plan, core.comm.verify_collectives && world.distributed() ? &verifier : nullptr);
  ParallelSetup parallel(world, plan);
  plan.checkpointer->attach(CheckpointEnv{world.rank, world.world_size, parallel.mesh(), parallel.checkpoint_comm(),
                                          plan.root.dump()});
  TokenWindowLoader loader(open_dataset(data), tokenizer, training.seq_len, parallel.dp_rank(),
                           parallel.dp_degree());

  auto dtype_of = [](const std::string& name) { return name == "bfloat16" ? c10::kBFloat16 : c10::kFloat; };
  ParallelizeContext parallel_context{*plan.model, device, parallel.mesh(),
                                      dtype_of(training.mixed_precision_param),
                                      dtype_of(training.mixed_precision_reduce)};
  apply_precision_policy(plan, training, parallel_context);
  // The precision conversion, then every parallelizer in canonical order
  // (the pipeline split is the trainer's own: one part per stage).
  auto transform = [&](CausalLM& part) {
    bool converted = false;
    for (auto& [name, parallelizer] : plan.parallelizers) {
      if (parallelizer->stage() == Stage::pipeline_split) continue;
      if (!converted && parallelizer->stage() > Stage::precision_conversion) {
        if (plan.precision) plan.precision->convert(part);
        converted = true;
      }
      spdlog::info("applying {} ({})", name, stage_name(parallelizer->stage()));
      parallelizer->parallelize(part, parallel_context);
    }
    if (!converted && plan.precision) plan.precision->convert(part);
  };
  std::shared_ptr<CausalLM> model;
  std::unique_ptr<PipelineExecutor> pipeline;
  CausalLM* first_stage = nullptr;  // where the test-only fault hooks go
  if (plan.pipeline) {
    PipelineModel built = build_pipeline_model(plan, parallel.mesh(), world.rank, device, transform);
    model = built.model;
    first_stage = built.model->parts().front().get();
    pipeline = std::move(built.executor);
  } else {
    model = plan.model->build(c10::Device(c10::kMeta));
    transform(*model);
    materialize_module(*model, device);
    first_stage = model.get();
  }
  model->init_weights(static_cast<uint64_t>(training.seed));
  model->train();
  int64_t local_bytes = 0;
  for (const auto& param : model->parameters()) local_bytes += param.numel() * param.element_size();
  spdlog::info("model {} flavor {}: {:.2f}M parameters, vocab {}, on {}; this rank holds {:.1f} MiB of them, "
               "peak resident {:.1f} MiB after init",
               plan.model_plugin, plan.model->flavor(), plan.model->num_params() / 1e6, plan.model->vocab_size(),
               device.str(), local_bytes / 1048576.0, max_resident_bytes() / 1048576.0);
  if (core.debug.exit_after_init) return TrainResult{};

  std::vector<NamedParameter> parameters;
  std::vector<at::Tensor> parameter_tensors;
  std::vector<std::string> parameter_names;
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    parameters.push_back({item.key(), item.value()});
    parameter_tensors.push_back(item.value());
    parameter_names.push_back(item.key());
  }
  const NormReduceFn norm_reduce = parallel.norm_reduce();
  const std::vector<double> norm_weights = parallel.norm_weights(*model, parameter_names);
  std::unique_ptr<Optimizer> optimizer = plan.optimizer->build(parameters);
  AccumulationSchedule default_schedule;
  Schedule& schedule = plan.schedule ? *plan.schedule : default_schedule;
  auto forward_backward = [&](const std::vector<Microbatch>& microbatches) {
    return schedule.step(*model, microbatches, model->loss());
  };
  std::unique_ptr<GraphedStep> graphed;
  if (training.cuda_graph) graphed = std::make_unique<GraphedStep>(device, training.cuda_graph_warmup_steps, parameter_tensors);

  TrainStateView state(*model, *optimizer, loader);
  int64_t step = 0;
  if (auto loaded = plan.checkpointer->load(state.slots())) {
    step = state.restore(state.slots());
    spdlog::info("resumed from checkpoint at step {} (data position {})", step, loader.position());
  } else {
    load_initial_weights(*plan.checkpointer, *plan.model, *model);  // checkpoint.initial_load_path, if set
  }
  // No step left to run; the loaded model is still saved if asked
  // (debug.save_final_model), so a finished run can be inspected.
  const bool already_finished = step >= training.steps;
  if (already_finished) {
    spdlog::info("the checkpoint at step {} already finished this run (training.steps = {}); nothing to train. "
                 "Raise training.steps to train further",
                 step, training.steps);
  }

  double peak = core.metrics.peak_flops;
  if (peak == 0) peak = device.is_cuda() ? 0 : measure_cpu_peak_flops();
  std::vector<MetricsSink*> sinks;
  for (auto& sink : plan.metrics_sinks) sinks.push_back(sink.get());
  MetricsConfig metrics_config = core.metrics;
  if (world.rank != 0) metrics_config.enable_jsonl = false;  // one file per job
  // Each pp rank computes its stages' share of every token (an even share:
  // MFU stays a per-rank figure, not pp times one).
  const double pp_degree = parallel.mesh() ? static_cast<double>(parallel.mesh()->size("pp")) : 1.0;
  StepMetrics metrics(metrics_config, core.job.dump_folder, plan.model->flops_per_token(training.seq_len) / pp_degree,
                      peak, sinks, device);

  const int64_t accumulation = accumulation_steps(training, parallel.dp_degree());
  auto current_step = std::make_shared<int64_t>(step);
  add_test_signal_hooks(*first_stage, current_step);
  const int64_t debug_nan_step = core.debug.inject_nonfinite_loss_at_step;
  StopSignal stop;
  TrainResult result;
  result.first_step = step + 1;
  result.last_step = step;
  result.already_finished = already_finished;
  StepRecord record;
  while (step < training.steps) {
    ++step;
    *current_step = step;
    CallSite step_site("step " + std::to_string(step));  // observers see "step 12 / fsdp all_gather layers.3"
    std::vector<Microbatch> microbatches;
    for (int64_t i = 0; i < accumulation; ++i) {
      at::Tensor windows = loader.next_batch(training.local_batch_size).to(device);
      int64_t length = windows.size(1) - 1;
      microbatches.push_back({windows.narrow(1, 0, length), windows.narrow(1, 1, length)});
    }
    at::Tensor loss = pipeline  ? pipeline->step(microbatches)
                      : graphed ? graphed->run(microbatches, forward_backward)
                                : forward_backward(microbatches);
    model->finalize_gradients();
    double loss_value = parallel.mean_over_batch(loss.item<double>());
    if (step == debug_nan_step) loss_value = std::nan("");
    double grad_norm = clip_grad_norm(parameter_tensors, training.max_norm, 2.0, norm_reduce, norm_weights);
    double lr = plan.optimizer->base_lr() * plan.lr_schedule->factor(step);
    if (!std::isfinite(loss_value) || !std::isfinite(grad_norm)) {
      if (training.on_nonfinite_loss == "error") {
        throw Error("step " + std::to_string(step) + ": loss is " + std::to_string(loss_value) + " and grad norm " +
                    std::to_string(grad_norm) +
                    "; training stopped (checkpoints already saved are kept). Lower optimizer.lr, check the "
                    "data, or set training.on_nonfinite_loss=skip to skip such steps");
      }
      spdlog::warn("step {}: non-finite loss {} / grad norm {}; optimizer step skipped", step, loss_value, grad_norm);
      ++result.skipped_steps;
    } else {
      test_signal_point("optimizer", step);
      optimizer->step(lr);
    }
    if (core.comm.verify_collectives && world.distributed() && step == result.first_step) {
      CallSite site("verify_collectives");
      verifier.verify(parallel.mesh()->group("world"), step);
    }
    int64_t bytes = state_bytes(parameter_tensors, *optimizer);
    optimizer->zero_grad();
    record = {step, loss_value, grad_norm, lr, training.local_batch_size * training.seq_len * accumulation, bytes};
    metrics.record(record);
    bool stopping = stop.requested();
    if (plan.checkpointer->should_save(step, step == training.steps) || (stopping && plan.checkpointer->enabled())) {
      plan.checkpointer->save(step, state.capture(step));
    }
    plan.checkpointer->poll();
    result.last_step = step;
    result.last_loss = loss_value;
    if (world.rank == core.debug.crash_rank && step == core.debug.crash_at_step) std::raise(SIGKILL);
    if (stopping) {
      spdlog::warn("received signal {}; stopped cleanly after step {}", stop.signal_number(), step);
      result.stopped_by_signal = true;
      break;
    }
  }
  metrics.flush_pending(record);
  if (!core.debug.save_final_model.empty()) save_full_model(*model, parallel.mesh(), world.rank, core.debug.save_final_model);
  plan.checkpointer->wait();
  return result;
}

}  // namespace titan
