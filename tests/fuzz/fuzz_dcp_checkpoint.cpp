// Fuzz target: a dcp checkpoint step as `titan train` resumes it and
// `titan checkpoint export` reads it: metadata.json (read_metadata, which
// also checks the listed files), then every tensor filled from its shards
// (copy_overlap: the shard records' offsets, boxes and CRCs), whole and as
// the second half of dim 0 (what rank 1 of 2 loads under FSDP).
// Input: metadata.json text, a NUL, then the bytes of shard-00000.bin.
#include <ATen/ATen.h>

#include <cstdint>

#include "checkpoint_metadata.h"
#include "fuzz_support.hpp"
#include "shard_file.h"

namespace {

namespace dcp = titan::dcp;

void load(const std::string& dir, const dcp::TensorEntry& entry) {
  // As DcpCheckpointer::read_model_tensor and fill_tensor do.
  at::Tensor whole = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
  dcp::Box box{std::vector<int64_t>(entry.shape.size(), 0), entry.shape};
  for (const auto& shard : entry.shards) dcp::copy_overlap(dir, shard, entry.dtype, whole, box);
  if (entry.shape.empty() || entry.shape[0] < 2) return;
  dcp::Box half = box;
  half.offset[0] = entry.shape[0] / 2;
  half.shape[0] = entry.shape[0] - half.offset[0];
  at::Tensor part = whole.narrow(0, half.offset[0], half.shape[0]).contiguous();
  for (const auto& shard : entry.shards) dcp::copy_overlap(dir, shard, entry.dtype, part, half);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path step = [] {
    std::filesystem::path dir = titan::fuzz::scratch_dir() / "step-1";
    std::filesystem::create_directories(dir);
    return dir;
  }();
  auto [metadata_text, shard_bytes] = titan::fuzz::split_at_nul(titan::fuzz::as_text(data, size));
  titan::fuzz::write_file(step / "metadata.json", metadata_text);
  titan::fuzz::write_file(step / "shard-00000.bin", shard_bytes);
  titan::fuzz::expect_clean_refusal([&] {
    dcp::CheckpointMetadata metadata = dcp::read_metadata(step.string());
    for (const auto& [name, entry] : metadata.tensors) load(step.string(), entry);
    for (const auto& [name, by_rank] : metadata.rank_local) {
      for (const auto& [rank, entry] : by_rank) load(step.string(), entry);
    }
    dcp::to_json_text(metadata);
  });
  return 0;
}
