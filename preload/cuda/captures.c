// SPDX-License-Identifier: MIT
// Capture tracking: the count of captures underway, the capture gate, and the driver's answer
// about one stream.
//
// Why count captures instead of asking cudaStreamIsCapturing on every call: the question costs a
// runtime call per allocation, and programs capture rarely. Counting the captures begun through
// the runtime's entry points and the driver's cuStreamBeginCapture[ToGraph] (intercept_driver.c)
// keeps the fast path at one relaxed load; only while the count is non-zero do we ask the runtime
// about the stream at hand.
#include "captures.h"

#include <pthread.h>
#include <sched.h>

#include "real.h"

_Atomic int cci__captures;
_Atomic int cci__capture_unseen_possible;

// The newest driver whose capture begins are all wrapped (intercept_driver.c, hooks_runtime.c):
// CUDA 13.0. A newer one may begin captures that no count shows (13.3's
// cuStreamBeginRecaptureToGraph), so its stream-ordered allocations ask the stream every time. A
// driver that cannot tell its version is taken as newer.
#define NEWEST_KNOWN_DRIVER 13000

void cci_capture_note_driver(void)
{
    const cci_real_driver *t = cci_real_drv();
    int v = 0;
    int unknown = !t->cuDriverGetVersion || t->cuDriverGetVersion(&v) != CUDA_SUCCESS;
    atomic_store_explicit(&cci__capture_unseen_possible, unknown || v > NEWEST_KNOWN_DRIVER,
                          memory_order_relaxed);
}

// The capture gate: a capture is counted before it begins, inside the gate, so a background
// thread that checked the count inside the gate (the fence watcher) cannot ask a stream the
// moment a capture begins on it (a question to a capturing stream breaks the capture). Program
// threads do not take it: their own calls never race their own begins.
static pthread_mutex_t capture_gate = PTHREAD_MUTEX_INITIALIZER;
// Its shared side (cci_capture_gate_share): holders of it run side by side, and only a capture's
// begin waits for them all. `closing` is set while a begin waits: a new holder backs off (seq_cst
// on both sides, so either the holder sees `closing` or the begin sees the holder).
static _Atomic int sharers;
static _Atomic int closing;

int cci_capture_gate_enter(void)
{
    pthread_mutex_lock(&capture_gate);
    if (!cci_capture_maybe_active())
        return 1;
    pthread_mutex_unlock(&capture_gate);
    return 0;
}

void cci_capture_gate_leave(void)
{
    pthread_mutex_unlock(&capture_gate);
}

int cci_capture_gate_share(void)
{
    atomic_fetch_add(&sharers, 1);
    if (!atomic_load(&closing) && atomic_load(&cci__captures) == 0)
        return 1;
    atomic_fetch_sub_explicit(&sharers, 1, memory_order_release);
    return 0;
}

void cci_capture_gate_unshare(void)
{
    atomic_fetch_sub_explicit(&sharers, 1, memory_order_release);
}

static void capture_count(int n)
{
    pthread_mutex_lock(&capture_gate);
    if (n > 0) {
        // A begin: the shared holders (a record or two, microseconds each) leave first.
        atomic_store(&closing, 1);
        for (unsigned spins = 1; atomic_load(&sharers) != 0; spins++)
            if (spins % 64 == 0)
                sched_yield();
    }
    atomic_fetch_add(&cci__captures, n);
    atomic_store(&closing, 0);
    pthread_mutex_unlock(&capture_gate);
}

// Counted before the real begin (the stream rule has switched already: no synchronisation is
// possible during a capture), inside the gate. A begin that failed is taken back.
void cci_capture_count_begin(void)
{
    capture_count(1);
}

void cci_capture_begin_failed(void)
{
    capture_count(-1);
}

int cci_stream_driver_capturing(CUstream s, int ptsz)
{
    const cci_real_driver *t = cci_real_drv();
    CUresult (*is)(CUstream, CUstreamCaptureStatus *) = ptsz ? t->cuStreamIsCapturing_ptsz : t->cuStreamIsCapturing;
    CUstreamCaptureStatus st = 0;
    if (!is || is(s, &st) != CUDA_SUCCESS)
        return -1;
    return st != 0;
}

void cci_capture_ended(void)
{
    int n = atomic_load(&cci__captures);
    while (n > 0 && !atomic_compare_exchange_weak(&cci__captures, &n, n - 1))
        ;
}

void cci_streams_atfork_child(void)
{
    pthread_mutex_init(&capture_gate, NULL);
    atomic_store(&sharers, 0);
    atomic_store(&closing, 0);
    atomic_store(&cci__captures, 0);
}
