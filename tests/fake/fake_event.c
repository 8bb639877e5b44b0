// SPDX-License-Identifier: MIT
/* Fake CUDA driver: events and cross-stream waits (model: fake_internal.h). */
#include "fake_internal.h"

/* ------------------------------------------------------------------ */
/* Events                                                              */

FC_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    ENTER();
    if (!phEvent || (Flags & ~0x7u))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->key = e;
    e->flags = Flags;
    pthread_mutex_lock(&g_lock);
    HASH_ADD_PTR(g_event_reg, key, e);
    pthread_mutex_unlock(&g_lock);
    *phEvent = e;
    return CUDA_SUCCESS;
}

static struct CUevent_st *event_find_locked(CUevent h)
{
    struct CUevent_st *e = NULL;
    if (h)
        HASH_FIND_PTR(g_event_reg, &h, e);
    return e;
}

/* Has the work the event stands for run (a never-recorded event: yes)? */
static bool event_done_locked(const struct CUevent_st *e)
{
    for (size_t i = 0; i < e->ndeps; i++)
        if (e->deps[i].s->completed < e->deps[i].seq)
            return false;
    return !e->s || e->s->completed >= e->seq;
}

static void event_wait_locked(const struct CUevent_st *e)
{
    for (size_t i = 0; i < e->ndeps; i++)
        wait_seq_locked(e->deps[i].s, e->deps[i].seq);
    if (e->s)
        wait_seq_locked(e->s, e->seq);
}

/* Work queued on s from now on waits for the event's work: an empty job per
 * stream the event covers (a context event covers many). */
static CUresult stream_wait_event_locked(struct CUstream_st *s, const struct CUevent_st *e)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < e->ndeps && !r; i++)
        if (e->deps[i].s != s)
            r = enqueue_after_locked(s, NULL, NULL, NULL, &e->deps[i], NULL);
    if (!r && e->s) {
        struct dep d = {e->s, e->seq};
        r = enqueue_after_locked(s, NULL, NULL, NULL, &d, NULL);
    }
    return r;
}

static CUresult event_record(CUevent hEvent, CUstream hStream, int per_thread)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find_locked(hEvent);
    struct CUstream_st *s = NULL;
    CUresult r = e ? resolve_stream_locked(hStream, per_thread, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (r)
        goto out;
    if (s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        e->captured = true;
        e->s = NULL;
        e->ndeps = 0;
        goto out;
    }
    uint64_t seq;
    r = enqueue_locked(s, NULL, NULL, NULL, &seq);
    if (!r) {
        e->captured = false;
        e->s = s;
        e->seq = seq;
        e->ndeps = 0;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    atomic_fetch_add(&g_cnt_event_record, 1);
    return event_record(hEvent, hStream, 0);
}

FC_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    atomic_fetch_add(&g_cnt_event_record, 1);
    return event_record(hEvent, hStream, 1);
}

FC_API CUresult cuEventQuery(CUevent hEvent)
{
    ENTER();
    atomic_fetch_add(&g_cnt_event_query, 1);
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find_locked(hEvent);
    CUresult r;
    if (!e)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (e->captured)
        r = CUDA_ERROR_CAPTURED_EVENT;
    else if (unsafe_call_conflicts_locked())  /* as the H100 showed: another thread's global capture */
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
        r = event_done_locked(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuEventSynchronize(CUevent hEvent)
{
    ENTER();
    atomic_fetch_add(&g_cnt_sync, 1);
    atomic_fetch_add(&g_cnt_event_sync, 1);
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find_locked(hEvent);
    CUresult r = CUDA_SUCCESS;
    if (!e)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (e->captured)
        r = CUDA_ERROR_CAPTURED_EVENT;
    else
        event_wait_locked(e);
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find_locked(hEvent);
    if (e)
        HASH_DEL(g_event_reg, e);
    pthread_mutex_unlock(&g_lock);
    if (e)
        free(e->deps);
    free(e);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Work queued on the stream after this waits for the event's work: an empty
 * job with one more dependency. Waiting for a never-recorded event, or inside
 * a capture (cross-stream joins are not modelled), orders nothing. */
static CUresult stream_wait_event(CUstream hStream, CUevent hEvent, unsigned int flags, int per_thread)
{
    ENTER();
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_add(&g_cnt_stream_wait_event, 1);
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find_locked(hEvent);
    struct CUstream_st *s = NULL;
    CUresult r = e ? resolve_stream_locked(hStream, per_thread, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (!r && s->cap != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        r = stream_wait_event_locked(s, e);
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, hEvent, Flags, 0);
}

FC_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, hEvent, Flags, 1);
}

/* ------------------------------------------------------------------ */
/* Context events (CUDA 12.5)                                          */

/* The context and the event, both valid, and no stream of the context's
 * device capturing (a capture there is invalidated and the call refused). */
static CUresult ctx_event_args_locked(CUcontext hCtx, CUevent hEvent, struct CUevent_st **pe)
{
    if (!hCtx || !valid_ctx_locked(hCtx) || hCtx->dead)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!(*pe = event_find_locked(hEvent)))
        return CUDA_ERROR_INVALID_HANDLE;
    if (device_capture_locked(hCtx->dev, true))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return CUDA_SUCCESS;
}

/* Every stream of the device with work not yet run, destroyed ones draining
 * too: their queued work is the context's until it has run. */
FC_API CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent)
{
    ENTER();
    atomic_fetch_add(&g_cnt_ctx_record, 1);
    /* FAKECUDA_CTX_RECORD_US: the call takes this long before it looks at the streams, so that a
     * capture begun meanwhile by another thread is met (tests of the capture gate). */
    const char *delay = getenv("FAKECUDA_CTX_RECORD_US");
    if (delay && *delay)
        usleep((useconds_t)strtoul(delay, NULL, 10));
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = NULL;
    struct dep *d = NULL;
    size_t k = 0;
    CUresult r = ctx_event_args_locked(hCtx, hEvent, &e);
    if (!r)
        r = pending_work_locked(hCtx->dev, pick_all, NULL, &d, &k);
    if (!r) {
        free(e->deps);
        e->deps = d;
        e->ndeps = k;
        e->s = NULL;
        e->captured = false;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* Every live stream of the device waits for the event's work, and so does
 * every stream created later (stream_join_ctx_waits_locked). */
FC_API CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent)
{
    ENTER();
    atomic_fetch_add(&g_cnt_ctx_wait, 1);
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = NULL;
    CUresult r = ctx_event_args_locked(hCtx, hEvent, &e);
    int dev = r ? 0 : hCtx->dev;
    for (struct CUstream_st *t = g_all_streams; t && !r; t = t->all_next)
        if (t->live && t->dev == dev)
            r = stream_wait_event_locked(t, e);
    struct device *g = &g_dev[dev];
    prune_ctx_waits_locked(g);
    size_t more = r ? 0 : e->ndeps + (e->s != NULL);
    if (more) {
        struct dep *w = realloc(g->ctx_waits, (g->nctx_waits + more) * sizeof *w);
        if (!w) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            g->ctx_waits = w;
            for (size_t i = 0; i < e->ndeps; i++)
                w[g->nctx_waits++] = e->deps[i];
            if (e->s)
                w[g->nctx_waits++] = (struct dep){e->s, e->seq};
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}
