// The doctest main of the test programs (titan_tests, titan_cuda_tests):
// every test file registers its cases.
#include <ATen/ATen.h>
#undef CHECK
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "titan/logging.hpp"

int main(int argc, char** argv) {
  at::set_num_threads(1);
  titan::init_logging(0, "warn");
  doctest::Context context(argc, argv);
  return context.run();
}
