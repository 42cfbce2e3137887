// The CPU's peak FLOP/s behind MFU, measured once per machine: every run
// (and every rank of one) used to spend 0.3 s of its cores timing a matmul
// at start, and measured a little differently each time. The measurement
// is kept under the user's cache folder, keyed by what it depends on, with
// how many other tasks were running then: one taken on a busy machine is
// too low (and MFU too high), so it is measured again once the machine is
// quiet, keeping the best.
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
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

// Threads of other processes running right now (state R in
// /proc/<pid>/task/<tid>/stat): what would slow the matmul down. This
// process's own threads are left out: LibTorch's OpenMP workers spin when
// idle. -1 when /proc cannot be read.
int other_running_tasks() {
  std::error_code error;
  fs::directory_iterator processes("/proc", error);
  if (error) return -1;
  const std::string self = std::to_string(getpid());
  int running = 0;
  for (const auto& process : processes) {
    const std::string pid = process.path().filename().string();
    if (pid == self || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    fs::directory_iterator tasks(process.path() / "task", error);
    if (error) continue;  // gone meanwhile
    for (const auto& task : tasks) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const size_t name_end = line.rfind(')');  // the command name may hold spaces and parentheses
      if (name_end != std::string::npos && line.size() > name_end + 2 && line[name_end + 2] == 'R') ++running;
    }
  }
  return running;
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

bool cpu_peak_measure_again(std::optional<int> busy_then, int busy_now) {
  return busy_now == 0 && (!busy_then || *busy_then != 0);
}

CpuPeak cpu_peak_flops() {
  const fs::path file = titan_cache_dir() / "cpu_peak_flops.json";
  const std::string key = cache_key();
  const nlohmann::json cached = read_json(file);
  // /proc is read only where the answer can matter: not for a peak kept
  // from a quiet machine, the usual case, at every rank's start.
  std::optional<int> busy_now;
  double kept = 0;
  if (auto found = cached.find(key); found != cached.end() && found->contains("flops") &&
                                     (*found)["flops"].is_number() && (*found)["flops"].get<double>() > 0) {
    kept = (*found)["flops"].get<double>();
    std::optional<int> busy_then;
    if (found->contains("busy") && (*found)["busy"].is_number_integer()) busy_then = (*found)["busy"].get<int>();
    if (busy_then != 0) busy_now = other_running_tasks();
    if (!busy_now || !cpu_peak_measure_again(busy_then, *busy_now)) {
      const std::string date = found->value("measured", std::string("an earlier run"));
      return {kept, "measured on " + date + ", kept in " + file.string()};
    }
    spdlog::info("measuring this CPU's peak for MFU again: the kept {:.3g} FLOP/s was measured beside {} running "
                 "task(s), and the machine is quiet now",
                 kept, busy_then ? std::to_string(*busy_then) : "an unknown number of");
  }
  if (!busy_now) busy_now = other_running_tasks();  // nothing kept: measured for the first time
  // The best of what was measured: another load only ever slows a matmul.
  const double flops = std::max(kept, measure_cpu_peak_flops());
  // Written beside and renamed over the file, so that ranks measuring at
  // once never read half a file; whoever renames last wins, which is fine.
  std::error_code error;
  fs::create_directories(file.parent_path(), error);
  nlohmann::json updated = read_json(file);
  updated[key] = {{"flops", flops}, {"measured", today()}, {"busy", *busy_now}};
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
