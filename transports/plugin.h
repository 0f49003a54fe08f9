/* The plugin ABI: what a shared object named libchorus-NAME.so exports so that libchorus.so can load it at
 * communicator creation (transports/plugin_host.h): a transport, a device runtime's memory (Note [Memory
 * plugins], at the end), or both. Plain C, so that neither side's C++ runtime, exception
 * types or containers cross the boundary; a plugin written in C++ implements transports/transport.h and
 * exports it with transports/plugin_export.h.
 *
 * Note [Plugin versions]: the plugin exports one data symbol, chorusTransportPlugin_vN (of type
 * chorusTransportPlugin_vN_t), a table of function pointers whose `version` field repeats N. libchorus.so looks
 * for the symbol of the version it speaks; a plugin that exports another version (or a table whose version field
 * differs) is refused with both versions named, and the communicator forms without it; so is a table shorter
 * than this libchorus's (its symbol's size says so: built against another plugin.h). Any change to this file
 * bumps N. Version 2: the pipeline chunk became steps by size (traits.chunks), where version 1 had one chunk.
 * Version 3: settle. Version 4: messages of kind Tagged form a second class, ordered on its own (Note [Message
 * classes] in lib/base/ops.h). The memory plugin's table has a version of its own.
 *
 * Contract of every function: returns a chorusResult_t (0 on success); on failure the text of
 * lastError(transport) says why, naming the peer. Functions that the transport interface says never block
 * (isend, irecv, irecvReduce, progress, armWake, waitFd) must not block. One thread at a time calls a given
 * transport. Deadlines are CLOCK_MONOTONIC nanoseconds (std::chrono::steady_clock).
 */
#ifndef CHORUS_TRANSPORT_PLUGIN_H
#define CHORUS_TRANSPORT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_TRANSPORT_PLUGIN_VERSION 4
#define CHORUS_TRANSPORT_PLUGIN_SYMBOL "chorusTransportPlugin_v4"
#define CHORUS_PLUGIN_MAX_CHUNK_STEPS 4

typedef struct {
  const char* name;
  const char* type; /* "int", "bytes", "string", "enum" */
  const char* defaultValue;
  const char* description;
} chorusPluginEnv_v4;

typedef struct {
  size_t fromBytes, chunkBytes;
} chorusPluginChunkStep_v4;

typedef struct {
  double alphaUs, gbps;                           /* between ranks of one host, a core each */
  double alphaUsOversubscribed, gbpsOversubscribed; /* more ranks than cores */
  int reducesOnReceive;                           /* irecvReduce can post */
  /* The pipeline chunk it runs best with, by the bytes a collective touches on one host (its buffer times the
   * ranks there): nchunks (1..CHORUS_PLUGIN_MAX_CHUNK_STEPS) steps of ascending fromBytes, the first from 0, each
   * chunk 4 KiB..64 MiB; a size takes the chunk of the last step it reaches. */
  uint32_t nchunks;
  chorusPluginChunkStep_v4 chunks[CHORUS_PLUGIN_MAX_CHUNK_STEPS];
} chorusPluginTraits_v4;

typedef struct {
  int rank, pid;
  const char* host;   /* hostname, for messages */
  const char* hostId; /* equal ids: the same host */
} chorusPluginPeer_v4;

typedef struct {
  int rank, nranks;
  uint64_t secret, commId;
  const char* socketIfname;
  const chorusPluginPeer_v4* peers; /* nranks entries; filled before the first connect/accept, NULL before */
} chorusPluginSetup_v4;

typedef struct {
  uint64_t seq, count;
  int32_t root;
  uint8_t kind, dtype, redop, pad;
} chorusPluginTag_v4;

/* The caller's completion flag: the transport sets done to 1; priv is the transport's. */
typedef struct {
  unsigned char done;
  unsigned char optional; /* set by the caller: a peer leaving with only such receives posted fails nothing */
  int priv;
} chorusPluginRequest_v4;

