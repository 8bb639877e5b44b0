// SPDX-License-Identifier: MIT
// Kept fenced frees in the virtual-memory modes (src/core/tcache_fenced.c), on the simulated
// device whose fences never pass by themselves (a lag of 1000 records): another thread keeps small
// blocks behind its own fences and then idles (as PyTorch's backward thread does while the main
// thread runs the next forward pass), and this thread's small allocations would grow the pool. In
// expandable_segments and compact_segments they get the idle thread's kept blocks instead (each
// behind the allocator's fence or order first), and the pool does not grow; in the default mode
// (the control) the other thread keeps its blocks and the pool grows, as before. With orders at
// reuse on, the blocks given back skip their fence and one order precedes their reuse. This thread
// keeps a fenced free too: the default mode's allowance for its batches lets the pool grow; in the
// virtual-memory modes, with no other thread at work, there is none.
#include <pthread.h>
#include <string.h>

#include "alloc_checks.h"
#include "tcache_impl.h"

#define SIZE (64 * KiB)
#define KEPT 16  // the other thread's frees: fewer than a batch, so its open batch keeps them

enum mode { DEFAULT, EXPANDABLE, COMPACT };

typedef struct {
    cci_allocator *a;
    uintptr_t p[KEPT];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int step;  // 1: the other thread has freed; 2: it may exit
    int failed;
} shared;

static void set_step(shared *s, int step)
{
    pthread_mutex_lock(&s->mu);
    s->step = step;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void wait_step(shared *s, int step)
{
    pthread_mutex_lock(&s->mu);
    while (s->step < step)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

// The other thread: KEPT small blocks allocated, then fenced frees that its cache keeps; it stays
// alive (its exit would give them back) until the main thread is done.
static void *keeper(void *arg)
{
    shared *s = arg;
    for (int i = 0; i < KEPT; i++)
        s->failed |= cci_malloc(s->a, SIZE, 0, &s->p[i]) != CCI_OK;
    for (int i = 0; i < KEPT; i++)
        s->failed |= cci_free(s->a, s->p[i], 0, CCI_FREE_FENCED) != CCI_OK;
    set_step(s, 1);
    wait_step(s, 2);
    return NULL;
}

static int among(const uintptr_t *p, int n, uintptr_t q)
{
    for (int i = 0; i < n; i++)
        if (p[i] == q)
            return 1;
    return 0;
}

static void run(enum mode mode, int reuse_orders)
{
    static const char *const names[] = {"default", "expandable", "compact"};
    const char *name = names[mode];
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.fence_slack_mb = 0;
    cfg.expandable_segments = mode == EXPANDABLE;
    cfg.compact_segments = mode == COMPACT;
    cci_sim_device *sim = cci_sim_create((size_t)8 << 30);
    cci_sim_set_fence_lag(sim, 1000);
    cci_sim_set_reuse_order(sim, reuse_orders);
    cci_allocator *a = cci_allocator_create(0, &cfg, cci_sim_backend(sim));
    cci_allocator_thread_cache(a, 1);
    // Credits under the peaks for the other thread's frees to stay with it: the peaks of the
    // figures a free moves, raised first (all given back at once, nothing kept).
    t_raise_split_peak(a, SIZE, 2 * KEPT);
    cci_alloc_empty_cache(a);
    uintptr_t own = t_must_alloc(a, SIZE, 0);

    shared s = {.a = a, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, keeper, &s) == 0, "%s: thread", name);
    wait_step(&s, 1);
    CHECK(!s.failed, "%s: the other thread's allocations and frees", name);
    // This thread keeps a fenced free of its own too: in the default mode the pool may then grow
    // for its batches (their allowance); in the virtual-memory modes it may not.
    CHECK(cci_free(a, own, 0, CCI_FREE_FENCED) == CCI_OK, "%s: fenced free", name);
    cci_stats st;
    int64_t reserved = t_stats(a, &st)->reserved_bytes[CCI_POOL_SMALL].current;
    CHECK(reserved > 0 && st.allocated_bytes[CCI_POOL_SMALL].current == 0,
          "%s: the other thread's blocks are freed, kept (%lld bytes reserved)", name, (long long)reserved);
    // As many small blocks as the reserved pages hold: only the kept blocks' room can serve them
    // without growth.
    int n = (int)(reserved / (int64_t)SIZE);
    uintptr_t q[64];
    CHECK(n <= 64, "%s: %d blocks", name, n);
    int reused = 0, own_reused = 0;
    for (int i = 0; i < n && i < 64; i++) {
        q[i] = t_must_alloc(a, SIZE, 0);
        reused += among(s.p, KEPT, q[i]);
        own_reused |= q[i] == own;
    }
    int64_t grown = t_stats(a, &st)->reserved_bytes[CCI_POOL_SMALL].peak - reserved;
    if (mode == DEFAULT) {
        CHECK(grown > 0 && reused == 0, "%s (control): the other thread kept its blocks and the pool grew "
              "(%lld bytes, %d reused)", name, (long long)grown, reused);
    } else {
        CHECK(grown == 0 && reused == KEPT && own_reused, "%s: every kept block served (the other thread's: %d "
              "of %d; this thread's: %d), the pool did not grow (%lld bytes)", name, reused, KEPT, own_reused,
              (long long)grown);
    }
    uint64_t frees = 0, made = 0, refused = 0;
    cci_sim_reuse_counts(sim, &frees, &made, &refused);
    if (mode != DEFAULT && reuse_orders)
        CHECK(frees >= KEPT && made >= 1, "%s: the blocks given back skipped their fence (%llu), "
              "reused after an order (%llu)", name, (unsigned long long)frees, (unsigned long long)made);
    else if (mode != DEFAULT)
        CHECK(st.num_fence_waits + cci_sim_fence_orders_made(sim) >= 1,
              "%s: reused behind the allocator's fence (%llu waits)", name, (unsigned long long)st.num_fence_waits);
    for (int i = 0; i < n && i < 64; i++)
        CHECK(cci_free(a, q[i], 0, CCI_FREE_NOW) == CCI_OK, "%s: free", name);
    set_step(&s, 2);
    pthread_join(t, NULL);
    t_check_destroy(a, sim);
}

int main(void)
{
    for (int orders = 0; orders < 2; orders++) {
        run(DEFAULT, orders);
        run(EXPANDABLE, orders);
        run(COMPACT, orders);
    }
    return t_finish();
}
