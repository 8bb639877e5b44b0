// SPDX-License-Identifier: MIT
// The pinned host cache (host_cache.h says what and why). One lock guards it all: pinned
// allocations are rare next to device ones (a few per batch), and a miss costs milliseconds of
// page locking anyway.
//
// A freed buffer goes to the queue of its (size class, flags) with the fence recorded at its free;
// an allocation takes the oldest buffer of its queue whose fence has passed (fences are recorded
// in order, so asking the oldest few is enough). With pinned_use_background_threads the fences
// are asked by a thread of ours instead, and the queues hold only buffers found passed.
//
// The reserve segment (pinned_reserve_segment_size_mb) is pinned at the first pinned allocation;
// requests of flags 0 up to HOST_RESERVE_SMALL are carved from it end to end and then cached like
// any buffer. A carved buffer is no allocation of CUDA's own, so the questions CUDA answers only
// for an allocation's start (flags, device pointer) are asked about the segment instead.
static _Thread_local int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (hash_oom = 1)

#include "host_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#include "backend.h"
#include "clock.h"
#include "config.h"
#include "cuda_context.h"
#include "fence.h"
#include "forwarding.h"
#include "levels.h"
#include "log.h"
#include "real.h"
#include "state.h"
#include "stats_list.h"
#include "host_cache_real.h"

// Smallest size class: below it the class table would only grow, not the reuse.
#define HOST_MIN_CLASS 64
#define HOST_CLASSES 64
// Queued buffers of a class whose fences an allocation asks before it pins new memory.
#define HOST_LOOK_MAX 4
// Requests carved from the reserve segment: PyTorch's small-pool bound for device blocks.
#define HOST_RESERVE_SMALL ((size_t)1 << 20)
// The background thread's pause while the oldest fence is pending.
#define HOST_POLL_NS 50000

enum { ORIGIN_ALLOC, ORIGIN_REGISTER, ORIGIN_RESERVE };

typedef struct host_block {
    void *ptr;
    size_t size;       // the size class
    unsigned flags;    // as the program asked (cudaHostAlloc's bits)
    int origin;
    int level;         // the API level it was pinned through (its real free goes there too)
    int device;        // the current device when pinned (driver-level frees push its context)
    int in_use;
    int gone;          // its device's context was reset: the memory went with it (never reused)
    cci_fence fence;   // recorded at the last free; 0 once known passed (or none needed)
    struct host_block *next;
    UT_hash_handle hh;
} host_block;

typedef struct host_queue {
    host_block *head, *tail;
} host_queue;

static struct {
    pthread_mutex_t lock;
    int no_fences, register_path, background, exited;
    unsigned threads;
    size_t reserve_size;
    host_block *by_ptr;
    host_queue ready[HOST_CLASSES][CCI_HOST_ALLOC_FLAGS + 1];
    host_queue pending;   // background mode: freed, fence not yet found passed
    void *seg;            // the reserve segment
    size_t seg_used;
    int seg_level, seg_device;
    size_t seg_carved;    // buffers carved from it (each lives as long as the segment)
    cci_stats st;         // the pinned_* fields only
    pthread_cond_t wake;
    pthread_t thread;
    int thread_started, stop, atexit_done;
} hc = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static _Atomic int used;
// Whether the cache serves: set at start-up (before the layer's mode is published) and in a fork
// child; read on every pinned call without the lock.
static _Atomic int cache_on;

static int class_of(size_t size, size_t *cls)
{
    if (size > ((size_t)1 << 62))
        return -1;
    size_t c = HOST_MIN_CLASS;
    int i = 6;
    while (c < size) {
        c <<= 1;
        i++;
    }
    *cls = c;
    return i;
}

static void queue_push(host_queue *q, host_block *b)
{
    b->next = NULL;
    if (q->tail)
        q->tail->next = b;
    else
        q->head = b;
    q->tail = b;
}

