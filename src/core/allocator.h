// SPDX-License-Identifier: MIT
// One caching allocator instance per device: PyTorch's native policy on top of a cci_backend.
#ifndef CCI_ALLOCATOR_H
#define CCI_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "ccinterpose.h"
#include "config.h"

typedef struct cci_allocator cci_allocator;

/// What a free does to the block's reusability.
typedef enum cci_free_mode {
    CCI_FREE_NOW,       ///< reusable at once on the block's own stream (cudaFreeAsync on that stream)
    CCI_FREE_DEFERRED,  ///< reusable only after the backend has synchronised the device
    /// reusable once a fence recorded after the free has passed (fenced.c); DEFERRED when the
    /// backend has no fences
    CCI_FREE_FENCED,
    /// reusable only when the caller says so (cci_free_complete_held): how a replay makes a block
    /// reusable exactly where the recorded run's free completed (a fence passing is a fact of the
    /// run, not of the configuration)
    CCI_FREE_HELD,
} cci_free_mode;

/// Events an observer (trace recorder, report timeline) sees, in PyTorch snapshot vocabulary.
/// The one event enum: traces store these values (docs/trace-format.md), so append, never renumber.
typedef enum cci_event_kind {
    CCI_EV_ALLOC, CCI_EV_FREE_REQUESTED, CCI_EV_FREE_COMPLETED,
    CCI_EV_SEGMENT_ALLOC, CCI_EV_SEGMENT_FREE, CCI_EV_OOM,
    // 6 is taken by the binary trace's device record (trace/trace_bin.h).
    CCI_EV_SEGMENT_MAP = 7,    ///< pages mapped into an expandable segment (addr, size: the pages)
    CCI_EV_SEGMENT_UNMAP = 8,  ///< pages unmapped from an expandable segment
} cci_event_kind;

typedef struct cci_event {
    cci_event_kind kind;
    int device;
    uint64_t stream;
    uintptr_t addr;
    size_t size;       ///< block or segment size (rounded)
    size_t requested;  ///< what the program asked for (alloc and OOM); the cci_free_mode taken (free_requested)
    /// The allocator's order of its events, for observers that take them in batches: by `order`,
    /// then, between the events of several threads with the same `order`, by `stamp` (each
    /// thread's events in the order it made them). Events of a locked section have an even
    /// `order`; the fast paths' events after that section, the next odd one.
    uint64_t order;
    uint64_t stamp;
} cci_event;

/// Called under the allocator lock: keep it short, never call back into the allocator.
/// Up to CCI_MAX_OBSERVERS may be attached (trace recorder, report timeline).
typedef void (*cci_observer_fn)(void *ud, const cci_event *ev);

/// A fast path's block event, as a thread cache logs it and a batch observer gets it
/// (cci_batch_fn): an allocation, or a free reusable at once, which stands for the two events a
/// locked free makes, CCI_EV_FREE_REQUESTED (mode CCI_FREE_NOW) and CCI_EV_FREE_COMPLETED (they
/// happen together, with one stamp). Device and order are the batch's. 40 bytes for what took three
/// 56-byte cci_events a pair: writing and reading those was most of what the observers added to
/// every served allocation and free (callgrind, commit 709daa7).
typedef struct cci_fast_event {
    uintptr_t addr;
    size_t size;       ///< the block size (rounded)
    size_t requested;  ///< an allocation: what the program asked for; else one of the three below
    uint64_t stream;
    uint64_t stamp;    ///< as cci_event.stamp
} cci_fast_event;
#define CCI_FAST_FREED SIZE_MAX  ///< a free reusable at once: its request and completion
/// A fenced free a thread keeps (its own fence, tcache_fenced.c): the request alone (mode
/// CCI_FREE_FENCED), then, once the thread found its fence passed, CCI_FAST_COMPLETED (the stream
/// the block's). Each stands for one event.
#define CCI_FAST_FENCED (SIZE_MAX - 1)
#define CCI_FAST_COMPLETED (SIZE_MAX - 2)
/// Whether a fast record is an allocation (else one of the frees' records).
#define CCI_FAST_IS_ALLOC(requested) ((requested) < CCI_FAST_COMPLETED)

