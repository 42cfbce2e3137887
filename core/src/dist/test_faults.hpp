// TEST-ONLY fault injection for the comm layer, read from the environment
// variable TITAN_TEST_FAULT so that no public header or config key carries
// it. The flight recorder tests use it to make one rank skip a call or issue
// a mismatched all_reduce (a hang or a mismatch to diagnose); killing a rank
// is a different hook (debug.crash_rank / crash_at_step).
//
//   TITAN_TEST_FAULT=ACTION:rank=R:op=OP:group=G[:seq=S]
//
// ACTION is `skip` (the call is not issued at all, as if the code path had
// skipped it: no observer sees it and the group's sequence does not advance),
// `grow` (all_reduce only: one extra element, so sizes differ across ranks)
// or `reshape` (all_reduce only: a trailing dim of 1, same bytes, a different
// shape). R is the global rank; G is a group's name or its first part (a mesh
// dim: `dp_shard` selects "dp_shard/pp0/..."); without `seq` the first
// matching call is hit.
// A fault fires at most once per process.
#pragma once
#include <cstdint>
#include <string>

// Private to libtitan_core: not exported (titan_core.map exports the
// titan namespace).
#pragma GCC visibility push(hidden)
namespace titan::test_faults {

enum class Action { none, skip, grow, reshape };

// Throws titan::Error naming TITAN_TEST_FAULT when it is set but malformed.
void check_environment();

// The fault to apply to this call (consumed when returned), or none.
Action take(const std::string& op, const std::string& group, int global_rank, uint64_t sequence);

}  // namespace titan::test_faults
#pragma GCC visibility pop
