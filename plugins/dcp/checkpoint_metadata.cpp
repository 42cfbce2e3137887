// JSON (de)serialization of checkpoint metadata, strict on read: a
// checkpoint that does not parse is refused, never half-loaded.
#include "checkpoint_metadata.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "step_folders.h"
#include "titan/error.hpp"

namespace titan::dcp {

namespace {

using nlohmann::json;

const std::map<std::string, at::ScalarType>& dtypes() {
  static const std::map<std::string, at::ScalarType> names = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf},
      {"int64", at::kLong},    {"int32", at::kInt},      {"uint8", at::kByte},        {"int8", at::kChar},
      {"bool", at::kBool}};
  return names;
}

at::ScalarType dtype_from_name(const std::string& name) {
  auto found = dtypes().find(name);
  if (found == dtypes().end()) throw Error("unknown dtype '" + name + "'");
  return found->second;
}

std::string hex(uint32_t value) {
  std::ostringstream out;
  out << std::hex << value;
  return out.str();
}

json shard_json(const ShardRecord& shard) {
  json crcs = json::array();
  for (uint32_t crc : shard.chunk_crcs) crcs.push_back(hex(crc));
  return {{"file", shard.file}, {"offset", shard.offset}, {"bytes", shard.bytes},
          {"box_offset", shard.box.offset}, {"box_shape", shard.box.shape}, {"crc32", crcs}};
}

// nlohmann's get<int64_t>() turns a float into an integer with static_cast
// (undefined behaviour when it is out of range) and wraps large unsigned
// values: a checkpoint's integers must be JSON integers that fit.
int64_t integer_of(const json& value, const std::string& key) {
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    throw Error("\"" + key + "\" must be a 64-bit integer, got " + value.dump());
  }
  return value.get<int64_t>();
}

std::vector<int64_t> integers_of(const json& value, const std::string& key) {
  if (!value.is_array()) throw Error("\"" + key + "\" must be a list of integers, got " + value.dump());
  std::vector<int64_t> out;
  for (const auto& item : value) out.push_back(integer_of(item, key));
  return out;
}

ShardRecord shard_from(const json& value) {
  ShardRecord shard;
  shard.file = value.at("file").get<std::string>();
  shard.offset = integer_of(value.at("offset"), "offset");
  shard.bytes = integer_of(value.at("bytes"), "bytes");
  shard.box.offset = integers_of(value.at("box_offset"), "box_offset");
  shard.box.shape = integers_of(value.at("box_shape"), "box_shape");
  for (const auto& crc : value.at("crc32")) {
    const std::string text = crc.get<std::string>();
    size_t used = 0;
    unsigned long parsed = std::stoul(text, &used, 16);
    if (used != text.size() || text.size() > 8) throw Error("crc32 \"" + text + "\" is not a 32-bit hex number");
    shard.chunk_crcs.push_back(static_cast<uint32_t>(parsed));
  }
  return shard;
}

// numel of a shape, or an Error for a negative extent or an overflow.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t numel = 1;
  for (int64_t extent : shape) {
    if (extent < 0 || __builtin_mul_overflow(numel, extent, &numel)) {
      throw Error(what + " has an invalid shape " + c10::str(c10::IntArrayRef(shape)));
    }
  }
  return numel;
}

