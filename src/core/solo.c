// SPDX-License-Identifier: MIT
// The end of an allocator's solo state: see solo.h.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // syscall
#endif
#include "solo.h"

#include <time.h>
#include <unistd.h>

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#if defined(__NR_membarrier)
#define HAVE_MEMBARRIER 1
#endif
#endif
#endif

#ifdef HAVE_MEMBARRIER
static long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

// The commands the kernel offers (asked once a process: the answer is the kernel's, a fork keeps it).
static int offered(void)
{
    static _Atomic int mask = -2;  // -2: not asked yet
    int m = atomic_load_explicit(&mask, memory_order_relaxed);
    if (m == -2) {
        long r = membarrier(MEMBARRIER_CMD_QUERY);
        m = r < 0 ? 0 : (int)r;
        atomic_store_explicit(&mask, m, memory_order_relaxed);
    }
    return m;
}
#endif

void cci_solo_init(cci_solo *s)
{
    atomic_store_explicit(&s->thread, 0, memory_order_relaxed);
    atomic_store_explicit(&s->in_section, 0, memory_order_relaxed);
    s->held = 0;
#ifdef HAVE_MEMBARRIER
    int on = (offered() & (MEMBARRIER_CMD_PRIVATE_EXPEDITED | MEMBARRIER_CMD_GLOBAL)) != 0;
#else
    int on = 0;
#endif
    atomic_store_explicit(&s->on, on, memory_order_relaxed);
}

// Every thread of the process passes a full memory barrier before this returns. The expedited
// command interrupts only the CPUs running this process's threads, and needs the process's
// registration (per address space, so a fork child registers again; a repeat is cheap). Where it
// fails, the global command waits for every CPU to pass a scheduling point: slower (milliseconds),
// once per allocator. Where both fail (which the query at creation rules out short of a sandbox that
// answers it and refuses the rest), a 10 ms sleep: the owner's store leaves its CPU's store buffer
// within nanoseconds on every CPU this runs on, but that is no longer a guarantee the kernel gives.
static void process_barrier(void)
{
#ifdef HAVE_MEMBARRIER
    int m = offered();
    if ((m & MEMBARRIER_CMD_PRIVATE_EXPEDITED) && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
        return;
    if ((m & MEMBARRIER_CMD_GLOBAL) && membarrier(MEMBARRIER_CMD_GLOBAL) == 0)
        return;
#endif
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    nanosleep(&ten_ms, NULL);
}

void cci__solo_end(cci_solo *s)
{
    atomic_store_explicit(&s->on, 0, memory_order_seq_cst);
    process_barrier();
}
