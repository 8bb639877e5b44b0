// SPDX-License-Identifier: MIT
// Read-only views of an allocator: layout copies for reports, and the whole-structure invariant
// check that the model tests run after every operation.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator_impl.h"
#include "tcache.h"

static int max_free(cci_block *b, void *ud)
{
    size_t *m = ud;
    if (b->size > *m)
        *m = b->size;
    return 0;
}

size_t cci__largest_free(cci_allocator *a)
{
    size_t m = 0;
    cci_free_set_walk(&a->free_set[0], max_free, &m);
    cci_free_set_walk(&a->free_set[1], max_free, &m);
    return m;
}

int cci__layout_fill(cci_allocator *a, cci_layout *out)
{
    memset(out, 0, sizeof *out);
    size_t nblocks = 0;
    for (size_t i = 0; i < a->nsegs; i++)
        for (cci_block *b = a->segs[i]->first; b; b = b->next)
            nblocks++;
    out->segments = calloc(a->nsegs ? a->nsegs : 1, sizeof *out->segments);
    out->block_storage = calloc(nblocks ? nblocks : 1, sizeof *out->block_storage);
    if (!out->segments || !out->block_storage) {
        cci_layout_free(out);
        return -1;
    }
    cci_block_desc *d = out->block_storage;
    for (size_t i = 0; i < a->nsegs; i++) {
        cci_segment *s = a->segs[i];
        cci_segment_desc *sd = &out->segments[i];
        *sd = (cci_segment_desc){s->addr, s->size, s->stream, s->small, 0, d};
        for (cci_block *b = s->first; b; b = b->next, sd->nblocks++)
            *d++ = (cci_block_desc){b->addr, b->size, b->requested,
                                    b->state == BLOCK_RETIRING ? BLOCK_UNMAPPED : b->state};
    }
    out->nsegments = a->nsegs;
    out->stats = a->st;
    out->stats.largest_free_block = cci__largest_free(a);
    return 0;
}

int cci_layout_take(cci_allocator *a, cci_layout *out)
{
    cci__lock(a);
    cci__tc_drain_all(a);  // cached blocks are free: the layout shows them merged, as they will be
    int rc = cci__layout_fill(a, out);
    if (rc == 0)
        cci_backend_costs(a->be, a->device, &out->stats);  // (not at every peak's picture)
    cci__unlock(a);
    return rc;
}

int cci_layout_take_peak(cci_allocator *a, cci_layout *out)
{
    cci__lock(a);
    int rc = -1;
    if (a->have_peak) {
        cci_layout *p = &a->peak;
        size_t nblocks = 0;
        for (size_t i = 0; i < p->nsegments; i++)
            nblocks += p->segments[i].nblocks;
        *out = *p;
        out->segments = malloc((p->nsegments ? p->nsegments : 1) * sizeof *out->segments);
        out->block_storage = malloc((nblocks ? nblocks : 1) * sizeof *out->block_storage);
        if (out->segments && out->block_storage) {
            memcpy(out->block_storage, p->block_storage, nblocks * sizeof *out->block_storage);
            for (size_t i = 0; i < p->nsegments; i++) {
                out->segments[i] = p->segments[i];
                out->segments[i].blocks = out->block_storage + (p->segments[i].blocks - p->block_storage);
            }
            rc = 0;
        } else {
            cci_layout_free(out);
        }
    }
    cci__unlock(a);
    return rc;
}

void cci_layout_free(cci_layout *l)
{
    free(l->segments);
    free(l->block_storage);
    l->segments = NULL;
    l->block_storage = NULL;
    l->nsegments = 0;
}

// ---- invariant check ----------------------------------------------------------------------

struct tree_count {
    size_t n;
    int small;
    int bad;
    const cci_block *last;
};

static int count_tree(cci_block *b, void *ud)
{
    struct tree_count *t = ud;
    t->n++;
    if (b->state != BLOCK_FREE || b->small != t->small)
        t->bad = 1;
    if (t->last && !(t->last->stream < b->stream ||
                     (t->last->stream == b->stream &&
                      (t->last->size < b->size || (t->last->size == b->size && t->last->addr < b->addr)))))
        t->bad = 2;
    t->last = b;
    return 0;
}

static int fail(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return -1;
}


