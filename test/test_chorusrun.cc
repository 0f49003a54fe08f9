// Tests for the chorusrun launcher, run as a subprocess. The binary comes from $CHORUSRUN
// (set by meson). Every run has a deadline, so a launcher bug fails a test instead of hanging.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

const char* Launcher() { return std::getenv("CHORUSRUN"); }

#define REQUIRE_LAUNCHER()                                            \
  do {                                                                \
    if (!Launcher() || !*Launcher())                                  \
      GTEST_SKIP() << "CHORUSRUN is not set to the chorusrun binary"; \
  } while (0)

struct Result {
  int code = -1;  // exit code, or 128+signal
  std::string out, err;
  bool timed_out = false;
};

// One chorusrun process with its stdout/stderr captured.
class Launch {
 public:
  explicit Launch(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& env = {},
                  const std::string& binary = Launcher()) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      int in = open("/dev/null", O_RDONLY);
      dup2(in, 0);
      for (const char* v : {"CHORUS_ROOT", "CHORUS_SECRET", "CHORUS_RANK", "CHORUS_NRANKS",
                            "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_NRANKS"})
        unsetenv(v);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(99);
    }
    close(out[1]);
    close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
  }

  ~Launch() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }

  pid_t pid() const { return pid_; }

  // Reads output until `needle` has appeared `count` times in stdout, or the timeout.
  bool WaitForStdout(const std::string& needle, int count, double timeout_s) {
    auto start = Clock::now();
    while (Count(out_, needle) < count) {
      if (SecondsSince(start) > timeout_s || !Pump(100)) return Count(out_, needle) >= count;
    }
    return true;
  }

  // Waits for the launcher to exit (killing it after the timeout) and returns what it did.
  Result Finish(double timeout_s = 20) {
    Result r;
    auto start = Clock::now();
    int status = 0;
    for (;;) {
      Pump(50);
      pid_t w = waitpid(pid_, &status, WNOHANG);
      if (w == pid_) break;
      if (SecondsSince(start) > timeout_s) {
        r.timed_out = true;
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
    }
    pid_ = -1;
    // The launcher is gone; collect what is left (its ranks do not hold our pipes).
    while (Pump(200)) {}
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = out_;
    r.err = err_;
    return r;
  }

 private:
  static int Count(const std::string& s, const std::string& needle) {
    int n = 0;
    for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
    return n;
  }

  // One poll round; false once both pipes are at EOF.
  bool Pump(int timeout_ms) {
    pollfd pfds[2];
    int n = 0;
    for (int fd : fds_)
      if (fd >= 0) pfds[n++] = pollfd{fd, POLLIN, 0};
    if (n == 0) return false;
    if (poll(pfds, nfds_t(n), timeout_ms) <= 0) return true;
    for (int i = 0; i < n; ++i) {
      if (!pfds[i].revents) continue;
      char buf[65536];
      ssize_t got = read(pfds[i].fd, buf, sizeof buf);
      int which = pfds[i].fd == fds_[0] ? 0 : 1;
      if (got > 0) {
        (which == 0 ? out_ : err_).append(buf, size_t(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds_[which]);
        fds_[which] = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string out_, err_;
};

Result RunLauncher(const std::vector<std::string>& args,
                   const std::vector<std::pair<std::string, std::string>>& env = {}, double timeout_s = 20) {
  return Launch(args, env).Finish(timeout_s);
}

int Occurrences(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Pids the ranks reported with `echo pid $$`.
std::vector<pid_t> ReportedPids(const std::string& out) {
  std::vector<pid_t> pids;
  std::regex re(R"(\] pid (\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    pids.push_back(pid_t(std::stoi((*it)[1])));
  return pids;
}

// The launcher reaps its ranks before exiting, so they must be gone (not even zombies).
void ExpectAllGone(const std::vector<pid_t>& pids) {
  for (pid_t p : pids)
    EXPECT_TRUE(kill(p, 0) != 0 && errno == ESRCH) << "rank pid " << p << " still exists";
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/chorusrun_test_XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// Shell snippet: the rank waits (at most ~10 s) until the test creates $GO, so that it fails
// only after every rank has reported its pid.
const std::string kWaitForGo =
    "i=0; while [ ! -e \"$GO\" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; ";

TEST(Chorusrun, AllRanksSucceed) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"-n", "3", "--", "sh", "-c", "echo hi $CHORUS_RANK"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 0) << r.err;
  auto lines = Lines(r.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] hi 0", "[1] hi 1", "[2] hi 2"}));
  EXPECT_EQ(r.err, "");
}

TEST(Chorusrun, SetsEnvironment) {
  REQUIRE_LAUNCHER();
  Result r =
      RunLauncher({"-n", "3", "sh", "-c",
                   "echo $CHORUS_RANK $CHORUS_NRANKS $CHORUS_LOCAL_RANK $CHORUS_LOCAL_NRANKS "
                   "$CHORUS_ROOT $CHORUS_SECRET"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  std::regex re(R"(\[(\d)\] (\d) 3 (\d) 3 (127\.0\.0\.1:\d+) ([0-9a-f]{16}))");
  std::string root, secret;
  std::vector<bool> seen(3);
  for (const auto& l : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, re)) << l;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[1], m[3]);
    seen[size_t(std::stoi(m[1]))] = true;
    if (root.empty()) root = m[4], secret = m[5];
    EXPECT_EQ(m[4], root);
    EXPECT_EQ(m[5], secret);
  }
  EXPECT_EQ(seen, std::vector<bool>(3, true));
}

TEST(Chorusrun, KeepsUserRootAndSecret) {
  REQUIRE_LAUNCHER();
  Result r =
      RunLauncher({"-n", "2", "sh", "-c", "echo $CHORUS_ROOT $CHORUS_SECRET"},
                  {{"CHORUS_ROOT", "127.0.0.1:5555"}, {"CHORUS_SECRET", "00000000deadbeef"}});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 2u) << r.out;
  for (const auto& l : Lines(r.out))
    EXPECT_NE(l.find("] 127.0.0.1:5555 00000000deadbeef"), std::string::npos) << l;
}

TEST(Chorusrun, FailingRankStopsTheOthers) {
  REQUIRE_LAUNCHER();
  TempDir dir;
  std::string go = dir.path + "/go";
  Launch l({"-n", "3", "--", "sh", "-c",
            "echo pid $$; if [ $CHORUS_RANK = 1 ]; then " + kWaitForGo +
                "echo failing; exit 3; fi; sleep 30"},
           {{"GO", go}});
  ASSERT_TRUE(l.WaitForStdout("pid", 3, 10));
  std::ofstream(go).put('\n');
  ASSERT_TRUE(l.WaitForStdout("[1] failing", 1, 10));
  auto failed = Clock::now();
  Result r = l.Finish();
  EXPECT_LT(SecondsSince(failed), 2.5);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("chorusrun: rank 1 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") exited with code 3; stopping the other ranks"), std::string::npos)
      << r.err;
  ExpectAllGone(ReportedPids(r.out));
}

TEST(Chorusrun, RanksIgnoringSigtermAreKilled) {
  REQUIRE_LAUNCHER();
  // The survivors ignore SIGTERM (inherited by sleep), so only the SIGKILL escalation ends them.
  TempDir dir;
  std::string go = dir.path + "/go";
  Launch l({"-n", "3", "--", "sh", "-c",
            "trap '' TERM; echo pid $$; if [ $CHORUS_RANK = 2 ]; then " + kWaitForGo +
                "exit 5; fi; sleep 30"},
           {{"GO", go}});
  ASSERT_TRUE(l.WaitForStdout("pid", 3, 10));
  std::ofstream(go).put('\n');
  auto failed = Clock::now();
  Result r = l.Finish();
  EXPECT_LT(SecondsSince(failed), 2.5);
  EXPECT_EQ(r.code, 5) << r.err;
  ExpectAllGone(ReportedPids(r.out));
}

TEST(Chorusrun, RankKilledBySignal) {
  REQUIRE_LAUNCHER();
  auto start = Clock::now();
  Result r = RunLauncher(
      {"-n", "3", "--", "sh", "-c", "if [ $CHORUS_RANK = 1 ]; then kill -9 $$; fi; sleep 30"});
  EXPECT_LT(SecondsSince(start), 5);
  EXPECT_EQ(r.code, 137);
  EXPECT_NE(r.err.find("rank 1 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
}

TEST(Chorusrun, ForwardsSigtermToRanks) {
  REQUIRE_LAUNCHER();
  // sh runs the trap once its foreground sleep ends; the sleep gets the signal too (same group).
  Launch l({"-n", "2", "--", "sh", "-c",
            "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 1; done"});
  ASSERT_TRUE(l.WaitForStdout("ready", 2, 10));
  auto sent = Clock::now();
  kill(l.pid(), SIGTERM);
  Result r = l.Finish();
  EXPECT_LT(SecondsSince(sent), 2.5);
  EXPECT_EQ(r.code, 128 + SIGTERM);  // interrupted, even though the ranks exited 0
  EXPECT_NE(r.out.find("[0] got TERM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1] got TERM"), std::string::npos) << r.out;
}

TEST(Chorusrun, SigintKillsDefaultRanks) {
  REQUIRE_LAUNCHER();
  Launch l({"-n", "2", "--", "sh", "-c", "echo ready; exec sleep 30"});
  ASSERT_TRUE(l.WaitForStdout("ready", 2, 10));
  auto sent = Clock::now();
  kill(l.pid(), SIGINT);
  Result r = l.Finish();
  EXPECT_LT(SecondsSince(sent), 2.5);
  EXPECT_EQ(r.code, 128 + SIGINT) << r.err;
}

TEST(Chorusrun, CommandNotFound) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"-n", "2", "--", "/nonexistent/chorus-test-cmd", "x"});
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(
      r.err.find(
          "chorusrun: cannot execute '/nonexistent/chorus-test-cmd': No such file or directory"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("exited with code 127"), std::string::npos) << r.err;
}

// --max-restarts: a failed job starts again whole, with CHORUS_RESTART counting, a fresh root and secret, until a
// run succeeds; a job that keeps failing ends with the last failure's code once the restarts are spent.
TEST(Chorusrun, MaxRestartsRunsTheJobAgainUntilItSucceeds) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"-n", "3", "--max-restarts", "3", "--", "sh", "-c",
                          "echo run $CHORUS_RESTART $CHORUS_ROOT $CHORUS_SECRET; "
                          "if [ $CHORUS_RESTART -lt 2 ]; then [ $CHORUS_RANK = 1 ] && { sleep 0.5; exit 3; }; sleep 30; fi"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* run : {"] run 0 ", "] run 1 ", "] run 2 "}) EXPECT_EQ(Occurrences(r.out, run), 3) << run << r.out;
  EXPECT_EQ(Occurrences(r.out, "] run 3 "), 0) << r.out;
  EXPECT_NE(r.err.find("chorusrun: restarting the job (restart 1 of 3) after rank 1 failed (exit code 3)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(restart 2 of 3)"), std::string::npos) << r.err;
  std::set<std::string> roots;
  for (const auto& l : Lines(r.out)) roots.insert(l.substr(l.find(" run ") + 7));
  EXPECT_EQ(roots.size(), 3u) << "each run has its own root and secret\n" << r.out;
}

TEST(Chorusrun, MaxRestartsSpentEndsWithTheFailure) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"-n", "2", "--max-restarts=1", "--", "sh", "-c",
                          "echo run $CHORUS_RESTART; [ $CHORUS_RANK = 0 ] && { sleep 0.5; exit 5; }; sleep 30"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 5);
  EXPECT_EQ(Occurrences(r.out, "] run 0"), 2) << r.out;
  EXPECT_EQ(Occurrences(r.out, "] run 1"), 2) << r.out;
  EXPECT_NE(r.err.find("its 1 restart(s) are spent"), std::string::npos) << r.err;
}

