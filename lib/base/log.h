// Logging by level x subsystem through spdlog, cheap when off: CHORUS_LOG_* check a cached mask before
// formatting. Lines look like "host:pid:tid [rank] INFO NET ..."; the rank is the thread's current one
// (set by LogRankScope while a communicator call runs), "-" outside any call.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace chorus::log {

enum class Level : int { Warn = 0, Info = 1, Debug = 2, Trace = 3 };
enum Subsys : uint32_t {
  kInit = 1u << 0, kBootstrap = 1u << 1, kNet = 1u << 2, kColl = 1u << 3, kEnv = 1u << 4, kP2p = 1u << 5,
  kAll = ~0u
};

namespace detail {
// The most verbose level the settings enable, -1 until they are read: a disabled DEBUG line in a hot path then
// costs one load and a compare, not a call.
extern std::atomic<int> gVerbosity;
bool enabledSlow(Level level, uint32_t subsys);
// This thread's rank for log lines, -1 outside any call (initial-exec: a plain %fs load, no __tls_get_addr).
[[gnu::tls_model("initial-exec")]] extern thread_local constinit int tRank;
}  // namespace detail

inline bool enabled(Level level, uint32_t subsys) {
  const int v = detail::gVerbosity.load(std::memory_order_relaxed);
  if (v >= 0 && static_cast<int>(level) > v) return false;
  return detail::enabledSlow(level, subsys);
}
void write(Level level, uint32_t subsys, const std::string& text);
// A line as it is (a flight-recorder dump), whatever the level, to CHORUS_DEBUG_FILE or stderr.
void writeLine(const std::string& line);

// Marks the rank printed on this thread's log lines while in scope. Inline: it is entered on every call and
// every crossing into a transport plugin.
class LogRankScope {
 public:
  explicit LogRankScope(int rank) : saved_(detail::tRank) { detail::tRank = rank; }
  ~LogRankScope() { detail::tRank = saved_; }
  LogRankScope(const LogRankScope&) = delete;
  LogRankScope& operator=(const LogRankScope&) = delete;

 private:
  int saved_;
};

}  // namespace chorus::log

#define CHORUS_LOG_(lvl, sub, ...)                                                        \
  do {                                                                                    \
    if (::chorus::log::enabled(::chorus::log::Level::lvl, ::chorus::log::sub))            \
      ::chorus::log::write(::chorus::log::Level::lvl, ::chorus::log::sub, fmt::format(__VA_ARGS__)); \
  } while (0)
#define CHORUS_WARN(sub, ...) CHORUS_LOG_(Warn, sub, __VA_ARGS__)
#define CHORUS_INFO(sub, ...) CHORUS_LOG_(Info, sub, __VA_ARGS__)
#define CHORUS_DEBUG(sub, ...) CHORUS_LOG_(Debug, sub, __VA_ARGS__)
#define CHORUS_TRACE(sub, ...) CHORUS_LOG_(Trace, sub, __VA_ARGS__)
