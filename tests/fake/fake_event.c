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
        goto out;
    }
    uint64_t seq;
    r = enqueue_locked(s, NULL, NULL, NULL, &seq);
    if (!r) {
        e->captured = false;
        e->s = s;
        e->seq = seq;
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
        r = !e->s || e->s->completed >= e->seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
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
    else if (e->s)
        wait_seq_locked(e->s, e->seq);
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
    if (!r && e->s && s->cap != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        struct dep d = {e->s, e->seq};
        r = enqueue_after_locked(s, NULL, NULL, NULL, &d, NULL);
    }
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
