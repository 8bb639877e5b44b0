// SPDX-License-Identifier: MIT
// CUDA IPC on our memory (ipc.h): the handle, the exports this process made and the imports it
// opened. One lock (ipc_lock) covers both tables; it is taken before an allocator's lock, never
// after, and no socket wait happens under it.
//
// uthash would exit the process when it cannot grow a table: a failed insert is answered instead.
// Whether an insert took is asked of the table itself (an insert whose table could not grow is
// in it; one whose table could not be made is not).
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) ((void)(obj))

#include "ipc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uthash.h>

#include "backend_cuda.h"
#include "clock.h"
#include "config.h"
#include "ipc_socket.h"
#include "log.h"
#include "serve.h"
#include "state.h"
#include "vmm.h"

// ---- the handle -----------------------------------------------------------------------------
// 64 bytes, as CUDA's. `check` makes a damaged or forged handle an invalid one rather than a
// request for someone else's export.
static const char k_magic[8] = {'C', 'C', 'I', 'V', 'M', 'M', 'H', '1'};

typedef struct handle_bytes {
    char magic[8];
    int32_t pid;     // the exporter
    int32_t device;  // its device ordinal (for the messages)
    uint64_t nonce;  // its socket's (cci_ipc_nonce)
    uint64_t id;     // the export's number there
    uint64_t size;   // the block's bytes
    uint64_t check;
    char unused[16];
} handle_bytes;
_Static_assert(sizeof(handle_bytes) == 64, "a CUDA IPC handle is 64 bytes");

static uint64_t handle_check(const handle_bytes *h)
{
    const unsigned char *b = (const unsigned char *)h;
    uint64_t x = 1469598103934665603ull;  // FNV-1a over everything before `check`
    for (size_t i = 0; i < offsetof(handle_bytes, check); i++)
        x = (x ^ b[i]) * 1099511628211ull;
    return x;
}

// ---- the tables -----------------------------------------------------------------------------

typedef struct export_rec {
    uint64_t id;
    uintptr_t block;
    size_t size;
    int device;
    unsigned imports;  // connections granted and not ended
    int freed;         // the program freed it while imported: held in its allocator
    // The pages as descriptors, made at the first open and kept until the export is forgotten:
    // the driver takes ~0.6 ms to make the first (H200), and an importer closing the last
    // reference to one waits another 0.5 ms; later opens send copies.
    cci_vmm_piece *pieces;
    size_t npieces, skip;
    UT_hash_handle hh, by_addr;
} export_rec;

typedef struct import_key {
    int32_t pid;
    int32_t pad;
    uint64_t nonce, id;
} import_key;

typedef struct import_rec {
    import_key key;
    uintptr_t ptr;  // what the program was given: the block's start
    unsigned refs;
    int conn;
    cci_vmm_import map;
    UT_hash_handle hh, by_ptr;
} import_rec;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static export_rec *exports_by_id, *exports_by_addr;
static import_rec *imports_by_key, *imports_by_ptr;
static uint64_t next_id;
_Atomic unsigned cci__ipc_exports;
// Descriptors kept by exports (ipc_lock): at most a quarter of the process's descriptor limit, so
// that sharing many blocks never leaves the program without descriptors; past it, an open exports
// the pages again and keeps nothing.
static size_t cached_fds, cache_limit;

static void export_free(export_rec *e)
{
    cached_fds -= e->npieces;
    for (size_t i = 0; i < e->npieces; i++)
        close(e->pieces[i].fd);
    free(e->pieces);
    free(e);
}

static void export_forget(export_rec *e)
{
    HASH_DELETE(hh, exports_by_id, e);
    HASH_DELETE(by_addr, exports_by_addr, e);
    export_free(e);
    atomic_fetch_sub_explicit(&cci__ipc_exports, 1, memory_order_relaxed);
}

// ---- exporting --------------------------------------------------------------------------------

// The last import of a freed block ended: the held free completes. The program's work queued
// before its free may still run; the device finishes it first (rare: a free while imported).
static void complete_free(int device, uintptr_t block)
{
    cci_backend be = cci_cuda_backend();
    if (be.ops->synchronize && be.ops->synchronize(be.ctx, device) != CCI_OK)
        cci_log(CCI_LOG_WARNING, "CUDA IPC: synchronising device %d before reusing a block freed while "
                "imported failed; it stays out of use", device);
    else if (!cci_state_allocator_peek(device) ||
             cci_free_complete_held(cci_state_allocator_peek(device), block) != CCI_OK)
        cci_log(CCI_LOG_DEBUG, "CUDA IPC: the held block %#" PRIxPTR " is gone (device reset?)", block);
}

