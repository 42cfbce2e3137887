// Safetensors reader and writer, written from the public format spec
// (huggingface/safetensors README): 8-byte little-endian header length N,
// N bytes of JSON (may be padded with spaces), then the data buffer that
// every tensor's data_offsets index, covered exactly once with no holes.
#include "titan/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/error.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace titan::safetensors {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The reference implementation refuses larger headers; so do we, before
// allocating anything a corrupt length asks for.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeName {
  const char* name;
  at::ScalarType dtype;
};
constexpr DtypeName kDtypes[] = {{"F64", at::kDouble}, {"F32", at::kFloat},   {"F16", at::kHalf},
                                 {"BF16", at::kBFloat16}, {"I64", at::kLong}, {"I32", at::kInt},
                                 {"I16", at::kShort},  {"I8", at::kChar},     {"U8", at::kByte},
                                 {"U16", at::kUInt16}, {"U32", at::kUInt32}, {"U64", at::kUInt64},
                                 {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E5M2", at::kFloat8_e5m2},
                                 {"BOOL", at::kBool}};
// In the spec but not read by Titan (sub-byte or scale-only types).
constexpr const char* kUnsupported[] = {"F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error("safetensors file '" + path + "': " + message);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// numel * element size, or fails on overflow (a hostile shape).
uint64_t byte_size(const std::vector<int64_t>& shape, at::ScalarType dtype, const std::string& path,
                   const std::string& name) {
  uint64_t bytes = c10::elementSize(dtype);
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(extent), &bytes)) {
      fail(path, "tensor '" + name + "': shape " + shape_text(shape) + " overflows 64-bit byte counts");
    }
  }
  return bytes;
}

uint64_t json_offset(const json& value, const std::string& path, const std::string& name) {
  if (!value.is_number_unsigned()) {
    fail(path, "tensor '" + name + "': data_offsets must hold non-negative integers, got " + value.dump());
  }
  return value.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const json& entry, const std::string& path) {
  if (!entry.is_object()) fail(path, "tensor '" + name + "': expected an object, got " + entry.dump());
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) fail(path, "tensor '" + name + "': missing \"" + key + "\"");
  }
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) fail(path, "tensor '" + name + "': dtype must be a string, got " + dtype.dump());
  TensorInfo info;
  try {
    info.dtype = dtype_from_name(dtype.get<std::string>());
  } catch (const Error& error) {
    fail(path, "tensor '" + name + "': " + error.what());
  }
  const json& shape = entry["shape"];
  if (!shape.is_array()) fail(path, "tensor '" + name + "': shape must be an array, got " + shape.dump());
  for (const json& extent : shape) {
    if (!extent.is_number_unsigned() || extent.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail(path, "tensor '" + name + "': shape must hold non-negative integers, got " + shape.dump());
    }
    info.shape.push_back(extent.get<int64_t>());
  }
  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    fail(path, "tensor '" + name + "': data_offsets must be [begin, end], got " + offsets.dump());
  }
  info.begin = json_offset(offsets[0], path, name);
  info.end = json_offset(offsets[1], path, name);
  if (info.begin > info.end) {
    fail(path, "tensor '" + name + "': data_offsets " + offsets.dump() + " end before they begin");
  }
  uint64_t expected = byte_size(info.shape, info.dtype, path, name);
  if (info.end - info.begin != expected) {
    fail(path, "tensor '" + name + "': shape " + shape_text(info.shape) + " of " + dtype.get<std::string>() +
                   " needs " + std::to_string(expected) + " bytes but data_offsets " + offsets.dump() + " span " +
                   std::to_string(info.end - info.begin));
  }
  return info;
}

