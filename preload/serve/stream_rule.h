// SPDX-License-Identifier: MIT
// The reuse rule: when a block freed with cudaFree may be reused, from what the program does with
// streams, threads, devices, peer access and captures.
//
// THE RULE. A block freed with cudaFree / cuMemFree_v2 is
//   - CCI_FREE_NOW (reusable at once) while the program's work can only be ordered: no stream was
//     ever created (runtime or driver), at most one host thread has allocated or freed through us,
//     one device has an allocator, no peer access was enabled and no capture was begun;
//   - CCI_FREE_FENCED from the moment one of those stops being true (a fence recorded on every
//     stream that may still use the block, cuda/fence_*.c). Only created streams can be
//     undone: once every one of them has been destroyed and its last work has run (its retired
//     event passed), and nothing else broke the order, the rule RETURNS to ordered (below);
//     a second thread, device, peer access or capture keeps it fenced for the rest of the process;
//   - CCI_FREE_DEFERRED while a capture may be underway (as before: nothing may be recorded on the
//     legacy stream then), and when the backend has no fences (the core then syncs the device).
// immediate_reuse:True keeps meaning "always NOW" (unsafe with more than one stream).
//
// WHY ORDERED IS SAFE (docs/reuse-modes.md argues every case in full). With no created stream,
// every piece of work of a thread goes to the legacy stream or to that thread's per-thread stream,
// and the two are ordered with each other (the per-thread stream synchronises with the legacy
// stream like a blocking stream). With one such thread and one device without peer access, all
// work that can touch our memory is therefore one FIFO: work queued after the free (the new
// owner's) runs after work queued before it (the old owner's), so reuse at once is what a real
// cudaFree followed by cudaMalloc would give. A second host thread breaks this only through its
// own per-thread stream, but kernel launches on cudaStreamPerThread pass no hook of ours, so a
// second thread is taken as "may use its own per-thread stream". A second device or peer access
// lets another context's streams touch our memory; a capture records work for a graph that may
// be launched on any stream.
//
// THE SWITCH. Blocks freed with NOW just before the switch may still have old work queued on the
// legacy stream when work on a new stream (which is not ordered with it) reuses them. So the hook
// that causes the switch synchronises every device that has an allocator once, BEFORE forwarding
// the call that creates the unordered situation (the stream, the peer access, the capture) or
// before serving the second thread / device: afterwards no cached block has pending work, and
// every later free is fenced. A racing free that still saw "ordered" queued its work before the
// flag changed, hence before the synchronisation.
//
// THE RETURN. PyTorch programs often create a stream or two at start-up and destroy them again
// (the encoder workload on the H100: one stream, then 2 266 fences and 1.4 s of host waits a
// process, every one of them for work queued on the legacy stream alone). When the registry is
// empty, no stream creation is in flight, no reason other than a created stream ever arose, and
// every destroyed stream's retired event has passed, all work that can still run or be queued is
// the legacy stream's (and the one thread's per-thread stream's) again: the ordered case above.
// Blocks freed before the return keep their fences; frees from then on are NOW. A creation
// after the return switches again, with the synchronisation (so a process that creates and
// destroys streams in a loop pays one per return: returns stop after CCI_RULE_MAX_RETURNS).
// Tried on fenced frees only, and only every few of them (a retired event costs a query).
//
// THE BARRIER. PyTorch's backward pass runs on its own thread, so training on one GPU without side
// streams is fenced for "a second host thread" (encoder on the H100, commit 8f9a848: 2 238 fences,
// 1.5 s of host waits a process). Yet every stream such a program can use is ordered through the
// legacy stream: blocking streams and per-thread default streams wait for earlier legacy work, and
// the legacy stream for their earlier work (ordering facts 1 and 3). So the fence's own event,
// recorded on the legacy stream after the frees, is a barrier: work queued after it, on any of
// those streams, runs after the old owners' work. While no non-blocking stream is live or being
// created, no destroyed stream's last work is pending, one device holds a fence event and no
// peer access or capture was begun, a fenced batch is reusable as soon as its fence is recorded
// (backend.h, fence_ops.orders); the host never waits for it. Unmapping still waits for fences to
// pass. Leaving that situation: blocks handed out under a barrier may still have old work
// queued. So before a second device, peer access or a capture can exist, the devices are
// synchronised once barriers were taken; a non-blocking stream instead waits for the legacy
// stream's earlier work when it is registered, before the program has its handle.
//
// THE ORDER. With non-blocking streams live (PyTorch's idle stream pool, NCCL's streams), a
// fence is no barrier, and the host used to wait for it whenever its batch was wanted for reuse.
// Under the barrier's other conditions the CUDA backend now answers such a wait on the GPU:
// every non-blocking stream is made to wait for the legacy stream, after the legacy stream was
// made to wait for the busy ones (cuda/fence.c, fence_order; docs/reuse-modes.md).
#ifndef CCI_PRELOAD_STREAM_RULE_H
#define CCI_PRELOAD_STREAM_RULE_H

