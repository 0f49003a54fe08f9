// Helpers for tests that drive several in-process communicators from the test's own threads: scoped
// environment changes, creating/destroying one communicator per rank, and running a body on every rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "test/watchdog.h"

namespace chorus::test {

// Sets (value != nullptr) or unsets environment variables for one scope, restoring them afterwards.
class EnvGuard {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~EnvGuard() {
    for (auto& [name, old] : saved_) {
      if (old) setenv(name.c_str(), old->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Communicators of all n ranks, created on n threads and handed to the calling thread.
inline std::vector<chorusComm_t> makeComms(int n) {
  setenv("CHORUS_SOCKET_IFNAME", "=lo", 0);  // as runRanks: loopback unless told otherwise
  chorusUniqueId id;
  if (chorusGetUniqueId(&id) != chorusSuccess)
    throw std::runtime_error(std::string("chorusGetUniqueId: ") + chorusGetLastError(nullptr));
  std::vector<chorusComm_t> comms(static_cast<size_t>(n), nullptr);
  std::vector<std::string> errs(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      if (chorusCommInitRank(&comms[r], n, id, r) != chorusSuccess) errs[r] = chorusGetLastError(nullptr);
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r)
    if (!errs[r].empty()) throw std::runtime_error("init of rank " + std::to_string(r) + ": " + errs[r]);
  return comms;
}

inline void destroyAll(std::vector<chorusComm_t>& comms) {
  for (auto& c : comms)
    if (c) {
      EXPECT_EQ(chorusCommDestroy(c), chorusSuccess) << chorusGetLastError(nullptr);
      c = nullptr;
    }
}

// A live two-rank communicator shared by a suite's tests (derive the suite's fixture from it), for calls refused
// before they communicate: the test's own thread makes them on either rank's handle.
class TwoIdleRanks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { comms_ = makeComms(2); }
  static void TearDownTestSuite() { destroyAll(comms_); }
  chorusComm_t c0() const { return comms_[0]; }
  chorusComm_t c1() const { return comms_[1]; }
  inline static std::vector<chorusComm_t> comms_;
  Watchdog watchdog_;
  float a_[64] = {};
  float b_[64] = {};
};

// Runs fn(rank, comm) on one thread per communicator; returns the failure texts.
inline std::vector<std::string> onAll(const std::vector<chorusComm_t>& comms,
                                      const std::function<void(int, chorusComm_t)>& fn) {
  std::vector<std::string> errs;
  std::mutex mu;
  std::vector<std::thread> ts;
  for (size_t r = 0; r < comms.size(); ++r)
    ts.emplace_back([&, r] {
      try {
        fn(static_cast<int>(r), comms[r]);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(mu);
        errs.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  for (auto& t : ts) t.join();
  return errs;
}

}  // namespace chorus::test
