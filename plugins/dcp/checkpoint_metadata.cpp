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

ShardRecord shard_from(const json& value) {
  ShardRecord shard;
  shard.file = value.at("file").get<std::string>();
  shard.offset = value.at("offset").get<int64_t>();
  shard.bytes = value.at("bytes").get<int64_t>();
  shard.box.offset = value.at("box_offset").get<std::vector<int64_t>>();
  shard.box.shape = value.at("box_shape").get<std::vector<int64_t>>();
  for (const auto& crc : value.at("crc32")) shard.chunk_crcs.push_back(std::stoul(crc.get<std::string>(), nullptr, 16));
  return shard;
}

json entry_json(const TensorEntry& entry) {
  json shards = json::array();
  for (const auto& shard : entry.shards) shards.push_back(shard_json(shard));
  return {{"dtype", dtype_name(entry.dtype)}, {"shape", entry.shape}, {"shards", shards}};
}

TensorEntry entry_from(const json& value) {
  TensorEntry entry;
  entry.dtype = dtype_from_name(value.at("dtype").get<std::string>());
  entry.shape = value.at("shape").get<std::vector<int64_t>>();
  for (const auto& shard : value.at("shards")) entry.shards.push_back(shard_from(shard));
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
    metadata.step = value.at("step").get<int64_t>();
    metadata.world_size = value.at("world_size").get<int>();
    metadata.mesh = value.at("mesh").get<std::string>();
    metadata.model_only = value.at("model_only").get<bool>();
    metadata.values = value.at("values").get<std::map<std::string, std::string>>();
    metadata.files = value.at("files").get<std::map<std::string, int64_t>>();
    for (const auto& [name, entry] : value.at("tensors").items()) metadata.tensors[name] = entry_from(entry);
    for (const auto& [name, by_rank] : value.at("rank_local").items()) {
      for (const auto& [rank, entry] : by_rank.items()) metadata.rank_local[name][std::stoi(rank)] = entry_from(entry);
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
  return metadata;
}

}  // namespace titan::dcp
