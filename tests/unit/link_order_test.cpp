// The torch wheel's libtorch.so exports copies of some of libstdc++'s
// std::filesystem (static extras of its toolchain), and its remove_all
// crashes when called from here. On the lent GPU machine (Ubuntu 24.04, a
// GCC 13 at /opt/gcc whose -lstdc++ is the static archive) every test that
// cleaned up a folder died in it. cmake/TitanTorchWheel.cmake names the
// shared libstdc++ first among every program's libraries; these check that
// it took, in this process and in what the titan programs need.
#include "doctest_torch.hpp"

#include <dlfcn.h>
#include <link.h>

#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

using titan::test::has;

// The libraries a program or library needs, in the order the dynamic linker
// searches them for a symbol (readelf -d's NEEDED entries).
std::vector<std::string> needed_libraries(const std::string& path) {
  const auto result = titan::test::run_command("readelf -d '" + path + "'");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  std::vector<std::string> needed;
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    const auto open = line.find("Shared library: [");
    if (open == std::string::npos) continue;
    const auto start = open + 17;
    needed.push_back(line.substr(start, line.find(']', start) - start));
  }
  return needed;
}

std::string loaded_path_of(const std::string& library) {
  std::string found;
  std::pair<const std::string*, std::string*> query{&library, &found};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& [name, path] = *static_cast<std::pair<const std::string*, std::string*>*>(data);
        if (info->dlpi_name && has(info->dlpi_name, *name)) *path = info->dlpi_name;
        return 0;
      },
      &query);
  return found;
}

}  // namespace

TEST_CASE("link order: std::filesystem binds to the shared libstdc++, not to libtorch.so's copies") {
  // RTLD_DEFAULT finds what an undefined reference binds to: the first
  // definition in load order.
  for (const char* symbol : {"_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",
                             "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE",
                             "_ZNSt10filesystem16create_directoryERKNS_7__cxx114pathE"}) {
    INFO(std::string(symbol));
    void* address = dlsym(RTLD_DEFAULT, symbol);
    REQUIRE(address != nullptr);
    Dl_info where{};
    REQUIRE(dladdr(address, &where) != 0);
    INFO("bound to " << std::string(where.dli_fname));  // doctest prints a char* as an address
    CHECK(has(where.dli_fname, "libstdc++.so"));
  }
}

TEST_CASE("link order: the titan programs and libtitan_core.so need libstdc++ before any LibTorch library") {
  const std::string core = loaded_path_of("libtitan_core.so");
  REQUIRE_MESSAGE(!core.empty(), "libtitan_core.so is not loaded in the test binary");
  for (const std::string& path : {titan::test::titan_binary(), core}) {
    const auto needed = needed_libraries(path);
    INFO(path);
    size_t libstdcxx = needed.size(), first_torch = needed.size();
    for (size_t i = 0; i < needed.size(); ++i) {
      if (has(needed[i], "libstdc++.so") && libstdcxx == needed.size()) libstdcxx = i;
      if ((has(needed[i], "libtorch") || has(needed[i], "libc10")) && first_torch == needed.size()) first_torch = i;
    }
    CHECK(libstdcxx < needed.size());
    CHECK(first_torch < needed.size());
    CHECK(libstdcxx < first_torch);
  }
}
