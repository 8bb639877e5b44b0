// SPDX-License-Identifier: MIT
// Binary trace coding and reading (docs/trace-format.md).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_bin.h"

_Static_assert(CCI_EV_ALLOC == 0 && CCI_EV_FREE_REQUESTED == 1 && CCI_EV_FREE_COMPLETED == 2 &&
               CCI_EV_SEGMENT_ALLOC == 3 && CCI_EV_SEGMENT_FREE == 4 && CCI_EV_OOM == 5 &&
                   CCI_EV_SEGMENT_MAP == 7 && CCI_EV_SEGMENT_UNMAP == 8,
               "record action codes are the trace actions");

// ---- little-endian coding -----------------------------------------------------------------

void cci_tbin_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t cci_tbin_header_size(size_t config_len)
{
    return (CCI_TBIN_FIXED_HEADER + config_len + 1 + 7) & ~(size_t)7;  // >= 1 NUL after the string
}

void cci_tbin_encode_header(uint8_t *out, const cci_tbin_header *h, const char *config)
{
    size_t size = cci_tbin_header_size(h->config_len);
    memset(out, 0, size);
    memcpy(out, CCI_TBIN_MAGIC, 8);
    put_u32(out + 8, h->version);
    put_u32(out + 12, (uint32_t)size);
    put_u32(out + 16, h->record_size);
    put_u32(out + 20, h->flags);
    cci_tbin_put_u64(out + CCI_TBIN_CAPACITY_OFFSET, h->capacity);
    cci_tbin_put_u64(out + 32, h->start_realtime_ns);
    put_u32(out + 40, h->pid);
    put_u32(out + 44, (uint32_t)h->rank);
    put_u32(out + 48, h->config_len);
    if (h->config_len)
        memcpy(out + CCI_TBIN_FIXED_HEADER, config, h->config_len);
}

void cci_tbin_encode_record(uint8_t out[CCI_TBIN_RECORD_SIZE], const cci_tbin_record *r)
{
    uint64_t req = r->requested > CCI_TBIN_REQUEST_MAX ? CCI_TBIN_REQUEST_MAX : r->requested;
    cci_tbin_put_u64(out, r->time_ns);
    cci_tbin_put_u64(out + 8, r->seq);
    cci_tbin_put_u64(out + 16, r->addr);
    cci_tbin_put_u64(out + 24, r->stream);
    cci_tbin_put_u64(out + 32, r->size);
    cci_tbin_put_u64(out + 40, req | (uint64_t)r->action << 48 | (uint64_t)r->device << 56);
}

void cci_tbin_decode_record(const uint8_t *in, cci_tbin_record *r)
{
    r->time_ns = get_u64(in);
    r->seq = get_u64(in + 8);
    r->addr = get_u64(in + 16);
    r->stream = get_u64(in + 24);
    r->size = get_u64(in + 32);
    uint64_t w = get_u64(in + 40);
    r->requested = w & CCI_TBIN_REQUEST_MAX;
    r->action = (uint8_t)(w >> 48);
    r->device = (uint8_t)(w >> 56);
}

// ---- reader -------------------------------------------------------------------------------

// Threads flush their buffers independently, so records reach the file out of order; the
// per-device event number restores the order the allocator lock imposed.
typedef struct keyed {
    uint64_t key;  // device << 56 | seq
    cci_trace_event ev;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    uint64_t x = ((const keyed *)a)->key, y = ((const keyed *)b)->key;
    return (x > y) - (x < y);
}

#define SEQ_LIMIT (UINT64_C(1) << 56)