static void on_grant(uint64_t id, cci_ipc_grant *g)
{
    uint64_t t0 = cci_pl_now_ns();
    pthread_mutex_lock(&ipc_lock);
    export_rec *e = NULL;
    HASH_FIND(hh, exports_by_id, &id, sizeof id, e);
    g->status = !e || e->freed ? CCI_IPC_GONE : CCI_IPC_FAILED;
    int keep = 1;  // the pieces stay with the export (else they go with this answer)
    if (g->status == CCI_IPC_FAILED && !e->pieces) {
        if (!cache_limit) {
            struct rlimit rl;
            cache_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur / 4 : 256;
        }
        if (cci_cuda_vmm_export(e->device, e->block, e->size, &e->pieces, &e->npieces, &e->skip) != CCI_OK)
            e->npieces = 0;
        keep = cached_fds + 2 * e->npieces <= cache_limit;  // kept, and their copies in flight
        if (keep)
            cached_fds += e->npieces;
    }
    size_t n = g->status == CCI_IPC_FAILED ? e->npieces : 0, copied = 0;
    if (n) {
        g->fds = malloc(n * sizeof *g->fds);
        g->sizes = malloc(n * sizeof *g->sizes);
        for (; g->fds && g->sizes && copied < n; copied++) {
            // The transport closes what it sends: a copy of a kept descriptor, or the one made now.
            g->fds[copied] = keep ? dup(e->pieces[copied].fd) : e->pieces[copied].fd;
            if (g->fds[copied] < 0)
                break;
            g->sizes[copied] = e->pieces[copied].size;
        }
    }
    if (!keep) {  // what the answer did not take is closed here; the export keeps nothing
        for (size_t i = copied; i < e->npieces; i++)
            close(e->pieces[i].fd);
        if (copied < n) {
            for (size_t i = 0; i < copied; i++)
                close(g->fds[i]);
            copied = 0;
        }
        free(e->pieces);
        e->pieces = NULL;
        e->npieces = 0;
        if (!copied)
            n = 0;
    }
    if (n && copied == n) {
        g->status = CCI_IPC_GRANTED;
        g->n = n;
        g->skip = e->skip;
        g->size = e->size;
        e->imports++;
    } else {
        for (size_t i = 0; i < copied; i++)
            close(g->fds[i]);
        free(g->fds);
        free(g->sizes);
        g->fds = NULL;
        g->sizes = NULL;
    }
    pthread_mutex_unlock(&ipc_lock);
    cci_log(CCI_LOG_DEBUG, "CUDA IPC: export %" PRIu64 " asked for: %zu pages out in %.0f us (status %d)", id, n,
            (cci_pl_now_ns() - t0) / 1e3, g->status);
    if (g->status == CCI_IPC_FAILED)
        cci_log(CCI_LOG_WARNING, "CUDA IPC: export %" PRIu64 " could not hand its pages out; the importer "
                "gets an error", id);
}

static void on_ended(uint64_t id)
{
    pthread_mutex_lock(&ipc_lock);
    export_rec *e = NULL;
    HASH_FIND(hh, exports_by_id, &id, sizeof id, e);
    int device = -1;
    uintptr_t block = 0;
    if (e && e->imports && --e->imports == 0 && e->freed) {
        device = e->device;
        block = e->block;
        export_forget(e);
    }
    pthread_mutex_unlock(&ipc_lock);
    if (device >= 0)
        complete_free(device, block);
}

static const cci_ipc_server_ops server_ops = {.grant = on_grant, .ended = on_ended};

static const char *invalid_value_name(int level)
{
    return level == CCI_LEVEL_RUNTIME ? "cudaErrorInvalidValue" : "CUDA_ERROR_INVALID_VALUE";
}

