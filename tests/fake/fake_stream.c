// SPDX-License-Identifier: MIT
/* Fake CUDA driver: streams, implicit ordering, held work, capture state, host functions
 * (model: fake_internal.h); the capture entry points are in fake_capture.c. */
#include "fake_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* Streams                                                             */

static void *stream_worker(void *p)
{
    struct CUstream_st *s = p;
    pthread_mutex_lock(&g_lock);
    for (;;) {
        while (!s->head && !s->dying)
            pthread_cond_wait(&s->cv, &g_lock);
        if (!s->head)
            break;
        struct job *j = s->head;
        /* Held work waits for a demand; once it may run, it demands what it
         * depends on, so a hold never deadlocks a wait: it only delays. */
        while (s->held && j->seq > s->released)
            pthread_cond_wait(&g_progress, &g_lock);
        for (size_t i = 0; i < j->ndeps; i++)
            wait_seq_locked(j->deps[i].s, j->deps[i].seq);
        pthread_mutex_unlock(&g_lock);
        if (j->fn)
            j->fn(j->arg);
        if (j->drop)
            j->drop(j->arg);
        pthread_mutex_lock(&g_lock);
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        s->completed = j->seq;
        pthread_cond_broadcast(&g_progress);
        free(j->deps);
        free(j);
    }
    s->exited = true;
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

struct CUstream_st *stream_new_locked(int dev, enum stream_kind kind, bool blocking)
{
    struct CUstream_st *s = NULL;
    for (struct CUstream_st *p = g_all_streams; p; p = p->all_next)
        if (p->exited) {
            s = p;
            break;
        }
    bool fresh = !s;
    if (fresh) {
        s = calloc(1, sizeof *s);
        if (!s)
            return NULL;
        pthread_cond_init(&s->cv, NULL);
    }
    s->key = s;
    s->dev = dev;
    s->kind = kind;
    s->blocking = blocking;
    s->live = true;
    s->dying = false;
    s->exited = false;
    s->head = s->tail = NULL;
    s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
    s->cap_graph = NULL;
    s->cap_to_graph = false;
    s->held = false;
    s->released = s->submitted;

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, stream_worker, s);
    pthread_attr_destroy(&attr);
    if (rc) {
        s->live = false;
        s->exited = true;
        if (fresh) {
            pthread_cond_destroy(&s->cv);
            free(s);
        }
        return NULL;
    }
    if (fresh) {
        s->all_next = g_all_streams;
        g_all_streams = s;
    }
    if (kind == SK_CREATED)
        HASH_ADD_PTR(g_stream_reg, key, s);
    /* Not joinable: a failed wait leaves the stream unordered, as a driver out of memory would. */
    (void)stream_join_ctx_waits_locked(s);
    return s;
}

void stream_retire_locked(struct CUstream_st *s)
{
    if (s->kind == SK_CREATED && s->live)
        HASH_DEL(g_stream_reg, s);
    s->live = false;
    s->dying = true;
    s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
    if (s->cap_graph) {
        graph_unref(s->cap_graph);
        s->cap_graph = NULL;
    }
    s->cap_to_graph = false;
    /* A destroyed stream's queued work still runs, as on the real device. */
    s->held = false;
    pthread_cond_broadcast(&g_progress);
    pthread_cond_signal(&s->cv);
}

/* A thread's per-thread default streams go away with the thread; queued work
 * still runs, as on the real device. */
void ptds_destructor(void *p)
{
    struct per_thread_streams *pt = p;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < FC_MAX_DEVICES; i++)
        if (pt->s[i])
            stream_retire_locked(pt->s[i]);
    pthread_mutex_unlock(&g_lock);
    free(pt);
}

