/* Chorus: collective communication for CPU ranks, NCCL-shaped.
 *
 * Every function returns a chorusResult_t; on failure chorusGetLastError() gives a sentence that names the
 * argument (and rank/peer) at fault. Collectives on one communicator must be called by all ranks in the same
 * order; they execute in the order they were issued, whatever stream they were given.
 *
 * Streams: stream == NULL makes a call block until the operation is complete on this rank (buffers reusable on
 * return). A stream from chorusStreamCreate makes the call validate, enqueue and return at once; the buffers
 * must stay valid until chorusStreamSynchronize returns. chorusStreamCreateFromCuda's streams follow a CUDA
 * stream's order instead, as NCCL's calls do.
 *
 * Counts are in elements; count == 0 is a valid no-op; counts need not divide by nranks; any alignment.
 *
 * Errors: ranks whose calls differ (kind, count or counts, datatype, op or root) get chorusInvalidUsage naming
 * both ranks and both calls; a rank that only sends in that call (a Broadcast root, say) may complete it and get
 * the error from its next call. A peer that dies makes every rank's pending and later calls fail with chorusRemoteError
 * naming it. After such an error the communicator is unusable: destroy it (or abort it).
 */
#ifndef CHORUS_CHORUS_H
#define CHORUS_CHORUS_H

#include <stddef.h>

#if defined(_WIN32)
#define CHORUS_API
#else
#define CHORUS_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_MAJOR 0
#define CHORUS_MINOR 1
#define CHORUS_PATCH 0
#define CHORUS_VERSION_CODE (CHORUS_MAJOR * 10000 + CHORUS_MINOR * 100 + CHORUS_PATCH)

#define CHORUS_UNIQUE_ID_BYTES 128
typedef struct { char internal[CHORUS_UNIQUE_ID_BYTES]; } chorusUniqueId;
typedef struct chorusComm*   chorusComm_t;
typedef struct chorusStream* chorusStream_t;   /* NULL: the call blocks until complete */

typedef enum { chorusSuccess = 0, chorusUnhandledCudaError = 1, chorusSystemError = 2, chorusInternalError = 3,
               chorusInvalidArgument = 4, chorusInvalidUsage = 5, chorusRemoteError = 6, chorusInProgress = 7,
               chorusTimeout = 8 } chorusResult_t;
typedef enum { chorusInt8 = 0, chorusUint8 = 1, chorusInt32 = 2, chorusUint32 = 3, chorusInt64 = 4, chorusUint64 = 5,
               chorusFloat16 = 6, chorusFloat32 = 7, chorusFloat64 = 8, chorusBfloat16 = 9 } chorusDataType_t;
/* Band/Bor/Bxor: bitwise, integer datatypes only (others get chorusInvalidArgument). Avg of float16 and bfloat16
 * multiplies each input by 1/nranks (rounded to the type) before summing, as NCCL does, so that a sum beyond the
 * type's range cannot overflow; other types sum, then divide. chorusNumOps: the built-in ops end here; ops made by
 * chorusRedOpCreatePreMulSum take values from it upward. */
typedef enum { chorusSum = 0, chorusProd = 1, chorusMax = 2, chorusMin = 3, chorusAvg = 4, chorusBand = 5,
               chorusBor = 6, chorusBxor = 7, chorusNumOps = 8, chorusMaxRedOp = 0x7fffffff } chorusRedOp_t;

/* MAJOR*10000 + MINOR*100 + PATCH. Never blocks. */
CHORUS_API chorusResult_t chorusGetVersion(int* version);
/* Static text for a result code. Never blocks. */
CHORUS_API const char*    chorusGetErrorString(chorusResult_t result);
/* Last error text of comm; comm may be NULL: the last error of this thread. Never NULL ("" when none). Safe to
 * call from several threads at once: the text is the calling thread's own copy, valid until its next call. */
CHORUS_API const char*    chorusGetLastError(chorusComm_t comm);

/* Starts a root listener in this process (on CHORUS_SOCKET_IFNAME's address) for one communicator and fills
 * uniqueId with its address, a magic/version and a random secret. Pass the id to every rank. Never blocks. */
CHORUS_API chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId);
/* Collective over nranks ranks: blocks until every rank has joined and all connections are up. */
CHORUS_API chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank);
/* Settings of one communicator, over the environment's: start from CHORUS_CONFIG_INITIALIZER (which leaves every
 * field to the environment) and set what you need. timeoutSec: how long a call may make no progress before it
 * fails with chorusTimeout (CHORUS_TIMEOUT); initTimeoutSec: how long creation may take (CHORUS_INIT_TIMEOUT);
 * peerTimeoutSec: how long a peer may send no heartbeat before it is declared silent and the communicator fails
 * with chorusRemoteError naming it (CHORUS_PEER_TIMEOUT). 0 keeps the environment's; the bootstrap root of
 * chorusGetUniqueId keeps CHORUS_INIT_TIMEOUT. A config of the earlier layout (without peerTimeoutSec) is
 * accepted. */
