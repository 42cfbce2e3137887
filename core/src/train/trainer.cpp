// The training loop (run_training): build the run, then step until
// training.steps, a stop signal or an error, with metrics and checkpoints
// after each step.
// One step is TrainingRun::step (train_step.cpp); building is
// training_run.cpp.
#include "titan/trainer.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>

#include "pipeline/pipeline_setup.hpp"
#include "stop_signal.hpp"
#include "training_run.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace {

// Every parameter gathered whole (collective) and the step hooks' state, written by rank 0.
void save_full_model(CausalLM& model, const DeviceMesh* mesh, int rank, const std::string& path) {
  c10::Dict<std::string, at::Tensor> tensors;
  for (const auto& item : model.named_parameters()) {
    const TensorLayout* layout = model.layout(item.key());
    at::Tensor full = layout && mesh ? full_tensor(item.value().detach(), *layout, *mesh) : item.value().detach();
    tensors.insert(item.key(), full.cpu().clone());
  }
  // The step hooks' state (the routers' load-balancing biases): what the
  // optimizer does not step but training changes, the same on every rank.
  for (const StepHook* hook : model.step_hooks()) {
    if (!hook->state) continue;
    for (const auto& [name, tensor] : hook->state()) tensors.insert(name, tensor.detach().cpu().clone());
  }
  gather_pipeline_stages(tensors, mesh);
  if (rank != 0) return;
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(tensors));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error("cannot write debug.save_final_model file '" + path + "'");
}

void write_resolved_config(const RunSpec& spec) {
  std::filesystem::create_directories(spec.core.run_folder());
  std::string path = spec.core.run_folder() + "/config.resolved.yaml";
  std::ofstream out(path);
  out << spec.root.dump() << "\n";
  if (!out) throw Error("cannot write '" + path + "' (check job.dump_folder)");
}

}  // namespace

TrainResult run_training(RunSpec& spec, const World& world, const RunSeams& seams) {
  const CoreConfig& core = spec.core;
  if (world.rank == 0) write_resolved_config(spec);
  TrainingRun run(spec, world, seams);
  if (core.debug.exit_after_init) return TrainResult{};

  TrainResult result;
  result.first_step = run.resumed_step + 1;
  result.last_step = run.resumed_step;
  // No step left to run; the loaded model is still saved if asked
  // (debug.save_final_model), so a finished run can be inspected.
  result.already_finished = run.resumed_step >= core.training.steps;
  if (result.already_finished) {
    spdlog::info("the checkpoint at step {} already finished this run (training.steps = {}); nothing to train. "
                 "Raise training.steps to train further",
                 run.resumed_step, core.training.steps);
  }
  StopSignal stop;
  StepRecord record;
  for (int64_t step = run.resumed_step + 1; step <= core.training.steps; ++step) {
    if (run.replicas) {
      // The quorum of replica groups; a group behind the others jumps to theirs.
      step = run.join_replica_groups(step);
      if (step > core.training.steps) break;
    }
    run.profiler->before_step(step);
    run.memory_snapshot->before_step(step);
    bool discarded = false;
    record = run.memory_snapshot->watch("step " + std::to_string(step), step - 1, [&] {
      StepOutcome outcome = run.step(step);
      discarded = outcome.discarded;
      return outcome.record;
    });
    run.profiler->after_step(step);
    run.memory_snapshot->after_step(step);
    if (discarded) {  // a replica group failed in it: the same step again, with the next quorum
      --step;
      continue;
    }
    run.metrics->record(record);
    if (run.validator && run.validator->due(step)) {
      const ValidationResult validation = run.memory_snapshot->watch(
          "the validation after step " + std::to_string(step), step, [&] { return run.validator->run(*run.model); });
      run.metrics->record_validation(step, validation.loss, validation.tokens_per_sec, validation.batches);
    }
    // A background save that failed stops training here, a step or more
    // after the step that started it (never racing that step's own save).
    spec.checkpointer->poll();
    const bool stopping = stop.requested();
    // Of a fault-tolerant job's replica groups, only the quorum's first
    // writes the checkpoints they share: every member holds the same state.
    const bool writes_checkpoints = !run.replicas || run.replicas->writes_checkpoints();
    if (writes_checkpoints && (spec.checkpointer->should_save(step, step == core.training.steps) ||
                               (stopping && spec.checkpointer->enabled()))) {
      run.check_nonfinite();  // never a checkpoint of a diverged model
      spec.checkpointer->save(step, run.state->capture(step));
    }
    result.last_step = step;
    run.observer->after_step();
    if (stopping) {
      spdlog::warn("received signal {}; stopped cleanly after step {}", stop.signal_number(), step);
      result.stopped_by_signal = true;
      break;
    }
  }
  run.check_nonfinite();
  run.metrics->flush_pending(record);
  read_numbers(record);
  result.last_loss = record.loss;
  if (!core.debug.save_final_model.empty()) {
    save_full_model(*run.model, run.parallel->mesh(), world.rank, core.debug.save_final_model);
  }
  spec.checkpointer->wait();
  return result;
}

}  // namespace titan
