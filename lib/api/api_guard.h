// The C boundary: every exported function runs its body through apiCall, which turns chorus::Error (and any
// other exception) into a result code plus chorusGetLastError() text. No exception crosses into C.
#pragma once

#include <cstring>
#include <new>

#include "chorus/chorus.h"
#include "lib/base/error.h"
#include "lib/base/log.h"

namespace chorus {

void recordError(chorusComm_t comm, const char* text);

// Enums arrive from C and may hold any int: read them as int (loading an out-of-range value through the enum
// type is undefined in C++) and only use the enum once it is known to be valid.
template <typename E>
int rawEnum(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

template <typename F>
chorusResult_t apiCall(chorusComm_t comm, F&& body) {
  try {
    body();
    return chorusSuccess;
  } catch (const Error& e) {
    recordError(comm, e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    recordError(comm, "out of memory");
    return chorusSystemError;
  } catch (const std::exception& e) {
    recordError(comm, e.what());
    return chorusInternalError;
  } catch (...) {
    recordError(comm, "internal error: an exception of unknown type");
    return chorusInternalError;
  }
}

}  // namespace chorus
