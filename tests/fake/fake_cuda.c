// SPDX-License-Identifier: MIT
/*
 * Fake CUDA driver (libcuda.so.1) for testing the interposer without a GPU.
 *
 * "Device memory" is host memory, so tests can look at the bytes and see
 * corruption. Streams are worker threads running FIFOs of host functions, so
 * work really is asynchronous and stream-ordering mistakes show up as data
 * races in the test's buffers.
 *
 * Locking: one global mutex (g_lock) protects all state; g_progress is
 * broadcast whenever any stream finishes a job, and every waiter (stream,
 * event, device sync, cross-stream dependency) re-checks on it. Simple, and
 * the fake is never the bottleneck of a test. Stream and context objects are
 * never freed, only recycled, so a pointer held across an unlocked wait stays
 * valid and sequence numbers only grow.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"
#include "fake_vmm.h"

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
    uint64_t seq;
    size_t ndeps;
    struct dep *deps;
};

struct CUstream_st {
    void *key; /* == self; the registry is keyed by handle value */
    UT_hash_handle hh;
    struct CUstream_st *all_next;
    int dev;
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
};

struct CUevent_st {
    void *key;
    UT_hash_handle hh;
    unsigned flags;
    struct CUstream_st *s; /* NULL: never recorded */
    uint64_t seq;
    bool captured;
};

struct CUctx_st {
    uint32_t magic;
    int dev;
    bool primary;
    bool dead;
    struct CUctx_st *next;
};

struct CUgraph_st {
    int unused;
};

struct alloc {
    uintptr_t base;
    size_t size;
    int dev;
    bool pending_free; /* a stream-ordered free is queued */
    bool mapped;       /* from mmap rather than posix_memalign */
};

struct device {
    size_t capacity;
    size_t used;
    size_t live;
    struct CUctx_st primary;
    int primary_refs;
    struct CUstream_st *legacy;
};

struct per_thread_streams {
    struct CUstream_st *s[FC_MAX_DEVICES];
};

