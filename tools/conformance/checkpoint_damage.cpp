#include "checkpoint_damage.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "titan/error.hpp"

namespace titan::conformance {

namespace fs = std::filesystem;

namespace {

// The largest file most likely holds tensor bytes rather than metadata,
// which is what a format without checksums loads silently.
fs::path largest_file(const std::string& folder) {
  fs::path largest;
  std::uintmax_t largest_size = 0;
  for (const auto& name : files_under(folder)) {
    std::uintmax_t size = fs::file_size(name);
    if (largest.empty() || size > largest_size) largest = name, largest_size = size;
  }
  if (largest.empty()) throw Error("no files under '" + folder + "' to damage");
  return largest;
}

}  // namespace

const std::vector<Damage>& checkpoint_damages() {
  static const std::vector<Damage> all = {
      {"flip", "bytes inverted in the middle of the largest file"},
      {"truncate", "the largest file cut to half its size"},
      {"delete", "the largest file deleted"},
  };
  return all;
}

std::vector<std::string> files_under(const std::string& folder) {
  std::vector<std::string> files;
  if (!fs::exists(folder)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());  // the same choice on every run
  return files;
}

std::string apply_damage(const std::string& damage, const std::string& folder) {
  fs::path file = largest_file(folder);
  auto size = static_cast<std::streamoff>(fs::file_size(file));
  std::string name = fs::relative(file, folder).string();
  if (damage == "delete") {
    fs::remove(file);
    return "deleted " + name;
  }
  if (damage == "truncate") {
    fs::resize_file(file, static_cast<std::uintmax_t>(size / 2));
    return "truncated " + name + " from " + std::to_string(size) + " to " + std::to_string(size / 2) + " bytes";
  }
  if (damage != "flip") throw Error("unknown checkpoint damage '" + damage + "'");
  // 8 bytes: whole elements of any dtype change, whatever their alignment.
  std::streamoff at = size / 2, count = std::min<std::streamoff>(8, size - at);
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes(static_cast<size_t>(count), '\0');
  stream.seekg(at);
  stream.read(bytes.data(), count);
  for (char& byte : bytes) byte = static_cast<char>(~byte);
  stream.seekp(at);
  stream.write(bytes.data(), count);
  if (!stream) throw Error("cannot flip bytes in '" + file.string() + "'");
  return "flipped " + std::to_string(count) + " bytes at " + std::to_string(at) + " of " + name + " (" +
         std::to_string(size) + " bytes)";
}

void copy_folder(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::create_directories(fs::path(to).parent_path());
  fs::copy(from, to, fs::copy_options::recursive);
}

}  // namespace titan::conformance
