// Range-checked reads on top of ConfigNode::get: parallelism degrees and
// numbers in a range. The one place that writes a number into an error, so
// every plugin's message reads the same ("expected a number in [0, 1), got 1.5").
#include <cmath>
#include <limits>
#include <sstream>

#include "titan/config.hpp"

namespace titan {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Six significant digits without trailing zeros (1.5, 0.001, 1e-08), as
// users write numbers; std::to_string would say 1.500000.
std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

NumberRange::NumberRange(double low, bool low_included, double high, bool high_included)
    : low_(low), high_(high), low_included_(low_included), high_included_(high_included) {}

NumberRange NumberRange::at_least(double low) { return NumberRange(low, true, kInfinity, false); }
NumberRange NumberRange::above(double low) { return NumberRange(low, false, kInfinity, false); }
NumberRange NumberRange::closed(double low, double high) { return NumberRange(low, true, high, true); }
NumberRange NumberRange::half_open(double low, double high) { return NumberRange(low, true, high, false); }

bool NumberRange::contains(double value) const {
  if (!std::isfinite(value)) return false;
  const bool above_low = low_included_ ? value >= low_ : value > low_;
  const bool below_high = high_included_ ? value <= high_ : value < high_;
  return above_low && below_high;
}

std::string NumberRange::text() const {
  // One-sided ranges say "finite": NaN and infinity pass a bare ">= 0" in
  // a reader's mind, and they are refused.
  if (std::isinf(high_)) return std::string("a finite number ") + (low_included_ ? ">= " : "> ") + number_text(low_);
  return std::string("a number in ") + (low_included_ ? "[" : "(") + number_text(low_) + ", " + number_text(high_) +
         (high_included_ ? "]" : ")");
}

int64_t ConfigNode::degree(const std::string& key, int64_t fallback, const std::string& doc, Degree allowed) const {
  const int64_t value = get<int64_t>(key, fallback, doc);
  const bool rest_of_world = allowed == Degree::allow_rest && value == -1;
  if (value < 1 && !rest_of_world) {
    fail(key, std::string(allowed == Degree::allow_rest ? "expected a degree >= 1 or -1 (-1: the rest of the world)"
                                                        : "expected a degree >= 1") +
                  ", got " + std::to_string(value));
  }
  return value;
}

double ConfigNode::number(const std::string& key, double fallback, const NumberRange& range,
                          const std::string& doc) const {
  const double value = get<double>(key, fallback, doc);
  if (!range.contains(value)) fail(key, "expected " + range.text() + ", got " + number_text(value));
  return value;
}

}  // namespace titan
