// `titan checkpoint export`: a checkpoint step folder's model as a Hugging
// Face folder. Tensors are read, converted (ModelSpec::to_hf) and written
// one at a time, so the whole model is never in memory at once.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint_hf.h"
#include "titan/error.hpp"
#include "titan/hf_weights.hpp"
#include "titan/logging.hpp"
#include "titan/safetensors.hpp"

namespace titan::cli {

namespace {

namespace fs = std::filesystem;

struct ExportedTensor {
  std::string name;     // Titan's
  std::string hf_name;
  std::vector<int64_t> shape;
  int64_t part = -1;    // >= 0: this index of the Titan tensor's first dim (a stacked HF name)
};

at::ScalarType parse_dtype(const std::string& name, const std::string& where) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw Error(where + ": expected one of {float32, bfloat16, float16}, got '" + name + "'");
}

std::string resolve_dtype(const ExportOptions& options, const RunSpec& spec, std::string& where) {
  where = "--dtype";
  if (!options.dtype.empty()) return options.dtype;
  ConfigNode checkpoint = spec.root.child("checkpoint");
  where = "checkpoint.export_dtype";
  return checkpoint.has("export_dtype") ? checkpoint.get<std::string>("export_dtype", "float32") : "float32";
}

// The model's parameters, in its order, checked against the checkpoint's names.
std::vector<ExportedTensor> tensors_to_export(const RunSpec& spec, const std::string& step_dir) {
  auto names = spec.model->hf_names();
  if (names.empty()) {
    throw Error("model plugin '" + spec.model_plugin + "' has no Hugging Face names; it cannot be exported");
  }
  auto saved_list = spec.checkpointer->model_tensor_names(step_dir);
  std::set<std::string> saved(saved_list.begin(), saved_list.end());
  std::vector<ExportedTensor> tensors;
  auto model = spec.model->build(c10::Device(c10::kMeta));
  for (const auto& item : model->named_parameters()) {
    if (!saved.erase(item.key())) {
      throw Error("checkpoint '" + step_dir + "' has no model tensor '" + item.key() + "', which model " +
                  spec.model_plugin + " " + spec.model->flavor() +
                  " has (is its config.yaml the one it was saved with?)");
    }
    auto hf = names.find(item.key());
    if (hf == names.end()) {
      throw Error("model plugin '" + spec.model_plugin + "' gives no HF name for '" + item.key() + "'");
    }
    std::vector<int64_t> shape = item.value().sizes().vec();
    if (!hf_name_is_stacked(hf->second)) {
      // HF's shape is what to_hf makes of ours (GPT-OSS's experts transpose).
      at::Tensor probe = at::empty(shape, at::TensorOptions().device(at::kMeta));
      tensors.push_back({item.key(), hf->second, spec.model->to_hf(item.key(), probe).sizes().vec()});
      continue;
    }
    const std::vector<int64_t> part_shape(shape.begin() + 1, shape.end());
    for (int64_t index = 0; index < shape.at(0); ++index) {
      tensors.push_back({item.key(), hf_name_of_part(hf->second, index), part_shape, index});
    }
  }
  // Buffers saved with the model (a MoE router's expert bias and token
  // counts) are training state most HF models have no place for; those the
  // model names (DeepSeek-V3's expert bias) are exported with the parameters.
  std::vector<std::string> skipped;
  for (const auto& item : model->named_buffers()) {
    if (!saved.erase(item.key())) continue;
    auto hf = names.find(item.key());
    if (hf == names.end()) {
      skipped.push_back(item.key());
    } else {
      tensors.push_back({item.key(), hf->second, item.value().sizes().vec()});
    }
  }
  if (!saved.empty()) {
    throw Error("checkpoint '" + step_dir + "' has model tensor '" + *saved.begin() + "', which model " +
                spec.model_plugin + " " + spec.model->flavor() + " does not have");
  }
  if (!skipped.empty()) {
    auto bias = std::find_if(skipped.begin(), skipped.end(),
                             [](const std::string& name) { return name.find("expert_bias") != std::string::npos; });
    spdlog::warn("not exported: {} buffer{} with no Hugging Face counterpart (e.g. {}){}", skipped.size(),
                 skipped.size() > 1 ? "s" : "", bias != skipped.end() ? *bias : skipped.front(),
                 bias != skipped.end() ? "; an exported MoE routes on the unbiased scores" : "");
  }
  return tensors;
}

// HF's layout: one model.safetensors, or model-0000i-of-0000n.safetensors
// files of at most max_bytes each (a larger tensor gets a file of its own).
std::vector<std::vector<size_t>> split_into_files(const std::vector<ExportedTensor>& tensors, at::ScalarType dtype,
                                                   int64_t max_bytes) {
  std::vector<std::vector<size_t>> files(1);
  int64_t bytes_in_file = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype)) * c10::multiply_integers(tensors[i].shape);
    if (!files.back().empty() && bytes_in_file + bytes > max_bytes) {
      files.emplace_back();
      bytes_in_file = 0;
    }
    files.back().push_back(i);
    bytes_in_file += bytes;
  }
  return files;
}

