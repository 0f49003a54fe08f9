// Exported functions: collectives, point-to-point (ordered and tagged), barrier, groups. Each validates every argument on the
// calling thread (errors name the argument, its value and the rank), then issues or records the call.
// (Made reduction ops are lib/api/api_redop.cc's.)
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "lib/api/api_guard.h"
#include "lib/comm/comm.h"
#include "lib/comm/devices.h"
#include "lib/api/group.h"
#include "lib/kernels/reduce.h"
#include "lib/mem/space.h"
#include "lib/api/registry.h"
#include "lib/comm/stream.h"
#include "lib/comm/tagged.h"

using namespace chorus;
using chorus::CollArgs;

namespace {

struct Check {
  Comm& comm;
  const char* fn;

  template <typename... Args>
  [[noreturn]] void bad(chorusResult_t code, fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(code, fmt::format("{} on rank {}: {}", fn, comm.rank(), fmt::format(f, std::forward<Args>(args)...)));
  }
  size_t dtype(const chorusDataType_t& dt) const {
    int v = rawEnum(dt);
    if (v < 0 || v > chorusBfloat16) bad(chorusInvalidArgument, "datatype={} is not a chorusDataType_t", v);
    return kernels::dataTypeSize(dt);
  }
  // A built-in op, or one of this communicator's ops of chorusRedOpCreatePreMulSum (Note [Made ops]), as the
  // CollArgs fields it becomes; dt was checked before.
  struct Op {
    chorusRedOp_t op = chorusSum;
    bool preMul = false;
    uint64_t scalar = 0;
  };
  Op op(const chorusRedOp_t& o, chorusDataType_t dt) const {
    const int v = rawEnum(o);
    if (v < 0) bad(chorusInvalidArgument, "op={} is not a chorusRedOp_t", v);
    if (v < chorusNumOps) {
      if (kernels::isBitwise(o) && !kernels::isInteger(dt))
        bad(chorusInvalidArgument, "op={} ({}) takes integer datatypes only, but datatype={} ({})", v,
            kernels::redOpName(o), static_cast<int>(dt), kernels::dataTypeName(dt));
      if (o == chorusAvg && (dt == chorusFloat16 || dt == chorusBfloat16))  // Note [PreMulSum]
        return {.op = chorusAvg, .preMul = true, .scalar = kernels::avgScalar(dt, comm.nranks())};
      return {.op = o};
    }
    const std::optional<PreMulSumOp> made = comm.madeOps().find(o);
    if (!made)
      bad(chorusInvalidArgument, "op={} is neither a chorusRedOp_t nor an op of this communicator (destroyed by "
          "chorusRedOpDestroy, made on another communicator, or never made)", v);
    if (made->dtype != dt)
      bad(chorusInvalidArgument, "op={} was made for datatype={} ({}) by chorusRedOpCreatePreMulSum, but "
          "datatype={} ({})", v, static_cast<int>(made->dtype), kernels::dataTypeName(made->dtype),
          static_cast<int>(dt), kernels::dataTypeName(dt));
    return {.op = chorusSum, .preMul = true, .scalar = made->scalar};
  }
  // Per-rank counts (AllGatherV, ReduceScatterV): nranks entries, packed blocks in rank order. In bytes: the
  // blocks in all, and this rank's (its offset and length).
  struct Blocks {
    size_t count = 0;  // elements in all
    size_t total = 0, mineAt = 0, mine = 0;
  };
  Blocks blocks(const size_t* counts, size_t es) const {
    const size_t n = static_cast<size_t>(comm.nranks()), me = static_cast<size_t>(comm.rank());
    if (counts == nullptr) bad(chorusInvalidArgument, "recvcounts is NULL (it needs nranks={} entries)", n);
    size_t sum = 0, before = 0;
    for (size_t p = 0; p < n; ++p) {
      if (p == me) before = sum;
      if (__builtin_add_overflow(sum, counts[p], &sum))
        bad(chorusInvalidArgument, "recvcounts[0] + ... + recvcounts[{}] overflows", p);
    }
    return {.count = sum,
            .total = bytes(sum, es, 1, "the sum of recvcounts"),
            .mineAt = before * es,
            .mine = counts[me] * es};
  }
  void rank(int r, const char* name) const {
    if (r < 0 || r >= comm.nranks())
      bad(chorusInvalidArgument, "{}={} is outside [0, nranks={})", name, r, comm.nranks());
  }
  // count * elemSize * factor, refusing overflow (checked multiplies: a division per call costs more).
  size_t bytes(size_t count, size_t es, size_t factor, const char* countName) const {
    size_t perElem = 0, n = 0;
    if (__builtin_mul_overflow(es, factor, &perElem) || __builtin_mul_overflow(count, perElem, &n))
      bad(chorusInvalidArgument, "{}={} elements of {} bytes overflows the address space", countName, count, es);
    return n;
  }
  void ptr(const void* p, const char* name, size_t nbytes) const {
    if (p == nullptr && nbytes > 0) bad(chorusInvalidArgument, "{} is NULL with {} bytes to access", name, nbytes);
  }
  // Where the call's buffers live (Note [Memory spaces]): host memory or the communicator's device, both in the
  // same one. A buffer the call does not use is passed as nullptr; bytes: the call's element bytes (n).
  mem::Space space(size_t bytes, const void* send, const void* recv) const {
    if (bytes == 0) return {};  // a call that moves nothing touches neither buffer
    if (!mem::anyDevices() && !deviceRuntimeAppeared()) return {};  // Note [A driver loaded later]
    const mem::Space s = mem::classify(send), r = mem::classify(recv);
    usable(s, "sendbuff", send);
    usable(r, "recvbuff", recv);
    if (s == r) return fits(s, "sendbuff", send);
    if (send != nullptr && recv != nullptr)
      bad(chorusInvalidArgument, "sendbuff {} is {} memory but recvbuff {} is {} memory: both must be in one memory "
          "space", send, s.name(), recv, r.name());
    return send != nullptr ? fits(s, "sendbuff", send) : fits(r, "recvbuff", recv);
  }
  // With a device runtime, "host memory" is also what it says of a freed device buffer, which the CPU would fault
  // on: such a buffer is refused, not read (one probe of its first byte, only in processes with a runtime).
  void usable(const mem::Space& s, const char* name, const void* p) const {
    chorusResult_t code = chorusInvalidArgument;
    if (s.isHost()) {
      if (p != nullptr && !mem::readable(p))
        bad(chorusInvalidArgument, "{} {} is neither host memory this process can read nor memory of a {} device "
            "(freed, or not a buffer)", name, p, mem::runtime()->name());
    } else if (const char* why = s.device()->unusable(&code)) {
      bad(code, "{} {} is {} memory, which this process cannot use: {}", name, p, s.name(), why);
    }
  }
  const mem::Space& fits(const mem::Space& s, const char* name, const void* p) const {
    if (s.isHost()) return s;
    if (s != comm.space())
      bad(chorusInvalidArgument, "{} {} is {} memory, but this communicator works on {}{}", name, p, s.name(),
          comm.space().name(), comm.space().isHost() ? " memory only (no device was current at its creation)" : "");
    return s;
  }
  // Buffers must be disjoint unless send begins exactly at inPlaceAt (the NCCL in-place position).
  void overlap(const void* send, size_t sendBytes, const void* recv, size_t recvBytes, const void* inPlaceAt) const {
    auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
    if (sendBytes == 0 || recvBytes == 0 || s + sendBytes <= r || r + recvBytes <= s) return;
    if (inPlaceAt != nullptr && send == inPlaceAt) return;
    bad(chorusInvalidArgument, "sendbuff {} and recvbuff {} overlap without being in place{}", send, recv,
        inPlaceAt ? fmt::format(" (in place means sendbuff == {})", inPlaceAt) : std::string(" (not allowed here)"));
  }
};

// A template, not a std::function: the validators capture more than std::function stores without allocating,
// and a malloc/free pair per call was 4% of an 8-byte AllReduce.
template <typename Validate>
chorusResult_t submit(chorusComm_t commHandle, const char* fn, chorusStream_t stream, const Validate& validate) {
  return apiCall(commHandle, [&] {
    CallRef ref(commHandle, "comm");
    Check check{*ref, fn};
    checkStream(stream, *ref);
    CollArgs args = validate(check);
    if (groupRecord(&*ref, args, stream)) return;
    issue(*ref, std::span<const CollArgs>(&args, 1), std::span<const chorusStream_t>(&stream, 1));
  });
}

// A tagged send or receive (lib/comm/tagged.h): posted to the communicator's matching in issue order; blocking
// without a stream, else finished on the stream once it completes.
chorusResult_t submitTagged(chorusComm_t commHandle, const char* fn, chorusStream_t stream, bool isRecv, void* buf,
                            size_t count, chorusDataType_t datatype, int peer, int tag, int* source) {
  return apiCall(commHandle, [&] {
    CallRef ref(commHandle, "comm");
    Comm& comm = *ref;
    Check c{comm, fn};
    checkStream(stream, comm);
    const size_t n = c.bytes(count, c.dtype(datatype), 1, "count");
    if (!isRecv || peer != CHORUS_ANY_SOURCE) c.rank(peer, "peer");
    if (tag < 0) c.bad(chorusInvalidArgument, "tag={} is negative", tag);
    c.ptr(buf, isRecv ? "recvbuff" : "sendbuff", n);
    if (!c.space(n, isRecv ? nullptr : buf, isRecv ? buf : nullptr).isHost())
      c.bad(chorusInvalidArgument, "{} {} is device memory; tagged point-to-point moves host memory only",
            isRecv ? "recvbuff" : "sendbuff", buf);
    if (groupDepth() > 0)
      c.bad(chorusInvalidUsage, "tagged point-to-point is not grouped (a group is open): it never deadlocks, so "
            "call it outside chorusGroupStart/End, with a stream to overlap it");
    auto op = std::make_unique<TaggedOp>();
    op->isRecv = isRecv;
    op->peer = peer;
    op->tag = tag;
    op->buf = buf;
    op->bytes = n;
    op->source = source;
    if (stream == nullptr) {
      struct Outcome {
        bool done = false;
        chorusResult_t rc = chorusSuccess;
        std::string text;
      };
      const TaggedOp named = *op;  // for an error's text only (formatted then)
      auto out = std::make_shared<Outcome>();
      op->onDone = [out](chorusResult_t rc, const std::string& text) {
        out->done = true;
        out->rc = rc;
        out->text = text;
      };
      comm.executor().runBlocking([&] {
        comm.tagged().post(std::move(op));
        comm.waitFor([&] { return out->done; }, [&] { return describe(named); });
      });
      if (out->rc != chorusSuccess) throw Error(out->rc, out->text);
      return;
    }
    // The stream counts the operation from its posting (inside the queued task, so before the task's own count
    // ends) until it finishes; a task that never runs (the communicator failed first) reports through the task.
    op->onDone = [stream](chorusResult_t rc, const std::string& text) { stream->finish(rc, text); };
    comm.executor().enqueue(
        [&comm, stream, op = std::move(op)]() mutable {
          stream->add();
          comm.tagged().post(std::move(op));
        },
        std::span<chorusStream* const>(&stream, 1),
        stream->device == nullptr ? Executor::Launch::kDefer : Executor::Launch::kWake);
  });
}

}  // namespace

