// Progress and ETA for a person watching the run (metrics.progress): on a
// terminal, rank 0 keeps one live line between the log lines ("step 12/100
// (12%)  3,400 tokens/s  ETA 2m10s"); in a file or under a launcher (not a
// terminal) only the log lines, each with the ETA appended.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace titan {

class Progress {
 public:
  // `live`: stderr is a terminal and this is the rank that speaks.
  Progress(int64_t first_step, int64_t last_step, bool enabled, bool live, std::FILE* out = stderr);
  // A step finished: its tokens (this rank's) for the rate, its time for the ETA.
  void step_done(int64_t step, int64_t tokens);
  void show();   // redraws the live line (live mode only)
  void clear();  // erases it before a log line is printed (live mode only)
  // " ETA 2m10s" for a log line ("" when disabled or nothing is known yet).
  std::string eta_suffix() const;
  double eta_seconds() const;  // -1: unknown

  static std::string duration_text(double seconds);  // "45s", "2m10s", "3h04m", "2d05h"

 private:
  int64_t first_step_, last_step_;
  bool enabled_, live_;
  std::FILE* out_;
  int64_t step_ = 0;
  double seconds_per_step_ = -1;  // exponential average over recent steps
  double tokens_per_second_ = 0;
  std::chrono::steady_clock::time_point last_;
  bool shown_ = false;
};

}  // namespace titan
