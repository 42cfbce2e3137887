// The installed SDK as a third party sees it: `cmake --install` into a
// temporary prefix, the examples built out of tree against that prefix only,
// the installed titan training with each, and Lion's step against a float64
// reference written out here.
#include "doctest_torch.hpp"

#include <cctype>
#include <cmath>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "titan/config.hpp"
#include "titan/optimizer.hpp"
#include "titan/registry.hpp"

namespace fs = std::filesystem;
using titan::test::run_command;

namespace {

// The build tree the titan binary comes from (<build>/bin/titan).
fs::path build_dir() {
  return titan::test::env_or("TITAN_BUILD_DIR", fs::path(titan::test::titan_binary()).parent_path().parent_path());
}

// Fixed (not fresh) folders, so each test process reuses the install and the
// example builds: ninja and `cmake --install` redo only what changed.
fs::path sdk_root() {
  fs::path root = fs::path(titan::test::env_or("TITAN_TEST_TMP", titan::test::paths::test_tmp)) / "sdk";
  fs::create_directories(root);
  return root;
}

fs::path sdk_prefix() { return sdk_root() / "prefix"; }

// `command` while holding sdk_root()/<lock>, over test processes (ctest -j):
// one install at a time, one build of each example at a time; a test that
// only reads the install waits for no example's build.
titan::test::CommandResult locked(const std::string& lock, const std::string& command) {
  return run_command("flock " + (sdk_root() / lock).string() + " sh -c '" + command + "'");
}

// Every SDK test installs first, and only the first install of a run
// writes files (`cmake --install` leaves up-to-date ones alone), so no test
// sees the prefix change under it. A header that left the SDK is removed
// after the install (it is not in the install's manifest), never before:
// wiping the headers would pull them from under another test's build.
void install_sdk() {
  const fs::path headers = sdk_prefix() / "include" / "titan";
  const fs::path manifest = build_dir() / "install_manifest.txt";
  auto result = locked("install.lock", "cmake --install " + build_dir().string() + " --prefix " +
                                           sdk_prefix().string() + " && find " + headers.string() +
                                           " -type f | grep -vxFf " + manifest.string() + " | xargs -r rm -f");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
}

// Which compiler builds an example: Titan's own, or the machine's default
// `c++` (GCC on Debian), so that a plugin built by another compiler than
// core's is built and loaded too when the two differ.
enum class ExampleCompiler { same_as_titan, machine_default };

// Configures and builds examples/<name> against the installed prefix only;
// returns its plugin folder. A unity build (out of tree there is no
// precompiled header, and each file would parse LibTorch's headers again)
// at -O0: what is tested is that it builds, loads and trains.
fs::path build_example(const std::string& name, ExampleCompiler compiler) {
  install_sdk();
  fs::path source = fs::path(titan::test::source_dir()) / "examples" / name;
  fs::path build = sdk_root() / ("build_" + name);
  std::string launcher = run_command("command -v ccache").exit_code == 0 ? " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" : "";
  std::string cxx;
  if (compiler == ExampleCompiler::same_as_titan) {
    cxx = std::string(" -DCMAKE_CXX_COMPILER=") + titan::test::paths::cxx_compiler;
  }
  auto result = locked("build_" + name + ".lock", "cmake -S " + source.string() + " -B " + build.string() +
                       " -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O0 -DCMAKE_UNITY_BUILD=ON"
                       " -DCMAKE_PREFIX_PATH=" + sdk_prefix().string() + cxx +
                       launcher + " && cmake --build " + build.string());
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return build / "plugins";
}

// The installed titan (not the build tree's) on an example config, from the
// example's folder, with the example's plugin folder on TITAN_PLUGIN_PATH.
titan::test::CommandResult train_example(const std::string& name, const std::string& config,
                                         const fs::path& plugin_dir, const fs::path& dump, const std::string& sets) {
  fs::path folder = fs::path(titan::test::source_dir()) / "examples" / name;
  return run_command("cd " + folder.string() + " && TITAN_PLUGIN_PATH=" + plugin_dir.string() + " " +
                     (sdk_prefix() / "bin" / "titan").string() + " train " + config +
                     " --set job.dump_folder=" + dump.string() +
                     " --set training.seq_len=32 --set training.local_batch_size=4 --set training.steps=8"
                     " --set training.threads=1 --set metrics.log_freq=1 --set lr_scheduler.warmup_steps=2 " +
                     sets);
}

std::vector<double> sdk_losses_of(const fs::path& dump) {
  std::vector<double> losses;
  std::stringstream text(titan::test::read_file(dump / "metrics.jsonl"));
  for (std::string line; std::getline(text, line);) {
    if (line.empty()) continue;
    auto json = nlohmann::json::parse(line);
    losses.push_back(json["loss_metrics/global_avg_loss"].is_number() ? json["loss_metrics/global_avg_loss"].get<double>() : std::nan(""));
  }
  return losses;
}

void check_learns(const fs::path& dump, size_t steps) {
  auto losses = sdk_losses_of(dump);
  REQUIRE(losses.size() == steps);
  for (double loss : losses) CHECK(std::isfinite(loss));
  CHECK(losses.back() < losses.front());
}

}  // namespace

