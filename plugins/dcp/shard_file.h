// Shard files: each rank writes the pieces it owns back to back, raw and
// row-major; the metadata records where each piece lies and a CRC-32 per
// 4 MiB chunk, so a reader fetches and verifies only the rows it needs.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace titan::dcp {

// A box in a global tensor: offset and extent per dim (empty for a scalar).
struct Box {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

struct ShardRecord {
  std::string file;  // inside the step folder
  int64_t offset = 0;  // bytes into the file
  int64_t bytes = 0;
  Box box;
  std::vector<uint32_t> chunk_crcs;  // one per kChunkBytes of the piece
};

constexpr int64_t kChunkBytes = int64_t{4} << 20;

struct Piece {
  std::string name;
  at::Tensor tensor;  // CPU, contiguous
  Box box;
};

// Writes the pieces into `path` and fsyncs it; records name the file by
// `file_name`. Errors (disk full, permissions) are titan::Errors.
std::vector<ShardRecord> write_shard_file(const std::string& path, const std::string& file_name,
                                          const std::vector<Piece>& pieces);

// Copies the part of a saved shard overlapping `target_box` into `target`
// (the tensor holding that box); returns the elements copied. A checksum
// mismatch or a short file is a titan::Error naming the file.
int64_t copy_overlap(const std::string& step_dir, const ShardRecord& shard, at::ScalarType dtype,
                     at::Tensor& target, const Box& target_box);

}  // namespace titan::dcp
