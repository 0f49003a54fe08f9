// nccl-tests-style sweep, timing, checking and table output shared by the *_perf binaries.
#include "harness.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace bench {
namespace {

struct TypeInfo { const char* name; size_t size; bool isSigned; };
// Indexed by chorusDataType_t; names as nccl-tests prints them.
const TypeInfo kTypes[] = {{"int8", 1, true},  {"uint8", 1, false}, {"int32", 4, true},  {"uint32", 4, false},
                           {"int64", 8, true}, {"uint64", 8, false}, {"half", 2, true},  {"float", 4, true},
                           {"double", 8, true}, {"bfloat16", 2, true}};
const char* const kOps[] = {"sum", "prod", "max", "min", "avg"};

struct Args {
  size_t minBytes = 32u << 20, maxBytes = 32u << 20;  // nccl-tests defaults
  double factor = 2.0;
  int iters = 20, warmup = 5, check = -1, root = 0, blocking = 0, adaptive = 0, peers = 0, device = 0;
  double seconds = 1.0;
  chorusDataType_t type = chorusFloat32;
  chorusRedOp_t op = chorusSum;
};

int gRank = -1;
chorusComm_t gComm = nullptr;

[[noreturn]] void fail(chorusResult_t r, const char* what) {
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", gRank, what, chorusGetErrorString(r), chorusGetLastError(gComm));
  fflush(stderr);
  if (gComm) chorusCommAbort(gComm);  // so the other ranks fail fast instead of waiting for us
  exit(1);
}
void ck(chorusResult_t r, const char* what) {
  if (r != chorusSuccess) fail(r, what);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// ---- element types ----
struct Half { uint16_t bits; };
struct Bf16 { uint16_t bits; };
template <class T>
constexpr bool kFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, Bf16>;

template <class T> T fromI64(int64_t v) {
  if constexpr (std::is_same_v<T, Half>) return Half{floatToHalf(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, Bf16>) return Bf16{floatToBf16(static_cast<float>(v))};
  else return static_cast<T>(v);  // integers wrap (C++20 modular conversion), as the library's arithmetic does
}
template <class T> double toDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) return halfToFloat(v.bits);
  else if constexpr (std::is_same_v<T, Bf16>) return bf16ToFloat(v.bits);
  else return static_cast<double>(v);
}

template <class F> decltype(auto) dispatch(chorusDataType_t t, F&& f) {
  switch (t) {
    case chorusInt8: return f(int8_t{});
    case chorusUint8: return f(uint8_t{});
    case chorusInt32: return f(int32_t{});
    case chorusUint32: return f(uint32_t{});
    case chorusInt64: return f(int64_t{});
    case chorusUint64: return f(uint64_t{});
    case chorusFloat16: return f(Half{});
    case chorusFloat32: return f(float{});
    case chorusFloat64: return f(double{});
    default: return f(Bf16{});
  }
}

// ---- check pattern ----
// Small integers, exact in every type, periodic in the index. Reductions use period 15 with values in
// [-2, 4] (unsigned [0, 6]) so sums stay exact in bfloat16/int8 for tens of ranks; rank 0 adds an index
// term so the sum is never constant. Prod uses {1, 2} (signed: also -1, -2) with at most three 2s per
// index, so |product| <= 8. Data movement uses period 101 with a distinct shift per rank, so a block from
// the wrong rank or offset shows up.
constexpr size_t kMaxPeriod = 101;
size_t period(const Ctx& x) { return x.reduces ? 15 : 101; }

int64_t inputValue(const Ctx& x, int r, size_t k) {
  bool sgn = kTypes[x.type].isSigned;
  size_t ur = static_cast<size_t>(r);
  if (!x.reduces) {
    int64_t v = static_cast<int64_t>((k * 7 + ur * 57) % 101);
    return sgn ? v - 50 : v;
  }
  if (x.op == chorusProd) {
    int64_t v = (ur < 8 && (k + ur) % 3 == 0) ? 2 : 1;
    return (sgn && (k * 7 + ur * 3) % 5 == 0) ? -v : v;
  }
  int64_t v = static_cast<int64_t>((k * 7 + ur * 3) % 5 + (r == 0 ? k % 3 : 0));
  return sgn ? v - 2 : v;
}

// Counts elements of buf (index first+j has period slot (first+j) % P) that differ from want[slot].
// tol > 0: relative tolerance (floating-point avg, whose last division may round either way).
template <class T>
int64_t countWrong(const void* buf, size_t count, size_t first, size_t P, const int64_t* wantI,
                   const double* wantD, double tol) {
  T want[kMaxPeriod];
  for (size_t k = 0; k < P; k++) want[k] = fromI64<T>(wantI[k]);
  const T* p = static_cast<const T*>(buf);
  int64_t wrong = 0;
  size_t k = first % P;
  for (size_t j = 0; j < count; j++) {
    bool bad;
    if constexpr (kFloat<T>) {
      double g = toDouble(p[j]), e = wantD[k];
      bad = tol > 0 ? !(std::fabs(g - e) <= tol * std::max(1.0, std::fabs(e))) : !(g == e);
    } else {
      bad = p[j] != want[k];
    }
    wrong += bad;
    if (++k == P) k = 0;
  }
  return wrong;
}

// ---- sweep ----
void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [options]   (one process per rank; rank/size/root from the environment, e.g. chorusrun -n N)\n"
          "  -b minbytes   smallest size (K/M/G suffixes), default 32M\n"
          "  -e maxbytes   largest size, default 32M\n"
          "  -f factor     multiplicative step between sizes, default 2\n"
          "  -n iters      timed iterations per size, default 20\n"
          "  -w iters      warmup iterations per size, default 5\n"
          "  -c 0|1        check results (#wrong), default 1 (0 with -G 1)\n"
          "  -o op         sum|prod|max|min|avg, default sum\n"
          "  -d type       int8 uint8 int32 uint32 int64 uint64 half|float16 float|float32 double|float64 bfloat16,"
          " default float\n"
          "  -r root       root rank (broadcast, reduce), default 0\n"
          "  -z 0|1|2      0: enqueue the batch on a stream, then synchronize; 1: every call blocks;\n"
          "                2: enqueue each call on a stream and synchronize it (what a torch Work's wait does). Default 0\n"
          "  -a 0|1        1: adaptive iterations like the peers' bench_common.h (about -T s per size, <= 1000\n"
          "                iterations and 512 MiB of traffic; -n/-w ignored), after 0.2 s of untimed smallest-size\n"
          "                ops (start-up is not charged to the first size). Default 0\n"
          "  -T seconds    adaptive: time per size, default 1.0\n"
          "  -P 0|1        1: the peers' single-group layout (size count type redop time algbw busbw #wrong iters,\n"
          "                in-place where supported) for summarize.py. Default 0: nccl-tests layout\n"
          "  -G 0|1        1: buffers in the current GPU's memory (chorusMemAlloc, through the CUDA plugin), left\n"
          "                as allocated; results are not checked (-c 0). Default 0: host memory\n"
          "  -h            this help\n",
          prog);
}

