// SPDX-License-Identifier: MIT
// Which thread has which cache: a cache is made at its thread's first locked allocation, leaves
// its allocator at thread exit (its blocks given back through a stop), and is cut off when the
// allocator is destroyed or forked. Apart from tcache.c because none of this runs on a fast path;
// own_block stays with attach_cache so that the locked allocation's call (cci__tc_own) keeps
// attach_cache inlined.
#include "tcache_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;  // cache <-> allocator links at exit
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;

// Whether the thread's cache may free `b` on its fast path from now on, and `b` its recent block.
static void table_add(cci_tc *tc, cci_block *b)
{
    if (cci_live_add(&tc->table, b) == 0) {
        b->owner = tc;
        tc->recent = b;
    }
}

// Lock held, whenever the list changes.
static void note_alone(cci_allocator *a)
{
    set_fast(a, a->tc_on);
    int n = 0;
    for (cci_tc *tc = a->tcs; tc; tc = tc->next) {
        tc->alone = a->tcs == tc && !tc->next;
        n++;
    }
    __atomic_store_n(&a->ntcs, n, __ATOMIC_RELAXED);  // fast paths read it (held_batch_frees)
}

static void unlink_cache(cci_allocator *a, cci_tc *tc)
{
    for (cci_tc **p = &a->tcs; *p; p = &(*p)->next)
        if (*p == tc) {
            *p = tc->next;
            return;
        }
}

static void cache_free(cci_tc *tc)
{
    cci_live_clear(&tc->table);
    free(tc->log);
    free(tc->handed);
    free(tc->spare);
    free(tc);
}

// At thread exit: each cache gives its blocks back (the stop does that) and leaves its allocator.
static void on_thread_exit(void *unused)
{
    (void)unused;
    for (int i = 0; i < TLS_SLOTS; i++) {
        cci_tc *tc = cci__tc_slots[i].tc;
        if (!tc)
            continue;
        cci__tc_slots[i] = (struct tls_slot){0};
        pthread_mutex_lock(&registry);
        cci_allocator *a = tc->a;
        if (a) {
            cci__lock(a);  // this stop returns the cache's blocks and swaps its log out ...
            cci__tc_drain_all(a);
            cci__unlock(a);  // ... which this unlock tells the observers, in order with the others'
            cci__lock(a);
            // Blocks this thread allocated and did not free live on: the locked path frees them.
            for (size_t j = 0; j < tc->table.cap; j++)
                if (tc->table.slot[j])
                    tc->table.slot[j]->owner = NULL;
            unlink_cache(a, tc);
            note_alone(a);
            tc->a = NULL;
            cci__unlock(a);
        }
        pthread_mutex_unlock(&registry);
        cache_free(tc);
    }
}

static void make_key(void)
{
    if (pthread_key_create(&exit_key, on_thread_exit) != 0)
        exit_key = (pthread_key_t)-1;
}

// The calling thread's cache for `a`, created on its first locked allocation. Lock held.
static cci_tc *attach_cache(cci_allocator *a)
{
    cci_tc *tc = a->tc_mine;
    if (tc || !a->tc_on)
        return tc;
    int free_slot = -1;
    for (int i = 0; i < TLS_SLOTS && free_slot < 0; i++)
        if (!cci__tc_slots[i].tc)
            free_slot = i;
    pthread_once(&key_once, make_key);
    if (free_slot < 0 || exit_key == (pthread_key_t)-1)
        return NULL;  // more allocators than slots: this one is served on the locked path only
    tc = aligned_alloc(CCI_TC_ALIGN, sizeof *tc);  // (sizeof is a multiple of the alignment)
    if (tc) {
        memset(tc, 0, sizeof *tc);
        tc->log = calloc(LOG_EVENTS, sizeof *tc->log);
        tc->handed = calloc(LOG_EVENTS, sizeof *tc->handed);
        tc->spare = malloc(LOG_EVENTS * sizeof *tc->spare);  // none: logs are only copied
    }
    if (!tc || !tc->log || !tc->handed || pthread_setspecific(exit_key, tc) != 0) {  // non-NULL: destructor runs
        if (tc)
            cache_free(tc);
        return NULL;
    }
    log_restart(tc);
    tc->recent = &cci__tc_no_block;
    // The lock holder owns every cache it can see; a new one joins the list already stopped.
    atomic_store_explicit(&tc->gate, GATE_STOPPED, memory_order_relaxed);
    tc->a = a;
    tc->next = a->tcs;
    a->tcs = tc;
    note_alone(a);
    cci__tc_slots[free_slot] = (struct tls_slot){a, a->uid, tc};
    a->tc_mine = tc;
    return tc;
}

// The cache made if the thread has none, and b into its table. Out of line: see cci__tc_own.
static __attribute__((noinline)) void own_block(cci_allocator *a, cci_block *b)
{
    cci_tc *tc = attach_cache(a);
    if (tc)
        table_add(tc, b);
}

void cci__tc_own(cci_allocator *a, cci_block *b)
{
    // Set aside: its free takes the lock anyway. Tested before the call that makes a cache and
    // fills its table, whose frame had cost every locked allocation of the mixed workload ~20
    // instructions (a new cache is never set aside).
    cci_tc *tc = a->tc_mine;
    if (tc && tc->aside)
        return;
    own_block(a, b);
}

void cci__tc_detach_all(cci_allocator *a)
{
    free(a->evq);
    a->evq = NULL;
    a->nevq = a->evq_cap = 0;
    pthread_mutex_lock(&registry);
    for (cci_tc *tc = a->tcs; tc; tc = tc->next)
        tc->a = NULL;
    a->tcs = NULL;
    __atomic_store_n(&a->ntcs, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&registry);
}

void cci__tc_fork_child(cci_allocator *a)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&registry, &fresh, sizeof fresh);
    // The forking thread is the only one here: every cache of `a` is unused from now on (the other
    // threads' never run again), and the allocator is about to be destroyed: free them, and the
    // slots that named them, or each fork generation would keep its parent's.
    for (cci_tc *tc = a->tcs, *next; tc; tc = next) {
        next = tc->next;
        for (int i = 0; i < TLS_SLOTS; i++)
            if (cci__tc_slots[i].tc == tc)
                cci__tc_slots[i] = (struct tls_slot){0};
        cache_free(tc);
    }
    a->tcs = NULL;
    __atomic_store_n(&a->ntcs, 0, __ATOMIC_RELAXED);
}
