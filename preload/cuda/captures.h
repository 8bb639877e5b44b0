// SPDX-License-Identifier: MIT
// Whether a graph capture may be underway: captures counted as they begin and end, the capture
// gate for our own background questions, and the driver's answer about one stream.
#ifndef CCI_PRELOAD_CAPTURES_H
#define CCI_PRELOAD_CAPTURES_H

#include "export.h"
#include <stdatomic.h>

#include "cuda_abi.h"

/// Captures begun (through the runtime or the driver's cuStreamBeginCapture[ToGraph]) and not
/// ended yet, in any thread; counted before they begin.
extern _Atomic int cci__captures CCI_HIDDEN;

/// Cheap test for the fast path: 0 means no counted capture is underway, so no stream needs
/// asking. A capture begun behind our back (a begin we do not wrap, such as CUDA 13.3's
/// cuStreamBeginRecaptureToGraph) is not seen here; the backend then finds out from the driver's
/// own refusal.
static inline int cci_capture_maybe_active(void)
{
    return atomic_load_explicit(&cci__captures, memory_order_relaxed) > 0;
}

/// Set at start-up (cci_capture_note_driver): 1 when the driver is newer than the newest whose
/// capture begins we all count (CUDA 13.0), so a capture may be underway that no count shows.
extern _Atomic int cci__capture_unseen_possible CCI_HIDDEN;

/// Whether a stream-ordered allocation or free must ask its stream whether it captures: while a
/// counted capture is underway, and on every call with a driver newer than the begins we know
/// (CUDA 13.3 added cuStreamBeginRecaptureToGraph, which we do not count). A cached pointer
/// handed out during a capture would be baked into the graph instead of a MEM_ALLOC node.
static inline int cci_capture_ask_streams(void)
{
    return cci_capture_maybe_active() ||
           atomic_load_explicit(&cci__capture_unseen_possible, memory_order_relaxed);
}

/// At start-up, once the driver is loaded: decides cci__capture_unseen_possible.
void cci_capture_note_driver(void);

/// The capture gate (captures.c), for a thread of ours that asks the program's streams in the
/// background: 1 with the gate held and no counted capture underway (none can begin until
/// cci_capture_gate_leave), 0 (gate not held) while one may be.
int cci_capture_gate_enter(void);
void cci_capture_gate_leave(void);
/// The gate's shared side, for a call that only must not meet a capture's begin (a context
/// fence's record): 1 held, side by side with other sharers and with the gate's holder, 0 (not
/// held) while a capture may be underway or beginning. A begin waits for every sharer to leave.
int cci_capture_gate_share(void);
void cci_capture_gate_unshare(void);
/// For the capture hooks of both levels: a capture about to begin, counted inside the gate (after
/// the stream rule switched: serve/stream_rule.h, cci_rule_capture_begins), a begin that failed
/// (taken back), a capture that ended.
void cci_capture_count_begin(void);
void cci_capture_begin_failed(void);
void cci_capture_ended(void);

/// What the driver says of `s` (`ptsz`: the per-thread entry point): 1 capturing (active or
/// invalidated), 0 not capturing, -1 it could not say. Allowed on a capturing stream.
int cci_stream_driver_capturing(CUstream s, int ptsz);

/// A fork child has no captures (they belonged to the parent's threads).
void cci_streams_atfork_child(void);

#endif