extern "C" {

chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                               chorusRedOp_t op, chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusAllReduce", stream, [&](const Check& c) {
    size_t n = c.bytes(count, c.dtype(datatype), 1, "count");
    const Check::Op o = c.op(op, datatype);
    c.ptr(sendbuff, "sendbuff", n);
    c.ptr(recvbuff, "recvbuff", n);
    c.overlap(sendbuff, n, recvbuff, n, recvbuff);
    return CollArgs{.kind = OpKind::AllReduce, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                    .dtype = datatype, .op = o.op, .preMul = o.preMul, .space = c.space(n, sendbuff, recvbuff),
                    .scalar = o.scalar};
  });
}

chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                               chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusBroadcast", stream, [&](const Check& c) {
    size_t n = c.bytes(count, c.dtype(datatype), 1, "count");
    c.rank(root, "root");
    if (c.comm.rank() == root) {
      c.ptr(sendbuff, "sendbuff (on the root)", n);
      c.overlap(sendbuff, n, recvbuff, n, recvbuff);
    }
    c.ptr(recvbuff, "recvbuff", n);
    return CollArgs{.kind = OpKind::Broadcast, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                    .dtype = datatype, .root = root,
                    .space = c.space(n, c.comm.rank() == root ? sendbuff : nullptr, recvbuff)};
  });
}

chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                            chorusRedOp_t op, int root, chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusReduce", stream, [&](const Check& c) {
    size_t n = c.bytes(count, c.dtype(datatype), 1, "count");
    const Check::Op o = c.op(op, datatype);
    c.rank(root, "root");
    c.ptr(sendbuff, "sendbuff", n);
    if (c.comm.rank() == root) {
      c.ptr(recvbuff, "recvbuff (on the root)", n);
      c.overlap(sendbuff, n, recvbuff, n, recvbuff);
    }
    return CollArgs{.kind = OpKind::Reduce, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                    .dtype = datatype, .op = o.op, .root = root, .preMul = o.preMul,
                    .space = c.space(n, sendbuff, c.comm.rank() == root ? recvbuff : nullptr), .scalar = o.scalar};
  });
}

chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, chorusDataType_t datatype,
                               chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusAllGather", stream, [&](const Check& c) {
    size_t es = c.dtype(datatype);
    size_t n = c.bytes(sendcount, es, 1, "sendcount");
    size_t total = c.bytes(sendcount, es, static_cast<size_t>(c.comm.nranks()), "sendcount");
    c.ptr(sendbuff, "sendbuff", n);
    c.ptr(recvbuff, "recvbuff", total);
    c.overlap(sendbuff, n, recvbuff, total, static_cast<const char*>(recvbuff) + static_cast<size_t>(c.comm.rank()) * n);
    return CollArgs{.kind = OpKind::AllGather, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = sendcount,
                    .dtype = datatype, .space = c.space(n, sendbuff, recvbuff)};
  });
}

chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, chorusDataType_t datatype,
                                   chorusRedOp_t op, chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusReduceScatter", stream, [&](const Check& c) {
    size_t es = c.dtype(datatype);
    size_t n = c.bytes(recvcount, es, 1, "recvcount");
    size_t total = c.bytes(recvcount, es, static_cast<size_t>(c.comm.nranks()), "recvcount");
    const Check::Op o = c.op(op, datatype);
    c.ptr(sendbuff, "sendbuff", total);
    c.ptr(recvbuff, "recvbuff", n);
    // In place means recvbuff == sendbuff + rank*recvcount; express it as "send starts where it must".
    const char* inPlaceSend = static_cast<const char*>(recvbuff) - static_cast<size_t>(c.comm.rank()) * n;
    c.overlap(sendbuff, total, recvbuff, n, inPlaceSend);
    return CollArgs{.kind = OpKind::ReduceScatter, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = recvcount,
                    .dtype = datatype, .op = o.op, .preMul = o.preMul, .space = c.space(n, sendbuff, recvbuff),
                    .scalar = o.scalar};
  });
}

chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                            chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusGather", stream, [&](const Check& c) {
    const size_t es = c.dtype(datatype);
    const size_t n = c.bytes(count, es, 1, "count");
    const size_t total = c.bytes(count, es, static_cast<size_t>(c.comm.nranks()), "count");
    c.rank(root, "root");
    c.ptr(sendbuff, "sendbuff", n);
    const bool isRoot = c.comm.rank() == root;
    if (isRoot) {
      c.ptr(recvbuff, "recvbuff (on the root)", total);
      c.overlap(sendbuff, n, recvbuff, total, static_cast<const char*>(recvbuff) + static_cast<size_t>(root) * n);
    }
    return CollArgs{.kind = OpKind::Gather, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                    .dtype = datatype, .root = root, .space = c.space(n, sendbuff, isRoot ? recvbuff : nullptr)};
  });
}

chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                             chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusScatter", stream, [&](const Check& c) {
    const size_t es = c.dtype(datatype);
    const size_t n = c.bytes(count, es, 1, "count");
    const size_t total = c.bytes(count, es, static_cast<size_t>(c.comm.nranks()), "count");
    c.rank(root, "root");
    c.ptr(recvbuff, "recvbuff", n);
    const bool isRoot = c.comm.rank() == root;
    if (isRoot) {
      c.ptr(sendbuff, "sendbuff (on the root)", total);
      // In place means recvbuff == sendbuff + root*count: "send starts where it must".
      c.overlap(sendbuff, total, recvbuff, n, static_cast<const char*>(recvbuff) - static_cast<size_t>(root) * n);
    }
    return CollArgs{.kind = OpKind::Scatter, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                    .dtype = datatype, .root = root, .space = c.space(n, isRoot ? sendbuff : nullptr, recvbuff)};
  });
}

chorusResult_t chorusAllGatherV(const void* sendbuff, void* recvbuff, const size_t recvcounts[],
                                chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusAllGatherV", stream, [&](const Check& c) {
    const Check::Blocks b = c.blocks(recvcounts, c.dtype(datatype));
    c.ptr(sendbuff, "sendbuff", b.mine);
    c.ptr(recvbuff, "recvbuff", b.total);
    c.overlap(sendbuff, b.mine, recvbuff, b.total, static_cast<const char*>(recvbuff) + b.mineAt);
    return CollArgs{.kind = OpKind::AllGatherV, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = b.count,
                    .dtype = datatype, .space = c.space(b.total, b.mine ? sendbuff : nullptr, recvbuff),
                    .layout = std::vector<size_t>(recvcounts, recvcounts + c.comm.nranks())};
  });
}

chorusResult_t chorusReduceScatterV(const void* sendbuff, void* recvbuff, const size_t recvcounts[],
                                    chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                    chorusStream_t stream) {
  return submit(comm, "chorusReduceScatterV", stream, [&](const Check& c) {
    const Check::Blocks b = c.blocks(recvcounts, c.dtype(datatype));
    const Check::Op o = c.op(op, datatype);
    c.ptr(sendbuff, "sendbuff", b.total);
    c.ptr(recvbuff, "recvbuff", b.mine);
    // In place means recvbuff is this rank's block of sendbuff; a NULL recvbuff (an empty block) never is.
    if (b.mine > 0) c.overlap(sendbuff, b.total, recvbuff, b.mine, static_cast<const char*>(recvbuff) - b.mineAt);
    return CollArgs{.kind = OpKind::ReduceScatterV, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = b.count,
                    .dtype = datatype, .op = o.op, .preMul = o.preMul,
                    .space = c.space(b.total, sendbuff, b.mine ? recvbuff : nullptr),
                    .layout = std::vector<size_t>(recvcounts, recvcounts + c.comm.nranks()), .scalar = o.scalar};
  });
}

chorusResult_t chorusAllToAll(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                              chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusAllToAll", stream, [&](const Check& c) {
    size_t total = c.bytes(count, c.dtype(datatype), static_cast<size_t>(c.comm.nranks()), "count");
    c.ptr(sendbuff, "sendbuff", total);
    c.ptr(recvbuff, "recvbuff", total);
    c.overlap(sendbuff, total, recvbuff, total, nullptr);
    return CollArgs{.kind = OpKind::AllToAll, .sendbuff = sendbuff, .recvbuff = recvbuff, .count = count,
                    .dtype = datatype, .space = c.space(total, sendbuff, recvbuff)};
  });
}