bool parseSize(const char* s, size_t& out) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (end == s || v < 0) return false;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0;
  else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024;
  else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024;
  if (mul != 1) end++;
  if (*end) return false;
  out = static_cast<size_t>(v * mul);
  return true;
}

bool parseInt(const char* s, int& out, int lo, int hi) {
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

bool parseType(const std::string& s, chorusDataType_t& t) {
  static const struct { const char* n; chorusDataType_t t; } names[] = {
      {"int8", chorusInt8},       {"uint8", chorusUint8},     {"int32", chorusInt32},     {"uint32", chorusUint32},
      {"int64", chorusInt64},     {"uint64", chorusUint64},   {"half", chorusFloat16},    {"float16", chorusFloat16},
      {"float", chorusFloat32},   {"float32", chorusFloat32}, {"double", chorusFloat64},  {"float64", chorusFloat64},
      {"bfloat16", chorusBfloat16}};
  for (auto& n : names)
    if (s == n.n) { t = n.t; return true; }
  return false;
}

void parseArgs(int argc, char** argv, Args& a) {
  int c;
  bool ok = true;
  while (ok && (c = getopt(argc, argv, "b:e:f:n:w:c:o:d:r:z:a:T:P:G:h")) != -1) {
    switch (c) {
      case 'b': ok = parseSize(optarg, a.minBytes); break;
      case 'e': ok = parseSize(optarg, a.maxBytes); break;
      case 'f': a.factor = atof(optarg); ok = a.factor > 1.0; break;
      case 'n': ok = parseInt(optarg, a.iters, 1, 1 << 30); break;
      case 'w': ok = parseInt(optarg, a.warmup, 0, 1 << 30); break;
      case 'c': ok = parseInt(optarg, a.check, 0, 1); break;
      case 'r': ok = parseInt(optarg, a.root, 0, 1 << 30); break;
      case 'z': ok = parseInt(optarg, a.blocking, 0, 2); break;
      case 'a': ok = parseInt(optarg, a.adaptive, 0, 1); break;
      case 'P': ok = parseInt(optarg, a.peers, 0, 1); break;
      case 'G': ok = parseInt(optarg, a.device, 0, 1); break;
      case 'T': a.seconds = atof(optarg); ok = a.seconds > 0; break;
      case 'd': ok = parseType(optarg, a.type); break;
      case 'o': {
        ok = false;
        for (int i = 0; i < 5; i++)
          if (std::string(optarg) == kOps[i]) { a.op = static_cast<chorusRedOp_t>(i); ok = true; }
        break;
      }
      case 'h': usage(argv[0]); exit(0);
      default: ok = false; break;
    }
    if (!ok && c != '?') fprintf(stderr, "%s: bad value for -%c: '%s'\n", argv[0], c, optarg);
  }
  if (ok && optind < argc) { fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]); ok = false; }
  if (ok && a.minBytes > a.maxBytes) { fprintf(stderr, "%s: minbytes > maxbytes\n", argv[0]); ok = false; }
  if (ok && a.device && a.check == 1) {
    fprintf(stderr, "%s: -G 1 cannot check results (-c 1): the buffers are device memory\n", argv[0]);
    ok = false;
  }
  if (a.check < 0) a.check = a.device ? 0 : 1;
  if (!ok) { usage(argv[0]); exit(1); }
}

