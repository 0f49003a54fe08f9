// The C boundary: every exported function runs its body through apiCall, which turns chorus::Error (and any
// other exception) into a result code plus chorusGetLastError() text. No exception crosses into C.
#pragma once

#include <new>

#include "chorus/chorus.h"
#include "lib/error.h"
#include "lib/log.h"

namespace chorus {

void recordError(chorusComm_t comm, const char* text);

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
  }
}

}  // namespace chorus
