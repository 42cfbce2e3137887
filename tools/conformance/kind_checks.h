// Which checks run for which plugin kinds: the one place a new kind's
// checks are wired in.
#pragma once
#include <string>
#include <vector>

#include "check_result.h"
#include "titan/config.hpp"

namespace titan::conformance {

struct KindCheckRequest {
  std::string plugin;            // path of the plugin library
  std::string declaration_path;  // its conformance declaration
  const ConfigNode& declaration;
  std::vector<int> ranks;        // world sizes for multi-rank kinds
  std::string scratch;           // a fresh folder for workers' files
};

// Runs every kind's checks the plugin declares; a kind without checks is
// reported as skipped, never as passed.
CheckResults run_kind_checks(const KindCheckRequest& request, uint32_t kinds);

// Registers every multi-rank worker (for --worker).
void register_workers();

}  // namespace titan::conformance
