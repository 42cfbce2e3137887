// TEST-ONLY: parses TITAN_TEST_FAULT once and fires it at most once.
#include "test_faults.hpp"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan::test_faults {

namespace {

struct Fault {
  Action action = Action::none;
  int rank = -1;
  std::string op, group;
  int64_t sequence = -1;  // -1: the first matching call
};

[[noreturn]] void bad(const std::string& text, const std::string& problem) {
  throw Error("TITAN_TEST_FAULT='" + text + "' (a test-only variable): " + problem +
              "; expected ACTION:rank=R:op=OP:group=G[:seq=S] with ACTION skip, grow or reshape");
}

Fault parse(const std::string& text) {
  Fault fault;
  std::map<std::string, std::string> fields;
  std::stringstream parts(text);
  std::string part;
  bool first = true;
  while (std::getline(parts, part, ':')) {
    if (first) {
      first = false;
      if (part == "skip") fault.action = Action::skip;
      else if (part == "grow") fault.action = Action::grow;
      else if (part == "reshape") fault.action = Action::reshape;
      else bad(text, "unknown action '" + part + "'");
      continue;
    }
    auto equals = part.find('=');
    if (equals == std::string::npos) bad(text, "'" + part + "' is not key=value");
    fields[part.substr(0, equals)] = part.substr(equals + 1);
  }
  for (const char* key : {"rank", "op", "group"}) {
    if (!fields.count(key)) bad(text, std::string("missing ") + key + "=");
  }
  try {
    fault.rank = std::stoi(fields["rank"]);
    if (fields.count("seq")) fault.sequence = std::stoll(fields["seq"]);
  } catch (const std::exception&) {
    bad(text, "rank and seq must be integers");
  }
  fault.op = fields["op"];
  fault.group = fields["group"];
  if (fault.action != Action::skip && fault.op != "all_reduce") bad(text, "grow and reshape apply to all_reduce only");
  for (const auto& [key, value] : fields) {
    if (key != "rank" && key != "op" && key != "group" && key != "seq") bad(text, "unknown key '" + key + "'");
  }
  return fault;
}

const Fault& configured() {
  static const Fault fault = [] {
    const char* text = std::getenv("TITAN_TEST_FAULT");
    return text && *text ? parse(text) : Fault{};
  }();
  return fault;
}

std::atomic<bool> fired{false};

}  // namespace

void check_environment() { configured(); }

Action take(const std::string& op, const std::string& group, int global_rank, uint64_t sequence) {
  const Fault& fault = configured();
  if (fault.action == Action::none || fired.load()) return Action::none;
  // Mesh groups are named "dp_shard/pp0/..."; the dim name alone selects them.
  bool group_matches = group == fault.group || group.rfind(fault.group + "/", 0) == 0;
  if (fault.rank != global_rank || fault.op != op || !group_matches) return Action::none;
  if (fault.sequence >= 0 && static_cast<uint64_t>(fault.sequence) != sequence) return Action::none;
  if (fired.exchange(true)) return Action::none;
  spdlog::warn("TITAN_TEST_FAULT: injecting a test fault into {} #{} on group '{}'", op, sequence, group);
  return fault.action;
}

}  // namespace titan::test_faults
