// Shared by `titan checkpoint export` and `import`: the model and
// checkpointer of a run config, resolved as `titan train` resolves them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "titan/run_spec.hpp"
#include "titan/tokenizer.hpp"

namespace titan::cli {

struct CheckpointSpec {
  RunSpec spec;  // vocabulary set from the config's tokenizer
  std::unique_ptr<Tokenizer> tokenizer;
};
// Plans `config` on one process and attaches its checkpointer.
CheckpointSpec spec_for_checkpoint(const ConfigNode& config);

struct ExportOptions {
  std::string step_dir;
  std::string out_dir;
  std::string dtype;                         // empty: checkpoint.export_dtype, else float32
  int64_t max_shard_bytes = 5'000'000'000;   // HF's default shard size (5 GB)
};
void export_safetensors(const ExportOptions& options);

struct ImportOptions {
  std::string hf_dir;
  std::string config_path;
  std::vector<std::string> overrides;        // --set k=v on the config
  std::string out_dir;
};
void import_safetensors(const ImportOptions& options);

}  // namespace titan::cli
