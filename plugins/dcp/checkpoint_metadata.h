// metadata.json of a checkpoint step (docs/checkpoint_format.md): every
// tensor's dtype, global shape and shards, the per-rank tensors, the
// non-tensor values and the files with their sizes. Each rank describes
// what it wrote in the same structure; rank 0 merges them.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "shard_file.h"

namespace titan::dcp {

struct TensorEntry {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;        // global
  std::vector<ShardRecord> shards;   // disjoint boxes covering the tensor
};

struct CheckpointMetadata {
  int64_t step = 0;
  int world_size = 1;
  std::string mesh;                  // "dp_shard=4", for messages
  bool model_only = false;
  std::map<std::string, std::string> values;
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, std::map<int, TensorEntry>> rank_local;  // name -> rank -> its tensor
  std::map<std::string, int64_t> files;                         // file -> bytes
  std::string error;                 // a rank's failed write (fragments only)

  void merge(const CheckpointMetadata& fragment);
};

std::string to_json_text(const CheckpointMetadata& metadata);
// `origin` names the file or rank for error messages.
CheckpointMetadata from_json_text(const std::string& text, const std::string& origin);

// Writes <step_dir>/metadata.json and fsyncs it.
void write_metadata(const std::string& step_dir, const CheckpointMetadata& metadata);
// Reads and checks <step_dir>/metadata.json and that every listed file is
// present with its size; errors name the file.
CheckpointMetadata read_metadata(const std::string& step_dir);

std::string dtype_name(at::ScalarType type);

}  // namespace titan::dcp
