// The titan subcommands; each takes its own arguments (after the
// subcommand name) and returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include "titan/run_spec.hpp"
#include "titan/world.hpp"

namespace titan::cli {

using Args = std::vector<std::string>;

int train_command(const Args& args);
int eval_command(const Args& args);
int generate_command(const Args& args);
int launch_command(const Args& args);
int plugins_command(const Args& args);
int config_command(const Args& args);
int tokenizer_command(const Args& args);
int fr_analyze_command(const Args& args);
int checkpoint_command(const Args& args);
int pp_schedule_command(const Args& args);
int report_command(const Args& args);
int plan_command(const Args& args);

// Shared helpers.
bool wants_help(const Args& args);
// Reads CONFIG, applies every `--set k=v`, returns the remaining arguments.
struct RunArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string log_level;
};
RunArgs parse_run_args(const Args& args, const std::string& usage);

// What `titan train` and `titan eval` start from: this process's place in
// the job (its logs prefixed with its rank) and the run CONFIG and its
// `--set`s (then `forced`, e.g. "validation.enable=true") resolve to.
struct StartedRun {
  World world;
  RunSpec spec;
};
StartedRun start_run(const RunArgs& run, const std::vector<std::string>& forced = {});

}  // namespace titan::cli
