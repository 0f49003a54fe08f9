#include "transports/shm/segment.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <new>

#include "lib/base/error.h"
#include "lib/base/immortal.h"

namespace chorus::transport::shm {

namespace {
std::mutex registryMu;
std::map<uint64_t, std::weak_ptr<void>>& registry() {  // memfd inode -> this process's mapping of it
  static Immortal<std::map<uint64_t, std::weak_ptr<void>>> r;  // Note [Immortal statics]
  return *r;
}
}  // namespace

Segment::Mapping::~Mapping() {
  if (seg) ::munmap(seg, sizeof(PairSegment));
  std::lock_guard<std::mutex> g(registryMu);
  auto it = registry().find(key);
  if (it != registry().end() && it->second.expired()) registry().erase(it);
}

std::shared_ptr<Segment::Mapping> Segment::shared(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) failErrno("fstat of a shared-memory segment");
  if (static_cast<size_t>(st.st_size) != sizeof(PairSegment))
    fail(chorusInternalError, "shared-memory segment has {} bytes, expected {} (different Chorus builds?)",
         st.st_size, sizeof(PairSegment));
  const uint64_t key = static_cast<uint64_t>(st.st_ino);
  std::lock_guard<std::mutex> g(registryMu);
  if (auto existing = std::static_pointer_cast<Mapping>(registry()[key].lock())) return existing;
  void* p = ::mmap(nullptr, sizeof(PairSegment), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) failErrno("mmap of a shared-memory segment");
  auto m = std::make_shared<Mapping>();
  m->seg = static_cast<PairSegment*>(p);
  m->key = key;
  registry()[key] = m;
  return m;
}

Segment Segment::create(const std::string& name) {
  Segment s;
  s.fd_ = Fd(::memfd_create(name.c_str(), MFD_CLOEXEC));
  if (!s.fd_) failErrno("memfd_create");
  if (::ftruncate(s.fd_.get(), sizeof(PairSegment)) != 0) failErrno("ftruncate of a shared-memory segment");
  s.mapping_ = shared(s.fd_.get());
  // A fresh memfd reads as zeros, which is every counter's and flag's initial value; default-initialising
  // (not `PairSegment{}`, which may build a temporary of the whole segment on the stack) starts their lifetimes.
  new (s.get()) PairSegment;
  s.get()->magic.v.store(kSegmentMagic, std::memory_order_release);
  return s;
}

Segment Segment::map(int fd) {
  Segment s;
  s.fd_ = Fd(fd);
  s.mapping_ = shared(fd);
  if (s.get()->magic.v.load(std::memory_order_acquire) != kSegmentMagic)
    fail(chorusInternalError, "shared-memory segment has a bad magic number");
  return s;
}

}  // namespace chorus::transport::shm
