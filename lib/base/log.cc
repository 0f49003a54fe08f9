#include "lib/base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "lib/base/env.h"

namespace chorus::log {

namespace {

struct Settings {
  Level level = Level::Warn;
  uint32_t mask = kAll;
  std::shared_ptr<spdlog::logger> logger;
  std::string host;
};

uint32_t subsysBit(const std::string& name) {
  static const struct { const char* n; uint32_t b; } kNames[] = {
      {"INIT", kInit}, {"BOOTSTRAP", kBootstrap}, {"NET", kNet}, {"COLL", kColl},
      {"ENV", kEnv}, {"P2P", kP2p}, {"ALL", kAll}};
  for (auto& e : kNames)
    if (name == e.n) return e.b;
  return 0;
}

std::string expandPath(const std::string& pattern, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'h') { out += host; ++i; }
    else if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') { out += std::to_string(getpid()); ++i; }
    else out += pattern[i];
  }
  return out;
}

// Read once per process: logging must work before (and without) any communicator. Never destroyed: a detached
// thread (a bootstrap root whose joiners gave up) may still log while the process runs its static destructors.
const Settings& settings() {
  static const Settings& s = *[] {
    auto* made = new Settings;
    Settings& st = *made;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    st.host = host;
    std::string lvl = envValue("CHORUS_DEBUG");
    for (auto& c : lvl) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (lvl == "INFO") st.level = Level::Info;
    else if (lvl == "DEBUG") st.level = Level::Debug;
    else if (lvl == "TRACE") st.level = Level::Trace;
    std::string subs = envValue("CHORUS_DEBUG_SUBSYS");
    bool negate = !subs.empty() && subs[0] == '^';
    uint32_t mask = 0;
    std::stringstream ss(negate ? subs.substr(1) : subs);
    for (std::string tok; std::getline(ss, tok, ',');) {
      for (auto& c : tok) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      mask |= subsysBit(tok);
    }
    st.mask = negate ? ~mask : mask;
    std::string file = envValue("CHORUS_DEBUG_FILE");
    try {
      if (!file.empty())
        st.logger = std::make_shared<spdlog::logger>(
            "chorus", std::make_shared<spdlog::sinks::basic_file_sink_mt>(expandPath(file, st.host)));
    } catch (const std::exception&) {
      st.logger.reset();  // unwritable file: fall back to stderr rather than lose the log
    }
    if (!st.logger)
      st.logger = std::make_shared<spdlog::logger>("chorus", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    st.logger->set_pattern("%v");
    st.logger->set_level(spdlog::level::trace);
    st.logger->flush_on(spdlog::level::trace);
    detail::gVerbosity.store(static_cast<int>(st.level), std::memory_order_relaxed);
    return made;
  }();
  return s;
}

const char* levelName(Level l) {
  switch (l) {
    case Level::Warn: return "WARN";
    case Level::Info: return "INFO";
    case Level::Debug: return "DEBUG";
    case Level::Trace: return "TRACE";
  }
  return "?";
}

const char* subsysName(uint32_t s) {
  switch (s) {
    case kInit: return "INIT";
    case kBootstrap: return "BOOTSTRAP";
    case kNet: return "NET";
    case kColl: return "COLL";
    case kEnv: return "ENV";
    case kP2p: return "P2P";
  }
  return "";
}

}  // namespace

namespace detail {

std::atomic<int> gVerbosity{-1};
// Set and restored around every API call (and every plugin entry): initial-exec, so that is a plain store, not a
// __tls_get_addr call in a shared library (4 bytes of the static TLS that glibc keeps for dlopen).
[[gnu::tls_model("initial-exec")]] thread_local constinit int tRank = -1;

bool enabledSlow(Level level, uint32_t subsys) {
  const Settings& s = settings();
  return level <= s.level && (s.mask & subsys) != 0;
}

}  // namespace detail

void write(Level level, uint32_t subsys, const std::string& text) {
  const Settings& s = settings();
  std::string rank = detail::tRank < 0 ? "-" : std::to_string(detail::tRank);
  s.logger->info("{}:{}:{} [{}] {} {} {}", s.host, getpid(), static_cast<long>(syscall(SYS_gettid)), rank,
                 levelName(level), subsysName(subsys), text);
}

void writeLine(const std::string& line) { settings().logger->info("{}", line); }

}  // namespace chorus::log