typedef struct {
  size_t size;      /* sizeof(chorusConfig_t): set by the initializer */
  unsigned magic;   /* set by the initializer */
  double timeoutSec;
  double initTimeoutSec;
  double peerTimeoutSec;
} chorusConfig_t;
#define CHORUS_CONFIG_MAGIC 0x43686f72u
#define CHORUS_CONFIG_INITIALIZER {sizeof(chorusConfig_t), CHORUS_CONFIG_MAGIC, 0.0, 0.0, 0.0}
/* As chorusCommInitRank, with config's settings (NULL: the environment's only). */
CHORUS_API chorusResult_t chorusCommInitRankConfig(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank,
                                                   const chorusConfig_t* config);
/* Collective over comm's ranks, as ncclCommSplit: the ranks passing one color form a new communicator, ordered by
 * key and then by their rank in comm; a rank passing CHORUS_SPLIT_NOCOLOR joins none and gets *newcomm = NULL.
 * config NULL: the new communicators keep comm's settings. Works on a failed communicator too (every rank of comm
 * still calls it; rank 0 hosts the exchange of colors), without a new unique id. A rank whose color or config is
 * bad gets chorusInvalidArgument after still taking its part in the exchange, and every other rank then fails
 * with chorusRemoteError naming it, at once rather than at the creation timeout. */
#define CHORUS_SPLIT_NOCOLOR (-1)
CHORUS_API chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t* newcomm,
                                          const chorusConfig_t* config);
/* As ncclCommShrink: every rank of comm not in excludeRanksList (the same list, in any order, at each of them)
 * calls it, and they form a new communicator without the excluded ranks, keeping their order (ranks renumbered
 * to close the gaps), without a new unique id and with no process restarted; the excluded ranks do not call it.
 * comm may have failed (a dead peer, an abort): this is how survivors go on. CHORUS_SHRINK_ABORT first ends
 * comm's pending operations (they fail); either way comm stays to be destroyed or aborted afterwards. config
 * NULL: comm's settings. Bounded by the new communicator's creation timeout. */
#define CHORUS_SHRINK_DEFAULT 0x00
#define CHORUS_SHRINK_ABORT 0x01
CHORUS_API chorusResult_t chorusCommShrink(chorusComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                           chorusComm_t* newcomm, const chorusConfig_t* config, int shrinkFlags);
/* As chorusCommInitRank, with rank/size/root from the environment (chorusrun, torchrun, mpirun, srun). */
CHORUS_API chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm);
/* Waits for enqueued work, then closes connections and frees comm. Local: does not wait for other ranks. */
CHORUS_API chorusResult_t chorusCommDestroy(chorusComm_t comm);
/* Makes every pending and later call on comm fail at once (within 1 s, callable from any thread), then frees it
 * once no call is using it. */
CHORUS_API chorusResult_t chorusCommAbort(chorusComm_t comm);
/* chorusSuccess, or the error that broke comm (a dead peer, a mismatch, an abort). Never blocks. */
CHORUS_API chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t* asyncError);
/* The flight recorder (CHORUS_FLIGHT_RECORDER: comm's last operations, their state, what they wait for) as one JSON
 * line, NUL-terminated, as scripts/chorus_hang.py reads it: with buf NULL, *size gets the bytes needed; else buf
 * gets the line if *size is enough (chorusInvalidArgument otherwise, *size then saying what is needed). Never
 * blocks; callable from any thread, on a failed communicator too. */
CHORUS_API chorusResult_t chorusCommDump(chorusComm_t comm, char* buf, size_t* size);
CHORUS_API chorusResult_t chorusCommCount(const chorusComm_t comm, int* count);
CHORUS_API chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank);
/* Payload bytes this rank has handed to its transports since comm was created (all peers, all calls). Never
 * blocks; exact once the calls that sent them have completed. */
CHORUS_API chorusResult_t chorusCommGetBytesSent(const chorusComm_t comm, unsigned long long* bytes);

/* size bytes of the calling thread's current device's memory (a GPU's, through the CUDA plugin, as cudaMalloc
 * gives), for the buffers of calls on communicators of that device; *ptr = NULL when size is 0. chorusInvalidUsage
 * when no device is current or no device runtime is loaded (chorus_info says why). Never blocks on peers. */
CHORUS_API chorusResult_t chorusMemAlloc(void** ptr, size_t size);
/* Frees what chorusMemAlloc gave; NULL is a no-op. */
CHORUS_API chorusResult_t chorusMemFree(void* ptr);

