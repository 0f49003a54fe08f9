// Rendezvous: how the ranks of a communicator meet again without it, to form a new one (chorusCommSplit,
// chorusCommShrink) — also when it has failed, and with no new unique id. See Note [Rendezvous] in the .cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/base/socket.h"
#include "lib/comm/bootstrap.h"

namespace chorus {

class Rendezvous {
 public:
  // Opens this rank's listener on the interface CHORUS_SOCKET_IFNAME chooses; *address gets its sockaddr for the
  // bootstrap table.
  Rendezvous(const std::string& socketIfname, std::vector<uint8_t>* address);
  // This rank, the communicator's identity and every rank's listener, from the bootstrap table.
  void setMembers(int rank, uint64_t secret, uint64_t commId, const std::vector<RankInfo>& ranks);

  // Starts the next round about `purpose` and `detail` (the excluded ranks): they and the number of earlier rounds
  // about them make the round's secret, so ranks that disagree on them cannot join one another's root.
  void beginRound(const std::string& purpose, const std::vector<int32_t>& detail);
  // The round's root for one new communicator, hosted on `host`'s listener: this rank starts it when it is the
  // host (a thread that serves that communicator's creation, then exits).
  UniqueIdData root(int host, int32_t part, double timeoutSec);

 private:
  uint64_t secretFor(int32_t part) const;

  Fd listener_;
  int rank_ = -1;
  uint64_t secret_ = 0, commId_ = 0;
  std::vector<SockAddr> at_;     // every rank's listener
  std::map<std::string, uint64_t> rounds_;  // rounds begun, by subject
  std::vector<uint8_t> roundKey_;           // of the current round
};

}  // namespace chorus
