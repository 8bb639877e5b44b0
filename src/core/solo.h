// SPDX-License-Identifier: MIT
// One thread's fast paths without a locked instruction.
//
// Every fast path of a thread cache took its gate with a compare-and-swap (tcache.c), because the
// lock holder of any other thread may stop the cache at any moment. That one locked instruction,
// two a pair, was ~6 ns of a ~32 ns cudaMallocAsync+cudaFreeAsync pair on the development machine
// (docs/benchmarks.md, commit 36971b1), and callgrind cannot see it: it counts one instruction.
//
// The lock itself costs two more (its compare-and-swap and its exchange, lock.h) in every locked
// section: every operation of the mixed workload, every fenced cudaMalloc.
//
// While a single thread is the only one that has ever taken an allocator's lock, no other thread
// can stop its cache or contend for the lock. Its fast paths then mark themselves with plain stores
// (the cache's in_fast word) and leave the gate alone, and its locked sections do the same with
// `in_section` instead of taking the lock word. The first other thread to take the lock (the lock
// word, which the owner no longer touches) ends this for good, as a JVM revokes a biased lock: it
// clears `on`, makes every thread of the process pass a full memory barrier (membarrier(2)), and
// waits until the owner is outside its locked section and its fast path; from then on the owner
// takes the lock word and the gate as every thread does.
//
// Why plain stores are enough: the owner stores in_fast (in_section) = 1, then reads `on`; the
// revoker stores on = 0, then, after the barrier, reads in_fast (in_section). Where the owner's CPU
// passed the barrier after its store, the revoker sees 1 and waits for the owner to leave. Where it
// passed it before, the owner's read of `on` comes after the barrier too and sees 0: it backs out
// before touching anything. A thread not running at the time passes a barrier when it is next
// scheduled. The same argument, with a compiler barrier on the fast side, is liburcu's and
// folly's asymmetric fence. The revoker waits only where the lock holder would have made it wait
// anyway (for the section, or the fast path, in progress), so no new deadlock can arise.
//
// Without the system call (not Linux, a kernel before 4.14, a sandbox that refuses it) `on` starts
// at 0: every fast path takes the gate, as before.
#ifndef CCI_SOLO_H
#define CCI_SOLO_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    _Atomic int on;             // 1: every lock so far was taken by `thread` (read by every fast path)
    _Atomic uintptr_t thread;   // that thread's token (0: no lock taken yet); set under the lock word
    _Atomic int in_section;     // 1 while `thread` is in a locked section entered solo
    int held;                   // the section in progress was entered solo (its unlock reads it)
} cci_solo;

/// At the allocator's creation: on where the kernel offers the barrier that ending it needs.
void cci_solo_init(cci_solo *s);

/// Out of line: the solo state ended by `self`, a second thread (see cci_solo_note_lock).
void cci__solo_end(cci_solo *s);

/// Lock word held, taken by the thread `self` (a token unique among live threads). 1 when this
/// ended the solo state: the caller must then wait for the owner's locked section and fast path in
/// flight, if any (in_section, the cache's in_fast), before it touches the allocator.
static inline int cci_solo_note_lock(cci_solo *s, uintptr_t self)
{
    if (!atomic_load_explicit(&s->on, memory_order_relaxed))
        return 0;
    uintptr_t first = atomic_load_explicit(&s->thread, memory_order_relaxed);
    if (first == self)
        return 0;
    if (!first) {
        // The first locker. Its token may be reused by a later thread once it has exited: the same
        // single live thread then, and no section or fast path of the old one runs.
        atomic_store_explicit(&s->thread, self, memory_order_relaxed);
        return 0;
    }
    cci__solo_end(s);
    return 1;
}

/// A locked section entered solo, without the lock word: 1 when it was (the caller holds the
/// allocator), 0 when the caller must take the lock word (not solo, or not the solo thread).
static inline int cci_solo_enter_section(cci_solo *s, uintptr_t self)
{
    if (!atomic_load_explicit(&s->on, memory_order_relaxed) ||
        atomic_load_explicit(&s->thread, memory_order_relaxed) != self)
        return 0;
    atomic_store_explicit(&s->in_section, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    if (__builtin_expect(atomic_load_explicit(&s->on, memory_order_relaxed), 1)) {
        s->held = 1;
        return 1;
    }
    atomic_store_explicit(&s->in_section, 0, memory_order_release);
    return 0;
}

/// At the end of a locked section: 1 when it had been entered solo (now left), 0 when the caller
/// must give the lock word back.
static inline int cci_solo_leave_section(cci_solo *s)
{
    if (!s->held)
        return 0;
    s->held = 0;
    atomic_store_explicit(&s->in_section, 0, memory_order_release);
    return 1;
}

#endif