struct pa_count {
    char *name;
    unsigned long long n;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_progress = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_ptds_key;

static atomic_int g_inited;
static atomic_int g_deinit;

static int g_ndev = 1;
static struct device g_dev[FC_MAX_DEVICES];
static struct CUctx_st *g_created_ctxs;
static struct CUstream_st *g_all_streams;
static struct CUstream_st *g_stream_reg;
static struct CUevent_st *g_event_reg;
static struct CUgraph_st g_dummy_graph;

static struct alloc *g_allocs;
static size_t g_nallocs, g_cap_allocs;

static unsigned long long g_alloc_attempts;
static unsigned long long g_fail_at;

static atomic_ullong g_cnt_allocs, g_cnt_frees, g_cnt_sync, g_cnt_ctx_sync;

static struct pa_count *g_pa;
static size_t g_npa;
static unsigned long long g_pa_total;

static _Thread_local struct CUctx_st *tls_ctx[FC_CTX_STACK];
static _Thread_local int tls_depth;
static _Thread_local struct per_thread_streams *tls_ptds;

/* ------------------------------------------------------------------ */
/* Initialisation                                                      */

static size_t parse_size(const char *name, const char *s, size_t dflt)
{
    if (!s || !*s)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        goto bad;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        goto bad;
    if (shift && v > (~0ULL >> shift))
        goto bad;
    v <<= shift;
    if (v > SIZE_MAX)
        goto bad;
    return (size_t)v;
bad:
    fprintf(stderr, "fakecuda: ignoring invalid %s=%s\n", name, s);
    return dflt;
}

static void ptds_destructor(void *p);

static void global_init(void)
{
    size_t cap = parse_size("FAKECUDA_CAPACITY", getenv("FAKECUDA_CAPACITY"), (size_t)1 << 30);
    const char *nd = getenv("FAKECUDA_DEVICES");
    if (nd && *nd) {
        char *end;
        long n = strtol(nd, &end, 10);
        if (*end || n < 0 || n > FC_MAX_DEVICES)
            fprintf(stderr, "fakecuda: ignoring invalid FAKECUDA_DEVICES=%s (0..%d)\n", nd,
                    FC_MAX_DEVICES);
        else
            g_ndev = (int)n;
    }
    for (int i = 0; i < FC_MAX_DEVICES; i++) {
        g_dev[i].capacity = cap;
        g_dev[i].primary.magic = FC_CTX_MAGIC;
        g_dev[i].primary.dev = i;
        g_dev[i].primary.primary = true;
    }
    const char *fa = getenv("FAKECUDA_FAIL_ALLOC_AT");
    if (fa && *fa) {
        char *end;
        unsigned long long n = strtoull(fa, &end, 10);
        if (*end)
            fprintf(stderr, "fakecuda: ignoring invalid FAKECUDA_FAIL_ALLOC_AT=%s\n", fa);
        else
            g_fail_at = n;
    }
    pthread_key_create(&g_ptds_key, ptds_destructor);
}

static void ensure_init(void)
{
    pthread_once(&g_once, global_init);
}

/* Like the real driver after its teardown: calls made from other libraries'
 * destructors that run later get CUDA_ERROR_DEINITIALIZED. */
__attribute__((destructor)) static void fc_fini(void)
{
    atomic_store(&g_deinit, 1);
}

#define ENTER()                                   \
    do {                                          \
        ensure_init();                            \
        if (atomic_load(&g_deinit))               \
            return CUDA_ERROR_DEINITIALIZED;      \
        if (!atomic_load(&g_inited))              \
            return CUDA_ERROR_NOT_INITIALIZED;    \
    } while (0)

/* ------------------------------------------------------------------ */
/* Contexts                                                            */

static struct CUctx_st *current_ctx(void)
{
    return tls_depth > 0 ? tls_ctx[tls_depth - 1] : NULL;
}

static CUresult need_ctx(int *dev)
{
    struct CUctx_st *c = current_ctx();
    if (!c || c->dead)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (dev)
        *dev = c->dev;
    return CUDA_SUCCESS;
}

static bool valid_ctx_locked(struct CUctx_st *c)
{
    for (int i = 0; i < g_ndev; i++)
        if (c == &g_dev[i].primary)
            return true;
    for (struct CUctx_st *p = g_created_ctxs; p; p = p->next)
        if (p == c)
            return !p->dead;
    return false;
}

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
        for (size_t i = 0; i < j->ndeps; i++)
            while (j->deps[i].s->completed < j->deps[i].seq)
                pthread_cond_wait(&g_progress, &g_lock);
        pthread_mutex_unlock(&g_lock);
        if (j->fn)
            j->fn(j->arg);
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

static struct CUstream_st *stream_new_locked(int dev, enum stream_kind kind, bool blocking)
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
    return s;
}

static void stream_retire_locked(struct CUstream_st *s)
{
    if (s->kind == SK_CREATED && s->live)
        HASH_DEL(g_stream_reg, s);
    s->live = false;
    s->dying = true;
    s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
    pthread_cond_signal(&s->cv);
}

/* A thread's per-thread default streams go away with the thread; queued work
 * still runs, as on the real device. */
static void ptds_destructor(void *p)
{
    struct per_thread_streams *pt = p;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < FC_MAX_DEVICES; i++)
        if (pt->s[i])
            stream_retire_locked(pt->s[i]);
    pthread_mutex_unlock(&g_lock);
    free(pt);
}

static CUresult resolve_stream_locked(CUstream h, int per_thread, struct CUstream_st **out)
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

static bool capture_ongoing(const struct CUstream_st *s)
{
    return s->cap != CU_STREAM_CAPTURE_STATUS_NONE;
}

