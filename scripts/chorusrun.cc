// chorusrun: launch N local ranks of a Chorus program (a one-machine `mpirun -np N`).
//
// Deliberately independent of the library: only libc and the C++ standard library, so it
// builds and works even when the library itself is broken.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int kMaxRanks = 4096;
constexpr size_t kMaxLine = 64 * 1024;  // a longer line is forwarded in pieces of this size
constexpr int64_t kNever = INT64_MAX;
constexpr int64_t kKillAfterMs = 1000;    // SIGTERM -> SIGKILL escalation after a failure
constexpr int64_t kGiveUpAfterMs = 1500;  // after a failure, stop waiting for output/ranks
constexpr int64_t kStrayOutputMs = 1000;  // after the last rank exits, wait this long for pipes
                                          // still held open by its background children

const char kUsage[] =
    "usage: chorusrun -n N [--no-prefix] [--max-restarts R] [--] command [args...]\n"
    "       chorusrun --info [args...]\n";

const char kHelp[] =
    "Launch N local ranks of a Chorus program; output lines are prefixed with \"[rank] \".\n"
    "\n"
    "options:\n"
    "  -n N          number of ranks (1..4096)\n"
    "  --no-prefix   forward output unchanged (still line-buffered per rank)\n"
    "  --max-restarts R\n"
    "                when a rank fails, stop the others and start the whole job again, up to R\n"
    "                times (torchrun's --max-restarts); 0, the default, never restarts\n"
    "  --info        run chorus_info (next to chorusrun, else from PATH) with the remaining args\n"
    "  -h, --help    show this help\n"
    "\n"
    "environment set for each rank:\n"
    "  CHORUS_ROOT=127.0.0.1:<free port>        (kept if already set)\n"
    "  CHORUS_SECRET=<16 random hex digits>     (kept if already set)\n"
    "  CHORUS_SOCKET_IFNAME==lo                 (kept if already set: all ranks are local)\n"
    "  CHORUS_RANK, CHORUS_LOCAL_RANK           0..N-1\n"
    "  CHORUS_NRANKS, CHORUS_LOCAL_NRANKS       N\n"
    "  CHORUS_RESTART                           0, then 1.. for each restart of the job\n"
    "\n"
    "If a rank exits non-zero or is killed, the others get SIGTERM and 1 s later SIGKILL;\n"
    "chorusrun exits with the first failing rank's code (128+signal for a signal death).\n"
    "With --max-restarts, a failed job starts again (a new root port and secret unless the user set\n"
    "them) until one run succeeds or R restarts are spent; a job stopped by a signal is not restarted.\n"
    "SIGINT/SIGTERM/SIGHUP are forwarded to every rank; a second one kills them all.\n"
    "Rank 0 inherits stdin unless it is a terminal; the other ranks read /dev/null.\n";

int g_sig_pipe[2] = {-1, -1};  // self-pipe: the handler writes the signal number, poll() wakes

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  if (write(g_sig_pipe[1], &b, 1) < 0) {  // full pipe: a wakeup is already pending
  }
  errno = saved;
}

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "chorusrun: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Output errors (e.g. the reader of our stdout went away) are ignored: the ranks keep running
// and we keep draining their pipes so they never block on a full pipe.
void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // an inherited non-blocking stdout: wait until it drains
        pollfd pfd{fd, POLLOUT, 0};
        poll(&pfd, 1, -1);
        continue;
      }
      return;
    }
    p += w;
    n -= size_t(w);
  }
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "unknown";
}

// The port is only reserved while we hold it; rank 0 binds it again moments later. This is
// the usual launcher race and is acceptable on a single machine.
int pick_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

// 64 random bits as 16 hex digits; empty if getrandom fails.
std::string random_secret() {
  uint64_t v = 0;
  while (getrandom(&v, sizeof v, 0) != ssize_t(sizeof v))  // 8 bytes never come back short
    if (errno != EINTR) return "";
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// --info: prefer the chorus_info installed/built alongside this binary over whatever PATH has.
int run_info(int argc, char** argv) {
  if (argc > 0 && std::strcmp(argv[0], "--") == 0) ++argv, --argc;
  std::vector<char*> args{const_cast<char*>("chorus_info")};
  args.insert(args.end(), argv, argv + argc);
  args.push_back(nullptr);
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    std::string path(exe);
    path = path.substr(0, path.rfind('/') + 1) + "chorus_info";
    execv(path.c_str(), args.data());
  }
  execvp("chorus_info", args.data());
  std::fprintf(stderr,
               "chorusrun: cannot run chorus_info (looked next to chorusrun and in PATH): %s\n",
               std::strerror(errno));
  return 2;
}

