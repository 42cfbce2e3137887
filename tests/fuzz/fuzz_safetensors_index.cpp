// Fuzz target: model.safetensors.index.json of a sharded Hugging Face
// folder (safetensors::Folder): the weight_map, the file names it gives,
// and the check that each named file holds the tensor. The folder holds two
// small valid shards written once with the project's own writer.
// Input: the index file.
#include <ATen/ATen.h>

#include <cstdint>

#include "fuzz_support.hpp"
#include "titan/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    std::filesystem::path folder = titan::fuzz::scratch_dir() / "hf";
    std::filesystem::create_directories(folder / "sub");
    // The tensor names of tests/fuzz/corpus/safetensors_index's seeds.
    titan::safetensors::save_file((folder / "model-00001-of-00002.safetensors").string(),
                                  {{"model.embed_tokens.weight", at::arange(12, at::kFloat).reshape({3, 4})},
                                   {"model.norm.weight", at::ones({4}, at::kBFloat16)}},
                                  {{"format", "pt"}});
    titan::safetensors::save_file((folder / "model-00002-of-00002.safetensors").string(),
                                  {{"lm_head.weight", at::arange(8, at::kInt).reshape({2, 4})},
                                   {"mask", at::ones({3}, at::kBool)}});
    return folder;
  }();
  titan::fuzz::write_file(dir / "model.safetensors.index.json", titan::fuzz::as_text(data, size));
  titan::fuzz::expect_clean_refusal([&] {
    titan::safetensors::Folder folder(dir.string());
    for (const auto& name : folder.names()) {
      folder.info(name);
      folder.file_of(name);
      folder.read(name);
    }
  });
  return 0;
}