static void invalidate(struct CUstream_st *s)
{
    if (s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        s->cap = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

/* Work on the legacy stream implicitly joins every blocking stream; when one
 * of them is capturing, that join breaks the capture. */
static bool legacy_breaks_capture_locked(int dev, bool do_invalidate)
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
static bool unsafe_call_conflicts_locked(void)
{
    bool hit = false;
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

static bool any_capture_locked(bool do_invalidate)
{
    bool hit = false;
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->live && capture_ongoing(t)) {
            hit = true;
            if (do_invalidate)
                invalidate(t);
        }
    return hit;
}

/* Can new work go to s? */
static CUresult stream_accepts_locked(struct CUstream_st *s)
{
    if (s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (s->kind == SK_LEGACY && legacy_breaks_capture_locked(s->dev, true))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return CUDA_SUCCESS;
}

/*
 * Queue fn(arg) on s. On a capturing stream the work becomes part of the graph
 * and never runs here: drop(arg) then, and on every error, so callers need no
 * cleanup path. *seq gets the job's sequence number (0 when captured).
 */
static CUresult enqueue_locked(struct CUstream_st *s, void (*fn)(void *), void *arg,
                               void (*drop)(void *), uint64_t *seq)
{
    if (seq)
        *seq = 0;
    if (s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (drop)
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
    j->fn = fn;
    j->arg = arg;
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

static void wait_seq_locked(struct CUstream_st *s, uint64_t seq)
{
    while (s->completed < seq)
        pthread_cond_wait(&g_progress, &g_lock);
}

/* Waits for everything submitted so far to the streams selected by pick. */
static CUresult wait_streams_locked(int dev, bool (*pick)(const struct CUstream_st *, int, const void *),
                                    const void *ctx)
{
    size_t n = 0;
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
    for (size_t i = 0; i < k; i++)
        wait_seq_locked(d[i].s, d[i].seq);
    free(d);
    return CUDA_SUCCESS;
}

static bool pick_all(const struct CUstream_st *t, int dev, const void *ctx)
{
    (void)t, (void)dev, (void)ctx;
    return true;
}

static bool pick_legacy_group(const struct CUstream_st *t, int dev, const void *ctx)
{
    (void)dev;
    return t == ctx || t->blocking;
}

static CUresult device_sync_locked(int dev)
{
    return wait_streams_locked(dev, pick_all, NULL);
}

/* Synchronising the legacy stream also waits for the blocking streams it is
 * implicitly ordered with. */
static CUresult stream_sync_locked(struct CUstream_st *s)
{
    if (s->kind == SK_LEGACY)
        return wait_streams_locked(s->dev, pick_legacy_group, s);
    wait_seq_locked(s, s->submitted);
    return CUDA_SUCCESS;
}

static bool stream_idle_locked(struct CUstream_st *s)
{
    if (s->kind != SK_LEGACY)
        return s->completed >= s->submitted;
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->dev == s->dev && (t == s || t->blocking) && t->completed < t->submitted)
            return false;
    return true;
}

/* ------------------------------------------------------------------ */
/* Allocation table (sorted by base so interior pointers can be found)  */

static size_t alloc_lower_bound(uintptr_t p)
{
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g_allocs[mid].base < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct alloc *alloc_exact_locked(uintptr_t p)
{
    size_t i = alloc_lower_bound(p);
    return i < g_nallocs && g_allocs[i].base == p ? &g_allocs[i] : NULL;
}

static struct alloc *alloc_containing_locked(uintptr_t p)
{
    size_t i = alloc_lower_bound(p);
    if (i < g_nallocs && g_allocs[i].base == p)
        return &g_allocs[i];
    if (i == 0)
        return NULL;
    struct alloc *a = &g_allocs[i - 1];
    return p - a->base < a->size ? a : NULL;
}

static bool alloc_insert_locked(struct alloc a)
{
    if (g_nallocs == g_cap_allocs) {
        size_t nc = g_cap_allocs ? g_cap_allocs * 2 : 256;
        struct alloc *na = realloc(g_allocs, nc * sizeof *na);
        if (!na)
            return false;
        g_allocs = na;
        g_cap_allocs = nc;
    }
    size_t i = alloc_lower_bound(a.base);
    memmove(&g_allocs[i + 1], &g_allocs[i], (g_nallocs - i) * sizeof *g_allocs);
    g_allocs[i] = a;
    g_nallocs++;
    return true;
}

/* Removes the entry and uncharges its device; returns the removed record. */
static struct alloc alloc_remove_locked(struct alloc *a)
{
    struct alloc r = *a;
    size_t i = (size_t)(a - g_allocs);
    memmove(&g_allocs[i], &g_allocs[i + 1], (g_nallocs - i - 1) * sizeof *g_allocs);
    g_nallocs--;
    g_dev[r.dev].used -= r.size;
    g_dev[r.dev].live--;
    return r;
}

static void *host_alloc(size_t size, bool *mapped)
{
    if (size >= FC_MMAP_THRESHOLD) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        *mapped = true;
        return p == MAP_FAILED ? NULL : p;
    }
    void *p = NULL;
    *mapped = false;
    return posix_memalign(&p, 4096, size) ? NULL : p;
}

static void host_free(const struct alloc *a)
{
    if (a->mapped)
        munmap((void *)a->base, a->size);
    else
        free((void *)a->base);
}

static CUresult mem_alloc_core(int dev, size_t size, CUdeviceptr *out)
{
    pthread_mutex_lock(&g_lock);
    g_alloc_attempts++;
    if (g_fail_at && g_alloc_attempts >= g_fail_at) {
        g_fail_at = 0;
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct device *d = &g_dev[dev];
    if (size > d->capacity - d->used) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->used += size; /* reserve before dropping the lock */
    d->live++;
    pthread_mutex_unlock(&g_lock);

    struct alloc a = {.size = size, .dev = dev};
    void *p = host_alloc(size, &a.mapped);
    a.base = (uintptr_t)p;

    pthread_mutex_lock(&g_lock);
    if (!p || !alloc_insert_locked(a)) {
        d->used -= size;
        d->live--;
        pthread_mutex_unlock(&g_lock);
        if (p)
            host_free(&a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_lock);
    atomic_fetch_add(&g_cnt_allocs, 1);
    *out = (CUdeviceptr)a.base;
    return CUDA_SUCCESS;
}

/* Executed by a stream worker: the stream-ordered free. */
static void async_free_job(void *arg)
{
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_exact_locked((uintptr_t)arg);
    if (!a || !a->pending_free) { /* gone in a device reset meanwhile */
        pthread_mutex_unlock(&g_lock);
        return;
    }
    struct alloc r = alloc_remove_locked(a);
    pthread_mutex_unlock(&g_lock);
    host_free(&r);
}

/* Device memory accounting for the VMM half of the library (fake_vmm.h). */
bool fc_device_charge(int dev, size_t bytes)
{
    pthread_mutex_lock(&g_lock);
    bool ok = bytes <= g_dev[dev].capacity - g_dev[dev].used;
    if (ok)
        g_dev[dev].used += bytes;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

void fc_device_uncharge(int dev, size_t bytes)
{
    pthread_mutex_lock(&g_lock);
    g_dev[dev].used -= bytes < g_dev[dev].used ? bytes : g_dev[dev].used; /* a reset zeroed it */
    pthread_mutex_unlock(&g_lock);
}

/* ------------------------------------------------------------------ */
/* Init, version, errors                                               */

FC_API CUresult cuInit(unsigned int Flags)
{
    ensure_init();
    if (atomic_load(&g_deinit))
        return CUDA_ERROR_DEINITIALIZED;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (g_ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    atomic_store(&g_inited, 1);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = FAKECUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} k_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not valid in the current state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "capture sequences merged"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture not initiated in this stream"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capture sequence contains an unjoined fork"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency crosses the capture boundary"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "implicit dependency on a capturing stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "capture was not ended in the thread that began it"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult e, const char **p, bool name)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
        if (k_errors[i].code == e) {
            *p = name ? k_errors[i].name : k_errors[i].text;
            return CUDA_SUCCESS;
        }
    *p = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, false);
}

FC_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, true);
}

FC_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    (void)pExportTableId;
    if (ppExportTable)
        *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ */
/* Devices and contexts                                                */

static CUresult check_dev(CUdevice dev)
{
    return dev >= 0 && dev < g_ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

FC_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetCount(int *count)
{
    ENTER();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = g_ndev;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = g_dev[dev].capacity;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    g_dev[dev].primary_refs++;
    pthread_mutex_unlock(&g_lock);
    *pctx = &g_dev[dev].primary;
    return CUDA_SUCCESS;
}

/* Tears down what a real primary context owns: allocations and streams.
 * Called with the lock held; returns with it held. */
static void device_reset_locked(int dev)
{
    device_sync_locked(dev);
    fc_vmm_device_reset(dev);
    for (struct CUstream_st *t = g_all_streams; t; t = t->all_next)
        if (t->live && t->dev == dev && t->kind == SK_CREATED)
            stream_retire_locked(t);
    size_t keep = 0;
    struct alloc *gone = NULL;
    size_t ngone = 0;
    for (size_t i = 0; i < g_nallocs; i++)
        if (g_allocs[i].dev == dev)
            ngone++;
    if (ngone)
        gone = malloc(ngone * sizeof *gone);
    ngone = 0;
    for (size_t i = 0; i < g_nallocs; i++) {
        if (g_allocs[i].dev == dev) {
            if (gone)
                gone[ngone++] = g_allocs[i];
        } else {
            g_allocs[keep++] = g_allocs[i];
        }
    }
    g_nallocs = keep;
    g_dev[dev].used = 0;
    g_dev[dev].live = 0;
    g_dev[dev].primary_refs = 0;
    pthread_mutex_unlock(&g_lock);
    for (size_t i = 0; i < ngone; i++)
        host_free(&gone[i]);
    free(gone);
    pthread_mutex_lock(&g_lock);
}

/* Dropping the last reference destroys the primary context with everything
 * in it, as the real driver does. */
FC_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER();
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    CUresult r = CUDA_SUCCESS;
    if (g_dev[dev].primary_refs <= 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--g_dev[dev].primary_refs == 0)
        device_reset_locked(dev);
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    ENTER();
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    device_reset_locked(dev);
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER();
    (void)flags;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (tls_depth >= FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = FC_CTX_MAGIC;
    c->dev = dev;
    pthread_mutex_lock(&g_lock);
    c->next = g_created_ctxs;
    g_created_ctxs = c;
    pthread_mutex_unlock(&g_lock);
    tls_ctx[tls_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

/* The object stays on g_created_ctxs (marked dead) because other threads may
 * still have it on their stacks. */
FC_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    bool ok = ctx && valid_ctx_locked(ctx) && !ctx->primary;
    if (ok)
        ctx->dead = true;
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (current_ctx() == ctx)
        tls_depth--;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current_ctx();
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    ENTER();
    if (!ctx) {
        if (tls_depth > 0)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&g_lock);
    bool ok = valid_ctx_locked(ctx);
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth == 0)
        tls_depth = 1;
    tls_ctx[tls_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTER();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&g_lock);
    bool ok = valid_ctx_locked(ctx);
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth >= FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_ctx[tls_depth++] = ctx;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    ENTER();
    if (tls_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = tls_ctx[--tls_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetDevice(CUdevice *device)
{
    ENTER();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    *device = dev;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSynchronize(void)
{
    ENTER();
    atomic_fetch_add(&g_cnt_sync, 1);
    atomic_fetch_add(&g_cnt_ctx_sync, 1);
    int dev;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    if (any_capture_locked(true))
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
        r = device_sync_locked(dev);
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */

static CUresult sync_alloc_checks(CUdeviceptr *dptr, size_t bytesize, int *dev)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_ctx(dev);
    if (r)
        return r;
    if (bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    bool conflict = unsafe_call_conflicts_locked();
    pthread_mutex_unlock(&g_lock);
    return conflict ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

FC_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER();
    int dev;
    CUresult r = sync_alloc_checks(dptr, bytesize, &dev);
    return r ? r : mem_alloc_core(dev, bytesize, dptr);
}

FC_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    ENTER();
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = sync_alloc_checks(dptr, bytesize, &dev);
    return r ? r : mem_alloc_core(dev, bytesize, dptr);
}

FC_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes)
{
    ENTER();
    if (!pPitch || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (WidthInBytes == 0 || Height == 0 || WidthInBytes > SIZE_MAX - 511)
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int dev;
    CUresult r = sync_alloc_checks(dptr, pitch * Height, &dev);
    if (!r)
        r = mem_alloc_core(dev, pitch * Height, dptr);
    if (!r)
        *pPitch = pitch;
    return r;
}

FC_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER();
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_exact_locked((uintptr_t)dptr);
    if (!a || a->pending_free) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (unsafe_call_conflicts_locked()) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    /* Claim it so a racing free fails, then let in-flight work that may
     * still write the buffer finish before the host memory goes away. */
    a->pending_free = true;
    int dev = a->dev;
    atomic_fetch_add(&g_cnt_frees, 1);
    device_sync_locked(dev);
    a = alloc_exact_locked((uintptr_t)dptr);
    struct alloc gone = {0};
    if (a)
        gone = alloc_remove_locked(a);
    pthread_mutex_unlock(&g_lock);
    if (gone.base)
        host_free(&gone);
    return CUDA_SUCCESS;
}

static CUresult mem_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream h, int per_thread)
{
    ENTER();
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (!r)
        r = stream_accepts_locked(s);
    int dev = r ? 0 : s->dev;
    pthread_mutex_unlock(&g_lock);
    return r ? r : mem_alloc_core(dev, bytesize, dptr);
}

FC_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return mem_alloc_async(dptr, bytesize, hStream, 0);
}

FC_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return mem_alloc_async(dptr, bytesize, hStream, 1);
}

static CUresult mem_free_async(CUdeviceptr dptr, CUstream h, int per_thread)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (r)
        goto out;
    struct alloc *a = alloc_exact_locked((uintptr_t)dptr);
    if (!a || a->pending_free) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    uint64_t seq;
    r = enqueue_locked(s, async_free_job, (void *)(uintptr_t)dptr, NULL, &seq);
    if (r)
        goto out;
    /* A captured free only runs when the graph does, i.e. never here: the
     * allocation stays live. */
    if (seq)
        a->pending_free = true;
    atomic_fetch_add(&g_cnt_frees, 1);
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return mem_free_async(dptr, hStream, 0);
}

FC_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return mem_free_async(dptr, hStream, 1);
}

FC_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    ENTER();
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = need_ctx(&dev);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    *free_bytes = g_dev[dev].capacity - g_dev[dev].used;
    *total = g_dev[dev].capacity;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    ENTER();
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_containing_locked((uintptr_t)dptr);
    if (a) {
        if (pbase)
            *pbase = a->base;
        if (psize)
            *psize = a->size;
    }
    pthread_mutex_unlock(&g_lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* Handle layout: magic, base, device, size. Opaque to real code; decodable
 * by tests through fakecu_ipc_handle_base. */
static const char k_ipc_magic[8] = {'F', 'K', 'C', 'U', 'I', 'P', 'C', '1'};

FC_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    ENTER();
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_ctx(NULL);
    if (r)
        return r;
    pthread_mutex_lock(&g_lock);
    struct alloc *a = alloc_containing_locked((uintptr_t)dptr);
    struct alloc copy = a ? *a : (struct alloc){0};
    pthread_mutex_unlock(&g_lock);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    memset(pHandle, 0, sizeof *pHandle);
    uint64_t base = copy.base, size = copy.size;
    int32_t dev = copy.dev;
    memcpy(pHandle->reserved, k_ipc_magic, 8);
    memcpy(pHandle->reserved + 8, &base, 8);
    memcpy(pHandle->reserved + 16, &dev, 4);
    memcpy(pHandle->reserved + 24, &size, 8);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Streams, capture, host functions                                    */

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
    pthread_mutex_unlock(&g_lock);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = s;
    return CUDA_SUCCESS;
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

FC_API CUresult cuStreamQuery(CUstream hStream)
{
    return stream_query(hStream, 0);
}

FC_API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    return stream_query(hStream, 1);
}

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

static CUresult stream_begin_capture(CUstream h, CUstreamCaptureMode mode, int per_thread)
{
    ENTER();
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct CUstream_st *s;
    CUresult r = resolve_stream_locked(h, per_thread, &s);
    if (r)
        goto out;
    if (s->kind == SK_LEGACY) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (capture_ongoing(s)) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        s->cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->cap_mode = mode;
        s->cap_thread = pthread_self();
    }
out:
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return stream_begin_capture(hStream, mode, 0);
}

FC_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return stream_begin_capture(hStream, mode, 1);
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
        *phGraph = ok ? &g_dummy_graph : NULL;
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
    return event_record(hEvent, hStream, 0);
}