double allReduce1(double v, chorusRedOp_t op) {
  ck(chorusAllReduce(&v, &v, 1, chorusFloat64, op, gComm, nullptr), "chorusAllReduce (timing)");
  return v;
}

void launch(const Coll& coll, const Ctx& x, const void* s, void* r, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    ck(coll.run(x, s, r), coll.name);
    if (x.syncEach) ck(chorusStreamSynchronize(x.stream), "chorusStreamSynchronize");
  }
  if (x.stream && !x.syncEach) ck(chorusStreamSynchronize(x.stream), "chorusStreamSynchronize");
}

// Seconds per op on this rank; iters gets the number of timed ops.
double timeGroup(const Coll& coll, const Ctx& x, const Args& a, size_t bytes, const void* s, void* r,
                 int64_t& iters) {
  int64_t base = a.iters, warm = a.warmup;
  if (a.adaptive) {
    base = std::clamp<int64_t>(static_cast<int64_t>((512u << 20) / std::max<size_t>(bytes, 1)), 3, 1000);
    warm = std::clamp<int64_t>(base / 10, 1, 20);
  }
  ck(chorusBarrier(gComm, nullptr), "chorusBarrier");
  double t0 = now();
  launch(coll, x, s, r, warm);
  double warmSec = warm > 0 ? (now() - t0) / static_cast<double>(warm) : 0;
  int64_t planned = base, batch = base;
  if (a.adaptive) {  // every rank must agree on the iteration count, so use the slowest rank's warmup
    warmSec = allReduce1(warmSec, chorusMax);
    if (warmSec > 0) planned = std::min<int64_t>(planned, static_cast<int64_t>(a.seconds / warmSec));
    planned = std::max<int64_t>(planned, 3);
    batch = (planned + 7) / 8;  // re-check the elapsed time between batches: ops may be slower than warmup
  }
  double elapsed = 0;
  iters = 0;
  while (iters < planned) {
    int64_t b = std::min(batch, planned - iters);
    ck(chorusBarrier(gComm, nullptr), "chorusBarrier");
    t0 = now();
    launch(coll, x, s, r, b);
    elapsed += now() - t0;
    iters += b;
    if (a.adaptive && iters < planned && iters >= 3 && allReduce1(elapsed, chorusMax) > a.seconds) break;
  }
  return elapsed / static_cast<double>(iters);
}

// Freshly started ranks often share a core until the kernel's load balancer spreads them (milliseconds), which
// would be charged to the first size. Adaptive runs first spend about 0.2 s on untimed smallest-size ops.
void settle(const Coll& coll, Ctx x, const Args& a, int nranks, char* sendBuf, char* recvBuf) {
  coll.getCounts(a.minBytes / typeSize(a.type), nranks, x.c);
  double t0 = now();
  do launch(coll, x, sendBuf, recvBuf, 100);
  while (allReduce1(now() - t0, chorusMax) < 0.2);  // every rank agrees when to stop
}

