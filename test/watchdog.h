// Bounds a test: if the scope that created it lasts more than `seconds` (a hang), runs onExpire (e.g. to kill
// child processes), reports which test hung, and ends the process so the suite fails instead of waiting forever.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace chorus::test {

class Watchdog {
 public:
  explicit Watchdog(double seconds = 20.0, std::function<void()> onExpire = {}) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "?";
    thread_ = std::thread([this, seconds, name, onExpire] {
      std::unique_lock<std::mutex> g(mu_);
      if (!cv_.wait_for(g, std::chrono::duration<double>(seconds), [&] { return done_; })) {
        std::fprintf(stderr, "\nWATCHDOG: %s took more than %.0f s (a hang); failing the whole run\n", name.c_str(),
                     seconds);
        if (onExpire) onExpire();
        std::fflush(stderr);
        _exit(1);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace chorus::test
