// What the error suites share: result codes by name, how long since a moment, and EXPECT_REFUSED (a call returned
// the code wanted and its last error text names every needle).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::test {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline const char* codeName(chorusResult_t rc) {
  switch (rc) {
    case chorusSuccess: return "chorusSuccess";
    case chorusUnhandledCudaError: return "chorusUnhandledCudaError";
    case chorusSystemError: return "chorusSystemError";
    case chorusInternalError: return "chorusInternalError";
    case chorusInvalidArgument: return "chorusInvalidArgument";
    case chorusInvalidUsage: return "chorusInvalidUsage";
    case chorusRemoteError: return "chorusRemoteError";
    case chorusInProgress: return "chorusInProgress";
    case chorusTimeout: return "chorusTimeout";
  }
  return "unknown";
}

// The call returned `want`, and the last error (of comm when given and live, and of this thread) contains
// every needle.
inline ::testing::AssertionResult Refused(chorusResult_t got, chorusResult_t want, chorusComm_t comm,
                                   std::initializer_list<std::string> needles) {
  std::string thread = chorusGetLastError(nullptr);
  if (got != want)
    return ::testing::AssertionFailure() << "returned " << codeName(got) << ", expected " << codeName(want)
                                         << "; last error: \"" << thread << "\"";
  std::vector<std::pair<std::string, std::string>> texts{{"chorusGetLastError(NULL)", thread}};
  if (comm != nullptr) texts.emplace_back("chorusGetLastError(comm)", chorusGetLastError(comm));
  for (auto& [where, text] : texts)
    for (const std::string& n : needles)
      if (text.find(n) == std::string::npos)
        return ::testing::AssertionFailure() << where << " = \"" << text << "\" does not contain \"" << n << "\"";
  return ::testing::AssertionSuccess();
}

}  // namespace chorus::test

// Refused() by its full name, so that the macro works in any namespace.
#define EXPECT_REFUSED(call, code, comm, ...) \
  EXPECT_TRUE(::chorus::test::Refused((call), (code), (comm), {__VA_ARGS__})) << #call
#define EXPECT_OK(call) EXPECT_EQ((call), chorusSuccess) << #call << ": " << chorusGetLastError(nullptr)
#define ASSERT_OK(call) ASSERT_EQ((call), chorusSuccess) << #call << ": " << chorusGetLastError(nullptr)
