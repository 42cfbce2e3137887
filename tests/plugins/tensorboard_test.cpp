// The tensorboard plugin writes event files TensorBoard can read: checked by
// a reader written here from TensorFlow's record and Event formats, with a
// bitwise CRC-32C independent of the plugin's table-driven one.
#include "doctest_torch.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>

#include "test_support.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/registry.hpp"

namespace fs = std::filesystem;

namespace {

uint32_t bitwise_crc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;  // Castagnoli 0x1EDC6F41, reflected
  }
  return ~crc;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

template <class T>
T little_endian(const std::string& bytes, size_t at) {
  REQUIRE(at + sizeof(T) <= bytes.size());
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version;
  std::map<std::string, float> scalars;
};

// Protobuf fields of one message: (field number, wire type, varint or fixed
// bits, bytes).
struct Field {
  int number;
  int wire_type;
  uint64_t bits;
  std::string bytes;
};

std::vector<Field> fields_of(const std::string& message) {
  std::vector<Field> fields;
  size_t at = 0;
  auto varint = [&] {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(at < message.size());
      auto byte = static_cast<unsigned char>(message[at++]);
      value |= uint64_t(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
  };
  while (at < message.size()) {
    uint64_t key = varint();
    Field field{static_cast<int>(key >> 3), static_cast<int>(key & 7), 0, ""};
    if (field.wire_type == 0) {
      field.bits = varint();
    } else if (field.wire_type == 1) {
      field.bits = little_endian<uint64_t>(message, at);
      at += 8;
    } else if (field.wire_type == 5) {
      field.bits = little_endian<uint32_t>(message, at);
      at += 4;
    } else {
      REQUIRE(field.wire_type == 2);
      size_t length = varint();
      REQUIRE(at + length <= message.size());
      field.bytes = message.substr(at, length);
      at += length;
    }
    fields.push_back(field);
  }
  return fields;
}

Event decode_event(const std::string& data) {
  Event event;
  for (const Field& field : fields_of(data)) {
    if (field.number == 1) std::memcpy(&event.wall_time, &field.bits, 8);
    if (field.number == 2) event.step = static_cast<int64_t>(field.bits);
    if (field.number == 3) event.file_version = field.bytes;
    if (field.number != 5) continue;
    for (const Field& value : fields_of(field.bytes)) {  // Summary.value
      std::string tag;
      float simple_value = NAN;
      for (const Field& part : fields_of(value.bytes)) {
        if (part.number == 1) tag = part.bytes;
        if (part.number == 2) {
          REQUIRE(part.wire_type == 5);
          auto bits = static_cast<uint32_t>(part.bits);
          std::memcpy(&simple_value, &bits, 4);
        }
      }
      event.scalars[tag] = simple_value;
    }
  }
  return event;
}

// Every record of a TFRecord file, both masked CRCs checked.
std::vector<Event> read_events(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    std::string length_bytes = bytes.substr(at, 8);
    auto length = little_endian<uint64_t>(bytes, at);
    CHECK(little_endian<uint32_t>(bytes, at + 8) == masked(bitwise_crc32c(length_bytes)));
    REQUIRE(at + 12 + length + 4 <= bytes.size());
    std::string data = bytes.substr(at + 12, length);
    CHECK(little_endian<uint32_t>(bytes, at + 12 + length) == masked(bitwise_crc32c(data)));
    events.push_back(decode_event(data));
    at += 12 + length + 4;
  }
  return events;
}

std::vector<fs::path> event_files(const fs::path& folder) {
  std::vector<fs::path> files;
  if (!fs::exists(folder)) return files;
  for (const auto& entry : fs::directory_iterator(folder)) files.push_back(entry.path());
  return files;
}

std::unique_ptr<titan::MetricsSink> sink(const fs::path& dump_folder, int rank, bool all_ranks = false) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse(
      std::string("save_tb_folder: tb\nsave_for_all_ranks: ") + (all_ranks ? "true" : "false") + "\n", "test.yaml");
  context.dump_folder = dump_folder.string();
  context.rank = rank;
  context.world_size = 2;
  return titan::PluginRegistry::instance().create_metrics_sink("tensorboard", context);
}

}  // namespace

