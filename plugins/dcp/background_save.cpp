#include "background_save.h"

#include "titan/logging.hpp"

namespace titan::dcp {

BackgroundSave::~BackgroundSave() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& error) {
      spdlog::error("background checkpoint save failed: {}", error.what());
    }
  }
}

void BackgroundSave::start(std::function<void()> job) {
  wait();
  finished_ = false;
  thread_ = std::thread([this, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_ = true;
  });
}

void BackgroundSave::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void BackgroundSave::poll() {
  if (finished_) wait();
}

}  // namespace titan::dcp
