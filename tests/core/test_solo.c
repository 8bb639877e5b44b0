// SPDX-License-Identifier: MIT
// The solo state of an allocator (src/core/solo.h): one thread's fast paths without a locked
// instruction, until a second thread takes the lock.
//   1. the state: on after creation where the kernel offers membarrier(2), kept while one thread
//      locks, ended by the first lock of another thread, for good;
//   2. the end, raced: a thread that created the allocator runs cached alloc+free pairs on its fast
//      path (solo), and locked sections of its own (statistics, allocations of sizes its magazines
//      do not hold), while the main thread, at a random moment, takes the lock for the first time
//      (empty_cache: it drains the owner's magazines) and allocates the same sizes on the same
//      stream, so that it is handed the blocks the owner has just cached. Every block is claimed
//      in an ownership map with relaxed atomics (no ordering of their own that could hide a race
//      from ThreadSanitizer): a block handed to both threads at once is a conflict. Then the
//      statistics and the allocator's invariants.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // syscall
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "allocator_impl.h"
#include "cached_allocator.h"
#include "testutil.h"

#if defined(__linux__) && __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#endif

// Whether the kernel offers the barrier (the library's own query, asked again here).
static int membarrier_offered(void)
{
#if defined(__linux__) && defined(__NR_membarrier) && __has_include(<linux/membarrier.h>)
    long m = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    return m > 0 && (m & (MEMBARRIER_CMD_PRIVATE_EXPEDITED | MEMBARRIER_CMD_GLOBAL)) != 0;
#else
    return 0;
#endif
}

static int solo_on(cci_allocator *a) { return atomic_load(&a->solo.on); }

// ---- 1. the state ------------------------------------------------------------------------------

static void *lock_once(void *arg)
{
    cci_stats st = {.size = sizeof st};
    cci_alloc_stats(arg, &st);  // a locked section
    return NULL;
}

static void state(int offered)
{
    cci_sim_device *sim;
    cci_allocator *a = t_cached_allocator((size_t)1 << 30, &sim);
    CHECK(solo_on(a) == offered, "solo at creation exactly where the kernel offers membarrier (%d)", offered);
    uintptr_t p;
    for (int i = 0; i < 100; i++) {
        CHECK(cci_malloc(a, 4096, 7, &p) == CCI_OK, "allocation");
        CHECK(cci_free(a, p, 7, CCI_FREE_NOW) == CCI_OK, "free");
    }
    cci_alloc_empty_cache(a);
    CHECK(solo_on(a) == offered, "still solo after this thread's own locks");
    pthread_t t;
    pthread_create(&t, NULL, lock_once, a);
    pthread_join(t, NULL);
    CHECK(!solo_on(a), "a second thread's lock ends it");
    for (int i = 0; i < 100; i++) {
        CHECK(cci_malloc(a, 4096, 7, &p) == CCI_OK, "allocation after the end");
        CHECK(cci_free(a, p, 7, CCI_FREE_NOW) == CCI_OK, "free after the end");
    }
    CHECK(!solo_on(a), "and it does not come back");
    cci_allocator_destroy(a, 1);
    cci_sim_destroy(sim);
}

// ---- 2. the end, raced ---------------------------------------------------------------------------

#define ARENA ((size_t)1 << 30)
#define GRANULE 512
#define SIM_BASE ((uintptr_t)0x7f0000000000ull)  // backend_sim.c's first address
static _Atomic unsigned char owner[ARENA / GRANULE];
static atomic_long conflicts;

// Marks a block's first and last granules as `who`'s (0: given back); a claim of a granule another
// thread holds is a conflict, as is an address outside the simulated device.
static void mark(uintptr_t p, size_t size, unsigned char who)
{
    if (p < SIM_BASE || p + size > SIM_BASE + ARENA) {
        atomic_fetch_add_explicit(&conflicts, 1, memory_order_relaxed);
        return;
    }
    size_t g[2] = {(p - SIM_BASE) / GRANULE, (p + size - 1 - SIM_BASE) / GRANULE};
    for (int i = 0; i < 2; i++) {
        if (who) {
            if (atomic_exchange_explicit(&owner[g[i]], who, memory_order_relaxed) != 0)
                atomic_fetch_add_explicit(&conflicts, 1, memory_order_relaxed);
        } else {
            atomic_store_explicit(&owner[g[i]], 0, memory_order_relaxed);
        }
    }
}

static const size_t sizes[] = {4096, 65536, 1 << 20};
#define NSIZES 3
#define STREAM 7

