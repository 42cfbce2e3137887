// Reads flight recorder dumps (format: docs/flight_recorder.md), with errors
// that name the file and the key.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "fr_analysis.h"
#include "titan/error.hpp"

namespace titan::cli::fr {

namespace {

namespace fs = std::filesystem;

constexpr int kMaxWorldSize = 1 << 20;  // far above any job today; bounds what a corrupt dump makes us list

// nlohmann turns a float into an integer with static_cast (undefined
// behaviour when out of range) and wraps integers that do not fit: an
// integer field must hold a JSON integer within the C++ type's range.
template <class T>
bool fits(const nlohmann::json& value) {
  if (!value.is_number_integer()) return false;
  if (value.is_number_unsigned()) return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  int64_t number = value.get<int64_t>();
  if (number < 0) return std::is_signed_v<T> && number >= static_cast<int64_t>(std::numeric_limits<T>::min());
  return static_cast<uint64_t>(number) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
}

template <class T>
T field(const nlohmann::json& object, const std::string& key, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) throw Error(where + ": missing key '" + key + "'");
  const nlohmann::json& value = object.at(key);
  bool integers_fit = true;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    integers_fit = fits<T>(value);
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    integers_fit = value.is_array() && std::all_of(value.begin(), value.end(), fits<int>);
  }
  if (!integers_fit) {
    throw Error(where + ": key '" + key + "' must hold " + (std::is_integral_v<T> ? "an integer" : "integers") +
                " that fit, got " + value.dump().substr(0, 80));
  }
  try {
    return object.at(key).get<T>();
  } catch (const nlohmann::json::exception& error) {
    throw Error(where + ": key '" + key + "' has the wrong type (" + error.what() + ")");
  }
}

// Version 2 counters: -1 (none yet) up to 2^62, so that counts and
// differences of them cannot overflow in the analysis.
constexpr int64_t kMaxCounter = int64_t{1} << 62;

int64_t counter(const nlohmann::json& object, const std::string& key, const std::string& where) {
  int64_t value = field<int64_t>(object, key, where);
  if (value < -1 || value > kMaxCounter) {
    throw Error(where + ": key '" + key + "' must be -1 (none) up to 2^62, got " + std::to_string(value));
  }
  return value;
}

int64_t counter_or(const nlohmann::json& object, const std::string& key, const std::string& where,
                   int64_t fallback) {
  return object.contains(key) ? counter(object, key, where) : fallback;
}

int rank_field(const nlohmann::json& object, const std::string& key, const std::string& where) {
  int value = field<int>(object, key, where);
  if (value < 0) throw Error(where + ": key '" + key + "' must be a rank (0 or more), got " + std::to_string(value));
  return value;
}

double time_or_zero(const nlohmann::json& object, const std::string& key) {
  return object.contains(key) && object.at(key).is_number() ? object.at(key).get<double>() : 0;
}

