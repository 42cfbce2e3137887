// Safetensors: files whose bytes are laid out by hand here from the public
// spec (length, JSON header, data buffer) are read exactly; every rule the
// spec sets is enforced with an error naming the file; the writer's output
// follows the same rules and round-trips; HF folders (single, sharded).
#include "doctest_torch.hpp"

#include <nlohmann/json.hpp>

#include "error_of.hpp"
#include "test_support.hpp"
#include "titan/error.hpp"
#include "titan/safetensors.hpp"

namespace {

namespace fs = std::filesystem;
namespace st = titan::safetensors;

std::string le64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// A file as the spec lays it out: u64 little-endian N, N header bytes, data.
std::string write_raw(const fs::path& path, const std::string& header, const std::string& data) {
  std::string bytes = le64(header.size()) + header + data;
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

std::string bytes_of(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}



// The error reading a one-tensor file of F32 [2] whose entry is `entry`
// (data 8 bytes), or "<no error>".
std::string one_tensor_error(const fs::path& dir, const std::string& name, const std::string& entry,
                             const std::string& data = std::string(8, '\0')) {
  std::string path = write_raw(dir / (name + ".safetensors"), "{\"w\":" + entry + "}", data);
  return titan::test::error_of([&] { st::File file(path); });
}

}  // namespace

TEST_SUITE("safetensors") {
  TEST_CASE("a file laid out by hand from the spec is read exactly: every dtype, metadata, padding, any order") {
    fs::path dir = titan::test::temp_dir("safetensors_by_hand");
    // Entries listed out of offset order; header padded with spaces to 8.
    std::string header =
        R"({"__metadata__":{"format":"pt","note":"hand made"},)"
        R"("i64":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
        R"("f32":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("bf16":{"dtype":"BF16","shape":[2,1],"data_offsets":[16,20]},)"
        R"("f16":{"dtype":"F16","shape":[1],"data_offsets":[20,22]},)"
        R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[22,24]},)"
        R"("i8":{"dtype":"I8","shape":[1],"data_offsets":[24,25]},)"
        R"("bool":{"dtype":"BOOL","shape":[3],"data_offsets":[25,28]},)"
        R"("i32":{"dtype":"I32","shape":[1],"data_offsets":[28,32]},)"
        R"("f64":{"dtype":"F64","shape":[],"data_offsets":[32,40]},)"
        R"("empty":{"dtype":"F32","shape":[0,3],"data_offsets":[40,40]},)"
        R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[40,42]}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string data = bytes_of({0x00, 0x00, 0x80, 0x3f,  0x00, 0x00, 0x00, 0xc0,   // f32 1.0, -2.0
                                 0xfe, 0xff, 0xff, 0xff,  0xff, 0xff, 0xff, 0xff,   // i64 -2
                                 0x80, 0x3f, 0x40, 0xc0,                            // bf16 1.0, -3.0
                                 0x00, 0x3c,                                        // f16 1.0
                                 0x07, 0xff,                                        // u8 7, 255
                                 0xfb,                                              // i8 -5
                                 0x01, 0x00, 0x01,                                  // bool
                                 0x39, 0x30, 0x00, 0x00,                            // i32 12345
                                 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40,    // f64 2.5
                                 0x2e, 0xfb});                                      // i16 -1234
    std::string path = write_raw(dir / "hand.safetensors", header, data);
    st::File file(path);
    CHECK((file.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"note", "hand made"}}));
    CHECK(file.tensors().size() == 11);
    CHECK(file.read("f32").equal(at::tensor({1.0f, -2.0f})));
    CHECK(file.read("i64").equal(at::tensor({int64_t{-2}})));
    at::Tensor bf16 = file.read("bf16");
    CHECK((bf16.scalar_type() == at::kBFloat16));
    CHECK(bf16.sizes() == at::IntArrayRef({2, 1}));
    CHECK(bf16.to(at::kFloat).flatten().equal(at::tensor({1.0f, -3.0f})));
    CHECK(file.read("f16").to(at::kFloat).equal(at::tensor({1.0f})));
    CHECK(file.read("u8").equal(at::tensor({7, 255}, at::kByte)));
    CHECK(file.read("i8").equal(at::tensor({-5}, at::kChar)));
    CHECK(file.read("bool").equal(at::tensor({1, 0, 1}, at::kByte).to(at::kBool)));
    CHECK(file.read("i32").equal(at::tensor({12345}, at::kInt)));
    at::Tensor scalar = file.read("f64");
    CHECK(scalar.dim() == 0);
    CHECK(scalar.item<double>() == 2.5);
    CHECK(file.read("empty").sizes() == at::IntArrayRef({0, 3}));
    CHECK(file.read("i16").equal(at::tensor({-1234}, at::kShort)));
    CHECK(file.info("bf16").begin == 16);
    CHECK(titan::test::has(titan::test::error_of([&] { file.read("nope"); }), path));
  }

  TEST_CASE(
      "the writer follows the spec: aligned padded header, contiguous offsets, metadata, and round-trips exactly") {
    fs::path dir = titan::test::temp_dir("safetensors_round_trip");
    torch::manual_seed(1);
    std::map<std::string, at::Tensor> tensors = {
        {"a.f32", at::randn({3, 5})},
        {"b.bf16", at::randn({4}).to(at::kBFloat16)},
        {"c.f16", at::randn({2, 2, 2}).to(at::kHalf)},
        {"d.f64", at::randn({1}, at::kDouble)},
        {"e.i64", at::randint(-1000, 1000, {6}, at::kLong)},
        {"f.i32", at::randint(-1000, 1000, {2, 3}, at::kInt)},
        {"g.i8", at::randint(-100, 100, {5}, at::kChar)},
        {"h.u8", at::randint(0, 255, {7}, at::kByte)},
        {"i.bool", at::randint(0, 2, {9}, at::kLong).to(at::kBool)},
        {"j.scalar", at::tensor(3.5f).reshape({})},
        {"k.empty", at::empty({0, 4})},
        {"l.strided", at::randn({4, 6}).t()},  // not contiguous
        {"m.f8e4m3", at::randn({3, 4}).to(at::kFloat8_e4m3fn)},
        {"n.f8e5m2", at::randn({5}).to(at::kFloat8_e5m2)},
    };
    std::string path = (dir / "out.safetensors").string();
    st::save_file(path, tensors, {{"format", "pt"}});
    CHECK_FALSE(fs::exists(path + ".partial"));

    // Read back by the spec's rules, not by our reader.
    std::string bytes = titan::test::read_file(path);
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
    CHECK(length % 8 == 0);
    std::string header = bytes.substr(8, length);
    CHECK(header.front() == '{');
    auto json = nlohmann::json::parse(header);
    CHECK(json["__metadata__"]["format"] == "pt");
    uint64_t covered = 0;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& [name, entry] : json.items()) {
      if (name != "__metadata__") ranges.push_back({entry["data_offsets"][0], entry["data_offsets"][1]});
    }
    std::sort(ranges.begin(), ranges.end());
    for (auto [begin, end] : ranges) {
      CHECK(begin == covered);
      covered = end;
    }
    CHECK(covered == bytes.size() - 8 - length);
    CHECK(json["b.bf16"]["dtype"] == "BF16");
    CHECK(json["m.f8e4m3"]["dtype"] == "F8_E4M3");
    CHECK(json["n.f8e5m2"]["dtype"] == "F8_E5M2");
    CHECK(json["a.f32"]["shape"] == nlohmann::json::array({3, 5}));
    auto offsets = json["a.f32"]["data_offsets"];
    float first = 0;
    std::memcpy(&first, bytes.data() + 8 + length + offsets[0].get<uint64_t>(), 4);
    CHECK(first == tensors["a.f32"][0][0].item<float>());

    st::File file(path);
    CHECK(file.tensors().size() == tensors.size());
    for (const auto& [name, tensor] : tensors) {
      CAPTURE(name);
      at::Tensor read = file.read(name);
      CHECK((read.scalar_type() == tensor.scalar_type()));
      // float8 has no comparison kernels on CPU: compare its bits.
      auto bits = [](const at::Tensor& t) { return at::isFloat8Type(t.scalar_type()) ? t.view(at::kByte) : t; };
      CHECK(bits(read).equal(bits(tensor)));
    }
  }

  TEST_CASE("the streaming writer takes tensors in header order and leaves no file when unfinished") {
    fs::path dir = titan::test::temp_dir("safetensors_writer");
    std::string path = (dir / "w.safetensors").string();
    {
      st::Writer writer(path, {{"x", at::kFloat, {2}}, {"y", at::kLong, {1}}});
      CHECK(titan::test::has(titan::test::error_of([&] { writer.add("y", at::zeros({1}, at::kLong)); }), "expected 'x'"));
      CHECK(titan::test::has(titan::test::error_of([&] { writer.add("x", at::zeros({3})); }), "header says F32 [2]"));
      writer.add("x", at::ones({2}));
      CHECK(titan::test::has(titan::test::error_of([&] { writer.finish(); }), "after 1 of 2"));
    }
    CHECK_FALSE(fs::exists(path));
    CHECK_FALSE(fs::exists(path + ".partial"));
    CHECK(titan::test::has(titan::test::error_of([&] { st::Writer(path, {{"a", at::kFloat, {1}}, {"a", at::kFloat, {1}}}); }),
                   "repeated"));
    CHECK(titan::test::has(titan::test::error_of([&] { st::save_file(path, {{"c", at::zeros({1}, at::kComplexFloat)}}); }),
                   "no dtype"));
  }

  TEST_CASE("every broken rule is refused with an error naming the file") {
    fs::path dir = titan::test::temp_dir("safetensors_errors");
    const std::string ok = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    REQUIRE(one_tensor_error(dir, "valid", ok) == "<no error>");
    struct Case {
      const char* what;
      std::string message;
      const char* expected;
    };
    auto raw_error = [&](const std::string& name, const std::string& bytes) {
      std::string path = (dir / name).string();
      std::ofstream(path, std::ios::binary) << bytes;
      return titan::test::error_of([&] { st::File file(path); });
    };
    std::vector<Case> cases = {
        {"short", raw_error("short.safetensors", "abc"), "too short"},
        {"header length", raw_error("long.safetensors", le64(1000) + "{}"), "header length 1000 exceeds"},
        {"huge header", raw_error("huge.safetensors", le64(200'000'000) + std::string(8, ' ')), "header length"},
        {"bad json", raw_error("badjson.safetensors", le64(5) + "{\"a\":"), "not valid JSON"},
        {"not object", raw_error("array.safetensors", le64(2) + "[]"), "must begin with '{'"},
        {"unknown dtype",
         one_tensor_error(dir, "dtype", R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})"), "unknown dtype"},
        {"unsupported dtype",
         one_tensor_error(dir, "f4", R"({"dtype":"F4","shape":[4],"data_offsets":[0,2]})"), "not supported"},
        {"shape vs bytes",
         one_tensor_error(dir, "mismatch", R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
         "needs 12 bytes"},
        {"out of range",
         one_tensor_error(dir, "range", R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"),
         "run past the data buffer"},
        {"reversed offsets",
         one_tensor_error(dir, "reversed", R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), "end before"},
        {"negative shape",
         one_tensor_error(dir, "negative", R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
         "non-negative"},
        {"missing key", one_tensor_error(dir, "missing", R"({"dtype":"F32","shape":[2]})"), "missing \"data_offsets\""},
        {"trailing bytes", one_tensor_error(dir, "trailing", ok, std::string(12, '\0')), "cover only 8"},
        {"bad metadata",
         raw_error("meta.safetensors", le64(25) + R"({"__metadata__":{"a":1}})" + " "), "must be a string"},
    };
    std::string two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)";
    cases.push_back({"overlap",
                     titan::test::error_of([&] {
                       st::File f(write_raw(dir / "overlap.safetensors",
                                            two + R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                            std::string(12, '\0')));
                     }),
                     "overlap"});
    cases.push_back({"hole",
                     titan::test::error_of([&] {
                       st::File f(write_raw(dir / "hole.safetensors",
                                            two + R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                            std::string(16, '\0')));
                     }),
                     "belong to no tensor"});
    cases.push_back({"missing file", titan::test::error_of([&] { st::File f((dir / "absent.safetensors").string()); }),
                     "cannot open"});
    for (const auto& c : cases) {
      CAPTURE(c.what);
      CAPTURE(c.message);
      CHECK(titan::test::has(c.message, "safetensors file '" + dir.string()));
      CHECK(titan::test::has(c.message, c.expected));
    }
    std::string bools = write_raw(dir / "bool.safetensors",
                                  R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", bytes_of({1, 2}));
    st::File file(bools);
    CHECK(titan::test::has(titan::test::error_of([&] { file.read("b"); }), "neither 0 nor 1"));
  }

  TEST_CASE("Hugging Face folders: one file, shards named by model.safetensors.index.json, and their errors") {
    fs::path single = titan::test::temp_dir("safetensors_hf_single");
    st::save_file((single / "model.safetensors").string(), {{"a", at::ones({2})}, {"b", at::zeros({3})}});
    CHECK(st::is_hf_folder(single.string()));
    st::Folder one(single.string());
    CHECK(one.names() == std::vector<std::string>{"a", "b"});
    CHECK(one.read("b").equal(at::zeros({3})));

    fs::path sharded = titan::test::temp_dir("safetensors_hf_sharded");
    st::save_file((sharded / "model-00001-of-00002.safetensors").string(), {{"a", at::ones({2})}});
    st::save_file((sharded / "model-00002-of-00002.safetensors").string(),
                  {{"b", at::full({3}, 2.0)}, {"unlisted", at::ones({1})}});
    titan::test::write_file(sharded / "model.safetensors.index.json",
                            R"({"metadata": {"total_size": 20}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                "b": "model-00002-of-00002.safetensors"}})");
    st::Folder shards(sharded.string());
    CHECK(shards.names() == std::vector<std::string>{"a", "b"});  // the index decides
    CHECK(shards.read("b").equal(at::full({3}, 2.0)));
    CHECK(titan::test::has(shards.file_of("a"), "model-00001-of-00002.safetensors"));
    CHECK(titan::test::has(titan::test::error_of([&] { shards.info("c"); }), "has no tensor 'c'"));

    titan::test::write_file(sharded / "model.safetensors.index.json",
                            R"({"weight_map": {"a": "model-00002-of-00002.safetensors"}})");
    CHECK(titan::test::has(titan::test::error_of([&] { st::Folder f(sharded.string()); }), "which has no such tensor"));
    titan::test::write_file(sharded / "model.safetensors.index.json", R"({"weight_map": {"a": "gone.safetensors"}})");
    CHECK(titan::test::has(titan::test::error_of([&] { st::Folder f(sharded.string()); }), "gone.safetensors"));
    for (const char* outside : {"../model-00001-of-00002.safetensors", "/tmp/x.safetensors", "sub/x.safetensors"}) {
      titan::test::write_file(sharded / "model.safetensors.index.json",
                              std::string(R"({"weight_map": {"a": ")") + outside + R"("}})");
      CHECK_MESSAGE(titan::test::has(titan::test::error_of([&] { st::Folder f(sharded.string()); }), "must be a file name in the folder"),
                    outside);
    }
    titan::test::write_file(sharded / "model.safetensors.index.json", R"({"weights": {}})");
    CHECK(titan::test::has(titan::test::error_of([&] { st::Folder f(sharded.string()); }), "no \"weight_map\""));

    fs::path twice = titan::test::temp_dir("safetensors_hf_twice");
    st::save_file((twice / "x.safetensors").string(), {{"a", at::ones({1})}});
    st::save_file((twice / "y.safetensors").string(), {{"a", at::ones({1})}});
    CHECK(titan::test::has(titan::test::error_of([&] { st::Folder f(twice.string()); }), "is in both"));

    fs::path empty = titan::test::temp_dir("safetensors_hf_empty");
    CHECK_FALSE(st::is_hf_folder(empty.string()));
    CHECK(titan::test::has(titan::test::error_of([&] { st::Folder f(empty.string()); }), "no *.safetensors"));
  }
}
