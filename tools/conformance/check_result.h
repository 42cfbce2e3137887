// One row of the conformance report: a named check, pass/fail, and the
// measured quantity against its limit, so a failure says how far off it is.
#pragma once
#include <string>
#include <vector>

namespace titan::conformance {

struct CheckResult {
  std::string name;      // e.g. "optimizer.reference_step"
  bool passed = false;
  bool skipped = false;  // no check exists for this kind yet: reported, never counted as a pass
  double measured = 0;   // e.g. max |plugin - reference|
  double limit = 0;
  std::string detail;
};

using CheckResults = std::vector<CheckResult>;

// An error's first line: what a one-line report row quotes of it.
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace titan::conformance
