#include "ddp/trainer/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace chorus::ddp::trainer {

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Trace::add(const std::string& name, int tid, double startUs, double endUs) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s{\"name\":\"%s\",\"ph\":\"X\",\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,\"pid\":",
                events_.empty() ? "" : ",\n", name.c_str(), tid, startUs - epoch_, std::max(0.0, endUs - startUs));
  events_ += buf;
  events_ += "PID}";  // the rank, filled in by write()
}

bool Trace::write(chorusComm_t comm, const std::string& path) const {
  int rank = 0, n = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  int64_t mine = static_cast<int64_t>(events_.size()), most = 0;
  chorusAllReduce(&mine, &most, 1, chorusInt64, chorusMax, comm, nullptr);
  std::string padded = events_;
  padded.resize(static_cast<size_t>(most) + 1, '\0');
  std::string all(padded.size() * static_cast<size_t>(n), '\0');
  if (chorusAllGather(padded.data(), all.data(), padded.size(), chorusInt8, comm, nullptr) != chorusSuccess) {
    std::fprintf(stderr, "rank %d: gathering the trace failed: %s\n", rank, chorusGetLastError(comm));
    return false;
  }
  if (rank != 0) return true;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::perror(path.c_str());
    return false;
  }
  std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
  for (int r = 0; r < n; ++r) {
    std::fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n",
                 r == 0 ? "" : ",\n", r, r);
    std::fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"compute\"}},\n", r);
    std::fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":\"communication\"}}", r);
    std::string ev(all.data() + static_cast<size_t>(r) * padded.size());  // up to its NUL
    const std::string pid = std::to_string(r);
    for (size_t at = ev.find("PID"); at != std::string::npos; at = ev.find("PID", at + pid.size()))
      ev.replace(at, 3, pid);
    if (!ev.empty()) std::fprintf(f, ",\n%s", ev.c_str());
  }
  std::fputs("\n]}\n", f);
  return std::fclose(f) == 0;
}

}  // namespace chorus::ddp::trainer
