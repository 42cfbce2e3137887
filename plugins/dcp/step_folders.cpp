// Commit protocol: files fsynced, metadata.json last, then one rename; a
// crash at any point leaves every committed step loadable.
#include "step_folders.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "titan/error.hpp"

namespace titan::dcp {

namespace fs = std::filesystem;

std::string step_dir(const std::string& folder, int64_t step) {
  return (fs::path(folder) / ("step-" + std::to_string(step))).string();
}

std::string partial_dir(const std::string& folder, int64_t step) { return step_dir(folder, step) + ".partial"; }

std::vector<int64_t> committed_steps(const std::string& folder) {
  std::vector<int64_t> steps;
  std::error_code error;
  if (!fs::is_directory(folder, error)) return steps;
  static const std::regex pattern("step-([0-9]+)");
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    std::smatch match;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, pattern) && fs::exists(entry.path() / "metadata.json")) {
      steps.push_back(std::stoll(match[1].str()));
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void commit_rename(const std::string& partial, const std::string& final_dir) {
  fsync_path(partial);
  std::error_code error;
  if (fs::exists(final_dir)) fs::remove_all(final_dir, error);  // a re-save of the same step
  fs::rename(partial, final_dir, error);
  if (error) throw Error("cannot commit checkpoint '" + partial + "' as '" + final_dir + "': " + error.message());
  fsync_path(fs::path(final_dir).parent_path().string());
}

void prune(const std::string& folder, int64_t keep) {
  std::vector<int64_t> steps = committed_steps(folder);
  std::error_code error;
  if (keep > 0) {
    for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
      fs::remove_all(step_dir(folder, steps[i]), error);
    }
  }
  if (steps.empty()) return;
  static const std::regex pattern("step-([0-9]+)\\.partial");
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    std::smatch match;
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, pattern) && std::stoll(match[1].str()) <= steps.back()) {
      fs::remove_all(entry.path(), error);
    }
  }
}

}  // namespace titan::dcp