// A shard must be a box inside its tensor whose bytes and checksums match
// its size: copy_overlap trusts all of that when it reads the file.
void check_shard(const TensorEntry& entry, const ShardRecord& shard, const std::string& tensor) {
  const std::string what = "tensor '" + tensor + "': shard in '" + shard.file + "' at byte " +
                           std::to_string(shard.offset);
  size_t dims = entry.shape.size();
  if (shard.box.offset.size() != dims || shard.box.shape.size() != dims) {
    throw Error(what + " has a box of " + std::to_string(shard.box.offset.size()) + "/" +
                std::to_string(shard.box.shape.size()) + " dims for a tensor of " + std::to_string(dims));
  }
  for (size_t d = 0; d < dims; ++d) {
    int64_t offset = shard.box.offset[d], extent = shard.box.shape[d];
    if (offset < 0 || extent < 0 || offset > entry.shape[d] - extent) {
      throw Error(what + " lies outside the tensor's shape " + c10::str(c10::IntArrayRef(entry.shape)) +
                  " in dim " + std::to_string(d));
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(checked_numel(shard.box.shape, what), static_cast<int64_t>(c10::elementSize(entry.dtype)),
                             &bytes) ||
      shard.bytes != bytes) {
    throw Error(what + " records " + std::to_string(shard.bytes) + " bytes for its box, expected " +
                std::to_string(bytes));
  }
  if (shard.offset < 0) throw Error(what + ": negative offset");
  size_t chunks = static_cast<size_t>((bytes + kChunkBytes - 1) / kChunkBytes);
  if (shard.chunk_crcs.size() != chunks) {
    throw Error(what + " has " + std::to_string(shard.chunk_crcs.size()) + " checksums, expected " +
                std::to_string(chunks));
  }
}

json entry_json(const TensorEntry& entry) {
  json shards = json::array();
  for (const auto& shard : entry.shards) shards.push_back(shard_json(shard));
  return {{"dtype", dtype_name(entry.dtype)}, {"shape", entry.shape}, {"shards", shards}};
}

TensorEntry entry_from(const json& value, const std::string& name) {
  TensorEntry entry;
  entry.dtype = dtype_from_name(value.at("dtype").get<std::string>());
  entry.shape = integers_of(value.at("shape"), "shape");
  checked_numel(entry.shape, "tensor '" + name + "'");
  for (const auto& shard : value.at("shards")) {
    entry.shards.push_back(shard_from(shard));
    check_shard(entry, entry.shards.back(), name);
  }
  return entry;
}

}  // namespace

std::string dtype_name(at::ScalarType type) {
  for (const auto& [name, value] : dtypes()) {
    if (value == type) return name;
  }
  throw Error(std::string("checkpoint: unsupported dtype ") + c10::toString(type));
}

void CheckpointMetadata::merge(const CheckpointMetadata& fragment) {
  for (const auto& [name, entry] : fragment.tensors) {
    auto [slot, fresh] = tensors.try_emplace(name, entry);
    if (!fresh) slot->second.shards.insert(slot->second.shards.end(), entry.shards.begin(), entry.shards.end());
  }
  for (const auto& [name, by_rank] : fragment.rank_local) {
    for (const auto& [rank, entry] : by_rank) rank_local[name][rank] = entry;
  }
  for (const auto& [file, bytes] : fragment.files) files[file] = bytes;
}

std::string to_json_text(const CheckpointMetadata& metadata) {
  json tensors = json::object();
  for (const auto& [name, entry] : metadata.tensors) tensors[name] = entry_json(entry);
  json rank_local = json::object();
  for (const auto& [name, by_rank] : metadata.rank_local) {
    for (const auto& [rank, entry] : by_rank) rank_local[name][std::to_string(rank)] = entry_json(entry);
  }
  json out = {{"format", "titan-dcp-1"}, {"step", metadata.step},           {"world_size", metadata.world_size},
              {"mesh", metadata.mesh},   {"model_only", metadata.model_only}, {"values", metadata.values},
              {"files", metadata.files}, {"tensors", tensors},              {"rank_local", rank_local}};
  if (!metadata.error.empty()) out["error"] = metadata.error;
  return out.dump(1);
}

