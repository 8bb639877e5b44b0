// SPDX-License-Identifier: MIT
// Call sites of allocations (callsites.h).
#include "callsites.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "python_frames.h"
#include "state.h"

// uthash exits the process when host memory runs out; here a failed insert only loses one
// call site (counted in "dropped"), and the program goes on.
static int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

#define MAX_SITES 4096         ///< distinct (device, stack) pairs; later ones share one "table full" site
#define PEAK_TOP 16            ///< call sites kept at each new reserved peak
#define OWN_FRAMES_MAX 12      ///< our own frames above the program's (hooks, serving layer, this file)
#define KEY_HEAD 3             ///< key words before the frames: device, native count, Python count

int cci__stacks_depth;

// A call site: key = device, native count, Python count, the return addresses, then per Python
// frame (interned file, interned function, line). Sites and strings are never freed, so a report
// may read their keys without the lock.
typedef struct site {
    UT_hash_handle hh;
    uint64_t live_bytes, live_blocks;
    size_t scratch;            ///< report time: index in the holder list
    uint64_t first_seq;        ///< report time: oldest live block
    uint64_t first_ns;
    int table_full;
    size_t nkey;
    uintptr_t key[];
} site;

typedef struct live_block {
    UT_hash_handle hh;
    uintptr_t addr;
    size_t size;
    site *site;
    uint64_t seq, t_ns;
} live_block;

typedef struct interned {
    UT_hash_handle hh;
    char text[];
} interned;

typedef struct peak_entry {
    const site *site;
    uint64_t bytes, blocks;
} peak_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static site *sites;
static size_t nsites;
static site *full_site[CCI_PL_MAX_DEVICES];
static live_block *live;
static live_block *spare;     // recycled entries: the hot path mallocs only while the map grows
static interned *strings;
static uint64_t allocations, dropped;
static uintptr_t own_lo, own_hi;
static int python_on;

static struct device_track {
    _Atomic uint64_t reserved, peak;    // observer-side, under the allocator lock
    atomic_int peak_pending;
    uint64_t live_bytes, live_blocks;   // under `lock`
    int kept;
    uint64_t kept_reserved, kept_bytes, kept_blocks;
    size_t nkept;
    peak_entry top[PEAK_TOP];
} dev[CCI_PL_MAX_DEVICES];

// Our own object's address range: frames inside it are the hooks and this file, not the caller.
static int find_own(struct dl_phdr_info *info, size_t size, void *ud)
{
    (void)size;
    uintptr_t base = (uintptr_t)ud, lo = UINTPTR_MAX, hi = 0;
    if (info->dlpi_addr != base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t s = base + ph->p_vaddr, e = s + ph->p_memsz;
        lo = s < lo ? s : lo;
        hi = e > hi ? e : hi;
    }
    own_lo = lo;
    own_hi = hi;
    return 1;
}

void cci_callsites_start(const cci_settings *s)
{
    if (s->bad_stacks[0])
        cci_log(CCI_LOG_WARNING, "CCI_STACKS=%s: expected a number of frames from 0 to %d; call sites off",
                s->bad_stacks, CCI_SETTINGS_MAX_STACKS);
    if (!s->stacks)
        return;
    Dl_info info;
    if (dladdr((void *)cci_callsites_start, &info) && info.dli_fbase)
        dl_iterate_phdr(find_own, info.dli_fbase);
    void *warm[2];
    backtrace(warm, 2);   // loads the unwinder now, not inside the first allocation
    cci_py_frames_init();
    python_on = cci_py_frames_available();
    cci__stacks_depth = s->stacks;
}

// ---- observer: frees and reserved peaks --------------------------------------------------------

static void forget(uintptr_t addr)
{
    pthread_mutex_lock(&lock);
    live_block *b;
    HASH_FIND(hh, live, &addr, sizeof addr, b);
    if (b) {
        HASH_DELETE(hh, live, b);
        b->site->live_bytes -= b->size;
        b->site->live_blocks--;
        struct device_track *t = &dev[b->site->key[0]];
        t->live_bytes -= b->size;
        t->live_blocks--;
        b->hh.next = spare;
        spare = b;
    }
    pthread_mutex_unlock(&lock);
}

