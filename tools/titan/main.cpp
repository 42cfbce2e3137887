// titan: the command-line entry point. Every error a user can act on ends
// here as one message and a non-zero exit, never a bare trace.
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>

#include "commands.h"
#include "titan/compat.hpp"
#include "titan/error.hpp"

namespace titan::build_info {
const char* version();
}

namespace {

const char* kMainUsage = R"(titan: LLM pre-training in C++ on LibTorch

usage: titan <command> [options]
       titan --version                 Titan, LibTorch and CUDA versions; whether a GPU is here

commands:
  train CONFIG [--set key=value ...]   train as the YAML config says
  eval CONFIG [--set key=value ...]    loss and perplexity of the run's checkpoint on its validation set
  generate FOLDER --prompt TEXT        continue a prompt with a checkpoint's (or HF folder's) model
  launch --nproc-per-node N -- PROGRAM ARGS...
                                       run N local ranks of PROGRAM (like torchrun)
  config check CONFIG [--set ...]      validate a config without training
  plugins list                         list the plugins found on the search path
  plugins inspect NAME                 a plugin's kinds, ABI and options
  tokenizer train CORPUS... --out FILE train a byte-level BPE tokenizer
  tokenizer encode TOKENIZER FILE...   the ids of each file's text
  fr-analyze DIR [--json]              find the rank and collective at fault in flight recorder dumps
  checkpoint export|import ...         convert between checkpoints and Hugging Face safetensors
  pp-schedule --schedule NAME --stages S --microbatches M [--svg FILE]
                                       a pipeline schedule's actions per rank, checked, and its bubble
  report RUN_DIR [--output FILE]       one HTML page of a run's metrics, charts and config
  plan CONFIG --world-size N [--json]  dry run of every rank before launch: collectives checked,
                                       per-rank peak memory, FLOPs and communication
  plan --model M --gpus N --device D   search the fastest layout that fits a cluster

`titan <command> --help` explains each command.
)";

int dispatch(const titan::cli::Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kMainUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "titan " << titan::build_info::version() << "\nLibTorch " << titan::torch_version_string() << "\n"
              << titan::compat::cuda_summary() << "\n";
    return 0;
  }
  titan::cli::Args rest(args.begin() + 1, args.end());
  const std::string& command = args[0];
  if (command == "train") return titan::cli::train_command(rest);
  if (command == "eval") return titan::cli::eval_command(rest);
  if (command == "generate") return titan::cli::generate_command(rest);
  if (command == "launch") return titan::cli::launch_command(rest);
  if (command == "plugins") return titan::cli::plugins_command(rest);
  if (command == "config") return titan::cli::config_command(rest);
  if (command == "tokenizer") return titan::cli::tokenizer_command(rest);
  if (command == "fr-analyze") return titan::cli::fr_analyze_command(rest);
  if (command == "checkpoint") return titan::cli::checkpoint_command(rest);
  if (command == "pp-schedule") return titan::cli::pp_schedule_command(rest);
  if (command == "report") return titan::cli::report_command(rest);
  if (command == "plan") return titan::cli::plan_command(rest);
  std::cerr << "titan: unknown command '" << command << "'\n\n" << kMainUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A write to a socket whose peer died (a rank of another replica group, a
  // Gloo peer) fails with EPIPE, which the collective reports; by default
  // SIGPIPE would kill this rank instead. Python (hence torchrun's ranks)
  // ignores it the same way.
  std::signal(SIGPIPE, SIG_IGN);
  titan::cli::Args args(argv + 1, argv + argc);
  try {
    return dispatch(args);
  } catch (const titan::Error& error) {
    std::fflush(stdout);
    std::cerr << "titan: error: " << error.what() << "\n";
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::cerr << "titan: internal error: " << error.what() << "\n"
              << "(this is a bug or an unchecked input; please report it with the command and config)\n";
  }
  return 1;
}