static void queue_unlink(host_queue *q, host_block *prev, host_block *b)
{
    if (prev)
        prev->next = b->next;
    else
        q->head = b->next;
    if (q->tail == b)
        q->tail = prev;
    b->next = NULL;
}

// ---- fences -----------------------------------------------------------------------------------

static int device_count(void)
{
    static _Atomic int n = -1;
    int v = atomic_load_explicit(&n, memory_order_relaxed);
    if (v < 0) {
        const cci_real_driver *t = cci_real_drv();
        v = 0;
        if (!t->cuDeviceGetCount || t->cuDeviceGetCount(&v) != CUDA_SUCCESS)
            v = 0;
        v = v > CCI_PL_MAX_DEVICES ? CCI_PL_MAX_DEVICES : v;
        atomic_store_explicit(&n, v, memory_order_relaxed);
    }
    return v;
}

// A fence covers the devices whose primary context we hold: every device the program works on
// (its primary context active) must be among them before the fence is recorded, or a copy there
// would be missed. One atomic load a device once all are held.
static void hold_active_devices(void)
{
    const cci_real_driver *t = cci_real_drv();
    for (int d = 0, n = device_count(); d < n; d++) {
        if (cci_cuda_backend_primary_peek(d))
            continue;
        unsigned flags = 0;
        int active = 0;
        if (t->cuDevicePrimaryCtxGetState && t->cuDevicePrimaryCtxGetState(d, &flags, &active) == CUDA_SUCCESS &&
            active)
            (void)cci_cuda_backend_primary(d, 1);
    }
}

// A fence over every stream of every device, or 0 when none could be recorded (a capture may be
// underway, no events): the buffer is then given back to CUDA, whose free waits for the device.
static cci_fence record_fence(void)
{
    hold_active_devices();
    cci_fence f = 0;
    if (cci_cuda_fence_ops.record(NULL, 0, CCI_STREAM_ALL, &f) != CCI_OK)
        return 0;
    return f;
}

// 1 when b's fence has passed (b->fence is then 0), 0 pending, -1 unknown (an error).
static int fence_passed(host_block *b)
{
    if (!b->fence)
        return 1;
    int r = cci_cuda_fence_ops.query(NULL, 0, b->fence);
    if (r == 1) {
        cci_cuda_fence_ops.release(NULL, 0, b->fence);
        b->fence = 0;
        return 1;
    }
    return r == 0 ? 0 : -1;
}

// For the exit and for a query that failed: blocks until b's fence has passed. 0, or -1.
static int fence_wait(host_block *b)
{
    if (!b->fence)
        return 0;
    int r = cci_cuda_fence_ops.wait(NULL, 0, b->fence);
    cci_cuda_fence_ops.release(NULL, 0, b->fence);
    b->fence = 0;
    return r == CCI_OK ? 0 : -1;
}

// ---- giving buffers back ------------------------------------------------------------------

// Forgets a block whose memory went with its device's context (no CUDA call). Lock held; b is on
// no list.
static void forget_gone(host_block *b)
{
    if (b->fence)
        cci_cuda_fence_ops.release(NULL, 0, b->fence);
    HASH_DEL(hc.by_ptr, b);
    free(b);
}

// Gives b back to CUDA and forgets it. Lock held. A carved buffer stays with its segment.
static void release_block(host_block *b)
{
    if (b->fence && fence_wait(b) != 0)
        cci_log(CCI_LOG_DEBUG, "pinned cache: a fence could not be waited for; CUDA's free synchronises");
    HASH_DEL(hc.by_ptr, b);
    if (b->origin != ORIGIN_RESERVE) {
        cci_host_real_free(b->level, b->device, b->ptr, b->size, b->origin == ORIGIN_REGISTER);
        hc.st.pinned_host_frees++;
        cci_stat_change(&hc.st.pinned_reserved_bytes, -(int64_t)b->size);
    } else {
        hc.seg_carved--;
    }
    free(b);
}

