// chorusGroupStart/End: per-thread recording of calls, issued together at the outermost GroupEnd.
#pragma once

#include <span>

#include "chorus/chorus.h"
#include "lib/base/ops.h"

namespace chorus {

class Comm;

int groupDepth();
void groupStart();
// Records a validated call when a group is open; false when no group is open (the caller issues it now).
bool groupRecord(Comm* comm, const CollArgs& args, chorusStream_t stream);
// Issues everything recorded; blocks unless every recorded call had a stream.
void groupEnd();

// Issues calls on one communicator as one operation (in issue order, Note [Issue order]).
void issue(Comm& comm, std::span<const CollArgs> calls, std::span<const chorusStream_t> streams);

}  // namespace chorus