int cci_allocator_check(cci_allocator *a, char *msg, size_t len)
{
    cci__lock(a);
    cci__tc_drain_all(a);
    int rc = 0;
    // Recomputed counters, per pool index (1 small, 2 large).
    int64_t seg[3] = {0}, reserved[3] = {0}, alloc[3] = {0}, alloc_b[3] = {0}, active[3] = {0},
            active_b[3] = {0}, split[3] = {0}, split_b[3] = {0}, req[3] = {0};
    size_t nfree[2] = {0}, nlive = 0, npend = 0;
    for (size_t i = 0; i < a->nsegs && !rc; i++) {
        cci_segment *s = a->segs[i];
        int p = pool_index(s->small);
        if (i && a->segs[i - 1]->addr + a->segs[i - 1]->size > s->addr)
            rc = fail(msg, len, "segments %zu and %zu overlap", i - 1, i);
        seg[p]++;
        // An expandable segment reserves only its mapped pages: its blocks other than UNMAPPED.
        reserved[p] += (int64_t)(s->vmm ? s->vmm->mapped : s->size);
        size_t mapped_blocks = 0;
        uintptr_t expect = s->addr;
        const cci_block *prev = NULL;
        for (cci_block *b = s->first; b && !rc; prev = b, b = b->next) {
            if (b->addr != expect || b->prev != prev || b->seg != s || b->small != s->small)
                rc = fail(msg, len, "block %#lx breaks the chain of segment %#lx", (unsigned long)b->addr,
                          (unsigned long)s->addr);
            else if (b->addr % 512 || b->size % 512 || !b->size)
                rc = fail(msg, len, "block %#lx size %zu is not 512-aligned", (unsigned long)b->addr, b->size);
            else if (b->state == BLOCK_FREE && prev && prev->state == BLOCK_FREE)
                rc = fail(msg, len, "free blocks %#lx and %#lx were not merged", (unsigned long)prev->addr,
                          (unsigned long)b->addr);
            else if (b->state == BLOCK_UNMAPPED && (!s->vmm || (prev && prev->state == BLOCK_UNMAPPED)))
                rc = fail(msg, len, "unmapped block %#lx outside an expandable segment or not merged",
                          (unsigned long)b->addr);
            else if (b->state == BLOCK_RECLAIMING)
                rc = fail(msg, len, "block %#lx is still being reclaimed", (unsigned long)b->addr);
            expect = b->addr + b->size;
            int split_seg = b->prev || b->next;
            if (b->state != BLOCK_UNMAPPED && b->state != BLOCK_RETIRING)
                mapped_blocks += b->size;
            if (b->state == BLOCK_UNMAPPED || (b->state == BLOCK_RETIRING && s->vmm)) {
                // address space only: in neither the free set nor the live map
            } else if (b->state == BLOCK_FREE) {
                nfree[s->small]++;
                if (cci_free_set_lower_bound(&a->free_set[s->small], b->stream, b->size, b->addr) != b)
                    rc = fail(msg, len, "free block %#lx missing from its free set", (unsigned long)b->addr);
                if (split_seg) {
                    split[p]++;
                    split_b[p] += (int64_t)b->size;
                }
            } else {
                if (cci_live_find(&a->live, b->addr) != b)
                    rc = fail(msg, len, "live block %#lx missing from the live map", (unsigned long)b->addr);
                nlive++;
                active[p]++;
                active_b[p] += (int64_t)b->size;
                if (b->state == BLOCK_ALLOCATED) {
                    alloc[p]++;
                    alloc_b[p] += (int64_t)b->size;
                    req[p] += (int64_t)b->requested;
                    if (b->requested > b->size)
                        rc = fail(msg, len, "block %#lx holds less than was requested", (unsigned long)b->addr);
                } else {
                    npend++;
                }
            }
        }
        if (!rc && expect != s->addr + s->size)
            rc = fail(msg, len, "blocks of segment %#lx do not cover it", (unsigned long)s->addr);
        // Free bytes at either side of an unmapped hole lie in partly used pages, so the mapped
        // pages are at least the bytes of the mapped blocks, and never a page more per block.
        if (!rc && s->vmm && (s->vmm->mapped < mapped_blocks || s->vmm->mapped % s->vmm->page))
            rc = fail(msg, len, "expandable segment %#lx: %zu bytes mapped for %zu bytes of blocks",
                      (unsigned long)s->addr, s->vmm->mapped, mapped_blocks);
    }
    for (int small = 0; small < 2 && !rc; small++) {
        struct tree_count t = {0, small, 0, NULL};
        cci_free_set_walk(&a->free_set[small], count_tree, &t);
        if (t.bad || t.n != nfree[small])
            rc = fail(msg, len, "free set of the %s pool is inconsistent (%zu in set, %zu free blocks, code %d)",
                      small ? "small" : "large", t.n, nfree[small], t.bad);
    }
    if (!rc && (a->live.count != nlive || npend != a->pend_count + a->fenced_count))
        rc = fail(msg, len, "live map holds %zu blocks, layout %zu; pending %zu vs %zu deferred + %zu fenced",
                  a->live.count, nlive, npend, a->pend_count, a->fenced_count);
    struct {
        const char *name;
        const cci_stat *st;
        const int64_t *v;
    } checks[] = {
        {"segment", a->st.segment, seg},
        {"reserved_bytes", a->st.reserved_bytes, reserved},
        {"allocation", a->st.allocation, alloc},
        {"allocated_bytes", a->st.allocated_bytes, alloc_b},
        {"active", a->st.active, active},
        {"active_bytes", a->st.active_bytes, active_b},
        {"inactive_split", a->st.inactive_split, split},
        {"inactive_split_bytes", a->st.inactive_split_bytes, split_b},
        {"requested_bytes", a->st.requested_bytes, req},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0] && !rc; i++) {
        const int64_t *v = checks[i].v;
        for (int p = 1; p <= 2 && !rc; p++)
            if (checks[i].st[p].current != v[p])
                rc = fail(msg, len, "%s.%s: counter %lld, recomputed %lld", checks[i].name,
                          p == 1 ? "small_pool" : "large_pool", (long long)checks[i].st[p].current,
                          (long long)v[p]);
        if (!rc && checks[i].st[0].current != v[1] + v[2])
            rc = fail(msg, len, "%s.all is not the sum of its pools", checks[i].name);
    }
    cci__unlock(a);
    return rc;
}
