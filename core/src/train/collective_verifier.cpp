// Fast path: every rank all-gathers (count, hash) of its list; only when
// they differ are the lists themselves exchanged to name the first entry.
#include "collective_verifier.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <sstream>

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

uint64_t fnv1a(const std::vector<std::string>& entries) {
  uint64_t hash = 1469598103934665603ull;
  for (const auto& entry : entries) {
    for (unsigned char c : signature(entry) + "\n") hash = (hash ^ c) * 1099511628211ull;
  }
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

}  // namespace

void CollectiveVerifier::on_enqueue(const CollectiveEvent& event) {
  if (!recording_.load() || point_to_point(event.op)) return;
  std::ostringstream entry;
  entry << event.group << "|";
  for (size_t i = 0; i < event.group_ranks.size(); ++i) entry << (i ? "," : "") << event.group_ranks[i];
  entry << "|" << event.op << "|";
  for (const auto& shape : event.shapes) {
    entry << "[";
    for (size_t i = 0; i < shape.size(); ++i) entry << (i ? "," : "") << shape[i];
    entry << "]";
  }
  std::string site = event.call_site;
  for (char& c : site) {
    if (c == '\n' || c == '|') c = ' ';
  }
  entry << "|" << event.dtype << "|" << site;
  entries_.push_back(entry.str());
}

void CollectiveVerifier::verify(Comm& world, int64_t step) {
  recording_.store(false);
  at::Tensor fingerprint = at::empty({2}, at::kLong);
  fingerprint[0] = static_cast<int64_t>(entries_.size());
  fingerprint[1] = static_cast<int64_t>(fnv1a(entries_));
  at::Tensor all = world.all_gather(fingerprint).view({world.size(), 2});
  if (all.eq(all[0]).all().item<bool>()) {
    spdlog::info("comm.verify_collectives: the {} collectives up to step {} agree on all {} ranks", entries_.size(),
                 step, world.size());
    return;
  }
  std::vector<std::string> texts = exchange_texts(world, joined(entries_));
  std::vector<std::vector<std::string>> lists;
  for (const auto& text : texts) lists.push_back(split_lines(text));
  // Compared with each rank in turn, so every rank reports the same first pair.
  for (int a = 0; a < world.size(); ++a) {
    for (int b = a + 1; b < world.size(); ++b) {
      std::string difference = first_collective_difference(world.global_ranks()[a], lists[a],
                                                           world.global_ranks()[b], lists[b]);
      if (difference.empty()) continue;
      throw Error("comm.verify_collectives: ranks disagree on their collectives up to step " + std::to_string(step) +
                  ": " + difference + ". The ranks run different code paths (or shapes); fix that before the job "
                  "hangs or silently mixes data");
    }
  }
  spdlog::info("comm.verify_collectives: ranks differ only on groups they do not share; up to step {} they agree",
               step);
}

}  // namespace titan