std::string fmtTime(double us) {
  char b[32];
  snprintf(b, sizeof b, us >= 10000.0 ? "%.0f" : us >= 100.0 ? "%.1f" : "%.2f", us);
  return b;
}

void* allocBuf(size_t bytes, bool device) {
  bytes = (bytes + 4095) / 4096 * 4096 + 4096;  // never 0; pages touched below, outside the timing
  if (device) {
    void* p = nullptr;
    ck(chorusMemAlloc(&p, bytes), "chorusMemAlloc");
    return p;
  }
  void* p = aligned_alloc(4096, bytes);
  if (!p) { fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", gRank, bytes); exit(1); }
  memset(p, 0, bytes);
  return p;
}

void printHeader(const Coll& coll, const Args& a, int argc, char** argv, int nranks) {
  int ver = 0;
  ck(chorusGetVersion(&ver), "chorusGetVersion");
  // Who runs where, as nccl-tests' "Using devices".
  char me[64];
  char host[40] = "?";
  gethostname(host, sizeof host - 1);
  snprintf(me, sizeof me, "Pid %6d on %s", static_cast<int>(getpid()), host);
  std::string all(64 * static_cast<size_t>(nranks), '\0');
  ck(chorusAllGather(me, all.data(), sizeof me, chorusInt8, gComm, nullptr), "chorusAllGather (header)");
  if (gRank != 0) return;
  std::string args;
  for (int i = 1; i < argc; i++) args += std::string(" ") + argv[i];
  printf("# Chorus %d.%d.%d  %s  nranks %d\n", ver / 10000, ver / 100 % 100, ver % 100, coll.name, nranks);
  printf("# args:%s\n", args.empty() ? " (defaults)" : args.c_str());
  printf("# minBytes %zu maxBytes %zu step: %g(factor) ", a.minBytes, a.maxBytes, a.factor);
  if (a.adaptive) printf("warmup iters: adaptive iters: adaptive (%g s/size, 3..1000, <= 512 MiB/size)", a.seconds);
  else printf("warmup iters: %d iters: %d", a.warmup, a.iters);
  printf(" validation: %d blocking: %d memory: %s", a.check, a.blocking, a.device ? "device" : "host");
  printf("\n#\n# Using ranks\n");
  for (int r = 0; r < nranks; r++) printf("#  Rank %2d %s\n", r, all.c_str() + 64 * static_cast<size_t>(r));
  printf("# time = average per op, averaged across ranks; algbw = size/time; busbw = algbw*%g (n=%d);"
         " 1 GB = 1e9 B\n#\n",
         coll.busFactor(nranks), nranks);
  if (a.peers) {
    printf("# peer: chorus %s\n", coll.name);
    printf("#%11s  %12s  %8s  %6s  %9s  %7s  %7s  %6s  %6s\n", "size", "count", "type", "redop", "time", "algbw",
           "busbw", "#wrong", "iters");
    printf("#%11s  %12s  %8s  %6s  %9s  %7s  %7s  %6s  %6s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "", "");
  } else {
    printf("#%52s%-32s%s\n", "", "          out-of-place", "            in-place");
    printf("#%11s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int g = 0; g < 2; g++) printf("  %7s  %6s  %6s %6s", "time", "algbw", "busbw", "#wrong");
    printf("\n#%11s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
    for (int g = 0; g < 2; g++) printf("  %7s  %6s  %6s %6s", "(us)", "(GB/s)", "(GB/s)", "");
    printf("\n");
  }
  fflush(stdout);
}

}  // namespace

size_t typeSize(chorusDataType_t t) { return kTypes[t].size; }

uint16_t floatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t a = x & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;                // NaN (quiet)
  if (a >= 0x477ff000) return sign | 0x7c00;               // >= 65520 rounds to inf
  if (a >= 0x38800000) {                                   // normal half: rebias, round 13 bits away
    uint32_t r = a - 0x38000000;
    r += 0xfff + ((r >> 13) & 1);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a <= 0x33000000) return sign;                        // <= 2^-25: ties to even zero
  uint32_t m = (a & 0x7fffff) | 0x800000;                  // subnormal half: value = m * 2^(e-150)
  uint32_t shift = 126 - (a >> 23);                        // 14..24
  uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1))) h++;
  return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  uint32_t x;
  if (e == 31) x = sign | 0x7f800000 | (m << 13);
  else if (e != 0) x = sign | ((e + 112) << 23) | (m << 13);
  else {
    float f = std::ldexp(static_cast<float>(m), -24);    // zero or subnormal
    return sign ? -f : f;
  }
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // keep NaN a NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