struct Stream {
  int rank = 0;
  int fd = -1;      // read end of the rank's stdout/stderr pipe; -1 once at EOF
  int out_fd = -1;  // where it goes: our stdout or stderr
  std::string buf;  // bytes of the current incomplete line
};

struct Rank {
  pid_t pid = -1;  // also the id of the rank's own process group
  bool alive = false;
  Stream streams[2];
};

class Launcher {
 public:
  Launcher(int nranks, bool prefix) : ranks_(size_t(nranks)), prefix_(prefix) {}

  // Forks and execs every rank. A rank that fails to start counts as the first failure.
  void spawn_all(char** cmd) {
    static const rlimit original = [] {  // before any run raised it (a restart spawns again)
      rlimit r{};
      getrlimit(RLIMIT_NOFILE, &r);
      return r;
    }();
    orig_nofile_ = original;
    rlimit raised = orig_nofile_;  // 2 pipes per rank can exceed the default soft limit of 1024
    raised.rlim_cur = raised.rlim_max;
    setrlimit(RLIMIT_NOFILE, &raised);
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (!spawn(int(r), cmd)) {
        dprintf(2, "chorusrun: cannot start rank %zu: %s; stopping the other ranks\n", r,
                std::strerror(errno));
        begin_stop(1);
        return;
      }
    }
  }

  int run() {
    std::vector<pollfd> pfds;
    std::vector<Stream*> owners;
    for (;;) {
      drain_signals();
      reap();
      int64_t now = now_ms();
      if (now >= kill_at_) {
        kill_all(SIGKILL);
        kill_at_ = kNever;
      }
      if (alive_ == 0 && open_streams_ == 0) break;
      if (alive_ == 0 && giveup_at_ > now + kStrayOutputMs) giveup_at_ = now + kStrayOutputMs;
      if (now >= giveup_at_) break;

      pfds.assign(1, pollfd{g_sig_pipe[0], POLLIN, 0});
      owners.assign(1, nullptr);
      for (auto& r : ranks_)
        for (auto& s : r.streams)
          if (s.fd >= 0) {
            pfds.push_back(pollfd{s.fd, POLLIN, 0});
            owners.push_back(&s);
          }
      int64_t deadline = std::min(kill_at_, giveup_at_);
      int timeout = deadline == kNever ? -1 : int(std::max<int64_t>(0, deadline - now));
      if (poll(pfds.data(), pfds.size(), timeout) < 0 && errno != EINTR) {
        std::perror("chorusrun: poll");
        return 1;
      }
      for (size_t i = 1; i < pfds.size(); ++i) {
        if (pfds[i].revents) read_some(*owners[i]);
      }
    }
    for (auto& r : ranks_)  // when giving up, still show what we have
      for (auto& s : r.streams)
        if (s.fd >= 0) close_stream(s);
    if (exit_code_ >= 0) return exit_code_;
    return interrupted_ ? 128 + interrupted_ : 0;
  }

  bool interrupted() const { return interrupted_ != 0; }
  int failed_rank() const { return failed_rank_; }

 private:
  bool spawn(int rank, char** cmd) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0) return false;
    if (pipe2(err, O_CLOEXEC) < 0) {
      close(out[0]), close(out[1]);
      return false;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      // Before exec our handlers would write into the launcher's self-pipe: restore defaults.
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) std::signal(sig, SIG_DFL);
      setpgid(0, 0);  // own group, so a signal reaches the rank's whole process tree
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // don't outlive a launcher that was SIGKILLed
      if (getppid() != parent) _exit(1);
      dup2(out[1], 1);
      dup2(err[1], 2);
      // Ranks run in a background process group: reading a terminal would stop them (SIGTTIN).
      if (rank != 0 || isatty(0)) {
        int in = open("/dev/null", O_RDONLY);
        if (in > 0) dup2(in, 0), close(in);
      }
      setrlimit(RLIMIT_NOFILE, &orig_nofile_);
      setenv("CHORUS_RANK", std::to_string(rank).c_str(), 1);
      setenv("CHORUS_LOCAL_RANK", std::to_string(rank).c_str(), 1);
      execvp(cmd[0], cmd);
      dprintf(2, "chorusrun: cannot execute '%s': %s\n", cmd[0], std::strerror(errno));
      _exit(127);
    }
    int saved = errno;
    close(out[1]), close(err[1]);
    if (pid < 0) {
      close(out[0]), close(err[0]);
      errno = saved;
      return false;
    }
    setpgid(pid, pid);  // also from this side, so kill(-pid) can never race the child's setpgid
    Rank& r = ranks_[size_t(rank)];
    r.pid = pid;
    r.alive = true;
    r.streams[0] = Stream{rank, out[0], 1, {}};
    r.streams[1] = Stream{rank, err[0], 2, {}};
    ++alive_;
    open_streams_ += 2;
    return true;
  }

  // Writes every complete line with the rank prefix. Partial lines are written at EOF or once
  // they reach kMaxLine; with a prefix they get a newline so the next prefix starts a line.
  void forward(Stream& s, bool eof) {
    std::string out;
    std::string prefix;
    if (prefix_) prefix = "[" + std::to_string(s.rank) + "] ";
    size_t start = 0;
    for (size_t nl; (nl = s.buf.find('\n', start)) != std::string::npos; start = nl + 1)
      out.append(prefix).append(s.buf, start, nl + 1 - start);
    size_t rest = s.buf.size() - start;
    if (rest > 0 && (eof || rest >= kMaxLine)) {
      out.append(prefix).append(s.buf, start, rest);
      if (prefix_) out += '\n';
      start = s.buf.size();
    }
    s.buf.erase(0, start);
    write_all(s.out_fd, out.data(), out.size());
  }

  void read_some(Stream& s) {
    static char chunk[kMaxLine];
    ssize_t n = read(s.fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) return close_stream(s);
    s.buf.append(chunk, size_t(n));
    forward(s, false);
  }

  // Forwards what a rank wrote before dying, so its last words precede our failure message.
  // Bounded: a leftover child of the rank may still be writing.
  void read_pending(Rank& r) {
    for (auto& s : r.streams)
      for (int k = 0; k < 16 && s.fd >= 0; ++k) {
        pollfd pfd{s.fd, POLLIN, 0};
        if (poll(&pfd, 1, 0) <= 0) break;
        read_some(s);
      }
  }

  void close_stream(Stream& s) {
    forward(s, true);
    close(s.fd);
    s.fd = -1;
    --open_streams_;
  }

  // Also signals groups of already-exited ranks whose pipes are still open: their leftover
  // children hold them, and we want those gone too.
  void kill_all(int sig) {
    for (auto& r : ranks_)
      if (r.pid > 0 && (r.alive || r.streams[0].fd >= 0 || r.streams[1].fd >= 0)) kill(-r.pid, sig);
  }

  void begin_stop(int code) {
    exit_code_ = code;
    kill_all(SIGTERM);
    int64_t now = now_ms();
    kill_at_ = now + kKillAfterMs;
    giveup_at_ = now + kGiveUpAfterMs;
  }

  void drain_signals() {
    unsigned char sigs[64];
    ssize_t n;
    while ((n = read(g_sig_pipe[0], sigs, sizeof sigs)) > 0)
      for (ssize_t i = 0; i < n; ++i) {
        if (sigs[i] == SIGCHLD) continue;  // reap() runs on every wakeup anyway
        if (interrupted_ == 0) {
          interrupted_ = sigs[i];
          kill_all(sigs[i]);
        } else {
          kill_all(SIGKILL);  // asked twice: the user means it
        }
      }
  }

  void reap() {
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
      size_t r = 0;
      while (r < ranks_.size() && ranks_[r].pid != pid) ++r;
      if (r == ranks_.size() || !ranks_[r].alive) continue;
      ranks_[r].alive = false;
      --alive_;
      if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) || exit_code_ >= 0) continue;
      read_pending(ranks_[r]);
      std::string how = WIFEXITED(st) ? "exited with code " + std::to_string(WEXITSTATUS(st))
                                      : "killed by signal " + std::to_string(WTERMSIG(st)) + " (" +
                                            signal_name(WTERMSIG(st)) + ")";
      dprintf(2, "chorusrun: rank %zu (pid %d) %s%s\n", r, int(pid), how.c_str(),
              alive_ > 0 ? "; stopping the other ranks" : "");
      failed_rank_ = int(r);
      begin_stop(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
  }

  std::vector<Rank> ranks_;
  bool prefix_;
  rlimit orig_nofile_{};
  int alive_ = 0;
  int open_streams_ = 0;
  int exit_code_ = -1;   // the first failure's exit code, -1 while none
  int interrupted_ = 0;  // the first forwarded signal
  int failed_rank_ = -1;
  int64_t kill_at_ = kNever;
  int64_t giveup_at_ = kNever;
};

}  // namespace

