// Real processes for the tests that need them (a rank killed, stopped or exiting): this test binary re-executed as
// a worker (selfExe(), with CHORUS_RANK, CHORUS_NRANKS, CHORUS_ROOT and CHORUS_SECRET from rankEnv, or under
// chorusrun), each child in its own process group, dying with the test (PR_SET_PDEATHSIG), its output captured
// line by line, waited for with a deadline and killed at the end. Workers report on stdout with "@@KEY fields".
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace chorus::test {

inline int64_t monoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
inline double secondsSince(int64_t t0) { return double(monoNs() - t0) / 1e9; }

inline std::string selfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = '\0';
  return buf;
}


// One write per line, so lines of concurrent ranks never interleave.
inline void say(const char* fmt, ...) {
  char buf[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 2, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = std::min<size_t>(size_t(n), sizeof buf - 2);
  for (size_t i = 0; i < len; ++i)
    if (buf[i] == '\n') buf[i] = ' ';
  buf[len++] = '\n';
  ssize_t w = write(1, buf, len);
  (void)w;
}

inline int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Ends the worker without running static destructors (the library may still have a detached thread).
[[noreturn]] inline void finish(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

// =========================================================================================================
// Parent side: children with captured output, bounded waits, guaranteed cleanup

inline std::mutex gLiveMu;
inline std::vector<pid_t> gLive;  // process groups to kill if the watchdog fires

inline void killGroupNow(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
}

struct Line {
  int64_t at;  // monotonic ns of arrival
  std::string text;
};

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string partial;
  std::vector<Line> lines;
  bool exited = false;
  int status = 0;
  int64_t exitedAt = 0;

  std::string output() const {
    std::string s;
    for (const Line& l : lines) s += l.text + "\n";
    return s + partial;
  }
  // Fields after "@@key " of the first such line, or nullopt.
  std::optional<std::string> field(const std::string& key) const {
    for (const Line& l : lines) {
      size_t p = l.text.find("@@" + key + " ");
      if (p != std::string::npos) return l.text.substr(p + key.size() + 3);
    }
    return std::nullopt;
  }
  int count(const std::string& key) const {
    int n = 0;
    for (const Line& l : lines) n += l.text.find("@@" + key) != std::string::npos;
    return n;
  }
  int exitCode() const { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
};

class Procs {
 public:
  Procs() = default;
  Procs(const Procs&) = delete;
  ~Procs() { killAll(); }

  // Starts argv with the current environment plus `env` (NAME=value entries override). Returns its index.
  size_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      std::string s = *e;
      std::string name = s.substr(0, s.find('='));
      bool overridden = std::any_of(env.begin(), env.end(),
                                    [&](const std::string& o) { return o.substr(0, o.find('=')) == name; });
      if (!overridden) envs.push_back(s);
    }
    envs.insert(envs.end(), env.begin(), env.end());
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      dup2(p[1], 1);
      dup2(p[1], 2);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    setpgid(pid, pid);
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    Child c;
    c.pid = pid;
    c.fd = p[0];
    children_.push_back(std::move(c));
    std::lock_guard<std::mutex> g(gLiveMu);
    gLive.push_back(pid);
    return children_.size() - 1;
  }

  Child& operator[](size_t i) { return children_[i]; }
  size_t size() const { return children_.size(); }

  // Collects output and exits until pred() holds or `seconds` pass; returns pred().
  bool pumpUntil(const std::function<bool()>& pred, double seconds) {
    int64_t deadline = monoNs() + int64_t(seconds * 1e9);
    while (true) {
      reap();
      if (pred()) return true;
      int64_t left = deadline - monoNs();
      if (left <= 0) return false;
      std::vector<pollfd> pfds;
      std::vector<Child*> owners;
      for (auto& c : children_)
        if (c.fd >= 0) {
          pfds.push_back({c.fd, POLLIN, 0});
          owners.push_back(&c);
        }
      int timeout = int(std::min<int64_t>(left / 1000000 + 1, 20));
      if (pfds.empty()) {
        usleep(useconds_t(timeout) * 1000);
        continue;
      }
      if (poll(pfds.data(), pfds.size(), timeout) <= 0) continue;
      for (size_t i = 0; i < pfds.size(); ++i)
        if (pfds[i].revents) readSome(*owners[i]);
    }
  }
  bool waitAllExited(double seconds) {
    return pumpUntil([&] { return std::all_of(children_.begin(), children_.end(), [](const Child& c) {
                               return c.exited && c.fd < 0;
                             }); },
                     seconds);
  }
  std::string dump() const {
    std::string s;
    for (size_t i = 0; i < children_.size(); ++i)
      s += "---- child " + std::to_string(i) + " (pid " + std::to_string(children_[i].pid) + ", " +
           (children_[i].exited ? "exit " + std::to_string(children_[i].exitCode()) : std::string("running")) +
           ") ----\n" + children_[i].output();
    return s;
  }

  // SIGTERM (chorusrun forwards it to its ranks), then SIGKILL after a grace period; always waits.
  void killAll() {
    reap();
    bool any = false;
    for (auto& c : children_)
      if (!c.exited) {
        kill(-c.pid, SIGTERM);
        any = true;
      }
    if (any) pumpUntil([&] { return std::all_of(children_.begin(), children_.end(), [](const Child& c) {
                               return c.exited;
                             }); },
                       1.5);
    for (auto& c : children_) {
      if (!c.exited) {
        killGroupNow(c.pid);
        waitpid(c.pid, &c.status, 0);
        c.exited = true;
      } else if (c.fd >= 0) {
        kill(-c.pid, SIGKILL);  // leftovers in its group still hold its output open
      }
      if (c.fd >= 0) close(c.fd), c.fd = -1;
      std::lock_guard<std::mutex> g(gLiveMu);
      gLive.erase(std::remove(gLive.begin(), gLive.end(), c.pid), gLive.end());
    }
  }

 private:
  void readSome(Child& c) {
    char buf[65536];
    while (true) {
      ssize_t n = read(c.fd, buf, sizeof buf);
      if (n > 0) {
        c.partial.append(buf, size_t(n));
        size_t nl;
        while ((nl = c.partial.find('\n')) != std::string::npos) {
          c.lines.push_back({monoNs(), c.partial.substr(0, nl)});
          c.partial.erase(0, nl + 1);
        }
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(c.fd);
        c.fd = -1;
      }
      return;
    }
  }
  void reap() {
    for (auto& c : children_) {
      if (c.exited) continue;
      int st;
      if (waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.exited = true;
        c.status = st;
        c.exitedAt = monoNs();
      }
    }
  }

  std::vector<Child> children_;
};

