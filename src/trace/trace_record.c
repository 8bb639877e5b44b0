// SPDX-License-Identifier: MIT
// The trace recorder (docs/trace-format.md).
//
// Hot path: the observer runs under the allocator lock, so it must not take another lock or
// make a system call. Each thread appends to its own chunk of records and publishes the count
// with a release store; only when a chunk is full does it take the queue lock, once per 1024
// events. One writer thread owns the file and every chunk's `flushed` mark: it writes full
// chunks as they are queued and, every 100 ms, whatever the threads have published so far.
// Because only the writer writes, a record reaches the file whole or (killed mid-write) as a
// short tail that the reader recognises and leaves out.
//
// Order: threads flush independently, so the file is not in event order. Each record carries
// its device's event number, taken under that device's allocator lock, which restores the exact
// order on reading. Time is informational: the TSC where it is invariant (half the cost of
// clock_gettime on the VMs measured, and still most of an event's cost), converted to
// nanoseconds by the writer.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "path_template.h"
#include "trace_bin.h"
#include "trace_record.h"
#include "trace_record_impl.h"

cci__rec_hot cci__hot;
cci__rec_state cci__rec = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .qlock = PTHREAD_MUTEX_INITIALIZER,
    .reglock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
};

// initial-exec: one pointer, no __tls_get_addr call on the hot path. The library is preloaded
// (static TLS is reserved at startup), never dlopen'ed late.
static __thread tbuf *tls_buf __attribute__((tls_model("initial-exec")));
static pthread_key_t tbuf_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;

// ---- buffers (recording threads) -----------------------------------------------------------

