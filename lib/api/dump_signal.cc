#include "lib/api/dump_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "lib/api/registry.h"
#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/base/log.h"
#include "lib/base/text.h"
#include "lib/base/thread_name.h"

namespace chorus {

namespace {

int gPipe[2] = {-1, -1};

extern "C" void onDumpSignal(int) {
  const int saved = errno;
  const char one = 1;
  if (::write(gPipe[1], &one, 1) < 0) { /* the pipe is full: dumps are pending anyway */ }
  errno = saved;
}

int parseSignal(const std::string& text) {
  std::string t = lower(trim(text));
  if (t.rfind("sig", 0) == 0) t = t.substr(3);
  if (t == "usr1") return SIGUSR1;
  if (t == "usr2") return SIGUSR2;
  char* end = nullptr;
  const long n = std::strtol(t.c_str(), &end, 10);
  if (!t.empty() && *end == '\0' && n > 0 && n <= SIGRTMAX && n != SIGKILL && n != SIGSTOP)
    return static_cast<int>(n);
  fail(chorusInvalidArgument, "CHORUS_DUMP_SIGNAL={} is not a signal: USR1, USR2 or a number (1..{}, not KILL or "
       "STOP)", text, SIGRTMAX);
}

void dumpAll() {
  nameThisThread("chorus-dump");
  for (;;) {
    char buf[64];
    const ssize_t got = ::read(gPipe[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    for (Comm* c : liveComms()) {
      try {
        CallRef ref(static_cast<chorusComm_t>(c), "comm");
        log::writeLine(ref->flightDump("signal"));
      } catch (const Error&) {  // destroyed meanwhile
      }
    }
  }
}

}  // namespace

void installDumpSignal() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string text = envValue("CHORUS_DUMP_SIGNAL");
    if (text.empty()) return;
    const int sig = parseSignal(text);
    struct sigaction old{};
    sigaction(sig, nullptr, &old);
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) {
      CHORUS_WARN(kInit, "CHORUS_DUMP_SIGNAL={}: the application handles signal {} ({}) itself; Chorus leaves its "
                  "handler alone and dumps only through chorusCommDump", text, sig, strsignal(sig));
      return;
    }
    if (::pipe2(gPipe, O_CLOEXEC | O_NONBLOCK) != 0) failErrno("pipe (CHORUS_DUMP_SIGNAL)");
    fcntl(gPipe[0], F_SETFL, 0);  // the reader blocks; the handler's end stays non-blocking
    std::thread(dumpAll).detach();
    struct sigaction sa{};
    sa.sa_handler = onDumpSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
    CHORUS_INFO(kInit, "CHORUS_DUMP_SIGNAL: signal {} ({}) dumps every communicator's flight recorder", sig,
                strsignal(sig));
  });
}

}  // namespace chorus
