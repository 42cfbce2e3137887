// The tensor container format of the whole-state checkpoint.
#include "tensor_file.h"

#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/error.hpp"

namespace titan::checkpoint {

namespace {

constexpr char kMagic[8] = {'T', 'I', 'T', 'A', 'N', 'C', 'K', '1'};

at::ScalarType dtype_from_name(const std::string& name, const std::string& path) {
  static const std::map<std::string, at::ScalarType> names = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf},
      {"int64", at::kLong},    {"int32", at::kInt},      {"uint8", at::kByte},        {"bool", at::kBool}};
  auto found = names.find(name);
  if (found == names.end()) throw Error("checkpoint file '" + path + "': unknown dtype '" + name + "'");
  return found->second;
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: throw Error(std::string("checkpoint: unsupported dtype ") + c10::toString(type));
  }
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("checkpoint file '" + path + "' cannot be read");
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), buffer.size());
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(in.gcount()));
  }
  return static_cast<uint32_t>(crc);
}

uint32_t write_tensor_file(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  nlohmann::json index = nlohmann::json::object();
  std::vector<at::Tensor> contiguous;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
    int64_t bytes = cpu.numel() * static_cast<int64_t>(cpu.element_size());
    index[name] = {{"dtype", dtype_name(cpu.scalar_type())}, {"shape", cpu.sizes().vec()},
                   {"offset", offset}, {"bytes", bytes}};
    offset += bytes;
    contiguous.push_back(cpu);
  }
  std::string header = index.dump();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot create checkpoint file '" + path + "'");
  uint64_t header_size = header.size();
  out.write(kMagic, sizeof(kMagic));
  out.write(reinterpret_cast<const char*>(&header_size), sizeof(header_size));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& tensor : contiguous) {
    out.write(static_cast<const char*>(tensor.data_ptr()), tensor.numel() * tensor.element_size());
  }
  out.close();
  if (!out) throw Error("writing checkpoint file '" + path + "' failed (disk full?)");
  fsync_path(path);
  return file_crc32(path);
}

void read_tensor_file(const std::string& path, std::map<std::string, at::Tensor>& targets) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("checkpoint file '" + path + "' cannot be read");
  char magic[8];
  uint64_t header_size = 0;
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(&header_size), sizeof(header_size));
  if (!in || std::memcmp(magic, kMagic, sizeof(magic)) != 0 || header_size > (1ull << 30)) {
    throw Error("checkpoint file '" + path + "' is not a Titan checkpoint (bad header)");
  }
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(header);
  } catch (const std::exception& error) {
    throw Error("checkpoint file '" + path + "' has a corrupt index: " + error.what());
  }
  const std::streamoff data_start = static_cast<std::streamoff>(sizeof(magic) + sizeof(header_size) + header_size);
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    if (!index.contains(name)) {
      throw Error("checkpoint file '" + path + "' has no tensor '" + name +
                  "' (was it saved by another model or optimizer configuration?)");
    }
    const auto& entry = index[name];
    std::vector<int64_t> shape = entry["shape"].get<std::vector<int64_t>>();
    at::ScalarType dtype = dtype_from_name(entry["dtype"].get<std::string>(), path);
    if (shape != target.sizes().vec() || dtype != target.scalar_type()) {
      throw Error("checkpoint file '" + path + "': tensor '" + name + "' is " + entry["dtype"].get<std::string>() +
                  " " + c10::str(c10::IntArrayRef(shape)) + ", the run expects " + dtype_name(target.scalar_type()) +
                  " " + c10::str(target.sizes()));
    }
    at::Tensor buffer = at::empty(shape, at::TensorOptions().dtype(dtype));
    in.seekg(data_start + entry["offset"].get<std::streamoff>());
    in.read(static_cast<char*>(buffer.data_ptr()), entry["bytes"].get<std::streamsize>());
    if (!in) throw Error("checkpoint file '" + path + "' is truncated (reading '" + name + "')");
    target.copy_(buffer);
  }
}

}  // namespace titan::checkpoint