// Runs under the allocator lock. Peaks only set a flag here: the holder table is copied by the
// next recorded allocation of the device, which then includes the block that made the peak.
static void on_event(void *ud, const cci_event *ev)
{
    struct device_track *t = ud;
    switch (ev->kind) {
    case CCI_EV_FREE_REQUESTED:
        forget(ev->addr);
        break;
    case CCI_EV_SEGMENT_ALLOC:
    case CCI_EV_SEGMENT_MAP: {
        uint64_t r = atomic_fetch_add(&t->reserved, ev->size) + ev->size;
        if (r > atomic_load(&t->peak)) {
            atomic_store(&t->peak, r);
            atomic_store(&t->peak_pending, 1);
        }
        break;
    }
    case CCI_EV_SEGMENT_FREE:
    case CCI_EV_SEGMENT_UNMAP:
        atomic_fetch_sub(&t->reserved, ev->size);
        break;
    default:
        break;
    }
}

void cci_callsites_attach(int device, cci_allocator *a)
{
    if (!cci__stacks_depth || (unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    if (cci_allocator_add_observer(a, on_event, &dev[device]) != 0)
        cci_log(CCI_LOG_WARNING, "device %d: no observer slot left for CCI_STACKS; frees are not seen, so "
                "holders count every block ever allocated", device);
}

// ---- the hot path (stacks on) ------------------------------------------------------------------

static const char *intern(const char *text)
{
    interned *e;
    size_t len = strlen(text);
    HASH_FIND(hh, strings, text, len, e);
    if (e)
        return e->text;
    e = malloc(sizeof *e + len + 1);
    if (!e)
        return NULL;
    memcpy(e->text, text, len + 1);
    HASH_ADD_KEYPTR(hh, strings, e->text, len, e);
    if (hash_oom) {
        hash_oom = 0;
        free(e);
        return NULL;
    }
    return e->text;
}

static site *site_for(const uintptr_t *key, size_t nkey, int device)
{
    site *s;
    HASH_FIND(hh, sites, key, nkey * sizeof *key, s);
    if (s)
        return s;
    if (nsites < MAX_SITES && (s = calloc(1, sizeof *s + nkey * sizeof *key))) {
        memcpy(s->key, key, nkey * sizeof *key);
        s->nkey = nkey;
        HASH_ADD_KEYPTR(hh, sites, s->key, nkey * sizeof *key, s);
        if (!hash_oom) {
            nsites++;
            return s;
        }
        hash_oom = 0;
        free(s);
    }
    // Table full (or no memory): the device's catch-all site, made once.
    if (!full_site[device] && (full_site[device] = calloc(1, sizeof *s + KEY_HEAD * sizeof *key))) {
        full_site[device]->key[0] = (uintptr_t)device;
        full_site[device]->nkey = KEY_HEAD;
        full_site[device]->table_full = 1;
    }
    return full_site[device];
}

// The top PEAK_TOP sites of the device by live bytes: O(sites), only when reserved made a new peak.
static void keep_peak(int device)
{
    struct device_track *t = &dev[device];
    size_t n = 0;
    for (site *s = sites; s; s = s->hh.next) {
        if (s->key[0] != (uintptr_t)device || !s->live_blocks)
            continue;
        size_t pos = n;
        while (pos > 0 && t->top[pos - 1].bytes < s->live_bytes)
            pos--;
        if (pos >= PEAK_TOP)
            continue;
        size_t end = n < PEAK_TOP ? n : PEAK_TOP - 1;
        memmove(&t->top[pos + 1], &t->top[pos], (end - pos) * sizeof t->top[0]);
        t->top[pos] = (peak_entry){s, s->live_bytes, s->live_blocks};
        if (n < PEAK_TOP)
            n++;
    }
    site *f = full_site[device];
    if (f && f->live_blocks && n < PEAK_TOP)
        t->top[n++] = (peak_entry){f, f->live_bytes, f->live_blocks};
    t->nkept = n;
    t->kept = 1;
    t->kept_reserved = atomic_load(&t->peak);
    t->kept_bytes = t->live_bytes;
    t->kept_blocks = t->live_blocks;
}

void cci__callsites_record(int device, uintptr_t addr, size_t size)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    int depth = cci__stacks_depth;
    void *pcs[CCI_SETTINGS_MAX_STACKS + OWN_FRAMES_MAX];
    int n = backtrace(pcs, depth + OWN_FRAMES_MAX);
    int first = 0;
    while (first < n && (uintptr_t)pcs[first] >= own_lo && (uintptr_t)pcs[first] < own_hi)
        first++;
    int nnative = n - first < depth ? n - first : depth;
    cci_py_frame py[CCI_SETTINGS_MAX_STACKS];
    size_t npy = python_on ? cci_py_frames_capture(py, (size_t)depth) : 0;
    uint64_t t = cci_pl_now_ns();

    uintptr_t key[KEY_HEAD + CCI_SETTINGS_MAX_STACKS * 4];
    size_t nkey = KEY_HEAD;
    pthread_mutex_lock(&lock);
    uint64_t seq = ++allocations;
    for (int i = 0; i < nnative; i++)
        key[nkey++] = (uintptr_t)pcs[first + i];
    size_t kept_py = 0;
    for (size_t i = 0; i < npy; i++) {
        const char *file = intern(py[i].file), *fn = intern(py[i].function);
        if (!file || !fn)
            break;
        key[nkey++] = (uintptr_t)file;
        key[nkey++] = (uintptr_t)fn;
        key[nkey++] = (uintptr_t)py[i].line;
        kept_py++;
    }
    key[0] = (uintptr_t)device;
    key[1] = (uintptr_t)nnative;
    key[2] = kept_py;
    site *s = site_for(key, nkey, device);
    live_block *b = spare;
    if (b)
        spare = b->hh.next;
    else
        b = malloc(sizeof *b);
    if (s && b) {
        *b = (live_block){.addr = addr, .size = size, .site = s, .seq = seq, .t_ns = t};
        HASH_ADD(hh, live, addr, sizeof b->addr, b);
        if (hash_oom) {
            hash_oom = 0;
            free(b);
            b = NULL;
        }
    }
    if (s && b) {
        s->live_bytes += size;
        s->live_blocks++;
        dev[device].live_bytes += size;
        dev[device].live_blocks++;
    } else {
        dropped++;
    }
    if (atomic_exchange(&dev[device].peak_pending, 0))
        keep_peak(device);
    pthread_mutex_unlock(&lock);
}

void cci_callsites_atfork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    live_block *b, *tmp;
    HASH_ITER(hh, live, b, tmp) {
        HASH_DELETE(hh, live, b);
        free(b);
    }
    for (site *s = sites; s; s = s->hh.next)
        s->live_bytes = s->live_blocks = 0;
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        if (full_site[d])
            full_site[d]->live_bytes = full_site[d]->live_blocks = 0;
        memset(&dev[d], 0, sizeof dev[d]);
    }
}

