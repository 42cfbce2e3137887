// Fast path: every rank all-gathers (group, count, hash) of its entries on
// each of its groups, and the rows of each group's members are compared
// (pipeline stages legitimately differ on groups they do not share): the
// rows name their group, so every rank reaches the same verdict. Only when
// some group disagrees are the lists themselves exchanged to name the
// first entry.
#include "collective_verifier.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <sstream>

#include "titan/device_mesh.hpp"
#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace {

bool point_to_point(const std::string& op) { return op == "send" || op == "recv"; }

std::string group_of(const std::string& entry) { return entry.substr(0, entry.find('|', entry.find('|') + 1)); }

std::vector<std::string> fields_of(const std::string& entry) {
  std::vector<std::string> fields;
  std::stringstream in(entry);
  for (std::string field; std::getline(in, field, '|');) fields.push_back(field);
  fields.resize(6);
  return fields;
}

// What must agree across ranks: everything but the call site (last field).
std::string signature(const std::string& entry) { return entry.substr(0, entry.rfind('|')); }

// "group|ranks|op|shapes|dtype|site" -> "op [shapes] dtype at 'site'"
std::string describe(const std::string& entry) {
  auto fields = fields_of(entry);
  return fields[2] + " " + fields[3] + " " + fields[4] + (fields[5].empty() ? "" : " at '" + fields[5] + "'");
}

