// SPDX-License-Identifier: MIT
// Destroyed streams, dropped devices and fork, as the fence group sees them.
//
// A stream the program destroys may still have work queued, which a fence recorded while it
// existed must include. Just before the destroy goes to the driver (the registry calls
// cci_cuda_fence_retire_stream with its lock held) an event is recorded on the stream: its
// "retired" event, after all of its work, kept in the retired list until it has been seen to
// pass. A look at the streams asks these after the live ones (fence_looks.c), and a fence
// recorded after the stream was destroyed skips it (born > its epoch).
#include "fence_impl.h"

#include <stdlib.h>

#include "backend_cuda.h"

shared_event *cci__fence_retired;
// Whether the list holds anything, set under the pool lock at each change: a fence record asks
// it on every call (cci_cuda_fence_retired_done), and the lock there had queued the threads that
// record their own fences behind one another.
static _Atomic int retired_any;

static void retired_changed_locked(void)
{
    atomic_store_explicit(&retired_any, cci__fence_retired != NULL, memory_order_release);
}

void cci_cuda_fence_forget_cover(cci_stream_cover *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&cci__fence_pool_lock);
    for (shared_event *sw = c->sweeps, *n; sw; sw = n) {
        n = sw->next;
        cci__fence_drop_shared_ref_locked(sw);
    }
    pthread_mutex_unlock(&cci__fence_pool_lock);
    free(c);
}

void cci_cuda_fence_retire_stream(CUstream s, int device, unsigned long long born,
                                  cci_stream_cover *cover)
{
    // The retired event recorded below is after all of the stream's work, so it supersedes the
    // stream's sweeps for every fence.
    cci_cuda_fence_forget_cover(cover);
    const cci_real_driver *t = cci_real_drv();
    if ((unsigned)device >= CCI_PL_MAX_DEVICES || !have_events(t))
        return;
    shared_event *r = calloc(1, sizeof *r);
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc))
        goto fail;
    pthread_mutex_lock(&cci__fence_pool_lock);
    CUevent e = r ? cci__fence_pool_get_locked(device) : NULL;
    CUresult rc = e ? t->cuEventRecord(e, s) : CUDA_ERROR_NOT_INITIALIZED;
    if (rc == CUDA_SUCCESS) {
        *r = (shared_event){.ev = e, .device = device, .refs = 1, .gen = cci__fence_generation[device],
                            .born = born, .next = cci__fence_retired};
        cci__fence_retired = r;
        retired_changed_locked();
        r = NULL;
    } else if (e) {
        cci__fence_pool_put_locked(device, e, cci__fence_generation[device]);
    }
    pthread_mutex_unlock(&cci__fence_pool_lock);
    // No event could cover the stream's last work: wait for it here, once, rather than let a
    // later fence miss it (a stream destruction is rare, and CUDA's own waits for nothing).
    if (r && t->cuStreamSynchronize)
        t->cuStreamSynchronize(s);
    cci_cuda_leave(&sc);
fail:
    free(r);
}

// Asks the retired event at *pr (pool lock held): 1 passed, and it left the list (*pr is now the
// next one); 0 pending; -1 error.
static int retired_prune_locked(shared_event **pr)
{
    shared_event *r = *pr;
    int p = cci__fence_shared_passed(r);
    if (p == 1) {
        *pr = r->next;
        cci__fence_drop_shared_ref_locked(r);
    }
    return p;
}

int cci__fence_cover_retired(look *lk)
{
    int rc = 0;
    pthread_mutex_lock(&cci__fence_pool_lock);
    for (shared_event **pr = &cci__fence_retired; rc == 0 && *pr;) {
        shared_event *r = *pr;
        if (r->born > lk->f->streams) {
            pr = &r->next;
            continue;
        }
        if (lk->waiting) {
            if (!atomic_load(&r->passed))
                rc = cci__fence_look_collect_locked(lk, r);
            pr = &r->next;
            continue;
        }
        int p = retired_prune_locked(pr);
        if (p == 1)
            continue;
        if (p < 0)
            rc = -1;
        else
            lk->pending = 1;
        pr = &r->next;
    }
    retired_changed_locked();
    pthread_mutex_unlock(&cci__fence_pool_lock);
    return rc;
}

int cci_cuda_fence_retired_done(void)
{
    int p = 1;
    if (!atomic_load_explicit(&retired_any, memory_order_acquire))
        return 1;  // (a stream destroyed before the frees this answer is for has set it)
    pthread_mutex_lock(&cci__fence_pool_lock);
    while (cci__fence_retired && (p = retired_prune_locked(&cci__fence_retired)) == 1)
        ;
    retired_changed_locked();
    pthread_mutex_unlock(&cci__fence_pool_lock);
    return p;
}

void cci_cuda_fence_drop_device(int device)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    pthread_mutex_lock(&cci__fence_pool_lock);
    cci__fence_generation[device]++;
    cci__fence_pools[device].n = 0;  // forgotten, not destroyed: the reset destroys the context's events
    for (shared_event **pr = &cci__fence_retired; *pr;) {
        shared_event *r = *pr;
        if (r->device != device) {
            pr = &r->next;
            continue;
        }
        *pr = r->next;
        cci__fence_drop_shared_ref_locked(r);
    }
    retired_changed_locked();
    pthread_mutex_unlock(&cci__fence_pool_lock);
}

void cci_cuda_fence_atfork_child(void)
{
    // The parent's events are not the child's to use or destroy: forget them.
    pthread_mutex_init(&cci__fence_pool_lock, NULL);
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++)
        cci__fence_pools[d].n = 0;
    cci__fence_retired = NULL;
    atomic_store(&retired_any, 0);
    atomic_store(&cci__fence_last_look_busy, 0);
    atomic_store(&cci__fence_watched_upto, 0);
    cci__fence_order_atfork_child();
    cci__fence_costs_atfork_child();  // the child's exit line counts the child's fences
}