CUresult resolve_stream_locked(CUstream h, int per_thread, struct CUstream_st **out)
{
    if (h == NULL)
        h = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        int dev;
        CUresult r = need_ctx(&dev);
        if (r)
            return r;
        if (h == CU_STREAM_LEGACY) {
            if (!g_dev[dev].legacy && !(g_dev[dev].legacy = stream_new_locked(dev, SK_LEGACY, true)))
                return CUDA_ERROR_OUT_OF_MEMORY;
            *out = g_dev[dev].legacy;
            return CUDA_SUCCESS;
        }
        if (!tls_ptds) {
            tls_ptds = calloc(1, sizeof *tls_ptds);
            if (!tls_ptds)
                return CUDA_ERROR_OUT_OF_MEMORY;
            pthread_setspecific(g_ptds_key, tls_ptds);
        }
        if (!tls_ptds->s[dev] && !(tls_ptds->s[dev] = stream_new_locked(dev, SK_PER_THREAD, true)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        *out = tls_ptds->s[dev];
        return CUDA_SUCCESS;
    }
    struct CUstream_st *s;
    HASH_FIND_PTR(g_stream_reg, &h, s);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

bool capture_ongoing(const struct CUstream_st *s)
{
    return s->cap != CU_STREAM_CAPTURE_STATUS_NONE;
}

void invalidate(struct CUstream_st *s)
{
    if (s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        s->cap = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

/* Work on the legacy stream implicitly joins every blocking stream; when one
 * of them is capturing, that join breaks the capture. */
bool legacy_breaks_capture_locked(int dev, bool do_invalidate)
{
    bool hit = false;
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->live && t->dev == dev && t->blocking && t->kind != SK_LEGACY && capture_ongoing(t)) {
            hit = true;
            if (do_invalidate)
                invalidate(t);
        }
    return hit;
}

/* Calls that are "potentially unsafe" during capture (allocation, free) are
 * refused while a global-mode capture runs anywhere, or a thread-local one
 * runs in this thread; the refusal invalidates those captures. */
/* The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode): a thread
 * in relaxed mode is never refused because of another thread's capture. */
static _Thread_local CUstreamCaptureMode t_interaction = CU_STREAM_CAPTURE_MODE_GLOBAL;

FC_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = t_interaction;
    t_interaction = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

bool unsafe_call_conflicts_locked(void)
{
    bool hit = false;
    if (t_interaction == CU_STREAM_CAPTURE_MODE_RELAXED)
        return false;
    pthread_t self = pthread_self();
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next) {
        if (!t->live || !capture_ongoing(t))
            continue;
        if (t->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
            (t->cap_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && pthread_equal(t->cap_thread, self))) {
            hit = true;
            invalidate(t);
        }
    }
    return hit;
}

/* A stream of the device (dev < 0: of any device) captures. cuCtxRecordEvent and
 * cuCtxWaitEvent refuse then (invalidating the capture, in every capture mode, as on the H100:
 * docs/benchmarks.md, "context fences", 2026-11-25, 885baee). */
bool device_capture_locked(int dev, bool do_invalidate)
{
    bool hit = false;
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->live && (dev < 0 || t->dev == dev) && capture_ongoing(t)) {
            hit = true;
            if (do_invalidate)
                invalidate(t);
        }
    return hit;
}

void prune_ctx_waits_locked(struct device *d)
{
    size_t keep = 0;
    for (size_t i = 0; i < d->nctx_waits; i++)
        if (d->ctx_waits[i].s->completed < d->ctx_waits[i].seq)
            d->ctx_waits[keep++] = d->ctx_waits[i];
    d->nctx_waits = keep;
}

CUresult stream_join_ctx_waits_locked(struct CUstream_st *s)
{
    struct device *d = &g_dev[s->dev];
    prune_ctx_waits_locked(d);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < d->nctx_waits && !r; i++)
        if (d->ctx_waits[i].s != s)
            r = enqueue_after_locked(s, NULL, NULL, NULL, &d->ctx_waits[i], NULL);
    return r;
}

bool any_capture_locked(bool do_invalidate)
{
    return device_capture_locked(-1, do_invalidate);
}