// Gives back the queued buffers whose fences have passed (`wait`: every queued buffer, after its
// fence), then the reserve segment once nothing is carved from it. Carved buffers go only all at
// once, with the segment: it is carved forward only, so one carved buffer given back alone would
// be bytes lost to the cache while the segment stays. Lock held.
static void release_cached(int wait)
{
    size_t carved_done = 0;
    for (int pass = 0; pass < 2; pass++) {
        // Pass 0: everything but carved buffers (counting those whose work is done); pass 1:
        // the carved buffers, when every one carved is among them.
        if (pass == 1 && !wait && carved_done != hc.seg_carved)
            break;
        for (int c = 0; c < HOST_CLASSES; c++) {
            for (int f = 0; f <= CCI_HOST_ALLOC_FLAGS; f++) {
                host_queue *q = &hc.ready[c][f];
                host_block *prev = NULL, *b = q->head;
                while (b) {
                    host_block *next = b->next;
                    int carved = b->origin == ORIGIN_RESERVE;
                    if (pass == 0 && carved && !wait)
                        carved_done += fence_passed(b) == 1;
                    if (carved == pass && (wait || fence_passed(b) == 1)) {
                        queue_unlink(q, prev, b);
                        cci_stat_change(&hc.st.pinned_cached_bytes, -(int64_t)b->size);
                        release_block(b);
                    } else {
                        prev = b;
                    }
                    b = next;
                }
            }
        }
    }
    if (hc.seg && hc.seg_carved == 0) {
        cci_host_real_free(hc.seg_level, hc.seg_device, hc.seg, hc.reserve_size, 0);
        hc.st.pinned_host_frees++;
        cci_stat_change(&hc.st.pinned_reserved_bytes, -(int64_t)hc.reserve_size);
        hc.st.pinned_reserve_segment_bytes = 0;
        hc.seg = NULL;
        hc.seg_used = 0;
    }
}

// ---- the background thread ------------------------------------------------------------------

static void *reclaimer(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&hc.lock);
    while (!hc.stop) {
        host_block *b = hc.pending.head;
        if (!b) {
            pthread_cond_wait(&hc.wake, &hc.lock);
            continue;
        }
        // Only this thread takes from the pending list: b stays its head while the lock is off.
        cci_fence f = b->fence;
        pthread_mutex_unlock(&hc.lock);
        int r = f ? cci_cuda_fence_ops.query(NULL, 0, f) : 1;
        if (r == 0) {
            struct timespec ts = {0, HOST_POLL_NS};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&hc.lock);
        if (r == 0 && !b->gone)
            continue;
        queue_unlink(&hc.pending, NULL, b);
        if (b->gone) {
            cci_stat_change(&hc.st.pinned_cached_bytes, -(int64_t)b->size);
            forget_gone(b);
            continue;
        }
        if (r == 1 && f) {
            cci_cuda_fence_ops.release(NULL, 0, f);
            b->fence = 0;
            hc.st.pinned_background_reclaims++;
        }
        size_t cls;
        queue_push(&hc.ready[class_of(b->size, &cls)][b->flags], b);  // an error: asked again at reuse
    }
    pthread_mutex_unlock(&hc.lock);
    return NULL;
}

static void stop_reclaimer(void)
{
    pthread_mutex_lock(&hc.lock);
    int started = hc.thread_started;
    hc.stop = 1;
    hc.thread_started = 0;
    pthread_cond_broadcast(&hc.wake);
    pthread_mutex_unlock(&hc.lock);
    if (started)
        pthread_join(hc.thread, NULL);
    // What it left pending goes where the program's threads find it.
    pthread_mutex_lock(&hc.lock);
    while (hc.pending.head) {
        host_block *b = hc.pending.head;
        queue_unlink(&hc.pending, NULL, b);
        size_t cls;
        queue_push(&hc.ready[class_of(b->size, &cls)][b->flags], b);
    }
    pthread_mutex_unlock(&hc.lock);
}

