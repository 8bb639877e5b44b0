// SPDX-License-Identifier: MIT
// Per-thread caches in front of the allocator lock (tcache.c): the fast path.
//
// A thread that frees a block it may reuse at once (CCI_FREE_NOW, on the block's own stream) keeps
// it in a small magazine of its own, keyed by (stream, size); its next allocation of that exact
// rounded size on that stream takes it back without the allocator lock. Nothing else changes:
//   - every critical section of the allocator (cci__lock) first brings every thread cache to a
//     stop and folds its statistics into the allocator's; its events reach the observers, in time
//     order, at the unlock. Before the policy searches the free set, the magazine blocks that
//     could change its choice go back to it (a locked allocation: the caller's own, and the other
//     threads' that fit the request better than the free set's best; empty_cache, a layout: all),
//     so the policy decides as it would without the caches (a fast path's own hit is the
//     thread's last freed block of exactly that size: an exact fit, but not always the block of
//     that size at the lowest address, which the policy would take);
//   - statistics are exact, peaks included: a thread may raise a statistic without the lock only
//     within a credit, and the credits of all threads never exceed the distance between the
//     current value and its peak (recomputed at every unlock). So no increase made without the
//     lock can pass a peak; one that would takes the lock, which records it;
//   - the safety rules do not move: only a block freed for reuse at once on its own stream enters
//     a magazine, and it leaves it only for the same stream. A small block freed FENCED waits in
//     the thread's own batches behind the thread's own fence (tcache_fenced.c), and serves the
//     thread only once that fence has passed.
#ifndef CCI_TCACHE_H
#define CCI_TCACHE_H

#include "allocator_impl.h"

typedef struct cci_tc cci_tc;

/// Takes the allocator lock: the mutex, then every thread cache stopped and emptied (see above).
void cci__lock(cci_allocator *a);
/// Recomputes the credits and lets the thread caches run again, then drops the mutex.
void cci__unlock(cci_allocator *a);
/// Drops the mutex only (a fork child, which destroys the allocator next).
void cci__lock_give(cci_allocator *a);

/// The fast paths. CCI_OK when served; CCI_ENOTOURS when not (no cache, a miss, no credit, a
/// stop in progress): the caller takes the locked path, which gives the same answer. A full
/// event log is flushed (a stop that moves no block) and the fast path tried once more.
int cci__tc_alloc(cci_allocator *a, size_t rounded, size_t requested, uint64_t stream, uintptr_t *out);
int cci__tc_free(cci_allocator *a, uintptr_t ptr, uint64_t stream);
/// A fenced free of a small block this thread may free (tcache_fenced.c): kept in the thread's
/// own batches, reusable by its allocations once their fence has passed. CCI_OK or CCI_ENOTOURS.
int cci__tc_free_fenced(cci_allocator *a, uintptr_t ptr, uint64_t stream);
/// Lock held: every magazine block goes back to the free set (merged with its free neighbours),
/// so that the policy decides on the state it would have without the caches. Called where the
/// policy searches or shows the free set: allocations on the locked path, empty_cache, reset,
/// layouts and checks, a thread's exit. Other stops (frees, statistics, log flushes) leave the
/// magazines alone: their blocks already count as freed.
void cci__tc_drain_all(cci_allocator *a);
/// Lock held, before the pool would grow: every block the calling thread keeps behind its own
/// fences goes to the allocator (tcache_fenced.c), and in the virtual-memory modes, for a `small`
/// request, those of every thread idle for HELD_QUIET_STOPS stops: the policy then orders, waits
/// for or skips those fences as for its own. 1 when there were any.
int cci__tc_held_give_back(cci_allocator *a, int small);
/// Lock held: a passed block of `rounded` on `stream` that the calling thread keeps, out of its
/// batches (its state KEPT, its figures those of a free block), or NULL. The thread's kept blocks
/// otherwise stay with it at a locked allocation (cci__tc_drain_mine leaves them).
cci_block *cci__tc_held_take(cci_allocator *a, size_t rounded, uint64_t stream);
/// Lock held: whether the pool may grow for a small request while the calling thread keeps
/// fenced frees, instead of taking them back: within HELD_MAX_BYTES per cache in all, and in the
/// virtual-memory modes only while another thread's fast paths are at work.
int cci__tc_held_may_grow(const cci_allocator *a, size_t rounded);
/// Lock held: the calling thread's magazine blocks only (not its kept fenced frees: those go back
/// before the pool would grow, cci__tc_held_give_back). A locked allocation starts with these,
/// and takes the other threads' blocks only when one of them fits the request better than the
/// free set's best (cci__tc_fitting): draining every thread at every locked allocation made
/// one thread's miss empty the others' magazines, so that their next allocations missed too.
void cci__tc_drain_mine(cci_allocator *a);
/// Lock held: the other threads' magazine blocks on `stream` in the pool `small` that can hold
/// `rounded` and are smaller than `than`: how many there are, and with `drain` set, put back into
/// the free set.
size_t cci__tc_fitting(cci_allocator *a, uint64_t stream, int small, size_t rounded, size_t than, int drain);

// Lock held.
/// cci_malloc did not ask the fast path (tc_fast 0: the only cache is set aside): the allocation
/// counts down the caller's time aside here, as cci__tc_alloc would have.
void cci__tc_skipped(cci_allocator *a);
/// The calling thread was handed `b` by the locked path: it may free it on its fast path.
void cci__tc_own(cci_allocator *a, cci_block *b);
/// `b` leaves the allocated state through the locked path: no fast path may touch it any more.
void cci__tc_disown(cci_block *b);
/// The allocator forgets every block (reset, destroy): the caches forget theirs, and their
/// statistics and credits start over with the allocator's.
void cci__tc_forget_all(cci_allocator *a);
/// Destroy: the caches of live threads stay allocated until their thread exits; they are cut off
/// from the allocator now.
void cci__tc_detach_all(cci_allocator *a);
/// In a fork child, before `a` is destroyed: the registry lock may have been held by a thread that
/// does not exist here, and `a`'s caches are freed (the forking thread is the only thread left).
void cci__tc_fork_child(cci_allocator *a);

#endif
