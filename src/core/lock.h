// SPDX-License-Identifier: MIT
// The allocator's lock (taken by cci__lock, lock_protocol.c): one word, taken with a
// compare-and-swap and given back with an exchange; the kernel is asked only when a thread has to
// wait.
//
// Why not a pthread mutex: glibc's lock and unlock cost 67 instructions a locked section around
// the same two atomic operations (its type dispatch, owner and user counts), 7 % of the mixed
// workload's operation through the hooks, where every operation takes the lock (callgrind,
// commit 1813000).
// A waiter behaves as with PTHREAD_MUTEX_ADAPTIVE_NP, which the allocator used: a short spin (a
// section lasts tens of nanoseconds), then sleep in the kernel (lock.c).
#ifndef CCI_LOCK_H
#define CCI_LOCK_H

#include <stdatomic.h>

/// 0: free; 1: held; 2: held, and a thread may sleep waiting for it (its release wakes one).
typedef struct {
    _Atomic int word;
} cci_lock;

/// Contended: returns with the lock held (lock.c).
void cci_lock_wait(cci_lock *l);
/// A thread may sleep on the lock just given back: wakes one.
void cci_lock_wake(cci_lock *l);

static inline void cci_lock_take(cci_lock *l)
{
    int free_word = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->word, &free_word, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        cci_lock_wait(l);
}

static inline void cci_lock_give(cci_lock *l)
{
    if (atomic_exchange_explicit(&l->word, 0, memory_order_release) == 2)
        cci_lock_wake(l);
}

#endif
