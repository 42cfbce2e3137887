// Deliberately wrong: a one-process checkpointer that writes each tensor's
// raw bytes with no checksum. It notices a missing or short file, but a
// flipped byte loads silently: titan-conformance must fail its corrupt_flip
// check. Many processes are refused at attach().
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "titan/checkpointer.hpp"
#include "titan/error.hpp"
#include "test_plugin.hpp"

namespace {

namespace fs = std::filesystem;

class RawBytesCheckpointer : public titan::Checkpointer {
 public:
  explicit RawBytesCheckpointer(std::string folder) : folder_(std::move(folder)) {}

  void attach(const titan::CheckpointEnv& env) override {
    if (env.world_size > 1) throw titan::Error("raw_bytes_checkpointer: one process only");
  }
  bool enabled() const override { return true; }
  bool should_save(int64_t, bool) const override { return true; }

  void save(int64_t step, const titan::TrainState& state) override {
    fs::path dir = fs::path(folder_) / ("step-" + std::to_string(step));
    fs::create_directories(dir);
    for (const auto* group : {&state.tensors, &state.rank_local}) {
      for (const auto& [name, tensor] : *group) {
        at::Tensor bytes = tensor.detach().to(at::kCPU).contiguous();
        std::ofstream out(dir / (name + ".bin"), std::ios::binary);
        out.write(static_cast<const char*>(bytes.data_ptr()), static_cast<std::streamsize>(bytes.nbytes()));
      }
    }
    std::ofstream values(dir / "values.txt");
    for (const auto& [key, value] : state.values) values << key << "=" << value << "\n";
  }

  std::optional<int64_t> load(titan::TrainState& state) override {
    int64_t step = -1;
    if (fs::exists(folder_)) {
      for (const auto& entry : fs::directory_iterator(folder_)) {
        step = std::max<int64_t>(step, std::stoll(entry.path().filename().string().substr(5)));
      }
    }
    if (step < 0) return std::nullopt;
    fs::path dir = fs::path(folder_) / ("step-" + std::to_string(step));
    for (auto* group : {&state.tensors, &state.rank_local}) {
      for (auto& [name, tensor] : *group) read_into(dir / (name + ".bin"), tensor);
    }
    std::ifstream values(dir / "values.txt");
    state.values.clear();
    for (std::string line; std::getline(values, line);) {
      auto eq = line.find('=');
      if (eq != std::string::npos) state.values[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return step;
  }

 private:
  // Sizes are checked; the bytes themselves are trusted (the bug).
  static void read_into(const fs::path& file, at::Tensor& tensor) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw titan::Error("raw_bytes_checkpointer: '" + file.string() + "' is missing");
    auto bytes = static_cast<std::streamsize>(tensor.nbytes());
    in.read(static_cast<char*>(tensor.data_ptr()), bytes);
    if (in.gcount() != bytes) throw titan::Error("raw_bytes_checkpointer: '" + file.string() + "' is short");
  }

  std::string folder_;
};

void register_raw_bytes(titan::PluginRegistrar& registrar) {
  registrar.checkpointer([](const titan::PluginContext& context) {
    std::string folder = context.options.get<std::string>("folder", "raw_checkpoint", "relative to dump_folder");
    return std::make_unique<RawBytesCheckpointer>((fs::path(context.dump_folder) / folder).string());
  });
}

}  // namespace

TITAN_TEST_PLUGIN(raw_bytes_checkpointer, "1.0", titan::kind_checkpointer,
             "test plugin: raw tensor bytes without checksums (a flipped byte loads silently)", register_raw_bytes)