CheckpointMetadata from_json_text(const std::string& text, const std::string& origin) {
  try {
    json value = json::parse(text);
    if (value.at("format").get<std::string>() != "titan-dcp-1") {
      throw Error("format is '" + value.at("format").get<std::string>() + "', expected 'titan-dcp-1'");
    }
    CheckpointMetadata metadata;
    metadata.step = integer_of(value.at("step"), "step");
    int64_t world_size = integer_of(value.at("world_size"), "world_size");
    if (world_size < 1 || world_size > INT32_MAX) {
      throw Error("world_size " + std::to_string(world_size) + " is not a number of ranks");
    }
    metadata.world_size = static_cast<int>(world_size);
    metadata.mesh = value.at("mesh").get<std::string>();
    metadata.model_only = value.at("model_only").get<bool>();
    metadata.values = value.at("values").get<std::map<std::string, std::string>>();
    for (const auto& [file, bytes] : value.at("files").items()) {
      // Files live in the step folder: a name that leaves it is refused.
      if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos) {
        throw Error("file name '" + file + "' is not a file in the step folder");
      }
      metadata.files[file] = integer_of(bytes, "files");
    }
    for (const auto& [name, entry] : value.at("tensors").items()) metadata.tensors[name] = entry_from(entry, name);
    for (const auto& [name, by_rank] : value.at("rank_local").items()) {
      for (const auto& [rank, entry] : by_rank.items()) {
        size_t used = 0;
        int number = std::stoi(rank, &used);
        if (used != rank.size() || number < 0) throw Error("rank_local '" + name + "': '" + rank + "' is not a rank");
        metadata.rank_local[name][number] = entry_from(entry, "rank_local/" + name);
      }
    }
    if (value.contains("error")) metadata.error = value["error"].get<std::string>();
    return metadata;
  } catch (const std::exception& error) {
    throw Error(origin + " does not parse as checkpoint metadata (" + error.what() + ")");
  }
}

void write_metadata(const std::string& step_dir, const CheckpointMetadata& metadata) {
  std::string path = step_dir + "/metadata.json";
  {
    std::ofstream out(path);
    out << to_json_text(metadata) << "\n";
    out.flush();
    if (!out) throw Error("writing checkpoint metadata '" + path + "' failed (disk full?)");
  }
  fsync_path(path);
}

CheckpointMetadata read_metadata(const std::string& step_dir) {
  namespace fs = std::filesystem;
  std::string path = step_dir + "/metadata.json";
  std::ifstream in(path);
  if (!in) throw Error("checkpoint metadata '" + path + "' cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  CheckpointMetadata metadata = from_json_text(text.str(), "checkpoint metadata '" + path + "'");
  for (const auto& [file, bytes] : metadata.files) {
    std::error_code error;
    auto size = fs::file_size(fs::path(step_dir) / file, error);
    if (error) throw Error("checkpoint shard '" + step_dir + "/" + file + "' is missing");
    if (static_cast<int64_t>(size) != bytes) {
      throw Error("checkpoint shard '" + step_dir + "/" + file + "' has " + std::to_string(size) + " bytes, expected " +
                  std::to_string(bytes) + " (truncated or overwritten)");
    }
  }
  // Every shard within a listed file, and the shards of a tensor as many
  // elements as the tensor (commit() saves only such tilings): a reader
  // then allocates and reads no more than the files hold.
  auto check_entry = [&](const std::string& name, const TensorEntry& entry) {
    int64_t covered = 0;
    for (const auto& shard : entry.shards) {
      auto file = metadata.files.find(shard.file);
      if (file == metadata.files.end() || shard.offset > file->second - shard.bytes) {
        throw Error("checkpoint metadata '" + path + "': tensor '" + name + "' has a shard at bytes " +
                    std::to_string(shard.offset) + "+" + std::to_string(shard.bytes) + " of '" + shard.file +
                    "', which " + (file == metadata.files.end() ? "is not listed in \"files\"" : "is shorter"));
      }
      covered += shard.box.numel();  // each box lies inside the tensor: no overflow
    }
    if (covered != Box{{}, entry.shape}.numel()) {
      throw Error("checkpoint metadata '" + path + "': the shards of tensor '" + name + "' hold " +
                  std::to_string(covered) + " elements, its shape " + c10::str(c10::IntArrayRef(entry.shape)) +
                  " has " + std::to_string(Box{{}, entry.shape}.numel()));
    }
  };
  for (const auto& [name, entry] : metadata.tensors) check_entry(name, entry);
  for (const auto& [name, by_rank] : metadata.rank_local) {
    for (const auto& [rank, entry] : by_rank) check_entry("rank_local/" + name, entry);
  }
  return metadata;
}

}  // namespace titan::dcp