int cci_trace_parse_bin(const uint8_t *buf, size_t len, const char *name, cci_trace *t, char *err,
                        size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->format = "binary";
    if (len < 8 || memcmp(buf, CCI_TBIN_MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s: not a cci binary trace (no '%s' magic)", name, CCI_TBIN_MAGIC);
        return -1;
    }
    if (len < CCI_TBIN_FIXED_HEADER) {
        snprintf(err, errlen, "%s: truncated binary trace: header has %zu of %u bytes", name, len,
                 CCI_TBIN_FIXED_HEADER);
        return -1;
    }
    uint32_t version = get_u32(buf + 8), hsize = get_u32(buf + 12), rsize = get_u32(buf + 16);
    uint32_t clen = get_u32(buf + 48);
    if (version != CCI_TBIN_VERSION) {
        snprintf(err, errlen, "%s: binary trace version %u is not supported (this reader knows version %u)",
                 name, version, CCI_TBIN_VERSION);
        return -1;
    }
    if (rsize < CCI_TBIN_RECORD_SIZE || rsize > 4096 || rsize % 8 || hsize % 8 ||
        (uint64_t)clen + CCI_TBIN_FIXED_HEADER >= hsize) {
        snprintf(err, errlen, "%s: malformed binary trace header (header size %u, record size %u, "
                 "configuration length %u)", name, hsize, rsize, clen);
        return -1;
    }
    if (hsize > len) {
        snprintf(err, errlen, "%s: truncated binary trace: header has %zu of %u bytes", name, len, hsize);
        return -1;
    }
    t->capacity = get_u64(buf + CCI_TBIN_CAPACITY_OFFSET);
    if (memchr(buf + CCI_TBIN_FIXED_HEADER, 0, clen)) {
        snprintf(err, errlen, "%s: malformed binary trace header (NUL inside the configuration string)",
                 name);
        return -1;
    }
    t->config = malloc(clen + 1u);
    size_t nrec = (len - hsize) / rsize;
    keyed *k = malloc((nrec ? nrec : 1) * sizeof *k);
    if (!t->config || !k) {
        free(k);
        snprintf(err, errlen, "%s: out of memory reading %zu records", name, nrec);
        goto fail;
    }
    memcpy(t->config, buf + CCI_TBIN_FIXED_HEADER, clen);
    t->config[clen] = 0;
    t->truncated_bytes = (len - hsize) % rsize;
    t->policy_frees = 1;

    size_t n = 0;
    int sorted = 1;
    uint64_t first_ns = UINT64_MAX, last_ns = 0;
    for (size_t i = 0; i < nrec; i++) {
        cci_tbin_record r;
        cci_tbin_decode_record(buf + hsize + i * rsize, &r);
        first_ns = r.time_ns < first_ns ? r.time_ns : first_ns;
        last_ns = r.time_ns > last_ns ? r.time_ns : last_ns;
        if (r.action >= CCI_TBIN_ACTIONS || r.seq >= SEQ_LIMIT) {
            snprintf(err, errlen, "%s: malformed record %zu at byte %zu: %s %llu", name, i,
                     (size_t)hsize + i * rsize,
                     r.action >= CCI_TBIN_ACTIONS ? "unknown action" : "event number",
                     r.action >= CCI_TBIN_ACTIONS ? (unsigned long long)r.action : (unsigned long long)r.seq);
            free(k);
            goto fail;
        }
        keyed *e = &k[n++];
        e->key = (uint64_t)r.device << 56 | r.seq;
        e->ev = (cci_trace_event){.addr = r.addr, .size = r.size, .stream = r.stream,
                                  .device = r.device, .action = r.action};
        // The replay asks for what the program asked for; its own rounding does the rest.
        if (r.action == CCI_EV_ALLOC || r.action == CCI_EV_OOM)
            e->ev.size = r.requested;
        else if (r.action == CCI_EV_FREE_REQUESTED && r.requested <= CCI_FREE_FENCED)
            e->ev.free_mode = (uint8_t)r.requested;
        if (r.action == CCI_TBIN_DEVICE && !t->capacity)
            t->capacity = r.size;
        if (n > 1 && k[n - 2].key > e->key)
            sorted = 0;
    }
    if (!sorted)
        qsort(k, n, sizeof *k, cmp_keyed);
    t->duration_us = last_ns > first_ns && first_ns != UINT64_MAX ? (last_ns - first_ns) / 1000 : 0;

    t->ev = malloc((n ? n : 1) * sizeof *t->ev);
    if (!t->ev) {
        free(k);
        snprintf(err, errlen, "%s: out of memory reading %zu records", name, nrec);
        goto fail;
    }
    t->cap = n ? n : 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t dev = k[i].key >> 56, seq = k[i].key & (SEQ_LIMIT - 1);
        int first = i == 0 || k[i - 1].key >> 56 != dev;
        uint64_t expect = first ? 0 : (k[i - 1].key & (SEQ_LIMIT - 1)) + 1;
        if (!first && seq < expect) {
            snprintf(err, errlen, "%s: malformed binary trace: event %llu of device %llu appears twice", name,
                     (unsigned long long)seq, (unsigned long long)dev);
            free(k);
            goto fail;
        }
        t->missing_events += seq - expect;
        if (k[i].ev.action == CCI_TBIN_DEVICE)
            continue;
        if (k[i].ev.action == CCI_EV_OOM)
            t->recorded_ooms++;
        t->ev[t->n++] = k[i].ev;
    }
    free(k);
    return 0;
fail:
    cci_trace_free(t);
    t->format = "binary";
    return -1;
}
