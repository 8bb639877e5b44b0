// SPDX-License-Identifier: MIT
// One thread's fast paths without a locked instruction (issue 15).
//
// Every fast path of a thread cache took its gate with a compare-and-swap (tcache.c), because the
// lock holder of any other thread may stop the cache at any moment. That one locked instruction,
// two a pair, was ~6 ns of a ~32 ns cudaMallocAsync+cudaFreeAsync pair on the development machine
// (docs/benchmarks.md, session 15), and callgrind cannot see it: it counts one instruction.
//
// While a single thread is the only one that has ever taken an allocator's lock, no other thread
// can stop its cache. Its fast paths then mark themselves with plain stores (the cache's in_fast
// word) and leave the gate alone. The first other thread to take the lock ends this for good, as a
// JVM revokes a biased lock: it clears `on`, makes every thread of the process pass a full memory
// barrier (membarrier(2)), and waits until the owner is outside its fast path; from then on every
// fast path takes the gate with the compare-and-swap, as before.
//
// Why plain stores are enough: the owner stores in_fast = 1, then reads `on`; the revoker stores
// on = 0, then, after the barrier, reads in_fast. Where the owner's CPU passed the barrier after
// its store, the revoker sees in_fast = 1 and waits for the fast path to end. Where it passed it
// before, the owner's read of `on` comes after the barrier too and sees 0: it leaves the solo path
// before touching anything. A thread not running at the time passes a barrier when it is next
// scheduled. The same argument, with a compiler barrier on the fast side, is liburcu's and
// folly's asymmetric fence.
//
// Without the system call (not Linux, a kernel before 4.14, a sandbox that refuses it) `on` starts
// at 0: every fast path takes the gate, as before.
#ifndef CCI_SOLO_H
#define CCI_SOLO_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    _Atomic int on;   // 1: every lock so far was taken by `thread` (read by every fast path)
    uintptr_t thread; // that thread's token (0: no lock taken yet); under the allocator lock
} cci_solo;

/// At the allocator's creation: on where the kernel offers the barrier that ending it needs.
void cci_solo_init(cci_solo *s);

/// Out of line: the solo state ended by `self`, a second thread (see cci_solo_note_lock).
void cci__solo_end(cci_solo *s);

/// Allocator lock held, taken by the thread `self` (a token unique among live threads). 1 when
/// this ended the solo state: the caller must then wait for the owner's fast path in flight, if
/// any (the cache's in_fast), before it touches the owner's cache.
static inline int cci_solo_note_lock(cci_solo *s, uintptr_t self)
{
    if (__builtin_expect(!atomic_load_explicit(&s->on, memory_order_relaxed), 0) || s->thread == self)
        return 0;
    if (!s->thread) {
        s->thread = self;  // the first locker (its token may be reused by a later thread once it has
        return 0;          // exited: the same one live thread, and no fast path of the old one runs)
    }
    cci__solo_end(s);
    return 1;
}

#endif
