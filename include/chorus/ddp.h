/* Chorus DDP: data-parallel gradient synchronisation with the semantics of PyTorch's DistributedDataParallel
 * Reducer, for any framework that can call C.
 *
 * One training step on every rank:
 *   chorusDdpPreForward          start of forward: rank 0's buffers are broadcast; buckets may be rebuilt
 *   ... forward ...
 *   chorusDdpPrepareForBackward  end of forward: reads the gradient-sync switch (chorusDdpSetGradSync) and,
 *                                with findUnusedParameters, which parameters the forward used
 *   ... backward; as each parameter's gradient is complete: chorusDdpMarkGradReady(param) ...
 *                                (complete buckets start their AllReduce at once, in bucket order)
 *   chorusDdpFinalizeBackward    waits for the communication; every gradient then holds the average over
 *                                the ranks (sum / world size)
 *   ... optimizer step ...
 *
 * Gradients: the caller computes gradients into grads[i] (or, with gradientAsBucketView, into the memory that
 * chorusDdpGradPointer returns, which changes when buckets are rebuilt: ask again after chorusDdpPreForward).
 * Gradients accumulate across backward passes as the caller's framework accumulates them; this layer only
 * replaces them with their average at the end of a synchronised backward.
 *
 * no_sync: chorusDdpSetGradSync(ddp, 0) makes backward passes local (no communication); the first synchronised
 * backward after it averages the accumulated sums. The switch is read by chorusDdpPrepareForBackward, i.e. at
 * the end of forward, so a no_sync window must contain the forward (as in PyTorch).
 *
 * Every call validates its arguments and its place in the step (chorusInvalidArgument / chorusInvalidUsage with
 * chorusGetLastError(comm) text naming the argument and the rank). Calls that communicate are collective: every
 * rank makes them in the same order. A dead peer makes them fail with chorusRemoteError naming it. Calls on one
 * handle may come from several threads; they run one at a time.
 */
#ifndef CHORUS_DDP_H
#define CHORUS_DDP_H

#include "chorus/chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chorusDdp* chorusDdp_t;
typedef struct {
  size_t size;                    /* sizeof(chorusDdpConfig): lets the library check the caller's ABI */
  double bucketCapMb;             /* default 25 (MiB) */
  double firstBucketMb;           /* default 1 (MiB) */
  int    findUnusedParameters;    /* default 0 */
  int    gradientAsBucketView;    /* default 0 */
  int    broadcastBuffers;        /* default 1 */
  int    compression;             /* -1 none (default), or chorusFloat16 / chorusBfloat16 */
} chorusDdpConfig;
#define CHORUS_DDP_CONFIG_INITIALIZER { sizeof(chorusDdpConfig), 25.0, 1.0, 0, 0, 1, -1 }

/* Replaces a bucket's AllReduce. Called on the thread that completed the bucket, with the bucket's contiguous
 * gradients (count elements of datatype); it must enqueue its collectives on `stream` (or run them blocking)
 * and return. Once the stream's work is done, the buffer's contents become the gradients: the hook averages
 * (e.g. chorusAllReduce with chorusAvg). Every rank's hook must issue the same collectives. */
typedef chorusResult_t (*chorusDdpCommHook)(void* state, chorusComm_t comm, int bucket, void* buffer,
                                            size_t count, chorusDataType_t datatype, chorusStream_t stream);

/* Collective. Registers nparams parameters (params[i]: counts[i] elements of datatypes[i]; floating-point
 * types only) and their gradients (grads[i], same shape; grads may be NULL with gradientAsBucketView, and the
 * gradients then start at zero inside the buckets). Checks that every rank registered the same number of
 * parameters with the same counts and datatypes, then broadcasts the parameters from rank 0. config may be
 * NULL (defaults). The communicator must outlive the handle; use it for nothing else while a backward is in
 * flight. */
CHORUS_API chorusResult_t chorusDdpCreate(chorusComm_t comm, int nparams, void* const* params, void* const* grads,
                               const size_t* counts, const chorusDataType_t* datatypes,
                               const chorusDdpConfig* config, chorusDdp_t* ddp);