/* As ncclRedOpCreatePreMulSum: *op becomes an op of comm that multiplies each rank's input by that rank's own
 * *scalar (one element of datatype, in host memory, read at this call), rounded as chorusProd rounds, then sums.
 * It is used with datatype only, on comm only, until chorusRedOpDestroy (or comm's destruction); a call with it
 * on another communicator, with another datatype or after that gets chorusInvalidArgument naming op. A rank may
 * pass another scalar than its peers (torch's PREMUL_SUM: a gradient's 1/world_size), but every rank must use
 * such an op where one does (a rank calling chorusSum instead gets chorusInvalidUsage). Never blocks. */
CHORUS_API chorusResult_t chorusRedOpCreatePreMulSum(chorusRedOp_t* op, const void* scalar, chorusDataType_t datatype,
                                                     chorusComm_t comm);
/* Frees an op of chorusRedOpCreatePreMulSum; calls already issued with it (or recorded in an open group) are
 * unaffected. Never blocks. */
CHORUS_API chorusResult_t chorusRedOpDestroy(chorusRedOp_t op, chorusComm_t comm);

/* In-place when sendbuff == recvbuff. */
CHORUS_API chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                          chorusStream_t stream);
/* sendbuff is read on root only; in-place when sendbuff == recvbuff. */
CHORUS_API chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          chorusDataType_t datatype, int root, chorusComm_t comm,
                                          chorusStream_t stream);
/* recvbuff is written on root only (may be NULL elsewhere); in-place when sendbuff == recvbuff. */
CHORUS_API chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       chorusDataType_t datatype, chorusRedOp_t op, int root, chorusComm_t comm,
                                       chorusStream_t stream);
/* recvbuff holds nranks*sendcount elements; in-place when sendbuff == recvbuff + rank*sendcount*elemsize. */
CHORUS_API chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream);
/* sendbuff holds nranks*recvcount elements; in-place when recvbuff == sendbuff + rank*recvcount*elemsize. */
CHORUS_API chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                              chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                              chorusStream_t stream);
/* As ncclGather: every rank's count elements of sendbuff land on root, rank p's at recvbuff + p*count (recvbuff
 * holds nranks*count elements, is written on root only and may be NULL elsewhere). In place when sendbuff ==
 * recvbuff + root*count*elemsize on root. */
CHORUS_API chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                                       int root, chorusComm_t comm, chorusStream_t stream);
/* As ncclScatter: block p of root's sendbuff (nranks*count elements, read on root only, may be NULL elsewhere)
 * lands in rank p's recvbuff (count elements). In place when recvbuff == sendbuff + root*count*elemsize on root. */
CHORUS_API chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                                        int root, chorusComm_t comm, chorusStream_t stream);
/* AllGather with a count per rank (MPI_Allgatherv with packed blocks): rank p contributes recvcounts[p] elements
 * (its sendbuff), and recvbuff receives every rank's block in rank order, rank p's starting
 * recvcounts[0] + ... + recvcounts[p-1] elements in. recvcounts has nranks entries, the same on every rank (ranks
 * that disagree get chorusInvalidUsage naming both calls), read during the call only; counts may be 0. In place
 * when sendbuff is this rank's block of recvbuff. */
CHORUS_API chorusResult_t chorusAllGatherV(const void* sendbuff, void* recvbuff, const size_t recvcounts[],
                                           chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream);
/* ReduceScatter with a count per rank (MPI_Reduce_scatter): sendbuff holds recvcounts[0] + ... +
 * recvcounts[nranks-1] elements in blocks in rank order; block p, reduced over the ranks, lands in rank p's
 * recvbuff (recvcounts[p] elements). recvcounts as chorusAllGatherV's. In place when recvbuff is this rank's
 * block of sendbuff. */
CHORUS_API chorusResult_t chorusReduceScatterV(const void* sendbuff, void* recvbuff, const size_t recvcounts[],
                                               chorusDataType_t datatype, chorusRedOp_t op, chorusComm_t comm,
                                               chorusStream_t stream);
/* count elements to each peer: block p of sendbuff goes to rank p, block p of recvbuff comes from rank p.
 * Not in-place: the buffers must not overlap. */
CHORUS_API chorusResult_t chorusAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                         chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream);
/* AllToAll with a size per pair: sendcounts[p] elements from sendbuff + sdispls[p] go to rank p, and
 * recvcounts[p] elements from rank p land at recvbuff + rdispls[p] (counts and displacements in elements,
 * nranks entries each, read during the call only). Rank p's sendcounts[q] must equal rank q's recvcounts[p];
 * ranks that disagree get chorusInvalidUsage naming both. Not in-place: the regions must not overlap. */
