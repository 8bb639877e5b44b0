// SPDX-License-Identifier: MIT
// One entry point for every trace ccreplay reads: decompression and format detection by content,
// and the conversion of a PyTorch memory snapshot into events (the same mapping as
// scripts/snapshot2trace.py, so both routes replay identically).
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef CCI_HAVE_LZMA
#include <lzma.h>
#endif
#ifdef CCI_HAVE_ZLIB
#include <zlib.h>
#endif

#include "pickle_reader.h"
#include "trace.h"
#include "trace_bin.h"

// Resource bounds for untrusted input (docs/reliability.md lists them):
// - A decompression bomb must fail with a message, not take the machine's memory.
#define MAX_DECOMPRESSED ((size_t)16 << 30)
// - A pipe, FIFO or device (ccreplay /dev/zero) has no size to trust: its reading stops here. A
//   regular file may grow while it is read by at most as much again.
#define MAX_STREAM_INPUT ((size_t)1 << 30)
// The format is known from the first bytes: the first read takes at most SNIFF_BYTES, and once
// SNIFF_MIN bytes (the longest magic) are in, an input that starts no known format is refused.
#define SNIFF_BYTES ((size_t)64 << 10)
#define SNIFF_MIN 16
// - The snapshot-to-trace step may examine at most this many values per byte of (decompressed)
//   pickle. Each value a writer emits costs at least one byte, so a real snapshot, in which every
//   event and every device trace is its own object, stays under 1; only memo references that share
//   one container many times (an exponential expansion: 80 KB into 400 M events) go past it.
#define MAX_VALUES_PER_BYTE 1

typedef struct buffer {
    uint8_t *p;
    size_t n, cap;
} buffer;

