// Note [Dump signal]: with CHORUS_DUMP_SIGNAL (USR1, USR2 or a number), that signal makes every live communicator of
// the process dump its flight recorder (Note [Flight recorder], lib/comm/flight_recorder.h). The handler only writes
// a byte to a pipe (async-signal-safe); a thread of the library's own reads it and writes the dumps, so nothing
// that could lock or allocate runs inside the handler. An application that handles the signal itself keeps its
// handler: Chorus then installs nothing and says so (chorusCommDump still dumps on demand).
#pragma once

namespace chorus {

// Once per process, at the first communicator's creation; throws chorusInvalidArgument for a malformed value.
void installDumpSignal();

}  // namespace chorus
