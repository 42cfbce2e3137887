// TEST-ONLY: parses TITAN_TEST_SIGNAL once; see titan/test_signal.hpp.
#include "titan/test_signal.hpp"

#include <csignal>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "titan/error.hpp"
#include "titan/logging.hpp"

namespace titan {

namespace {

struct TestSignal {
  int signal = 0;  // 0: none configured for this process
  std::string phase;
  int64_t step = -1;
};

[[noreturn]] void bad(const std::string& text, const std::string& problem) {
  throw Error("TITAN_TEST_SIGNAL='" + text + "' (a test-only variable): " + problem +
              "; expected KILL|STOP:rank=R:phase=startup|forward|backward|optimizer|checkpoint_write|"
              "checkpoint_commit:step=S");
}

int64_t env_integer(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoll(value) : fallback;
}

TestSignal parse(const std::string& text) {
  std::istringstream parts(text);
  std::string field;
  std::getline(parts, field, ':');
  TestSignal out;
  if (field == "KILL") {
    out.signal = SIGKILL;
  } else if (field == "STOP") {
    out.signal = SIGSTOP;
  } else {
    bad(text, "unknown signal '" + field + "'");
  }
  std::map<std::string, std::string> fields;
  while (std::getline(parts, field, ':')) {
    auto eq = field.find('=');
    if (eq == std::string::npos) bad(text, "'" + field + "' is not key=value");
    fields[field.substr(0, eq)] = field.substr(eq + 1);
  }
  static const std::set<std::string> phases = {"startup",   "forward",          "backward",
                                               "optimizer", "checkpoint_write", "checkpoint_commit"};
  for (const char* key : {"rank", "phase", "step"}) {
    if (!fields.count(key)) bad(text, std::string("missing ") + key);
  }
  if (!phases.count(fields["phase"])) bad(text, "unknown phase '" + fields["phase"] + "'");
  if (fields.size() != 3) bad(text, "unknown key");
  out.phase = fields["phase"];
  out.step = std::atoll(fields["step"].c_str());
  // Only the named rank, and only on the first attempt, carries it.
  if (std::atoll(fields["rank"].c_str()) != env_integer("RANK", 0) || env_integer("TITAN_RESTART_COUNT", 0) != 0) {
    out.signal = 0;
  }
  return out;
}

const TestSignal& configured() {
  static const TestSignal configured_signal = [] {
    const char* text = std::getenv("TITAN_TEST_SIGNAL");
    return text && *text ? parse(text) : TestSignal{};
  }();
  return configured_signal;
}

}  // namespace

bool test_signal_armed(const char* phase) {
  const TestSignal& armed = configured();
  return armed.signal != 0 && armed.phase == phase;
}

void test_signal_point(const char* phase, int64_t step) {
  const TestSignal& armed = configured();
  if (armed.signal == 0 || armed.phase != phase || (armed.step != step && armed.phase != "startup")) return;
  spdlog::warn("TITAN_TEST_SIGNAL: raising SIG{} in phase {} at step {}", armed.signal == SIGKILL ? "KILL" : "STOP",
               phase, step);
  spdlog::default_logger()->flush();
  std::raise(armed.signal);
}

}  // namespace titan
