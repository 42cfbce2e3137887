// LineReader over two decompressors: zstd's streaming API for *.zst, and
// zlib's gz* API for the rest, which reads gzip and plain files alike. So
// *.jsonl, *.jsonl.gz and *.jsonl.zst (and *.txt...) share one code path.
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {

constexpr unsigned kReadChunk = 1 << 17;

bool is_zstd(const std::string& path) { return path.size() >= 4 && path.compare(path.size() - 4, 4, ".zst") == 0; }

std::string cannot_open(const std::string& path) {
  return "dataset '" + path + "' cannot be opened: " + std::strerror(errno) +
         "; check the dataset path in the run config";
}

}  // namespace

// Decompressed bytes of one file: read() returns how many (0 at the end)
// and throws, naming the file, on damaged data.
struct LineReader::Input {
  virtual ~Input() = default;
  virtual size_t read(char* out, size_t capacity, int64_t near_line) = 0;
  virtual void rewind() = 0;
};

namespace {

class GzipInput final : public LineReader::Input {
 public:
  explicit GzipInput(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) throw Error(cannot_open(path));
    gzbuffer(file_, kReadChunk);
  }
  ~GzipInput() override { gzclose(file_); }

  size_t read(char* out, size_t capacity, int64_t near_line) override {
    int n = gzread(file_, out, static_cast<unsigned>(capacity));
    if (n < 0) {
      int error = Z_OK;
      const char* message = gzerror(file_, &error);
      throw Error("dataset '" + path_ + "' near line " + std::to_string(near_line) +
                  ": read error: " + (error == Z_ERRNO ? std::strerror(errno) : message) +
                  "; the file may be truncated or not really gzip");
    }
    return static_cast<size_t>(n);
  }

  void rewind() override {
    if (gzrewind(file_) != 0) throw Error("dataset '" + path_ + "' cannot be rewound for the next epoch");
  }

 private:
  std::string path_;
  gzFile file_;
};

class ZstdInput final : public LineReader::Input {
 public:
  explicit ZstdInput(const std::string& path)
      : path_(path), file_(std::fopen(path.c_str(), "rb")), stream_(ZSTD_createDStream()) {
    if (file_ == nullptr) throw Error(cannot_open(path));
    compressed_.resize(ZSTD_DStreamInSize());
    rewind();
  }
  ~ZstdInput() override {
    ZSTD_freeDStream(stream_);
    if (file_) std::fclose(file_);
  }

  size_t read(char* out, size_t capacity, int64_t near_line) override {
    ZSTD_outBuffer output{out, capacity, 0};
    while (output.pos == 0) {
      if (input_.pos == input_.size) {
        const size_t got = std::fread(compressed_.data(), 1, compressed_.size(), file_);
        if (got == 0) {
          if (std::ferror(file_)) throw damaged(near_line, std::strerror(errno));
          // Every frame ends with a 0 hint; anything else was cut short.
          if (last_hint_ != 0) throw damaged(near_line, "the file ends inside a zstd frame (truncated)");
          return 0;
        }
        input_ = {compressed_.data(), got, 0};
      }
      last_hint_ = ZSTD_decompressStream(stream_, &output, &input_);
      if (ZSTD_isError(last_hint_)) throw damaged(near_line, ZSTD_getErrorName(last_hint_));
    }
    return output.pos;
  }

  void rewind() override {
    if (std::fseek(file_, 0, SEEK_SET) != 0) {
      throw Error("dataset '" + path_ + "' cannot be rewound for the next epoch");
    }
    ZSTD_DCtx_reset(stream_, ZSTD_reset_session_only);
    input_ = {compressed_.data(), 0, 0};
    last_hint_ = 0;
  }

 private:
  Error damaged(int64_t near_line, const std::string& why) const {
    return Error("dataset '" + path_ + "' near line " + std::to_string(near_line) + ": zstd read error: " + why +
                 "; the file may be truncated or not really zstd");
  }

  std::string path_;
  std::FILE* file_;
  ZSTD_DStream* stream_;
  std::vector<char> compressed_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  size_t last_hint_ = 0;  // 0: between frames
};

}  // namespace

LineReader::LineReader(const std::string& path) : path_(path) {
  if (is_zstd(path)) {
    input_ = std::make_unique<ZstdInput>(path);
  } else {
    input_ = std::make_unique<GzipInput>(path);
  }
}

LineReader::~LineReader() = default;

bool LineReader::next(std::string& line) {
  line.clear();
  bool got_any = false;
  for (;;) {
    if (buffer_pos_ == buffer_.size()) {
      if (at_end_) break;
      buffer_.resize(kReadChunk);
      const size_t n = input_->read(buffer_.data(), kReadChunk, line_number_ + 1);
      buffer_.resize(n);
      buffer_pos_ = 0;
      if (n == 0) {
        at_end_ = true;
        break;
      }
    }
    got_any = true;
    const char* start = buffer_.data() + buffer_pos_;
    size_t available = buffer_.size() - buffer_pos_;
    const void* newline = std::memchr(start, '\n', available);
    if (newline != nullptr) {
      size_t length = static_cast<size_t>(static_cast<const char*>(newline) - start);
      line.append(start, length);
      buffer_pos_ += length + 1;
      break;
    }
    line.append(start, available);
    buffer_pos_ = buffer_.size();
  }
  if (!got_any) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  ++line_number_;
  return true;
}

void LineReader::rewind() {
  input_->rewind();
  buffer_.clear();
  buffer_pos_ = 0;
  at_end_ = false;
  line_number_ = 0;
}

}  // namespace titan::data
