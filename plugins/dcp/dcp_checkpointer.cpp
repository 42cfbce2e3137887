// Save: stage (training thread) -> write shards -> gather every rank's
// description -> rank 0 commits -> all ranks agree it committed. Load:
// newest committed step first; every rank must load it intact, otherwise
// all fall back together to the previous one (with load_step -1).
#include "dcp_checkpointer.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "state_exchange.h"
#include "step_folders.h"
#include "titan/compat.hpp"
#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"
#include "titan/test_signal.hpp"

namespace titan::dcp {

namespace fs = std::filesystem;

namespace {

const char* kRankLocalPrefix = "rank_local/";

std::string shard_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard-%05d.bin", rank);
  return name;
}

std::string shape_text(const std::vector<int64_t>& shape) { return c10::str(c10::IntArrayRef(shape)); }

Box whole_box(const std::vector<int64_t>& shape) { return {std::vector<int64_t>(shape.size(), 0), shape}; }

// Fills `target` (holding `box` of tensor `name`) from the saved shards;
// every element must be covered.
void fill_tensor(const std::string& dir, const std::string& name, const TensorEntry& entry, at::Tensor& target,
                 const Box& box) {
  int64_t filled = 0;
  for (const auto& shard : entry.shards) filled += copy_overlap(dir, shard, entry.dtype, target, box);
  if (filled != box.numel()) {
    throw Error("checkpoint '" + dir + "': tensor '" + name + "' covers only " + std::to_string(filled) + " of the " +
                std::to_string(box.numel()) + " elements this rank needs (a shard is missing from metadata.json)");
  }
}

// Writes `rank`'s shard file into `dir` and records each piece's shard
// (and the file's size) in `metadata`, which already names the tensors.
void write_pieces(const std::string& dir, int rank, const std::vector<Piece>& pieces, CheckpointMetadata& metadata) {
  std::string file = shard_file_name(rank);
  std::vector<ShardRecord> records = write_shard_file(dir + "/" + file, file, pieces);
  int64_t bytes = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string& name = pieces[i].name;
    bytes += records[i].bytes;
    if (name.rfind(kRankLocalPrefix, 0) == 0) {
      metadata.rank_local[name.substr(std::string(kRankLocalPrefix).size())][rank].shards.push_back(records[i]);
    } else {
      metadata.tensors[name].shards.push_back(records[i]);
    }
  }
  metadata.files[file] = bytes;
}

void write_text_file(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path);
    out << text;
    out.flush();
    if (!out) throw Error("cannot write '" + path + "' (disk full?)");
  }
  fsync_path(path);
}

}  // namespace

DcpCheckpointer::DcpCheckpointer(DcpOptions options) : options_(std::move(options)) {}

void DcpCheckpointer::attach(const CheckpointEnv& env) {
  env_ = env;
  if (env.world_size > 1 && !env.comm) {
    throw Error("dcp: a " + std::to_string(env.world_size) + "-process job without a checkpoint group");
  }
}

bool DcpCheckpointer::should_save(int64_t step, bool last_step) const {
  return options_.enable && (last_step || step % options_.interval == 0);
}

at::Tensor DcpCheckpointer::staging_copy(const std::string& name, const at::Tensor& tensor, at::ScalarType dtype) {
  at::Tensor source = tensor.detach();
  if (options_.async_mode == AsyncMode::disabled) return source.to(at::kCPU, dtype).contiguous();
  // Async: the training thread keeps changing `tensor`, so the writer gets
  // a private copy, in a buffer kept for the next save.
  at::Tensor& buffer = staging_[name];
  if (!buffer.defined() || buffer.sizes() != source.sizes() || buffer.scalar_type() != dtype) {
    bool pin = options_.async_mode == AsyncMode::async_with_pinned_mem && source.is_cuda();
    buffer = at::empty(source.sizes(), at::TensorOptions().dtype(dtype).pinned_memory(pin));
  }
  buffer.copy_(source);
  return buffer;
}

