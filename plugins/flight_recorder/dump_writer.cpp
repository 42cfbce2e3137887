// JSON through nlohmann (header-only); times leave as Unix seconds so dumps
// from different processes (and hosts with synced clocks) line up.
#include "dump_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace titan::flight_recorder {

namespace {

double monotonic_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text + "]";
}

std::string shapes_text(const std::vector<std::vector<int64_t>>& shapes) {
  std::string text = "[";
  for (size_t s = 0; s < shapes.size(); ++s) {
    text += s ? ",[" : "[";
    for (size_t i = 0; i < shapes[s].size(); ++i) text += (i ? "," : "") + std::to_string(shapes[s][i]);
    text += "]";
  }
  return text + "]";
}

}  // namespace

std::string write_dump(const std::string& folder, const DumpInfo& info, const Snapshot& snapshot) {
  const double mono = monotonic_now(), unix_time = unix_now();
  auto to_unix = [&](double monotonic_s) -> nlohmann::json {
    if (monotonic_s == 0) return nullptr;
    return unix_time - (mono - monotonic_s);
  };
  nlohmann::json entries = nlohmann::json::array();
  for (const Record& record : snapshot.records) {
    const CollectiveEvent& event = record.event;
    nlohmann::json entry = {{"id", record.id},
                       {"sequence", event.sequence},
                       {"op", event.op},
                       {"group", event.group},
                       {"group_ranks", event.group_ranks},
                       {"shapes", event.shapes},
                       {"dtype", event.dtype},
                       {"bytes", event.bytes},
                       {"call_site", event.call_site},
                       {"state", state_name(record.state)},
                       {"enqueue_time_s", to_unix(event.time_s)},
                       {"start_time_s", to_unix(record.start_s)},
                       {"end_time_s", to_unix(record.end_s)}};
    if (record.collective_sequence >= 0) entry["collective_sequence"] = record.collective_sequence;
    if (!event.send_rows.empty()) {
      entry["send_rows"] = event.send_rows;
      entry["recv_rows"] = event.recv_rows;
    }
    if (event.peer >= 0) {
      entry["peer"] = event.peer;
      entry["tag"] = event.tag;
      if (record.p2p_sequence >= 0) entry["p2p_sequence"] = record.p2p_sequence;
    }
    entries.push_back(std::move(entry));
  }
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupStatus& group : snapshot.groups) {
    groups.push_back({{"name", group.name},
                      {"ranks", group.ranks},
                      {"last_enqueued", group.last_enqueued},
                      {"last_started", group.last_started},
                      {"last_completed", group.last_completed},
                      {"last_collective", group.last_collective}});
  }
  nlohmann::json streams = nlohmann::json::array();
  for (const P2pStatus& stream : snapshot.p2p) {
    streams.push_back({{"group", stream.group},
                       {"group_ranks", stream.group_ranks},
                       {"op", stream.op},
                       {"peer", stream.peer},
                       {"tag", stream.tag},
                       {"last_enqueued", stream.last_enqueued},
                       {"last_completed", stream.last_completed}});
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  nlohmann::json dump = {{"format", "titan-flight-recorder"},
                         {"version", 2},
                         {"rank", info.rank},
                         {"world_size", info.world_size},
                         {"pid", static_cast<int64_t>(getpid())},
                         {"host", host},
                         {"trigger", info.trigger},
                         {"reason", info.reason},
                         {"dump_time_s", unix_time},
                         {"buffer_size", snapshot.capacity},
                         {"entries_recorded", snapshot.total_recorded},
                         {"complete", snapshot.complete},
                         {"groups", groups},
                         {"p2p", streams},
                         {"entries", entries}};
  std::filesystem::create_directories(folder);
  std::string path = folder + "/rank_" + std::to_string(info.rank) + ".json";
  std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temporary);
    // Invalid UTF-8 in a call site must not lose the dump.
    out << dump.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    out.flush();
    if (!out) throw std::runtime_error("cannot write '" + temporary + "'");
  }
  std::filesystem::rename(temporary, path);
  return path;
}

std::string describe(const Record& record, double now_s) {
  const CollectiveEvent& event = record.event;
  std::ostringstream text;
  text << "#" << record.id << " " << event.op << " seq " << event.sequence << " on '" << event.group << "' "
       << ranks_text(event.group_ranks) << " ";
  if (event.peer >= 0) {
    text << (event.op == "send" ? "to" : "from") << " rank " << event.peer << " tag " << event.tag;
    if (record.p2p_sequence >= 0) text << " " << event.op << " #" << record.p2p_sequence;
    text << " ";
  }
  text << shapes_text(event.shapes) << " " << event.dtype << " "
       << event.bytes << " B " << state_name(record.state);
  char seconds[32];
  if (record.state == State::started || record.state == State::scheduled) {
    std::snprintf(seconds, sizeof(seconds), "%.1f", now_s - event.time_s);
    text << " for " << seconds << " s";
  } else if (record.end_s > 0) {
    std::snprintf(seconds, sizeof(seconds), "%.3f", record.end_s - event.time_s);
    text << " in " << seconds << " s";
  }
  if (!event.call_site.empty()) text << " at '" << event.call_site << "'";
  return text.str();
}

}  // namespace titan::flight_recorder
