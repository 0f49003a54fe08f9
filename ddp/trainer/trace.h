// A Chrome/Perfetto trace ("Trace Event Format" JSON) of one rank's compute and communication, gathered to
// rank 0 and written there as one file: one process per rank, thread 1 compute, thread 2 communication.
#pragma once

#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::ddp::trainer {

class Trace {
 public:
  // Events are timed in microseconds from `epoch` (a clock reading every rank takes right after a barrier).
  explicit Trace(double epochUs) : epoch_(epochUs) {}
  void compute(const std::string& name, double startUs, double endUs) { add(name, 1, startUs, endUs); }
  void comm(const std::string& name, double startUs, double endUs) { add(name, 2, startUs, endUs); }
  // Collective: gathers every rank's events and writes them on rank 0. Returns false (with a message on
  // stderr) if the file cannot be written.
  bool write(chorusComm_t comm, const std::string& path) const;

 private:
  void add(const std::string& name, int tid, double startUs, double endUs);
  double epoch_;
  std::string events_;  // JSON objects, comma-separated, without the pid (added when gathered)
};

double nowUs();  // steady clock, microseconds

}  // namespace chorus::ddp::trainer
