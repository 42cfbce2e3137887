// The CPU's peak FLOP/s behind MFU, measured once per machine: every run
// (and every rank of one) used to spend 0.3 s of its cores timing a matmul
// at start, and measured a little differently each time. The measurement
// is kept under the user's cache folder, keyed by what it depends on.
#include <unistd.h>

#include <torch/torch.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "step_metrics.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace fs = std::filesystem;

namespace {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// What the measurement depends on: the CPU, how many cores it shows, the
// thread count the matmul ran with, and the LibTorch whose GEMMs it timed.
std::string cache_key() {
  return cpu_model_name() + " | " + std::to_string(std::thread::hardware_concurrency()) + " cores | " +
         std::to_string(at::get_num_threads()) + " threads | LibTorch " + TORCH_VERSION;
}

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return json.is_object() ? json : nlohmann::json::object();
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

}  // namespace

fs::path titan_cache_dir() {
  if (const char* dir = std::getenv("TITAN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "titan";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "titan";
  return fs::temp_directory_path() / "titan-cache";
}

CpuPeak cpu_peak_flops() {
  const fs::path file = titan_cache_dir() / "cpu_peak_flops.json";
  const std::string key = cache_key();
  const nlohmann::json cached = read_json(file);
  if (auto found = cached.find(key); found != cached.end() && found->contains("flops") &&
                                     (*found)["flops"].is_number() && (*found)["flops"].get<double>() > 0) {
    const std::string date = found->value("measured", std::string("an earlier run"));
    return {(*found)["flops"].get<double>(), "measured on " + date + ", kept in " + file.string()};
  }
  const double flops = measure_cpu_peak_flops();
  // Written beside and renamed over the file, so that ranks measuring at
  // once never read half a file; whoever renames last wins, which is fine.
  std::error_code error;
  fs::create_directories(file.parent_path(), error);
  nlohmann::json updated = read_json(file);
  updated[key] = {{"flops", flops}, {"measured", today()}};
  const fs::path partial = file.string() + "." + std::to_string(getpid()) + ".tmp";
  {
    std::ofstream out(partial);
    out << updated.dump(2) << "\n";
  }
  fs::rename(partial, file, error);
  if (error) {
    fs::remove(partial, error);
    return {flops, "measured at this run's start"};
  }
  spdlog::info("measured this CPU's peak for MFU: {:.3g} FLOP/s with {} threads (kept in {})", flops,
               at::get_num_threads(), file.string());
  return {flops, "measured at this run's start, kept in " + file.string()};
}

}  // namespace titan
