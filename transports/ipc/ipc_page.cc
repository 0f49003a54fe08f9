#include "transports/ipc/ipc_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>

#include "lib/base/error.h"
#include "lib/base/identity.h"
#include "lib/base/immortal.h"
#include "lib/base/socket.h"

namespace chorus::transport::ipc {

namespace {
std::mutex registryMu;
std::map<std::string, std::weak_ptr<PageMapping>>& registry() {  // this process's mappings, by name
  static Immortal<std::map<std::string, std::weak_ptr<PageMapping>>> r;  // Note [Immortal statics]
  return *r;
}

Page* mapPage(int fd) {
  void* p = ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) failErrno("mmap of a device IPC page");
  return static_cast<Page*>(p);
}
}  // namespace

PageMapping::~PageMapping() {
  if (page_ != nullptr) ::munmap(page_, sizeof(Page));
  ::shm_unlink(name_.c_str());  // a peer that never came leaves nothing behind (ENOENT otherwise)
  std::lock_guard<std::mutex> g(registryMu);
  auto it = registry().find(name_);
  if (it != registry().end() && it->second.expired()) registry().erase(it);
}

std::shared_ptr<PageMapping> PageMapping::create(const std::string& name) {
  Fd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) failErrno(fmt::format("shm_open of the device IPC page {}", name).c_str());
  auto m = std::make_shared<PageMapping>();
  m->name_ = name;
  if (::ftruncate(fd.get(), sizeof(Page)) != 0) failErrno("ftruncate of a device IPC page");
  m->page_ = mapPage(fd.get());
  // A fresh page reads as zeros, every counter's initial value; default-initialising starts their lifetimes.
  new (m->page_) Page;
  {
    std::lock_guard<std::mutex> g(registryMu);
    registry()[name] = m;
  }
  m->page_->magic.v.store(kPageMagic, std::memory_order_release);
  return m;
}

namespace {
// Throws when the deadline passed or process pid is gone (not when it is this process).
void stillWaiting(const std::string& peer, int pid, const std::string& what,
                  std::chrono::steady_clock::time_point deadline) {
  if (pid != getpid() && processGone(pid))
    fail(chorusRemoteError, "{} died before {} (its process is gone)", peer, what);
  if (std::chrono::steady_clock::now() > deadline)
    fail(chorusTimeout, "{} did not {} before the deadline (CHORUS_INIT_TIMEOUT)", peer, what);
  std::this_thread::sleep_for(std::chrono::microseconds(200));
}
}  // namespace

void PageMapping::awaitAttached(const std::string& peer, int pid,
                                std::chrono::steady_clock::time_point deadline) const {
  while (page_->attached.v.load(std::memory_order_acquire) == 0)
    stillWaiting(peer, pid, fmt::format("attach to the device IPC page {}", name_), deadline);
}

std::shared_ptr<PageMapping> PageMapping::open(const std::string& name, const std::string& peer, int pid,
                                               std::chrono::steady_clock::time_point deadline) {
  const bool sameProcess = pid == getpid();
  std::shared_ptr<PageMapping> m;
  for (;;) {
    {
      std::lock_guard<std::mutex> g(registryMu);
      auto it = registry().find(name);
      if (it != registry().end()) m = it->second.lock();
    }
    if (m == nullptr && !sameProcess) {  // a creator in this process is waited for in the registry
      Fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600));
      struct stat st{};
      if (fd && ::fstat(fd.get(), &st) == 0 && static_cast<size_t>(st.st_size) == sizeof(Page)) {
        m = std::make_shared<PageMapping>();
        m->name_ = name;
        m->page_ = mapPage(fd.get());
      } else if (fd && st.st_size != 0 && static_cast<size_t>(st.st_size) != sizeof(Page)) {
        fail(chorusInternalError, "device IPC page {} of {} has {} bytes, expected {} (different Chorus builds?)",
             name, peer, st.st_size, sizeof(Page));
      }
    }
    if (m != nullptr && m->page_->magic.v.load(std::memory_order_acquire) == kPageMagic) break;
    m.reset();
    stillWaiting(peer, pid, fmt::format("create its device IPC page {}", name), deadline);
  }
  ::shm_unlink(name.c_str());  // both ends have it now
  m->page_->attached.v.store(1, std::memory_order_release);
  return m;
}

}  // namespace chorus::transport::ipc
