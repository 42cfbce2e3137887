// Where a path named in a config (tokenizer, dataset) is found: as given
// (absolute, or relative to the working directory), else in the Titan
// source tree, so configs naming shipped assets work from anywhere.
#pragma once
#include <string>

namespace titan {

// "bytes" (the byte tokenizer) and empty paths come back unchanged.
std::string resolve_asset(const std::string& path);

}  // namespace titan
