// SPDX-License-Identifier: MIT
// Managed memory's counts (outside.h). The table of live addresses is looked at only on frees
// that CUDA itself answers, and only while it holds an entry, so frees of our own blocks and
// programs without managed memory never take its lock.
//
// uthash would exit the process when it cannot grow its table: a failed insert only loses that
// allocation's free from the counts (its allocation is still counted), never the program.
static _Thread_local int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (hash_oom = 1)

#include "outside.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <uthash.h>

#include "ccinterpose.h"
#include "cuda_context.h"

typedef struct outside_entry {
    uintptr_t addr;
    size_t bytes;
    int device;
    UT_hash_handle hh;
} outside_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static outside_entry *live;       // by address, under the lock
static _Atomic size_t live_count; // read without the lock: 0 means no free needs a look
static cci_stat counts[CCI_PL_MAX_DEVICES], bytes_of[CCI_PL_MAX_DEVICES];  // under the lock

static void stat_move(cci_stat *s, int64_t by)
{
    s->current += by;
    if (by > 0)
        s->allocated += by;
    else
        s->freed -= by;
    if (s->current > s->peak)
        s->peak = s->current;
}

void cci_outside_note_managed(int device, uintptr_t addr, size_t bytes)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES || !addr)
        return;
    outside_entry *e = calloc(1, sizeof *e);
    pthread_mutex_lock(&lock);
    stat_move(&counts[device], 1);
    stat_move(&bytes_of[device], (int64_t)bytes);
    if (e) {
        outside_entry *old = NULL;
        HASH_FIND(hh, live, &addr, sizeof addr, old);
        if (old) {  // an address CUDA handed out again: its earlier free was never seen
            HASH_DEL(live, old);
            free(old);
            atomic_fetch_sub(&live_count, 1);
        }
        *e = (outside_entry){.addr = addr, .bytes = bytes, .device = device};
        hash_oom = 0;
        HASH_ADD(hh, live, addr, sizeof e->addr, e);
        if (hash_oom)
            free(e);
        else
            atomic_fetch_add(&live_count, 1);
    }
    pthread_mutex_unlock(&lock);
}

void cci_outside_forget(uintptr_t addr)
{
    if (!atomic_load_explicit(&live_count, memory_order_relaxed))
        return;
    pthread_mutex_lock(&lock);
    outside_entry *e = NULL;
    HASH_FIND(hh, live, &addr, sizeof addr, e);
    if (e) {
        HASH_DEL(live, e);
        atomic_fetch_sub(&live_count, 1);
        stat_move(&counts[e->device], -1);
        stat_move(&bytes_of[e->device], -(int64_t)e->bytes);
    }
    pthread_mutex_unlock(&lock);
    free(e);
}

void cci_outside_stats(void *ctx, int device, cci_stats *out)
{
    (void)ctx;
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    pthread_mutex_lock(&lock);
    out->managed_allocations = counts[device];
    out->managed_bytes = bytes_of[device];
    pthread_mutex_unlock(&lock);
}

void cci_outside_atfork_child(void)
{
    pthread_mutex_init(&lock, NULL);
}
