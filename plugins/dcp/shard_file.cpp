// Byte-level I/O of shard files. Overlaps are computed on dim 0: the rows
// of a saved box that a target needs are one contiguous byte range.
#include "shard_file.h"

#include <fcntl.h>
#include <ATen/ATen.h>
#include <torch/utils.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include "titan/error.hpp"

namespace titan::dcp {

namespace {

uint32_t crc_of(const char* data, int64_t length) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (length > 0) {
    uInt part = static_cast<uInt>(std::min<int64_t>(length, 1 << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), part);
    data += part;
    length -= part;
  }
  return static_cast<uint32_t>(crc);
}

struct FileCloser {
  int fd;
  ~FileCloser() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, const char* data, int64_t length, const std::string& path) {
  while (length > 0) {
    ssize_t written = ::write(fd, data, static_cast<size_t>(std::min<int64_t>(length, 1 << 30)));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) throw Error("writing checkpoint shard '" + path + "' failed: " + std::strerror(errno));
    data += written;
    length -= written;
  }
}

void read_all(int fd, char* data, int64_t length, int64_t offset, const std::string& path) {
  while (length > 0) {
    ssize_t got = ::pread(fd, data, static_cast<size_t>(std::min<int64_t>(length, 1 << 30)), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw Error("checkpoint shard '" + path + "' is truncated or unreadable at byte " + std::to_string(offset) +
                  (got < 0 ? std::string(": ") + std::strerror(errno) : std::string()));
    }
    data += got;
    length -= got;
    offset += got;
  }
}

int64_t product(const std::vector<int64_t>& values, size_t from) {
  return std::accumulate(values.begin() + static_cast<std::ptrdiff_t>(from), values.end(), int64_t{1},
                         std::multiplies<>());
}

}  // namespace

int64_t Box::numel() const { return product(shape, 0); }

std::vector<ShardRecord> write_shard_file(const std::string& path, const std::string& file_name,
                                          const std::vector<Piece>& pieces) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error("cannot create checkpoint shard '" + path + "': " + std::strerror(errno));
  FileCloser closer{fd};
  std::vector<ShardRecord> records;
  int64_t offset = 0;
  for (const auto& piece : pieces) {
    const char* data = static_cast<const char*>(piece.tensor.data_ptr());
    int64_t bytes = static_cast<int64_t>(piece.tensor.numel() * piece.tensor.element_size());
    ShardRecord record{file_name, offset, bytes, piece.box, {}};
    for (int64_t start = 0; start < bytes; start += kChunkBytes) {
      record.chunk_crcs.push_back(crc_of(data + start, std::min(kChunkBytes, bytes - start)));
    }
    write_all(fd, data, bytes, path);
    offset += bytes;
    records.push_back(std::move(record));
  }
  if (::fsync(fd) != 0) throw Error("fsync of checkpoint shard '" + path + "' failed: " + std::strerror(errno));
  return records;
}

int64_t copy_overlap(const std::string& step_dir, const ShardRecord& shard, at::ScalarType dtype,
                     at::Tensor& target, const Box& target_box) {
  const Box& saved = shard.box;
  size_t dims = saved.shape.size();
  if (target_box.shape.size() != dims) return 0;
  std::vector<int64_t> low(dims), high(dims);
  for (size_t d = 0; d < dims; ++d) {
    low[d] = std::max(saved.offset[d], target_box.offset[d]);
    high[d] = std::min(saved.offset[d] + saved.shape[d], target_box.offset[d] + target_box.shape[d]);
    if (high[d] <= low[d]) return 0;
  }
  int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t row_bytes = (dims == 0 ? 1 : product(saved.shape, 1)) * element;
  int64_t first_row = dims == 0 ? 0 : low[0] - saved.offset[0];
  int64_t rows = dims == 0 ? 1 : high[0] - low[0];
  int64_t begin = first_row * row_bytes;
  int64_t end = begin + rows * row_bytes;
  // Whole checksum chunks around the rows, so every byte used is verified.
  int64_t chunk_begin = begin / kChunkBytes * kChunkBytes;
  int64_t chunk_end = std::min(shard.bytes, (end + kChunkBytes - 1) / kChunkBytes * kChunkBytes);
  std::string path = step_dir + "/" + shard.file;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("checkpoint shard '" + path + "' is missing: " + std::strerror(errno));
  FileCloser closer{fd};
  std::vector<char> buffer(static_cast<size_t>(chunk_end - chunk_begin));
  read_all(fd, buffer.data(), chunk_end - chunk_begin, shard.offset + chunk_begin, path);
  for (int64_t start = chunk_begin; start < chunk_end; start += kChunkBytes) {
    size_t index = static_cast<size_t>(start / kChunkBytes);
    int64_t length = std::min(kChunkBytes, shard.bytes - start);
    if (index >= shard.chunk_crcs.size() ||
        crc_of(buffer.data() + (start - chunk_begin), length) != shard.chunk_crcs[index]) {
      throw Error("checkpoint shard '" + path + "' fails its checksum (bytes " + std::to_string(shard.offset + start) +
                  ".." + std::to_string(shard.offset + start + length) + "): the file is corrupt");
    }
  }
  std::vector<int64_t> slab_shape = saved.shape;
  if (dims > 0) slab_shape[0] = rows;
  at::Tensor slab = at::from_blob(buffer.data() + (begin - chunk_begin), slab_shape, at::TensorOptions().dtype(dtype));
  at::Tensor destination = target;
  for (size_t d = 0; d < dims; ++d) {
    int64_t d64 = static_cast<int64_t>(d);
    if (d > 0) slab = slab.narrow(d64, low[d] - saved.offset[d], high[d] - low[d]);
    destination = destination.narrow(d64, low[d] - target_box.offset[d], high[d] - low[d]);
  }
  torch::NoGradGuard no_grad;
  destination.copy_(slab);
  return slab.numel();
}

}  // namespace titan::dcp