FC_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream, 1);
}

FC_API CUresult cuEventQuery(CUevent hEvent)
{
    ENTER();
    pthread_mutex_lock(&g_lock);
    struct CUevent_st *e = event_find_locked(hEvent);
    CUresult r;
    if (!e)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (e->captured)
        r = CUDA_ERROR_CAPTURED_EVENT;
    else
        r = !e->s || e->s->completed >= e->seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&g_lock);
    return r;
}

FC_API CUresult cuEventSynchronize(CUevent hEvent)
{
    ENTER();
    atomic_fetch_add(&g_cnt_sync, 1);
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

/* ------------------------------------------------------------------ */
/* cuGetProcAddress                                                    */

struct proc_entry {
    const char *name;
    int since; /* first CUDA version whose ABI this entry point matches */
    void *fn;
    void *fn_ptsz;
};

#define P(name, since, fn) {name, since, (void *)fn, NULL}
#define PT(name, since, fn, fnp) {name, since, (void *)fn, (void *)fnp}

static const struct proc_entry k_procs[] = {
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuGetExportTable", 3000, cuGetExportTable),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    P("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    PT("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    PT("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    P("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    P("cuMemAddressReserve", 10020, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, cuMemAddressFree),
    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuMemMap", 10020, cuMemMap),
    P("cuMemUnmap", 10020, cuMemUnmap),
    P("cuMemSetAccess", 10020, cuMemSetAccess),
    P("cuMemGetAccess", 10020, cuMemGetAccess),
    P("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    P("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    P("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    PT("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    PT("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    P("cuEventCreate", 2000, cuEventCreate),
    PT("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    P("cuEventQuery", 2000, cuEventQuery),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
};

static void count_procaddress(const char *symbol)
{
    pthread_mutex_lock(&g_lock);
    g_pa_total++;
    for (size_t i = 0; i < g_npa; i++)
        if (!strcmp(g_pa[i].name, symbol)) {
            g_pa[i].n++;
            goto out;
        }
    struct pa_count *n = realloc(g_pa, (g_npa + 1) * sizeof *n);
    if (n) {
        g_pa = n;
        g_pa[g_npa].name = strdup(symbol);
        g_pa[g_npa].n = 1;
        if (g_pa[g_npa].name)
            g_npa++;
    }
out:
    pthread_mutex_unlock(&g_lock);
}

static CUresult proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status)
{
    ensure_init();
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    count_procaddress(symbol);
    *pfn = NULL;
    if (cudaVersion > FAKECUDA_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!strcmp(symbol, "cuGetProcAddress")) {
        if (cudaVersion >= 12000) {
            *pfn = (void *)cuGetProcAddress_v2;
            st = CU_GET_PROC_ADDRESS_SUCCESS;
        } else if (cudaVersion >= 11030) {
            *pfn = (void *)cuGetProcAddress;
            st = CU_GET_PROC_ADDRESS_SUCCESS;
        } else {
            st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        }
    } else {
        for (size_t i = 0; i < sizeof k_procs / sizeof k_procs[0]; i++) {
            const struct proc_entry *e = &k_procs[i];
            if (strcmp(e->name, symbol))
                continue;
            if (cudaVersion < e->since) {
                st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            } else {
                *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && e->fn_ptsz ? e->fn_ptsz : e->fn;
                st = CU_GET_PROC_ADDRESS_SUCCESS;
            }
            break;
        }
    }
    if (status)
        *status = st;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    return proc_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* The 11.3 ABI has no status argument; a caller passing one anyway is harmless
 * because it is never read. */
FC_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return proc_lookup(symbol, pfn, cudaVersion, flags, NULL);
}

/* ------------------------------------------------------------------ */
/* Test-only API                                                       */

FC_API unsigned long long fakecu_device_allocs(void)
{
    return atomic_load(&g_cnt_allocs);
}

FC_API unsigned long long fakecu_device_frees(void)
{
    return atomic_load(&g_cnt_frees);
}

FC_API size_t fakecu_used_bytes(int dev)
{
    ensure_init();
    if (dev < 0 || dev >= FC_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&g_lock);
    size_t v = g_dev[dev].used;
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API size_t fakecu_live_allocs(int dev)
{
    ensure_init();
    if (dev < 0 || dev >= FC_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&g_lock);
    size_t v = g_dev[dev].live;
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API unsigned long long fakecu_sync_calls(void)
{
    return atomic_load(&g_cnt_sync);
}

FC_API unsigned long long fakecu_ctx_sync_calls(void)
{
    return atomic_load(&g_cnt_ctx_sync);
}

FC_API void fakecu_fail_alloc_at(unsigned long long n)
{
    ensure_init();
    pthread_mutex_lock(&g_lock);
    g_fail_at = n ? g_alloc_attempts + n : 0;
    pthread_mutex_unlock(&g_lock);
}

FC_API unsigned long long fakecu_procaddress_calls(const char *name)
{
    unsigned long long v = 0;
    pthread_mutex_lock(&g_lock);
    if (!name)
        v = g_pa_total;
    else
        for (size_t i = 0; i < g_npa; i++)
            if (!strcmp(g_pa[i].name, name))
                v = g_pa[i].n;
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API void *fakecu_ipc_handle_base(const void *handle, int *dev)
{
    if (!handle || memcmp(handle, k_ipc_magic, 8))
        return NULL;
    uint64_t base;
    int32_t d;
    memcpy(&base, (const char *)handle + 8, 8);
    memcpy(&d, (const char *)handle + 16, 4);
    if (dev)
        *dev = d;
    return (void *)(uintptr_t)base;
}

FC_API int fakecu_capturing_any(void)
{
    pthread_mutex_lock(&g_lock);
    int v = any_capture_locked(false);
    pthread_mutex_unlock(&g_lock);
    return v;
}

FC_API void fakecu_reset_counters(void)
{
    atomic_store(&g_cnt_allocs, 0);
    atomic_store(&g_cnt_frees, 0);
    atomic_store(&g_cnt_sync, 0);
    atomic_store(&g_cnt_ctx_sync, 0);
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_npa; i++)
        g_pa[i].n = 0;
    g_pa_total = 0;
    pthread_mutex_unlock(&g_lock);
}
