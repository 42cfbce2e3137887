// Helpers shared by the tests: temp folders, running the titan binary,
// reading files, looking for text in output. Include after <torch/torch.h> and before doctest.
#pragma once
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_paths.hpp"

namespace titan::test {

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

// Where temp_dir(name) is, without touching it.
inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::path(env_or("TITAN_TEST_TMP", paths::test_tmp)) / name;
}

// A fresh folder under the build tree's test tmp dir, removed first.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = temp_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// Whether `text` holds `part` (a message, a command's output).
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// |a - b| / |b|, with |b| kept off zero.
inline double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, capturing stdout+stderr.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline std::string titan_binary() { return env_or("TITAN_BINARY", paths::titan_binary); }
// The comm layer's multi-rank check program (tests/multirank_programs).
inline std::string dist_checks_binary() { return env_or("TITAN_DIST_CHECKS", paths::dist_checks_binary); }
inline std::string dcp_checks_binary() { return env_or("TITAN_DCP_CHECKS", paths::dcp_checks_binary); }
inline std::string tp_checks_binary() { return env_or("TITAN_TP_CHECKS", paths::tp_checks_binary); }
inline std::string source_dir() { return env_or("TITAN_SOURCE_DIR", paths::source_dir); }

}  // namespace titan::test
