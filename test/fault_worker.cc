// fault_worker: one rank of scripts/fault_campaign.py's workload (issue 16), run under scripts/netns-cluster.
// Checked AllReduces (int32, every element compared; the count changes from one iteration to the next, as a
// training step's buckets do) in lockstep until FAULT_ITERATIONS are done or a call fails.
// FAULT_KIND=mismatch makes rank FAULT_RANK call Broadcast instead at iteration FAULT_AT; FAULT_KIND=skip makes it
// skip that call. Writes to FAULT_OUT/rank-R.txt, one line each:
//   ready <t_ns> <fds> <threads>      the communicator is formed (CLOCK_MONOTONIC, as the campaign reads
//                                     it); fds and threads as they were before chorusCommInitFromEnv
//   fault <t_ns>                      this rank made the wrong call (mismatch, skip)
//   error <t_ns> <iteration> <rc> <text>   a call failed
//   wrong <iteration>                 a result was wrong
//   done <iterations>                 all iterations completed
//   left <fds> <threads>              after chorusCommAbort of a failed communicator (or destroy): compare with ready's
// SIGTERM is ignored (netns-cluster stops the other ranks when one dies; a survivor must report first). A call
// that cannot finish fails by CHORUS_TIMEOUT at the latest, which the campaign counts as a hang (with the flight
// recorder's dump in CHORUS_DEBUG_FILE).
#include <dirent.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace {

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int entries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

int main() {
  signal(SIGTERM, SIG_IGN);
  const int iterations = envInt("FAULT_ITERATIONS", 1000000);
  const std::string kind = std::getenv("FAULT_KIND") ? std::getenv("FAULT_KIND") : "";
  const int faultRank = envInt("FAULT_RANK", -1), faultAt = envInt("FAULT_AT", -1);
  const std::string out = std::string(std::getenv("FAULT_OUT") ? std::getenv("FAULT_OUT") : ".") + "/rank-" +
                          std::to_string(envInt("CHORUS_RANK", 0)) + ".txt";
  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) return 2;
  setvbuf(f, nullptr, _IOLBF, 0);
  const int fds0 = entries("/proc/self/fd"), threads0 = entries("/proc/self/task");  // before the library runs
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::fprintf(f, "error %lld -1 %d init: %s\n", (long long)nowNs(), 1, chorusGetLastError(nullptr));
    return 0;
  }
  int n = 0, rank = 0;
  chorusCommCount(comm, &n);
  chorusCommUserRank(comm, &rank);
  std::fprintf(f, "ready %lld %d %d\n", (long long)nowNs(), fds0, threads0);
  std::vector<int32_t> v;
  bool failed = false, wrong = false;
  for (int it = 1; it <= iterations && !wrong; ++it) {
    v.assign(997 + size_t(it % 13), 0);
    chorusResult_t rc;
    if (rank == faultRank && it == faultAt && kind == "skip") {
      std::fprintf(f, "fault %lld\n", (long long)nowNs());
      continue;
    }
    if (rank == faultRank && it == faultAt && kind == "mismatch") {
      std::fprintf(f, "fault %lld\n", (long long)nowNs());
      rc = chorusBroadcast(v.data(), v.data(), v.size(), chorusInt32, 0, comm, nullptr);
    } else {
      for (size_t i = 0; i < v.size(); ++i) v[i] = rank + it + int32_t(i);
      rc = chorusAllReduce(v.data(), v.data(), v.size(), chorusInt32, chorusSum, comm, nullptr);
    }
    if (rc != chorusSuccess) {
      std::string text = chorusGetLastError(comm);
      for (char& c : text)
        if (c == '\n') c = ' ';
      std::fprintf(f, "error %lld %d %d %s\n", (long long)nowNs(), it, int(rc), text.c_str());
      failed = true;
      break;
    }
    if (rank == faultRank && it == faultAt) continue;  // its Broadcast's result is not an AllReduce's
    for (size_t i = 0; i < v.size() && !wrong; ++i)
      if (v[i] != n * (it + int32_t(i)) + n * (n - 1) / 2) {
        std::fprintf(f, "wrong %d\n", it);
        wrong = true;
      }
  }
  if (!failed && !wrong) std::fprintf(f, "done %d\n", iterations);
  if (failed || wrong) chorusCommAbort(comm);
  else chorusCommDestroy(comm);
  usleep(200 * 1000);  // the library's threads of that communicator are joined by now; give a dump thread time
  std::fprintf(f, "left %d %d\n", entries("/proc/self/fd"), entries("/proc/self/task"));
  std::fclose(f);
  return 0;
}
