// SPDX-License-Identifier: MIT
/*
 * Fake CUDA driver (libcuda.so.1) for testing the interposer without a GPU:
 * the internals shared by its files (fake_cuda.c, fake_memory.c,
 * fake_stream.c, fake_capture.c, fake_event.c, fake_graph.c, fake_procs.c).
 *
 * "Device memory" is host memory, so tests can look at the bytes and see
 * corruption. Streams are worker threads running FIFOs of host functions, so
 * work really is asynchronous and stream-ordering mistakes show up as data
 * races in the test's buffers.
 *
 * Stream model (CUDA's ordering rules):
 *  - the legacy default stream (handle 0 / CU_STREAM_LEGACY, one per device)
 *    is implicitly ordered with every BLOCKING stream of its device: a job on
 *    it depends on all earlier work of those streams, and a job on a blocking
 *    stream depends on earlier legacy work. Two blocking streams are not
 *    ordered with each other; NON_BLOCKING streams (cuStreamCreate* with
 *    CU_STREAM_NON_BLOCKING) are ordered with nothing but themselves;
 *  - per-thread default streams (CU_STREAM_PER_THREAD, the NULL handle in
 *    _ptsz/_ptds entry points) are one blocking stream per thread and device,
 *    retired when the thread exits;
 *  - events record a stream's sequence number; query/synchronise compare it
 *    with the stream's completed count; cuStreamWaitEvent queues an empty job
 *    that depends on it;
 *  - a capture records the capturing stream's work into a graph; a launched
 *    graph runs that work as one job on the launch stream (fake_graph.c).
 *
 * Held work (fakecu_stream_hold) makes "the GPU is still busy" deterministic:
 * a held stream's new jobs start only when demanded: by a host wait that
 * covers them (stream/context/event synchronisation, synchronous copies), by
 * a job that depends on them starting, or by the stream's destruction. Queries
 * never demand. Every wait goes through wait_seq_locked, which demands first,
 * so a hold only ever delays work, it cannot deadlock a wait.
 *
 * Locking: one global mutex (g_lock) protects all state; g_progress is
 * broadcast whenever any stream finishes a job or held work is released, and
 * every waiter (stream, event, device sync, cross-stream dependency) re-checks
 * on it. Simple, and the fake is never the bottleneck of a test. Stream and
 * context objects are never freed, only recycled, so a pointer held across an
 * unlocked wait stays valid and sequence numbers only grow.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <uthash.h>

#ifndef FAKE_INTERNAL_H
#define FAKE_INTERNAL_H

#define FC_API __attribute__((visibility("default")))

#define FC_MAX_DEVICES 8
#define FC_CTX_STACK 16
/* Above this, host memory comes from mmap(MAP_NORESERVE) so that big fake
 * capacities do not need matching host RAM until the pages are touched. */
#define FC_MMAP_THRESHOLD ((size_t)1 << 20)
#define FC_CTX_MAGIC 0x46437478u

enum stream_kind { SK_CREATED, SK_LEGACY, SK_PER_THREAD };

struct dep {
    struct CUstream_st *s;
    uint64_t seq;
};

struct job {
    struct job *next;
    void (*fn)(void *);
    void *arg;
    void (*drop)(void *); /* releases arg once fn has run (NULL: nothing to release) */
    uint64_t seq;
    size_t ndeps;
    struct dep *deps;
};

struct CUstream_st {
    void *key; /* == self; the registry is keyed by handle value */
    UT_hash_handle hh;
    struct CUstream_st *all_next;
    int dev;
    struct CUctx_st *ctx; /* the context a created stream belongs to (cuStreamGetCtx) */
    enum stream_kind kind;
    bool blocking; /* implicitly ordered with the legacy default stream */
    bool live;     /* handle may be used */
    bool dying;    /* worker exits once drained */
    bool exited;   /* worker gone: object can be recycled */
    struct job *head, *tail;
    uint64_t submitted, completed;
    pthread_cond_t cv; /* new job or dying */
    CUstreamCaptureStatus cap;
    CUstreamCaptureMode cap_mode;
    pthread_t cap_thread;
    struct CUgraph_st *cap_graph; /* what the running capture records into */
    bool cap_to_graph;            /* into a graph the program made (cuStreamBeginCaptureToGraph) */
    /* Held work (fakecu_stream_hold): jobs with seq > released wait until a
     * host wait or a dependent job demands them. */
    bool held;
    uint64_t released;
};