static int buf_reserve(buffer *b, size_t extra)
{
    if (b->cap - b->n >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 64 << 10;
    while (cap - b->n < extra)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

// Room to ask for before each decompression round: it grows with what came out so far (a small
// input costs kilobytes, not the 4 MiB a fixed step reserved: the fuzz targets ran at a tenth of
// their speed on that), up to 4 MiB steps for real snapshots.
static size_t next_room(const buffer *b)
{
    size_t room = b->n < (64 << 10) ? (64 << 10) : b->n;
    return room > (4 << 20) ? (4 << 20) : room;
}

static const uint8_t XZ_MAGIC[6] = {0xfd, '7', 'z', 'X', 'Z', 0};
static const uint8_t GZ_MAGIC[2] = {0x1f, 0x8b};
static const char TEXT_MAGIC[] = "# cci-text-trace";

// A zlib header: deflate with a window of at most 32 KiB, no preset dictionary, and the check
// bits that make the two bytes a multiple of 31 (RFC 1950).
static int is_zlib(const uint8_t *p, size_t n)
{
    return n >= 2 && (p[0] & 0x0f) == 8 && (p[0] >> 4) <= 7 && !(p[1] & 0x20) && ((p[0] << 8) | p[1]) % 31 == 0;
}

// Protocol 2+ pickles start with PROTO and its number; 0 and 1 with whatever builds the first
// value (GLOBAL included, so that a malicious old-protocol pickle is named as such).
static int is_pickle(const uint8_t *p, size_t n)
{
    if (n >= 2 && p[0] == 0x80)
        return p[1] >= 2 && p[1] <= 5;
    return n >= 1 && p[0] && strchr("(}])cNIJKLMFGSVXTUBC", p[0]) != NULL;
}

// The formats recognised from the first bytes (docs/trace-format.md, docs/text-trace-format.md):
// 1 when `p` may start a trace ccreplay reads. A prefix shorter than a magic matches when it
// agrees as far as it goes (a complete input that short is refused by the reader later).
static int prefix_of(const uint8_t *p, size_t n, const void *magic, size_t m)
{
    return !memcmp(p, magic, n < m ? n : m);
}

static int looks_like_trace(const uint8_t *p, size_t n)
{
    if (n == 0)
        return 1;  // empty: the reader says so
    return prefix_of(p, n, XZ_MAGIC, sizeof XZ_MAGIC) || prefix_of(p, n, GZ_MAGIC, sizeof GZ_MAGIC) ||
           is_zlib(p, n) || prefix_of(p, n, CCI_TBIN_MAGIC, 8) || prefix_of(p, n, TEXT_MAGIC, sizeof TEXT_MAGIC - 1) ||
           is_pickle(p, n);
}

static int decompress_xz(const char *path, const buffer *in, buffer *out, char *err, size_t errlen)
{
#ifdef CCI_HAVE_LZMA
    lzma_stream s = LZMA_STREAM_INIT;
    if (lzma_stream_decoder(&s, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) {
        snprintf(err, errlen, "%s: cannot start the xz decoder", path);
        return -1;
    }
    s.next_in = in->p;
    s.avail_in = in->n;
    lzma_ret rc = LZMA_OK;
    if (in->n < MAX_DECOMPRESSED / 32)
        buf_reserve(out, in->n * 32);  // snapshots compress ~25:1; fewer copies while growing
    while (rc == LZMA_OK) {
        if (out->n > MAX_DECOMPRESSED || buf_reserve(out, next_room(out))) {
            rc = LZMA_MEM_ERROR;
            break;
        }
        s.next_out = out->p + out->n;
        s.avail_out = out->cap - out->n;
        rc = lzma_code(&s, LZMA_FINISH);
        out->n = out->cap - s.avail_out;
    }
    lzma_end(&s);
    if (rc == LZMA_STREAM_END)
        return 0;
    snprintf(err, errlen, "%s: %s", path,
             rc == LZMA_BUF_ERROR ? "xz data is truncated"
             : rc == LZMA_MEM_ERROR ? "xz data decompresses to more than fits in memory (or over 16 GiB)"
                                    : "xz data is corrupt");
    return -1;
#else
    (void)in;
    (void)out;
    snprintf(err, errlen, "%s: is xz-compressed, but this ccreplay was built without liblzma "
             "(install liblzma-dev and rebuild, or decompress it with 'xz -d' first)", path);
    return -1;
#endif
}

// gzip (zlib = 0) or a bare zlib stream (zlib = 1, as Python's zlib.compress writes it).
static int decompress_gz(const char *path, const buffer *in, buffer *out, char *err, size_t errlen, int zlib)
{
#ifdef CCI_HAVE_ZLIB
    z_stream z = {0};
    if (inflateInit2(&z, zlib ? 15 : 15 + 16) != Z_OK) {
        snprintf(err, errlen, "%s: cannot start the gzip decoder", path);
        return -1;
    }
    size_t pos = 0;
    int rc = Z_OK;
    if (in->n < MAX_DECOMPRESSED / 16)
        buf_reserve(out, in->n * 16);
    const char *why = NULL;
    for (;;) {
        if (out->n > MAX_DECOMPRESSED || buf_reserve(out, next_room(out))) {
            why = "gzip data decompresses to more than fits in memory (or over 16 GiB)";
            break;
        }
        size_t chunk = in->n - pos > (1u << 30) ? (1u << 30) : in->n - pos;
        z.next_in = in->p + pos;
        z.avail_in = (uInt)chunk;
        z.next_out = out->p + out->n;
        z.avail_out = (uInt)((out->cap - out->n) > (1u << 30) ? (1u << 30) : out->cap - out->n);
        uInt before_out = z.avail_out;
        rc = inflate(&z, Z_NO_FLUSH);
        pos += chunk - z.avail_in;
        out->n += before_out - z.avail_out;
        if (rc == Z_STREAM_END) {
            // gzip allows several members back to back (e.g. files joined with cat).
            if (pos == in->n || zlib)
                break;
            if (in->n - pos < 2 || memcmp(in->p + pos, GZ_MAGIC, 2) != 0)
                break;  // trailing garbage after a complete member: ignored, as gzip does
            inflateReset(&z);
            continue;
        }
        if (rc == Z_BUF_ERROR && pos == in->n) {
            why = "gzip data is truncated";
            break;
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR) {
            why = "gzip data is corrupt";
            break;
        }
    }
    inflateEnd(&z);
    if (!why)
        return 0;
    snprintf(err, errlen, "%s: %s", path, why);
    return -1;
#else
    (void)in;
    (void)out;
    (void)zlib;
    snprintf(err, errlen, "%s: is gzip- or zlib-compressed, but this ccreplay was built without zlib "
             "(install zlib1g-dev and rebuild, or decompress it with 'gzip -d' first)", path);
    return -1;
#endif
}

// ---- snapshots ----------------------------------------------------------------------------

static const struct {
    const char *name;
    int action;
} snapshot_actions[] = {
    {"alloc", CCI_EV_ALLOC},
    {"free_requested", CCI_EV_FREE_REQUESTED},
    {"free_completed", CCI_EV_FREE_COMPLETED},
    {"segment_alloc", CCI_EV_SEGMENT_ALLOC},
    {"segment_free", CCI_EV_SEGMENT_FREE},
    // Pages mapped into and out of an expandable segment: their own kinds, so a reader can tell
    // address space (segment_alloc) from mapped memory (reserved).
    {"segment_map", CCI_EV_SEGMENT_MAP},
    {"segment_unmap", CCI_EV_SEGMENT_UNMAP},
    {"oom", CCI_EV_OOM},
};

static int snapshot_action(const cci_pv *a)
{
    if (!a || a->type != CCI_PV_STR)
        return -1;
    for (size_t i = 0; i < sizeof snapshot_actions / sizeof snapshot_actions[0]; i++)
        if (strlen(snapshot_actions[i].name) == a->s.n && !memcmp(snapshot_actions[i].name, a->s.p, a->s.n))
            return snapshot_actions[i].action;
    return -1;
}

static int is_list(const cci_pv *v) { return v && (v->type == CCI_PV_LIST || v->type == CCI_PV_TUPLE); }

// Charges `n` examined values against the budget; one line in err when it runs out.
static int spend(const char *path, uint64_t *budget, size_t n, uint64_t cap, char *err, size_t errlen)
{
    if (*budget >= n) {
        *budget -= n;
        return 0;
    }
    snprintf(err, errlen, "%s: refusing a snapshot that expands past %llu values (%d per pickle byte): "
             "its memo references share containers, which no memory snapshot does",
             path, (unsigned long long)cap, MAX_VALUES_PER_BYTE);
    return -1;
}

static int snapshot_to_trace(const char *path, const cci_pv *root, size_t pickle_bytes, cci_trace *t, char *err,
                             size_t errlen)
{
    // Every list element visited and every item of every event dict (each lookup scans them) is
    // charged: the work and the events produced are then linear in the input's size.
    const uint64_t cap = (uint64_t)pickle_bytes * MAX_VALUES_PER_BYTE;
    uint64_t budget = cap;
    static const char *const fields[] = {"addr", "size", "stream"};
    if (!root || root->type != CCI_PV_DICT) {
        snprintf(err, errlen, "%s: not a memory snapshot: top level is a %s, not a dict", path,
                 cci_pv_type_name(root));
        return -1;
    }
    const cci_pv *traces = cci_pv_get(root, "device_traces");
    if (!traces) {
        snprintf(err, errlen, "%s: not a memory snapshot: no 'device_traces' key", path);
        return -1;
    }
    if (!is_list(traces)) {
        snprintf(err, errlen, "%s: not a memory snapshot: 'device_traces' is a %s, not a list", path,
                 cci_pv_type_name(traces));
        return -1;
    }
    const cci_pv *settings = cci_pv_get(root, "allocator_settings");
    const cci_pv *conf = cci_pv_get(settings, "PYTORCH_CUDA_ALLOC_CONF");
    if (conf && conf->type == CCI_PV_STR && (t->config = malloc(conf->s.n + 1)) != NULL) {
        memcpy(t->config, conf->s.p, conf->s.n);
        t->config[conf->s.n] = 0;
    }
    if (spend(path, &budget, traces->c.n, cap, err, errlen))
        return -1;
    uint64_t first_us = UINT64_MAX, last_us = 0;  // the run's span, where events carry time_us
    for (size_t d = 0; d < traces->c.n; d++) {
        const cci_pv *evs = traces->c.v[d];
        if (!is_list(evs)) {
            snprintf(err, errlen, "%s: not a memory snapshot: trace of device %zu is a %s, not a list", path,
                     d, cci_pv_type_name(evs));
            return -1;
        }
        if (spend(path, &budget, evs->c.n, cap, err, errlen))
            return -1;
        for (size_t i = 0; i < evs->c.n; i++) {
            const cci_pv *ev = evs->c.v[i];
            if (ev->type != CCI_PV_DICT) {
                snprintf(err, errlen, "%s: device %zu event %zu: is a %s, not a dict", path, d, i,
                         cci_pv_type_name(ev));
                return -1;
            }
            if (spend(path, &budget, ev->c.n, cap, err, errlen))
                return -1;
            int action = snapshot_action(cci_pv_get(ev, "action"));
            if (action < 0) {
                t->skipped++;  // 'snapshot' markers, user annotations: no allocator change
                continue;
            }
            const cci_pv *f[3];
            for (int k = 0; k < 3; k++) {
                f[k] = cci_pv_get(ev, fields[k]);
                const char *what = !f[k] ? "missing" : f[k]->type != CCI_PV_INT ? "not an integer" : NULL;
                if (!what && k < 2 && !f[k]->is_u64 && f[k]->i < 0)
                    what = "negative";
                if (what) {
                    const cci_pv *a = cci_pv_get(ev, "action");
                    snprintf(err, errlen, "%s: device %zu event %zu (%.*s): '%s' is %s", path, d, i,
                             (int)(a->s.n > 40 ? 40 : a->s.n), a->s.p, fields[k], what);
                    return -1;
                }
            }
            // A stream is a cudaStream_t; stored through a signed integer its bits are the handle.
            cci_trace_event e = {.addr = f[0]->u, .size = f[1]->u, .stream = f[2]->u,
                                 .device = (uint32_t)d, .action = (uint8_t)action};
            if (action == CCI_EV_OOM)
                t->recorded_ooms++;
            const cci_pv *tu = cci_pv_get(ev, "time_us");
            if (tu && tu->type == CCI_PV_INT && (tu->is_u64 || tu->i >= 0)) {
                first_us = tu->u < first_us ? tu->u : first_us;
                last_us = tu->u > last_us ? tu->u : last_us;
            }
            if (cci_trace_push(t, &e) != 0) {
                snprintf(err, errlen, "%s: out of memory after %zu events", path, t->n);
                return -1;
            }
        }
    }
    t->duration_us = first_us != UINT64_MAX && last_us > first_us ? last_us - first_us : 0;
    return 0;
}

static int parse_snapshot(const char *path, const buffer *b, cci_trace *t, char *err, size_t errlen)
{
    const cci_pv *root = NULL;
    char perr[256];
    cci_pickle_doc *doc = cci_pickle_load(b->p, b->n, &root, perr, sizeof perr);
    if (!doc) {
        snprintf(err, errlen, "%s: %s", path, perr);
        return -1;
    }
    memset(t, 0, sizeof *t);
    t->format = "snapshot";
    int rc = snapshot_to_trace(path, root, b->n, t, err, errlen);
    cci_pickle_free(doc);
    if (rc) {
        cci_trace_free(t);
        t->format = "snapshot";
    }
    return rc;
}

static int read_file(const char *path, buffer *b, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: is a directory, not a trace", path);
        close(fd);
        return -1;
    }
    // The first SNIFF_BYTES decide whether to read on: /dev/zero or a stray file is refused after
    // one small read, not after the stream limit.
    size_t want = SNIFF_BYTES;
    size_t limit = (S_ISREG(st.st_mode) ? (size_t)st.st_size : 0) + MAX_STREAM_INPUT;
    int sniffed = 0;
    for (;;) {
        if (!sniffed && b->n >= SNIFF_MIN) {
            sniffed = 1;
            if (!looks_like_trace(b->p, b->n)) {
                snprintf(err, errlen, "%s: file is not a trace: expected a cci binary trace, a cci text trace or a "
                         "pickled PyTorch memory snapshot (plain, gzip, xz or zlib); stopped reading after %zu "
                         "bytes", path, b->n);
                close(fd);
                return -1;
            }
            want = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 1 << 20;
        }
        if (b->n >= limit) {
            snprintf(err, errlen, "%s: more than %zu MiB %s; refusing to read further (save the trace to a "
                     "regular file)", path, limit >> 20,
                     S_ISREG(st.st_mode) ? "and still growing while read" : "from a pipe or device");
            close(fd);
            return -1;
        }
        if (want > limit - b->n)
            want = limit - b->n;
        if (buf_reserve(b, want)) {
            snprintf(err, errlen, "%s: out of memory reading the file", path);
            close(fd);
            return -1;
        }
        size_t room = b->cap - b->n < limit - b->n ? b->cap - b->n : limit - b->n;
        ssize_t r = read(fd, b->p + b->n, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        b->n += (size_t)r;
        if (sniffed)
            want = 1 << 20;
    }
    close(fd);
    return 0;  // shorter than SNIFF_MIN: the reader looks at it as it is
}

// ---- entry points -------------------------------------------------------------------------

int cci_trace_load_mem(const uint8_t *data, size_t len, const char *path, cci_trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    buffer raw = {(uint8_t *)data, len, len}, dec = {0};
    int rc = -1;
    const buffer *b = &raw;
    const char *container = "";
    if (raw.n >= 6 && !memcmp(raw.p, XZ_MAGIC, 6)) {
        if (decompress_xz(path, &raw, &dec, err, errlen) != 0)
            goto out;
        b = &dec;
        container = "xz-compressed ";
    } else if (raw.n >= 2 && !memcmp(raw.p, GZ_MAGIC, 2)) {
        if (decompress_gz(path, &raw, &dec, err, errlen, 0) != 0)
            goto out;
        b = &dec;
        container = "gzip-compressed ";
    } else if (is_zlib(raw.p, raw.n)) {
        if (decompress_gz(path, &raw, &dec, err, errlen, 1) != 0)
            goto out;
        b = &dec;
        container = "zlib-compressed ";
    }
    const char *text_magic = TEXT_MAGIC;
    if (b->n == 0) {
        snprintf(err, errlen, "%s: %sfile is empty, not a trace", path, container);
    } else if (b->n >= 8 && !memcmp(b->p, CCI_TBIN_MAGIC, 8)) {
        rc = cci_trace_parse_bin(b->p, b->n, path, t, err, errlen);
    } else if (b->n >= sizeof TEXT_MAGIC - 1 && !memcmp(b->p, text_magic, sizeof TEXT_MAGIC - 1)) {
        rc = cci_trace_parse_text((const char *)b->p, b->n, path, t, err, errlen);
    } else if (is_pickle(b->p, b->n)) {
        // Protocol 2+ pickles start with PROTO; 0 and 1 with whatever builds the first value
        // (GLOBAL included, so that a malicious old-protocol pickle is named as such).
        rc = parse_snapshot(path, b, t, err, errlen);
    } else {
        snprintf(err, errlen,
                 "%s: %sfile is not a trace: expected a cci binary trace, a cci text trace or a pickled "
                 "PyTorch memory snapshot (plain, gzip, xz or zlib)",
                 path, container);
    }
out:
    free(dec.p);
    return rc;
}

int cci_trace_load(const char *path, cci_trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    buffer raw = {0};
    int rc = read_file(path, &raw, err, errlen) != 0 ? -1 : cci_trace_load_mem(raw.p, raw.n, path, t, err, errlen);
    free(raw.p);
    return rc;
}

int cci_trace_read_text(const char *path, cci_trace *t, char *err, size_t errlen)
{
    int rc = cci_trace_load(path, t, err, errlen);
    if (rc == 0 && strcmp(t->format, "text") != 0) {
        snprintf(err, errlen, "%s: not a cci text trace (it is a %s trace)", path, t->format);
        cci_trace_free(t);
        return -1;
    }
    return rc;
}
