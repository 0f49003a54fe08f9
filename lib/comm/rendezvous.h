// Rendezvous: how the ranks of a communicator meet again without it, to form a new one (chorusCommSplit,
// chorusCommShrink) — also when it has failed, and with no new unique id. See Note [Rendezvous] in the .cc.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/socket.h"
#include "lib/comm/bootstrap.h"

namespace chorus {

class Rendezvous {
 public:
  // Reserves this rank's port on the interface CHORUS_SOCKET_IFNAME chooses; *address gets its sockaddr for the
  // bootstrap table.
  Rendezvous(const std::string& socketIfname, std::vector<uint8_t>* address);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  // This rank, the communicator's identity and every rank's listener, from the bootstrap table.
  void setMembers(int rank, uint64_t secret, uint64_t commId, const std::vector<RankInfo>& ranks);

  // Starts the next round about `purpose` and `detail` (the excluded ranks): they and the number of earlier rounds
  // about them make the round's secret, so ranks that disagree on them cannot join one another's root.
  void beginRound(const std::string& purpose, const std::vector<int32_t>& detail);
  // The round's root for one new communicator, hosted on `host`'s port: when this rank is the host it listens
  // there, and a thread of its own serves that communicator's creation. `memberGone` (Note [Members gone]) goes
  // with the root to the root's thread and to this rank's join.
  UniqueIdData root(int host, int32_t part, double timeoutSec, std::function<std::string(int member)> memberGone);
  // After this rank's part in a root's communicator (formed or failed): waits for the root this rank hosted, if
  // any, to finish, and takes its port back without listening on it.
  void endRoot();

 private:
  uint64_t secretFor(int32_t part) const;

  Fd socket_;          // bound to this rank's port; listening only while root_ runs (then root_ holds it)
  SockAddr bound_;
  std::thread root_;
  int rank_ = -1;
  uint64_t secret_ = 0, commId_ = 0;
  std::vector<SockAddr> at_;     // every rank's listener
  std::map<std::string, uint64_t> rounds_;  // rounds begun, by subject
  std::vector<uint8_t> roundKey_;           // of the current round
};

}  // namespace chorus