// Kills every child still running: what a Watchdog does before it ends a hung test.
inline void killAllChildren() {
  std::lock_guard<std::mutex> l(gLiveMu);
  for (pid_t p : gLive) killGroupNow(p);
}

inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

inline uint64_t randomSecret() {
  uint64_t v = 0;
  while (getrandom(&v, sizeof v, 0) != ssize_t(sizeof v)) {
  }
  return v | 1;
}

inline std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

// Environment for rank r of n self-forked workers sharing one root.
// FAILURES_HOST_PER_RANK=1 gives every rank a host id of its own, as if each ran on another host: a transport
// can then not watch a local peer's pid and must see a death in its own traffic.
inline std::vector<std::string> rankEnv(int r, int n, int port, uint64_t secret) {
  std::vector<std::string> env{"CHORUS_RANK=" + std::to_string(r), "CHORUS_NRANKS=" + std::to_string(n),
                               "CHORUS_ROOT=127.0.0.1:" + std::to_string(port), "CHORUS_SECRET=" + hex(secret)};
  if (const char* v = std::getenv("FAILURES_HOST_PER_RANK"); v != nullptr && std::string(v) == "1")
    env.push_back("CHORUS_HOSTID=failures-host-" + std::to_string(r));
  return env;
}

inline std::string chorusrunPath() {
  if (const char* p = std::getenv("CHORUSRUN"); p && *p) return p;
  if (const char* b = std::getenv("TEST_BUILD_DIR"); b && *b) return std::string(b) + "/scripts/chorusrun";
  std::string exe = selfExe();
  return exe.substr(0, exe.rfind('/')) + "/../scripts/chorusrun";
}

// main() of a suite whose binary is also its worker program: "--worker=NAME" runs scenario NAME instead of the
// tests. All ranks are local: loopback unless CHORUS_SOCKET_IFNAME says otherwise.
inline int testsOrWorker(int argc, char** argv, int (*runWorker)(const std::string&)) {
  setenv("CHORUS_SOCKET_IFNAME", "=lo", 0);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--worker=", 9) == 0) return runWorker(argv[i] + 9);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace chorus::test