// Registered after the first pinning, so it runs before the runtime's own exit handler (which
// was registered when the runtime started): CUDA still works here, the destructors come later.
static void at_exit_release(void)
{
    stop_reclaimer();
    pthread_mutex_lock(&hc.lock);
    release_cached(1);
    hc.exited = 1;
    pthread_mutex_unlock(&hc.lock);
}

// Lock held. After the first pinning of the process.
static void after_first_pinning(void)
{
    if (hc.atexit_done)
        return;
    hc.atexit_done = 1;
    atexit(at_exit_release);
    if (hc.background && !hc.thread_started && !hc.stop) {
        if (pthread_create(&hc.thread, NULL, reclaimer, NULL) == 0)
            hc.thread_started = 1;
        else
            cci_log(CCI_LOG_WARNING, "pinned cache: no background thread could be started; the "
                    "program's threads ask the fences");
    }
}

// ---- fork ---------------------------------------------------------------------------------------

static void fork_prepare(void)
{
    pthread_mutex_lock(&hc.lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&hc.lock);
}

// CUDA does not work in a fork child, and the background thread is not there: the child passes
// every pinned call through and forgets the parent's buffers without a driver call.
static void fork_child(void)
{
    pthread_mutex_init(&hc.lock, NULL);
    pthread_cond_init(&hc.wake, NULL);
    atomic_store_explicit(&cache_on, 0, memory_order_relaxed);
    hc.thread_started = 0;
    hc.by_ptr = NULL;  // the parent's entries leak in the child: freeing them could call CUDA
    memset(hc.ready, 0, sizeof hc.ready);
    memset(&hc.pending, 0, sizeof hc.pending);
    hc.seg = NULL;
}

