// SPDX-License-Identifier: MIT
// The fence group's events: one pool per device, and the record, query and wait of one event.
//
// Events are created with CU_EVENT_DISABLE_TIMING only when a pool is empty, never one per free
// (the core records one fence per batch of frees), and go back to their pool when the fence or
// shared event that held them goes. A device whose primary context goes (a reset) takes its
// events with it: its generation is bumped (fence_retired.c) and an event of an older one is
// forgotten, never reused.
#include "fence_impl.h"

#include <stdlib.h>

#include "backend_cuda.h"
#include "context_fences.h"

pthread_mutex_t cci__fence_pool_lock = PTHREAD_MUTEX_INITIALIZER;
event_pool cci__fence_pools[CCI_PL_MAX_DEVICES];
unsigned cci__fence_generation[CCI_PL_MAX_DEVICES];

CUevent cci__fence_pool_get_locked(int device)
{
    event_pool *p = &cci__fence_pools[device];
    if (p->n)
        return p->ev[--p->n];
    CUevent e = NULL;
    if (cci_real_drv()->cuEventCreate(&e, CCI_CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return NULL;
    return e;
}

void cci__fence_pool_put_locked(int device, CUevent e, unsigned gen)
{
    event_pool *p = &cci__fence_pools[device];
    if (gen != cci__fence_generation[device])
        return;
    if (p->n == p->cap) {
        size_t want = p->cap ? 2 * p->cap : 16;
        CUevent *grown = realloc(p->ev, want * sizeof *grown);
        if (!grown) {
            cci_driver_scope sc;  // no room to keep it: destroy it instead
            if (cci_cuda_enter(device, &sc) == 0) {
                cci_real_drv()->cuEventDestroy_v2(e);
                cci_cuda_leave(&sc);
            }
            return;
        }
        p->ev = grown;
        p->cap = want;
    }
    p->ev[p->n++] = e;
}

void cci__fence_pool_give(int device, CUevent e, unsigned gen)
{
    pthread_mutex_lock(&cci__fence_pool_lock);
    cci__fence_pool_put_locked(device, e, gen);
    pthread_mutex_unlock(&cci__fence_pool_lock);
}

void cci__fence_drop_shared_ref_locked(shared_event *r)
{
    if (--r->refs == 0) {
        cci__fence_pool_put_locked(r->device, r->ev, r->gen);
        free(r);
    }
}

void cci__fence_drop_shared_ref(shared_event *r)
{
    pthread_mutex_lock(&cci__fence_pool_lock);
    cci__fence_drop_shared_ref_locked(r);
    pthread_mutex_unlock(&cci__fence_pool_lock);
}

// Pool lock NOT held (taken here, around the pool only). The record itself is made outside it:
// threads that each keep their own fenced batches record at once, and with the driver call inside
// the lock their records had queued behind one another. A device reset meanwhile (the program's
// own race) makes the record fail, or leaves an event of an older generation, which the pool
// forgets when it comes back.
CUevent cci__fence_record_pooled(int device, CUstream s, CUcontext ctx, unsigned *gen, CUresult *r)
{
    cci_driver_scope sc;
    *r = CUDA_ERROR_NOT_INITIALIZED;
    if (cci_cuda_enter(device, &sc))
        return NULL;
    const cci_real_driver *t = cci_real_drv();
    pthread_mutex_lock(&cci__fence_pool_lock);
    CUevent e = cci__fence_pool_get_locked(device);
    *gen = cci__fence_generation[device];
    pthread_mutex_unlock(&cci__fence_pool_lock);
    if (e)
        *r = ctx ? t->cuCtxRecordEvent(ctx, e) : t->cuEventRecord(e, s);
    if (*r != CUDA_SUCCESS && e) {
        cci__fence_pool_give(device, e, *gen);
        e = NULL;
    }
    cci_cuda_leave(&sc);
    return e;
}

// A refusal because of a capture (one begun behind our back: the call has just invalidated it)
// stops context fences.
CUevent cci__fence_record_ctx_event(int device, unsigned *gen)
{
    CUcontext c = cci_cuda_backend_primary(device, 0);
    CUresult r = CUDA_ERROR_NOT_INITIALIZED;
    CUevent e = c ? cci__fence_record_pooled(device, NULL, c, gen, &r) : NULL;
    if (r == CCI_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        cci_context_fences_stop("the driver refused one for a capture we had not seen (that capture "
                                "is now invalidated)", 1);
    else if (!e)
        cci_log(CCI_LOG_DEBUG, "device %d: recording a context fence event failed (CUresult %d)", device, r);
    return e;
}

int cci__fence_event_passed(CUevent e, int device)
{
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return -1;
    CUresult r = cci_real_drv()->cuEventQuery(e);
    cci_cuda_leave(&sc);
    if (r == CUDA_SUCCESS)
        return 1;
    return r == CCI_CUDA_ERROR_NOT_READY ? 0 : -1;
}

int cci__fence_event_wait(CUevent e, int device)
{
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        return -1;
    CUresult r = cci_real_drv()->cuEventSynchronize(e);
    cci_cuda_leave(&sc);
    if (r != CUDA_SUCCESS) {
        cci_log(CCI_LOG_DEBUG, "device %d: cuEventSynchronize on a fence failed (CUresult %d)",
                device, r);
        return -1;
    }
    return 0;
}

int cci__fence_shared_passed(shared_event *r)
{
    if (atomic_load_explicit(&r->passed, memory_order_acquire))
        return 1;
    FENCE_COUNT(shared_queries);
    int p = cci__fence_event_passed(r->ev, r->device);
    if (p == 1)
        atomic_store_explicit(&r->passed, 1, memory_order_release);
    return p;
}

void cci__fence_free(cuda_fence *f)
{
    pthread_mutex_lock(&cci__fence_pool_lock);
    for (size_t i = 0; i < f->n; i++)
        cci__fence_pool_put_locked(f->ev[i].device, f->ev[i].ev, f->ev[i].gen);
    pthread_mutex_unlock(&cci__fence_pool_lock);
    free(f->ev);
    free(f);
}
