// The error every transport raises for a received message that is not the one this rank's call expects (Note
// [Message tags] in transports/transport.h): the two calls, or, when they are the same call, the two sizes.
#pragma once

#include <cstddef>
#include <string_view>

#include <fmt/format.h>

#include "lib/base/error.h"
#include "lib/base/ops.h"

namespace chorus::transport {

// `self` expected a message of `want` (wantLen bytes) from `peer`, which sent one of `got` (gotLen bytes).
inline Error mismatchedMessage(std::string_view self, std::string_view peer, const OpTag& want, size_t wantLen,
                               const OpTag& got, size_t gotLen) {
  if (got == want)
    return Error(chorusInvalidUsage, fmt::format("{} and {} disagree on the size of a message of {}: {} vs {} bytes",
                                                 self, peer, describe(got), wantLen, gotLen));
  return Error(chorusInvalidUsage, fmt::format("mismatched calls: {} called {} but {} called {}", self, describe(want),
                                               peer, describe(got)));
}

}  // namespace chorus::transport