TEST_CASE("SDK: cmake --install puts the headers, libtitan_core, titan, the plugins and the CMake package under "
          "the prefix, and the installed titan uses the installed plugins") {
  install_sdk();
  fs::path prefix = sdk_prefix();
  for (const char* file : {"include/titan/plugin.hpp", "include/titan/optimizer.hpp", "lib/libtitan_core.so", "lib/libtitan_train.so", "lib/libtitan_plan.so",
                           "bin/titan", "bin/titan-conformance", "lib/titan/plugins/libtitan_plugin_adamw.so",
                           "lib/titan/plugins/libtitan_plugin_adamw.conformance.yaml",
                           "lib/titan/plugins/libtitan_plugin_llama3.so", "lib/cmake/Titan/TitanConfig.cmake",
                           "lib/cmake/Titan/TitanConfigVersion.cmake", "lib/cmake/Titan/TitanTargets.cmake",
                           "lib/cmake/Titan/TitanPlugin.cmake", "lib/cmake/Titan/titan_plugin.map"}) {
    INFO(file);
    CHECK(fs::exists(prefix / file));
  }
  // The test plugins (deliberately broken) are not part of the SDK.
  CHECK_FALSE(fs::exists(prefix / "lib/titan/plugins/libtitan_plugin_wrong_abi.so"));
  auto inspect = run_command("cd / && " + (prefix / "bin" / "titan").string() + " plugins inspect adamw");
  INFO(inspect.output);
  REQUIRE(inspect.exit_code == 0);
  CHECK(inspect.output.find((prefix / "lib/titan/plugins/libtitan_plugin_adamw.so").string()) != std::string::npos);
}

// The names an installed libtitan_core exports, demangled, without what
// nm adds around them ("typeinfo for ", a template's return type).
std::vector<std::string> exported_names(const fs::path& library) {
  auto listing = run_command("nm -D --defined-only -C " + library.string());
  INFO(listing.output);
  REQUIRE(listing.exit_code == 0);
  std::vector<std::string> names;
  std::stringstream lines(listing.output);
  for (std::string line; std::getline(lines, line);) {
    // "<address> <type> <name>"
    const size_t type_end = line.find(' ', line.find(' ') + 1);
    if (type_end == std::string::npos) continue;
    std::string name = line.substr(type_end + 1);
    for (const char* prefix : {"typeinfo name for ", "typeinfo for ", "vtable for ", "VTT for ", "guard variable for ",
                               "TLS init function for ", "TLS wrapper function for ", "non-virtual thunk to ",
                               "virtual thunk to "}) {
      if (name.rfind(prefix, 0) == 0) name = name.substr(std::strlen(prefix));
    }
    // A template function's return type comes first: "long titan::ConfigNode::get<long>(...)".
    if (name.rfind("titan::", 0) != 0) {
      const size_t at = name.find(" titan::");
      const size_t paren = name.find('(');
      if (at != std::string::npos && (paren == std::string::npos || at < paren)) name = name.substr(at + 1);
    }
    names.push_back(name);
  }
  return names;
}

// The first name under titan:: ("ConfigNode" of titan::ConfigNode::get), or
// under a nested namespace ("Writer" of titan::safetensors::Writer::...).
std::pair<std::string, std::string> top_level_name(const std::string& symbol) {
  std::vector<std::string> parts;
  size_t at = std::strlen("titan::");
  while (at < symbol.size() && parts.size() < 2) {
    size_t end = at;
    while (end < symbol.size() && (std::isalnum(static_cast<unsigned char>(symbol[end])) || symbol[end] == '_')) ++end;
    parts.push_back(symbol.substr(at, end - at));
    if (symbol.compare(end, 2, "::") != 0) break;
    at = end + 2;
  }
  return {parts[0], parts.size() > 1 ? parts[1] : ""};
}

