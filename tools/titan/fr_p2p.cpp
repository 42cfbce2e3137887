// The send/recv half of the analysis: each rank numbers its sends to a peer
// (and its recvs from one) per group and tag, so the n-th send of A to B
// pairs with the n-th recv of B from A. A stream whose counts differ names
// the first op without a partner, and the rank left waiting in it.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "fr_analysis.h"

namespace titan::cli::fr::detail {

namespace {

// One end of a stream, as its rank's dump tells it.
struct Side {
  bool dumped = false;
  int64_t last_enqueued = -1, last_completed = -1;
  std::map<int64_t, const Entry*> by_number;

  const Entry* find(int64_t number) const {
    auto found = by_number.find(number);
    return found == by_number.end() ? nullptr : found->second;
  }
  // An op evicted from the ring still has a state through the counters.
  std::string state(int64_t number) const {
    if (const Entry* entry = find(number)) return entry->state;
    return number <= last_completed ? "completed" : "not completed";
  }
};

struct Stream {
  std::string group;
  std::vector<int> group_ranks;
  int from = -1, to = -1, tag = 0;
  Side sends, recvs;
};

struct GroupP2p {
  std::string name;
  std::vector<int> ranks;
  std::vector<const Stream*> streams;
  int64_t unnumbered = 0;  // send/recv without peer or number (a version 1 dump)
  std::map<int, std::vector<const Entry*>> open;  // rank -> its send/recv not completed, oldest first
};

using StreamKey = std::tuple<std::string, int, int, int>;  // group key, from, to, tag

std::string range_text(int64_t last) {
  if (last < 0) return "none";
  return last == 0 ? "#0" : "#0..#" + std::to_string(last);
}

// "recv #3 from rank 0 (tag 12)"
std::string op_name(const std::string& op, int64_t number, int peer, int tag) {
  return op + " #" + std::to_string(number) + (op == "send" ? " to rank " : " from rank ") + std::to_string(peer) +
         " (tag " + std::to_string(tag) + ")";
}

// "[[2,32,64]] Float at 'step 4 / ...' (started)"
std::string op_detail(const Side& side, int64_t number) {
  const Entry* entry = side.find(number);
  if (!entry) return "(" + side.state(number) + ", no longer in its buffer)";
  return entry->shapes + " " + entry->dtype + (entry->call_site.empty() ? "" : " at '" + entry->call_site + "'") +
         " (" + entry->state + ")";
}

// What the rank holding `number` on `side` does about it: "; rank 1 is stuck waiting for it". A
// failed op waited too, until the comm layer gave up (its timeout, or the peer's connection closing).
std::string consequence(const Side& side, int64_t number, int rank) {
  std::string state = side.state(number);
  if (state == "completed") return "";
  return "; rank " + std::to_string(rank) + (state == "failed" ? " was stuck waiting for it until it failed"
                                                                : " is stuck waiting for it");
}

std::string group_prefix(const Stream& stream) {
  return "group '" + stream.group + "' [" + ranks_text(stream.group_ranks) + "]: ";
}

Finding finding_for(const Stream& stream, const std::string& kind, const std::string& op, int64_t number,
                    const Side& side) {
  Finding finding;
  finding.kind = kind;
  finding.group = stream.group;
  finding.group_ranks = stream.group_ranks;
  finding.sequence = number;
  finding.op = op;
  finding.from = stream.from;
  finding.to = stream.to;
  finding.tag = stream.tag;
  if (const Entry* entry = side.find(number)) finding.time_s = entry->enqueue_time_s;
  if (side.state(number) != "completed") finding.stuck_ranks = {op == "send" ? stream.from : stream.to};
  std::string tag = " on tag " + std::to_string(stream.tag);
  auto side_line = [&](const Side& end, int rank, const std::string& what) -> Variant {
    if (!end.dumped) return {{rank}, what + tag + ": unknown (no dump)"};
    return {{rank}, what + tag + ": posted " + range_text(end.last_enqueued) + ", completed " +
                        range_text(end.last_completed)};
  };
  finding.variants.push_back(side_line(stream.sends, stream.from, "sends to rank " + std::to_string(stream.to)));
  finding.variants.push_back(side_line(stream.recvs, stream.to, "recvs from rank " + std::to_string(stream.from)));
  return finding;
}

// The first op of `stream` without a partner, or sizes that differ in a pair; false when all pair up.
bool unmatched(const Stream& stream, Finding& finding, std::string& status) {
  const Side &sends = stream.sends, &recvs = stream.recvs;
  const std::string from = "rank " + std::to_string(stream.from), to = "rank " + std::to_string(stream.to);
  const std::string tag = " on tag " + std::to_string(stream.tag);
  if (!sends.dumped || !recvs.dumped) {
    status = "peer_missing";
    // The dumped end's first op not completed is what it waits on.
    const bool receiver_dumped = recvs.dumped;
    const Side& side = receiver_dumped ? recvs : sends;
    const int64_t number = side.last_completed + 1;
    if (number > side.last_enqueued) return false;
    const int rank = receiver_dumped ? stream.to : stream.from, peer = receiver_dumped ? stream.from : stream.to;
    const std::string op = receiver_dumped ? "recv" : "send";
    finding = finding_for(stream, receiver_dumped ? "unmatched_recv" : "unmatched_send", op, number, side);
    finding.faulty_ranks = {peer};
    finding.summary = group_prefix(stream) + "rank " + std::to_string(rank) + " posted " +
                      op_name(op, number, peer, stream.tag) + " " + op_detail(side, number) + " and rank " +
                      std::to_string(peer) + " left no dump, so no " + (receiver_dumped ? "send" : "recv") +
                      " can be paired with it" + consequence(side, number, rank);
    return true;
  }
  // Sizes first: a pair that disagrees comes before any op posted after it.
  const int64_t paired = std::min(sends.last_enqueued, recvs.last_enqueued);
  for (const auto& [number, received] : recvs.by_number) {
    if (number > paired) break;
    const Entry* sent = sends.find(number);
    if (!sent || (sent->shapes == received->shapes && sent->dtype == received->dtype)) continue;
    status = "p2p_size_mismatch";
    finding = finding_for(stream, "p2p_size_mismatch", "recv", number, recvs);
    finding.faulty_ranks = {std::min(stream.from, stream.to), std::max(stream.from, stream.to)};
    finding.faulty_ranks.erase(std::unique(finding.faulty_ranks.begin(), finding.faulty_ranks.end()),
                               finding.faulty_ranks.end());
    finding.summary = group_prefix(stream) + "send #" + std::to_string(number) + " from " + from + " to " + to +
                      " (tag " + std::to_string(stream.tag) + ") carries " + sent->shapes + " " + sent->dtype +
                      " but " + to + "'s recv #" + std::to_string(number) + " expects " + received->shapes + " " +
                      received->dtype + (received->call_site.empty() ? "" : " at '" + received->call_site + "'");
    return true;
  }
  if (recvs.last_enqueued > sends.last_enqueued) {
    status = "unmatched_recv";
    const int64_t number = sends.last_enqueued + 1, more = recvs.last_enqueued - number;
    finding = finding_for(stream, "unmatched_recv", "recv", number, recvs);
    finding.faulty_ranks = {stream.from};
    std::string last = sends.last_enqueued < 0
                           ? from + " sent nothing to " + to + tag + " on this group"
                           : from + "'s last send to " + to + tag + " was #" + std::to_string(sends.last_enqueued) +
                                 " " + op_detail(sends, sends.last_enqueued);
    finding.summary = group_prefix(stream) + to + " posted " + op_name("recv", number, stream.from, stream.tag) +
                      " " + op_detail(recvs, number) + " that " + from + " never sent" +
                      (more > 0 ? " (nor the " + std::to_string(more) + " after it)" : "") + "; " + last +
                      consequence(recvs, number, stream.to);
    return true;
  }
  if (sends.last_enqueued > recvs.last_enqueued) {
    status = "unmatched_send";
    const int64_t number = recvs.last_enqueued + 1, more = sends.last_enqueued - number;
    finding = finding_for(stream, "unmatched_send", "send", number, sends);
    finding.faulty_ranks = {stream.to};
    std::string last = recvs.last_enqueued < 0
                           ? to + " received nothing from " + from + tag + " on this group"
                           : to + "'s last recv from " + from + tag + " was #" + std::to_string(recvs.last_enqueued) +
                                 " " + op_detail(recvs, recvs.last_enqueued);
    finding.summary = group_prefix(stream) + from + " posted " + op_name("send", number, stream.to, stream.tag) +
                      " " + op_detail(sends, number) + " that " + to + " never received" +
                      (more > 0 ? " (nor the " + std::to_string(more) + " after it)" : "") + "; " + last +
                      consequence(sends, number, stream.from);
    return true;
  }
  status = "matched";
  return false;
}

// "recv #3 from rank 0 (tag 12) [[4]] Float at '...' (started), unmatched: rank 0 never sent it"
std::string open_op_text(const Entry& entry, const Stream* stream) {
  if (!stream) {
    return entry.op + " seq " + std::to_string(entry.sequence) + " " + entry.shapes + " " + entry.dtype +
           (entry.call_site.empty() ? "" : " at '" + entry.call_site + "'") + " (" + entry.state + ")";
  }
  const bool send = entry.op == "send";
  const int peer = send ? stream->to : stream->from;
  const Side& mine = send ? stream->sends : stream->recvs;
  const Side& other = send ? stream->recvs : stream->sends;
  const int64_t number = entry.p2p_sequence;
  std::string text = op_name(entry.op, number, peer, stream->tag) + " " + op_detail(mine, number) + ", ";
  if (!other.dumped) return text + "rank " + std::to_string(peer) + " left no dump";
  if (number <= other.last_enqueued) {
    return text + "paired with rank " + std::to_string(peer) + "'s " + (send ? "recv #" : "send #") +
           std::to_string(number) + " (" + other.state(number) + ")";
  }
  return text + "unmatched: rank " + std::to_string(peer) + (send ? " never posted its recv" : " never sent it");
}

}  // namespace

P2pResult analyze_p2p(const std::vector<Dump>& dumps, Analysis& analysis) {
  std::set<int> dumped;
  for (const Dump& dump : dumps) dumped.insert(dump.rank);
  std::map<StreamKey, Stream> streams;
  std::map<std::string, GroupP2p> groups;
  auto group_of = [&](const std::string& name, const std::vector<int>& ranks) -> GroupP2p& {
    GroupP2p& group = groups[group_key(name, ranks)];
    group.name = name;
    group.ranks = ranks;
    return group;
  };
  auto side_of = [&](const std::string& name, const std::vector<int>& ranks, const std::string& op, int rank, int peer,
                     int tag) -> Side& {
    group_of(name, ranks);
    const bool send = op == "send";
    Stream& stream = streams[{group_key(name, ranks), send ? rank : peer, send ? peer : rank, tag}];
    if (stream.from < 0) {
      stream.group = name;
      stream.group_ranks = ranks;
      stream.from = send ? rank : peer;
      stream.to = send ? peer : rank;
      stream.tag = tag;
    }
    return send ? stream.sends : stream.recvs;
  };
  for (const Dump& dump : dumps) {
    for (const P2pStatus& status : dump.p2p) {
      Side& side = side_of(status.group, status.group_ranks, status.op, dump.rank, status.peer, status.tag);
      side.last_enqueued = std::max(side.last_enqueued, status.last_enqueued);
      side.last_completed = std::max(side.last_completed, status.last_completed);
    }
    for (const Entry& entry : dump.entries) {
      if (!point_to_point(entry.op)) continue;
      if (entry.peer < 0 || entry.p2p_sequence < 0) {
        ++group_of(entry.group, entry.group_ranks).unnumbered;
        continue;
      }
      Side& side = side_of(entry.group, entry.group_ranks, entry.op, dump.rank, entry.peer, entry.tag);
      side.by_number[entry.p2p_sequence] = &entry;  // oldest first: a reused number keeps the newest
      side.last_enqueued = std::max(side.last_enqueued, entry.p2p_sequence);
      if (entry.state == "completed") side.last_completed = std::max(side.last_completed, entry.p2p_sequence);
    }
  }
  P2pResult result;
  std::map<const Stream*, std::string> status_of;
  for (auto& [key, stream] : streams) {
    stream.sends.dumped = dumped.count(stream.from) > 0;
    stream.recvs.dumped = dumped.count(stream.to) > 0;
    Finding finding;
    std::string status;
    if (unmatched(stream, finding, status)) result.findings.push_back(finding);
    status_of[&stream] = status;
    groups[std::get<0>(key)].streams.push_back(&stream);
    P2pStream summary;
    summary.group = stream.group;
    summary.group_ranks = stream.group_ranks;
    summary.from = stream.from;
    summary.to = stream.to;
    summary.tag = stream.tag;
    summary.sends = stream.sends.dumped ? stream.sends.last_enqueued + 1 : -1;
    summary.recvs = stream.recvs.dumped ? stream.recvs.last_enqueued + 1 : -1;
    summary.matched = std::max<int64_t>(0, std::min(summary.sends, summary.recvs));
    summary.status = status;
    analysis.streams.push_back(summary);
  }
  // What each rank waits on: its send/recv not completed, oldest first.
  std::map<const Entry*, const Stream*> stream_of;
  for (const auto& [key, stream] : streams) {
    for (const Side* side : {&stream.sends, &stream.recvs}) {
      for (const auto& [number, entry] : side->by_number) stream_of[entry] = &stream;
    }
  }
  for (const Dump& dump : dumps) {
    for (const Entry& entry : dump.entries) {
      if (!point_to_point(entry.op) || entry.state == "completed") continue;
      // A number reused in the ring (a corrupt dump) keeps only its newest entry.
      auto found = stream_of.find(&entry);
      if (entry.peer >= 0 && entry.p2p_sequence >= 0 && found == stream_of.end()) continue;
      group_of(entry.group, entry.group_ranks).open[dump.rank].push_back(&entry);
    }
  }
  for (const auto& [key, group] : groups) {
    std::string line = "group '" + group.name + "' [" + ranks_text(group.ranks) + "]: ";
    if (!group.streams.empty()) {
      int64_t pairs = 0;
      std::vector<std::string> problems;
      for (const Stream* stream : group.streams) {
        const std::string& status = status_of[stream];
        pairs += std::max<int64_t>(0, std::min(stream->sends.last_enqueued, stream->recvs.last_enqueued) + 1);
        if (status == "matched") continue;
        std::string what = "rank " + std::to_string(stream->from) + " -> rank " + std::to_string(stream->to) +
                           " tag " + std::to_string(stream->tag) + ": ";
        if (status == "peer_missing") {
          what += "rank " + std::to_string(stream->sends.dumped ? stream->to : stream->from) + " left no dump";
        } else if (status == "unmatched_recv") {
          what += "recv #" + std::to_string(stream->sends.last_enqueued + 1) + " unmatched";
        } else if (status == "unmatched_send") {
          what += "send #" + std::to_string(stream->recvs.last_enqueued + 1) + " unmatched";
        } else {
          what += "sizes differ";
        }
        problems.push_back(what);
      }
      line += std::to_string(group.streams.size()) + " send/recv stream" + (group.streams.size() == 1 ? "" : "s") +
              ", " + std::to_string(pairs) + " pair" + (pairs == 1 ? "" : "s") + " matched";
      if (problems.empty()) line += "; every send has its recv";
      for (size_t i = 0; i < problems.size() && i < 4; ++i) line += "; " + problems[i];
      if (problems.size() > 4) line += "; " + std::to_string(problems.size() - 4) + " more streams not matched";
    }
    if (group.unnumbered > 0) {
      line += (group.streams.empty() ? "" : "; ") + std::to_string(group.unnumbered) +
              " send/recv recorded without peer and stream number (a version 1 dump): not paired";
    }
    analysis.p2p.push_back(line);
    if (group.open.empty()) continue;
    std::string waiting = "group '" + group.name + "' [" + ranks_text(group.ranks) + "]:";
    for (const auto& [rank, entries] : group.open) {
      for (size_t i = 0; i < entries.size() && i < 3; ++i) {
        auto found = stream_of.find(entries[i]);
        waiting += " rank " + std::to_string(rank) + " in " +
                   open_op_text(*entries[i], found == stream_of.end() ? nullptr : found->second) + ";";
      }
      if (entries.size() > 3) {
        waiting += " rank " + std::to_string(rank) + " in " + std::to_string(entries.size() - 3) + " more send/recv;";
      }
    }
    waiting.pop_back();
    result.waiting.push_back({group.ranks, waiting});
  }
  return result;
}

}  // namespace titan::cli::fr::detail
