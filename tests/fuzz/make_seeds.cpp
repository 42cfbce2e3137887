// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
// with the project's own writers, so the seeds are what Titan really
// produces: dcp's shard writer and metadata JSON, the safetensors writer,
// the BPE trainer, the flight recorder's dump writer. Run once by hand:
//   scripts/fuzz.sh seeds   (builds with -DTITAN_FUZZ_SEEDS=ON and runs this)
// The config seeds are configs/*.yaml, copied by scripts/fuzz.sh.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "byte_level.hpp"
#include "checkpoint_metadata.h"
#include "dump_writer.h"
#include "record_buffer.h"
#include "shard_file.h"
#include "titan/safetensors.hpp"
#include "titan/tokenizer.hpp"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_seed(const fs::path& corpus, const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(corpus / target);
  std::ofstream out(corpus / target / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string with_nul(const std::string& a, const std::string& b) { return a + std::string(1, '\0') + b; }

void dcp_seeds(const fs::path& corpus, const fs::path& work) {
  namespace dcp = titan::dcp;
  // An FSDP-like layout on one file: a weight split in two row blocks, a
  // replicated bf16 vector, a scalar step and a per-rank RNG state.
  at::Tensor weight = at::arange(12, at::kFloat).reshape({4, 3});
  std::vector<dcp::Piece> pieces = {
      {"model.w", weight.narrow(0, 0, 2).contiguous(), {{0, 0}, {2, 3}}},
      {"model.w", weight.narrow(0, 2, 2).contiguous(), {{2, 0}, {2, 3}}},
      {"model.norm", at::ones({5}, at::kBFloat16), {{0}, {5}}},
      {"optim.step", at::full({}, 7, at::kLong), {{}, {}}},
      {"rank_local/rng", at::arange(8, at::kByte), {{0}, {8}}},
  };
  fs::create_directories(work);
  std::string path = (work / "shard-00000.bin").string();
  std::vector<dcp::ShardRecord> records = dcp::write_shard_file(path, "shard-00000.bin", pieces);
  dcp::CheckpointMetadata metadata;
  metadata.step = 20;
  metadata.world_size = 1;
  metadata.mesh = "dp_shard=1";
  metadata.values = {{"step", "20"}, {"data.position", "1234"}};
  int64_t bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    bytes += records[i].bytes;
    const std::string& name = pieces[i].name;
    const at::Tensor& tensor = pieces[i].tensor;
    if (name.rfind("rank_local/", 0) == 0) {
      auto& entry = metadata.rank_local[name.substr(11)][0];
      entry.dtype = tensor.scalar_type();
      entry.shape = tensor.sizes().vec();
      entry.shards.push_back(records[i]);
      continue;
    }
    auto& entry = metadata.tensors[name];
    entry.dtype = tensor.scalar_type();
    entry.shape = name == "model.w" ? std::vector<int64_t>{4, 3} : tensor.sizes().vec();
    entry.shards.push_back(records[i]);
  }
  metadata.files["shard-00000.bin"] = bytes;
  std::string shard = read_file(path);
  write_seed(corpus, "dcp_checkpoint", "fsdp_step", with_nul(dcp::to_json_text(metadata), shard));
  // Model only, as `titan checkpoint import` writes it.
  dcp::CheckpointMetadata model_only = metadata;
  model_only.model_only = true;
  model_only.tensors.erase("optim.step");
  model_only.rank_local.clear();
  write_seed(corpus, "dcp_checkpoint", "model_only", with_nul(dcp::to_json_text(model_only), shard));
  // Slightly broken: the shard file cut short (its size no longer matches).
  write_seed(corpus, "dcp_checkpoint", "truncated_shard",
             with_nul(dcp::to_json_text(metadata), shard.substr(0, shard.size() / 2)));
}