struct CUevent_st {
    void *key;
    UT_hash_handle hh;
    unsigned flags;
    struct CUstream_st *s; /* NULL: never recorded */
    uint64_t seq;
    bool captured;
    /* A context event (cuCtxRecordEvent): the work of every stream of the
     * context's device queued before the record, as one (stream, seq) each. */
    struct dep *deps;
    size_t ndeps;
};

struct CUctx_st {
    uint32_t magic;
    int dev;
    bool primary;
    bool dead;
    struct CUctx_st *next;
};

/* A captured graph: the captured work in capture order, run as one job. */
struct graph_node {
    void (*fn)(void *);
    void *arg;
    void (*drop)(void *);
};

struct CUgraph_st {
    void *key;
    UT_hash_handle hh;
    /* The handle, each executable, each launch in flight: the graph outlives
     * its handle while an executable or a launch still needs the work. */
    atomic_int refs;
    size_t n, cap;
    struct graph_node *nodes;
};

struct CUgraphExec_st {
    void *key;
    UT_hash_handle hh;
    struct CUgraph_st *g;
};

struct alloc {
    uintptr_t base;
    size_t size;
    int dev;
    bool pending_free; /* a stream-ordered free is queued */
    bool mapped;       /* from mmap rather than posix_memalign */
    struct CUmemPoolHandle_st *pool; /* cuMemAllocFromPoolAsync's pool; NULL: the device's default */
};

/* A memory pool of the fake (fake_pools.c): its bytes in use and the bytes it holds (grown in
 * 2 MiB steps to cover them, never trimmed), with their high-water marks, all under g_lock. */
struct CUmemPoolHandle_st {
    int dev;
    size_t used, used_high, reserved, reserved_high;
};
/* Under g_lock: an allocation of `size` bytes was made from / given back to `pool`. */
void fake_pool_charge_locked(struct CUmemPoolHandle_st *pool, size_t size);
void fake_pool_uncharge_locked(struct CUmemPoolHandle_st *pool, size_t size);
/* The device's default pool (what cuMemAllocAsync draws from). */
struct CUmemPoolHandle_st *fake_default_pool(int dev);
/* mem_alloc_core for a pool's allocation (the pool's bytes are counted with it). */
CUresult mem_alloc_core_pool(int dev, size_t size, CUdeviceptr *out, struct CUmemPoolHandle_st *pool);

struct device {
    size_t capacity;
    size_t used;
    size_t live;
    struct CUctx_st primary;
    int primary_refs;
    struct CUstream_st *legacy;
    /* cuCtxWaitEvent: work that every stream created from now on must wait
     * for too (pruned as it completes). */
    struct dep *ctx_waits;
    size_t nctx_waits;
};

struct per_thread_streams {
    struct CUstream_st *s[FC_MAX_DEVICES];
};

struct pa_count {
    char *name;
    unsigned long long n;
};

/* Every CUDA entry point starts here: lazy init, then the teardown and cuInit checks. */
#define ENTER()                                   \
    do {                                          \
        ensure_init();                            \
        if (atomic_load(&g_deinit))               \
            return CUDA_ERROR_DEINITIALIZED;      \
        if (!atomic_load(&g_inited))              \
            return CUDA_ERROR_NOT_INITIALIZED;    \
    } while (0)

/* ---- state shared by the fake driver's files (all under g_lock unless atomic) ---- */
extern pthread_mutex_t g_lock;
extern pthread_cond_t g_progress;
extern pthread_key_t g_ptds_key;
extern atomic_int g_inited;
extern atomic_int g_deinit;
extern int g_ndev;
/* The pitch alignment of cuMemAllocPitch_v2 (fake_shapes.c). */
size_t fake_texture_alignment(void);
extern struct device g_dev[FC_MAX_DEVICES];
extern struct CUctx_st *g_created_ctxs;
extern struct CUstream_st *g_all_streams;
extern struct CUstream_st *g_stream_reg;
extern struct CUevent_st *g_event_reg;
extern struct alloc *g_allocs;
extern size_t g_nallocs, g_cap_allocs;
extern unsigned long long g_alloc_attempts;
extern unsigned long long g_fail_at;
extern atomic_ullong g_cnt_allocs, g_cnt_frees, g_cnt_sync, g_cnt_ctx_sync;
/* What a fence costs the host (fakecu_get_event_calls). */
extern atomic_ullong g_cnt_stream_query, g_cnt_event_record, g_cnt_event_query, g_cnt_event_sync,
    g_cnt_stream_wait_event, g_cnt_ctx_record, g_cnt_ctx_wait;
