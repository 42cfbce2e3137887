// Loads libtitan_cuda.so (titan/cuda_runtime.hpp) while libtitan_core is
// itself being loaded, before LibTorch is first asked whether CUDA exists.
#include "titan/cuda_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace titan::internal {
namespace {

struct CudaModule {
  const CudaRuntime* runtime = nullptr;
  std::string absence;
};

std::string last_dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown error";
}

// The module lies beside libtitan_core.so, in the build tree as installed.
std::string cuda_module_path() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cuda_runtime), &info) || !info.dli_fname) return "libtitan_cuda.so";
  std::string library = info.dli_fname;
  const auto slash = library.rfind('/');
  return (slash == std::string::npos ? std::string() : library.substr(0, slash + 1)) + "libtitan_cuda.so";
}

CudaModule load_cuda_module() {
#ifndef TITAN_WITH_CUDA
  return {nullptr, "this Titan was built without CUDA (TITAN_WITH_CUDA off)"};
#else
  const char* set = std::getenv("TITAN_CUDA");
  const std::string choice = set ? set : "auto";
  if (choice == "off" || choice == "0") return {nullptr, "TITAN_CUDA=" + choice + " keeps CUDA unloaded"};
  // Too early to throw or log: a wrong value is said where CUDA is wanted.
  if (choice != "auto" && choice != "on" && choice != "1") {
    return {nullptr, "TITAN_CUDA=" + choice + " is not one of auto, on, off; CUDA was left unloaded"};
  }
  if (choice == "auto") {
    // No driver, no device: LibTorch's CUDA would only say so, at a cost.
    // The driver stays loaded: LibTorch's CUDA opens it anyway.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) return {nullptr, "no CUDA driver: libcuda.so.1 not found"};
  }
  const std::string path = cuda_module_path();
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!module) return {nullptr, "Titan's CUDA module did not load: " + last_dl_error()};
  auto entry = reinterpret_cast<const CudaRuntime* (*)()>(dlsym(module, "titan_cuda_runtime"));
  if (!entry) return {nullptr, path + " has no titan_cuda_runtime: " + last_dl_error()};
  return {entry(), ""};
#endif
}

const CudaModule& cuda_module() {
  static const CudaModule once = load_cuda_module();
  return once;
}

// At load time, not at first use: see titan/cuda_runtime.hpp.
[[maybe_unused]] const CudaModule& cuda_module_with_core = cuda_module();

}  // namespace

const CudaRuntime* cuda_runtime() { return cuda_module().runtime; }

const std::string& cuda_runtime_absence() { return cuda_module().absence; }

}  // namespace titan::internal