void safetensors_seeds(const fs::path& corpus, const fs::path& work) {
  namespace st = titan::safetensors;
  fs::create_directories(work);
  auto save = [&](const std::string& name, const std::map<std::string, at::Tensor>& tensors,
                  const std::map<std::string, std::string>& metadata) {
    fs::path path = work / (name + ".safetensors");
    st::save_file(path.string(), tensors, metadata);
    write_seed(corpus, "safetensors", name, read_file(path));
  };
  save("llama_like",
       {{"model.embed_tokens.weight", at::arange(12, at::kFloat).reshape({3, 4})},
        {"model.layers.0.input_layernorm.weight", at::ones({4}, at::kBFloat16)},
        {"model.norm.weight", at::ones({4}, at::kHalf)},
        {"lm_head.weight", at::arange(8, at::kDouble).reshape({2, 4})}},
       {{"format", "pt"}});
  save("integers_and_bool",
       {{"ids", at::arange(6, at::kLong)}, {"i32", at::arange(3, at::kInt)}, {"i16", at::arange(2, at::kShort)},
        {"i8", at::arange(4, at::kChar)}, {"u8", at::arange(4, at::kByte)}, {"mask", at::ones({3}, at::kBool)},
        {"scalar", at::full({}, 1.5, at::kFloat)}, {"empty", at::empty({0, 4}, at::kFloat)}},
       {});
  save("no_tensors", {}, {{"note", "metadata only"}});
  // The index of a sharded folder, for the index target's fixture folder.
  nlohmann::json index = {
      {"metadata", {{"total_size", 132}}},
      {"weight_map",
       {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
        {"model.norm.weight", "model-00001-of-00002.safetensors"},
        {"lm_head.weight", "model-00002-of-00002.safetensors"},
        {"mask", "model-00002-of-00002.safetensors"}}}};
  write_seed(corpus, "safetensors_index", "two_shards", index.dump(2));
  index["weight_map"]["missing.weight"] = "model-00003-of-00003.safetensors";
  write_seed(corpus, "safetensors_index", "names_a_missing_file", index.dump(2));
}

