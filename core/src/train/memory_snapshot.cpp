// Memory snapshots on TorchTitan's schedule, and out-of-memory errors
// turned into messages a person can act on.
#include "memory_snapshot.hpp"

#include <c10/util/Exception.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cpu_memory_timeline.hpp"
#include "titan/compat.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace {

// As TorchTitan's MEMORY_SNAPSHOT_MAX_ENTRIES: the CUDA history's length,
// and the CPU timeline's samples per window.
constexpr size_t kMaxEntries = 100000;

// LibTorch's message without its C++ backtrace.
std::string short_message(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string message = c10_error ? c10_error->what_without_backtrace() : error.what();
  const size_t line_end = message.find('\n');
  return line_end == std::string::npos ? message : message.substr(0, line_end);
}

}  // namespace

MemorySnapshot::MemorySnapshot(const ProfilingConfig& config, const std::string& dump_folder, int rank,
                               const c10::Device& device)
    : config_(config), dump_folder_(dump_folder), rank_(rank), device_(device) {
  if (!enabled()) return;
  if (device.is_cuda()) {
    compat::record_cuda_memory_history(true, kMaxEntries);
    recording_cuda_ = true;
  } else {
    cpu_ = std::make_unique<CpuMemoryTimeline>(kMaxEntries);
  }
  spdlog::info("memory snapshots every {} steps and on out-of-memory in {}", config.profile_freq,
               (std::filesystem::path(dump_folder) / config.save_memory_snapshot_folder).string());
}

MemorySnapshot::~MemorySnapshot() {
  if (!recording_cuda_) return;
  try {
    compat::record_cuda_memory_history(false, 0);
  } catch (const std::exception&) {
  }
}

void MemorySnapshot::before_step(int64_t step) {
  if (cpu_) cpu_->set_step(step);
}

void MemorySnapshot::after_step(int64_t step) {
  if (!enabled() || step % config_.profile_freq != 0) return;
  write("iteration_" + std::to_string(step), "period");
}

std::string MemorySnapshot::write(const std::string& iteration, const std::string& reason) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  const fs::path folder = fs::path(dump_folder_) / config_.save_memory_snapshot_folder / iteration;
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) {
    throw Error("profiling: cannot create " + folder.string() + ": " + error.message() +
                " (check job.dump_folder and profiling.save_memory_snapshot_folder)");
  }
  const std::string stem = "rank" + std::to_string(rank_) + "_memory_snapshot";
  const fs::path file = folder / (cpu_ ? stem + ".json" : stem + ".pickle");
  const std::string bytes = cpu_ ? cpu_->take_window(reason, rank_) : compat::cuda_memory_snapshot_pickle();
  std::ofstream out(file, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error("profiling: cannot write memory snapshot " + file.string() + " (disk full?)");
  spdlog::info("memory snapshot: wrote {} in {:.2f} s", file.string(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return file.string();
}

void MemorySnapshot::fail_if_out_of_memory(const std::exception& error, const std::string& what, int64_t done_step) {
  if (!compat::is_out_of_memory(error)) return;
  std::string message = what + " ran out of memory on rank " + std::to_string(rank_) + " (" + device_.str() +
                        "): " + short_message(error) + ". ";
  if (enabled()) {
    // TorchTitan's name for it: the last step that finished, then _exit.
    try {
      const std::string file = write("iteration_" + std::to_string(done_step) + "_exit", "out_of_memory");
      message += "Memory snapshot: " + file +
                 (cpu_ ? " (its format: docs/memory_snapshot.md). " : " (open it in https://pytorch.org/memory_viz). ");
    } catch (const std::exception& write_error) {
      message += "The memory snapshot could not be written: " + std::string(write_error.what()) + ". ";
    }
  } else {
    message += "Set profiling.enable_memory_snapshot=true to see what filled it. ";
  }
  message +=
      "To fit: lower training.local_batch_size or training.seq_len (training.global_batch_size keeps the batch "
      "through gradient accumulation), checkpoint activations (the activation_checkpoint plugin), or shard the "
      "model and its state over more ranks (fsdp, tensor_parallel, pipeline)";
  throw Error(message);
}

}  // namespace titan