// The spec's buffer rule: sorted by offset, the tensors tile [0, size).
void check_tiling(const std::map<std::string, TensorInfo>& tensors, uint64_t buffer_size, const std::string& path) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> order;
  for (const auto& [name, info] : tensors) {
    if (info.end > buffer_size) {
      fail(path, "tensor '" + name + "': data_offsets [" + std::to_string(info.begin) + ", " +
                     std::to_string(info.end) + "] run past the data buffer (" + std::to_string(buffer_size) +
                     " bytes; the file may be truncated)");
    }
    order.push_back({&name, &info});
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, info] : order) {
    if (info->begin < covered) {
      fail(path, "tensors '" + *previous + "' and '" + *name + "' overlap (byte " + std::to_string(info->begin) +
                     " < " + std::to_string(covered) + ")");
    }
    if (info->begin > covered) {
      fail(path, "bytes [" + std::to_string(covered) + ", " + std::to_string(info->begin) +
                     ") of the data buffer belong to no tensor (a hole before '" + *name + "')");
    }
    covered = info->end;
    previous = name;
  }
  if (covered != buffer_size) {
    fail(path, "the data buffer has " + std::to_string(buffer_size) + " bytes but the tensors cover only " +
                   std::to_string(covered));
  }
}

void read_exactly(int fd, void* out, uint64_t bytes, uint64_t offset, const std::string& path) {
  auto* cursor = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t got = ::pread(fd, cursor, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, std::string("read failed: ") + std::strerror(errno));
    if (got == 0) fail(path, "unexpected end of file at byte " + std::to_string(offset));
    cursor += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<uint64_t>(got);
  }
}

}  // namespace

at::ScalarType dtype_from_name(const std::string& name) {
  for (const auto& known : kDtypes) {
    if (name == known.name) return known.dtype;
  }
  for (const char* spec_only : kUnsupported) {
    if (name == spec_only) throw Error("dtype " + name + " is not supported by Titan");
  }
  throw Error("unknown dtype \"" + name + "\" (known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, U16, U32, U64, F8_E4M3, F8_E5M2, BOOL)");
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& known : kDtypes) {
    if (dtype == known.dtype) return known.name;
  }
  throw Error(std::string("safetensors has no dtype for ") + c10::toString(dtype));
}

File::File(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  fd_ = std::shared_ptr<int>(new int(fd), [](int* handle) {
    ::close(*handle);
    delete handle;
  });
  struct stat status {};
  if (::fstat(fd, &status) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  uint64_t file_size = static_cast<uint64_t>(status.st_size);
  if (file_size < 8) fail(path, "only " + std::to_string(file_size) + " bytes; too short for the 8-byte header length");
  uint64_t header_size = 0;
  read_exactly(fd, &header_size, 8, 0, path);  // little-endian, as the host (static_assert above)
  if (header_size > file_size - 8) {
    fail(path, "header length " + std::to_string(header_size) + " exceeds the " + std::to_string(file_size - 8) +
                   " bytes that follow it (bad header length or truncated file)");
  }
  if (header_size > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_size) + " exceeds the format's limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  }
  std::string header(header_size, '\0');
  read_exactly(fd, header.data(), header_size, 8, path);
  if (header.empty() || header[0] != '{') fail(path, "the JSON header must begin with '{'");
  json parsed;
  try {
    parsed = json::parse(header);
  } catch (const json::exception& error) {
    fail(path, std::string("the header is not valid JSON: ") + error.what());
  }
  if (!parsed.is_object()) fail(path, "the JSON header is not an object");
  for (const auto& [name, entry] : parsed.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ must be an object of strings, got " + entry.dump());
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(path, "__metadata__[\"" + key + "\"] must be a string, got " + value.dump());
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    tensors_[name] = parse_entry(name, entry, path);
  }
  data_start_ = 8 + header_size;
  check_tiling(tensors_, file_size - data_start_, path);
}

const TensorInfo& File::info(const std::string& name) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end()) fail(path_, "has no tensor '" + name + "'");
  return found->second;
}

at::Tensor File::read(const std::string& name) const {
  const TensorInfo& entry = info(name);
  at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
  read_exactly(*fd_, tensor.data_ptr(), entry.end - entry.begin, data_start_ + entry.begin, path_);
  if (entry.dtype == at::kBool) {
    // A bool byte other than 0 or 1 is undefined behaviour in LibTorch.
    const auto* bytes = static_cast<const uint8_t*>(tensor.data_ptr());
    for (uint64_t i = 0; i < entry.end - entry.begin; ++i) {
      if (bytes[i] > 1) fail(path_, "tensor '" + name + "': BOOL byte " + std::to_string(i) + " is neither 0 nor 1");
    }
  }
  return tensor;
}

