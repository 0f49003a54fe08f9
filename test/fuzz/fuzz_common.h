// What the libFuzzer targets share: how they run outside bytes through a parser. A parser may refuse its input
// with chorus::Error (that is its job); anything else — a crash, a sanitizer report, another exception, a hang —
// is a finding.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/base/error.h"

namespace chorus::fuzz {

template <typename F>
void refusedOrParsed(F&& parse) {
  try {
    parse();
  } catch (const chorus::Error&) {
  }
}

// A connected pair of stream sockets: `in` holds what was written to the other end, which is then closed.
struct Fed {
  int in = -1;
  Fed(const uint8_t* data, size_t size, int type = SOCK_STREAM) {
    int sv[2];
    if (socketpair(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return;
    in = sv[0];
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    size_t off = 0;
    while (off < size) {
      ssize_t w = ::send(sv[1], data + off, size - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::close(sv[1]);
  }
  ~Fed() {
    if (in >= 0) ::close(in);
  }
};

}  // namespace chorus::fuzz