int main(int argc, char** argv) {
  int nranks = 0;
  long max_restarts = 0;
  bool prefix = true;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      std::printf("%s\n%s", kUsage, kHelp);
      return 0;
    }
    if (a == "--info") return run_info(argc - i - 1, argv + i + 1);
    if (a == "--no-prefix") {
      prefix = false;
    } else if (a == "--max-restarts" || a.starts_with("--max-restarts=")) {
      std::string v = a.size() > 14 ? std::string(a.substr(15)) : "";
      if (a.size() == 14) {
        if (++i >= argc) usage_error("--max-restarts needs a value");
        v = argv[i];
      }
      char* end = nullptr;
      errno = 0;
      max_restarts = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || max_restarts < 0 || max_restarts > 1000000)
        usage_error("invalid restart count '" + v + "' (must be 0..1000000)");
    } else if (a.starts_with("-n")) {
      std::string v(a.substr(2));
      if (v.empty()) {
        if (++i >= argc) usage_error("-n needs a value");
        v = argv[i];
      }
      char* end = nullptr;
      errno = 0;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || n < 1 || n > kMaxRanks)
        usage_error("invalid rank count '" + v + "' (must be 1.." + std::to_string(kMaxRanks) +
                    ")");
      nranks = int(n);
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error("unknown option '" + std::string(a) + "'");
    } else {
      break;
    }
  }
  if (nranks == 0) usage_error("missing -n N (the number of ranks)");
  if (i >= argc) usage_error("no command given");

  // With 0/1/2 closed, our pipes would land there and be mistaken for stdin/stdout/stderr.
  for (int fd = 0; fd < 3; ++fd)
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", O_RDWR);

  // Shared by all ranks; a user-provided root/secret wins (e.g. to pin the port).
  const bool user_root = std::getenv("CHORUS_ROOT") != nullptr;
  const bool user_secret = std::getenv("CHORUS_SECRET") != nullptr;
  if (!user_root) {
    int port = pick_free_port();
    if (port < 0) {
      std::fprintf(stderr, "chorusrun: cannot find a free port on 127.0.0.1: %s\n",
                   std::strerror(errno));
      return 1;
    }
    setenv("CHORUS_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  }
  if (!user_secret) {
    std::string secret = random_secret();
    if (secret.empty()) {
      std::fprintf(stderr, "chorusrun: getrandom failed: %s\n", std::strerror(errno));
      return 1;
    }
    setenv("CHORUS_SECRET", secret.c_str(), 1);
  }
  // Every rank is on this machine, so peers talk over loopback unless the user chose an interface.
  setenv("CHORUS_SOCKET_IFNAME", "=lo", 0);
  setenv("CHORUS_NRANKS", std::to_string(nranks).c_str(), 1);
  setenv("CHORUS_LOCAL_NRANKS", std::to_string(nranks).c_str(), 1);

  if (pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    std::perror("chorusrun: pipe");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(sig, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill us while ranks still run

  for (long restart = 0;; ++restart) {
    setenv("CHORUS_RESTART", std::to_string(restart).c_str(), 1);
    Launcher launcher(nranks, prefix);
    launcher.spawn_all(argv + i);
    const int code = launcher.run();
    if (code == 0 || launcher.interrupted() || restart >= max_restarts) {
      if (code != 0 && max_restarts > 0 && !launcher.interrupted())
        dprintf(2, "chorusrun: the job failed (exit code %d) and its %ld restart(s) are spent\n", code, max_restarts);
      return code;
    }
    // A fresh root and secret: the old root's port may still be held, and stragglers of the failed run must not
    // join the new one.
    if (!user_root) {
      const int port = pick_free_port();
      if (port < 0) {
        std::fprintf(stderr, "chorusrun: cannot find a free port on 127.0.0.1: %s\n", std::strerror(errno));
        return code;
      }
      setenv("CHORUS_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
    }
    if (!user_secret) {
      const std::string secret = random_secret();
      if (!secret.empty()) setenv("CHORUS_SECRET", secret.c_str(), 1);
    }
    dprintf(2, "chorusrun: restarting the job (restart %ld of %ld) after rank %d failed (exit code %d)\n",
            restart + 1, max_restarts, launcher.failed_rank(), code);
  }
}
