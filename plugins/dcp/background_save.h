// One save at a time on a background thread; its error is kept and
// rethrown by the next poll() or wait() on the training thread.
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <thread>

namespace titan::dcp {

class BackgroundSave {
 public:
  ~BackgroundSave();
  // Starts `job`; the previous one must have been waited for.
  void start(std::function<void()> job);
  // Joins the running job, if any, and rethrows its error.
  void wait();
  // Like wait(), but only if the job has already finished.
  void poll();

 private:
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::exception_ptr error_;
};

}  // namespace titan::dcp