StagedSave DcpCheckpointer::stage(int64_t step, const TrainState& state) {
  StagedSave staged;
  staged.step = step;
  bool model_only = options_.last_save_model_only && step == options_.training_steps;
  CheckpointMetadata& fragment = staged.fragment;
  fragment.step = step;
  fragment.world_size = env_.world_size;
  fragment.mesh = env_.mesh ? env_.mesh->describe() : "single process";
  fragment.model_only = model_only;
  fragment.values = state.values;
  for (const auto& [name, tensor] : state.tensors) {
    if (model_only && name.rfind("model.", 0) != 0) continue;
    auto layout = state.layouts.find(name);
    bool sharded = layout != state.layouts.end();
    at::ScalarType dtype = model_only && tensor.is_floating_point() ? options_.export_dtype : tensor.scalar_type();
    std::vector<int64_t> shape = sharded ? layout->second.global_shape : tensor.sizes().vec();
    fragment.tensors[name] = TensorEntry{dtype, shape, {}};
    // One copy of every piece: the first replica of a shard, rank 0 for a whole tensor.
    bool writes = sharded ? (!env_.mesh || layout->second.is_first_copy(*env_.mesh)) : env_.rank == 0;
    if (!writes || tensor.numel() == 0) continue;
    Box box = sharded ? Box{layout->second.local_offset, layout->second.local_shape} : whole_box(shape);
    staged.pieces.push_back({name, staging_copy(name, tensor, dtype), box});
  }
  if (model_only) return staged;
  for (const auto& [name, tensor] : state.rank_local) {
    std::string piece_name = kRankLocalPrefix + name;
    fragment.rank_local[name][env_.rank] = TensorEntry{tensor.scalar_type(), tensor.sizes().vec(), {}};
    staged.pieces.push_back({piece_name, staging_copy(piece_name, tensor, tensor.scalar_type()),
                             whole_box(tensor.sizes().vec())});
  }
  return staged;
}

void DcpCheckpointer::save(int64_t step, const TrainState& state) {
  background_.wait();  // one save in flight at a time; its error surfaces here
  StagedSave staged = stage(step, state);
  if (options_.async_mode == AsyncMode::disabled) {
    write(staged);
    return;
  }
  background_.start([this, staged = std::move(staged)] { write(staged); });
}

void DcpCheckpointer::write(const StagedSave& staged) const {
  // Local failures are recorded, never thrown before the collectives
  // below: every rank must reach them, or the others would wait forever.
  std::string partial = partial_dir(options_.folder, staged.step);
  CheckpointMetadata fragment = staged.fragment;
  if (env_.rank == 0) {
    try {
      fs::remove_all(partial);  // debris of an interrupted earlier attempt
      fs::create_directories(partial);
    } catch (const std::exception& error) {
      fragment.error = std::string("cannot create '") + partial + "': " + error.what();
    }
  }
  barrier(env_.comm);
  test_signal_point("checkpoint_write", staged.step);  // test-only: a rank lost mid-save
  try {
    if (fragment.error.empty() && !staged.pieces.empty()) {
      write_pieces(partial, env_.rank, staged.pieces, fragment);
    }
  } catch (const std::exception& error) {
    fragment.error = error.what();
  }
  std::vector<std::string> fragments = all_gather_text(env_.comm, to_json_text(fragment));
  test_signal_point("checkpoint_commit", staged.step);  // test-only: a rank lost while rank 0 commits
  std::string commit_error;
  if (env_.rank == 0) {
    try {
      commit(staged, fragments);
    } catch (const std::exception& error) {
      commit_error = error.what();
    }
  }
  if (!all_ok(env_.comm, commit_error.empty())) {
    throw Error("checkpoint of step " + std::to_string(staged.step) + " was not committed: " +
                (commit_error.empty() ? "rank 0 reported a failure (see its log)" : commit_error) +
                "; earlier checkpoints are intact");
  }
}