void tokenizer_seeds(const fs::path& corpus, const fs::path& work) {
  std::vector<std::string> documents = {
      "Once upon a time there was a little robot who loved to read stories.",
      "The robot read every story twice, then told it to the cat.",
      "Numbers like 12345 and 2024 and words like don't, it's, we're.",
      "\xc3\xa9t\xc3\xa9 \xe2\x80\x94 caf\xc3\xa9, na\xc3\xafve \xf0\x9f\x98\x80 emoji."};
  titan::BpeTrainingOptions options;
  options.vocab_size = 300;  // 256 bytes + 42 merges + BOS/EOS: a small file
  fs::create_directories(work);
  fs::path json_path = work / "tokenizer.json";
  titan::train_bpe_tokenizer(documents, options, json_path.string());
  std::string json_text = read_file(json_path);
  // Compact: the trainer indents; the fuzzer mutates less padding this way.
  nlohmann::json parsed = nlohmann::json::parse(json_text);
  write_seed(corpus, "hf_tokenizer", "trained_bpe", parsed.dump());
  write_seed(corpus, "hf_tokenizer", "trained_bpe_with_text", with_nul(parsed.dump(), documents[2]));
  nlohmann::json gpt2 = parsed;  // GPT-2 style: ByteLevel with its own regex, merges as pairs
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& merge : gpt2["model"]["merges"]) {
    if (!merge.is_string()) continue;
    std::string text = merge;
    size_t space = text.find(' ');
    pairs.push_back({text.substr(0, space), text.substr(space + 1)});
  }
  gpt2["model"]["merges"] = pairs;
  write_seed(corpus, "hf_tokenizer", "gpt2_style", gpt2.dump());

  // The same vocabulary as a tiktoken file: base64 token bytes and rank.
  static const char* kBase64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto base64 = [](const std::string& bytes) {
    std::string out;
    size_t i = 0;
    for (; i + 2 < bytes.size(); i += 3) {
      uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
      for (int s = 18; s >= 0; s -= 6) out += kBase64[(v >> s) & 63];
    }
    if (i + 1 == bytes.size()) {
      uint32_t v = uint8_t(bytes[i]) << 16;
      out += std::string{kBase64[(v >> 18) & 63], kBase64[(v >> 12) & 63], '=', '='};
    } else if (i + 2 == bytes.size()) {
      uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
      out += std::string{kBase64[(v >> 18) & 63], kBase64[(v >> 12) & 63], kBase64[(v >> 6) & 63], '='};
    }
    return out;
  };
  std::map<int, std::string> by_id;
  for (const auto& [token, id] : parsed["model"]["vocab"].items()) {
    if (auto bytes = titan::tokenizer::vocab_string_to_bytes(token)) by_id[id.get<int>()] = *bytes;
  }
  std::string tiktoken;
  int rank = 0;
  for (const auto& [id, bytes] : by_id) tiktoken += base64(bytes) + " " + std::to_string(rank++) + "\n";
  write_seed(corpus, "tiktoken", "trained_bpe", tiktoken);
  write_seed(corpus, "tiktoken", "trained_bpe_with_text", with_nul(tiktoken, documents[3]));

  // Pre-tokenized data: the documents' ids in each format token_data reads.
  std::unique_ptr<titan::Tokenizer> tokenizer = titan::load_tokenizer(json_path.string());
  std::vector<int32_t> ids;
  for (const auto& document : documents) {
    std::vector<int32_t> part = tokenizer->encode(document);
    ids.insert(ids.end(), part.begin(), part.end());
    ids.push_back(tokenizer->eos_id());
  }
  auto u16 = [&] {
    std::string out;
    for (int32_t id : ids) out += std::string{char(id & 0xff), char((id >> 8) & 0xff)};
    return out;
  };
  auto u32 = [&] {
    std::string out;
    for (int32_t id : ids) out += std::string{char(id & 0xff), char((id >> 8) & 0xff), char((id >> 16) & 0xff), char(0)};
    return out;
  };
  // The first byte picks the suffix (fuzz_token_data.cpp): 0 .bin, 1 .u16, 2 .u32, 3 .jsonl.
  std::string llmc(256 * 4, '\0');
  int32_t header[3] = {20240520, 1, static_cast<int32_t>(ids.size())};
  std::memcpy(llmc.data(), header, sizeof(header));
  write_seed(corpus, "token_data", "llmc_u16.bin", std::string(1, '\0') + llmc + u16());
  header[0] = 20240801;
  std::memcpy(llmc.data(), header, sizeof(header));
  write_seed(corpus, "token_data", "llmc_u32.bin", std::string(1, '\0') + llmc + u32());
  write_seed(corpus, "token_data", "nanogpt.bin", std::string(1, '\0') + u16());
  write_seed(corpus, "token_data", "raw.u16", std::string(1, '\1') + u16());
  write_seed(corpus, "token_data", "raw.u32", std::string(1, '\2') + u32());
  std::string jsonl;
  for (const auto& document : documents) jsonl += nlohmann::json({{"text", document}, {"id", 1}}).dump() + "\n";
  write_seed(corpus, "token_data", "stories.jsonl", std::string(1, '\3') + jsonl + "\n");
}

