// chorusStream: collects completion and the first error of the work enqueued on it. Ordering is the
// communicator's job (lib/comm/executor.h), not the stream's; a stream made from a device's stream also orders its
// work with that stream's (Note [Device streams]).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "lib/comm/executor.h"
#include "lib/mem/space.h"

namespace chorus {
class Comm;
}

struct chorusStream {
  explicit chorusStream(chorus::Comm* c, std::unique_ptr<chorus::mem::DeviceStream> d = nullptr)
      : comm(c), device(std::move(d)) {}
  chorus::Comm* comm;
  std::unique_ptr<chorus::mem::DeviceStream> device;  // chorusStreamCreateFromCuda's; nullptr for a host stream
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  chorusResult_t error = chorusSuccess;
  std::string message;

  bool idle();  // nothing pending
  void add();
  void finish(chorusResult_t rc, const std::string& msg);
  chorusResult_t waitAll(std::string* msg);
  chorusResult_t query(std::string* msg);
};

namespace chorus {
// fn as enqueued on `streams`: when some of them follow a device stream, it runs once the device work queued on
// those before this call is done, and the device work queued after waits until fn has finished (or failed).
// Called on the issuing thread, in issue order; never blocks.
// The device runtime's stream `native`, for a chorusStream of comm; refuses (naming it) one of another device.
std::unique_ptr<mem::DeviceStream> openDeviceStream(Comm& comm, void* native);
Executor::Fn orderWithDevices(Comm& comm, Executor::Fn fn, std::span<chorusStream* const> streams);
// Before a blocking call on device memory: waits for the work queued on the default stream of comm's device (Note
// [The default stream]). Any thread.
void followDefaultStream(Comm& comm);
}  // namespace chorus