// Zeroed memory on a cache line of its own: each device's event counter is written on every
// event by whichever thread holds that device's lock, and would bounce between cores if two
// devices' counters (or a thread's buffer pointer) shared a line.
static void *alloc_line(size_t size)
{
    size_t rounded = (size + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (p)
        memset(p, 0, rounded);
    return p;
}

static chunk *chunk_get(void)
{
    pthread_mutex_lock(&cci__rec.qlock);
    chunk *c = cci__rec.freelist;
    if (c)
        cci__rec.freelist = c->next;
    pthread_mutex_unlock(&cci__rec.qlock);
    if (!c && (c = malloc(sizeof *c)) != NULL) {
        atomic_init(&c->n, 0);
        c->flushed = 0;
    }
    return c;
}

static void enqueue(chunk *c)
{
    pthread_mutex_lock(&cci__rec.qlock);
    c->next = NULL;
    if (cci__rec.qtail)
        cci__rec.qtail->next = c;
    else
        cci__rec.qhead = c;
    cci__rec.qtail = c;
    // A wake-up is a system call and a context switch: batch them.
    if (++cci__rec.qlen >= WAKE_CHUNKS)
        pthread_cond_signal(&cci__rec.qcond);
    pthread_mutex_unlock(&cci__rec.qlock);
}

// A thread's chunk still holds records when it exits: hand them to the writer.
static void tbuf_exit(void *arg)
{
    tbuf *t = arg, **pp;
    if (tls_buf == t)
        tls_buf = NULL;
    pthread_mutex_lock(&cci__rec.reglock);
    for (pp = &cci__rec.tbufs; *pp && *pp != t; pp = &(*pp)->next)
        ;
    int live = *pp != NULL;
    if (live)
        *pp = t->next;
    pthread_mutex_unlock(&cci__rec.reglock);
    if (!live)
        return;  // a past session's buffer: the retired list owns it
    enqueue(atomic_load(&t->cur));
    free(t);
}

static void make_key(void) { pthread_key_create(&tbuf_key, tbuf_exit); }

static tbuf *tbuf_new(void)
{
    tbuf *t = alloc_line(sizeof *t);
    chunk *c = t ? chunk_get() : NULL;
    if (!c) {
        free(t);
        return NULL;
    }
    atomic_init(&t->cur, c);
    t->gen = cci__hot.gen;
    pthread_once(&key_once, make_key);
    pthread_setspecific(tbuf_key, t);
    pthread_mutex_lock(&cci__rec.reglock);
    t->next = cci__rec.tbufs;
    cci__rec.tbufs = t;
    pthread_mutex_unlock(&cci__rec.reglock);
    tls_buf = t;
    return t;
}

// The new chunk is found before the full one is queued: if there is none, the full one stays
// current (the writer's scan still writes it) and events are dropped until memory returns.
static chunk *rotate(tbuf *t, chunk *full)
{
    chunk *c = chunk_get();
    if (!c)
        return NULL;
    atomic_store_explicit(&t->cur, c, memory_order_release);
    enqueue(full);
    return c;
}

// PREFETCHW (a NOP where unsupported) lets the record's cache line arrive writable ahead of
// time: the writer thread read it last, and the allocator's unlock right after the observer
// would otherwise wait for the ownership transfer.
#if HAVE_TSC
#define PREFETCH_TARGET __attribute__((target("prfchw")))
#else
#define PREFETCH_TARGET
#endif
#define PREFETCH_AHEAD 16u  // records

PREFETCH_TARGET static inline void append(rec_dev *d, unsigned action, uint64_t addr, uint64_t stream,
                                          uint64_t size, uint64_t requested)
{
    uint64_t seq = d->seq++;  // consumed even when dropped: the reader reports the gap
    tbuf *t = tls_buf;
    if (__builtin_expect(!t || t->gen != cci__hot.gen, 0) && !(t = tbuf_new()))
        goto drop;
    chunk *c = atomic_load_explicit(&t->cur, memory_order_relaxed);
    uint32_t n = atomic_load_explicit(&c->n, memory_order_relaxed);
    if (__builtin_expect(n == CHUNK_RECS, 0)) {
        if (!(c = rotate(t, c)))
            goto drop;
        n = atomic_load_explicit(&c->n, memory_order_relaxed);
    }
    uint64_t *w = c->w[n];
    w[0] = cci__now_raw();
    w[1] = seq;
    w[2] = addr;
    w[3] = stream;
    w[4] = size;
    w[5] = (requested > CCI_TBIN_REQUEST_MAX ? CCI_TBIN_REQUEST_MAX : requested) | (uint64_t)action << 48 |
           (uint64_t)d->device << 56;
    atomic_store_explicit(&c->n, n + 1, memory_order_release);
    if (n + PREFETCH_AHEAD < CHUNK_RECS)
        __builtin_prefetch(c->w[n + PREFETCH_AHEAD], 1, 3);
    return;
drop:
    atomic_fetch_add_explicit(&cci__rec.dropped, 1, memory_order_relaxed);
}

PREFETCH_TARGET static void on_event(void *ud, const cci_event *ev)
{
    rec_dev *d = ud;
    if (!atomic_load_explicit(&cci__hot.on, memory_order_acquire) || d->gen != cci__hot.gen)
        return;
    append(d, (unsigned)ev->kind, ev->addr, ev->stream, ev->size, ev->requested);
}

// ---- control ------------------------------------------------------------------------------

// The process's rank for %r and the header, given by whoever read the environment (the preload's
// settings): the recorder reads no environment of its own. -1 = none (0 in file names).
static int process_rank = -1;

void cci_trace_set_rank(int rank)
{
    process_rank = rank;
}

static void free_chunk_list(chunk *c)
{
    while (c) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
}

int cci_trace_start(const char *pattern, const char *config_string)
{
    pthread_mutex_lock(&cci__rec.lock);
    int rc = -1;
    if (atomic_load(&cci__hot.on) || cci__rec.writer_running) {
        cci_log(CCI_LOG_ERROR, "CCI_TRACE: already recording to %s", cci__rec.path);
        goto out;
    }
    pthread_once(&cond_once, cci__init_cond);
    int rank = process_rank;
    char host[128];
    cci_path_vars vars = cci_path_vars_here(rank, host, sizeof host);
    if (!pattern || cci_path_expand(pattern, &vars, cci__rec.path, sizeof cci__rec.path) != 0) {
        cci_log(CCI_LOG_ERROR,
                "CCI_TRACE: '%s' is not a usable file name (empty or too long; placeholders: %%p pid, "
                "%%r rank, %%h host, %%%% percent)", pattern ? pattern : "");
        cci__rec.path[0] = 0;
        goto out;
    }
    const char *conf = config_string ? config_string : "";
    size_t clen = strnlen(conf, 65536);
    cci_tbin_header h = {.version = CCI_TBIN_VERSION, .record_size = CCI_TBIN_RECORD_SIZE,
                         .pid = (uint32_t)getpid(), .rank = rank, .config_len = (uint32_t)clen};
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    h.start_realtime_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    size_t hsize = cci_tbin_header_size(clen);
    uint8_t *hdr = malloc(hsize), *stage = malloc(CHUNK_RECS * CCI_TBIN_RECORD_SIZE);
    if (!hdr || !stage) {
        free(hdr);
        free(stage);
        cci_log(CCI_LOG_ERROR, "CCI_TRACE: out of memory");
        goto out;
    }
    cci_tbin_encode_header(hdr, &h, conf);
    cci__rec.fd = open(cci__rec.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (cci__rec.fd < 0 || cci__write_all(cci__rec.fd, hdr, hsize) != 0) {
        cci_log(CCI_LOG_ERROR, "CCI_TRACE: cannot write %s: %s", cci__rec.path, strerror(errno));
        if (cci__rec.fd >= 0)
            close(cci__rec.fd);
        cci__rec.fd = -1;
        free(hdr);
        free(stage);
        goto out;
    }
    free(hdr);

    // Buffers of an earlier session in this process: no thread appends to them any more.
    for (tbuf *t = cci__rec.retired; t; t = t->next) {
        free(atomic_load(&t->cur));
        atomic_store(&t->cur, NULL);
    }
    free_chunk_list(cci__rec.qhead);
    cci__rec.qhead = cci__rec.qtail = NULL;
    cci__rec.qlen = 0;
    // First-touch page faults of fresh chunks would otherwise land under an allocator lock.
    unsigned have = 0;
    for (chunk *c = cci__rec.freelist; c; c = c->next)
        have++;
    for (unsigned i = have; i < POOL_CHUNKS; i++) {
        chunk *c = malloc(sizeof *c);
        if (!c)
            break;
        memset(c, 0, sizeof *c);
        c->next = cci__rec.freelist;
        cci__rec.freelist = c;
    }
    cci__hot.gen++;
    cci__rec.stopping = 0;
    cci__rec.capacity_set = 0;
    atomic_store(&cci__rec.written, 0);
    atomic_store(&cci__rec.write_dropped, 0);
    cci__rec.write_warned = 0;
    atomic_store(&cci__rec.dropped, 0);
    cci__hot.use_tsc = cci__tsc_invariant();
    cci__rec.mono0 = cci__mono_ns();
    cci__rec.raw0 = cci__now_raw();

    // The writer must never run a signal handler of the program's.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&cci__rec.writer, NULL, cci__writer_main, stage);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        cci_log(CCI_LOG_ERROR, "CCI_TRACE: cannot start the writer thread: %s", strerror(prc));
        free(stage);
        close(cci__rec.fd);
        cci__rec.fd = -1;
        goto out;
    }
    cci__rec.writer_running = 1;
    atomic_store_explicit(&cci__hot.on, 1, memory_order_release);
    rc = 0;
out:
    pthread_mutex_unlock(&cci__rec.lock);
    return rc;
}

void cci_trace_attach(cci_allocator *a, size_t capacity)
{
    pthread_mutex_lock(&cci__rec.lock);
    int device = cci_allocator_device(a);
    if (!atomic_load(&cci__hot.on)) {
        pthread_mutex_unlock(&cci__rec.lock);
        return;
    }
    rec_dev *d = NULL;
    if (device < 0 || device >= CCI_TBIN_MAX_DEVICES || !(d = alloc_line(sizeof *d))) {
        cci_log(CCI_LOG_WARNING, "CCI_TRACE: device %d is not recorded (%s)", device,
                d ? "out of memory" : "devices 0-255 only");
        pthread_mutex_unlock(&cci__rec.lock);
        return;
    }
    d->device = (uint8_t)device;
    d->next = cci__rec.devs;
    cci__rec.devs = d;
    d->gen = cci__hot.gen;
    if (!cci__rec.capacity_set && capacity) {
        uint8_t b[8];
        cci_tbin_put_u64(b, capacity);
        if (pwrite(cci__rec.fd, b, 8, CCI_TBIN_CAPACITY_OFFSET) == 8)
            cci__rec.capacity_set = 1;
    }
    append(d, CCI_TBIN_DEVICE, 0, 0, capacity, 0);  // before any event: the observer is not attached yet
    if (cci_allocator_add_observer(a, on_event, d) != 0)
        cci_log(CCI_LOG_WARNING, "CCI_TRACE: device %d is not recorded (no free observer slot)", device);
    pthread_mutex_unlock(&cci__rec.lock);
}

void cci_trace_stop(void)
{
    pthread_mutex_lock(&cci__rec.lock);
    if (!cci__rec.writer_running) {
        pthread_mutex_unlock(&cci__rec.lock);
        return;
    }
    atomic_store(&cci__hot.on, 0);
    pthread_mutex_lock(&cci__rec.qlock);
    cci__rec.stopping = 1;
    pthread_cond_signal(&cci__rec.qcond);
    pthread_mutex_unlock(&cci__rec.qlock);
    pthread_join(cci__rec.writer, NULL);
    cci__rec.writer_running = 0;
    if (close(cci__rec.fd) != 0 && !cci__rec.write_warned++)
        cci_log(CCI_LOG_WARNING, "CCI_TRACE: closing %s failed: %s", cci__rec.path, strerror(errno));
    cci__rec.fd = -1;
    pthread_mutex_lock(&cci__rec.reglock);
    tbuf **tail = &cci__rec.retired;
    while (*tail)
        tail = &(*tail)->next;
    *tail = cci__rec.tbufs;
    cci__rec.tbufs = NULL;
    pthread_mutex_unlock(&cci__rec.reglock);
    uint64_t lost = atomic_load(&cci__rec.write_dropped) + atomic_load(&cci__rec.dropped);
    cci_log(CCI_LOG_INFO, "CCI_TRACE: %llu events written to %s%s",
            (unsigned long long)atomic_load(&cci__rec.written), cci__rec.path,
            lost ? " (some events were lost: see the reader's 'missing events')" : "");
    pthread_mutex_unlock(&cci__rec.lock);
}

void cci_trace_fork_child(void)
{
    // Locks may be held by parent threads that do not exist here; nothing of theirs is touched.
    pthread_mutex_init(&cci__rec.lock, NULL);
    pthread_mutex_init(&cci__rec.qlock, NULL);
    pthread_mutex_init(&cci__rec.reglock, NULL);
    cci__init_cond();
    atomic_store(&cci__hot.on, 0);
    if (cci__rec.fd >= 0)
        close(cci__rec.fd);
    cci__rec.fd = -1;
    cci__rec.writer_running = 0;
    cci__rec.qhead = cci__rec.qtail = cci__rec.freelist = NULL;
    cci__rec.tbufs = cci__rec.retired = NULL;
    cci__hot.gen++;
    tls_buf = NULL;
}

int cci_trace_active(void) { return atomic_load(&cci__hot.on); }
const char *cci_trace_path(void) { return cci__rec.path; }

void cci_trace_counts(uint64_t *recorded, uint64_t *dropped)
{
    pthread_mutex_lock(&cci__rec.lock);
    if (recorded)
        *recorded = atomic_load(&cci__rec.written);
    if (dropped)
        *dropped = atomic_load(&cci__rec.write_dropped) + atomic_load(&cci__rec.dropped);
    pthread_mutex_unlock(&cci__rec.lock);
}
