// Shared by the fuzz targets: what counts as a clean refusal of hostile
// input (a titan::Error, or another std::exception), and a private scratch
// folder for parsers that only read from a path.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>

#include "titan/error.hpp"

namespace titan::fuzz {

// Runs `parse`. Parsers refuse bad input by throwing titan::Error (the
// documented contract) or, deep inside a library, another std::exception;
// both are fine here. Anything else, a crash, a sanitizer report or a hang,
// is a bug: libFuzzer sees it because we let it escape.
//
// TITAN_FUZZ_STRICT=1 also stops on a std::exception that is not a
// titan::Error, to find errors that reach the user without file or key;
// TITAN_FUZZ_VERBOSE=1 prints every refusal (to check what seeds reach).
inline bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) == "1";
}

template <class F>
void expect_clean_refusal(F&& parse) {
  static const bool strict = env_flag("TITAN_FUZZ_STRICT");
  static const bool verbose = env_flag("TITAN_FUZZ_VERBOSE");
  try {
    parse();
  } catch (const titan::Error& error) {
    if (verbose) std::fprintf(stderr, "refused: %s\n", error.what());
  } catch (const std::exception& error) {
    if (verbose) std::fprintf(stderr, "refused (%s): %s\n", typeid(error).name(), error.what());
    if (strict) {
      std::fprintf(stderr, "TITAN_FUZZ_STRICT: a %s escaped without titan::Error context: %s\n", typeid(error).name(),
                   error.what());
      std::abort();
    }
  }
}

// One scratch folder per process (libFuzzer's -jobs run several processes),
// on tmpfs when there is one, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::string pattern = base + "/titan-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("titan fuzz: mkdtemp");
      std::abort();
    }
    return std::filesystem::path(pattern);
  }();
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup;
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "titan fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits the input at the first NUL byte: JSON and YAML text cannot hold a
// raw NUL, so a target that needs a text part and a binary part (metadata
// and its shard file) gets both from one mutable input.
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view input) {
  size_t nul = input.find('\0');
  if (nul == std::string_view::npos) return {input, {}};
  return {input.substr(0, nul), input.substr(nul + 1)};
}

}  // namespace titan::fuzz
