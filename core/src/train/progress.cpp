#include "titan/progress.hpp"

#include <algorithm>
#include <cmath>

namespace titan {

namespace {
// Weight of the newest step in the average: recent steps dominate after a
// few tens of steps, one slow step (a checkpoint save) moves it little.
constexpr double kNewestWeight = 0.1;
}  // namespace

Progress::Progress(int64_t first_step, int64_t last_step, bool enabled, bool live, std::FILE* out)
    : first_step_(first_step),
      last_step_(last_step),
      enabled_(enabled),
      live_(enabled && live),
      out_(out),
      last_(std::chrono::steady_clock::now()) {}

void Progress::step_done(int64_t step, int64_t tokens) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  step_ = step;
  // The first step carries start-up work (warm-up, allocation): it starts
  // the average but is replaced by the second.
  if (step <= first_step_ + 1 || seconds_per_step_ < 0) {
    seconds_per_step_ = seconds;
  } else {
    seconds_per_step_ = (1 - kNewestWeight) * seconds_per_step_ + kNewestWeight * seconds;
  }
  if (seconds > 0) tokens_per_second_ = tokens / seconds;
}

double Progress::eta_seconds() const {
  if (!enabled_ || seconds_per_step_ < 0 || step_ == 0) return -1;
  return static_cast<double>(last_step_ - step_) * seconds_per_step_;
}

std::string Progress::duration_text(double seconds) {
  const auto total = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char text[32];
  if (total < 60) {
    std::snprintf(text, sizeof(text), "%llds", static_cast<long long>(total));
  } else if (total < 3600) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  } else if (total < 86400) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", static_cast<long long>(total / 3600),
                  static_cast<long long>(total % 3600 / 60));
  } else {
    std::snprintf(text, sizeof(text), "%lldd%02lldh", static_cast<long long>(total / 86400),
                  static_cast<long long>(total % 86400 / 3600));
  }
  return text;
}

std::string Progress::eta_suffix() const {
  const double eta = eta_seconds();
  return eta < 0 ? "" : "  ETA " + duration_text(eta);
}

void Progress::show() {
  if (!live_ || step_ == 0) return;
  const int64_t total = last_step_;
  const double percent = total > 0 ? 100.0 * static_cast<double>(step_) / static_cast<double>(total) : 0;
  // \r and "erase line" keep it one line; no newline until clear().
  std::fprintf(out_, "\r\033[2Kstep %lld/%lld (%.0f%%)  %.0f tokens/s%s", static_cast<long long>(step_),
               static_cast<long long>(total), percent, tokens_per_second_, eta_suffix().c_str());
  std::fflush(out_);
  shown_ = true;
}

void Progress::clear() {
  if (!live_ || !shown_) return;
  std::fputs("\r\033[2K", out_);
  std::fflush(out_);
  shown_ = false;
}

}  // namespace titan