int cci_serve_ipc_export(int level, const char *fn, uintptr_t p, void *handle)
{
    uintptr_t block = 0, segment = 0;
    size_t block_size = 0, segment_size = 0;
    int device = -1;
    int rc = cci_serve_block_owner(p, &block, &block_size, &segment, &segment_size, &device);
    if (rc == CCI_ENOTOURS)
        return CCI_ENOTOURS;
    if (rc != CCI_OK) {
        cci_log(CCI_LOG_WARNING, "%s(%#" PRIxPTR "): the pointer is in our memory but in no live "
                "block (already freed?); returning %s", fn, p, invalid_value_name(level));
        return CCI_EINVAL;
    }
    int vmm = cci_cuda_vmm_owns(p);
    if (!vmm && block != segment) {
        cci_log(CCI_LOG_WARNING, "%s(%#" PRIxPTR "): the block starts %zu bytes into a cached "
                "%zu-byte segment and an importer would map the segment's start; returning %s. "
                "Set CCI_ALLOC_CONF=max_split_size_mb:N with N at most the IPC buffer size (such "
                "blocks are never split and start their own segment), or use compact segments, "
                "whose blocks are exported whole wherever they lie",
                fn, p, (size_t)(block - segment), segment_size, invalid_value_name(level));
        return CCI_EINVAL;
    }
    // The importer is another process: its work is ordered with none of ours. A block handed out
    // at once (the ordered rule, a barrier, an order) may still have its old owner's work queued,
    // which CUDA's own cudaFree would have waited for before the memory could be allocated and
    // exported again. So the device finishes its work first (an export is rare).
    cci_backend be = cci_cuda_backend();
    if (device >= 0 && be.ops->synchronize && be.ops->synchronize(be.ctx, device) != CCI_OK)
        cci_log(CCI_LOG_WARNING, "%s(%#" PRIxPTR "): synchronising device %d before the export "
                "failed; work queued before the block's last free may still touch it", fn, p, device);
    if (!vmm)
        return CCI_ENOTOURS;  // CUDA's own allocation: CUDA exports it
    if (!cci_cuda_vmm_shareable(device)) {
        cci_log(CCI_LOG_WARNING, "%s(%#" PRIxPTR "): the block lies in a virtual-memory segment of device %d, "
                "whose pages cannot be exported (the driver offers no file-descriptor handles for them); "
                "returning %s. Run this program with compact_segments:False in CCI_ALLOC_CONF",
                fn, p, device, invalid_value_name(level));
        return CCI_EINVAL;
    }
    if (cci_ipc_server_start(&server_ops) != 0)
        return CCI_EINVAL;  // said why
    pthread_mutex_lock(&ipc_lock);
    export_rec *e = NULL;
    HASH_FIND(by_addr, exports_by_addr, &block, sizeof block, e);
    if (!e && (e = calloc(1, sizeof *e)) != NULL) {
        *e = (export_rec){.id = ++next_id, .block = block, .size = block_size, .device = device};
        export_rec *f = NULL;
        HASH_ADD(hh, exports_by_id, id, sizeof e->id, e);
        HASH_FIND(hh, exports_by_id, &e->id, sizeof e->id, f);
        int by_id = f == e, both = 0;
        if (by_id) {
            HASH_ADD(by_addr, exports_by_addr, block, sizeof e->block, e);
            f = NULL;
            HASH_FIND(by_addr, exports_by_addr, &e->block, sizeof e->block, f);
            both = f == e;
        }
        if (!both) {
            if (by_id)
                HASH_DELETE(hh, exports_by_id, e);
            free(e);
            e = NULL;
        } else {
            atomic_fetch_add_explicit(&cci__ipc_exports, 1, memory_order_relaxed);
        }
    }
    handle_bytes h = {.pid = (int32_t)getpid(), .device = device, .nonce = cci_ipc_nonce()};
    if (e) {
        memcpy(h.magic, k_magic, sizeof h.magic);
        h.id = e->id;
        h.size = e->size;
        h.check = handle_check(&h);
    }
    pthread_mutex_unlock(&ipc_lock);
    if (!e) {
        cci_log(CCI_LOG_WARNING, "%s(%#" PRIxPTR "): out of host memory; returning %s", fn, p,
                invalid_value_name(level));
        return CCI_EINVAL;
    }
    memcpy(handle, &h, sizeof h);
    cci_log(CCI_LOG_DEBUG, "%s: exported the %zu-byte block %#" PRIxPTR " of device %d as %" PRIu64, fn,
            block_size, block, device, h.id);
    return CCI_OK;
}

