// Safetensors files (the Hugging Face weight format): a reader that checks
// every rule of the public spec and reads one tensor at a time (pread), a
// streaming writer, and HF model folders (one file or sharded with
// model.safetensors.index.json). Errors are titan::Error naming the file.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace titan::safetensors {

struct TensorInfo {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets in the data buffer (after the header)
  uint64_t end = 0;
};

// "F32" <-> at::kFloat, ...; both throw titan::Error for what is unsupported.
at::ScalarType dtype_from_name(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

// One .safetensors file: the header is read and validated when opened; the
// data stays on disk until read() fetches one tensor.
class File {
 public:
  explicit File(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;
  // The tensor, CPU, contiguous, owning its memory.
  at::Tensor read(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<int> fd_;  // closed with the last copy
  uint64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> tensors_;
};

// What a writer needs to know before the first byte of data.
struct TensorEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
};

// Writes the header for `entries` (in that order, data contiguous, header
// padded with spaces to 8 bytes), then each tensor's bytes as add() gets
// it, in the same order; finish() checks all came. So an exporter holds one
// tensor at a time.
class Writer {
 public:
  Writer(const std::string& path, const std::vector<TensorEntry>& entries,
         const std::map<std::string, std::string>& metadata = {});
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  void add(const std::string& name, const at::Tensor& tensor);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience: one file from whole tensors (written in name order).
void save_file(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
               const std::map<std::string, std::string>& metadata = {});

// A Hugging Face model folder: model.safetensors.index.json's weight_map
// if present, else every *.safetensors file in it (a name in two files is
// an error). Only headers are read when opened.
class Folder {
 public:
  explicit Folder(const std::string& dir);
  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return owner_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;
  at::Tensor read(const std::string& name) const;
  // The file holding a tensor (for error messages).
  const std::string& file_of(const std::string& name) const;

 private:
  const File& file_for(const std::string& name) const;
  std::string dir_;
  std::vector<File> files_;
  std::map<std::string, size_t> owner_;  // tensor -> index in files_
};

// Whether `dir` looks like a Hugging Face safetensors folder.
bool is_hf_folder(const std::string& dir);

}  // namespace titan::safetensors
