// SPDX-License-Identifier: MIT
// The recorder's writer thread (see trace_record.c): the only code that writes the trace file.
// It owns every chunk's `flushed` mark, converts raw times to nanoseconds and writes records in
// the file's little-endian layout.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "trace_bin.h"
#include "trace_record_impl.h"

// ---- clock --------------------------------------------------------------------------------

// The TSC is a usable clock only when its rate is constant and it keeps counting in sleep
// states; otherwise fall back to the system clock.
int cci__tsc_invariant(void)
{
#if HAVE_TSC
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[4096];
    int ok = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            ok = strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
            break;
        }
    fclose(f);
    return ok;
#else
    return 0;
#endif
}

void cci__calibrate(void)
{
    if (!cci__hot.use_tsc) {
        cci__rec.ns_per_raw = 1.0;
        return;
    }
    uint64_t m;
    while ((m = cci__mono_ns()) - cci__rec.mono0 < 1000000)  // at least 1 ms, or the rate is noise
        ;
    uint64_t r = cci__now_raw();
    cci__rec.ns_per_raw =
        r > cci__rec.raw0 ? (double)(m - cci__rec.mono0) / (double)(r - cci__rec.raw0) : 1.0;
}

// The writer's timed waits use the monotonic clock: a wall-clock step must not stall flushing.
void cci__init_cond(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cci__rec.qcond, &ca);
    pthread_condattr_destroy(&ca);
}

// ---- writer thread ------------------------------------------------------------------------

int cci__write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void write_chunk(chunk *c, uint8_t *stage)
{
    uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
    if (n <= c->flushed)
        return;
    size_t k = 0;
    for (uint32_t i = c->flushed; i < n; i++, k++) {
        const uint64_t *w = c->w[i];
        uint64_t t =
            w[0] > cci__rec.raw0 ? (uint64_t)((double)(w[0] - cci__rec.raw0) * cci__rec.ns_per_raw) : 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        // The native words are the file's words already (see trace_bin.h); only time changes.
        uint64_t out[6] = {t, w[1], w[2], w[3], w[4], w[5]};
        memcpy(stage + k * CCI_TBIN_RECORD_SIZE, out, sizeof out);
#else
        cci_tbin_record r = {
            .time_ns = t, .seq = w[1], .addr = w[2], .stream = w[3], .size = w[4],
            .requested = w[5] & CCI_TBIN_REQUEST_MAX,
            .action = (uint8_t)(w[5] >> 48), .device = (uint8_t)(w[5] >> 56),
        };
        cci_tbin_encode_record(stage + k * CCI_TBIN_RECORD_SIZE, &r);
#endif
    }
    if (cci__write_all(cci__rec.fd, stage, k * CCI_TBIN_RECORD_SIZE) == 0) {
        atomic_fetch_add(&cci__rec.written, k);
    } else {
        atomic_fetch_add(&cci__rec.write_dropped, k);
        if (!cci__rec.write_warned++)
            cci_log(CCI_LOG_WARNING, "CCI_TRACE: writing %s failed (%s); the trace will be incomplete",
                    cci__rec.path, strerror(errno));
    }
    c->flushed = n;
}

static void scan_partial(uint8_t *stage)
{
    pthread_mutex_lock(&cci__rec.reglock);
    for (tbuf *t = cci__rec.tbufs; t; t = t->next)
        write_chunk(atomic_load_explicit(&t->cur, memory_order_acquire), stage);
    pthread_mutex_unlock(&cci__rec.reglock);
}

static void deadline(struct timespec *ts, uint64_t ns_from_now)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    uint64_t ns = (uint64_t)ts->tv_nsec + ns_from_now;
    ts->tv_sec += (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

void *cci__writer_main(void *arg)
{
    uint8_t *stage = arg;
    struct timespec ts;
    pthread_mutex_lock(&cci__rec.qlock);
    // Nothing is written before the clock rate is known, so every time in the file is final.
    deadline(&ts, CALIBRATE_NS);
    while (!cci__rec.stopping && pthread_cond_timedwait(&cci__rec.qcond, &cci__rec.qlock, &ts) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&cci__rec.qlock);
    cci__calibrate();
    uint64_t last_scan = 0;
    pthread_mutex_lock(&cci__rec.qlock);
    for (;;) {
        if (!cci__rec.stopping && !cci__rec.qhead) {
            deadline(&ts, SCAN_NS);
            pthread_cond_timedwait(&cci__rec.qcond, &cci__rec.qlock, &ts);
        }
        chunk *list = cci__rec.qhead;
        cci__rec.qhead = cci__rec.qtail = NULL;
        cci__rec.qlen = 0;
        int stopping = cci__rec.stopping;
        pthread_mutex_unlock(&cci__rec.qlock);
        while (list) {
            chunk *next = list->next;
            write_chunk(list, stage);
            atomic_store_explicit(&list->n, 0, memory_order_relaxed);
            list->flushed = 0;
            pthread_mutex_lock(&cci__rec.qlock);
            list->next = cci__rec.freelist;
            cci__rec.freelist = list;
            pthread_mutex_unlock(&cci__rec.qlock);
            list = next;
        }
        uint64_t now = cci__mono_ns();
        if (stopping || now - last_scan >= SCAN_NS) {
            scan_partial(stage);
            last_scan = now;
        }
        pthread_mutex_lock(&cci__rec.qlock);
        if (stopping && !cci__rec.qhead)
            break;
    }
    pthread_mutex_unlock(&cci__rec.qlock);
    free(stage);
    return NULL;
}