/* Can new work go to s? */
CUresult stream_accepts_locked(struct CUstream_st *s)
{
    if (s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (s->kind == SK_LEGACY && legacy_breaks_capture_locked(s->dev, true))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return CUDA_SUCCESS;
}

/*
 * Queue fn(arg) on s, after extra (if not NULL) besides the implicit ordering;
 * drop(arg) runs once fn has. On a capturing stream the work is recorded into
 * the capture's graph instead (which then owns arg; an empty fn records
 * nothing). On every error drop(arg) runs at once, so callers need no cleanup
 * path. *seq gets the job's sequence number (0 when captured).
 */
CUresult enqueue_after_locked(struct CUstream_st *s, void (*fn)(void *), void *arg,
                              void (*drop)(void *), const struct dep *extra, uint64_t *seq)
{
    if (seq)
        *seq = 0;
    if (s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (fn && s->cap_graph)
            graph_record_locked(s->cap_graph, fn, arg, drop);
        else if (drop)
            drop(arg);
        return CUDA_SUCCESS;
    }
    CUresult r = stream_accepts_locked(s);
    if (r) {
        if (drop)
            drop(arg);
        return r;
    }
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        goto oom;
    if (s->kind == SK_LEGACY) {
        size_t n = 0;
        for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
            if (t != s && t->dev == s->dev && t->blocking && t->submitted > t->completed)
                n++;
        if (n) {
            j->deps = calloc(n, sizeof *j->deps);
            if (!j->deps)
                goto oom;
            for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
                if (t != s && t->dev == s->dev && t->blocking && t->submitted > t->completed)
                    j->deps[j->ndeps++] = (struct dep){t, t->submitted};
        }
    } else if (s->blocking) {
        struct CUstream_st *l = g_dev[s->dev].legacy;
        if (l && l->submitted > l->completed) {
            j->deps = calloc(1, sizeof *j->deps);
            if (!j->deps)
                goto oom;
            j->deps[0] = (struct dep){l, l->submitted};
            j->ndeps = 1;
        }
    }
    if (extra && extra->s != s && extra->s->completed < extra->seq) {
        struct dep *d = realloc(j->deps, (j->ndeps + 1) * sizeof *d);
        if (!d)
            goto oom;
        j->deps = d;
        j->deps[j->ndeps++] = *extra;
    }
    j->fn = fn;
    j->arg = arg;
    j->drop = drop;
    j->seq = ++s->submitted;
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    pthread_cond_signal(&s->cv);
    if (seq)
        *seq = j->seq;
    return CUDA_SUCCESS;
oom:
    if (j)
        free(j->deps);
    free(j);
    if (drop)
        drop(arg);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult enqueue_locked(struct CUstream_st *s, void (*fn)(void *), void *arg, void (*drop)(void *),
                        uint64_t *seq)
{
    return enqueue_after_locked(s, fn, arg, drop, NULL, seq);
}

/* A demand for s's work up to seq: held jobs up to there may now run. */
void release_locked(struct CUstream_st *s, uint64_t seq)
{
    if (s->released < seq) {
        s->released = seq;
        pthread_cond_broadcast(&g_progress);
    }
}

/* Every wait (host or stream) for s's work up to seq is a demand for it. */
void wait_seq_locked(struct CUstream_st *s, uint64_t seq)
{
    release_locked(s, seq);
    while (s->completed < seq)
        pthread_cond_wait(&g_progress, &g_lock);
}

CUresult pending_work_locked(int dev, bool (*pick)(const struct CUstream_st *, int, const void *),
                             const void *ctx, struct dep **out, size_t *count)
{
    size_t n = 0;
    *out = NULL;
    *count = 0;
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->dev == dev && t->submitted > t->completed && pick(t, dev, ctx))
            n++;
    if (!n)
        return CUDA_SUCCESS;
    struct dep *d = calloc(n, sizeof *d);
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t k = 0;
    for (struct CUstream_st *t = g_all_streams; t && k < n; t = t->all_next)
        if (t->dev == dev && t->submitted > t->completed && pick(t, dev, ctx))
            d[k++] = (struct dep){t, t->submitted};
    *out = d;
    *count = k;
    return CUDA_SUCCESS;
}

/* Waits for everything submitted so far to the streams selected by pick. */
CUresult wait_streams_locked(int dev, bool (*pick)(const struct CUstream_st *, int, const void *),
                                    const void *ctx)
{
    struct dep *d;
    size_t k;
    CUresult r = pending_work_locked(dev, pick, ctx, &d, &k);
    for (size_t i = 0; i < k; i++)
        wait_seq_locked(d[i].s, d[i].seq);
    free(d);
    return r;
}

bool pick_all(const struct CUstream_st *t, int dev, const void *ctx)
{
    (void)t, (void)dev, (void)ctx;
    return true;
}

bool pick_legacy_group(const struct CUstream_st *t, int dev, const void *ctx)
{
    (void)dev;
    return t == ctx || t->blocking;
}

CUresult device_sync_locked(int dev)
{
    return wait_streams_locked(dev, pick_all, NULL);
}

/* Synchronising the legacy stream also waits for the blocking streams it is
 * implicitly ordered with. */
CUresult stream_sync_locked(struct CUstream_st *s)
{
    if (s->kind == SK_LEGACY)
        return wait_streams_locked(s->dev, pick_legacy_group, s);
    wait_seq_locked(s, s->submitted);
    return CUDA_SUCCESS;
}

bool stream_idle_locked(struct CUstream_st *s)
{
    if (s->kind != SK_LEGACY)
        return s->completed >= s->submitted;
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->dev == s->dev && (t == s || t->blocking) && t->completed < t->submitted)
            return false;
    return true;
}

/* ------------------------------------------------------------------ */
/* Streams and host functions (capture: fake_capture.c)               */

FC_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    ENTER();
    if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s = stream_new_locked(dev, SK_CREATED, !(Flags & CU_STREAM_NON_BLOCKING));
    if (s)
        s->ctx = current_ctx();
    pthread_mutex_unlock(&g_lock);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = s;
    return CUDA_SUCCESS;
}

