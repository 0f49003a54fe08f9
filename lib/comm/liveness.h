// Note [Liveness]: a peer that stops answering without dying (SIGSTOP, a frozen host, a cut link, total loss) is
// declared silent within CHORUS_PEER_TIMEOUT seconds, whatever the ranks are doing, by heartbeats that a thread of
// the communicator's own sends: a rank computing for minutes keeps beating. Each rank sends a UDP datagram every
// period (a tenth of the timeout, at most 1 s) to the next kWatchers ranks of the ring and watches the kWatchers
// before it; a watcher that hears nothing from a rank for the timeout declares it, fails its own communicator, and
// sends a notice to every rank, every period from then on, so that ranks that do not watch it (and ranks behind a
// cut that lost the first notices) learn it too. A rank that receives a notice fails the same way, naming the
// silent rank, who saw it, and what each was doing (heartbeats carry the sender's current or last operation). A
// rank that destroys its communicator says goodbye, so that its watchers do not take a normal exit for silence.
// Datagrams carry the communicator's id and a MAC keyed by its secret; anything else is dropped. A watched rank
// never heard from at all is taken for a network that blocks UDP, not for a stopped peer: it is logged and left
// unwatched (CHORUS_PEER_TIMEOUT=0 turns heartbeats off). Heartbeats also catch mismatched calls that no
// message would: a rank whose watched peer reports being in another collective of the same call number (a
// Broadcast where it runs an AllReduce whose algorithm never receives from that peer) fails within a period.
//
// Why 30 s by default: longer than the stalls a healthy job sees (a swap storm, a VM paused for migration, a
// loaded host starving a thread for seconds), far below CHORUS_TIMEOUT's 600 s, and on the order of what users of
// NCCL and torch.distributed wait before they suspect a hang.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/ops.h"
#include "lib/base/socket.h"

namespace chorus {

// What a rank is doing, as its heartbeats report it: the operation it runs, or the last one it finished.
struct Activity {
  OpKind kind = OpKind::None;
  uint64_t seq = 0;
  bool running = false;
  uint64_t pack() const { return seq << 9 | static_cast<uint64_t>(kind) << 1 | (running ? 1 : 0); }
  static Activity unpack(uint64_t v) {
    return {static_cast<OpKind>((v >> 1) & 0xff), v >> 9, (v & 1) != 0};
  }
  std::string describe() const;  // "in AllReduce #12", "idle after Broadcast #11", "idle before any call"
};

class Liveness {
 public:
  struct Member {
    std::string name;               // "rank 2 (pid 123 on host-b)"
    std::vector<uint8_t> address;   // its heartbeat socket (a sockaddr), from the bootstrap
  };
  struct Identity {
    int rank = 0;
    uint64_t commId = 0;
    uint64_t secret = 0;
  };
  // Called once, on the liveness thread, with the error that fails the communicator.
  using OnSilent = std::function<void(chorusResult_t code, const std::string& why)>;

  // A UDP socket on the interface CHORUS_SOCKET_IFNAME selects; `address` gets its sockaddr for the bootstrap.
  static Fd openSocket(const std::string& ifnameSpec, std::vector<uint8_t>* address);
  // Starts the thread. `activity` is read on every heartbeat (Activity::pack).
  Liveness(Fd socket, Identity me, std::vector<Member> members, double timeoutSec,
           const std::atomic<uint64_t>* activity, OnSilent onSilent);
  ~Liveness();  // says goodbye to the watchers and ends the thread
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  static constexpr int kWatchers = 2;
  // The rank declared silent, by this rank or by a notice (any thread); -1 while none is.
  int silent() const { return silent_.load(std::memory_order_acquire); }

 private:
  struct Datagram;
  void run();
  void heartbeat();  // to the ranks that watch this one
  void send(int to, uint8_t type, int about, Activity aboutState, uint32_t silentMs);
  void receive();
  void declare(int silent, const std::string& why);

  Fd sock_;
  Fd stopFd_;
  Identity me_;
  std::vector<Member> members_;
  double timeoutSec_;
  const std::atomic<uint64_t>* activity_;
  OnSilent onSilent_;
  void checkSameCall(size_t from, const Activity& theirs);
  uint8_t key_[32] = {};
  uint64_t counter_ = 0;
  std::vector<uint64_t> lastCounter_;  // per sender: datagrams at or below it are replays
  std::vector<Clock::time_point> lastHeard_;
  std::vector<uint64_t> lastState_;    // Activity::pack of each rank's last heartbeat
  std::vector<bool> gone_;             // said goodbye (or never heard from: not watched)
  std::vector<bool> heard_;            // at least one heartbeat arrived
  std::atomic<int> silent_{-1};        // declared (by us or a notice)
  bool mismatched_ = false;            // a heartbeat showed a peer in another collective of the same call
  Activity silentState_;
  uint32_t silentMs_ = 0;
  std::thread thread_;
};

}  // namespace chorus
