// Atomic commit: write into step-N.partial-<pid>, fsync, metadata last,
// rename to step-N, fsync the parent. Old steps are pruned only after.
#include "whole_state_checkpointer.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tensor_file.h"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string step_folder(const std::string& folder, int64_t step) {
  return (fs::path(folder) / ("step-" + std::to_string(step))).string();
}

std::string hex(uint32_t value) {
  std::ostringstream out;
  out << std::hex << value;
  return out.str();
}

}  // namespace

std::vector<int64_t> committed_steps(const std::string& folder) {
  std::vector<int64_t> steps;
  std::error_code error;
  if (!fs::is_directory(folder, error)) return steps;
  static const std::regex pattern("step-([0-9]+)");
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    std::smatch match;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, pattern) && fs::exists(entry.path() / "metadata.json")) {
      steps.push_back(std::stoll(match[1].str()));
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

WholeStateCheckpointer::WholeStateCheckpointer(CheckpointOptions options) : options_(std::move(options)) {}

void WholeStateCheckpointer::attach(const CheckpointEnv& env) {
  if (options_.enable && env.world_size > 1) {
    throw Error("checkpoint.enable is true in a " + std::to_string(env.world_size) +
                "-process job, but the whole-state `checkpoint` plugin saves one process only; use the sharded "
                "checkpointer (checkpoint.name=dcp)");
  }
}

bool WholeStateCheckpointer::should_save(int64_t step, bool last_step) const {
  return options_.enable && (last_step || step % options_.interval == 0);
}

void WholeStateCheckpointer::save(int64_t step, const TrainState& state) {
  fs::create_directories(options_.folder);
  std::string final_dir = step_folder(options_.folder, step);
  std::string partial = final_dir + ".partial-" + std::to_string(::getpid());
  fs::remove_all(partial);
  fs::create_directories(partial);
  std::map<std::string, at::Tensor> tensors = state.tensors;
  for (const auto& [name, tensor] : state.rank_local) tensors[name] = tensor;  // one process: its own
  uint32_t crc = write_tensor_file((fs::path(partial) / "state.bin").string(), tensors);
  nlohmann::json metadata = {{"format", "titan-whole-state-1"}, {"step", step},
                             {"values", state.values}, {"files", {{"state.bin", hex(crc)}}}};
  {
    std::ofstream out(fs::path(partial) / "metadata.json");
    out << metadata.dump(2) << "\n";
    if (!out) throw Error("writing checkpoint metadata in '" + partial + "' failed (disk full?)");
  }
  fsync_path(fs::path(partial) / "metadata.json");
  fsync_path(partial);
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-save of the same step replaces it
  fs::rename(partial, final_dir);
  fsync_path(options_.folder);
  spdlog::info("checkpoint saved: {}", final_dir);
  prune();
}

void WholeStateCheckpointer::prune() const {
  if (options_.keep_latest_k <= 0) return;
  auto steps = committed_steps(options_.folder);
  for (size_t i = 0; i + options_.keep_latest_k < steps.size(); ++i) {
    fs::remove_all(step_folder(options_.folder, steps[i]));
  }
}

std::optional<int64_t> WholeStateCheckpointer::load(TrainState& state) {
  if (!options_.enable) return std::nullopt;
  auto steps = committed_steps(options_.folder);
  if (steps.empty()) {
    if (options_.load_step >= 0) {
      throw Error("checkpoint.load_step is " + std::to_string(options_.load_step) + " but '" + options_.folder +
                  "' holds no checkpoint");
    }
    return std::nullopt;
  }
  int64_t step = options_.load_step >= 0 ? options_.load_step : steps.back();
  if (std::find(steps.begin(), steps.end(), step) == steps.end()) {
    throw Error("checkpoint.load_step " + std::to_string(step) + " not found in '" + options_.folder + "'");
  }
  std::string dir = step_folder(options_.folder, step);
  nlohmann::json metadata;
  try {
    std::ifstream in(fs::path(dir) / "metadata.json");
    metadata = nlohmann::json::parse(in);
  } catch (const std::exception& error) {
    throw Error("checkpoint '" + dir + "': metadata.json is corrupt (" + error.what() + ")");
  }
  std::string file = (fs::path(dir) / "state.bin").string();
  std::string expected = metadata["files"]["state.bin"].get<std::string>();
  std::string actual = hex(file_crc32(file));
  if (expected != actual) {
    std::string earlier;
    for (int64_t s : steps) {
      if (s < step) earlier = std::to_string(s);
    }
    throw Error("checkpoint '" + dir + "': state.bin fails its checksum (expected " + expected + ", got " + actual +
                "); nothing was loaded" +
                (earlier.empty() ? "" : "; to resume from the previous one set checkpoint.load_step=" + earlier));
  }
  std::map<std::string, at::Tensor> targets = state.tensors;  // aliases: filled in place
  for (const auto& [name, tensor] : state.rank_local) targets[name] = tensor;
  read_tensor_file(file, targets);
  state.values = metadata["values"].get<std::map<std::string, std::string>>();
  return step;
}

}  // namespace titan::checkpoint