int cci__serve_ipc_release(uintptr_t p, uint64_t stream)
{
    pthread_mutex_lock(&ipc_lock);
    export_rec *e = NULL;
    HASH_FIND(by_addr, exports_by_addr, &p, sizeof p, e);
    int rc = CCI_ENOTOURS;
    if (e && !e->imports) {
        export_forget(e);  // no importer: an ordinary free, and the handle goes stale
    } else if (e && !e->freed) {
        cci_allocator *a = cci_state_allocator_peek(e->device);
        rc = a ? cci_free(a, p, stream, CCI_FREE_HELD) : CCI_ENOTOURS;
        if (rc == CCI_OK)
            e->freed = 1;
        else if (rc == CCI_EINVAL)
            rc = CCI_ENOTOURS;  // the caller's own free names the problem
    }
    pthread_mutex_unlock(&ipc_lock);
    if (rc == CCI_OK)
        cci_log(CCI_LOG_DEBUG, "CUDA IPC: block %#" PRIxPTR " freed while imported; reused once every importer "
                "closed it", p);
    return rc;
}

// ---- importing --------------------------------------------------------------------------------

static import_rec *import_find(const import_key *k)
{
    import_rec *r = NULL;
    HASH_FIND(hh, imports_by_key, k, sizeof *k, r);
    return r;
}

int cci_serve_ipc_is_ours(const void *handle)
{
    return !memcmp(handle, k_magic, sizeof k_magic);
}

static int open_failed(const char *fn, const handle_bytes *h, int why, const char *detail, int *out_why)
{
    *out_why = why;
    cci_log(CCI_LOG_WARNING, "%s: cannot open the handle of a %" PRIu64 "-byte block of process %d (device %d): %s",
            fn, h->size, h->pid, h->device, detail);
    return CCI_EINVAL;
}

int cci_serve_ipc_open(const char *fn, const void *handle, int device, uintptr_t *out, int *why)
{
    handle_bytes h;
    memcpy(&h, handle, sizeof h);
    if (memcmp(h.magic, k_magic, sizeof h.magic))
        return CCI_ENOTOURS;
    if (h.check != handle_check(&h)) {
        *why = CCI_IPC_OPEN_BAD_HANDLE;
        cci_log(CCI_LOG_WARNING, "%s: the handle is damaged (its check does not match)", fn);
        return CCI_EINVAL;
    }
    if (h.pid == (int32_t)getpid() && h.nonce == cci_ipc_nonce())
        return open_failed(fn, &h, CCI_IPC_OPEN_OWN_HANDLE, "the handle was made by this process, which uses the "
                           "pointer itself (CUDA refuses this too)", why);
    import_key k = {.pid = h.pid, .nonce = h.nonce, .id = h.id};
    pthread_mutex_lock(&ipc_lock);
    import_rec *r = import_find(&k);
    if (r) {
        r->refs++;
        *out = r->ptr;
    }
    pthread_mutex_unlock(&ipc_lock);
    if (r)
        return CCI_OK;

    // No lock while asking: the exporter may take its time, and may be this process's importer.
    uint64_t t0 = cci_pl_now_ns();
    cci_ipc_grant g;
    int conn = -1;
    char detail[192];
    if (cci_ipc_request(h.pid, h.nonce, h.id, &g, &conn, detail, sizeof detail) != CCI_IPC_GRANTED)
        return open_failed(fn, &h, CCI_IPC_OPEN_MAP_FAILED, detail, why);
    uint64_t t_asked = cci_pl_now_ns();
    cci_vmm_piece *pieces = calloc(g.n, sizeof *pieces);
    r = calloc(1, sizeof *r);
    int cu = 0;
    int rc = pieces && r ? CCI_OK : CCI_EOOM;
    for (size_t i = 0; pieces && i < g.n; i++)
        pieces[i] = (cci_vmm_piece){.fd = g.fds[i], .size = g.sizes[i]};
    if (rc == CCI_OK)
        rc = cci_cuda_vmm_import(device, pieces, g.n, &r->map, &cu);
    uint64_t t_mapped = cci_pl_now_ns();
    for (size_t i = 0; i < g.n; i++)  // the imported allocations hold the memory now
        close(g.fds[i]);
    uint64_t t_closed = cci_pl_now_ns();
    free(g.fds);
    free(g.sizes);
    free(pieces);
    if (rc == CCI_OK && g.skip + h.size > r->map.size) {
        cci_cuda_vmm_unimport(&r->map);
        rc = CCI_EBACKEND;
        cu = -1;
    }
    if (rc != CCI_OK) {
        free(r);
        cci_ipc_conn_close(conn);
        if (rc == CCI_EOOM)
            snprintf(detail, sizeof detail, "out of host memory");
        else if (cu == -1)
            snprintf(detail, sizeof detail, "the exporter's pages do not cover the block");
        else
            snprintf(detail, sizeof detail, "mapping its pages on device %d failed (CUresult %d)", device, cu);
        return open_failed(fn, &h, rc == CCI_EOOM ? CCI_IPC_OPEN_NO_MEMORY : CCI_IPC_OPEN_MAP_FAILED, detail, why);
    }
    r->key = k;
    r->ptr = r->map.base + g.skip;
    r->refs = 1;
    r->conn = conn;

    pthread_mutex_lock(&ipc_lock);
    import_rec *again = import_find(&k);  // another thread opened it meanwhile: use that one
    if (again) {
        again->refs++;
    } else {
        HASH_ADD(hh, imports_by_key, key, sizeof r->key, r);
        import_rec *f = import_find(&k);
        int by_key = f == r, both = 0;
        if (by_key) {
            HASH_ADD(by_ptr, imports_by_ptr, ptr, sizeof r->ptr, r);
            f = NULL;
            HASH_FIND(by_ptr, imports_by_ptr, &r->ptr, sizeof r->ptr, f);
            both = f == r;
        }
        if (!both) {
            if (by_key)
                HASH_DELETE(hh, imports_by_key, r);
            again = r;  // undone below, as a duplicate would be
            *why = CCI_IPC_OPEN_NO_MEMORY;
        }
    }
    uintptr_t ptr = again && again != r ? again->ptr : r->ptr;
    pthread_mutex_unlock(&ipc_lock);
    if (again) {
        int failed = again == r;
        cci_cuda_vmm_unimport(&r->map);
        cci_ipc_conn_close(r->conn);
        free(r);
        if (failed)
            return open_failed(fn, &h, CCI_IPC_OPEN_NO_MEMORY, "out of host memory", why);
    }
    *out = ptr;
    cci_log(CCI_LOG_DEBUG, "%s: opened export %" PRIu64 " of process %d at %#" PRIxPTR " on device %d in %.0f us "
            "(asking %.0f us, mapping %.0f us, closing descriptors %.0f us)", fn, h.id, h.pid, ptr, device,
            (cci_pl_now_ns() - t0) / 1e3, (t_asked - t0) / 1e3, (t_mapped - t_asked) / 1e3, (t_closed - t_mapped) / 1e3);
    return CCI_OK;
}

