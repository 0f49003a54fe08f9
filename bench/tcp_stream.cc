// tcp_stream: how fast this host's loopback TCP streams a ring allreduce's bytes with nothing else to do, as a
// reference beside the allreduce benchmarks (docs/performance.md, "The loopback's streaming rate").
//
// P processes (forked here) in a ring over 127.0.0.1, TCP_NODELAY. For each size n, every rank streams the
// ring allreduce's share, 2(P-1)/P * n bytes, to its right neighbour while reading as much from its left,
// through one n-byte buffer (in place, as the peers' tables are). Nothing is reduced and no step waits for
// another. It is not a strict bound: nothing limits how far a stream runs ahead, and an allreduce's own flow
// control, which keeps fewer bytes in flight and so in cache, can beat it at some sizes. Four ways of streaming
// are timed per size, each in two rounds, and the fastest counts: one thread with non-blocking calls and poll
// (Chorus's way) or a sending and a receiving thread with blocking calls, each with writes of 127.5 KiB
// (Chorus's loopback chunk) or 1 MiB.
//
// usage: tcp_stream -n P [-b 64K] [-e 256M] [-f 2] [-B bytes per timing, default 256M]
// Output: the peers' single-group table (size count type redop time algbw busbw #wrong iters), time per
// allreduce's share in us, then the fastest way's name; a comment line after each row gives every way's busbw.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Way {
  const char* name;
  bool threads;
  size_t write;
};
constexpr Way kWays[] = {{"poll-127.5K", false, 130560}, {"poll-1M", false, 1 << 20},
                         {"threads-127.5K", true, 130560}, {"threads-1M", true, 1 << 20}};
constexpr int kNumWays = sizeof kWays / sizeof kWays[0];
constexpr int kRounds = 2;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcp_stream: %s: %s\n", what, std::strerror(errno));
  _exit(1);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool parseSize(const char* s, size_t& out) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) return false;
  if (*end == 'K') v <<= 10, ++end;
  else if (*end == 'M') v <<= 20, ++end;
  else if (*end == 'G') v <<= 30, ++end;
  if (*end != '\0' || v == 0) return false;
  out = v;
  return true;
}

// Moves `total` bytes each way through buf (n bytes, wrapping), `write` bytes per call at most.
class Stream {
 public:
  Stream(int out, int in, uint8_t* buf, size_t n) : out_(out), in_(in), buf_(buf), n_(n) {}

  void run(const Way& w, size_t total) {
    if (w.threads) {
      std::thread sender([&] { blocking(true, w.write, total); });
      blocking(false, w.write, total);
      sender.join();
    } else {
      polling(w.write, total);
    }
  }

 private:
  // The next piece of the stream at `done` bytes: it ends at the buffer's end, the write size or the total.
  size_t piece(size_t done, size_t write, size_t total) const {
    size_t off = done % n_;
    return std::min({n_ - off, write, total - done});
  }
  ssize_t move(bool send, size_t done, size_t len, int flags) {
    uint8_t* p = buf_ + done % n_;
    return send ? ::send(out_, p, len, flags | MSG_NOSIGNAL) : ::recv(in_, p, len, flags);
  }
  void blocking(bool send, size_t write, size_t total) {
    for (size_t done = 0; done < total;) {
      ssize_t r = move(send, done, piece(done, write, total), 0);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        die(send ? "send" : "recv");
      }
      done += static_cast<size_t>(r);
    }
  }
  void polling(size_t write, size_t total) {
    size_t sent = 0, got = 0;
    while (sent < total || got < total) {
      bool moved = false;
      if (sent < total) moved |= step(true, sent, write, total);
      if (got < total) moved |= step(false, got, write, total);
      if (moved) continue;
      pollfd fds[2] = {{out_, static_cast<short>(sent < total ? POLLOUT : 0), 0},
                       {in_, static_cast<short>(got < total ? POLLIN : 0), 0}};
      if (::poll(fds, 2, 1000) < 0 && errno != EINTR) die("poll");
    }
  }
  bool step(bool send, size_t& done, size_t write, size_t total) {
    ssize_t r = move(send, done, piece(done, write, total), MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      return true;
    }
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) die(send ? "send" : "recv");
    return false;
  }

  int out_, in_;
  uint8_t* buf_;
  size_t n_;
};

void sendByte(int fd) {
  char c = 1;
  if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) die("barrier send");
}
void recvByte(int fd) {
  char c;
  if (::recv(fd, &c, 1, MSG_WAITALL) != 1) die("barrier recv");
}

// Two trips of a token around the ring: nobody leaves before everyone has arrived.
void barrier(int rank, int out, int in) {
  for (int trip = 0; trip < 2; ++trip) {
    if (rank == 0) {
      sendByte(out);
      recvByte(in);
    } else {
      recvByte(in);
      sendByte(out);
    }
  }
}

// A ring allreduce's bytes per rank for n bytes, and how many times a timing streams them to cover `budget`.
size_t shareOf(size_t n, int nranks) { return 2 * size_t(nranks - 1) * n / size_t(nranks); }
size_t itersFor(size_t n, int nranks, size_t budget) { return std::max<size_t>(1, budget / shareOf(n, nranks)); }

struct Record {
  int size, way, round;
  double seconds;
};