typedef struct {
  uint32_t version; /* CHORUS_TRANSPORT_PLUGIN_VERSION */
  const char* name; /* lower case, as CHORUS_TRANSPORTS names it */
  int preference;   /* default order among transports: lower first (shm 10, tcp 30) */
  const chorusPluginEnv_v4* env;
  size_t nenv;
  chorusPluginTraits_v4 traits;
  /* NULL or "" when usable in this process, else why not (static text). */
  const char* (*unavailable)(void);
  /* 1 when the transport's own settings say not to use it by default. */
  int (*disabledByEnv)(void);
  /* 1 when it can carry traffic between the two ranks. */
  int (*canConnect)(const chorusPluginPeer_v4* a, const chorusPluginPeer_v4* b);
  /* setup stays valid (and its peers are filled in) for the transport's life. On failure *transport is NULL and
   * err (errLen bytes) holds why. */
  int (*create)(const chorusPluginSetup_v4* setup, void** transport, char* err, size_t errLen);
  void (*destroy)(void* transport);
  const char* (*lastError)(void* transport);
  /* The address bytes stay valid until destroy. */
  int (*address)(void* transport, const uint8_t** bytes, size_t* len);
  int (*connect)(void* transport, int peer, const uint8_t* address, size_t len, int64_t deadlineNs);
  int (*accept)(void* transport, int peer, const uint8_t* address, size_t len, int64_t deadlineNs);
  int (*isend)(void* transport, int peer, const void* buf, size_t len, const chorusPluginTag_v4* tag,
               chorusPluginRequest_v4* req);
  int (*irecv)(void* transport, int peer, void* buf, size_t len, const chorusPluginTag_v4* tag,
               chorusPluginRequest_v4* req);
  /* *posted = 0 when it cannot reduce while receiving (nothing posted); NULL where it never can. */
  int (*irecvReduce)(void* transport, int peer, void* dst, const void* src, size_t len, int dtype, int op,
                     const chorusPluginTag_v4* tag, chorusPluginRequest_v4* req, int* posted);
  int (*progress)(void* transport, int* moved);
  int (*waitFd)(void* transport);
  /* *maySleep = 0 when progress may have work already. */
  int (*armWake)(void* transport, int* maySleep);
  void (*sendAbort)(void* transport, int code, const char* text, int64_t deadlineNs);
  void (*close)(void* transport, int64_t deadlineNs);
  /* After the last connect/accept: returns once no handshake this side began needs its progress any more. NULL
   * where none ever does. */
  int (*settle)(void* transport, int64_t deadlineNs);
} chorusTransportPlugin_v4_t;

/* Optional, beside either table: a line about what the plugin found in this process (for the ibverbs plugin its
 * ports and their link layers), printed by chorus_info. An exported function; its text stays valid until the
 * next call; "" or NULL says nothing. Not part of the tables, so it has a version of its own. */
#define CHORUS_PLUGIN_DESCRIBE_SYMBOL "chorusPluginDescribe_v1"
typedef const char* (*chorusPluginDescribe_v1_t)(void);

/* Note [Memory plugins]: a plugin may also (or instead) export chorusMemoryPlugin_vN, a device runtime's memory
 * (Note [Memory spaces] in lib/mem/space.h): which pointers are memory of its devices, and the data work the
 * algorithms do on them. It has its own version, bumped on any change to this table. Every function returns a
 * chorusResult_t (chorusUnhandledCudaError for an error of the device's runtime) and on failure lastError(), of
 * the calling thread, says why. Data functions run after the calls before them and have finished when they
 * return. Devices are named NAME:ORDINAL. Version 2 added the device streams and staging; version 3 IPC; version 4
 * peer access. */
#define CHORUS_MEMORY_PLUGIN_VERSION 4
#define CHORUS_MEMORY_PLUGIN_SYMBOL "chorusMemoryPlugin_v4"
#define CHORUS_IPC_HANDLE_BYTES 128

