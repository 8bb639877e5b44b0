// SPDX-License-Identifier: MIT
// How long a thread's kept fenced batch gets (src/core/tcache_fenced.c), on the simulated device
// whose fences never pass by themselves (a lag of 1000 records):
//   - by count: HELD_BATCH frees while fewer than 2 x HELD_CROWD threads have caches, twice that
//     with 2 x HELD_CROWD of them (a fence record is a driver call the threads take in turn);
//   - by bytes: a batch of large small blocks (512 KiB) closes at HELD_BATCH_BYTES, before the
//     thread's bound, instead of staying open with no fence while every later free takes the lock.
// Each batch that closes records one fence; the count of records says where the batches closed.
#include <pthread.h>

#include "alloc_checks.h"
#include "tcache_impl.h"

typedef struct {
    cci_allocator *a;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, done, failed;
} crowd;

// A thread with a cache of its own (made at its first locked allocation), alive until `done`.
static void *member(void *arg)
{
    crowd *c = arg;
    uintptr_t p;
    int bad = cci_malloc(c->a, 4 * KiB, 0, &p) != CCI_OK || cci_free(c->a, p, 0, CCI_FREE_NOW) != CCI_OK;
    pthread_mutex_lock(&c->mu);
    c->failed |= bad;
    c->ready++;
    pthread_cond_broadcast(&c->cv);
    while (!c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static cci_allocator *make(cci_sim_device **sim)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.fence_slack_mb = 0;
    *sim = cci_sim_create((size_t)8 << 30);
    cci_sim_set_fence_lag(*sim, 1000);
    cci_allocator *a = cci_allocator_create(0, &cfg, cci_sim_backend(*sim));
    cci_allocator_thread_cache(a, 1);
    return a;
}

// Credits under the peaks for n frees of `size` to stay with the thread (t_raise_split_peak over
// 2n blocks), the pool then emptied. Each test stays under ASIDE_WINDOW (tcache.c) allocations in
// all: they all miss the magazines, and a window of misses would set the thread's cache aside, its
// frees then all locked.
static void raise_peaks(cci_allocator *a, size_t size, int n)
{
    t_raise_split_peak(a, size, 2 * n);
    cci_alloc_empty_cache(a);
}

// n allocations of `size`, then their fenced frees: the fences recorded by the frees alone.
static uint64_t records_after_frees(cci_allocator *a, size_t size, int n, const char *what)
{
    uintptr_t p[2 * HELD_BATCH];
    for (int i = 0; i < n; i++)
        p[i] = t_must_alloc(a, size, 0);
    cci_stats st;
    uint64_t before = t_stats(a, &st)->num_fence_records, locked = st.num_locked_frees;
    for (int i = 0; i < n; i++)
        CHECK(cci_free(a, p[i], 0, CCI_FREE_FENCED) == CCI_OK, "%s: fenced free", what);
    t_stats(a, &st);
    CHECK(st.num_locked_frees == locked, "%s: every fenced free kept by the thread (declined: credit %llu, "
          "kept wait %llu, busy %llu, keep full %llu)", what, (unsigned long long)st.tc_declined_credit,
          (unsigned long long)st.tc_declined_kept_wait, (unsigned long long)st.tc_declined_busy,
          (unsigned long long)st.tc_declined_keep_full);
    return st.num_fence_records - before;
}

// `members` other threads with caches, then 2 x HELD_BATCH fenced frees of 16 KiB in two halves.
static void by_count(int members)
{
    cci_sim_device *sim;
    cci_allocator *a = make(&sim);
    crowd c = {.a = a, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t t[2 * HELD_CROWD];
    for (int i = 0; i < members; i++)
        CHECK(pthread_create(&t[i], NULL, member, &c) == 0, "thread");
    pthread_mutex_lock(&c.mu);
    while (c.ready < members)
        pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    CHECK(!c.failed, "the other threads' allocations");
    raise_peaks(a, 16 * KiB, HELD_BATCH / 2);
    int caches = members + 1;
    unsigned want = caches >= 2 * HELD_CROWD ? 2 * HELD_BATCH : HELD_BATCH;
    CHECK(held_batch_frees(a) == want, "%d caches: a batch of %u frees (%u)", caches, want, held_batch_frees(a));
    uint64_t first = records_after_frees(a, 16 * KiB, HELD_BATCH, "first half");
    uint64_t second = records_after_frees(a, 16 * KiB, HELD_BATCH, "second half");
    if (caches >= 2 * HELD_CROWD)
        CHECK(first == 0 && second == 1, "%d caches: one fence for %d frees (records %llu, then %llu)", caches,
              2 * HELD_BATCH, (unsigned long long)first, (unsigned long long)second);
    else
        CHECK(first == 1 && second == 1, "%d caches (control): a fence every %d frees (records %llu, %llu)",
              caches, HELD_BATCH, (unsigned long long)first, (unsigned long long)second);
    pthread_mutex_lock(&c.mu);
    c.done = 1;
    pthread_cond_broadcast(&c.cv);
    pthread_mutex_unlock(&c.mu);
    for (int i = 0; i < members; i++)
        pthread_join(t[i], NULL);
    t_check_destroy(a, sim);
}

// One thread's fenced frees of 512 KiB: a batch closes at HELD_BATCH_BYTES, long before HELD_BATCH.
static void by_bytes(void)
{
    cci_sim_device *sim;
    cci_allocator *a = make(&sim);
    enum { SIZE = 512 * KiB, N = (int)(HELD_BATCH_BYTES / SIZE) };
    _Static_assert(N < HELD_BATCH && 2 * N * SIZE <= HELD_MAX_BYTES, "the bytes close a batch first");
    raise_peaks(a, SIZE, N);
    uint64_t first = records_after_frees(a, SIZE, N - 1, "512 KiB, short of the bytes");
    uint64_t second = records_after_frees(a, SIZE, 1, "512 KiB, at the bytes");
    CHECK(first == 0 && second == 1, "a batch of %d x 512 KiB closed at %zu bytes (records %llu, then %llu)", N,
          (size_t)HELD_BATCH_BYTES, (unsigned long long)first, (unsigned long long)second);
    t_check_destroy(a, sim);
}

int main(void)
{
    by_count(1);
    by_count(2 * HELD_CROWD - 1);
    by_bytes();
    return t_finish();
}