TEST_SUITE("tensorboard") {
  TEST_CASE(
      "tensorboard: the bitwise CRC-32C of the reader gives the known "
      "answer 0xE3069283 for 123456789") {
    CHECK(bitwise_crc32c("123456789") == 0xE3069283u);
    CHECK(bitwise_crc32c("") == 0u);
  }

  TEST_CASE(
      "tensorboard: rank 0 writes one CRC-checked record per step under "
      "TorchTitan's tags") {
    fs::path dir = titan::test::temp_dir("tensorboard_sink");
    auto writer = sink(dir, 0);
    CHECK(event_files(dir / "tb").empty());  // opened on the first write, so
                                             // `config check` leaves nothing
    double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    writer->write(10, {{"loss_metrics/global_avg_loss", 7.25},
                       {"grad_norm", 1.5},
                       {"lr", 3e-4},
                       {"throughput(tps)", 12345.0},
                       {"mfu(%)", 41.0},
                       {"memory/max_reserved(GiB)", 2.0},
                       {"a_key_added_later", -2.0}});
    writer->write(20, {{"loss_metrics/global_avg_loss", NAN}, {"grad_norm", INFINITY}});
    writer->write(30, {{"loss_metrics/global_avg_loss", 6.5}});

    // Each step reached the file before write() returned: a crash here loses
    // none.
    auto files = event_files(dir / "tb");
    REQUIRE(files.size() == 1);
    std::string name = files[0].filename().string();
    CHECK_MESSAGE(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.)" +
                                                    std::to_string(getpid()) + R"(\.\d+)")),
                  name);
    auto events = read_events(files[0]);
    REQUIRE(events.size() == 4);
    writer->flush();
    CHECK(read_events(files[0]).size() == 4);

    CHECK(events[0].file_version == "brain.Event:2");
    CHECK(events[0].step == 0);
    CHECK(events[0].wall_time >= std::floor(before));
    CHECK(events[0].wall_time < before + 60);

    CHECK(events[1].step == 10);
    CHECK(events[1].wall_time >= events[0].wall_time);
    CHECK(events[1].scalars == std::map<std::string, float>{{"loss_metrics/global_avg_loss", 7.25f},
                                                            {"grad_norm", 1.5f},
                                                            {"lr", 3e-4f},
                                                            {"throughput(tps)", 12345.0f},
                                                            {"mfu(%)", 41.0f},
                                                            {"memory/max_reserved(GiB)", 2.0f},
                                                            {"a_key_added_later", -2.0f}});
    // Non-finite values are written, not skipped: TensorBoard shows them.
    CHECK(events[2].step == 20);
    REQUIRE(events[2].scalars.size() == 2);
    CHECK(std::isnan(events[2].scalars["loss_metrics/global_avg_loss"]));
    CHECK(std::isinf(events[2].scalars["grad_norm"]));
    CHECK(events[3].step == 30);
    CHECK(events[3].scalars == std::map<std::string, float>{{"loss_metrics/global_avg_loss", 6.5f}});
  }

  TEST_CASE("tensorboard: ranks other than 0 write nothing, unless metrics.save_for_all_ranks: each its rank_<r>/") {
    fs::path dir = titan::test::temp_dir("tensorboard_rank1");
    auto writer = sink(dir, 1);
    writer->write(1, {{"loss_metrics/global_avg_loss", 1.0}});
    writer->flush();
    writer.reset();
    CHECK(!fs::exists(dir / "tb"));

    for (int rank : {0, 1}) {
      auto own = sink(dir, rank, /*all_ranks=*/true);
      own->write(1, {{"throughput(tps)", 100.0 + rank}});
      own.reset();
      auto files = event_files(dir / "tb" / ("rank_" + std::to_string(rank)));
      REQUIRE(files.size() == 1);
      CHECK(read_events(files[0]).back().scalars.at("throughput(tps)") == 100.0f + rank);
    }
    for (const auto& entry : event_files(dir / "tb")) CHECK_MESSAGE(fs::is_directory(entry), entry);  // no job-wide file
  }

  TEST_CASE(
      "tensorboard: titan train with metrics.enable_tensorboard logs the "
      "losses of metrics.jsonl, one record per logged step") {
    fs::path dir = titan::test::temp_dir("tensorboard_train");
    std::string yaml = R"(job: {dump_folder: DUMP}
model: {name: llama3, flavor: debugmodel, dim: 64, n_layers: 2, n_heads: 4, max_seq_len: 64,
        tokenizer_path: assets/tokenizer/stories_bpe.json}
optimizer: {name: AdamW, lr: 3.0e-3}
lr_scheduler: {warmup_steps: 2}
training: {local_batch_size: 2, seq_len: 32, steps: 6, threads: 1, dataset: stories}
metrics: {log_freq: 2}
checkpoint: {enable: false}
)";
    yaml.replace(yaml.find("DUMP"), 4, (dir / "out").string());
    titan::test::write_file(dir / "run.yaml", yaml);
    std::string titan = "cd " + titan::test::source_dir() + " && " + titan::test::titan_binary();

    auto check = titan::test::run_command(titan + " config check " + (dir / "run.yaml").string() +
                                          " --set metrics.enable_tensorboard=true");
    REQUIRE_MESSAGE(check.exit_code == 0, check.output);
    CHECK(!fs::exists(dir / "out" / "tb"));  // planning a run writes no event file

    auto result = titan::test::run_command(titan + " train " + (dir / "run.yaml").string() +
                                           " --set metrics.enable_tensorboard=true");
    REQUIRE_MESSAGE(result.exit_code == 0, result.output);
    auto files = event_files(dir / "out" / "tb");
    REQUIRE(files.size() == 1);
    auto events = read_events(files[0]);

    std::vector<nlohmann::json> lines;
    std::stringstream jsonl(titan::test::read_file(dir / "out" / "metrics.jsonl"));
    for (std::string line; std::getline(jsonl, line);) {
      if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
    }
    REQUIRE(lines.size() == 3);  // steps 2, 4, 6
    REQUIRE(events.size() == 1 + lines.size());
    CHECK(events[0].file_version == "brain.Event:2");
    for (size_t i = 0; i < lines.size(); ++i) {
      const Event& event = events[i + 1];
      CAPTURE(i);
      CHECK(event.step == lines[i]["step"].get<int64_t>());
      CHECK(event.scalars.at("loss_metrics/global_avg_loss") == static_cast<float>(lines[i]["loss_metrics/global_avg_loss"].get<double>()));
      CHECK(event.scalars.at("grad_norm") == static_cast<float>(lines[i]["grad_norm"].get<double>()));
      CHECK(event.scalars.at("lr") == static_cast<float>(lines[i]["lr"].get<double>()));
    }
  }

  TEST_CASE(
      "tensorboard: metrics.enable_<plugin> finds the sink by its kind; an unknown or non-sink plugin is "
      "refused naming the key and a switched-off sink's options are still checked") {
    fs::path dir = titan::test::temp_dir("tensorboard_switch");
    titan::test::write_file(dir / "run.yaml", R"(model: {name: llama3, flavor: debugmodel, tokenizer_path: assets/tokenizer/stories_bpe.json}
metrics: {log_freq: 2}
)");
    std::string check = "cd " + titan::test::source_dir() + " && " + titan::test::titan_binary() + " config check " +
                        (dir / "run.yaml").string();
    auto off = titan::test::run_command(check + " --set metrics.enable_tensorboard=false --set metrics.save_tb_folder=x");
    CHECK_MESSAGE(off.exit_code == 0, off.output);
    auto list = titan::test::run_command(check + " --set metrics.enable_tensorboard=false --set 'metrics.save_tb_folder=[a]'");
    CHECK(list.exit_code != 0);
    CHECK_MESSAGE(titan::test::has(list.output, "metrics.save_tb_folder: expected string"), list.output);
    auto unknown = titan::test::run_command(check + " --set metrics.enable_wandb=true");
    CHECK(unknown.exit_code != 0);
    CHECK_MESSAGE(titan::test::has(unknown.output, "metrics.enable_wandb: no metrics_sink plugin 'wandb' on the plugin path"),
                  unknown.output);
    CHECK(titan::test::run_command(check + " --set metrics.enable_wandb=false").exit_code == 0);
    auto not_sink = titan::test::run_command(check + " --set metrics.enable_fsdp=true");
    CHECK(not_sink.exit_code != 0);
    CHECK_MESSAGE(titan::test::has(not_sink.output, "metrics.enable_fsdp: plugin 'fsdp' provides parallelizer, not a metrics_sink"),
                  not_sink.output);
  }
}
