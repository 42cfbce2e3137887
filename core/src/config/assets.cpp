#include "titan/assets.hpp"

#include <filesystem>

namespace titan {
namespace build_info {
const char* source_dir();
}

std::string resolve_asset(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path) || path == "bytes") return path;
  fs::path shipped = fs::path(build_info::source_dir()) / path;
  return fs::exists(shipped) ? shipped.string() : path;
}

}  // namespace titan