int cci_serve_ipc_close(uintptr_t p)
{
    pthread_mutex_lock(&ipc_lock);
    import_rec *r = NULL;
    HASH_FIND(by_ptr, imports_by_ptr, &p, sizeof p, r);
    if (r && --r->refs == 0) {
        HASH_DELETE(hh, imports_by_key, r);
        HASH_DELETE(by_ptr, imports_by_ptr, r);
    } else if (r) {
        r = (import_rec *)1;  // still open elsewhere in the program
    }
    pthread_mutex_unlock(&ipc_lock);
    if (!r)
        return CCI_ENOTOURS;
    if (r != (import_rec *)1) {
        // Unmapped before the exporter hears of it: by the time it may reuse the pages, this
        // process can no longer touch them.
        cci_cuda_vmm_unimport(&r->map);
        cci_ipc_conn_close(r->conn);
        free(r);
    }
    return CCI_OK;
}

void cci_serve_ipc_atfork_child(void)
{
    // The only thread; the lock may have been held by a parent thread. The records are the
    // parent's (its mappings, its blocks); the child forgets them without a CUDA call.
    pthread_mutex_init(&ipc_lock, NULL);
    export_rec *e, *etmp;
    HASH_ITER(hh, exports_by_id, e, etmp)
    {
        HASH_DELETE(hh, exports_by_id, e);
        export_free(e);  // the child's copies of the descriptors
    }
    exports_by_addr = NULL;
    import_rec *r, *rtmp;
    HASH_ITER(hh, imports_by_key, r, rtmp)
    {
        HASH_DELETE(hh, imports_by_key, r);
        free(r->map.handles);
        free(r);
    }
    imports_by_ptr = NULL;
    atomic_store(&cci__ipc_exports, 0);
    cached_fds = 0;
    cci_ipc_socket_atfork_child();
}
