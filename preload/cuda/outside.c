// SPDX-License-Identifier: MIT
// Managed memory's and other pools' counts (outside.h). The table of live addresses is looked at only on frees
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
#include "real.h"

enum { KIND_MANAGED, KIND_POOL, KINDS };

typedef struct outside_entry {
    uintptr_t addr;
    size_t bytes;
    int device;
    int kind;
    void *pool;  // KIND_POOL: the pool it came from
    UT_hash_handle hh;
} outside_entry;

// The figures of the other pools a device's allocations came from (the first few: a program
// rarely makes more; allocations from further ones are still counted, their figures not read).
#define POOLS_PER_DEVICE 8
typedef struct pool_figures {
    void *pool;
    uint64_t reserved, reserved_high, used, used_high;
} pool_figures;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static outside_entry *live;       // by address, under the lock
static _Atomic size_t live_count; // read without the lock: 0 means no free needs a look
static cci_stat counts[KINDS][CCI_PL_MAX_DEVICES], bytes_of[KINDS][CCI_PL_MAX_DEVICES];  // under the lock
static pool_figures pools[CCI_PL_MAX_DEVICES][POOLS_PER_DEVICE];                           // under the lock

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

static void note(int kind, int device, uintptr_t addr, size_t bytes, void *pool)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES || !addr)
        return;
    outside_entry *e = calloc(1, sizeof *e);
    pthread_mutex_lock(&lock);
    stat_move(&counts[kind][device], 1);
    stat_move(&bytes_of[kind][device], (int64_t)bytes);
    if (e) {
        outside_entry *old = NULL;
        HASH_FIND(hh, live, &addr, sizeof addr, old);
        if (old) {  // an address CUDA handed out again: its earlier free was never seen
            HASH_DEL(live, old);
            free(old);
            atomic_fetch_sub(&live_count, 1);
        }
        *e = (outside_entry){.addr = addr, .bytes = bytes, .device = device, .kind = kind, .pool = pool};
        hash_oom = 0;
        HASH_ADD(hh, live, addr, sizeof e->addr, e);
        if (hash_oom)
            free(e);
        else
            atomic_fetch_add(&live_count, 1);
    }
    pthread_mutex_unlock(&lock);
}

// Reads the pool's own figures from the driver (outside the lock) and keeps them as its latest.
static void read_pool(int device, void *pool)
{
    const cci_real_driver *drv = cci_real_drv();
    cuuint64_t v[4] = {0, 0, 0, 0};
    static const int attrs[4] = {CCI_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CCI_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
                                 CCI_MEMPOOL_ATTR_USED_MEM_CURRENT, CCI_MEMPOOL_ATTR_USED_MEM_HIGH};
    if (!drv->cuMemPoolGetAttribute)
        return;
    for (int i = 0; i < 4; i++)
        if (drv->cuMemPoolGetAttribute((CUmemoryPool)pool, attrs[i], &v[i]) != CUDA_SUCCESS)
            return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < POOLS_PER_DEVICE; i++) {
        pool_figures *f = &pools[device][i];
        if (f->pool == pool || !f->pool) {
            *f = (pool_figures){.pool = pool, .reserved = v[0], .reserved_high = v[1], .used = v[2], .used_high = v[3]};
            break;
        }
    }
    pthread_mutex_unlock(&lock);
}

void cci_outside_note_managed(int device, uintptr_t addr, size_t bytes)
{
    note(KIND_MANAGED, device, addr, bytes, NULL);
}

void cci_outside_note_pool(int device, uintptr_t addr, size_t bytes, void *pool)
{
    note(KIND_POOL, device, addr, bytes, pool);
    if ((unsigned)device < CCI_PL_MAX_DEVICES && pool)
        read_pool(device, pool);
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
        stat_move(&counts[e->kind][e->device], -1);
        stat_move(&bytes_of[e->kind][e->device], -(int64_t)e->bytes);
    }
    pthread_mutex_unlock(&lock);
    if (e && e->kind == KIND_POOL)
        read_pool(e->device, e->pool);
    free(e);
}

void cci_outside_refresh(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    void *seen[POOLS_PER_DEVICE];
    int n = 0;
    pthread_mutex_lock(&lock);
    for (; n < POOLS_PER_DEVICE && pools[device][n].pool; n++)
        seen[n] = pools[device][n].pool;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++)
        read_pool(device, seen[i]);
}

void cci_outside_stats(void *ctx, int device, cci_stats *out)
{
    (void)ctx;
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    pthread_mutex_lock(&lock);
    out->managed_allocations = counts[KIND_MANAGED][device];
    out->managed_bytes = bytes_of[KIND_MANAGED][device];
    out->pool_allocations = counts[KIND_POOL][device];
    out->pool_bytes = bytes_of[KIND_POOL][device];
    out->pool_reserved_bytes = out->pool_reserved_high = out->pool_used_bytes = out->pool_used_high = 0;
    for (int i = 0; i < POOLS_PER_DEVICE && pools[device][i].pool; i++) {
        out->pool_reserved_bytes += pools[device][i].reserved;
        out->pool_reserved_high += pools[device][i].reserved_high;
        out->pool_used_bytes += pools[device][i].used;
        out->pool_used_high += pools[device][i].used_high;
    }
    pthread_mutex_unlock(&lock);
}

void cci_outside_atfork_child(void)
{
    pthread_mutex_init(&lock, NULL);
}
