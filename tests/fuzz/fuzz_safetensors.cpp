// Fuzz target: one .safetensors file as `titan checkpoint import` and HF
// weight loading read it: the 8-byte header length, the JSON header
// (dtypes, shapes, data_offsets, __metadata__), the tiling rule, then every
// tensor read back. Input: the whole file.
#include <ATen/ATen.h>

#include <cstdint>

#include "fuzz_support.hpp"
#include "titan/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path path = titan::fuzz::scratch_dir() / "model.safetensors";
  titan::fuzz::write_file(path, titan::fuzz::as_text(data, size));
  titan::fuzz::expect_clean_refusal([&] {
    titan::safetensors::File file(path.string());
    for (const auto& [name, info] : file.tensors()) file.read(name);
  });
  return 0;
}