typedef struct {
    _Atomic(cci_allocator *) a;
    cci_sim_device *sim;
    atomic_long pairs;
    atomic_int stop;
    long failures;
} trial;

// The owner: creates the allocator (so its locks come first), then pairs until told to stop.
static void *owner_thread(void *arg)
{
    trial *t = arg;
    cci_allocator *a = t_cached_allocator(ARENA, &t->sim);
    for (long n = 0; !atomic_load_explicit(&t->stop, memory_order_relaxed); n++) {
        size_t size = sizes[n % NSIZES];
        uintptr_t p;
        if (cci_malloc(a, size, STREAM, &p) != CCI_OK) {
            t->failures++;
            continue;
        }
        mark(p, size, 1);
        mark(p, size, 0);
        if (cci_free(a, p, STREAM, CCI_FREE_NOW) != CCI_OK)
            t->failures++;
        if (n % 4 == 0) {  // locked sections of its own: a size no magazine holds, the statistics
            size_t odd = (size_t)8192 * (size_t)(2 + n % 29);
            if (cci_malloc(a, odd, STREAM + 1, &p) != CCI_OK) {
                t->failures++;
            } else {
                mark(p, odd, 1);
                mark(p, odd, 0);
                t->failures += cci_free(a, p, STREAM + 1, CCI_FREE_NOW) != CCI_OK;
            }
            cci_stats st = {.size = sizeof st};
            cci_alloc_stats(a, &st);
        }
        if (n == 3 * NSIZES)
            atomic_store_explicit(&t->a, a, memory_order_release);  // its magazines hold blocks now
        atomic_fetch_add_explicit(&t->pairs, 1, memory_order_relaxed);
    }
    if (!atomic_load(&t->a))
        atomic_store(&t->a, a);
    return NULL;
}

static void raced(int trials)
{
    uint64_t r = 0x2545F4914F6CDD1Dull;
    long failures = 0, solo_seen = 0;
    for (int k = 0; k < trials; k++) {
        trial t = {0};
        pthread_t th;
        pthread_create(&th, NULL, owner_thread, &t);
        cci_allocator *a;
        while (!(a = atomic_load_explicit(&t.a, memory_order_acquire)))
            sched_yield();
        solo_seen += solo_on(a);
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        long start = atomic_load(&t.pairs), wait = (long)(r % 64);
        while (atomic_load_explicit(&t.pairs, memory_order_relaxed) < start + wait)
            ;
        cci_alloc_empty_cache(a);  // this thread's first lock: the end, and a drain of the owner's magazines
        uintptr_t mine[NSIZES];
        for (int i = 0; i < NSIZES; i++) {
            if (cci_malloc(a, sizes[i], STREAM, &mine[i]) != CCI_OK) {
                failures++;
                mine[i] = 0;
                continue;
            }
            mark(mine[i], sizes[i], 2);
        }
        cci_stats st = {.size = sizeof st};
        cci_alloc_stats(a, &st);
        for (int i = 0; i < NSIZES; i++)
            if (mine[i]) {
                mark(mine[i], sizes[i], 0);
                failures += cci_free(a, mine[i], STREAM, CCI_FREE_NOW) != CCI_OK;
            }
        start = atomic_load(&t.pairs);
        while (atomic_load_explicit(&t.pairs, memory_order_relaxed) < start + 16)
            ;
        atomic_store(&t.stop, 1);
        pthread_join(th, NULL);
        failures += t.failures;
        CHECK(!solo_on(a), "trial %d: the main thread's lock ended the solo state", k);
        cci_alloc_stats(a, &st);
        CHECK_EQ_U(st.allocation[CCI_POOL_ALL].current, 0, "no live block after both threads freed theirs");
        CHECK_EQ_U(st.allocation[CCI_POOL_ALL].allocated, st.allocation[CCI_POOL_ALL].freed, "allocations == frees");
        char msg[256];
        CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "trial %d invariants: %s", k, msg);
        cci_allocator_destroy(a, 1);
        cci_sim_destroy(t.sim);
    }
    CHECK(failures == 0, "%ld allocator calls failed", failures);
    CHECK(atomic_load(&conflicts) == 0, "%ld blocks handed to both threads at once", atomic_load(&conflicts));
    if (membarrier_offered())
        CHECK(solo_seen == trials, "every trial began solo (%ld of %d)", solo_seen, trials);
}

int main(void)
{
    int offered = membarrier_offered();
    if (!offered)
        fprintf(stderr, "test_solo: the kernel offers no membarrier: only the gate is tested\n");
    state(offered);
    raced(200 * t_scale());
    return t_finish();
}