// ---- report time -----------------------------------------------------------------------------

typedef struct text_pool {
    char *buf;
    size_t len, cap;
    int failed;
} text_pool;

// Appends one NUL-terminated frame; returns its offset (the buffer may move until the end).
static size_t pool_add(text_pool *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t pool_add(text_pool *p, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (p->len + len + 1 > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 4096;
        while (cap < p->len + len + 1)
            cap *= 2;
        char *nb = realloc(p->buf, cap);
        if (!nb) {
            p->failed = 1;
            return 0;
        }
        p->buf = nb;
        p->cap = cap;
    }
    size_t at = p->len;
    memcpy(p->buf + at, line, len + 1);
    p->len += len + 1;
    return at;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

// The frames of a site into holder h, as offsets into the pool (fixed up by the caller).
static void symbolize(const site *s, cci_report_holder *h, text_pool *p)
{
    h->nframes = 0;
    if (s->table_full) {
        h->frames[h->nframes++] = (const char *)(uintptr_t)pool_add(p, "(call site table full: %d sites)", MAX_SITES);
        return;
    }
    size_t nnative = s->key[1], npy = s->key[2];
    const uintptr_t *pyk = s->key + KEY_HEAD + nnative;
    for (size_t i = 0; i < npy && h->nframes < CCI_REPORT_MAX_FRAMES; i++)
        h->frames[h->nframes++] = (const char *)(uintptr_t)pool_add(p, "%s:%d in %s", (const char *)pyk[3 * i],
                                                                   (int)pyk[3 * i + 2], (const char *)pyk[3 * i + 1]);
    for (size_t i = 0; i < nnative && h->nframes < CCI_REPORT_MAX_FRAMES; i++) {
        uintptr_t pc = s->key[KEY_HEAD + i];
        Dl_info info;
        size_t at;
        // pc - 1: a return address may already belong to the next function after a noreturn call.
        if (dladdr((void *)(pc - 1), &info) && info.dli_fname) {
            uintptr_t rel = pc - (uintptr_t)info.dli_fbase;
            if (info.dli_sname)
                at = pool_add(p, "%s+%#lx (%s+%#lx)", info.dli_sname, (unsigned long)(pc - (uintptr_t)info.dli_saddr),
                              base_name(info.dli_fname), (unsigned long)rel);
            else
                at = pool_add(p, "%s+%#lx", base_name(info.dli_fname), (unsigned long)rel);
        } else {
            at = pool_add(p, "%#lx", (unsigned long)pc);
        }
        h->frames[h->nframes++] = (const char *)(uintptr_t)at;
    }
}

static int by_bytes(const void *a, const void *b)
{
    const site *x = *(site *const *)a, *y = *(site *const *)b;
    if (x->live_bytes != y->live_bytes)
        return x->live_bytes < y->live_bytes ? 1 : -1;
    return (x->first_seq > y->first_seq) - (x->first_seq < y->first_seq);
}

static int by_addr(const void *a, const void *b)
{
    const cci_report_block_site *x = a, *y = b;
    return (x->addr > y->addr) - (x->addr < y->addr);
}

static int finish(cci_report_holders *h, text_pool *p)
{
    if (p->failed) {
        free(p->buf);
        cci_report_holders_free(h);
        return -1;
    }
    for (size_t i = 0; i < h->n; i++)
        for (size_t f = 0; f < h->list[i].nframes; f++)
            h->list[i].frames[f] = p->buf + (uintptr_t)h->list[i].frames[f];
    h->strings = p->buf;
    return 0;
}

// Holders now of one device, and optionally its live blocks' sites. Sites are gathered under the
// lock; symbolizing (dladdr takes the loader's lock) happens after it is released.
static int holders_now(int device, cci_report_holders *h, cci_report_block_site **bs, size_t *nbs)
{
    memset(h, 0, sizeof *h);
    uint64_t t = cci_pl_now_ns();
    pthread_mutex_lock(&lock);
    size_t n = 0;
    site **list = malloc((nsites + 1) * sizeof *list);
    for (site *s = sites; list && s; s = s->hh.next)
        s->first_seq = UINT64_MAX;
    if (full_site[device])
        full_site[device]->first_seq = UINT64_MAX;
    size_t nblocks = 0;
    for (live_block *b = live; list && b; b = b->hh.next) {
        if (b->site->key[0] != (uintptr_t)device)
            continue;
        nblocks++;
        if (b->seq < b->site->first_seq) {
            b->site->first_seq = b->seq;
            b->site->first_ns = b->t_ns;
        }
    }
    for (site *s = sites; list && s; s = s->hh.next)
        if (s->key[0] == (uintptr_t)device && s->live_blocks)
            list[n++] = s;
    if (list && full_site[device] && full_site[device]->live_blocks)
        list[n++] = full_site[device];
    if (list)
        qsort(list, n, sizeof *list, by_bytes);
    h->list = list && n ? calloc(n, sizeof *h->list) : NULL;
    cci_report_block_site *sites_of_blocks = bs && h->list ? malloc(nblocks * sizeof *sites_of_blocks) : NULL;
    if (list && (!n || h->list)) {
        h->valid = 1;
        h->n = n;
        h->bytes = dev[device].live_bytes;
        h->blocks = dev[device].live_blocks;
        for (size_t i = 0; i < n; i++) {
            list[i]->scratch = i;
            h->list[i] = (cci_report_holder){.bytes = list[i]->live_bytes, .blocks = list[i]->live_blocks,
                                             .first_seq = list[i]->first_seq,
                                             .oldest_age_s = (double)(t - list[i]->first_ns) / 1e9};
        }
        size_t k = 0;
        for (live_block *b = live; sites_of_blocks && b; b = b->hh.next)
            if (b->site->key[0] == (uintptr_t)device && k < nblocks)
                sites_of_blocks[k++] = (cci_report_block_site){b->addr, b->site->scratch};
        if (bs) {
            *bs = sites_of_blocks;
            *nbs = sites_of_blocks ? k : 0;
        }
    }
    pthread_mutex_unlock(&lock);
    int ok = list && (!n || h->list);
    text_pool pool = {0};
    for (size_t i = 0; ok && i < n; i++)
        symbolize(list[i], &h->list[i], &pool);
    free(list);
    if (!ok) {
        free(sites_of_blocks);
        if (bs) {
            *bs = NULL;
            *nbs = 0;
        }
        cci_report_holders_free(h);
        return -1;
    }
    if (bs && *bs)
        qsort(*bs, *nbs, sizeof **bs, by_addr);
    return finish(h, &pool);
}

static int holders_peak(int device, cci_report_holders *h)
{
    memset(h, 0, sizeof *h);
    peak_entry top[PEAK_TOP];
    pthread_mutex_lock(&lock);
    struct device_track *t = &dev[device];
    size_t n = t->kept ? t->nkept : 0;
    memcpy(top, t->top, n * sizeof top[0]);
    h->valid = t->kept;
    h->reserved = t->kept_reserved;
    h->bytes = t->kept_bytes;
    h->blocks = t->kept_blocks;
    pthread_mutex_unlock(&lock);
    if (!n)
        return 0;
    if (!(h->list = calloc(n, sizeof *h->list)))
        return -1;
    text_pool pool = {0};
    h->n = n;
    for (size_t i = 0; i < n; i++) {
        h->list[i] = (cci_report_holder){.bytes = top[i].bytes, .blocks = top[i].blocks, .oldest_age_s = -1};
        symbolize(top[i].site, &h->list[i], &pool);
    }
    return finish(h, &pool);
}

void cci_callsites_fill(cci_report_snapshot *s)
{
    if (!cci__stacks_depth)
        return;
    for (int i = 0; i < s->ndevices; i++) {
        cci_report_device *d = &s->devices[i];
        if ((unsigned)d->device >= CCI_PL_MAX_DEVICES)
            continue;
        d->stacks = cci__stacks_depth;
        pthread_mutex_lock(&lock);
        d->allocations = allocations;
        d->dropped = dropped;
        pthread_mutex_unlock(&lock);
        if (holders_now(d->device, &d->holders_now, &d->block_sites, &d->nblock_sites) != 0 ||
            holders_peak(d->device, &d->holders_peak) != 0)
            cci_log(CCI_LOG_WARNING, "report: out of host memory while naming call sites; holders left out");
    }
}

int cci_callsites_holders_now(int device, cci_report_holders *out)
{
    memset(out, 0, sizeof *out);
    if (!cci__stacks_depth || (unsigned)device >= CCI_PL_MAX_DEVICES)
        return -1;
    return holders_now(device, out, NULL, NULL);
}