std::string file_name(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error("cannot write '" + path.string() + "'");
}

}  // namespace

void export_safetensors(const ExportOptions& options) {
  fs::path step(options.step_dir), out(options.out_dir);
  if (!fs::is_directory(step)) throw Error("checkpoint step folder '" + options.step_dir + "' does not exist");
  fs::path config_path = step / "config.yaml";
  if (!fs::exists(config_path)) {
    throw Error("'" + options.step_dir + "' has no config.yaml; expected a checkpoint step folder written by the "
                "dcp checkpointer (e.g. outputs/run/checkpoint/step-100)");
  }
  CheckpointSpec resolved = spec_for_checkpoint(ConfigNode::load_file(config_path.string()));
  const RunSpec& spec = resolved.spec;
  std::string where;
  std::string dtype_name = resolve_dtype(options, spec, where);
  at::ScalarType dtype = parse_dtype(dtype_name, where);
  std::vector<ExportedTensor> tensors = tensors_to_export(spec, options.step_dir);
  if (safetensors::is_hf_folder(options.out_dir)) {
    throw Error("'" + options.out_dir + "' already holds safetensors files; remove them or choose another --out");
  }
  fs::create_directories(out);

  auto files = split_into_files(tensors, dtype, options.max_shard_bytes);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  int64_t total_bytes = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    std::string name = file_name(f, files.size());
    std::vector<safetensors::TensorEntry> entries;
    for (size_t i : files[f]) entries.push_back({tensors[i].hf_name, dtype, tensors[i].shape});
    safetensors::Writer writer((out / name).string(), entries, {{"format", "pt"}});
    std::string cached_name;  // a stacked tensor is read once for all its parts
    at::Tensor cached;
    for (size_t i : files[f]) {
      const ExportedTensor& tensor = tensors[i];
      if (tensor.name != cached_name) {
        cached = spec.model->to_hf(tensor.name, spec.checkpointer->read_model_tensor(options.step_dir, tensor.name));
        cached_name = tensor.name;
      }
      at::Tensor value = tensor.part >= 0 ? cached.select(0, tensor.part) : cached;
      if (value.sizes() != c10::IntArrayRef(tensor.shape)) {
        throw Error("checkpoint '" + options.step_dir + "': tensor '" + tensor.name + "' has shape " +
                    c10::str(cached.sizes()) + ", which does not fit the model's" +
                    (tensor.part >= 0 ? " (" + tensor.hf_name + ": " : " (") + c10::str(tensor.shape) + ")");
      }
      at::Tensor converted = value.to(dtype).contiguous();
      writer.add(tensor.hf_name, converted);
      total_bytes += static_cast<int64_t>(converted.nbytes());
      weight_map[tensor.hf_name] = name;
    }
    writer.finish();
  }
  if (files.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text(out / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  auto config = nlohmann::ordered_json::parse(spec.model->hf_config_json());
  config["torch_dtype"] = dtype_name;
  config["bos_token_id"] = resolved.tokenizer->bos_id();
  config["eos_token_id"] = resolved.tokenizer->eos_id();
  write_text(out / "config.json", config.dump(2) + "\n");
  spdlog::info("exported {} tensors ({:.1f} MiB, {}) from {} to {} ({} safetensors file{})", tensors.size(),
               total_bytes / 1048576.0, dtype_name, options.step_dir, options.out_dir, files.size(),
               files.size() > 1 ? "s + model.safetensors.index.json" : "");
}

}  // namespace titan::cli
