// SPDX-License-Identifier: MIT
// The allocator lock's waits (lock.h): the word is 2 while a thread may sleep on it, so that only
// then does the release ask the kernel (Drepper, "Futexes Are Tricky", the third mutex).
#include "lock.h"

#include <sched.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

// Tries before sleeping: a locked section lasts tens of nanoseconds, a sleep and a wake-up
// microseconds. glibc's adaptive mutex spins up to 100 times too.
#define SPINS 100

static void pause_briefly(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Sleeps while the word is still 2 (returns at once when it is not, or at a wake-up).
static void sleep_on(cci_lock *l)
{
#ifdef __linux__
    syscall(SYS_futex, &l->word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
#else
    sched_yield();
#endif
}

void cci_lock_wait(cci_lock *l)
{
    for (int i = 0; i < SPINS; i++) {
        pause_briefly();
        int w = atomic_load_explicit(&l->word, memory_order_relaxed);
        if (w == 2)
            break;  // others sleep already: queue behind them
        if (w == 0 && atomic_compare_exchange_weak_explicit(&l->word, &w, 1, memory_order_acquire,
                                                            memory_order_relaxed))
            return;
    }
    // From here the word says "waited for" (2) while held: taking it with 2 rather than 1 may cost
    // one needless wake-up at the release, never a missed one.
    while (atomic_exchange_explicit(&l->word, 2, memory_order_acquire) != 0)
        sleep_on(l);
}

void cci_lock_wake(cci_lock *l)
{
#ifdef __linux__
    syscall(SYS_futex, &l->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
    (void)l;
#endif
}
