// SPDX-License-Identifier: MIT
/*
 * Fake CUDA driver: the stream-capture entry points (cuStreamIsCapturing,
 * cuStreamBeginCapture*, cuStreamEndCapture*). They only switch a stream into
 * and out of recording: the recording itself is done by fake_stream.c's enqueue,
 * into fake_graph.c's graphs, so this file holds no state of its own and lives
 * apart from the stream machinery (model: fake_internal.h).
 */
#include "fake_internal.h"

static CUresult stream_is_capturing(CUstream h, CUstreamCaptureStatus *st, int per_thread)
{
    ENTER();
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (!r) {
        if (s->kind == SK_LEGACY && legacy_breaks_capture_locked(s->dev, false)) {
            *st = CU_STREAM_CAPTURE_STATUS_NONE;
            r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else {
            *st = s->cap;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return stream_is_capturing(hStream, captureStatus, 0);
}

FC_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return stream_is_capturing(hStream, captureStatus, 1);
}

/* into: a graph the program made (cuStreamBeginCaptureToGraph), else NULL for a new one. */
static CUresult stream_begin_capture(CUstream h, CUstreamCaptureMode mode, int per_thread, bool to_graph,
                                     CUgraph into)
{
    ENTER();
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    struct CUgraph_st *g = NULL;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (r)
        goto out;
    if (to_graph && !(g = graph_find_locked(into))) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (s->kind == SK_LEGACY) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (capture_ongoing(s)) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        if (g)
            atomic_fetch_add(&g->refs, 1); /* the capture's reference, dropped at its end */
        s->cap_graph = g ? g : graph_new_locked();
        if (!s->cap_graph) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        s->cap_to_graph = to_graph;
        s->cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->cap_mode = mode;
        s->cap_thread = pthread_self();
    }
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuStreamBeginCapture(CUstream hStream)
{
    return stream_begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, false, NULL);
}

FC_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return stream_begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 1, false, NULL);
}

FC_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return stream_begin_capture(hStream, mode, 0, false, NULL);
}

static CUresult begin_capture_to_graph(CUstream h, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       CUstreamCaptureMode mode, int per_thread)
{
    if (ndeps && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    return stream_begin_capture(h, mode, per_thread, true, g);
}

FC_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                            const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                            CUstreamCaptureMode mode)
{
    (void)dependencyData;
    return begin_capture_to_graph(hStream, hGraph, dependencies, numDependencies, mode, 0);
}

FC_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode *dependencies,
                                                 const CUgraphEdgeData *dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode)
{
    (void)dependencyData;
    return begin_capture_to_graph(hStream, hGraph, dependencies, numDependencies, mode, 1);
}

/* A capture begun behind the back of a layer that hooks cuStreamBeginCapture (as one begun
 * through an entry point the layer does not wrap would be). */
FC_API CUresult fakecu_stream_begin_capture_unseen(CUstream hStream, CUstreamCaptureMode mode)
{
    return stream_begin_capture(hStream, mode, 0, false, NULL);
}

FC_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return stream_begin_capture(hStream, mode, 1, false, NULL);
}

static CUresult stream_end_capture(CUstream h, CUgraph *phGraph, int per_thread)
{
    ENTER();
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (r)
        goto out;
    if (!capture_ongoing(s)) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(s->cap_thread, pthread_self())) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else {
        bool ok = s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
        struct CUgraph_st *g = s->cap_graph;
        s->cap_graph = NULL;
        if (s->cap_to_graph)
            graph_unref(g); /* the program's graph: its handle keeps it (registered already) */
        else if (ok)
            graph_publish_locked(g);
        else
            graph_unref(g);
        s->cap_to_graph = false;
        *phGraph = ok ? g : NULL;
        r = ok ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return stream_end_capture(hStream, phGraph, 0);
}

FC_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return stream_end_capture(hStream, phGraph, 1);
}
