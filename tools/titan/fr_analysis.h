// `titan fr-analyze`: reads every rank's flight recorder dump and finds
// the first place where the ranks' collectives diverge (as PyTorch's
// fr_trace does): ranks missing, ranks that never entered a collective the
// others wait in, and mismatched ops, sizes or call sites for one sequence id;
// and pairs each send with its recv per stream (group, sender, receiver, tag)
// to name a recv nobody sent, a send nobody received, and who waits on it.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace titan::cli::fr {

struct Entry {
  uint64_t id = 0, sequence = 0;
  std::string op, group, shapes, dtype, call_site, state;  // shapes as JSON text, e.g. [[4,8]]
  std::vector<int> group_ranks;
  int64_t bytes = 0;
  double enqueue_time_s = 0;  // Unix seconds
  // Version 2 dumps. Collectives: the n-th collective on the group (-1: a
  // version 1 dump, where `sequence` counts collectives and send/recv alike).
  // send/recv: the other end (a global rank), the tag and the n-th op of
  // this stream (-1: not recorded).
  int64_t collective_sequence = -1;
  int peer = -1, tag = 0;
  int64_t p2p_sequence = -1;
  // An uneven all-to-all: rows to and from each member of group_ranks, in
  // its order (empty otherwise). Its shapes differ between ranks by design.
  std::vector<int64_t> send_rows, recv_rows;
};

struct GroupStatus {
  std::string name;
  std::vector<int> ranks;
  int64_t last_enqueued = -1, last_completed = -1;
  int64_t last_collective = -1;  // last collective_sequence (version 1: last_enqueued)
};

// This rank's sends to `peer` (op "send") or recvs from it ("recv") on one
// group with one tag, in p2p_sequence numbers; these survive the ring wrapping.
struct P2pStatus {
  std::string group, op;
  std::vector<int> group_ranks;
  int peer = -1, tag = 0;
  int64_t last_enqueued = -1, last_completed = -1;
};

struct Dump {
  std::string path, trigger, reason;
  int rank = 0, world_size = 1, version = 1;
  double dump_time_s = 0;
  std::vector<Entry> entries;  // oldest first
  std::vector<GroupStatus> groups;
  std::vector<P2pStatus> p2p;  // version 2
};

// All rank_*.json in `dir` or in `dir`/flight_recorder. Throws titan::Error
// naming the file and key on unreadable or malformed dumps, or when none exist.
std::vector<Dump> load_dumps(const std::string& dir);

// One behaviour shared by some ranks at a sequence id.
struct Variant {
  std::vector<int> ranks;
  std::string description;  // "all_gather [[1024]] Float at 'step 1 / ...' (started)" or "not entered"
};

// One direction of point-to-point traffic: rank `from`'s sends to rank `to`
// on one group with one tag, and `to`'s recvs from `from`. The n-th send
// matches the n-th recv.
struct P2pStream {
  std::string group;
  std::vector<int> group_ranks;
  int from = -1, to = -1, tag = 0;
  int64_t sends = -1, recvs = -1;  // ops posted; -1: unknown (that rank left no dump)
  int64_t matched = 0;             // pairs whose both ends were posted
  // matched (every op paired), unmatched_recv, unmatched_send, p2p_size_mismatch, or
  // peer_missing (one end left no dump)
  std::string status;
};

struct Finding {
  // missing_rank, not_entered, op_mismatch, size_mismatch, split_mismatch (an uneven all-to-all's
  // rows: what one member sends another is not what that one receives), call_site_mismatch (collectives);
  // unmatched_recv, unmatched_send, p2p_size_mismatch (send/recv)
  std::string kind;
  std::string group;
  std::vector<int> group_ranks;
  int64_t sequence = -1;            // collectives: the aligned id; send/recv: the op's number in its stream
  std::string op;                   // the op most ranks are in; send/recv: the op at fault
  std::vector<int> faulty_ranks;    // the minority (all involved on a tie); send/recv: the end that never posted
  std::vector<int> stuck_ranks;     // send/recv: the rank waiting in the op at fault
  int from = -1, to = -1, tag = 0;  // send/recv: the stream
  std::vector<Variant> variants;
  std::string call_site;            // collectives: where most ranks issued it, for ordering
  double time_s = 0;                // earliest enqueue among the ranks, for ordering
  std::string summary;              // one sentence
};

struct Analysis {
  int world_size = 0;
  std::vector<int> ranks_with_dumps, missing_ranks;
  std::vector<Dump> dumps;          // entries dropped, for the per-rank lines
  std::vector<Finding> findings;    // first divergence first
  std::vector<std::string> waiting; // what each group was stuck in at dump time
  std::vector<P2pStream> streams;   // every send/recv stream, by group, sender, receiver, tag
  std::vector<std::string> p2p;     // per group with send/recv: how many matched, what did not
};

Analysis analyze(const std::vector<Dump>& dumps);
std::string render_text(const Analysis& analysis);
std::string render_json(const Analysis& analysis);

// Shared by the two halves of analyze(): fr_analysis.cpp (collectives) and fr_p2p.cpp (send/recv).
namespace detail {
std::string ranks_text(const std::vector<int>& ranks);  // "0,1,3"
std::string group_key(const std::string& name, const std::vector<int>& ranks);
bool point_to_point(const std::string& op);
struct P2pResult {
  std::vector<Finding> findings;  // one per stream at most, unordered
  std::vector<std::pair<std::vector<int>, std::string>> waiting;  // (group ranks, what its ranks wait on)
};
// Fills analysis.streams and analysis.p2p.
P2pResult analyze_p2p(const std::vector<Dump>& dumps, Analysis& analysis);
}  // namespace detail

}  // namespace titan::cli::fr