void cci_host_cache_start(const cci_settings *s)
{
    const cci_config *c = cci_state_config();
    if (s->bad_pinned_cache[0])
        cci_log(CCI_LOG_WARNING, "CCI_PINNED_CACHE=%s is not 0 or 1; the pinned host cache stays on",
                s->bad_pinned_cache);
    pthread_mutex_lock(&hc.lock);
    atomic_store_explicit(&cache_on, s->pinned_cache, memory_order_relaxed);
    hc.no_fences = (s->debug_unsafe & CCI_DEBUG_UNSAFE_NO_FENCES) != 0;
    hc.register_path = c->pinned_use_cuda_host_register;
    hc.threads = c->pinned_num_register_threads ? c->pinned_num_register_threads : 1;
    hc.background = c->pinned_use_background_threads;
    hc.reserve_size = c->pinned_reserve_segment_size;
    pthread_mutex_unlock(&hc.lock);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

// ---- serving ------------------------------------------------------------------------------------

static int serving(int level)
{
    if (level == CCI_LEVEL_DRIVER && cci_pl_forwarding())
        return 0;  // the runtime's own call on its way down: already handled above
    return cci_pl_serving(level) && atomic_load_explicit(&cache_on, memory_order_relaxed);
}

// A queued buffer of the class whose fence has passed, taken off its queue; NULL when none of
// the oldest few has. Lock held.
static host_block *take_cached(int cls, unsigned flags)
{
    host_queue *q = &hc.ready[cls][flags];
    host_block *prev = NULL, *next;
    int asked = 0;
    for (host_block *b = q->head; b && asked < HOST_LOOK_MAX; b = next, asked++) {
        next = b->next;
        int r = fence_passed(b);
        if (r < 0 && fence_wait(b) != 0) {
            // Neither asked nor waited for: nothing says its work is done. CUDA's own free
            // waits for the device, so it goes back there.
            queue_unlink(q, prev, b);
            cci_stat_change(&hc.st.pinned_cached_bytes, -(int64_t)b->size);
            release_block(b);
            continue;
        }
        if (r != 0) {
            queue_unlink(q, prev, b);
            return b;
        }
        prev = b;
    }
    return NULL;
}

// Carves `size` from the reserve segment, pinning the segment first if needed. Lock held.
static void *carve(int level, size_t size)
{
    if (!hc.seg) {
        void *seg = NULL;
        uint64_t t0 = cci_pl_now_ns();
        if (cci_host_real_alloc(level, &seg, hc.reserve_size, 0) != 0)
            return NULL;
        hc.st.pinned_register_ns += cci_pl_now_ns() - t0;
        hc.st.pinned_host_allocs++;
        cci_stat_change(&hc.st.pinned_reserved_bytes, (int64_t)hc.reserve_size);
        hc.st.pinned_reserve_segment_bytes = hc.reserve_size;
        hc.seg = seg;
        hc.seg_used = 0;
        hc.seg_level = level;
        hc.seg_device = cci_host_current_device();
        after_first_pinning();
    }
    if (hc.reserve_size - hc.seg_used < size)
        return NULL;
    void *p = (char *)hc.seg + hc.seg_used;
    hc.seg_used += size;
    hc.seg_carved++;
    return p;
}

// Pins `size` bytes for b as b->origin says, without our lock: page locking takes milliseconds,
// and other threads' frees and hits need not wait for it. The level's code.
static int pin_unlocked(int level, size_t size, unsigned flags, host_block *b, unsigned threads)
{
    pthread_mutex_unlock(&hc.lock);
    int code = b->origin == ORIGIN_REGISTER ? cci_host_real_register(level, &b->ptr, size, flags, threads)
                                            : cci_host_real_alloc(level, &b->ptr, size, flags);
    pthread_mutex_lock(&hc.lock);
    return code;
}

// Pins a new buffer of class size `size`: carved, registered or allocated. The level's code.
// Lock held (dropped around the real pinning; b is on no list meanwhile).
static int pin_new(int level, size_t size, unsigned flags, host_block *b)
{
    b->ptr = NULL;
    if (hc.reserve_size && flags == 0 && size <= HOST_RESERVE_SMALL && (b->ptr = carve(level, size))) {
        b->origin = ORIGIN_RESERVE;
        return 0;
    }
    // Write-combined memory cannot be registered: it is allocated as asked.
    b->origin = hc.register_path && !(flags & CCI_HOST_ALLOC_WRITE_COMBINED) ? ORIGIN_REGISTER : ORIGIN_ALLOC;
    uint64_t t0 = cci_pl_now_ns();
    int code = pin_unlocked(level, size, flags, b, hc.threads);
    if (code == 2) {  // out of memory in both APIs: what the cache holds goes back, then once more
        release_cached(0);
        code = pin_unlocked(level, size, flags, b, hc.threads);
    }
    if (code != 0)
        return code;
    hc.st.pinned_register_ns += cci_pl_now_ns() - t0;
    hc.st.pinned_host_allocs++;
    cci_stat_change(&hc.st.pinned_reserved_bytes, (int64_t)size);
    after_first_pinning();
    return 0;
}

int cci_host_cache_alloc(int level, void **ptr, size_t size, unsigned flags, int plain)
{
    if (plain)
        flags = 0;
    size_t cls;
    int ci;
    if (!serving(level) || !ptr || size == 0 || (flags & ~(unsigned)CCI_HOST_ALLOC_FLAGS) ||
        (ci = class_of(size, &cls)) < 0)
        return cci_host_real_pass_alloc(level, ptr, size, flags, plain);
    atomic_store_explicit(&used, 1, memory_order_relaxed);
    pthread_mutex_lock(&hc.lock);
    if (hc.exited) {
        pthread_mutex_unlock(&hc.lock);
        return cci_host_real_pass_alloc(level, ptr, size, flags, plain);
    }
    host_block *b = take_cached(ci, flags);
    if (b) {
        hc.st.pinned_hits++;
        cci_stat_change(&hc.st.pinned_cached_bytes, -(int64_t)b->size);
    } else {
        b = calloc(1, sizeof *b);
        int code = b ? pin_new(level, cls, flags, b) : 2;
        if (code != 0) {
            pthread_mutex_unlock(&hc.lock);
            free(b);
            return code;
        }
        b->size = cls;
        b->flags = flags;
        b->level = b->origin == ORIGIN_RESERVE ? hc.seg_level : level;
        b->device = b->origin == ORIGIN_RESERVE ? hc.seg_device : cci_host_current_device();
        hash_oom = 0;
        HASH_ADD_PTR(hc.by_ptr, ptr, b);
        if (hash_oom) {  // untracked memory would never be freed: give it back, answer OOM
            if (b->origin == ORIGIN_RESERVE)
                hc.seg_carved--;  // its bytes stay used: the segment is only ever carved forward
            else
                cci_host_real_free(level, b->device, b->ptr, b->size, b->origin == ORIGIN_REGISTER);
            pthread_mutex_unlock(&hc.lock);
            free(b);
            return 2;
        }
        hc.st.pinned_misses++;
    }
    b->in_use = 1;
    cci_stat_change(&hc.st.pinned_buffers, 1);
    cci_stat_change(&hc.st.pinned_in_use_bytes, (int64_t)b->size);
    *ptr = b->ptr;
    pthread_mutex_unlock(&hc.lock);
    return 0;
}

int cci_host_cache_free(int level, void *ptr)
{
    if (!serving(level) || !ptr)
        return cci_host_real_pass_free(level, ptr);
    pthread_mutex_lock(&hc.lock);
    host_block *b = NULL;
    HASH_FIND_PTR(hc.by_ptr, &ptr, b);
    if (!b) {
        pthread_mutex_unlock(&hc.lock);
        return cci_host_real_pass_free(level, ptr);  // not ours: pinned before us, or registered by the program
    }
    if (!b->in_use) {
        pthread_mutex_unlock(&hc.lock);
        cci_log(CCI_LOG_WARNING, "pinned host buffer %p freed twice; the second free is ignored", ptr);
        return 1;  // cudaErrorInvalidValue, CUDA_ERROR_INVALID_VALUE
    }
    b->in_use = 0;  // off every list and not in use: no second free, no allocation can take it
    cci_stat_change(&hc.st.pinned_buffers, -1);
    cci_stat_change(&hc.st.pinned_in_use_bytes, -(int64_t)b->size);
    if (b->gone) {  // freed by the reset of its device's context already
        forget_gone(b);
        pthread_mutex_unlock(&hc.lock);
        return 0;
    }
    int exited = hc.exited, no_fences = hc.no_fences;
    pthread_mutex_unlock(&hc.lock);

    // Recorded without our lock: a record may ask every stream.
    cci_fence f = exited || no_fences ? 0 : record_fence();
    pthread_mutex_lock(&hc.lock);
    if (exited || (!f && !no_fences)) {
        hc.st.pinned_unfenced_frees += !exited;
        release_block(b);
        pthread_mutex_unlock(&hc.lock);
        return 0;
    }
    b->fence = f;
    hc.st.pinned_fence_records += f != 0;
    cci_stat_change(&hc.st.pinned_cached_bytes, (int64_t)b->size);
    size_t cls;
    if (hc.thread_started && f) {
        queue_push(&hc.pending, b);
        pthread_cond_signal(&hc.wake);
    } else {
        queue_push(&hc.ready[class_of(b->size, &cls)][b->flags], b);
    }
    pthread_mutex_unlock(&hc.lock);
    return 0;
}

// The block a pointer of ours starts, in use; NULL otherwise. Lock held.
static host_block *in_use_block(void *ptr)
{
    host_block *b = NULL;
    HASH_FIND_PTR(hc.by_ptr, &ptr, b);
    return b && b->in_use ? b : NULL;
}

int cci_host_cache_get_flags(int level, unsigned *flags, void *ptr)
{
    if (!serving(level) || !flags)
        return cci_host_real_get_flags(level, flags, ptr);
    pthread_mutex_lock(&hc.lock);
    host_block *b = in_use_block(ptr);
    int origin = b ? b->origin : -1;
    unsigned asked = b ? b->flags : 0;
    void *seg = hc.seg;
    pthread_mutex_unlock(&hc.lock);
    if (origin == ORIGIN_REGISTER) {
        *flags = asked;  // what cudaHostAlloc would have given: registered memory has no alloc flags
        return 0;
    }
    return cci_host_real_get_flags(level, flags, origin == ORIGIN_RESERVE ? seg : ptr);
}

int cci_host_cache_get_device_pointer(int level, void **dptr, void *ptr, unsigned flags)
{
    if (!serving(level) || !dptr)
        return cci_host_real_get_device_pointer(level, dptr, ptr, flags);
    pthread_mutex_lock(&hc.lock);
    host_block *b = in_use_block(ptr);
    void *seg = b && b->origin == ORIGIN_RESERVE ? hc.seg : NULL;
    pthread_mutex_unlock(&hc.lock);
    if (!seg)
        return cci_host_real_get_device_pointer(level, dptr, ptr, flags);
    void *base = NULL;
    int code = cci_host_real_get_device_pointer(level, &base, seg, flags);
    if (code == 0)
        *dptr = (char *)base + ((char *)ptr - (char *)seg);
    return code;
}

void cci_host_cache_drop_device(int device)
{
    pthread_mutex_lock(&hc.lock);
    host_block *b, *tmp;
    HASH_ITER(hh, hc.by_ptr, b, tmp) {
        if (b->device != device || b->gone)
            continue;
        b->gone = 1;
        if (b->origin != ORIGIN_RESERVE)
            cci_stat_change(&hc.st.pinned_reserved_bytes, -(int64_t)b->size);
    }
    for (int c = 0; c < HOST_CLASSES; c++) {
        for (int f = 0; f <= CCI_HOST_ALLOC_FLAGS; f++) {
            host_queue *q = &hc.ready[c][f];
            host_block *prev = NULL;
            for (b = q->head; b; b = tmp) {
                tmp = b->next;
                if (!b->gone) {
                    prev = b;
                    continue;
                }
                queue_unlink(q, prev, b);
                cci_stat_change(&hc.st.pinned_cached_bytes, -(int64_t)b->size);
                forget_gone(b);
            }
        }
    }
    if (hc.seg && hc.seg_device == device) {
        cci_stat_change(&hc.st.pinned_reserved_bytes, -(int64_t)hc.reserve_size);
        hc.st.pinned_reserve_segment_bytes = 0;
        hc.seg = NULL;
        hc.seg_used = 0;
        hc.seg_carved = 0;  // its buffers are gone with it; a new segment counts afresh
    }
    pthread_mutex_unlock(&hc.lock);
}

void cci_host_cache_empty(void)
{
    pthread_mutex_lock(&hc.lock);
    if (!hc.exited)
        release_cached(0);
    pthread_mutex_unlock(&hc.lock);
}

void cci_host_cache_stats(cci_stats *out)
{
    pthread_mutex_lock(&hc.lock);
    cci_stats s = hc.st;
    pthread_mutex_unlock(&hc.lock);
    // Every pinned field, from the one list (stats_list.h): a field added there is copied here.
#define COPY_FAMILY(f, label, bytes) out->f = s.f;
#define COPY_COUNT(f, label) out->f = s.f;
    CCI_STAT_PINNED_FAMILIES(COPY_FAMILY)
    CCI_STAT_PINNED_COUNTS(COPY_COUNT)
#undef COPY_FAMILY
#undef COPY_COUNT
}

int cci_host_cache_used(void)
{
    return atomic_load_explicit(&used, memory_order_relaxed);
}