void flight_recorder_seeds(const fs::path& corpus, const fs::path& work) {
  namespace frr = titan::flight_recorder;
  // Two of three ranks dumped (rank 2 is missing); at seq 2 rank 1 issued
  // another op than rank 0; both still wait in their last all_reduce.
  auto snapshot_of = [](int rank) {
    frr::Snapshot snapshot;
    snapshot.capacity = 8;
    for (uint64_t seq = 0; seq < 4; ++seq) {
      frr::Record record;
      record.id = seq;
      record.event.sequence = seq;
      record.event.op = (seq == 2 && rank == 1) ? "all_gather" : "all_reduce";
      record.event.group = "dp_shard";
      record.event.group_ranks = {0, 1, 2};
      record.event.shapes = {{4, 8}};
      record.event.dtype = "Float";
      record.event.bytes = 128;
      record.event.call_site = "step 1 / fsdp layers." + std::to_string(seq);
      record.event.time_s = 100.0 + static_cast<double>(seq);
      record.start_s = record.event.time_s + 0.01;
      record.end_s = seq < 3 ? record.start_s + 0.02 : 0;
      record.state = seq < 3 ? frr::State::completed : frr::State::started;
      snapshot.records.push_back(record);
    }
    snapshot.total_recorded = 4;
    snapshot.groups.push_back({"dp_shard", {0, 1, 2}, 3, 3, 2});
    return snapshot;
  };
  fs::create_directories(work);
  std::string dumps[2];
  for (int rank = 0; rank < 2; ++rank) {
    frr::DumpInfo info{rank, 3, "watchdog", "collective all_reduce seq 3 on 'dp_shard' ran past 30 s"};
    dumps[rank] = read_file(frr::write_dump(work.string(), info, snapshot_of(rank)));
  }
  write_seed(corpus, "fr_dumps", "two_of_three_ranks", with_nul(dumps[0], dumps[1]));
  write_seed(corpus, "fr_dumps", "one_rank", dumps[0]);

  // Two pipeline stages through the recorder's own numbering: activations on
  // tag 12, gradients back on tag 13 and an all_reduce on the same group;
  // rank 1 posted one recv more than rank 0 sent and waits in it, and one
  // send more than rank 0 received.
  auto pipeline_stage = [](int rank) {
    frr::RecordBuffer buffer(64);
    uint64_t sequence = 0;
    double time = 100;
    auto issue = [&](const std::string& op, int microbatch, int tag, bool complete) {
      titan::CollectiveEvent event;
      event.sequence = sequence++;
      event.op = op;
      event.group = "pp/dp0";
      event.group_ranks = {0, 1};
      event.shapes = {{2, 8, 16}};
      event.dtype = "Float";
      event.bytes = 1024;
      event.call_site = "step 1 / pipeline " + op + " microbatch " + std::to_string(microbatch);
      event.time_s = time += 0.01;
      if (op == "send" || op == "recv") {
        event.peer = 1 - rank;
        event.tag = tag;
      }
      buffer.enqueue(event);
      buffer.start(event);
      event.time_s = time += 0.01;
      if (complete) buffer.finish(event, true);
    };
    for (int microbatch = 0; microbatch < 3; ++microbatch) issue(rank == 0 ? "send" : "recv", microbatch, 12, true);
    if (rank == 1) issue("recv", 3, 12, false);
    for (int microbatch = 0; microbatch < 2 + rank; ++microbatch) {
      issue(rank == 0 ? "recv" : "send", microbatch, 13, true);
    }
    issue("all_reduce", 0, 0, rank == 0);
    return buffer.snapshot();
  };
  std::string stages[2];
  for (int rank = 0; rank < 2; ++rank) {
    frr::DumpInfo info{rank, 2, "watchdog", "stuck: recv #3 from rank 0 (tag 12)"};
    stages[rank] = read_file(frr::write_dump(work.string(), info, pipeline_stage(rank)));
  }
  write_seed(corpus, "fr_dumps", "pipeline_unmatched_p2p", with_nul(stages[0], stages[1]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_seeds CORPUS_DIR WORK_DIR\n";
    return 2;
  }
  fs::path corpus = argv[1], work = argv[2];
  dcp_seeds(corpus, work / "dcp");
  safetensors_seeds(corpus, work / "safetensors");
  tokenizer_seeds(corpus, work / "tokenizer");
  flight_recorder_seeds(corpus, work / "fr");
  std::cout << "seeds written to " << corpus << "\n";
  return 0;
}