void fillInput(const Ctx& x, void* buf, size_t count, int rank, size_t first) {
  dispatch(x.type, [&](auto tag) {
    using T = decltype(tag);
    const size_t P = period(x);
    T tab[kMaxPeriod];
    for (size_t k = 0; k < P; k++) tab[k] = fromI64<T>(inputValue(x, rank, k));
    T* p = static_cast<T*>(buf);
    size_t k = first % P;
    for (size_t j = 0; j < count; j++) {
      p[j] = tab[k];
      if (++k == P) k = 0;
    }
  });
}

int64_t wrongReduced(const Ctx& x, const void* buf, size_t count, size_t first) {
  const size_t P = period(x);
  int64_t wantI[kMaxPeriod];
  double wantD[kMaxPeriod];
  for (size_t k = 0; k < P; k++) {
    int64_t acc = inputValue(x, 0, k);
    for (int r = 1; r < x.nranks; r++) {
      int64_t v = inputValue(x, r, k);
      switch (x.op) {
        case chorusProd: acc *= v; break;
        case chorusMax: acc = std::max(acc, v); break;
        case chorusMin: acc = std::min(acc, v); break;
        default: acc += v; break;
      }
    }
    bool avg = x.op == chorusAvg;
    wantI[k] = avg ? acc / x.nranks : acc;  // integer avg truncates
    wantD[k] = avg ? static_cast<double>(acc) / x.nranks : static_cast<double>(acc);
  }
  return dispatch(x.type, [&](auto tag) {
    using T = decltype(tag);
    double tol = 0;  // about two units in the last place of the type
    if (x.op == chorusAvg)
      tol = std::is_same_v<T, Half> ? 0x1p-9 : std::is_same_v<T, Bf16> ? 0x1p-6
          : std::is_same_v<T, float> ? 0x1p-22 : std::is_same_v<T, double> ? 0x1p-51 : 0;
    return countWrong<T>(buf, count, first, P, wantI, wantD, tol);
  });
}

int64_t wrongFrom(const Ctx& x, const void* buf, size_t count, int src, size_t first) {
  const size_t P = period(x);
  int64_t wantI[kMaxPeriod];
  double wantD[kMaxPeriod];
  for (size_t k = 0; k < P; k++) {
    wantI[k] = inputValue(x, src, k);
    wantD[k] = static_cast<double>(wantI[k]);
  }
  return dispatch(x.type, [&](auto tag) {
    return countWrong<decltype(tag)>(buf, count, first, P, wantI, wantD, 0);
  });
}