/// A batch: `n` fast-path records of one thread, oldest first, standing for `events` events, all
/// of the odd `order`.
typedef struct cci_fast_batch {
    uint64_t order;
    cci_fast_event *ev;  ///< the thread cache's log (see may_keep)
    size_t n, events;
    /// The log is full and may be kept: the door may return 1, and the log (malloc'ed) is then
    /// the observer's, to free() once the allocator is gone, never before (the doors after it
    /// and the unlock still read it); the cache takes another. Otherwise the door returns 0 and
    /// the log is reused once it returns. This lets a history keep a full log as it is, where
    /// copying it had cost as much as the rest of its work.
    int may_keep;
} cci_fast_batch;

/// A batch observer's door for the fast paths' block events (per-thread caches: allocations and
/// frees reusable at once). Called without the allocator lock, by the thread that made them or
/// by a lock holder, and possibly by several threads at once: the observer takes a lock of its
/// own or keeps per-thread state. What it is guaranteed: every event of an even `order` reaches
/// `fn` after every fast-path event of a lower `order` reached `batch`, and before any of a higher
/// one. So sums kept by a batch observer are exact whenever `fn` is called. Telling events one at
/// a time, in one order, under one lock, is what had kept threads from scaling: the batches let
/// each thread hand its own events over.
typedef int (*cci_batch_fn)(void *ud, const cci_fast_batch *b);

/// Creates the allocator of `device`. The configuration is copied. NULL on host out-of-memory.
cci_allocator *cci_allocator_create(int device, const cci_config *cfg, cci_backend backend);
/// Destroys it. release_segments = 1 gives every segment back to the backend first; 0 forgets
/// them (a fork child, or exit when the device is already gone).
void cci_allocator_destroy(cci_allocator *a, int release_segments);

/// fork() support (pthread_atfork order): prepare takes the allocator lock so that no other
/// thread is half-way through a change when the address space is copied; parent releases it;
/// child releases it and destroys the copy without touching any segment.
void cci_allocator_fork_prepare(cci_allocator *a);
void cci_allocator_fork_parent(cci_allocator *a);
void cci_allocator_fork_child(cci_allocator *a);

#define CCI_MAX_OBSERVERS 4
/// Attaches an observer; returns 0, or -1 when all slots are taken.
int cci_allocator_add_observer(cci_allocator *a, cci_observer_fn fn, void *ud);
/// The same for the event kinds in `kinds` only (a mask of 1u << cci_event_kind): an observer
/// of segments need not be called for each of the allocations.
int cci_allocator_add_observer_of(cci_allocator *a, cci_observer_fn fn, void *ud, unsigned kinds);
/// An observer with a batch door (cci_batch_fn): `fn` gets the events of locked sections, one at
/// a time under the lock; `batch` the fast paths' block events, per thread, without it.
int cci_allocator_add_batch_observer(cci_allocator *a, cci_observer_fn fn, cci_batch_fn batch, void *ud,
                                     unsigned kinds);
/// Every event made up to now reaches the observers before this returns (a stop).
void cci_allocator_flush_events(cci_allocator *a);

/// Hands out a block of at least `size` bytes on `stream` (size 0 gets the minimum block).
/// CCI_OK and *out, CCI_EOOM after every retry, CCI_EBACKEND when the device failed otherwise.
int cci_malloc(cci_allocator *a, size_t size, uint64_t stream, uintptr_t *out);
/// Frees a block. `stream` is where the program freed it; a block freed on another stream than
/// its own is always deferred. CCI_OK, CCI_EINVAL (inside a segment of ours but not a live block
/// start: a double free or an interior pointer), or CCI_ENOTOURS (not ours at all).
int cci_free(cci_allocator *a, uintptr_t ptr, uint64_t stream, cci_free_mode mode);

