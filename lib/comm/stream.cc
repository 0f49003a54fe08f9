#include "lib/comm/stream.h"

void chorusStream::add() {
  std::lock_guard<std::mutex> g(mu);
  ++pending;
}

void chorusStream::finish(chorusResult_t rc, const std::string& msg) {
  std::lock_guard<std::mutex> g(mu);
  if (rc != chorusSuccess && error == chorusSuccess) {
    error = rc;
    message = msg;
  }
  if (--pending == 0) cv.notify_all();
}

chorusResult_t chorusStream::waitAll(std::string* msg) {
  std::unique_lock<std::mutex> g(mu);
  cv.wait(g, [&] { return pending == 0; });
  *msg = message;
  return error;
}

chorusResult_t chorusStream::query(std::string* msg) {
  std::lock_guard<std::mutex> g(mu);
  *msg = message;
  if (error != chorusSuccess) return error;
  return pending == 0 ? chorusSuccess : chorusInProgress;
}