chorusResult_t chorusAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[], void* recvbuff,
                               const size_t recvcounts[], const size_t rdispls[], chorusDataType_t datatype,
                               chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusAllToAllv", stream, [&](const Check& c) {
    const size_t es = c.dtype(datatype), n = static_cast<size_t>(c.comm.nranks()), me = static_cast<size_t>(c.comm.rank());
    const size_t* arrays[] = {sendcounts, sdispls, recvcounts, rdispls};
    const char* names[] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};
    for (int i = 0; i < 4; ++i)
      if (arrays[i] == nullptr) c.bad(chorusInvalidArgument, "{} is NULL (it needs nranks={} entries)", names[i], n);
    // The bytes from each buffer's start to the end of its farthest block, refusing overflow.
    auto extent = [&](const size_t* counts, const size_t* displs, const char* what) {
      size_t end = 0;
      for (size_t p = 0; p < n; ++p) {
        if (counts[p] == 0) continue;
        size_t last = 0;
        if (__builtin_add_overflow(displs[p], counts[p], &last))
          c.bad(chorusInvalidArgument, "{}[{}] + its count overflows", what, p);
        end = std::max(end, c.bytes(last, es, 1, what));
      }
      return end;
    };
    const size_t sendBytes = extent(sendcounts, sdispls, "sdispls"), recvBytes = extent(recvcounts, rdispls, "rdispls");
    if (sendcounts[me] != recvcounts[me])
      c.bad(chorusInvalidArgument, "sendcounts[{}]={} but recvcounts[{}]={}: the block a rank sends itself is the one "
            "it receives", me, sendcounts[me], me, recvcounts[me]);
    c.ptr(sendbuff, "sendbuff", sendBytes);
    c.ptr(recvbuff, "recvbuff", recvBytes);
    c.overlap(sendbuff, sendBytes, recvbuff, recvBytes, nullptr);
    CollArgs a{.kind = OpKind::AllToAllv, .sendbuff = sendbuff, .recvbuff = recvbuff, .dtype = datatype,
               .space = c.space(std::max(sendBytes, recvBytes), sendBytes ? sendbuff : nullptr,
                                recvBytes ? recvbuff : nullptr)};
    a.layout.reserve(4 * n);
    for (const size_t* v : arrays) a.layout.insert(a.layout.end(), v, v + n);
    return a;
  });
}

chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer, chorusComm_t comm,
                          chorusStream_t stream) {
  return submit(comm, "chorusSend", stream, [&](const Check& c) {
    size_t n = c.bytes(count, c.dtype(datatype), 1, "count");
    c.rank(peer, "peer");
    if (peer == c.comm.rank() && groupDepth() == 0)
      c.bad(chorusInvalidUsage, "peer={} is this rank itself: a Send to self needs its Recv in the same group", peer);
    c.ptr(sendbuff, "sendbuff", n);
    return CollArgs{.kind = OpKind::Send, .sendbuff = sendbuff, .count = count, .dtype = datatype, .root = peer,
                    .space = c.space(n, sendbuff, nullptr)};
  });
}

chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer, chorusComm_t comm,
                          chorusStream_t stream) {
  return submit(comm, "chorusRecv", stream, [&](const Check& c) {
    size_t n = c.bytes(count, c.dtype(datatype), 1, "count");
    c.rank(peer, "peer");
    if (peer == c.comm.rank() && groupDepth() == 0)
      c.bad(chorusInvalidUsage, "peer={} is this rank itself: a Recv from self needs its Send in the same group", peer);
    c.ptr(recvbuff, "recvbuff", n);
    return CollArgs{.kind = OpKind::Send, .recvbuff = recvbuff, .count = count, .dtype = datatype, .root = peer,
                    .isRecv = true, .space = c.space(n, nullptr, recvbuff)};
  });
}

chorusResult_t chorusSendTagged(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer, int tag,
                                chorusComm_t comm, chorusStream_t stream) {
  return submitTagged(comm, "chorusSendTagged", stream, false, const_cast<void*>(sendbuff), count, datatype, peer,
                      tag, nullptr);
}

chorusResult_t chorusRecvTagged(void* recvbuff, size_t count, chorusDataType_t datatype, int peer, int tag,
                                int* source, chorusComm_t comm, chorusStream_t stream) {
  return submitTagged(comm, "chorusRecvTagged", stream, true, recvbuff, count, datatype, peer, tag, source);
}

chorusResult_t chorusBarrier(chorusComm_t comm, chorusStream_t stream) {
  return submit(comm, "chorusBarrier", stream, [&](const Check&) {
    return CollArgs{.kind = OpKind::Barrier, .dtype = chorusUint8};
  });
}

chorusResult_t chorusGroupStart(void) {
  return apiCall(nullptr, [] { groupStart(); });
}

chorusResult_t chorusGroupEnd(void) {
  return apiCall(nullptr, [] { groupEnd(); });
}

}  // extern "C"