struct Writer::Impl {
  std::string path, temp_path;
  std::vector<TensorEntry> entries;
  size_t next = 0;
  std::ofstream out;
  bool finished = false;
};

Writer::Writer(const std::string& path, const std::vector<TensorEntry>& entries,
               const std::map<std::string, std::string>& metadata)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->temp_path = path + ".partial";
  impl_->entries = entries;
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& entry : entries) {
    if (entry.name.empty() || entry.name == "__metadata__" || header.contains(entry.name)) {
      throw Error("safetensors writer '" + path + "': tensor name '" + entry.name + "' is empty, reserved or repeated");
    }
    uint64_t bytes = byte_size(entry.shape, entry.dtype, path, entry.name);
    header[entry.name] = {{"dtype", dtype_name(entry.dtype)},
                          {"shape", entry.shape},
                          {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  // Padding keeps the data buffer 8-byte aligned for readers that mmap it.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t length = text.size();
  impl_->out.open(impl_->temp_path, std::ios::binary | std::ios::trunc);
  impl_->out.write(reinterpret_cast<const char*>(&length), 8);
  impl_->out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!impl_->out) throw Error("safetensors writer: cannot write '" + impl_->temp_path + "'");
}

Writer::~Writer() {
  if (impl_ && !impl_->finished) {
    impl_->out.close();
    std::error_code ignored;
    fs::remove(impl_->temp_path, ignored);  // never leave a half-written file behind
  }
}

void Writer::add(const std::string& name, const at::Tensor& tensor) {
  if (impl_->next >= impl_->entries.size() || impl_->entries[impl_->next].name != name) {
    throw Error("safetensors writer '" + impl_->path + "': got tensor '" + name + "', expected " +
                (impl_->next < impl_->entries.size() ? "'" + impl_->entries[impl_->next].name + "'" : "no more"));
  }
  const TensorEntry& entry = impl_->entries[impl_->next];
  if (tensor.scalar_type() != entry.dtype || tensor.sizes() != c10::IntArrayRef(entry.shape)) {
    throw Error("safetensors writer '" + impl_->path + "': tensor '" + name + "' is " +
                c10::toString(tensor.scalar_type()) + " " + c10::str(tensor.sizes()) + ", the header says " +
                dtype_name(entry.dtype) + " " + shape_text(entry.shape));
  }
  at::Tensor bytes = tensor.cpu().contiguous();
  impl_->out.write(static_cast<const char*>(bytes.data_ptr()), static_cast<std::streamsize>(bytes.nbytes()));
  if (!impl_->out) throw Error("safetensors writer: cannot write '" + impl_->temp_path + "' (disk full?)");
  ++impl_->next;
}

void Writer::finish() {
  if (impl_->next != impl_->entries.size()) {
    throw Error("safetensors writer '" + impl_->path + "': finished after " + std::to_string(impl_->next) + " of " +
                std::to_string(impl_->entries.size()) + " tensors");
  }
  impl_->out.close();
  if (!impl_->out) throw Error("safetensors writer: cannot close '" + impl_->temp_path + "'");
  int fd = ::open(impl_->temp_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code error;
  fs::rename(impl_->temp_path, impl_->path, error);
  if (error) throw Error("safetensors writer: cannot rename to '" + impl_->path + "': " + error.message());
  impl_->finished = true;
}

void save_file(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
               const std::map<std::string, std::string>& metadata) {
  std::vector<TensorEntry> entries;
  for (const auto& [name, tensor] : tensors) entries.push_back({name, tensor.scalar_type(), tensor.sizes().vec()});
  Writer writer(path, entries, metadata);
  for (const auto& [name, tensor] : tensors) writer.add(name, tensor);
  writer.finish();
}

}  // namespace titan::safetensors
