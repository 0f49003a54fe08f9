// chorusStream: collects completion and the first error of the work enqueued on it. Ordering is the
// communicator's job (lib/executor.h), not the stream's.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "chorus/chorus.h"

namespace chorus {
class Comm;
}

struct chorusStream {
  explicit chorusStream(chorus::Comm* c) : comm(c) {}
  chorus::Comm* comm;
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  chorusResult_t error = chorusSuccess;
  std::string message;

  void add();
  void finish(chorusResult_t rc, const std::string& msg);
  chorusResult_t waitAll(std::string* msg);
  chorusResult_t query(std::string* msg);
};
