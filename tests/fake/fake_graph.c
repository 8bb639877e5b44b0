// SPDX-License-Identifier: MIT
/*
 * Fake CUDA driver: a minimal CUDA graph (model: fake_internal.h).
 *
 * A capture records the work queued on the capturing stream, in order; the
 * instantiated graph, launched on a stream, runs that work there as ONE job,
 * ordered on that stream like any other work (held streams, events and the
 * legacy stream's implicit ordering all apply to it). Only the capturing
 * stream's own work is recorded: work other streams join into a capture
 * through events, and memory nodes (cuMemAllocAsync / cuMemFreeAsync during a
 * capture), are not modelled (a recorded stream-ordered free does nothing when
 * replayed: its allocation was never marked as pending a free).
 */
#include "fake_internal.h"

static struct CUgraph_st *g_graph_reg;
static struct CUgraphExec_st *g_exec_reg;

struct CUgraph_st *graph_new_locked(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->key = g;
    atomic_init(&g->refs, 1);
    return g;
}

void graph_publish_locked(struct CUgraph_st *g)
{
    HASH_ADD_PTR(g_graph_reg, key, g);
}

void graph_record_locked(struct CUgraph_st *g, void (*fn)(void *), void *arg, void (*drop)(void *))
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        struct graph_node *n = realloc(g->nodes, cap * sizeof *n);
        if (!n) { /* the node is lost; the graph runs without it, as after a failed capture call */
            if (drop)
                drop(arg);
            return;
        }
        g->nodes = n;
        g->cap = cap;
    }
    g->nodes[g->n++] = (struct graph_node){fn, arg, drop};
}

/* The last reference gone (handle destroyed or never handed out, no
 * executable, no launch in flight), the recorded arguments are released. The
 * graph is in no registry by then, so this needs no lock: the worker calls it
 * unlocked after a launch, enqueue_locked with g_lock held. */
void graph_unref(struct CUgraph_st *g)
{
    if (atomic_fetch_sub(&g->refs, 1) > 1)
        return;
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i].drop)
            g->nodes[i].drop(g->nodes[i].arg);
    free(g->nodes);
    free(g);
}

struct CUgraph_st *graph_find_locked(CUgraph h)
{
    struct CUgraph_st *g = NULL;
    if (h)
        HASH_FIND_PTR(g_graph_reg, &h, g);
    return g;
}

static struct CUgraphExec_st *exec_find_locked(CUgraphExec h)
{
    struct CUgraphExec_st *e = NULL;
    if (h)
        HASH_FIND_PTR(g_exec_reg, &h, e);
    return e;
}

FC_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    ENTER();
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUgraph_st *g = graph_new_locked();
    if (g)
        graph_publish_locked(g);
    pthread_mutex_unlock(&g_lock);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = g;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGraphDestroy(CUgraph hGraph)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUgraph_st *g = graph_find_locked(hGraph);
    if (g) {
        HASH_DEL(g_graph_reg, g);
        graph_unref(g);
    }
    pthread_mutex_unlock(&g_lock);
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                            unsigned long long flags)
{
    ENTER();
    if (!phGraphExec || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    struct CUgraph_st *g = graph_find_locked(hGraph);
    if (g) {
        atomic_fetch_add(&g->refs, 1);
        e->g = g;
        e->key = e;
        HASH_ADD_PTR(g_exec_reg, key, e);
    }
    pthread_mutex_unlock(&g_lock);
    if (!g) {
        free(e);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *phGraphExec = e;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUgraphExec_st *e = exec_find_locked(hGraphExec);
    if (e) {
        HASH_DEL(g_exec_reg, e);
        graph_unref(e->g);
    }
    pthread_mutex_unlock(&g_lock);
    free(e);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* One launch: the recorded work, in capture order, on the launch stream. */
static void graph_run_job(void *arg)
{
    struct CUgraph_st *g = arg;
    for (size_t i = 0; i < g->n; i++)
        g->nodes[i].fn(g->nodes[i].arg);
}

static void graph_launch_done(void *arg)
{
    graph_unref(arg);
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream, int per_thread)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUgraphExec_st *e = exec_find_locked(hGraphExec);
    struct CUstream_st *s = NULL;
    CUresult r = e ? resolve_stream_locked(hStream, per_thread, &s) : CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        /* The launch holds a reference so the exec may be destroyed at once.
         * Launched into a capture, the whole graph becomes one recorded node. */
        atomic_fetch_add(&e->g->refs, 1);
        r = enqueue_locked(s, graph_run_job, e->g, graph_launch_done, NULL);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, 0);
}

FC_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, 1);
}