void DcpCheckpointer::commit(const StagedSave& staged, const std::vector<std::string>& fragments) const {
  std::string partial = partial_dir(options_.folder, staged.step);
  CheckpointMetadata metadata = staged.fragment;
  metadata.tensors.clear();
  metadata.rank_local.clear();
  for (size_t rank = 0; rank < fragments.size(); ++rank) {
    CheckpointMetadata fragment = from_json_text(fragments[rank], "rank " + std::to_string(rank) + "'s shard list");
    if (!fragment.error.empty()) throw Error("rank " + std::to_string(rank) + ": " + fragment.error);
    metadata.merge(fragment);
  }
  // The pieces must tile every tensor exactly: wrong layouts are caught
  // here, at save time, not when someone tries to resume.
  for (const auto& [name, entry] : metadata.tensors) {
    int64_t covered = 0;
    for (const auto& shard : entry.shards) covered += shard.box.numel();
    int64_t expected = whole_box(entry.shape).numel();
    if (covered != expected) {
      throw Error("tensor '" + name + "' " + shape_text(entry.shape) + ": the ranks' pieces hold " +
                  std::to_string(covered) + " elements, expected " + std::to_string(expected) +
                  " (a parallelizer's layouts do not tile the tensor)");
    }
  }
  if (!env_.config_yaml.empty()) write_text_file(partial + "/config.yaml", env_.config_yaml + "\n");
  write_metadata(partial, metadata);
  std::string final_dir = step_dir(options_.folder, staged.step);
  commit_rename(partial, final_dir);
  spdlog::info("checkpoint saved: {}{}", final_dir, metadata.model_only ? " (model only)" : "");
  prune(options_.folder, options_.keep_latest_k);
}

void DcpCheckpointer::fill(const std::string& dir, const CheckpointMetadata& metadata, TrainState& state) const {
  for (auto& [name, tensor] : state.tensors) {
    auto entry = metadata.tensors.find(name);
    if (entry == metadata.tensors.end()) {
      if (metadata.model_only && name.rfind("model.", 0) != 0) continue;  // fresh optimizer state
      throw Error("checkpoint '" + dir + "' has no tensor '" + name +
                  "' (saved by another model, flavor or optimizer?)");
    }
    auto layout = state.layouts.find(name);
    bool sharded = layout != state.layouts.end();
    std::vector<int64_t> shape = sharded ? layout->second.global_shape : tensor.sizes().vec();
    if (shape != entry->second.shape) {
      throw Error("checkpoint '" + dir + "': tensor '" + name + "' has shape " + shape_text(entry->second.shape) +
                  " but this job's is " + shape_text(shape) + " (another model flavor or vocabulary?)");
    }
    Box box = sharded ? Box{layout->second.local_offset, layout->second.local_shape} : whole_box(shape);
    fill_tensor(dir, name, entry->second, tensor, box);
  }
  for (auto it = state.rank_local.begin(); it != state.rank_local.end();) {
    auto saved = metadata.rank_local.find(it->first);
    const TensorEntry* entry = nullptr;
    if (saved != metadata.rank_local.end() && metadata.world_size == env_.world_size) {
      auto mine = saved->second.find(env_.rank);
      if (mine != saved->second.end()) entry = &mine->second;
    }
    if (!entry || entry->shape != it->second.sizes().vec()) {
      // Per-rank state of another world size has no meaning here.
      it = state.rank_local.erase(it);
      continue;
    }
    fill_tensor(dir, it->first, *entry, it->second, whole_box(entry->shape));
    ++it;
  }
}

