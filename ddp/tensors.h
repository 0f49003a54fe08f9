// What the DDP layer is handed (parameters, gradients, buffers as pointer + count + datatype) and the two
// collectives that construction needs: the cross-rank shape check and the broadcast from rank 0.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "chorus/chorus.h"

namespace chorus::ddp {

struct Tensor {
  void* data;
  size_t count;
  chorusDataType_t dtype;
  size_t bytes() const;
};

// Collective. Throws chorus::Error (chorusInvalidUsage, the same sentence on every rank) unless every rank
// holds as many tensors as rank 0 with the same counts and datatypes; the sentence names the first difference
// and both ranks (seed 000 §17.22: "DDP expects same model across all ranks"). `what`: "parameter", "buffer".
// A rank whose arguments were rejected passes its reason as `problem`: it takes part (so nobody waits for it),
// then throws chorusInvalidArgument with it, and the other ranks fail naming it.
void verifyAcrossRanks(chorusComm_t comm, std::span<const Tensor> list, const char* what, const char* fn,
                       const std::string& problem);

// Collective. Every tensor gets rank 0's values (one group of broadcasts).
void broadcastFromRoot(chorusComm_t comm, std::span<const Tensor> list);

// Throws chorus::Error with the communicator's last error when rc is not chorusSuccess.
void check(chorusComm_t comm, chorusResult_t rc, const char* what);

}  // namespace chorus::ddp
