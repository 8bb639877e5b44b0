// SPDX-License-Identifier: MIT
// The allocator's lock (lock.h): eight threads (more than this box's cores, so some of them sleep
// in the kernel, not only spin) each take it 200 000 times and, holding it, move a counter that is
// not atomic in two steps; no increment may be lost, and no two holders may overlap. Then the
// word must be free. A lock whose release forgets the sleepers hangs here (the meson timeout), one
// that lets two threads in at once loses increments or sees a holder inside.
#include <pthread.h>
#include <sched.h>

#include "lock.h"
#include "testutil.h"

#define THREADS 8
#define ROUNDS 200000

static cci_lock lock;
static long counter;
static int inside;  // holders at once: 1 while held
static long overlaps;

static void *hammer(void *unused)
{
    (void)unused;
    for (int i = 0; i < ROUNDS; i++) {
        cci_lock_take(&lock);
        overlaps += inside++ != 0;
        long c = counter;
        if ((i & 1023) == 0)
            sched_yield();  // holding the lock while off the CPU: the others must wait, then sleep
        counter = c + 1;
        inside--;
        cci_lock_give(&lock);
    }
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, hammer, NULL) == 0, "thread %d started", i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_U(counter, (long)THREADS * ROUNDS, "every increment made under the lock");
    CHECK_EQ_U(overlaps, 0, "holders overlapping");
    CHECK_EQ_U(atomic_load(&lock.word), 0, "the lock is free at the end");
    return t_finish();
}