void rankMain(int rank, int nranks, int listener, int rightPort, const std::vector<size_t>& sizes, size_t budget,
              int report) {
  int out = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(rightPort));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  int in = ::accept(listener, nullptr, nullptr);
  if (in < 0) die("accept");
  setsockopt(in, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::close(listener);

  std::vector<uint8_t> buf(sizes.back(), 1);
  for (size_t si = 0; si < sizes.size(); ++si) {
    size_t n = sizes[si];
    const size_t share = shareOf(n, nranks), iters = itersFor(n, nranks, budget);
    Stream stream(out, in, buf.data(), n);
    for (int round = 0; round < kRounds; ++round) {
      for (int k = 0; k < kNumWays; ++k) {
        int way = round % 2 == 0 ? k : kNumWays - 1 - k;
        barrier(rank, out, in);
        double t0 = now();
        stream.run(kWays[way], share * iters);
        Record r{static_cast<int>(si), way, round, (now() - t0) / static_cast<double>(iters)};
        if (::write(report, &r, sizeof r) != static_cast<ssize_t>(sizeof r)) die("report");
      }
    }
  }
  barrier(rank, out, in);
}

int usage() {
  std::fprintf(stderr, "usage: tcp_stream -n ranks [-b minbytes] [-e maxbytes] [-f factor] [-B bytes per timing]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int nranks = 0;
  size_t minBytes = 64 << 10, maxBytes = 256 << 20, factor = 2, budget = 256 << 20;
  int c;
  while ((c = getopt(argc, argv, "n:b:e:f:B:")) != -1) {
    bool ok = true;
    switch (c) {
      case 'n': nranks = std::atoi(optarg); break;
      case 'b': ok = parseSize(optarg, minBytes); break;
      case 'e': ok = parseSize(optarg, maxBytes); break;
      case 'f': ok = parseSize(optarg, factor) && factor >= 2; break;
      case 'B': ok = parseSize(optarg, budget); break;
      default: return usage();
    }
    if (!ok) return usage();
  }
  if (nranks < 2 || nranks > 64 || minBytes > maxBytes) return usage();
  std::vector<size_t> sizes;
  for (size_t s = minBytes; s <= maxBytes; s *= factor) sizes.push_back(s);

  std::vector<int> listeners(nranks);
  std::vector<int> ports(nranks);
  for (int r = 0; r < nranks; ++r) {
    listeners[r] = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listeners[r], reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listeners[r], 1) != 0 ||
        ::getsockname(listeners[r], reinterpret_cast<sockaddr*>(&a), &len) != 0)
      die("listen");
    ports[r] = ntohs(a.sin_port);
  }
  int report[2];
  if (::pipe(report) != 0) die("pipe");
  std::vector<pid_t> kids;
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      ::close(report[0]);
      for (int o = 0; o < nranks; ++o)
        if (o != r) ::close(listeners[o]);
      alarm(1800);  // bounded, whatever happens to a peer
      rankMain(r, nranks, listeners[r], ports[(r + 1) % nranks], sizes, budget, report[1]);
      _exit(0);
    }
    kids.push_back(pid);
  }
  ::close(report[1]);
  for (int l : listeners) ::close(l);

  // seconds[size][way][round]: the slowest rank's time per allreduce-equivalent.
  std::vector<double> worst(sizes.size() * kNumWays * kRounds, 0.0);
  Record rec;
  size_t records = 0;
  while (::read(report[0], &rec, sizeof rec) == static_cast<ssize_t>(sizeof rec)) {
    double& w = worst[(static_cast<size_t>(rec.size) * kNumWays + rec.way) * kRounds + rec.round];
    w = std::max(w, rec.seconds);
    ++records;
  }
  bool failed = false;
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  if (failed || records != worst.size() * nranks) {
    std::fprintf(stderr, "tcp_stream: a rank failed\n");
    return 1;
  }

  std::printf("# peer: tcp-stream (the loopback streaming a ring allreduce's bytes; nothing reduced)\n");
  std::printf("# nranks %d  ways: fastest of", nranks);
  for (const Way& w : kWays) std::printf(" %s", w.name);
  std::printf(", %d rounds each\n", kRounds);
  std::printf("# %10s  %12s  %8s  %6s  %9s  %7s  %7s  %6s  %6s  %s\n", "size", "count", "type", "redop", "time",
              "algbw", "busbw", "#wrong", "iters", "fastest");
  for (size_t si = 0; si < sizes.size(); ++si) {
    double best = 0;
    int bestWay = 0;
    for (int k = 0; k < kNumWays; ++k)
      for (int round = 0; round < kRounds; ++round) {
        double t = worst[(si * kNumWays + k) * kRounds + round];
        if (best == 0 || t < best) best = t, bestWay = k;
      }
    size_t n = sizes[si];
    double algbw = static_cast<double>(n) / best / 1e9;
    double busbw = algbw * 2.0 * (nranks - 1) / nranks;
    std::printf(" %11zu  %12zu  %8s  %6s  %9.1f  %7.2f  %7.2f  %6s  %6zu  %s\n", n, n / 4, "float", "sum",
                best * 1e6, algbw, busbw, "-", itersFor(n, nranks, budget), kWays[bestWay].name);
    std::printf("#   busbw by way, best of its rounds:");
    for (int k = 0; k < kNumWays; ++k) {
      double t = *std::min_element(&worst[(si * kNumWays + k) * kRounds], &worst[(si * kNumWays + k + 1) * kRounds]);
      std::printf(" %s %.2f", kWays[k].name, busbw * best / t);
    }
    std::printf("\n");
  }
  return 0;
}