TEST_CASE("SDK: the installed libtitan_core exports the SDK's names only (and core's documented seams)") {
  install_sdk();
  const fs::path prefix = sdk_prefix();
  std::string headers;
  for (const auto& entry : fs::directory_iterator(prefix / "include" / "titan")) {
    headers += titan::test::read_file(entry.path()) + "\n";
  }
  // Every identifier the headers spell, and every namespace they open
  // ("namespace safetensors {" or "namespace titan::safetensors {"), read
  // once: a regex over all headers per exported name took 30 s at -O0.
  auto identifier_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::set<std::string> words, namespaces;
  for (size_t at = 0; at < headers.size();) {
    size_t end = at;
    while (end < headers.size() && identifier_char(headers[end])) ++end;
    if (end > at) words.insert(headers.substr(at, end - at));
    at = std::max(end, at + 1);
  }
  for (size_t at = headers.find("namespace "); at != std::string::npos; at = headers.find("namespace ", at + 1)) {
    size_t begin = at + std::strlen("namespace ");
    if (headers.compare(begin, 7, "titan::") == 0) begin += 7;
    size_t end = begin;
    while (end < headers.size() && identifier_char(headers[end])) ++end;
    if (end > begin && headers.compare(end, 2, " {") == 0) namespaces.insert(headers.substr(begin, end - begin));
  }
  auto declared = [&](const std::string& word) { return !word.empty() && words.count(word) > 0; };
  // Exported for libtitan_train and libtitan_plan; not in the SDK's headers.
  const std::set<std::string> seams = {"MetaTally", "MetaTallyScope", "current_meta_tally", "install_meta_allocator",
                                       "make_process_group_comm", "cuda_runtime", "cuda_runtime_absence"};
  const auto names = exported_names(prefix / "lib" / "libtitan_core.so");
  CHECK(names.size() > 100);
  std::vector<std::string> foreign, undeclared;
  for (const std::string& name : names) {
    if (name.rfind("titan::", 0) != 0) {
      foreign.push_back(name);  // LibTorch's, the standard library's, fmt's ... copies
      continue;
    }
    const auto [first, second] = top_level_name(name);
    const bool nested = namespaces.count(first) > 0;
    if (first == "internal" ? seams.count(second) == 0 : !declared(nested ? second : first)) undeclared.push_back(name);
  }
  INFO("not in namespace titan: " << (foreign.empty() ? "" : foreign.front()) << " (" << foreign.size() << ")");
  CHECK(foreign.empty());
  INFO("not declared by an installed header: " << (undeclared.empty() ? "" : undeclared.front()) << " ("
                                                  << undeclared.size() << ")");
  CHECK(undeclared.empty());
  // The trainer and the planner are libraries of their own, which the SDK
  // neither installs headers of nor needs.
  CHECK_FALSE(fs::exists(prefix / "include/titan/trainer.hpp"));
  CHECK_FALSE(fs::exists(prefix / "include/titan/pipeline_program.hpp"));
  auto needed = run_command("readelf -d " + (prefix / "lib" / "libtitan_core.so").string());
  INFO(needed.output);
  CHECK(needed.output.find("libtitan_train") == std::string::npos);
  CHECK(needed.output.find("libtitan_plan") == std::string::npos);
}

TEST_CASE("SDK: the Lion example builds out of tree and the installed titan trains with it") {
  fs::path plugins = build_example("lion_optimizer", ExampleCompiler::machine_default);
  REQUIRE(fs::exists(plugins / "libtitan_plugin_lion.so"));
  fs::path dump = titan::test::temp_dir("sdk_lion");
  auto result = train_example("lion_optimizer", "lion_debugmodel.yaml", plugins, dump,
                              "--set model.dim=64 --set model.n_layers=2 --set model.n_heads=4 "
                              "--set model.max_seq_len=64 --set optimizer.lr=1e-3");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("lion: ") != std::string::npos);  // the plugin built the optimizer
  check_learns(dump, 8);

  // The installed harness, on the declaration titan_add_plugin(CONFORMANCE) put beside the library.
  auto conformance = run_command((sdk_prefix() / "bin" / "titan-conformance").string() + " --plugin " +
                                 (plugins / "libtitan_plugin_lion.so").string());
  INFO(conformance.output);
  CHECK(conformance.exit_code == 0);
  CHECK(conformance.output.find("optimizer.reference_step                 PASS") != std::string::npos);

  // A bad option is refused before training, naming its key.
  auto bad = train_example("lion_optimizer", "lion_debugmodel.yaml", plugins, dump / "bad",
                           "--set optimizer.beta1=1.5");
  INFO(bad.output);
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("optimizer.beta1") != std::string::npos);
}

