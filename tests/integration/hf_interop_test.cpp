// Hugging Face interop end to end with the `titan` binary: a dcp checkpoint
// exported to safetensors (HF names, q/k rows permuted by HF's definition,
// config.json, shards), imported back exactly, and used as
// checkpoint.initial_load_path (HF folder or step folder, one process or
// FSDP x2) - the model then equals the trained one bit for bit. Bad inputs
// end in one error naming the file and tensor.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <torch/csrc/jit/serialization/pickle.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "titan/safetensors.hpp"

namespace {

namespace fs = std::filesystem;
namespace st = titan::safetensors;
using titan::test::run_command;
using Tensors = std::map<std::string, at::Tensor>;

// The tiny GQA Llama of these tests: dim 64, 4 heads of 16, 2 kv heads.
const std::string kSets =
    " --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4 --set model.n_kv_heads=2"
    " --set model.max_seq_len=64 --set training.seq_len=32 --set training.threads=1"
    " --set lr_scheduler.warmup_steps=2 --set metrics.log_freq=1 --set checkpoint.keep_latest_k=0";

std::string titan_cmd(const std::string& args) {
  return "cd " + titan::test::source_dir() + " && timeout 300 " + titan::test::titan_binary() + " " + args;
}

std::string train_args(const fs::path& dump, const std::string& extra) {
  return "train configs/llama3_debugmodel.yaml" + kSets + " --set job.dump_folder=" + dump.string() +
         " --set debug.save_final_model=" + (dump / "final.pt").string() + extra;
}

// lr 0 for one step: AdamW then changes nothing (decay factor 1 - 0 * wd),
// so the final model is the loaded one.
const std::string kLoadOnly = " --set optimizer.lr=0 --set training.steps=1 --set training.local_batch_size=2";

Tensors final_model(const fs::path& dump) {
  std::string bytes = titan::test::read_file(dump / "final.pt");
  auto dict = c10::impl::toTypedDict<std::string, at::Tensor>(
      torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict());
  Tensors out;
  for (const auto& item : dict) out[item.key()] = item.value();
  return out;
}

// HF's convert_llama_weights_to_hf.py permute, written from its definition.
at::Tensor hf_permute(const at::Tensor& w, int64_t heads) {
  return w.view({heads, w.size(0) / heads / 2, 2, w.size(1)}).transpose(1, 2).reshape(w.sizes());
}

std::string hf_name_of(const std::string& titan) {
  static const std::map<std::string, std::string> block = {
      {"attention.wq.weight", "self_attn.q_proj.weight"}, {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"}, {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"}, {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},   {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  if (titan == "tok_embeddings.weight") return "model.embed_tokens.weight";
  if (titan == "norm.weight") return "model.norm.weight";
  if (titan == "output.weight") return "lm_head.weight";
  size_t dot = titan.find('.', 7);  // "layers.N."
  return "model." + titan.substr(0, dot + 1) + block.at(titan.substr(dot + 1));
}

// The HF tensors expected for a Titan state dict.
Tensors expected_hf(const Tensors& titan) {
  Tensors out;
  for (const auto& [name, value] : titan) {
    at::Tensor hf = value;
    if (name.find("attention.wq") != std::string::npos) hf = hf_permute(value, 4);
    if (name.find("attention.wk") != std::string::npos) hf = hf_permute(value, 2);
    out[hf_name_of(name)] = hf;
  }
  return out;
}

void check_same(const Tensors& got, const Tensors& expected) {
  REQUIRE(got.size() == expected.size());
  for (const auto& [name, value] : expected) {
    CAPTURE(name);
    REQUIRE(got.count(name));
    CHECK(got.at(name).equal(value));
  }
}

Tensors read_folder(const fs::path& dir) {
  st::Folder folder(dir.string());
  Tensors out;
  for (const auto& name : folder.names()) out[name] = folder.read(name);
  return out;
}

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A 6-step run checkpointed at step 6, in a folder of its own per test
// case (CTest may run the cases in parallel).
struct Trained {
  fs::path root, step_dir;
  Tensors model;
};

Trained train_once(const std::string& name) {
  Trained t;
  t.root = titan::test::temp_dir("hf_interop_" + name);
  auto result = run_command(titan_cmd(train_args(t.root / "train",
                                                 " --set training.steps=6 --set training.local_batch_size=4"
                                                 " --set checkpoint.enable=true --set checkpoint.interval=6")));
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  t.step_dir = t.root / "train/checkpoint/step-6";
  REQUIRE(fs::exists(t.step_dir / "config.yaml"));
  t.model = final_model(t.root / "train");
  return t;
}

}  // namespace

TEST_SUITE("hf interop") {
  TEST_CASE("export writes HF names, HF's q/k permutation, config.json and shards, and bf16 on request") {
    const Trained t = train_once("export");
    fs::path out = t.root / "export_f32";
    fs::remove_all(out);
    auto result = run_command(titan_cmd("checkpoint export " + t.step_dir.string() + " --format safetensors --out " +
                                        out.string()));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK(fs::exists(out / "model.safetensors"));
    CHECK_FALSE(fs::exists(out / "model.safetensors.index.json"));
    check_same(read_folder(out), expected_hf(t.model));
    CHECK(st::File((out / "model.safetensors").string()).metadata().at("format") == "pt");
    auto config = nlohmann::json::parse(titan::test::read_file(out / "config.json"));
    CHECK(config["architectures"][0] == "LlamaForCausalLM");
    CHECK(config["hidden_size"] == 64);
    CHECK(config["num_key_value_heads"] == 2);
    CHECK(config["vocab_size"] == t.model.at("output.weight").size(0));
    CHECK(config["torch_dtype"] == "float32");

    fs::path shards = t.root / "export_sharded";
    fs::remove_all(shards);
    result = run_command(titan_cmd("checkpoint export " + t.step_dir.string() + " --out " + shards.string() +
                                   " --max-shard-bytes 200000"));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    auto index = nlohmann::json::parse(titan::test::read_file(shards / "model.safetensors.index.json"));
    std::set<std::string> files;
    for (const auto& [tensor, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
    CHECK(files.size() > 2);
    CHECK(files.count("model-00001-of-0000" + std::to_string(files.size()) + ".safetensors"));
    check_same(read_folder(shards), expected_hf(t.model));

    fs::path bf16 = t.root / "export_bf16";
    fs::remove_all(bf16);
    result = run_command(titan_cmd("checkpoint export " + t.step_dir.string() + " --out " + bf16.string() +
                                   " --dtype bfloat16"));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    Tensors expected = expected_hf(t.model);
    for (auto& [name, value] : expected) value = value.to(at::kBFloat16);
    check_same(read_folder(bf16), expected);
    CHECK(nlohmann::json::parse(titan::test::read_file(bf16 / "config.json"))["torch_dtype"] == "bfloat16");

    // An existing export is not overwritten.
    result = run_command(titan_cmd("checkpoint export " + t.step_dir.string() + " --out " + out.string()));
    CHECK(result.exit_code != 0);
    CHECK(mentions(result.output, "already holds safetensors files"));
  }

  TEST_CASE("export -> import -> export is exact, and initial_load_path starts from either folder") {
    const Trained t = train_once("round_trip");
    fs::path hf = t.root / "round_hf", imported = t.root / "round_imported/step-6", again = t.root / "round_again";
    for (const auto& dir : {hf, imported.parent_path(), again}) fs::remove_all(dir);
    auto result = run_command(titan_cmd("checkpoint export " + t.step_dir.string() + " --out " + hf.string()));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    result = run_command(titan_cmd("checkpoint import " + hf.string() + " --config " +
                                   (t.step_dir / "config.yaml").string() + " --out " + imported.string()));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK(mentions(result.output, "imported 21 tensors"));
    result = run_command(titan_cmd("checkpoint export " + imported.string() + " --out " + again.string()));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK(titan::test::read_file(again / "model.safetensors") == titan::test::read_file(hf / "model.safetensors"));

    // The HF folder as initial weights of a fresh one-process run.
    fs::path from_hf = t.root / "start_from_hf";
    fs::remove_all(from_hf);
    result =
        run_command(titan_cmd(train_args(from_hf, kLoadOnly + " --set checkpoint.initial_load_path=" + hf.string())));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK(mentions(result.output, "loaded initial weights: 21 tensors"));
    check_same(final_model(from_hf), t.model);

    // The imported step folder under FSDP on 2 ranks: each keeps its rows.
    fs::path from_step = t.root / "start_from_step_fsdp";
    fs::remove_all(from_step);
    result = run_command("cd " + titan::test::source_dir() + " && timeout 300 " + titan::test::titan_binary() +
                         " launch --nproc-per-node 2 --master-port 29731 --grace-period-s 5 -- " +
                         titan::test::titan_binary() + " " +
                         train_args(from_step, kLoadOnly +
                                                   " --set training.local_batch_size=1 --set "
                                                   "'plugins=[{name: fsdp}]' --set checkpoint.initial_load_path=" +
                                                   imported.string()));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    check_same(final_model(from_step), t.model);

    // Not a start point: a checkpoint to resume wins over initial_load_path.
    fs::path resumed = t.root / "resume_wins";
    fs::remove_all(resumed);
    fs::create_directories(resumed / "checkpoint");
    fs::copy(t.step_dir, resumed / "checkpoint/step-6", fs::copy_options::recursive);
    result = run_command(titan_cmd(train_args(resumed, " --set training.steps=7 --set checkpoint.enable=true"
                                                       " --set checkpoint.initial_load_path=" + hf.string())));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    CHECK_FALSE(mentions(result.output, "loaded initial weights"));
  }

  TEST_CASE("bad HF folders and paths end in one error naming the file and the tensor") {
    const Trained t = train_once("errors");
    fs::path hf = t.root / "bad_source";
    fs::remove_all(hf);
    auto result = run_command(titan_cmd("checkpoint export " + t.step_dir.string() + " --out " + hf.string()));
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    std::string config = (t.step_dir / "config.yaml").string();
    auto import_from = [&](const fs::path& dir, const std::string& extra = "") {
      fs::path out = t.root / "bad_out/step-1";
      fs::remove_all(out.parent_path());
      auto r = run_command(titan_cmd("checkpoint import " + dir.string() + " --config " + config + " --out " +
                                     out.string() + extra));
      CHECK(r.exit_code != 0);
      CHECK_FALSE(fs::exists(out));
      return r.output;
    };

    // Same shapes, different heads: config.json catches what shapes cannot.
    std::string output = import_from(hf, " --set model.n_heads=8 --set model.n_kv_heads=4");
    CHECK(mentions(output, "config.json' has num_attention_heads 4 but the configured model has 8"));

    Tensors tensors = read_folder(hf);
    fs::path broken = t.root / "bad_shape";
    fs::remove_all(broken);
    fs::create_directories(broken);
    tensors["model.layers.1.mlp.up_proj.weight"] = at::zeros({255, 64});
    st::save_file((broken / "model.safetensors").string(), tensors);
    output = import_from(broken);
    CHECK(mentions(output, (broken / "model.safetensors").string()));
    CHECK(mentions(output, "tensor 'model.layers.1.mlp.up_proj.weight' has shape [255, 64] but the model's "
                           "'layers.1.feed_forward.w3.weight' is [256, 64]"));

    tensors.erase("model.layers.1.mlp.up_proj.weight");
    fs::remove(broken / "model.safetensors");
    st::save_file((broken / "model.safetensors").string(), tensors);
    output = import_from(broken);
    CHECK(mentions(output, "has no tensor 'model.layers.1.mlp.up_proj.weight'"));

    std::ofstream(broken / "model.safetensors", std::ios::binary | std::ios::trunc) << "garbage!garbage!";
    output = import_from(broken);
    CHECK(mentions(output, "safetensors file '" + (broken / "model.safetensors").string()));

    fs::path run = t.root / "bad_initial";
    result = run_command(titan_cmd(train_args(run, kLoadOnly + " --set checkpoint.initial_load_path=" +
                                                       (t.root / "nowhere").string())));
    CHECK(result.exit_code != 0);
    CHECK(mentions(result.output,
                   "checkpoint.initial_load_path '" + (t.root / "nowhere").string() + "' is not a folder"));
    result =
        run_command(titan_cmd(train_args(run, kLoadOnly + " --set checkpoint.initial_load_path=" + broken.string())));
    CHECK(result.exit_code != 0);
    CHECK(mentions(result.output, (broken / "model.safetensors").string()));

    result = run_command(titan_cmd("checkpoint export " + (t.root / "nowhere").string() + " --out " +
                                   (t.root / "x").string()));
    CHECK(result.exit_code != 0);
    CHECK(mentions(result.output, "does not exist"));
    result = run_command(titan_cmd("checkpoint export " + t.step_dir.string() + " --out " + (t.root / "x").string() +
                                   " --dtype int8"));
    CHECK(result.exit_code != 0);
    CHECK(mentions(result.output, "--dtype: expected one of {float32, bfloat16, float16}, got 'int8'"));
  }
}
