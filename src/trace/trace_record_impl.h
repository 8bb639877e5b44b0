// SPDX-License-Identifier: MIT
// Internals shared by the recorder (trace_record.c: hot path, buffers, control) and its writer
// thread (trace_writer.c: clock conversion and file output). Not an API.
#ifndef CCI_TRACE_RECORD_IMPL_H
#define CCI_TRACE_RECORD_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

#define CHUNK_RECS 1024u
#define WAKE_CHUNKS 4u            // the writer is woken once per this many full chunks
#define POOL_CHUNKS 16u           // chunks allocated and touched at start, off the hot path
#define SCAN_NS 100000000ull      // partial chunks reach the file at least this often
#define CALIBRATE_NS 50000000ull  // TSC rate measured over this long before the first write

typedef struct chunk {
    struct chunk *next;     // queue or free list, under qlock
    _Atomic uint32_t n;     // records published by the owning thread
    uint32_t flushed;       // records already written: writer thread only
    uint64_t w[CHUNK_RECS][6];  // native words: raw time, seq, addr, stream, size, req|action|device
} chunk;

typedef struct tbuf {
    struct tbuf *next;      // registry, under reglock
    _Atomic(chunk *) cur;
    unsigned gen;           // recording session it belongs to
} tbuf;

typedef struct rec_dev {
    struct rec_dev *next;
    uint64_t seq;           // under the allocator lock of its device
    unsigned gen;           // session that attached it: an allocator attached in an earlier
                            // session keeps that observer, which must stay silent now
    uint8_t device;
} rec_dev;

// Read on every event, written only by start/stop: alone in their cache line, so that the
// writer thread's bookkeeping never invalidates it under the recording threads.
typedef struct cci__rec_hot {
    _Alignas(64) _Atomic int on;
    unsigned gen;           // recording session; thread buffers of older ones are stale
    int use_tsc;
    char pad[64 - 3 * sizeof(int)];
} cci__rec_hot;

typedef struct cci__rec_state {
    pthread_mutex_t lock;   // start / stop / attach
    int fd, writer_running, stopping, capacity_set;
    pthread_t writer;
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    chunk *qhead, *qtail, *freelist;
    unsigned qlen;          // chunks queued since the writer last emptied the queue
    pthread_mutex_t reglock;
    tbuf *tbufs, *retired;
    rec_dev *devs;          // never freed: an allocator may outlive the recording
    uint64_t raw0, mono0;
    double ns_per_raw;
    _Atomic uint64_t written, write_dropped;
    _Atomic uint64_t dropped;
    int write_warned;
    char path[4096];
} cci__rec_state;

extern cci__rec_hot cci__hot;
extern cci__rec_state cci__rec;

static inline uint64_t cci__mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// Raw event time: TSC ticks where the TSC is invariant, else nanoseconds.
static inline uint64_t cci__now_raw(void)
{
#if HAVE_TSC
    if (cci__hot.use_tsc)
        return __rdtsc();
#endif
    return cci__mono_ns();
}

int cci__tsc_invariant(void);
/// Sets cci__rec.ns_per_raw from the time since start (at least 1 ms of it).
void cci__calibrate(void);
/// Initialises cci__rec.qcond for monotonic timed waits.
void cci__init_cond(void);
int cci__write_all(int fd, const void *buf, size_t len);
/// The writer thread; `arg` is its staging buffer (CHUNK_RECS records), freed on return.
void *cci__writer_main(void *arg);

#endif