/// Completes a CCI_FREE_HELD free: the block becomes reusable now (FREE_COMPLETED is observed).
/// CCI_OK, or CCI_EINVAL when `ptr` is not the start of a held block.
int cci_free_complete_held(cci_allocator *a, uintptr_t ptr);

/// Looks up a live block. CCI_OK with its start, size and the segment around it; CCI_EINVAL /
/// CCI_ENOTOURS as cci_free. `ptr` may point anywhere inside the block. Outputs may be NULL.
int cci_block_info(cci_allocator *a, uintptr_t ptr, uintptr_t *block, size_t *block_size,
                   uintptr_t *segment, size_t *segment_size);

/// Makes every deferred and fenced free reusable (synchronising or waiting as needed) and gives
/// every whole cached segment back to the backend.
void cci_alloc_empty_cache(cci_allocator *a);
/// Bytes cached (reserved but not allocated and reusable) — what cudaMemGetInfo may count as free.
size_t cci_cached_free_bytes(cci_allocator *a);

/// A consistent copy of the statistics.
void cci_alloc_stats(cci_allocator *a, cci_stats *out);
/// Resets peaks to the current values (torch.cuda.reset_peak_memory_stats).
void cci_alloc_reset_peaks(cci_allocator *a);
const cci_config *cci_allocator_config(const cci_allocator *a);
int cci_allocator_device(const cci_allocator *a);
/// 1 when the allocator runs on the simulated device of backend.h (tests, ccreplay): reports
/// name such a device as simulated.
int cci_allocator_simulated(const cci_allocator *a);

// ---- snapshot of the block layout (for reports and for the model check) -------------------
typedef struct cci_block_desc {
    uintptr_t addr;
    size_t size;
    size_t requested;   ///< 0 for free blocks
    int state;          ///< 0 free, 1 allocated, 2 freed but waiting (deferred)
} cci_block_desc;

typedef struct cci_segment_desc {
    uintptr_t addr;
    size_t size;
    uint64_t stream;
    int small_pool;
    size_t nblocks;
    cci_block_desc *blocks;  ///< points into cci_layout.block_storage
} cci_segment_desc;

typedef struct cci_layout {
    size_t nsegments;
    cci_segment_desc *segments;   ///< ordered by address
    cci_block_desc *block_storage;
    cci_stats stats;              ///< taken in the same critical section
} cci_layout;

/// Copies the whole layout under the lock. 0 or -1 (host out-of-memory). Free with cci_layout_free.
int cci_layout_take(cci_allocator *a, cci_layout *out);
void cci_layout_free(cci_layout *l);
/// Runs fn(ud) under the allocator lock: how an observer's owner reads the observer's state
/// consistently (observers themselves always run under that lock).
void cci_allocator_with_lock(cci_allocator *a, void (*fn)(void *ud), void *ud);
/// Keeps a copy of the layout each time reserved memory reaches a new peak (for reports).
void cci_allocator_track_peak(cci_allocator *a, int on);
/// Per-thread caches in front of the lock (src/core/tcache.h): a block freed for reuse at once on
/// its own stream stays with the freeing thread for its next allocation of that size and stream.
/// Off by default, so that a replay decides exactly as PyTorch's allocator; the preload turns it on.
void cci_allocator_thread_cache(cci_allocator *a, int on);
/// The layout at the last reserved peak; -1 when none was kept.
int cci_layout_take_peak(cci_allocator *a, cci_layout *out);

/// Runs the expensive whole-structure invariant check (test builds): -1 and a message on failure.
int cci_allocator_check(cci_allocator *a, char *msg, size_t msglen);

// ---- rounding rules (rounding.c), exported for tests and the replay tool -------------------
size_t cci_round_size(const cci_config *c, size_t size);
size_t cci_segment_size(const cci_config *c, size_t rounded);
int cci_is_small(size_t rounded);

#endif
