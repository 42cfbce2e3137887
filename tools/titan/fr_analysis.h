// `titan fr-analyze`: reads every rank's flight recorder dump and finds
// the first place where the ranks' collectives diverge (as PyTorch's
// fr_trace does): ranks missing, ranks that never entered a collective the
// others wait in, and mismatched ops, sizes or call sites for one sequence id.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan::cli::fr {

struct Entry {
  uint64_t id = 0, sequence = 0;
  std::string op, group, shapes, dtype, call_site, state;  // shapes as JSON text, e.g. [[4,8]]
  std::vector<int> group_ranks;
  int64_t bytes = 0;
  double enqueue_time_s = 0;  // Unix seconds
};

struct GroupStatus {
  std::string name;
  std::vector<int> ranks;
  int64_t last_enqueued = -1, last_completed = -1;
};

struct Dump {
  std::string path, trigger, reason;
  int rank = 0, world_size = 1;
  double dump_time_s = 0;
  std::vector<Entry> entries;  // oldest first
  std::vector<GroupStatus> groups;
};

// All rank_*.json in `dir` or in `dir`/flight_recorder. Throws titan::Error
// naming the file and key on unreadable or malformed dumps, or when none exist.
std::vector<Dump> load_dumps(const std::string& dir);

// One behaviour shared by some ranks at a sequence id.
struct Variant {
  std::vector<int> ranks;
  std::string description;  // "all_gather [[1024]] Float at 'step 1 / ...' (started)" or "not entered"
};

struct Finding {
  std::string kind;  // missing_rank, not_entered, op_mismatch, size_mismatch, call_site_mismatch
  std::string group;
  std::vector<int> group_ranks;
  int64_t sequence = -1;
  std::string op;                   // the op most ranks are in
  std::vector<int> faulty_ranks;    // the minority (all involved on a tie)
  std::vector<Variant> variants;
  double time_s = 0;                // earliest enqueue among the ranks, for ordering
  std::string summary;              // one sentence
};

struct Analysis {
  int world_size = 0;
  std::vector<int> ranks_with_dumps, missing_ranks;
  std::vector<Dump> dumps;          // entries dropped, for the per-rank lines
  std::vector<Finding> findings;    // first divergence first
  std::vector<std::string> waiting; // what each group was stuck in at dump time
};

Analysis analyze(const std::vector<Dump>& dumps);
std::string render_text(const Analysis& analysis);
std::string render_json(const Analysis& analysis);

}  // namespace titan::cli::fr
