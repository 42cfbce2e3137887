// A single-file container of named tensors: a JSON index (name, dtype,
// shape, byte offset) followed by the raw bytes; CRC-32 over the file.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace titan::checkpoint {

// Writes the tensors and fsyncs; returns the file's CRC-32.
uint32_t write_tensor_file(const std::string& path, const std::map<std::string, at::Tensor>& tensors);
uint32_t file_crc32(const std::string& path);
// Reads into `targets` in place (copy_), checking names, shapes and dtypes.
void read_tensor_file(const std::string& path, std::map<std::string, at::Tensor>& targets);

}  // namespace titan::checkpoint