#include "export.h"
#include <stdatomic.h>

#include "stream_registry.h"

/// Why the process left the ordered rule (CCI_RULE_ORDERED: it has not).
typedef enum cci_rule_reason {
    CCI_RULE_ORDERED = 0,
    CCI_RULE_STREAM_CREATED,
    CCI_RULE_SECOND_THREAD,
    CCI_RULE_SECOND_DEVICE,
    CCI_RULE_PEER_ACCESS,
    CCI_RULE_CAPTURE,
} cci_rule_reason;

/// 0 while ordered; non-zero from the start of the switch on (fast path: one relaxed load).
extern _Atomic int cci__rule_fenced CCI_HIDDEN;

static inline int cci_rule_ordered(void)
{
    return atomic_load_explicit(&cci__rule_fenced, memory_order_relaxed) == 0;
}

/// Leaves the ordered rule for `why` (later calls while fenced return at once): marks every free
/// from now on fenced, then synchronises every device with an allocator. Call it with no
/// allocator lock held, before the call that creates the unordered situation is forwarded.
/// Does nothing under CCI_DEBUG_UNSAFE=no-stream-rule.
void cci_rule_switch(cci_rule_reason why);

/// Around a stream creation we observe (runtime or driver): begin switches to fenced (as
/// cci_rule_switch(CCI_RULE_STREAM_CREATED)) and keeps the rule from returning to ordered until
/// end, which is called after the new stream is in the registry (or the creation failed).
/// `flags` as the creation got them (CCI_CU_STREAM_NON_BLOCKING or not): a non-blocking stream is
/// outside THE BARRIER's order, so begin also synchronises once barriers were taken.
void cci_rule_stream_create_begin(unsigned flags);
void cci_rule_stream_create_end(unsigned flags);

/// How many times the rule may return to ordered in one process (THE RETURN).
#define CCI_RULE_MAX_RETURNS 16

/// For a free about to be fenced: 1 when the rule returned to ordered (the free is NOW). A return
/// may be possible only while the registry says it emptied (cci__stream_registry_emptied: fenced
/// only for created streams, and the last one was destroyed): one relaxed load on the fenced
/// free path.
int cci__rule_try_return(void);
static inline int cci_rule_back_to_ordered(void)
{
    return __builtin_expect(atomic_load_explicit(&cci__stream_registry_emptied, memory_order_relaxed), 0) &&
           cci__rule_try_return();
}

/// The serving layer's notes, cheap on the fast path (one thread-local / relaxed load each):
/// the calling thread allocates or frees through us; `device` gets (or has) an allocator.
void cci__rule_note_new_thread(void);
extern _Thread_local int cci__rule_thread_seen __attribute__((tls_model("initial-exec")));
static inline void cci_rule_note_thread(void)
{
    if (__builtin_expect(!cci__rule_thread_seen, 0))
        cci__rule_note_new_thread();
}
void cci__rule_note_new_device(int device);
extern _Atomic int cci__rule_first_device CCI_HIDDEN;  // -1 until the first allocation
static inline void cci_rule_note_device(int device)
{
    if (__builtin_expect(atomic_load_explicit(&cci__rule_first_device, memory_order_relaxed) !=
                             device, 0))
        cci__rule_note_new_device(device);
}

/// A capture is about to begin (either level): the rule switches (no synchronisation is possible
/// during a capture), then the capture is counted inside the capture gate (cuda/captures.h).
void cci_rule_capture_begins(void);

/// The exit line (CCI_LOG=info): which rule the run ended under, fences recorded, host waits.
void cci_rule_log_exit(void);

/// A fork child: no threads but this one, the ordered rule again.
void cci_rule_atfork_child(void);

#endif