// A Chorus job whose rank is killed in the first run forms again and finishes, checked, in the second.
TEST(Chorusrun, MaxRestartsReformsAChorusJob) {
  REQUIRE_LAUNCHER();
  const char* build = std::getenv("TEST_BUILD_DIR");
  if (build == nullptr) GTEST_SKIP() << "TEST_BUILD_DIR is not set (run through meson test)";
  Result r = RunLauncher({"-n", "3", "--max-restarts", "2", "--", "sh", "-c",
                          "n=20; if [ $CHORUS_RESTART = 0 ]; then n=1000000; "
                          "if [ $CHORUS_RANK = 2 ]; then (sleep 1; kill -9 $$) & fi; fi; "
                          "exec \"$0\" -b 64K -e 64K -n $n -w 1 -c 1",
                          std::string(build) + "/bench/all_reduce_perf"},
                         {{"CHORUS_SOCKET_IFNAME", "=lo"}}, 60);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Occurrences(r.err, "restarting the job (restart 1 of 2) after rank 2 failed"), 1) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
}

TEST(Chorusrun, UsageErrors) {
  REQUIRE_LAUNCHER();
  const std::vector<std::vector<std::string>> cases = {
      {"--", "true"},
      {"-n", "0", "true"},
      {"-n", "4097", "true"},
      {"-n", "abc", "true"},
      {"-n", "2"},
      {"-n"},
      {"--bogus", "-n", "2", "true"},
      {"-n", "2", "--"},
      {"-n", "2", "--max-restarts", "-1", "true"},
      {"-n", "2", "--max-restarts=x", "true"},
      {"-n", "2", "--max-restarts"},
  };
  for (const auto& args : cases) {
    Result r = RunLauncher(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined;
    EXPECT_NE(r.err.find("chorusrun: "), std::string::npos) << joined << r.err;
    EXPECT_NE(r.err.find("usage: chorusrun -n N"), std::string::npos) << joined << r.err;
    EXPECT_EQ(Lines(r.err).size(), 3u) << joined << r.err;  // message + 2 usage lines
  }
}

TEST(Chorusrun, Help) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"usage:", "CHORUS_ROOT", "CHORUS_SECRET", "CHORUS_RANK", "CHORUS_NRANKS",
                        "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_NRANKS"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  EXPECT_EQ(RunLauncher({"-h"}).code, 0);
}