CHORUS_API chorusResult_t chorusAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                                          void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                                          chorusDataType_t datatype, chorusComm_t comm, chorusStream_t stream);
/* Point to point; must be matched by a chorusRecv of the same count and datatype on peer (the n-th Send to a
 * peer matches that peer's n-th Recv from this rank). Two ranks that send to each other must put their Send and
 * Recv inside chorusGroupStart/End. peer may be this rank only inside a group, paired with a Recv from self.
 * A Send blocks (NULL stream) until its data has left sendbuff, not until the peer has received it. */
CHORUS_API chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer,
                                     chorusComm_t comm, chorusStream_t stream);
CHORUS_API chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer,
                                     chorusComm_t comm, chorusStream_t stream);
/* Tagged point to point, matched as MPI matches. A receive takes the oldest message from peer (or, with
 * CHORUS_ANY_SOURCE, from any rank) carrying its tag (tag >= 0), whatever order the messages arrived in and
 * whatever collectives run meanwhile; messages from one rank with one tag arrive in the order sent. The message
 * must have the receive's size (count times the datatype's size), else the receive fails with
 * chorusInvalidUsage naming both ranks and the message is dropped; the communicator stays usable. Sends are
 * eager: they never wait for the receive (the receiver keeps a message it did not ask for yet in memory of its
 * own), so no ordering between ranks can deadlock them and they need no group (inside chorusGroupStart/End they
 * are refused). peer may be this rank. *source, unless NULL, gets the sender's rank before the receive completes.
 * With a NULL stream a call returns once done (a send: its data has left sendbuff); with a stream at once, and
 * chorusStreamSynchronize reports its result. A receive nobody sends to fails the communicator after its
 * timeout (CHORUS_TIMEOUT), naming the receive. Host memory only: device buffers are refused. */
#define CHORUS_ANY_SOURCE (-1)
CHORUS_API chorusResult_t chorusSendTagged(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer,
                                           int tag, chorusComm_t comm, chorusStream_t stream);
CHORUS_API chorusResult_t chorusRecvTagged(void* recvbuff, size_t count, chorusDataType_t datatype, int peer,
                                           int tag, int* source, chorusComm_t comm, chorusStream_t stream);
/* Returns (or, on a stream, completes) once every rank has entered the barrier. */
CHORUS_API chorusResult_t chorusBarrier(chorusComm_t comm, chorusStream_t stream);
/* Between GroupStart and GroupEnd calls are validated and recorded only; GroupEnd runs them together (Send and
 * Recv concurrently, so exchanges never deadlock) and blocks unless every recorded call had a stream.
 * Groups nest; only the outermost GroupEnd runs. */
CHORUS_API chorusResult_t chorusGroupStart(void);
CHORUS_API chorusResult_t chorusGroupEnd(void);

/* A stream orders nothing by itself (ops on a comm always run in issue order); it collects completion and the
 * first error of the work enqueued on it. */
CHORUS_API chorusResult_t chorusStreamCreate(chorusComm_t comm, chorusStream_t* stream);
/* A stream that follows a CUDA stream (cudaStream, a cudaStream_t; NULL is the default stream), as NCCL's calls do:
 * a call on it starts after the work queued on cudaStream before the call, work queued on cudaStream after the
 * call waits for it, and the calling thread does not block. The communicator must work on cudaStream's device
 * (the one current at its creation), else chorusInvalidArgument. An operation that fails still releases
 * cudaStream (its outputs are then undefined): chorusStreamSynchronize, chorusStreamQuery and
 * chorusCommGetAsyncError report the error. Porting from NCCL: create one per cudaStream_t and pass it where
 * NCCL took the cudaStream_t. */
CHORUS_API chorusResult_t chorusStreamCreateFromCuda(chorusComm_t comm, void* cudaStream, chorusStream_t* stream);
/* Blocks until all work enqueued on stream is complete (for a stream from chorusStreamCreateFromCuda, also all
 * work on its CUDA stream, as cudaStreamSynchronize); returns the first error. */
CHORUS_API chorusResult_t chorusStreamSynchronize(chorusStream_t stream);
/* chorusSuccess when done, chorusInProgress otherwise (or the first error). Never blocks. */
CHORUS_API chorusResult_t chorusStreamQuery(chorusStream_t stream);
/* Enqueues fn(userData) on stream, like cudaLaunchHostFunc: it runs on the communicator's thread once every
 * operation issued on the communicator before it has completed, and before any issued after it starts. fn must
 * not call Chorus. The stream counts it as pending work. Never blocks. */
typedef void (*chorusHostFn_t)(void* userData);
CHORUS_API chorusResult_t chorusLaunchHostFunc(chorusStream_t stream, chorusHostFn_t fn, void* userData);
/* Waits for the stream's work, then frees it. */
CHORUS_API chorusResult_t chorusStreamDestroy(chorusStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_CHORUS_H */
