#include "transports/shm/segment.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>
#include <utility>

#include "lib/error.h"

namespace chorus::transport::shm {

namespace {
PairSegment* mapFd(int fd) {
  void* p = ::mmap(nullptr, sizeof(PairSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) failErrno("mmap of a shared-memory segment");
  return static_cast<PairSegment*>(p);
}
}  // namespace

Segment Segment::create(const std::string& name) {
  Segment s;
  s.fd_ = Fd(::memfd_create(name.c_str(), MFD_CLOEXEC));
  if (!s.fd_) failErrno("memfd_create");
  if (::ftruncate(s.fd_.get(), sizeof(PairSegment)) != 0) failErrno("ftruncate of a shared-memory segment");
  s.seg_ = mapFd(s.fd_.get());
  new (s.seg_) PairSegment{};  // value-initialised: every counter and flag starts at zero
  s.seg_->magic.v.store(kSegmentMagic, std::memory_order_release);
  return s;
}

Segment Segment::map(int fd) {
  Segment s;
  s.fd_ = Fd(fd);
  struct stat st{};
  if (::fstat(fd, &st) != 0) failErrno("fstat of a shared-memory segment");
  if (static_cast<size_t>(st.st_size) != sizeof(PairSegment))
    fail(chorusInternalError, "shared-memory segment has {} bytes, expected {} (different Chorus builds?)",
         st.st_size, sizeof(PairSegment));
  s.seg_ = mapFd(fd);
  if (s.seg_->magic.v.load(std::memory_order_acquire) != kSegmentMagic)
    fail(chorusInternalError, "shared-memory segment has a bad magic number");
  return s;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    if (seg_) ::munmap(seg_, sizeof(PairSegment));
    seg_ = std::exchange(o.seg_, nullptr);
    fd_ = std::move(o.fd_);
  }
  return *this;
}

Segment::~Segment() {
  if (seg_) ::munmap(seg_, sizeof(PairSegment));
}

}  // namespace chorus::transport::shm
