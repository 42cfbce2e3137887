// Event files as TensorFlow's RecordWriter and tensorboardX write them, so
// that TensorBoard reads them with no TensorFlow or protobuf in our build.
#include "event_file.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "titan/error.hpp"

namespace titan::tensorboard {

namespace {

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);  // 0x1EDC6F41 bit-reversed
    table[byte] = crc;
  }
  return table;
}

// Protobuf wire format, only what an Event with scalars needs.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

template <class T>
void put_little_endian(std::string& out, T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value,
              sizeof(T));  // every platform LibTorch supports here is little endian
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (uint64_t(field) << 3) | uint64_t(wire_type));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event fields 1 (wall_time, double) and 2 (step, int64).
std::string event_head(double wall_time, int64_t step) {
  std::string event;
  put_tag(event, 1, 1);
  put_little_endian(event, wall_time);
  put_tag(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));
  return event;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& data) {
  std::string record;
  std::string length;
  put_little_endian(length, static_cast<uint64_t>(data.size()));
  record += length;
  put_little_endian(record, masked_crc32c(length.data(), length.size()));
  record += data;
  put_little_endian(record, masked_crc32c(data.data(), data.size()));
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event = event_head(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string summary_value;
    put_bytes(summary_value, 1, tag);
    put_tag(summary_value, 2, 5);
    put_little_endian(summary_value, value);
    put_bytes(summary, 1, summary_value);
  }
  std::string event = event_head(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::open() {
  // The counter keeps two writers of one process in one second apart, as
  // tensorboardX's global uid does.
  static std::atomic<int> files_opened{0};
  std::error_code error;
  std::filesystem::create_directories(folder_, error);
  double wall_time = now_seconds();
  path_ = folder_ + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time)) + "." + hostname() + "." +
          std::to_string(getpid()) + "." + std::to_string(files_opened++);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) {
    throw Error("tensorboard: cannot create event file '" + path_ + "': " + std::strerror(errno) +
                " (check job.dump_folder and metrics.save_tb_folder)");
  }
  write_record(file_version_event(wall_time));
}

void EventFileWriter::write_record(const std::string& event) {
  std::string record = frame_record(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    throw Error("tensorboard: cannot write event file '" + path_ + "': " + std::strerror(errno));
  }
}

void EventFileWriter::append(int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  if (!file_) open();
  write_record(scalars_event(now_seconds(), step, scalars));
}

void EventFileWriter::flush() {
  if (!file_) return;
  std::fflush(file_);
  fsync(fileno(file_));
}

}  // namespace titan::tensorboard