uint64_t fnv1a_text(const std::string& text, uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

uint64_t fnv1a(const std::vector<std::string>& entries) {
  uint64_t hash = 1469598103934665603ull;
  for (const auto& entry : entries) hash = fnv1a_text(signature(entry) + "\n", hash);
  return hash;
}

std::string joined(const std::vector<std::string>& entries) {
  std::string text;
  for (const auto& entry : entries) text += entry + "\n";
  return text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every rank's text, through two all-gathers (lengths, then padded bytes).
std::vector<std::string> exchange_texts(Comm& world, const std::string& text) {
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  at::Tensor lengths = world.all_gather(length);
  int64_t longest = lengths.max().item<int64_t>();
  at::Tensor mine = at::zeros({std::max<int64_t>(longest, 1)}, at::kByte);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = world.all_gather(mine);
  std::vector<std::string> texts;
  for (int rank = 0; rank < world.size(); ++rank) {
    const char* start = static_cast<const char*>(all.data_ptr()) + rank * mine.numel();
    texts.emplace_back(start, static_cast<size_t>(lengths[rank].item<int64_t>()));
  }
  return texts;
}

// The first difference between two ranks' entry lists, compared group by
// group (ranks of different pipeline stages legitimately differ elsewhere);
// empty when they agree.
std::string first_collective_difference(int rank_a, const std::vector<std::string>& a, int rank_b,
                                        const std::vector<std::string>& b) {
  // Only groups both ranks belong to are comparable.
  std::map<std::string, std::vector<std::string>> by_group_a, by_group_b;
  for (const auto& entry : a) by_group_a[group_of(entry)].push_back(entry);
  for (const auto& entry : b) by_group_b[group_of(entry)].push_back(entry);
  auto member = [](const std::string& group, int rank) {
    std::stringstream ranks(group.substr(group.find('|') + 1));
    for (std::string r; std::getline(ranks, r, ',');) {
      if (r == std::to_string(rank)) return true;
    }
    return false;
  };
  std::map<std::string, bool> groups;
  for (const auto& [group, unused] : by_group_a) groups[group] = true;
  for (const auto& [group, unused] : by_group_b) groups[group] = true;
  for (const auto& [group, unused] : groups) {
    if (!member(group, rank_a) || !member(group, rank_b)) continue;
    const auto& list_a = by_group_a[group];
    const auto& list_b = by_group_b[group];
    for (size_t i = 0; i < std::max(list_a.size(), list_b.size()); ++i) {
      std::string entry_a = i < list_a.size() ? describe(list_a[i]) : "nothing (it issued only " + std::to_string(list_a.size()) + ")";
      std::string entry_b = i < list_b.size() ? describe(list_b[i]) : "nothing (it issued only " + std::to_string(list_b.size()) + ")";
      if (i < list_a.size() && i < list_b.size() && signature(list_a[i]) == signature(list_b[i])) continue;
      std::string name = group.substr(0, group.find('|'));
      return "collective #" + std::to_string(i) + " on group '" + name + "': rank " + std::to_string(rank_a) +
             " issued " + entry_a + ", rank " + std::to_string(rank_b) + " issued " + entry_b;
    }
  }
  return "";
}

std::string group_key(const std::string& name, const std::vector<int>& ranks) {
  std::ostringstream key;
  key << name << "|";
  for (size_t i = 0; i < ranks.size(); ++i) key << (i ? "," : "") << ranks[i];
  return key.str();
}

}  // namespace

void CollectiveVerifier::on_enqueue(const CollectiveEvent& event) {
  if (!recording_.load() || point_to_point(event.op)) return;
  std::ostringstream entry;
  entry << group_key(event.group, event.group_ranks) << "|" << event.op << "|";
  // An uneven all-to-all's rows differ per rank by design: only the row
  // width must agree (fr-analyze checks the splits pairwise).
  const bool uneven = !event.send_rows.empty();
  for (const auto& shape : event.shapes) {
    entry << "[";
    for (size_t i = 0; i < shape.size(); ++i) entry << (i ? "," : "") << (uneven && i == 0 ? "*" : std::to_string(shape[i]));
    entry << "]";
  }
  std::string site = event.call_site;
  for (char& c : site) {
    if (c == '\n' || c == '|') c = ' ';
  }
  entry << "|" << event.dtype << "|" << site;
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back(entry.str());
}

void CollectiveVerifier::verify(const DeviceMesh& mesh, int64_t step) {
  recording_.store(false);  // this check's own collectives are not part of the window
  std::vector<std::string> entries;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries.swap(entries_);
  }
  const int64_t first_step = window_start_;
  window_start_ = step + 1;
  const std::string window = first_step <= 1   ? "up to step " + std::to_string(step)
                             : first_step == step ? "of step " + std::to_string(step)
                                                  : "of steps " + std::to_string(first_step) + "-" + std::to_string(step);
  Comm& world = mesh.group("world");
  const std::vector<std::string> names = mesh.group_names();
  const auto groups = static_cast<int64_t>(names.size());
  // Per group: (which group, how many entries, their hash). Members of one
  // group share the first; every rank checks every group from one gather.
  at::Tensor table = at::zeros({groups, 3}, at::kLong);
  for (int64_t g = 0; g < groups; ++g) {
    Comm& group = mesh.group(names[static_cast<size_t>(g)]);
    const std::string key = group_key(group.name(), group.global_ranks());
    std::vector<std::string> mine;
    for (const auto& entry : entries) {
      if (group_of(entry) == key) mine.push_back(entry);
    }
    table[g][0] = static_cast<int64_t>(fnv1a_text(key));
    table[g][1] = static_cast<int64_t>(mine.size());
    table[g][2] = static_cast<int64_t>(fnv1a(mine));
  }
  at::Tensor all = world.all_gather(table.view({-1})).view({world.size() * groups, 3});
  const int64_t* row = all.data_ptr<int64_t>();
  std::map<int64_t, std::pair<int64_t, int64_t>> seen;  // group -> (count, hash) of its first member
  bool agree = true;
  for (int64_t r = 0; r < all.size(0); ++r, row += 3) {
    auto [first, inserted] = seen.try_emplace(row[0], row[1], row[2]);
    if (!inserted && (first->second.first != row[1] || first->second.second != row[2])) agree = false;
  }
  if (agree) {
    if (first_step <= 1 || interval_ == 0) {
      spdlog::info("comm.verify_collectives: the {} collectives {} agree on all {} ranks", entries.size(), window,
                   world.size());
    } else {
      spdlog::debug("comm.verify_collectives: the {} collectives {} agree", entries.size(), window);
    }
    recording_.store(interval_ > 0);
    return;
  }
  std::vector<std::string> texts = exchange_texts(world, joined(entries));
  std::vector<std::vector<std::string>> lists;
  for (const auto& text : texts) lists.push_back(split_lines(text));
  // Compared with each rank in turn, so every rank reports the same first pair.
  for (int a = 0; a < world.size(); ++a) {
    for (int b = a + 1; b < world.size(); ++b) {
      std::string difference = first_collective_difference(world.global_ranks()[a], lists[a],
                                                           world.global_ranks()[b], lists[b]);
      if (difference.empty()) continue;
      throw Error("comm.verify_collectives: ranks disagree on their collectives " + window + ": " + difference +
                  ". The ranks run different code paths (or shapes); fix that before the job hangs or silently "
                  "mixes data");
    }
  }
  throw Error("comm.verify_collectives: the ranks' collectives " + window + " disagree on a group, but their lists "
              "compare equal pair by pair (a hash collision?); rerun with the flight recorder and titan fr-analyze");
}

}  // namespace titan
