// Hugging Face model folders of safetensors files: a single file, or
// shards named by model.safetensors.index.json ({"weight_map": {tensor:
// file}}). Only headers are read up front; tensors come one at a time.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/error.hpp"
#include "titan/safetensors.hpp"

namespace titan::safetensors {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";

[[noreturn]] void fail_folder(const std::string& where, const std::string& message) {
  throw Error("Hugging Face folder '" + where + "': " + message);
}

std::vector<std::string> safetensors_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(dir, error)) {
    if (item.is_regular_file() && item.path().extension() == ".safetensors") files.push_back(item.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// tensor -> file name, from the index's weight_map.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) throw Error("cannot read '" + index_path + "'");
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& error) {
    throw Error("'" + index_path + "' is not valid JSON: " + error.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw Error("'" + index_path + "' has no \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    // A plain file name: an index must not point outside its folder
    // ("../x", "/x") or into another one.
    const std::string name = file.is_string() ? file.get<std::string>() : std::string();
    if (name.empty() || fs::path(name).filename().string() != name || name == "." || name == "..") {
      throw Error("'" + index_path + "': weight_map[\"" + tensor + "\"] must be a file name in the folder, got " +
                  file.dump());
    }
    weight_map[tensor] = file.get<std::string>();
  }
  return weight_map;
}

}  // namespace

bool is_hf_folder(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) return false;
  return fs::exists(fs::path(dir) / kIndexName, error) || !safetensors_files(dir).empty();
}

Folder::Folder(const std::string& dir) : dir_(dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) fail_folder(dir, "no such folder");
  fs::path index = fs::path(dir) / kIndexName;
  if (fs::exists(index, error)) {
    std::map<std::string, size_t> file_index;
    for (const auto& [tensor, file] : read_weight_map(index.string())) {
      auto [slot, added] = file_index.emplace(file, files_.size());
      if (added) files_.emplace_back((fs::path(dir) / file).string());
      if (!files_[slot->second].contains(tensor)) {
        fail_folder(dir,
             std::string(kIndexName) + " puts tensor '" + tensor + "' in '" + file + "', which has no such tensor");
      }
      owner_[tensor] = slot->second;
    }
    return;
  }
  for (const auto& path : safetensors_files(dir)) {
    files_.emplace_back(path);
    for (const auto& [tensor, info] : files_.back().tensors()) {
      auto [slot, added] = owner_.emplace(tensor, files_.size() - 1);
      if (!added) {
        fail_folder(dir, "tensor '" + tensor + "' is in both '" + files_[slot->second].path() + "' and '" + path + "'");
      }
    }
  }
  if (files_.empty()) fail_folder(dir, std::string("no *.safetensors files and no ") + kIndexName);
}

std::vector<std::string> Folder::names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : owner_) names.push_back(name);
  return names;
}

const File& Folder::file_for(const std::string& name) const {
  auto found = owner_.find(name);
  if (found == owner_.end()) fail_folder(dir_, "has no tensor '" + name + "'");
  return files_[found->second];
}

const TensorInfo& Folder::info(const std::string& name) const { return file_for(name).info(name); }
at::Tensor Folder::read(const std::string& name) const { return file_for(name).read(name); }
const std::string& Folder::file_of(const std::string& name) const { return file_for(name).path(); }

}  // namespace titan::safetensors
