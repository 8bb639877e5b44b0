// SPDX-License-Identifier: MIT
// What the fence watcher (fence_watcher.c) asks of the fences, and what it tells them. The arrow
// runs one way: the watcher calls in here, and the fences reach the watcher only through the two
// functions it registered (cci_cuda_fence_watched_by), never by name.
//
// Its marks are events of the pool recorded on a device's legacy stream. Each call runs under the
// pool lock in the device's primary context as it is now, never retaining one: a device whose
// context goes (cci_cuda_fence_drop_device bumps the generation under the same lock, before the
// context is released) is neither marked nor asked again, and no context is made anew for it.
#include "fence_impl.h"

#include "backend_cuda.h"

_Atomic unsigned long long cci__fence_watched_upto;

// Until the watcher registers: no news to give, and no watcher running.
static void no_news(void) {}
static int not_running(void) { return 0; }
void (*cci__fence_watcher_news)(void) = no_news;
int (*cci__fence_watcher_running)(void) = not_running;

void cci_cuda_fence_watched_by(void (*news)(void), int (*running)(void))
{
    cci__fence_watcher_news = news ? news : no_news;
    cci__fence_watcher_running = running ? running : not_running;
}

unsigned long long cci_cuda_fence_clock(void)
{
    return atomic_load(&cci__fence_clock);
}

// The primary context of `device` made current, under the pool lock; 0, or -1 (none now).
static int mark_enter_locked(int device)
{
    CUcontext c = cci_cuda_backend_primary(device, 0);
    return c && cci_real_drv()->cuCtxPushCurrent_v2(c) == CUDA_SUCCESS ? 0 : -1;
}

static void mark_leave_locked(void)
{
    CUcontext popped;
    cci_real_drv()->cuCtxPopCurrent_v2(&popped);
}

CUevent cci_cuda_fence_mark(int device, unsigned *gen)
{
    const cci_real_driver *t = cci_real_drv();
    CUevent e = NULL;
    if ((unsigned)device >= CCI_PL_MAX_DEVICES || !have_events(t))
        return NULL;
    pthread_mutex_lock(&cci__fence_pool_lock);
    if (mark_enter_locked(device) == 0) {
        *gen = cci__fence_generation[device];
        e = cci__fence_pool_get_locked(device);
        if (e && t->cuEventRecord(e, CCI_CU_STREAM_LEGACY) != CUDA_SUCCESS) {
            cci__fence_pool_put_locked(device, e, *gen);
            e = NULL;
        }
        mark_leave_locked();
    }
    pthread_mutex_unlock(&cci__fence_pool_lock);
    return e;
}

int cci_cuda_fence_mark_passed(int device, CUevent e, unsigned gen)
{
    int p = -1;
    pthread_mutex_lock(&cci__fence_pool_lock);
    if (gen == cci__fence_generation[device] && mark_enter_locked(device) == 0) {
        CUresult r = cci_real_drv()->cuEventQuery(e);
        p = r == CUDA_SUCCESS ? 1 : r == CCI_CUDA_ERROR_NOT_READY ? 0 : -1;
        mark_leave_locked();
    }
    pthread_mutex_unlock(&cci__fence_pool_lock);
    return p;
}

void cci_cuda_fence_mark_give(int device, CUevent e, unsigned gen)
{
    cci__fence_pool_give(device, e, gen);
}

// The watcher's looks are careful (fence_looks.c): each stream is asked whether it captures
// before it is queried, and its questions are counted as the watcher's.
int cci_cuda_fence_look_upto(unsigned long long upto)
{
    // Every fence up to `upto` was recorded before this epoch is read, so each one's streams
    // are among those asked (a stream born later is asked too, which only asks more).
    cuda_fence f = {.seq = upto, .streams = cci_stream_registry_epoch()};
    look lk = {.f = &f, .careful = 1};
    int rc = cci__fence_look_at_streams(&lk) ? -1 : lk.pending ? 0 : 1;
    cci__fence_look_drop(&lk);
    if (rc == 1)
        FENCE_COUNT(watcher_rounds);
    return rc;
}

int cci_cuda_fence_look_ahead(unsigned long long upto)
{
    cuda_fence f = {.seq = upto, .streams = cci_stream_registry_epoch()};
    look lk = {.f = &f, .careful = 1, .idle_only = 1};
    int rc = cci_stream_registry_each_nonblocking(cci__fence_cover_stream, &lk) ? -1 : 0;
    cci__fence_look_drop(&lk);
    FENCE_COUNT(watcher_looks_ahead);
    return rc;
}

void cci_cuda_fence_publish(unsigned long long upto)
{
    raise_upto(&cci__fence_watched_upto, upto);
}
