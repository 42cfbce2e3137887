// Each step's training windows loaded ahead on a background thread (reading,
// tokenizing and packing documents), so that the step only takes them: a
// bounded queue of a few steps. What a checkpoint saves is the position of
// the steps taken, not the loader's, which runs ahead of them.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "titan/data.hpp"

namespace titan {

class BatchPrefetcher {
 public:
  struct Step {
    std::vector<at::Tensor> windows;  // a [local_batch, seq + 1] batch per microbatch, in host memory
    int64_t global_labels = 0;        // that carry loss, in the step's whole global batch
    int64_t position = 0;             // the loader's after this step's batches
    nlohmann::json cursor;            // the loader's after this step's batches
  };

  // `depth` steps are loaded ahead at most. The thread starts at the first
  // next(), after a resume has set the position.
  BatchPrefetcher(TokenWindowLoader& loader, int64_t local_batch, int64_t microbatches, size_t depth = 2);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The next step's data. An error of the loader (a damaged shard, named in
  // its message) is thrown here, in the step that needed the data.
  Step next();
  // Windows consumed by the steps taken so far, and resuming at a position.
  int64_t position() const { return taken_; }
  void set_position(int64_t windows);
  // The loader's cursor after the steps taken so far, and resuming at one.
  const nlohmann::json& cursor() const { return taken_cursor_; }
  void seek(const nlohmann::json& cursor);

 private:
  void load_ahead();
  void stop();
  // Stops the thread and forgets what it loaded ahead (before the loader moves).
  void drop_loaded();

  TokenWindowLoader& loader_;
  const int64_t local_batch_, microbatches_;
  const size_t depth_;
  int64_t taken_;
  nlohmann::json taken_cursor_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Step> ready_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace titan