Dump read_dump(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read flight recorder dump '" + path.string() + "'");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw Error("'" + path.string() + "' is not valid JSON: " + error.what() +
                " (a dump cut short by a crash? dumps are written to a temporary file and renamed)");
  }
  const std::string where = path.string();
  if (field<std::string>(json, "format", where) != "titan-flight-recorder") {
    throw Error(where + ": key 'format' is not \"titan-flight-recorder\"");
  }
  // Version 2 added the send/recv streams (peer, tag, p2p_sequence, "p2p")
  // and collective_sequence; a version 1 dump still reads, without them.
  const int version = field<int>(json, "version", where);
  if (version != 1 && version != 2) {
    throw Error(where + ": dump version " + std::to_string(version) + " is not supported (this titan reads 1 and 2)");
  }
  Dump dump;
  dump.path = where;
  dump.version = version;
  dump.rank = field<int>(json, "rank", where);
  dump.world_size = field<int>(json, "world_size", where);
  // The analysis lists every rank below world_size that left no dump.
  if (dump.world_size < 1 || dump.world_size > kMaxWorldSize || dump.rank < 0 || dump.rank >= dump.world_size) {
    throw Error(where + ": rank " + std::to_string(dump.rank) + " of world_size " + std::to_string(dump.world_size) +
                " is not a rank of a job (world_size must be 1.." + std::to_string(kMaxWorldSize) + ")");
  }
  dump.trigger = field<std::string>(json, "trigger", where);
  dump.reason = field<std::string>(json, "reason", where);
  dump.dump_time_s = time_or_zero(json, "dump_time_s");
  const auto& entries = field<nlohmann::json>(json, "entries", where);
  if (!entries.is_array()) throw Error(where + ": key 'entries' must be a list");
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& item = entries[i];
    std::string at = where + ": entries[" + std::to_string(i) + "]";
    Entry entry;
    entry.id = field<uint64_t>(item, "id", at);
    entry.sequence = field<uint64_t>(item, "sequence", at);
    entry.op = field<std::string>(item, "op", at);
    entry.group = field<std::string>(item, "group", at);
    entry.group_ranks = field<std::vector<int>>(item, "group_ranks", at);
    entry.shapes = field<nlohmann::json>(item, "shapes", at).dump();
    entry.dtype = field<std::string>(item, "dtype", at);
    entry.bytes = field<int64_t>(item, "bytes", at);
    entry.call_site = field<std::string>(item, "call_site", at);
    entry.state = field<std::string>(item, "state", at);
    entry.enqueue_time_s = time_or_zero(item, "enqueue_time_s");
    // An uneven all-to-all's splits (optional in version 2): one per member.
    if (item.contains("send_rows") || item.contains("recv_rows")) {
      entry.send_rows = field<std::vector<int64_t>>(item, "send_rows", at);
      entry.recv_rows = field<std::vector<int64_t>>(item, "recv_rows", at);
      if (entry.send_rows.size() != entry.group_ranks.size() || entry.recv_rows.size() != entry.group_ranks.size()) {
        throw Error(at + ": keys 'send_rows' and 'recv_rows' must have one count per member of 'group_ranks' (" +
                    std::to_string(entry.group_ranks.size()) + "), got " + std::to_string(entry.send_rows.size()) +
                    " and " + std::to_string(entry.recv_rows.size()));
      }
      for (const auto* rows : {&entry.send_rows, &entry.recv_rows}) {
        for (int64_t count : *rows) {
          if (count < 0) throw Error(at + ": keys 'send_rows' and 'recv_rows' must hold row counts (0 or more)");
        }
      }
    }
    entry.collective_sequence = counter_or(item, "collective_sequence", at, -1);
    if (item.contains("peer")) {
      entry.peer = rank_field(item, "peer", at);
      entry.tag = field<int>(item, "tag", at);
      entry.p2p_sequence = counter_or(item, "p2p_sequence", at, -1);
    }
    dump.entries.push_back(std::move(entry));
  }
  const auto& groups = field<nlohmann::json>(json, "groups", where);
  if (!groups.is_array()) throw Error(where + ": key 'groups' must be a list");
  for (size_t i = 0; i < groups.size(); ++i) {
    std::string at = where + ": groups[" + std::to_string(i) + "]";
    GroupStatus status;
    status.name = field<std::string>(groups[i], "name", at);
    status.ranks = field<std::vector<int>>(groups[i], "ranks", at);
    status.last_enqueued = field<int64_t>(groups[i], "last_enqueued", at);
    status.last_completed = field<int64_t>(groups[i], "last_completed", at);
    status.last_collective = counter_or(groups[i], "last_collective", at, status.last_enqueued);
    dump.groups.push_back(std::move(status));
  }
  if (json.contains("p2p")) {
    const auto& streams = json.at("p2p");
    if (!streams.is_array()) throw Error(where + ": key 'p2p' must be a list");
    for (size_t i = 0; i < streams.size(); ++i) {
      std::string at = where + ": p2p[" + std::to_string(i) + "]";
      P2pStatus status;
      status.group = field<std::string>(streams[i], "group", at);
      status.group_ranks = field<std::vector<int>>(streams[i], "group_ranks", at);
      status.op = field<std::string>(streams[i], "op", at);
      if (status.op != "send" && status.op != "recv") {
        throw Error(at + ": key 'op' must be \"send\" or \"recv\", got \"" + status.op.substr(0, 40) + "\"");
      }
      status.peer = rank_field(streams[i], "peer", at);
      status.tag = field<int>(streams[i], "tag", at);
      status.last_enqueued = counter(streams[i], "last_enqueued", at);
      status.last_completed = counter(streams[i], "last_completed", at);
      dump.p2p.push_back(std::move(status));
    }
  }
  return dump;
}

}  // namespace

std::vector<Dump> load_dumps(const std::string& dir) {
  if (!fs::is_directory(dir)) throw Error("fr-analyze: '" + dir + "' is not a folder");
  fs::path folder = dir;
  if (fs::is_directory(folder / "flight_recorder")) folder /= "flight_recorder";
  std::vector<Dump> dumps;
  for (const auto& item : fs::directory_iterator(folder)) {
    std::string name = item.path().filename().string();
    if (name.rfind("rank_", 0) != 0 || item.path().extension() != ".json") continue;
    dumps.push_back(read_dump(item.path()));
  }
  if (dumps.empty()) {
    throw Error("fr-analyze: no flight recorder dumps (rank_*.json) in '" + folder.string() +
                "'; pass the run's job.dump_folder or its flight_recorder/ folder");
  }
  std::sort(dumps.begin(), dumps.end(), [](const Dump& a, const Dump& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < dumps.size(); ++i) {
    if (dumps[i].rank == dumps[i - 1].rank) {
      throw Error("fr-analyze: '" + dumps[i - 1].path + "' and '" + dumps[i].path + "' both claim rank " +
                  std::to_string(dumps[i].rank));
    }
  }
  return dumps;
}

}  // namespace titan::cli::fr
