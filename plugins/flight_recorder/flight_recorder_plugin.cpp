// The `flight_recorder` plugin: its descriptor, its options and the factory
// of the Recorder (a CommObserver).
#include "recorder.h"
#include "titan/plugin.hpp"

namespace {

titan::flight_recorder::Options read_options(const titan::ConfigNode& node) {
  titan::flight_recorder::Options options;
  options.buffer_size = node.get<int64_t>("buffer_size", options.buffer_size,
                                          "collectives kept per rank (a ring buffer; older ones are dropped)");
  if (options.buffer_size <= 0) node.fail("buffer_size", "expected a positive number of entries");
  options.watchdog_timeout_seconds = node.get<double>(
      "watchdog_timeout_seconds", options.watchdog_timeout_seconds,
      "a collective outstanding this long makes the watchdog dump and exit the process; 0 = "
      "comm.train_timeout_seconds");
  if (!(options.watchdog_timeout_seconds >= 0)) node.fail("watchdog_timeout_seconds", "expected >= 0 (0: comm.train_timeout_seconds)");
  options.crash_report_entries = node.get<int64_t>("crash_report_entries", options.crash_report_entries,
                                                   "last collectives written to the log on a crash or stop signal");
  if (options.crash_report_entries < 0) node.fail("crash_report_entries", "expected >= 0");
  options.dump_on_exit = node.get<bool>("dump_on_exit", options.dump_on_exit,
                                        "also dump when the run ends normally");
  options.handle_signals = node.get<bool>(
      "handle_signals", options.handle_signals,
      "dump on SIGTERM/SIGINT/SIGABRT/SIGSEGV/SIGBUS/SIGFPE/SIGILL and on demand on SIGUSR1");
  return options;
}

// Not titan::make_factory: the recorder also takes the job's rank, world
// size and dump folder.
void register_flight_recorder(titan::PluginRegistrar& registrar) {
  registrar.comm_observer([](const titan::PluginContext& context) {
    return std::make_unique<titan::flight_recorder::Recorder>(read_options(context.options), context.rank,
                                                              context.world_size, context.dump_folder);
  });
}

}  // namespace

TITAN_PLUGIN(TITAN_PLUGIN_NAME, "1.0", titan::kind_comm_observer,
             "ring buffer of every collective per rank, watchdog on stuck collectives, dumps on timeout/signal/crash",
             register_flight_recorder)