TEST_CASE("SDK: the GPT-2 model example builds out of tree and the installed titan trains it") {
  fs::path plugins = build_example("gpt2_model", ExampleCompiler::same_as_titan);
  fs::path dump = titan::test::temp_dir("sdk_gpt2");
  auto result = train_example("gpt2_model", "gpt2_tiny.yaml", plugins, dump, "--set model.max_seq_len=64");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("model gpt2 flavor tiny") != std::string::npos);
  check_learns(dump, 8);

  // Its forward reads no document positions: block-causal attention is
  // refused by name rather than silently causal.
  auto block_causal = train_example("gpt2_model", "gpt2_tiny.yaml", plugins, dump / "block_causal",
                                    "--set model.max_seq_len=64 --set model.attn_mask_type=block_causal");
  INFO(block_causal.output);
  CHECK(block_causal.exit_code != 0);
  CHECK(block_causal.output.find("model.attn_mask_type: block_causal, but model gpt2 does not read document "
                                 "positions") != std::string::npos);

  // The installed harness runs the model checks on the example's declaration.
  auto conformance = run_command((sdk_prefix() / "bin" / "titan-conformance").string() + " --plugin " +
                                 (plugins / "libtitan_plugin_gpt2.so").string());
  INFO(conformance.output);
  CHECK(conformance.exit_code == 0);
  CHECK(conformance.output.find("model.init_order_independent             PASS") != std::string::npos);
  CHECK(conformance.output.find("model.learns                             PASS") != std::string::npos);
}

TEST_CASE("Lion example: two steps match a float64 reference of the rule, with weight decay") {
  fs::path plugins = build_example("lion_optimizer", ExampleCompiler::machine_default);
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("{beta1: 0.8, beta2: 0.95, weight_decay: 0.5}", "test.yaml");
  auto factory = titan::PluginRegistry::instance().create_optimizer((plugins / "libtitan_plugin_lion.so").string(),
                                                                    context);
  torch::manual_seed(7);
  std::vector<at::Tensor> params = {torch::randn({5, 3}).set_requires_grad(true),
                                    torch::randn({4}).set_requires_grad(true)};
  std::vector<titan::NamedParameter> named = {{"w", params[0]}, {"b", params[1]}};
  auto optimizer = factory->build(named);

  // The rule in float64: decay, sign of the interpolation, then the momentum.
  std::vector<at::Tensor> p_ref, m_ref;
  for (const auto& p : params) {
    p_ref.push_back(p.detach().to(at::kDouble));
    m_ref.push_back(torch::zeros_like(p_ref.back()));
  }
  const double lr = 0.01, beta1 = 0.8, beta2 = 0.95, weight_decay = 0.5;
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor grad = torch::randn(params[i].sizes());
      params[i].mutable_grad() = grad.clone();
      at::Tensor g = grad.to(at::kDouble);
      p_ref[i] = p_ref[i] * (1 - lr * weight_decay) - lr * torch::sign(beta1 * m_ref[i] + (1 - beta1) * g);
      m_ref[i] = beta2 * m_ref[i] + (1 - beta2) * g;
    }
    optimizer->step(lr);
  }
  auto state = optimizer->state_tensors();
  REQUIRE(state.count("w.exp_avg") == 1);
  REQUIRE(state.count("b.exp_avg") == 1);
  const char* names[] = {"w", "b"};
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(names[i]);
    CHECK((params[i].detach().to(at::kDouble) - p_ref[i]).abs().max().item<double>() < 1e-6);
    CHECK((state[std::string(names[i]) + ".exp_avg"].to(at::kDouble) - m_ref[i]).abs().max().item<double>() < 1e-6);
  }
}
