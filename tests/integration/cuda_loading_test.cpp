// Titan's CUDA code lives in libtitan_cuda.so, which libtitan_core loads only
// where a CUDA driver is (core/internal/titan/cuda_runtime.hpp): without one
// a process maps none of LibTorch's CUDA libraries; TITAN_CUDA=on loads the
// module anyway, early enough that LibTorch's CUDA hooks are the real ones,
// and CPU training is the same either way.
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "doctest_torch.hpp"
#include "equivalence_runs.hpp"
#include "test_support.hpp"
#include "titan/compat.hpp"
#include "titan/cuda_runtime.hpp"

namespace {

using titan::test::has;

bool driver_present() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  return driver != nullptr;
}

bool mapped(const std::string& library) { return has(titan::test::read_file("/proc/self/maps"), library); }

// `titan --version`'s CUDA line under a TITAN_CUDA setting ("" for unset).
std::string cuda_line(const std::string& setting) {
  const std::string env = setting.empty() ? "env -u TITAN_CUDA " : "env TITAN_CUDA=" + setting + " ";
  auto result = titan::test::run_command(env + titan::test::titan_binary() + " --version");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  const auto start = result.output.find("CUDA ");
  REQUIRE(start != std::string::npos);
  return result.output.substr(start, result.output.find('\n', start) - start);
}

}  // namespace

#ifdef TITAN_WITH_CUDA
TEST_CASE("cuda loading: without a CUDA driver no CUDA library is mapped; the module loads where one is") {
  const bool loaded = titan::internal::cuda_runtime() != nullptr;
  CHECK(mapped("libtitan_cuda.so") == loaded);
  CHECK(mapped("libtorch_cuda.so") == loaded);
  if (!driver_present() && !std::getenv("TITAN_CUDA")) {
    CHECK_FALSE(loaded);
    CHECK_FALSE(titan::compat::cuda_available());
    CHECK(titan::compat::cuda_absence() == "no CUDA driver: libcuda.so.1 not found");
    CHECK(has(cuda_line(""), "available: no (no CUDA driver: libcuda.so.1 not found)"));
  }
  CHECK(has(cuda_line("off"), "available: no (TITAN_CUDA=off keeps CUDA unloaded)"));
  CHECK(has(cuda_line("yes"), "available: no (TITAN_CUDA=yes is not one of auto, on, off; CUDA was left unloaded)"));
}

TEST_CASE("cuda loading: TITAN_CUDA=on loads the module before LibTorch settles on CUDA, and CPU training is "
          "unchanged by it") {
  // The module reports LibTorch's CUDA hooks missing (a bug text) when they
  // were settled before it loaded; with a driver it names the devices.
  const std::string line = cuda_line("on");
  CHECK_FALSE(has(line, "Titan bug"));
  CHECK((has(line, "available: no (no CUDA device)") || has(line, "available: yes, ")));

  const titan::test::RunOutput plain = titan::test::run_single("cuda_loading_default");
  setenv("TITAN_CUDA", "on", 1);
  const titan::test::RunOutput with_module = titan::test::run_single("cuda_loading_on");
  unsetenv("TITAN_CUDA");
  titan::test::check_equivalent(with_module, plain, 0.0);
}

TEST_CASE("cuda loading: training.device=cuda where CUDA is absent says why and what to set") {
  if (titan::compat::cuda_available()) return;  // a GPU is here: the CUDA tests train on it
  auto result = titan::test::run_command("env TITAN_CUDA=off " + titan::test::titan_binary() + " train " +
                                         titan::test::source_dir() +
                                         "/configs/llama3_debugmodel.yaml --set training.device=cuda");
  CHECK(result.exit_code != 0);
  CHECK(has(result.output, "training.device is 'cuda' but this titan has no CUDA"));
  CHECK(has(result.output, "TITAN_CUDA=off keeps CUDA unloaded"));
  CHECK(has(result.output, "use training.device=cpu"));
}
#endif
