// The one error type Titan throws for problems a user can act on; the CLI
// prints its message and exits non-zero, never a bare LibTorch trace.
#pragma once
#include <stdexcept>
#include <string>

namespace titan {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace titan