std::optional<int64_t> DcpCheckpointer::load(TrainState& state) {
  if (!options_.enable) return std::nullopt;
  std::vector<int64_t> steps = committed_steps(options_.folder);
  if (options_.load_step >= 0) {
    if (std::find(steps.begin(), steps.end(), options_.load_step) == steps.end()) {
      throw Error("checkpoint.load_step is " + std::to_string(options_.load_step) + " but '" + options_.folder +
                  "' has no committed step-" + std::to_string(options_.load_step));
    }
    steps = {options_.load_step};
  }
  std::vector<std::string> refused;
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    std::string dir = step_dir(options_.folder, *step);
    std::string error;
    CheckpointMetadata metadata;
    try {
      metadata = read_metadata(dir);
      fill(dir, metadata, state);
    } catch (const std::exception& failure) {
      error = failure.what();
    }
    if (all_ok(env_.comm, error.empty())) {
      state.values = metadata.values;
      if (metadata.world_size != env_.world_size) {
        spdlog::info("checkpoint {} was saved by {} ranks ({}); resharded onto {} ranks", dir, metadata.world_size,
                     metadata.mesh, env_.world_size);
      }
      if (!refused.empty()) spdlog::warn("resumed from {}, the newest intact checkpoint", dir);
      return *step;
    }
    std::string reason = error.empty() ? "another rank could not read it (see that rank's log)" : error;
    if (options_.load_step >= 0) {
      throw Error("cannot load checkpoint.load_step " + std::to_string(*step) + ": " + reason + "; nothing was loaded");
    }
    spdlog::error("checkpoint {} is unusable, trying the previous one: {}", dir, reason);
    refused.push_back(dir);
  }
  if (refused.empty()) return std::nullopt;
  throw Error("no intact checkpoint in '" + options_.folder + "' (" + std::to_string(refused.size()) +
              " refused, see above); nothing was deleted. Move the corrupt step folders away to start fresh, or "
              "restore them from a copy");
}

const CheckpointMetadata& DcpCheckpointer::cached_metadata(const std::string& step_dir) const {
  if (cached_dir_ != step_dir) {
    cached_ = read_metadata(step_dir);
    cached_dir_ = step_dir;
  }
  return cached_;
}

std::vector<std::string> DcpCheckpointer::model_tensor_names(const std::string& step_dir) const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : cached_metadata(step_dir).tensors) {
    if (name.rfind("model.", 0) == 0) names.push_back(name.substr(6));
  }
  return names;
}

at::Tensor DcpCheckpointer::read_model_tensor(const std::string& step_dir, const std::string& name) const {
  const CheckpointMetadata& metadata = cached_metadata(step_dir);
  auto entry = metadata.tensors.find("model." + name);
  if (entry == metadata.tensors.end()) {
    throw Error("checkpoint '" + step_dir + "' has no model tensor '" + name + "'");
  }
  at::Tensor whole = at::empty(entry->second.shape, at::TensorOptions().dtype(entry->second.dtype));
  fill_tensor(step_dir, "model." + name, entry->second, whole, whole_box(entry->second.shape));
  return whole;
}

void DcpCheckpointer::write_model(const std::string& step_dir, const std::map<std::string, at::Tensor>& tensors,
                                  const std::string& config_yaml) const {
  std::string partial = step_dir + ".partial";
  fs::remove_all(partial);
  fs::create_directories(partial);
  CheckpointMetadata metadata;
  metadata.world_size = 1;
  metadata.mesh = "single process";
  metadata.model_only = true;
  metadata.values = {{"step", "0"}, {"data.position", "0"}};
  std::vector<Piece> pieces;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor whole = tensor.detach().cpu().contiguous();
    metadata.tensors["model." + name] = TensorEntry{whole.scalar_type(), whole.sizes().vec(), {}};
    pieces.push_back({"model." + name, whole, whole_box(whole.sizes().vec())});
  }
  write_pieces(partial, 0, pieces, metadata);
  if (!config_yaml.empty()) write_text_file(partial + "/config.yaml", config_yaml + "\n");
  write_metadata(partial, metadata);
  commit_rename(partial, step_dir);
}

}  // namespace titan::dcp
