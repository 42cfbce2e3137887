// Pre-tokenized shards, memory-mapped: *.u16 / *.u32 are raw little-endian
// token ids; *.bin is raw uint16 (nanoGPT) unless it opens with llm.c's
// 256 x int32 header (magic 20240520: uint16 ids, 20240801: uint32 ids;
// header[2] = token count). The ids are the stream itself, separators included.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

constexpr int32_t kLlmcMagicU16 = 20240520;
constexpr int32_t kLlmcMagicU32 = 20240801;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);
constexpr size_t kChunkTokens = size_t{1} << 20;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class TokenShardSource final : public DocumentSource {
 public:
  explicit TokenShardSource(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw Error("dataset '" + path + "' cannot be opened: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw Error("dataset '" + path + "' cannot be inspected: " + std::strerror(errno));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (map == MAP_FAILED) {
        ::close(fd);
        throw Error("dataset '" + path + "' cannot be memory-mapped: " + std::strerror(errno));
      }
      ::madvise(map, size_, MADV_SEQUENTIAL);
      data_ = static_cast<const unsigned char*>(map);
    }
    ::close(fd);  // the mapping stays valid
    try {
      read_layout();
    } catch (...) {
      unmap();
      throw;
    }
  }
  ~TokenShardSource() override { unmap(); }

  std::string describe() const override {
    return "token shard '" + path_ + "' (" + std::to_string(count_) + " uint" + std::to_string(8 * width_) + " ids)";
  }
  void rewind() override { next_ = 0; }
  std::optional<std::string> next_text() override { return std::nullopt; }
  bool pretokenized() const override { return true; }

  std::optional<std::vector<int32_t>> next_tokens() override {
    if (next_ >= count_) return std::nullopt;
    size_t n = std::min(kChunkTokens, count_ - next_);
    std::vector<int32_t> ids(n);
    const unsigned char* p = data_ + offset_ + next_ * width_;
    for (size_t i = 0; i < n; ++i, p += width_) {
      uint32_t v = width_ == 2 ? static_cast<uint32_t>(p[0] | (p[1] << 8))
                               : static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                                     (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
      if (v > static_cast<uint32_t>(INT32_MAX)) {
        throw Error("dataset '" + path_ + "' holds token id " + std::to_string(v) + " at index " +
                    std::to_string(next_ + i) + ", beyond int32; is the file really uint32 token ids?");
      }
      ids[i] = static_cast<int32_t>(v);
    }
    next_ += n;
    return ids;
  }

 private:
  void read_layout() {
    int32_t header[3] = {0, 0, 0};
    if (size_ >= kLlmcHeaderBytes) std::memcpy(header, data_, sizeof(header));  // x86/ARM are little-endian
    if (ends_with(path_, ".bin") && (header[0] == kLlmcMagicU16 || header[0] == kLlmcMagicU32)) {
      width_ = header[0] == kLlmcMagicU16 ? 2 : 4;
      offset_ = kLlmcHeaderBytes;
      size_t available = (size_ - offset_) / width_;
      if (header[2] < 0 || static_cast<size_t>(header[2]) > available) {
        throw Error("dataset '" + path_ + "': its llm.c header announces " + std::to_string(header[2]) +
                    " tokens but the file holds " + std::to_string(available) + "; the file is truncated");
      }
      count_ = static_cast<size_t>(header[2]);
    } else {
      width_ = ends_with(path_, ".u32") ? 4 : 2;
      if ((size_ - offset_) % width_ != 0) {
        throw Error("dataset '" + path_ + "' is " + std::to_string(size_) + " bytes, not a whole number of uint" +
                    std::to_string(8 * width_) + " token ids; the file is truncated or of another type");
      }
      count_ = (size_ - offset_) / width_;
    }
    if (count_ == 0) throw Error("dataset '" + path_ + "' contains no documents (no token ids)");
  }

  void unmap() {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
    data_ = nullptr;
  }

  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  size_t offset_ = 0;  // bytes of header
  size_t width_ = 2;   // bytes per id
  size_t count_ = 0;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<DocumentSource> make_token_shard_source(const std::string& path) {
  return std::make_unique<TokenShardSource>(path);
}

}  // namespace titan::data
