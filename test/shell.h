// Running a command line from a test (multi-process runs through chorusrun), output captured.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace chorus::test {

struct RunResult {
  int status = -1;  // exit status, 128 + signal when killed
  std::string output;  // stdout and stderr
};

inline RunResult runShell(const std::string& cmd) {
  RunResult r;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.output.append(buf, n);
  int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

// How many times `what` occurs in `text` (log lines counted in a run's output).
inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The build directory (meson sets TEST_BUILD_DIR), where scripts/chorusrun and the bench binaries are.
inline std::string buildDir() {
  const char* d = std::getenv("TEST_BUILD_DIR");
  return d ? d : ".";
}

}  // namespace chorus::test