typedef struct {
  uint32_t version; /* CHORUS_MEMORY_PLUGIN_VERSION */
  const char* name; /* lower case: "cuda" */
  /* NULL or "" when usable in this process, else why not (static text: the runtime's own message). */
  const char* (*unavailable)(void);
  const char* (*lastError)(void);
  /* *device = the ordinal of the device whose memory p is, or -1 for memory the runtime does not own (host). */
  int (*classify)(const void* p, int* device);
  /* *device = the calling thread's current device, or -1 when it has none. */
  int (*currentDevice)(int* device);
  /* 1 when the CPU may read and write the device's memory, so transports may move it as they move host memory. */
  int (*hostAccessible)(int device);
  /* dst and src may each be the device's memory or host memory; they do not overlap unless equal. */
  int (*copy)(int device, void* dst, const void* src, size_t bytes);
  int (*reduce)(int device, void* dst, const void* a, const void* b, size_t count, int dtype, int op);
  /* dst = srcs[0] op ... op srcs[n-1] left to right; dst may be srcs[0]. */
  int (*reduceN)(int device, void* dst, const void* const* srcs, int n, size_t count, int dtype, int op);
  int (*scaleDivide)(int device, void* buf, size_t count, int dtype, int divisor);
  int (*allocate)(int device, size_t bytes, void** p);
  /* release, hostRelease and ipcClose may wait for every stream of the device, as cudaFree does: Chorus calls them
   * only while no fence of this process is held on the device (Note [Frees wait for quiet] in
   * transports/plugin_memory.cc). streamClose may be called at any time, so it must not wait so. */
  int (*release)(int device, void* p);
  /* Device streams (all NULL where the runtime has none), for chorusStreamCreateFromCuda (Note [Device streams] in
   * lib/comm/stream.cc). open wraps the runtime's own stream (a cudaStream_t; NULL is its default stream) and
   * says which device it belongs to. fence queues on it a point the host can wait for (all work queued before)
   * and then a wait that holds all work queued later until release(fence). Fences are released in the order
   * they were made; reached never blocks (*reached = 1 once the work before the fence is done). Version 2. */
  int (*streamOpen)(void* native, int* device, void** stream);
  int (*streamFence)(void* stream, uint64_t* fence);
  int (*streamReached)(void* stream, uint64_t fence, int* reached);
  int (*streamRelease)(void* stream, uint64_t fence);
  int (*streamSynchronize)(void* stream); /* like cudaStreamSynchronize */
  void (*streamClose)(void* stream);      /* every fence released */
  /* Staging through host memory (Note [Staging device memory] in lib/comm/comm.cc; all NULL where the runtime has
   * nothing better than malloc and copy): host memory the device copies to and from fastest (pinned), and copies
   * that run while the host goes on. Copies started on one device finish in the order started; copyDone never
   * blocks (*done = 1 once the copy of that ticket, and so every one before it, has finished). */
  int (*hostAllocate)(int device, size_t bytes, void** p);
  int (*hostRelease)(int device, void* p);
  int (*copyStart)(int device, void* dst, const void* src, size_t bytes, uint64_t* ticket);
  int (*copyDone)(int device, uint64_t ticket, int* done);
  /* IPC between the ranks of one host (Note [Device IPC] in transports/ipc/ipc_transport.cc; all NULL where the
   * runtime has none). ipcExport describes the allocation holding p in CHORUS_IPC_HANDLE_BYTES opaque bytes (equal
   * bytes: the same allocation, for as long as it lives) and says p's offset in it; ipcOpen maps such an
   * allocation, exported by any process of the host (this one included), into this process (*base: its start), and
   * ipcClose(handle, base) undoes it. reduceStart runs dst = a op b like copyStart (the same tickets, finishing in
   * order with the copies); a and b may be memory ipcOpen mapped. Version 3. */
  int (*ipcExport)(int device, const void* p, uint8_t* handle, size_t* offset);
  int (*ipcOpen)(int device, const uint8_t* handle, void** base);
  int (*ipcClose)(int device, const uint8_t* handle, void* base);
  int (*reduceStart)(int device, void* dst, const void* a, const void* b, size_t count, int dtype, int op,
                     uint64_t* ticket);
  /* Peer access between the devices of one host (Note [Peer access] in lib/comm/comm.cc; all NULL: every pair of
   * devices is taken to map each other's memory). deviceCount: the devices this process sees (ordinals 0..n-1).
   * deviceId: a name of the device that every process of the host gives it alike, whichever devices it sees (CUDA:
   * the PCI bus id), NUL-terminated in at most len bytes. peerAccess: *yes = 1 when device can map and copy the
   * memory of device other directly (cudaDeviceCanAccessPeer), 0 when it cannot. Version 4. */
  int (*deviceCount)(int* n);
  int (*deviceId)(int device, char* id, size_t len);
  int (*peerAccess)(int device, int other, int* yes);
} chorusMemoryPlugin_v4_t;

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_TRANSPORT_PLUGIN_H */