int benchMain(int argc, char** argv, const Coll& coll) {
  Args a;
  parseArgs(argc, argv, a);
  if (a.device) {  // the first allocation loads the device runtime, so the communicator works on this device
    void* probe = nullptr;
    ck(chorusMemAlloc(&probe, 1), "chorusMemAlloc");
    ck(chorusMemFree(probe), "chorusMemFree");
  }
  ck(chorusCommInitFromEnv(&gComm), "chorusCommInitFromEnv");
  int nranks = 0;
  ck(chorusCommUserRank(gComm, &gRank), "chorusCommUserRank");
  ck(chorusCommCount(gComm, &nranks), "chorusCommCount");
  if (coll.usesRoot && a.root >= nranks) {
    fprintf(stderr, "rank %d: -r %d: root must be below nranks %d\n", gRank, a.root, nranks);
    return 1;
  }
  Ctx x;
  x.comm = gComm;
  x.rank = gRank;
  x.nranks = nranks;
  x.root = coll.usesRoot ? a.root : 0;
  x.type = a.type;
  x.op = coll.usesOp ? a.op : chorusSum;
  x.reduces = coll.reduces;
  if (a.blocking != 1) ck(chorusStreamCreate(gComm, &x.stream), "chorusStreamCreate");
  x.syncEach = a.blocking == 2;
  printHeader(coll, a, argc, argv, nranks);

  const size_t es = typeSize(a.type);
  Counts cmax;
  coll.getCounts(a.maxBytes / es, nranks, cmax);
  const size_t sendBytesMax = cmax.send * es, baseBytesMax = std::max(cmax.send, cmax.recv) * es;
  char* sendBuf = static_cast<char*>(allocBuf(sendBytesMax, a.device));
  char* recvBuf = static_cast<char*>(allocBuf(baseBytesMax, a.device));  // also the in-place buffer

  if (a.adaptive) settle(coll, x, a, nranks, sendBuf, recvBuf);

  double busSum = 0;
  int busN = 0;
  int64_t wrongTotal = 0;
  const int firstGroup = (a.peers && coll.inplace) ? 1 : 0, lastGroup = (a.peers && !coll.inplace) ? 0 : 1;
  for (size_t size = a.minBytes; size <= a.maxBytes;
       size = std::max(size + 1, static_cast<size_t>(static_cast<double>(size) * a.factor))) {
    coll.getCounts(size / es, nranks, x.c);
    const size_t bytes = std::max(x.c.send, x.c.recv) * es;  // the size column, as nccl-tests
    double sec[2] = {0, 0};
    int64_t wrong[2] = {0, 0}, iters[2] = {0, 0};
    bool ran[2] = {false, false};
    for (int g = firstGroup; g <= lastGroup; g++) {
      if (g == 1 && !coll.inplace) continue;
      ran[g] = true;
      void* s = g ? recvBuf + static_cast<size_t>(gRank) * x.c.sendInplace * es : sendBuf;
      void* r = recvBuf + (g ? static_cast<size_t>(gRank) * x.c.recvInplace * es : 0);
      const size_t used = g ? bytes : x.c.recv * es;
      if (a.check) {
        memset(recvBuf, 0xA5, used);  // poison: values no check pattern produces, so unwritten output counts
        coll.fill(x, s);
        launch(coll, x, s, r, 1);
        wrong[g] = coll.check(x, r);
      }
      // Zeros for timing: repeated in-place ops then stay finite and denormal-free (device memory: as allocated).
      if (!a.device) {
        memset(recvBuf, 0, used);
        if (!g) memset(sendBuf, 0, x.c.send * es);
      }
      sec[g] = timeGroup(coll, x, a, bytes, s, r, iters[g]);
    }
    ck(chorusAllReduce(wrong, wrong, 2, chorusInt64, chorusSum, gComm, nullptr), "chorusAllReduce (#wrong)");
    ck(chorusAllReduce(sec, sec, 2, chorusFloat64, chorusSum, gComm, nullptr), "chorusAllReduce (time)");
    wrongTotal += wrong[0] + wrong[1];
    if (gRank != 0) continue;
    const char* opName = coll.usesOp ? kOps[a.op] : "none";
    if (a.peers) printf(" %11zu  %12zu  %8s  %6s", bytes, x.c.param, kTypes[a.type].name, opName);
    else printf("%12zu  %12zu  %8s  %6s  %6d", bytes, x.c.param, kTypes[a.type].name, opName,
                coll.usesRoot ? a.root : -1);
    for (int g = firstGroup; g <= lastGroup; g++) {
      if (!ran[g]) { printf("  %7s  %6s  %6s %6s", "N/A", "N/A", "N/A", "N/A"); continue; }
      double avg = sec[g] / nranks, algbw = static_cast<double>(bytes) / 1e9 / avg;
      double busbw = algbw * coll.busFactor(nranks);
      busSum += busbw;
      busN++;
      std::string w = a.check ? std::to_string(wrong[g]) : "N/A";
      if (a.peers) printf("  %9s  %7.2f  %7.2f  %6s  %6lld", fmtTime(avg * 1e6).c_str(), algbw, busbw, w.c_str(),
                          static_cast<long long>(iters[g]));
      else printf("  %7s  %6.2f  %6.2f %6s", fmtTime(avg * 1e6).c_str(), algbw, busbw, w.c_str());
    }
    printf("\n");
    fflush(stdout);
  }
  if (gRank == 0) {
    printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrongTotal), wrongTotal ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n#\n", busN ? busSum / busN : 0.0);
    fflush(stdout);
  }
  if (x.stream) ck(chorusStreamDestroy(x.stream), "chorusStreamDestroy");
  ck(chorusCommDestroy(gComm), "chorusCommDestroy");
  gComm = nullptr;
  if (a.device) {
    ck(chorusMemFree(sendBuf), "chorusMemFree");
    ck(chorusMemFree(recvBuf), "chorusMemFree");
  } else {
    free(sendBuf);
    free(recvBuf);
  }
  return wrongTotal ? 1 : 0;  // wrong results fail the run, so scripts and CI notice
}

}  // namespace bench
