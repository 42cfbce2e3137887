// A refusal's message, for the tests that check what an error says.
#pragma once
#include <string>

#include "titan/error.hpp"

namespace titan::test {

// The message of the titan::Error (config errors included) `action`
// throws, or "<no error>".
template <class F>
std::string error_of(F&& action) {
  try {
    action();
  } catch (const titan::Error& error) {
    return error.what();
  }
  return "<no error>";
}

}  // namespace titan::test