/* Collective. Registers buffers (e.g. running statistics), checks them across ranks like the parameters and
 * broadcasts them from rank 0; with broadcastBuffers they are broadcast again at every chorusDdpPreForward.
 * At most once, before the first chorusDdpPreForward. */
CHORUS_API chorusResult_t chorusDdpRegisterBuffers(chorusDdp_t ddp, int nbuffers, void* const* buffers, const size_t* counts,
                                        const chorusDataType_t* datatypes);
/* Collective. Start of forward. Fails if the previous backward was not finalized (the message lists the
 * parameters that never became ready). */
CHORUS_API chorusResult_t chorusDdpPreForward(chorusDdp_t ddp);
/* Collective (one small asynchronous AllReduce, used by Join). End of forward. used[nparams] (nonzero = this
 * forward used the parameter) is read only with findUnusedParameters; unused parameters are then ready at
 * once with a zero contribution. NULL: parameters still not ready when backward ends count as unused. */
CHORUS_API chorusResult_t chorusDdpPrepareForBackward(chorusDdp_t ddp, const int* used);
/* param's gradient is complete for this backward (call it once per parameter per backward). */
CHORUS_API chorusResult_t chorusDdpMarkGradReady(chorusDdp_t ddp, int param);
/* Collective. Launches what is left, waits for all of it and leaves the averages in the gradients. */
CHORUS_API chorusResult_t chorusDdpFinalizeBackward(chorusDdp_t ddp);
/* 0: no_sync (see above); 1: synchronise (default). Read at the next chorusDdpPrepareForBackward. */
CHORUS_API chorusResult_t chorusDdpSetGradSync(chorusDdp_t ddp, int enabled);
/* Where param's gradient lives now: grads[param], or its place in the bucket with gradientAsBucketView. */
CHORUS_API chorusResult_t chorusDdpGradPointer(chorusDdp_t ddp, int param, void** grad);
/* Collective with the other ranks' steps. This rank is out of data: it keeps answering the other ranks' steps
 * (buffer broadcasts, bucket AllReduces with zero gradients) until every rank has called chorusDdpJoin, then
 * returns. Gradients stay averaged over the full world size (joined ranks contribute zeros; a joined rank's own
 * gradients are overwritten). Call between steps; the handle can only be destroyed afterwards. */
CHORUS_API chorusResult_t chorusDdpJoin(chorusDdp_t ddp);
/* Replaces every bucket's AllReduce (and any compression); hook NULL restores the default. Same on every rank,
 * between steps. */
CHORUS_API chorusResult_t chorusDdpRegisterCommHook(chorusDdp_t ddp, chorusDdpCommHook hook, void* state);
CHORUS_API chorusResult_t chorusDdpBucketCount(chorusDdp_t ddp, int* nbuckets);
/* params may be NULL; otherwise it has room for *nparams (call once with NULL to learn it). */
CHORUS_API chorusResult_t chorusDdpBucketInfo(chorusDdp_t ddp, int bucket, int* nparams, int* params, size_t* bytes);
/* Per-step statistics of the last finalized backward (times in microseconds). */
typedef struct {
  double backwardUs;        /* chorusDdpPrepareForBackward .. chorusDdpFinalizeBackward entry */
  double commUs;            /* time some bucket's communication was running */
  double exposedUs;         /* chorusDdpFinalizeBackward's wait: communication not hidden behind backward */
  unsigned long long bytesSent;  /* bytes this rank sent during the step */
  int bucketsLaunched;      /* before chorusDdpFinalizeBackward was called */
} chorusDdpStats;
CHORUS_API chorusResult_t chorusDdpGetStats(chorusDdp_t ddp, chorusDdpStats* stats);
/* When a bucket's communication ran in the last synchronised backward, in microseconds since its
 * chorusDdpPrepareForBackward: started (launched and the bucket before it finished) and finished; both -1 if it
 * was not launched. For traces; either pointer may be NULL. */
CHORUS_API chorusResult_t chorusDdpBucketTiming(chorusDdp_t ddp, int bucket, double* startedUs, double* finishedUs);
/* Waits for outstanding communication and frees the handle (not the communicator). */
CHORUS_API chorusResult_t chorusDdpDestroy(chorusDdp_t ddp);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_DDP_H */