/* Priorities order nothing in the fake: only the flags matter for ordering. */
FC_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    (void)priority;
    return cuStreamCreate(phStream, flags);
}

/* Test-only: see fakecu_stream_hold in fake_cuda_driver.h. */
FC_API CUresult fakecu_stream_hold(CUstream hStream, int per_thread, int hold)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(hStream, per_thread, &s);
    if (!r) {
        s->held = hold != 0;
        s->released = s->submitted; /* a hold delays only work queued from now on */
        pthread_cond_broadcast(&g_progress);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* Test-only: a host wait that does not go through a synchronisation call
 * (the runtime's synchronous copies) demands the stream's work so far. */
FC_API CUresult fakecu_stream_demand(CUstream hStream, int per_thread)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(hStream, per_thread, &s);
    if (!r)
        release_locked(s, s->submitted);
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* Returns at once; queued work still runs, as on the real device. */
FC_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    ENTER();
    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(hStream, 0, &s);
    if (!r)
        stream_retire_locked(s);
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUresult stream_synchronize(CUstream h, int per_thread)
{
    ENTER();
    atomic_fetch_add(&g_cnt_sync, 1);
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (r)
        goto out;
    if (capture_ongoing(s)) {
        invalidate(s);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s->kind == SK_LEGACY && legacy_breaks_capture_locked(s->dev, true)) {
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else {
        r = stream_sync_locked(s);
    }
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuStreamSynchronize(CUstream hStream)
{
    return stream_synchronize(hStream, 0);
}

FC_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return stream_synchronize(hStream, 1);
}

static CUresult stream_query(CUstream h, int per_thread)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (r)
        goto out;
    if (capture_ongoing(s)) {
        invalidate(s);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s->kind == SK_LEGACY && legacy_breaks_capture_locked(s->dev, true)) {
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else {
        r = stream_idle_locked(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

// FAKECUDA_STREAM_QUERY_NS=N makes every cuStreamQuery spend N ns of host time, as the real
// call does (about 1.7 us each on the H100 while a training step runs): a test of code that
// rations its queries by their cost then sees a realistic cost. Default 0.
static void stream_query_cost(void)
{
    static _Atomic long cost = -1;
    long ns = atomic_load(&cost);
    if (ns < 0) {
        const char *e = getenv("FAKECUDA_STREAM_QUERY_NS");
        char *end = NULL;
        ns = e ? strtol(e, &end, 10) : 0;
        if (e && (end == e || *end || ns < 0 || ns > 1000000000L)) {
            fprintf(stderr, "fakecuda: FAKECUDA_STREAM_QUERY_NS=%s is not a number of ns up to 1e9\n", e);
            ns = 0;
        }
        atomic_store(&cost, ns);
    }
    if (!ns)
        return;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

FC_API CUresult cuStreamQuery(CUstream hStream)
{
    atomic_fetch_add(&g_cnt_stream_query, 1);
    stream_query_cost();
    return stream_query(hStream, 0);
}

FC_API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    atomic_fetch_add(&g_cnt_stream_query, 1);
    stream_query_cost();
    return stream_query(hStream, 1);
}

/* The context of a created stream; a default stream answers the calling thread's current context
 * (the driver documents the NULL stream so; the fake answers the per-thread one alike). */
static CUresult stream_get_ctx(CUstream h, CUcontext *pctx, int per_thread)
{
    ENTER();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (!r)
        *pctx = s->kind == SK_CREATED ? s->ctx : current_ctx();
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    return stream_get_ctx(hStream, pctx, 0);
}

FC_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    return stream_get_ctx(hStream, pctx, 1);
}

FC_API CUresult fakecu_launch(CUstream hStream, int per_thread, void (*fn)(void *), void *arg,
                              void (*drop)(void *))
{
    ensure_init();
    CUresult r = CUDA_SUCCESS;
    if (atomic_load(&g_deinit))
        r = CUDA_ERROR_DEINITIALIZED;
    else if (!atomic_load(&g_inited))
        r = CUDA_ERROR_NOT_INITIALIZED;
    else if (!fn)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r) {
        if (drop)
            drop(arg);
        return r;
    }
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    r = resolve_stream_locked(hStream, per_thread, &s);
    if (r) {
        if (drop)
            drop(arg);
    } else {
        r = enqueue_locked(s, fn, arg, drop, NULL);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    return fakecu_launch(hStream, 0, fn, userData, NULL);
}

FC_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    return fakecu_launch(hStream, 1, fn, userData, NULL);
}

