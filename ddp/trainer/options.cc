#include "ddp/trainer/options.h"

#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "chorus/chorus.h"

namespace chorus::ddp::trainer {

namespace {

const char* const kUsage =
    "usage: chorus_ddp_train [flags]   (run N ranks under chorusrun -n N, or mpirun)\n"
    "Trains an MLP on a synthetic data set with Chorus DDP; each rank takes its shard of every global batch.\n"
    "  --steps N            optimizer steps (20)\n"
    "  --layers L           linear layers (4)          --width W     hidden width (256)\n"
    "  --features F         input features (32)        --classes C   classes (10)\n"
    "  --batch B            global batch per micro-batch, split over the ranks (64)\n"
    "  --lr X --momentum X  SGD (0.05, 0.9)            --seed S      data and weights (1)\n"
    "  --bucket-cap-mb X    bucket cap, MiB (25)       --first-bucket-mb X  first bucket's cap, MiB (1)\n"
    "  --no-sync K          K micro-batches per step, the first K-1 under no_sync (1)\n"
    "  --unused-every N     skip the model's branch every N-th step (needs --find-unused)\n"
    "  --find-unused        findUnusedParameters, passing the forward's used[] to the layer\n"
    "  --uneven             rank r runs fewer steps than rank r-1 and then joins (chorusDdpJoin)\n"
    "  --compress fp16|bf16 compress gradients for communication\n"
    "  --view               gradientAsBucketView\n"
    "  --no-overlap         report gradients only after the whole backward (no overlap, for comparison)\n"
    "  --trace FILE         Chrome/Perfetto trace JSON of compute and communication, every rank\n"
    "  --check              also train a single-process reference on the whole global batch and compare\n"
    "  --quiet              summary only\n";

[[noreturn]] void bad(const std::string& why) {
  std::fprintf(stderr, "chorus_ddp_train: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

int toInt(const char* flag, const char* v, int lo, int hi) {
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi)
    bad(std::string(flag) + "=" + v + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(x);
}

double toDouble(const char* flag, const char* v, double lo, double hi) {
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(x >= lo && x <= hi))
    bad(std::string(flag) + "=" + v + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

}  // namespace

Options parseOptions(int argc, char** argv) {
  enum { kSteps = 1000, kLayers, kWidth, kFeatures, kClasses, kBatch, kLr, kMomentum, kSeed, kCap, kFirst, kNoSync,
         kUnused, kFind, kUneven, kCompress, kView, kNoOverlap, kTrace, kCheck, kQuiet, kHelp };
  static const option longs[] = {
      {"steps", 1, nullptr, kSteps}, {"layers", 1, nullptr, kLayers}, {"width", 1, nullptr, kWidth},
      {"features", 1, nullptr, kFeatures}, {"classes", 1, nullptr, kClasses}, {"batch", 1, nullptr, kBatch},
      {"lr", 1, nullptr, kLr}, {"momentum", 1, nullptr, kMomentum}, {"seed", 1, nullptr, kSeed},
      {"bucket-cap-mb", 1, nullptr, kCap}, {"first-bucket-mb", 1, nullptr, kFirst},
      {"no-sync", 1, nullptr, kNoSync}, {"unused-every", 1, nullptr, kUnused}, {"find-unused", 0, nullptr, kFind},
      {"uneven", 0, nullptr, kUneven}, {"compress", 1, nullptr, kCompress}, {"view", 0, nullptr, kView},
      {"no-overlap", 0, nullptr, kNoOverlap}, {"trace", 1, nullptr, kTrace}, {"check", 0, nullptr, kCheck},
      {"quiet", 0, nullptr, kQuiet}, {"help", 0, nullptr, kHelp}, {nullptr, 0, nullptr, 0}};
  Options o;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", longs, nullptr)) != -1) {
    const char* f = optind > 1 ? argv[optind - 1] : "?";
    switch (c) {
      case kSteps: o.steps = toInt("--steps", optarg, 1, 1000000); break;
      case kLayers: o.layers = toInt("--layers", optarg, 1, 1000); break;
      case kWidth: o.width = toInt("--width", optarg, 1, 1 << 16); break;
      case kFeatures: o.features = toInt("--features", optarg, 1, 1 << 16); break;
      case kClasses: o.classes = toInt("--classes", optarg, 2, 1 << 16); break;
      case kBatch: o.batch = toInt("--batch", optarg, 1, 1 << 20); break;
      case kLr: o.lr = toDouble("--lr", optarg, 0, 100); break;
      case kMomentum: o.momentum = toDouble("--momentum", optarg, 0, 1); break;
      case kSeed: o.seed = static_cast<uint64_t>(toInt("--seed", optarg, 0, 1 << 30)); break;
      case kCap: o.bucketCapMb = toDouble("--bucket-cap-mb", optarg, 1e-6, 1e6); break;
      case kFirst: o.firstBucketMb = toDouble("--first-bucket-mb", optarg, 1e-6, 1e6); break;
      case kNoSync: o.noSync = toInt("--no-sync", optarg, 1, 1000); break;
      case kUnused: o.unusedEvery = toInt("--unused-every", optarg, 1, 1000000); break;
      case kFind: o.findUnused = true; break;
      case kUneven: o.uneven = true; break;
      case kCompress:
        if (std::strcmp(optarg, "fp16") == 0) o.compress = chorusFloat16;
        else if (std::strcmp(optarg, "bf16") == 0) o.compress = chorusBfloat16;
        else bad(std::string("--compress=") + optarg + " must be fp16 or bf16");
        break;
      case kView: o.view = true; break;
      case kNoOverlap: o.noOverlap = true; break;
      case kTrace: o.trace = optarg; break;
      case kCheck: o.check = true; break;
      case kQuiet: o.quiet = true; break;
      case kHelp: std::fputs(kUsage, stdout); std::exit(0);
      default: bad(std::string("unknown or incomplete flag ") + f);
    }
  }
  if (optind < argc) bad(std::string("unexpected argument ") + argv[optind]);
  if (o.unusedEvery > 0 && !o.findUnused)
    bad("--unused-every needs --find-unused (without it the skipped branch's bucket never completes)");
  return o;
}

}  // namespace chorus::ddp::trainer
