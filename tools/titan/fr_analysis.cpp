// The analysis: collectives are aligned per process group by their
// collective sequence id (each group numbers its own collectives); at the
// first id where the members disagree, the minority is named. Send/recv are
// paired per stream in fr_p2p.cpp. Version 1 dumps number collectives and
// send/recv together, so there a group carrying both is not aligned.
#include <algorithm>
#include <map>
#include <set>

#include "fr_analysis.h"

namespace titan::cli::fr {

namespace detail {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text;
}

std::string group_key(const std::string& name, const std::vector<int>& ranks) {
  return name + "|" + ranks_text(ranks);
}

bool point_to_point(const std::string& op) { return op == "send" || op == "recv"; }

}  // namespace detail

namespace {

using detail::group_key;
using detail::point_to_point;
using detail::ranks_text;

std::string who(const std::vector<int>& ranks) { return (ranks.size() == 1 ? "rank " : "ranks ") + ranks_text(ranks); }

std::string counts_text(const std::vector<int64_t>& counts) {
  std::string text = "[";
  for (size_t i = 0; i < counts.size(); ++i) text += (i ? "," : "") + std::to_string(counts[i]);
  return text + "]";
}

bool uneven(const Entry& entry) { return !entry.send_rows.empty(); }

std::string describe(const Entry& entry) {
  std::string splits = uneven(entry) ? " rows to " + counts_text(entry.send_rows) + " from " + counts_text(entry.recv_rows)
                                     : "";
  return entry.op + " " + entry.shapes + " " + entry.dtype + splits +
         (entry.call_site.empty() ? "" : " at '" + entry.call_site + "'") + " (" + entry.state + ")";
}

// What must agree across the members for one call. An uneven all-to-all's
// shapes differ by design: its splits are checked pairwise instead.
std::string behaviour(const Entry& entry) {
  return entry.op + "|" + (uneven(entry) ? "splits" : entry.shapes) + "|" + entry.dtype + "|" + entry.call_site;
}

// The first pair of members of an uneven all-to-all whose splits disagree:
// what `from` sends `to` must be what `to` receives from `from`.
bool find_split_mismatch(const std::vector<int>& group_ranks, const std::map<int, const Entry*>& by_rank,
                         std::string& text, std::vector<int>& pair) {
  const auto index = [&](int rank) {
    return static_cast<size_t>(std::find(group_ranks.begin(), group_ranks.end(), rank) - group_ranks.begin());
  };
  for (const auto& [from, sender] : by_rank) {
    for (const auto& [to, receiver] : by_rank) {
      const size_t i = index(from), j = index(to);
      if (i >= sender->send_rows.size() || j >= receiver->recv_rows.size() || i >= receiver->recv_rows.size() ||
          j >= sender->send_rows.size()) {
        continue;
      }
      if (sender->send_rows[j] != receiver->recv_rows[i]) {
        text = "rank " + std::to_string(from) + " sends " + std::to_string(sender->send_rows[j]) + " rows to rank " +
               std::to_string(to) + ", which expects " + std::to_string(receiver->recv_rows[i]) + " from it";
        pair = {std::min(from, to), std::max(from, to)};
        return true;
      }
    }
  }
  return false;
}

// One rank's view of the collectives of one group.
struct RankView {
  std::map<uint64_t, const Entry*> by_sequence;  // by collective sequence id
  int64_t last_enqueued = -1;
};

struct GroupViews {
  std::string name;
  std::vector<int> ranks;
  std::map<int, RankView> views;  // ranks with a dump only
  bool numbered_with_p2p = false;  // a version 1 dump whose sequence ids count send/recv too
};

// A version 2 collective carries its own id; in version 1 `sequence` is it.
uint64_t collective_id(const Entry& entry) {
  return entry.collective_sequence >= 0 ? static_cast<uint64_t>(entry.collective_sequence) : entry.sequence;
}

std::map<std::string, GroupViews> group_views(const std::vector<Dump>& dumps) {
  std::map<std::string, GroupViews> groups;
  auto group_of = [&](const std::string& name, const std::vector<int>& ranks) -> GroupViews& {
    GroupViews& group = groups[group_key(name, ranks)];
    group.name = name;
    group.ranks = ranks;
    return group;
  };
  auto view_of = [&](const std::string& name, const std::vector<int>& ranks, int rank) -> RankView& {
    return group_of(name, ranks).views[rank];
  };
  for (const Dump& dump : dumps) {
    for (const GroupStatus& status : dump.groups) {
      RankView& view = view_of(status.name, status.ranks, dump.rank);
      view.last_enqueued = std::max(view.last_enqueued, status.last_collective);
    }
    for (const Entry& entry : dump.entries) {
      if (point_to_point(entry.op)) {
        if (dump.version < 2) group_of(entry.group, entry.group_ranks).numbered_with_p2p = true;
        continue;
      }
      RankView& view = view_of(entry.group, entry.group_ranks, dump.rank);
      const uint64_t id = collective_id(entry);
      view.by_sequence[id] = &entry;  // oldest first: a reused id keeps the newest
      view.last_enqueued = std::max(view.last_enqueued, static_cast<int64_t>(id));
    }
  }
  // Members with a dump but no trace of the group never entered it.
  std::set<int> dumped;
  for (const Dump& dump : dumps) dumped.insert(dump.rank);
  for (auto& [key, group] : groups) {
    for (int rank : group.ranks) {
      if (dumped.count(rank)) group.views[rank];
    }
  }
  return groups;
}

// The first disagreement among the members of one group, if any.
bool first_divergence(const GroupViews& group, Finding& finding) {
  int64_t low = -1, high = -1;
  for (const auto& [rank, view] : group.views) {
    if (view.by_sequence.empty()) continue;
    // Below a rank's oldest buffered id its history is gone (the ring wrapped).
    low = std::max(low, static_cast<int64_t>(view.by_sequence.begin()->first));
    high = std::max(high, view.last_enqueued);
  }
  if (high < 0) return false;
  // Only ids some member still holds can show a difference: visit those
  // (a corrupt dump's last_enqueued near 2^63 must not mean 2^63 steps).
  std::set<int64_t> sequences;
  for (const auto& [rank, view] : group.views) {
    for (const auto& [id, entry] : view.by_sequence) {
      int64_t sequence = static_cast<int64_t>(id);
      if (sequence >= std::max<int64_t>(low, 0) && sequence <= high) sequences.insert(sequence);
    }
  }
  for (int64_t sequence : sequences) {
    std::map<std::string, std::vector<int>> by_behaviour;
    std::map<std::string, const Entry*> sample;
    std::map<int, const Entry*> by_rank;
    std::vector<int> not_entered;
    double earliest = 0;
    for (const auto& [rank, view] : group.views) {
      auto found = view.by_sequence.find(static_cast<uint64_t>(sequence));
      if (found == view.by_sequence.end()) {
        if (view.last_enqueued < sequence) not_entered.push_back(rank);
        continue;  // else: entered, but no longer in its buffer
      }
      const Entry& entry = *found->second;
      std::string key = behaviour(entry);
      by_behaviour[key].push_back(rank);
      by_rank[rank] = &entry;
      sample[key] = &entry;
      if (entry.enqueue_time_s > 0 && (earliest == 0 || entry.enqueue_time_s < earliest)) earliest = entry.enqueue_time_s;
    }
    if (by_behaviour.empty()) continue;
    std::string majority;
    size_t best = 0;
    bool tie = false;
    for (const auto& [key, ranks] : by_behaviour) {
      if (ranks.size() > best) {
        best = ranks.size();
        majority = key;
        tie = false;
      } else if (ranks.size() == best) {
        tie = true;
      }
    }
    const Entry& expected = *sample[majority];
    finding = Finding{};
    finding.group = group.name;
    finding.group_ranks = group.ranks;
    finding.sequence = sequence;
    finding.op = expected.op;
    finding.call_site = expected.call_site;
    finding.time_s = earliest;
    // In a group that also carries send/recv the two numberings differ: name the collective's.
    const bool own_id = expected.collective_sequence >= 0 && expected.sequence != collective_id(expected);
    std::string where = (own_id ? " (collective #" : " (seq ") + std::to_string(sequence) + " on group '" + group.name + "')";
    if (by_behaviour.size() > 1) {
      std::vector<int> odd;
      for (const auto& [key, ranks] : by_behaviour) {
        finding.variants.push_back({ranks, describe(*sample[key])});
        if (key != majority || tie) odd.insert(odd.end(), ranks.begin(), ranks.end());
      }
      std::sort(odd.begin(), odd.end());
      finding.faulty_ranks = odd;
      // Name the kind by the strongest difference from the majority.
      const Entry* other = nullptr;
      for (const auto& [key, ranks] : by_behaviour) {
        if (key != majority) other = sample[key];
        if (other && other->op != expected.op) break;
      }
      const std::string& majority_ranks = ranks_text(by_behaviour[majority]);
      if (other->op != expected.op) {
        finding.kind = "op_mismatch";
        finding.summary = who(odd) + " issued " + other->op + " where " + (tie ? "" : "ranks " + majority_ranks + " issued ") +
                          expected.op + where;
      } else if (other->shapes != expected.shapes || other->dtype != expected.dtype) {
        finding.kind = "size_mismatch";
        std::string sizes;
        for (const auto& [key, ranks] : by_behaviour) {
          sizes += (sizes.empty() ? "" : ", ") + who(ranks) + " " + sample[key]->shapes + " " + sample[key]->dtype;
        }
        finding.summary = expected.op + " sizes differ between ranks" + where + ": " + sizes;
      } else {
        finding.kind = "call_site_mismatch";
        finding.summary = who(odd) + " reached " + expected.op + where + " from '" + other->call_site + "' where " +
                          who(by_behaviour[majority]) + " came from '" + expected.call_site +
                          "': a collective was skipped or added before it";
      }
      if (!not_entered.empty()) finding.variants.push_back({not_entered, "not entered"});
      return true;
    }
    std::string split_text;
    std::vector<int> split_pair;
    if (uneven(expected) && find_split_mismatch(group.ranks, by_rank, split_text, split_pair)) {
      finding.kind = "split_mismatch";
      finding.faulty_ranks = split_pair;
      for (const auto& [rank, entry] : by_rank) finding.variants.push_back({{rank}, describe(*entry)});
      finding.summary = expected.op + " splits disagree" + where + ": " + split_text;
      return true;
    }
    if (!not_entered.empty()) {
      finding.kind = "not_entered";
      finding.faulty_ranks = not_entered;
      finding.variants.push_back({by_behaviour[majority], describe(expected)});
      finding.variants.push_back({not_entered, "not entered"});
      finding.summary = who(by_behaviour[majority]) + " entered " + expected.op + where + " but " + who(not_entered) +
                        " never did";
      return true;
    }
  }
  return false;
}

// What each member was in (not completed) when it dumped.
std::string waiting_in(const GroupViews& group) {
  std::map<std::string, std::vector<int>> by_entry;
  for (const auto& [rank, view] : group.views) {
    for (auto it = view.by_sequence.rbegin(); it != view.by_sequence.rend(); ++it) {
      const Entry& entry = *it->second;
      if (entry.state == "started" || entry.state == "scheduled" || entry.state == "failed") {
        by_entry["seq " + std::to_string(entry.sequence) + " " + describe(entry)].push_back(rank);
        break;
      }
    }
  }
  if (by_entry.empty()) return "";
  std::string text = "group '" + group.name + "' [" + ranks_text(group.ranks) + "]:";
  for (const auto& [what, ranks] : by_entry) text += " " + who(ranks) + " in " + what + ";";
  text.pop_back();
  return text;
}

// Which of two call sites a rank that issued both issued first: -1 `a`,
// 1 `b`, 0 no rank holds both (then time decides).
int program_order(const std::vector<Dump>& dumps, const std::string& a, const std::string& b) {
  if (a.empty() || b.empty() || a == b) return 0;
  for (const Dump& dump : dumps) {
    int64_t first_a = -1, first_b = -1;
    for (size_t i = 0; i < dump.entries.size(); ++i) {
      const std::string& site = dump.entries[i].call_site;
      if (first_a < 0 && site == a) first_a = static_cast<int64_t>(i);
      if (first_b < 0 && site == b) first_b = static_cast<int64_t>(i);
    }
    if (first_a >= 0 && first_b >= 0) return first_a < first_b ? -1 : 1;
  }
  return 0;
}

}  // namespace

