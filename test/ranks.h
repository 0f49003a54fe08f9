// In-process ranks: one thread per rank, each with its own communicator built from one unique id (as Gloo's
// tests do). Failures are collected and asserted on the main thread.
#pragma once

#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::test {

// Runs body(rank, comm) on nranks threads and returns every failure text ("" entries omitted). The
// communicators are destroyed after body returns (unless body set comm to nullptr).
inline std::vector<std::string> runRanks(int nranks, const std::function<void(int, chorusComm_t&)>& body) {
  setenv("CHORUS_SOCKET_IFNAME", "=lo", 0);  // in-process ranks: keep traffic on loopback unless told otherwise
  chorusUniqueId id;
  std::vector<std::string> errors;
  std::mutex mu;
  auto report = [&](std::string s) {
    std::lock_guard<std::mutex> g(mu);
    errors.push_back(std::move(s));
  };
  if (chorusGetUniqueId(&id) != chorusSuccess) return {std::string("chorusGetUniqueId: ") + chorusGetLastError(nullptr)};
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      chorusComm_t comm = nullptr;
      chorusResult_t rc = chorusCommInitRank(&comm, nranks, id, r);
      if (rc != chorusSuccess) {
        report("rank " + std::to_string(r) + " init: " + chorusGetLastError(nullptr));
        return;
      }
      try {
        body(r, comm);
      } catch (const std::exception& e) {
        report("rank " + std::to_string(r) + ": " + e.what());
      }
      if (comm != nullptr && chorusCommDestroy(comm) != chorusSuccess)
        report("rank " + std::to_string(r) + " destroy: " + chorusGetLastError(nullptr));
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Throws with the call's error text when rc is not chorusSuccess.
inline void check(chorusResult_t rc, chorusComm_t comm, const std::string& what) {
  if (rc != chorusSuccess)
    throw std::runtime_error(what + ": " + chorusGetErrorString(rc) + ": " + chorusGetLastError(comm));
}

}  // namespace chorus::test
