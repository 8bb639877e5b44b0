// SPDX-License-Identifier: MIT
// CONTEXT FENCES: one event for the work of every stream of a device.
//
// cuCtxRecordEvent (CUDA 12.5) records into one event all the work queued so far on every stream
// of a context: the legacy, blocking, per-thread and non-blocking streams, and a primary
// context's green contexts. cuCtxWaitEvent makes all later work of the context, on every stream
// (those created later too), wait for such an event. Measured on the H100 (driver 13.0, 2026-11-25,
// efe120f): a record costs ~230 ns whatever the number of streams (0, 32 or 256), a wait ~220 ns; a
// question (cuEventQuery) costs what a legacy event's does. Where the lazy coverage of
// fence_looks.c asked up to one cuStreamQuery per non-blocking stream per fence (PyTorch's
// 32 idle pool streams: ~50 000 questions a resnet process), a context fence asks one event per
// device, and THE ORDER is one record and one wait instead of a question and a stream wait per
// stream.
//
// What it costs in safety, and how each cost is kept out:
//   - CAPTURES. Both calls refuse while any stream of the context captures, in ANY capture mode
//     (relaxed included, even from a thread in relaxed mode), and INVALIDATE that capture (the
//     H100 showed all three modes). So they are made only inside the capture gate (captures.h)
//     with no counted capture underway, none can begin until the gate is left, and only where
//     every capture begin is counted: not with a driver newer than the newest whose begins we
//     all wrap (cci__capture_unseen_possible). A refusal all the same (a begin we missed) stops
//     context fences for the rest of the process, with a warning.
//   - CONTEXTS OF THE PROGRAM'S OWN. A record covers its context only. Our pools live in the
//     primary contexts, and the lazy coverage looks at every registered non-blocking stream,
//     whatever its context. So the first stream registered in another context (cuCtxCreate, a
//     green context) stops context fences for the rest of the process: from then on every fence
//     is the lazy kind again. A context fence recorded before has nothing to cover there: that
//     stream was registered after it (its work is after the fence's frees).
//   - DESTROYED STREAMS. Their last work stays covered by their retired events, as before; a
//     context fence does not rely on the record covering a stream already destroyed.
// Off with CCI_CONTEXT_FENCES=0 (comparisons), and where the driver lacks either call (< 12.5).
#ifndef CCI_PRELOAD_CONTEXT_FENCES_H
#define CCI_PRELOAD_CONTEXT_FENCES_H

#include "export.h"
#include <stdatomic.h>

#include "real.h"

/// 1 while context fences may be recorded (decided at start-up, cleared for good by a stop).
extern _Atomic int cci__context_fences_on CCI_HIDDEN;

static inline int cci_context_fences_usable(void)
{
    return atomic_load_explicit(&cci__context_fences_on, memory_order_acquire);
}

/// At start-up, once the driver is loaded and cci_capture_note_driver has run: on when the
/// setting allows it, the driver has both calls and every capture begin is counted.
void cci_context_fences_start(int allowed);

/// A stream about to be registered (its handle not yet the program's): context fences stop if
/// its context is not `device`'s primary context, or cannot be told.
void cci_context_fences_note_stream(CUstream s, int device);

/// Stops context fences for the rest of the process; `why` goes to the log (a warning when
/// `warn`) and to the exit line.
void cci_context_fences_stop(const char *why, int warn);

/// For the exit line: "on", or why they are off.
const char *cci_context_fences_state(void);

#endif