Analysis analyze(const std::vector<Dump>& dumps) {
  Analysis analysis;
  std::set<int> dumped;
  for (const Dump& dump : dumps) {
    analysis.world_size = std::max(analysis.world_size, dump.world_size);
    dumped.insert(dump.rank);
    Dump summary = dump;
    summary.entries.clear();
    summary.groups.clear();
    analysis.dumps.push_back(summary);
  }
  analysis.ranks_with_dumps.assign(dumped.begin(), dumped.end());
  auto groups = group_views(dumps);
  detail::P2pResult p2p = detail::analyze_p2p(dumps, analysis);
  for (int rank = 0; rank < analysis.world_size; ++rank) {
    if (dumped.count(rank)) continue;
    analysis.missing_ranks.push_back(rank);
    Finding finding;
    finding.kind = "missing_rank";
    finding.faulty_ranks = {rank};
    finding.summary = "rank " + std::to_string(rank) +
                      " left no dump: it died without running any handler (SIGKILL, the OOM killer, a lost "
                      "machine) or never started";
    for (const auto& [key, group] : groups) {
      if (!std::count(group.ranks.begin(), group.ranks.end(), rank)) continue;
      std::string waiting = waiting_in(group);
      if (!waiting.empty()) finding.variants.push_back({{}, "others at dump time, " + waiting});
    }
    for (const auto& [ranks, waiting] : p2p.waiting) {
      if (std::count(ranks.begin(), ranks.end(), rank)) finding.variants.push_back({{}, "others at dump time, " + waiting});
    }
    analysis.findings.push_back(finding);
  }
  std::vector<Finding> divergences;
  for (const auto& [key, group] : groups) {
    std::string waiting = waiting_in(group);
    if (!waiting.empty()) analysis.waiting.push_back(waiting);
    if (group.numbered_with_p2p) {
      analysis.waiting.push_back("group '" + group.name +
                                 "' carries send/recv in a version 1 dump: its collectives are not aligned by "
                                 "sequence id");
      continue;
    }
    Finding finding;
    if (first_divergence(group, finding)) divergences.push_back(finding);
  }
  divergences.insert(divergences.end(), p2p.findings.begin(), p2p.findings.end());
  for (const auto& [ranks, line] : p2p.waiting) analysis.waiting.push_back(line);
  // Across groups the earliest divergence in time is the likeliest cause.
  std::stable_sort(divergences.begin(), divergences.end(), [](const Finding& a, const Finding& b) {
    if ((a.time_s == 0) != (b.time_s == 0)) return a.time_s != 0;
    return a.time_s < b.time_s;
  });
  // A rank blocked in a diverged collective cannot post its sends and recvs:
  // a send/recv finding whose silent end is in such a group follows it.
  std::set<int> in_diverged_collective;
  for (const Finding& finding : divergences) {
    if (!point_to_point(finding.op)) in_diverged_collective.insert(finding.group_ranks.begin(), finding.group_ranks.end());
  }
  std::stable_partition(divergences.begin(), divergences.end(), [&](const Finding& finding) {
    if (!point_to_point(finding.op)) return true;
    for (int rank : finding.faulty_ranks) {
      if (!in_diverged_collective.count(rank)) return true;
    }
    return finding.faulty_ranks.empty();
  });
  // A rank that skipped a collective deadlocks with its peers in two
  // groups at once: its peer waits in the skipped one, it waits in the next
  // (where the peer never arrives). The skipped one comes first in the
  // program, as the ranks that ran both show: that one leads, whatever the
  // clocks of different hosts say.
  size_t cause = 0;
  for (size_t i = 1; i < divergences.size(); ++i) {
    if (program_order(dumps, divergences[i].call_site, divergences[cause].call_site) < 0) cause = i;
  }
  if (cause > 0) std::rotate(divergences.begin(), divergences.begin() + static_cast<std::ptrdiff_t>(cause),
                             divergences.begin() + static_cast<std::ptrdiff_t>(cause) + 1);
  analysis.findings.insert(analysis.findings.end(), divergences.begin(), divergences.end());
  return analysis;
}

}  // namespace titan::cli::fr
