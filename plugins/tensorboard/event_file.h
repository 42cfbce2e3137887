// TensorFlow event files by hand: CRC-32C, the TFRecord framing, and the few
// `tensorflow.Event` protobuf fields TensorBoard needs for scalar charts.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace titan::tensorboard {

// CRC-32C (Castagnoli), the checksum TFRecord uses.
uint32_t crc32c(const void* data, size_t size);
// TFRecord stores checksums masked, so that a CRC of data holding CRCs stays
// strong.
uint32_t masked_crc32c(const void* data, size_t size);

// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string frame_record(const std::string& data);

// Serialized Events: the file header ("brain.Event:2") and one step's scalars.
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);

// An event file opened on the first append; each record reaches the kernel
// before append() returns, so a crashed process loses no written step.
class EventFileWriter {
 public:
  explicit EventFileWriter(std::string folder) : folder_(std::move(folder)) {}
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void append(int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
  void flush();                                      // to the disk (fsync), for the end of a run
  const std::string& path() const { return path_; }  // empty until the first append

 private:
  void open();
  void write_record(const std::string& event);
  std::string folder_;
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace titan::tensorboard
