// LineReader over zlib's gz* API, which reads gzip and plain files alike, so
// *.jsonl and *.jsonl.gz (and *.txt / *.txt.gz) share one code path.
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {
constexpr unsigned kReadChunk = 1 << 17;
}

LineReader::LineReader(const std::string& path) : path_(path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw Error("dataset '" + path + "' cannot be opened: " + std::strerror(errno) +
                "; check the dataset path in the run config");
  }
  gzbuffer(file, kReadChunk);
  file_ = file;
}

LineReader::~LineReader() { gzclose(static_cast<gzFile>(file_)); }

bool LineReader::next(std::string& line) {
  line.clear();
  bool got_any = false;
  for (;;) {
    if (buffer_pos_ == buffer_.size()) {
      if (at_end_) break;
      buffer_.resize(kReadChunk);
      int n = gzread(static_cast<gzFile>(file_), buffer_.data(), kReadChunk);
      if (n < 0) {
        int error = Z_OK;
        const char* message = gzerror(static_cast<gzFile>(file_), &error);
        throw Error("dataset '" + path_ + "' near line " + std::to_string(line_number_ + 1) +
                    ": read error: " + (error == Z_ERRNO ? std::strerror(errno) : message) +
                    "; the file may be truncated or not really gzip");
      }
      buffer_.resize(static_cast<size_t>(n));
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
  if (gzrewind(static_cast<gzFile>(file_)) != 0) {
    throw Error("dataset '" + path_ + "' cannot be rewound for the next epoch");
  }
  buffer_.clear();
  buffer_pos_ = 0;
  at_end_ = false;
  line_number_ = 0;
}

}  // namespace titan::data