TEST(Chorusrun, PartialLastLineIsPrefixed) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"-n", "1", "--", "sh", "-c", "printf 'a\\nb'; printf 'e' >&2"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "[0] a\n[0] b\n");
  EXPECT_EQ(r.err, "[0] e\n");
}

TEST(Chorusrun, LongLinesAreForwardedInPieces) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher(
      {"-n", "1", "--", "sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; echo; echo end"});
  EXPECT_EQ(r.code, 0);
  auto lines = Lines(r.out);
  ASSERT_GE(lines.size(), 3u);
  size_t xs = 0;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    ASSERT_EQ(lines[i].rfind("[0] ", 0), 0u);
    xs += size_t(std::count(lines[i].begin(), lines[i].end(), 'x'));
  }
  EXPECT_EQ(xs, 200000u);
  EXPECT_EQ(lines.back(), "[0] end");
}

TEST(Chorusrun, NoPrefixForwardsUnchanged) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"--no-prefix", "-n", "2", "--", "sh", "-c", "echo hi; printf err >&2"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "hi\nhi\n");
  EXPECT_EQ(r.err, "errerr");
}

TEST(Chorusrun, ManyRanks) {
  REQUIRE_LAUNCHER();
  Result r = RunLauncher({"-n", "64", "--", "sh", "-c", "echo $CHORUS_RANK"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 64u);
}

TEST(Chorusrun, InfoRunsSiblingOrFailsClearly) {
  REQUIRE_LAUNCHER();
  // A private copy of the launcher, so the sibling chorus_info is ours to create and delete.
  TempDir dir;
  std::string bin = dir.path + "/chorusrun", info = dir.path + "/chorus_info";
  {
    std::ifstream src(Launcher(), std::ios::binary);
    std::ofstream dst(bin, std::ios::binary);
    dst << src.rdbuf();
  }
  chmod(bin.c_str(), 0755);
  { std::ofstream(info) << "#!/bin/sh\necho info \"$@\"\n"; }
  chmod(info.c_str(), 0755);
  Result r = Launch({"--info", "--", "a", "b"}, {{"PATH", "/usr/bin:/bin"}}, bin).Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "info a b\n");

  unlink(info.c_str());
  r = Launch({"--info"}, {{"PATH", dir.path}}, bin).Finish();
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("chorus_info"), std::string::npos) << r.err;
}

}  // namespace
