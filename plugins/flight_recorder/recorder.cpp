// Recording is a copy into a reused slot under one lock; everything slow
// (JSON, files, logs) happens only on a trigger.
#include "recorder.h"

#include <exception>

#include "dump_writer.h"
#include "fatal_handlers.h"
#include "titan/comm_timeout.hpp"
#include "titan/logging.hpp"
#include "watchdog.h"

namespace titan::flight_recorder {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Recorder::Recorder(Options options, int rank, int world_size, std::string dump_folder)
    : options_(options), rank_(rank), world_size_(world_size), folder_(std::move(dump_folder) + "/flight_recorder"),
      buffer_(static_cast<size_t>(options.buffer_size)) {
  // Handlers go in now, before the trainer installs its SIGTERM handler: that
  // one restores what it found when the run ends, so ours stays in place for
  // the teardown (where a stop signal would otherwise kill the rank silently).
  fatal_handlers::install(this, options_.handle_signals);
}

Recorder::~Recorder() {
  // An exception unwinding through the trainer destroys the run plan, and
  // with it this recorder: the last moment that still knows the history.
  if (!watchdog_) {
    // Never saw a collective: nothing to tell.
  } else if (std::uncaught_exceptions() > 0) {
    std::string after = first_failure_s() > 0 ? " after: " + first_failure_ : "";
    dump("exception", "the run is ending with an exception (its message follows in the log)" + after);
  } else if (first_failure_s() > 0) {
    dump("exit", "the run is ending after a failed collective: " + first_failure_);
  } else if (options_.dump_on_exit) {
    dump("exit", "the run ended normally (dump_on_exit)");
  }
  fatal_handlers::uninstall(this);
  watchdog_.reset();
}

// The thread starts with the first collective, so that `titan config
// check` and `plugins inspect` start none (until then handlers only chain).
void Recorder::start_once() {
  std::call_once(started_, [this] { watchdog_ = std::make_unique<Watchdog>(*this); });
}

void Recorder::on_enqueue(const CollectiveEvent& event) {
  start_once();
  buffer_.enqueue(event);
}

void Recorder::on_start(const CollectiveEvent& event) { buffer_.start(event); }

void Recorder::on_complete(const CollectiveEvent& event, bool ok) {
  buffer_.finish(event, ok);
  if (ok) return;
  // The core calls observers under one lock, so only one failure gets here first.
  if (first_failure_s_.load() > 0) return;
  std::string peer = event.peer < 0 ? ""
                     : (event.op == "send" ? " to rank " : " from rank ") + std::to_string(event.peer) + " (tag " +
                           std::to_string(event.tag) + ")";
  first_failure_ = event.op + " seq " + std::to_string(event.sequence) + peer + " on group '" + event.group + "'" +
                   (event.call_site.empty() ? "" : " at '" + event.call_site + "'") + " failed";
  first_failure_s_.store(monotonic_seconds());
  dump("collective_failed", first_failure_);
}

double Recorder::watchdog_timeout_s() const {
  if (options_.watchdog_timeout_seconds > 0) return options_.watchdog_timeout_seconds;
  return collective_timeout().count() / 1000.0;
}

std::string Recorder::dump(const std::string& trigger, const std::string& reason, std::chrono::milliseconds lock_wait) {
  std::unique_lock<std::timed_mutex> lock(dump_mutex_, std::defer_lock);
  if (lock_wait == std::chrono::milliseconds::max()) {
    lock.lock();
  } else if (!lock.try_lock_for(lock_wait)) {
    return "";  // another dump is being written right now
  }
  try {
    std::string path = write_dump(folder_, {rank_, world_size_, trigger, reason}, buffer_.snapshot(lock_wait));
    spdlog::warn("flight_recorder: {} ({}): dump written to {}", trigger, reason, path);
    return path;
  } catch (const std::exception& error) {
    spdlog::error("flight_recorder: could not write the dump to {} ({}): {}", folder_, trigger, error.what());
  }
  return "";
}

void Recorder::log_crash_report(const std::string& headline) {
  Snapshot snapshot = buffer_.snapshot(std::chrono::milliseconds(2000));
  const size_t count = std::min(snapshot.records.size(), static_cast<size_t>(options_.crash_report_entries));
  spdlog::error("flight_recorder: crash report: {}; the last {} of {} collectives on this rank:", headline, count,
                snapshot.total_recorded);
  const double now = monotonic_seconds();
  for (size_t i = snapshot.records.size() - count; i < snapshot.records.size(); ++i) {
    spdlog::error("flight_recorder:   {}", describe(snapshot.records[i], now));
  }
  spdlog::default_logger()->flush();
}

}  // namespace titan::flight_recorder
