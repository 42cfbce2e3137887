// The few collectives a checkpoint needs, over the checkpoint-only group
// (a null group means one process and makes them local).
#pragma once
#include <string>
#include <vector>

namespace titan {
class Comm;
}

namespace titan::dcp {

// Every rank's text, in rank order.
std::vector<std::string> all_gather_text(Comm* comm, const std::string& text);
// True on every rank iff `ok` was true on every rank.
bool all_ok(Comm* comm, bool ok);
void barrier(Comm* comm);

}  // namespace titan::dcp
