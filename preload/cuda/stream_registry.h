// SPDX-License-Identifier: MIT
// The streams the program created, and the flags the stream rule (serve/stream_rule.h) pushes
// down to the fences. The rule decides; the fences read these flags and never call up into it.
#ifndef CCI_PRELOAD_STREAM_REGISTRY_H
#define CCI_PRELOAD_STREAM_REGISTRY_H

#include "export.h"
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "real.h"

// ---- the rule's flags, as the fences read them ------------------------------------------------

/// Set by the rule, for the rest of the process, before work beyond the legacy stream's implicit
/// synchronisation can exist: a second device, peer access, a capture.
extern _Atomic int cci__fences_beyond_legacy CCI_HIDDEN;
/// The rule counts a non-blocking stream creation in flight (+1 at its begin, -1 at its end).
void cci_fences_nonblocking_creating(int delta);
/// THE BARRIER: asked as a fence is recorded (allocator lock held). 1 when nothing outside the
/// legacy stream's implicit synchronisation can touch our memory now (no live or coming
/// non-blocking stream, one device, no peer access, no capture), so the fence's legacy event,
/// once recorded, orders every later use after every earlier one; the caller also checks that the
/// destroyed streams' last work has run. Marks that barriers were granted (stays marked).
int cci_fences_may_barrier(void);
/// THE ORDER: asked before a fence's order is given in place of a wait. 1 when nothing but
/// non-blocking streams lies outside the legacy stream's implicit synchronisation (one device,
/// no peer access, no capture); the caller covers those streams. Marks barriers as granted too.
int cci_fences_may_order(void);
/// 1 once a barrier or an order was asked for: blocks may have been handed out with old work
/// queued, so the rule synchronises before unordered work, and a new non-blocking stream waits
/// for the legacy stream (cci_cuda_stream_created).
int cci_fences_barriers_granted(void);

// ---- the streams the program created ------------------------------------------------------

/// The fence group's state for one live non-blocking stream (fence_looks.c): which fences
/// its work is known to have passed, and its pending "sweep" events. Owned by the fence group,
/// kept in the stream's registry entry so that it goes when the stream does.
typedef struct cci_stream_cover cci_stream_cover;

/// One live stream as the registry hands it to the fence group (with the registry lock held).
typedef struct cci_stream_ref {
    CUstream s;
    int device;
    /// The registry's number for this stream: 1 for the first stream registered, 2 for the
    /// next... A fence that read cci_stream_registry_epoch() = N when it was recorded must cover
    /// exactly the streams with born <= N: a later one was registered after the record, so none
    /// of its work can come from before the free (the program gets the handle only after we
    /// registered it).
    unsigned long long born;
    cci_stream_cover **cover;  ///< the fence group's slot, NULL until it first looks at the stream
} cci_stream_ref;

/// A stream was created (runtime or driver; the same handle seen twice is recorded once). 1 when
/// it was added now; 0 when it was known already or could not be recorded (then
/// cci__stream_registry_incomplete is set). Called through cci_cuda_stream_created.
int cci_stream_registry_add(CUstream s, int device, unsigned flags);
/// The program is about to destroy `s`: it leaves the registry and, while the registry lock is
/// held, `retire(s, device, born, cover)` is called for it (the fence group keeps its last work
/// covered, and frees its cover), or with `retire` NULL `forget(cover)`. Unknown streams are
/// ignored. The fence group passes its own functions (cci_cuda_stream_destroyed).
void cci_stream_registry_remove(CUstream s, void (*retire)(CUstream s, int device,
                                                           unsigned long long born,
                                                           cci_stream_cover *cover),
                                void (*forget)(cci_stream_cover *cover));
/// The device's context goes (reset): so do its streams, without events (`forget` frees each
/// cover).
void cci_stream_registry_drop_device(int device, void (*forget)(cci_stream_cover *cover));
/// Calls fn for every live non-blocking stream with the registry lock held; stops at the first
/// non-zero answer and returns it. The lock also orders fn against remove's `retire`.
int cci_stream_registry_each_nonblocking(int (*fn)(const cci_stream_ref *r, void *arg), void *arg);
/// The number of the last stream registered so far (0: none); see cci_stream_ref.born.
unsigned long long cci_stream_registry_epoch(void);
/// Non-zero once a stream could not be recorded (out of host memory): fences cannot cover it,
/// so the fence group refuses to record and the core synchronises the device instead.
extern _Atomic int cci__stream_registry_incomplete CCI_HIDDEN;
/// Live streams registered now (without the lock; a moment's figure).
size_t cci_stream_registry_live(void);
/// Of those, the non-blocking ones (the same kind of figure).
size_t cci_stream_registry_nonblocking_live(void);
/// Streams created so far (all kinds) and live now.
void cci_stream_registry_counts(unsigned long *created, unsigned long *live);

/// Set (1) by a remove that emptied the registry, while cci__stream_registry_no_return is 0: the
/// rule may try to return to ordered (serve/stream_rule.h, THE RETURN); the rule clears it.
extern _Atomic int cci__stream_registry_emptied CCI_HIDDEN;
/// Set by the rule once a reason arose that no stream destruction undoes.
extern _Atomic int cci__stream_registry_no_return CCI_HIDDEN;

/// Stream destructions so far (and device resets): a thread's remembered stream devices are
/// valid only for the generation they were learnt in (intercept/streams.h).
extern _Atomic uint64_t cci__stream_generation CCI_HIDDEN;
/// A stream is about to be destroyed, or a device reset: every thread asks again.
void cci_streams_forget(void);

/// A fork child: no streams, no threads but this one.
void cci_stream_registry_atfork_child(void);

#endif