extern struct pa_count *g_pa;
extern size_t g_npa;
extern unsigned long long g_pa_total;
extern _Thread_local struct CUctx_st *tls_ctx[FC_CTX_STACK];
extern _Thread_local int tls_depth;
extern _Thread_local struct per_thread_streams *tls_ptds;

/* ---- fake_cuda.c: initialisation, devices, contexts ---- */
void ensure_init(void);
struct CUctx_st *current_ctx(void);
CUresult need_ctx(int *dev);
bool valid_ctx_locked(struct CUctx_st *c);
void device_reset_locked(int dev);

/* ---- fake_memory.c: the allocation table, cuMem* ---- */
extern const char k_ipc_magic[8]; /* first bytes of the IPC handles this fake makes */
struct alloc *alloc_exact_locked(uintptr_t p);
struct alloc *alloc_containing_locked(uintptr_t p);
CUresult mem_alloc_core(int dev, size_t size, CUdeviceptr *out);
/* Gives an allocation's host memory back; called unlocked, once it is off the table. */
void host_free(const struct alloc *a);

/* ---- fake_host.c: pinned host memory ---- */
/* The pinned range (allocated or registered) holding p: its device, start and size. */
bool fc_host_range_of(uintptr_t p, int *dev, uintptr_t *base, size_t *size);
/* The device's primary context goes: its pinned allocations are freed, registrations forgotten. */
void fc_host_device_reset(int dev);

/* ---- fake_stream.c: stream objects, ordering, holds, waits ---- */
void ptds_destructor(void *p);
struct CUstream_st *stream_new_locked(int dev, enum stream_kind kind, bool blocking);
void stream_retire_locked(struct CUstream_st *s);
CUresult resolve_stream_locked(CUstream h, int per_thread, struct CUstream_st **out);
bool capture_ongoing(const struct CUstream_st *s);
void invalidate(struct CUstream_st *s);
bool legacy_breaks_capture_locked(int dev, bool do_invalidate);
bool unsafe_call_conflicts_locked(void);
bool any_capture_locked(bool do_invalidate);
bool device_capture_locked(int dev, bool do_invalidate);
/* Drops the context waits of a device that have run (they order nothing more). */
void prune_ctx_waits_locked(struct device *d);
/* A new stream of dev waits for the context waits still pending (cuCtxWaitEvent). */
CUresult stream_join_ctx_waits_locked(struct CUstream_st *s);
CUresult stream_accepts_locked(struct CUstream_st *s);
CUresult enqueue_locked(struct CUstream_st *s, void (*fn)(void *), void *arg, void (*drop)(void *),
                        uint64_t *seq);
CUresult enqueue_after_locked(struct CUstream_st *s, void (*fn)(void *), void *arg,
                              void (*drop)(void *), const struct dep *extra, uint64_t *seq);
void release_locked(struct CUstream_st *s, uint64_t seq);
void wait_seq_locked(struct CUstream_st *s, uint64_t seq);
/* The work submitted so far and not yet run on the streams of dev selected by pick, one
 * (stream, seq) each, in *out (calloc'd; NULL when none) and *count. */
CUresult pending_work_locked(int dev, bool (*pick)(const struct CUstream_st *, int, const void *),
                             const void *ctx, struct dep **out, size_t *count);
CUresult wait_streams_locked(int dev, bool (*pick)(const struct CUstream_st *, int, const void *),
                             const void *ctx);
bool pick_all(const struct CUstream_st *t, int dev, const void *ctx);
bool pick_legacy_group(const struct CUstream_st *t, int dev, const void *ctx);
CUresult device_sync_locked(int dev);
CUresult stream_sync_locked(struct CUstream_st *s);
bool stream_idle_locked(struct CUstream_st *s);

/* ---- fake_graph.c: what a capture records ---- */
/* Appends captured work to the graph that s is capturing into; takes arg. */
void graph_record_locked(struct CUgraph_st *g, void (*fn)(void *), void *arg, void (*drop)(void *));
struct CUgraph_st *graph_new_locked(void);
/* A handle the program holds (registered), or NULL. */
struct CUgraph_st *graph_find_locked(CUgraph h);
/* Registers a finished capture's graph so its handle can be used. */
void graph_publish_locked(struct CUgraph_st *g);
/* Lock-free: the worker drops launches unlocked, enqueue_locked with g_lock held. */
void graph_unref(struct CUgraph_st *g);

#endif /* FAKE_INTERNAL_H */
