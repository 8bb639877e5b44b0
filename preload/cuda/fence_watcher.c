// SPDX-License-Identifier: MIT
// THE WATCHER: the fences' looks made by a thread of ours, off the program's threads.
//
// Why. A fence passes once its legacy events have passed and every non-blocking stream has run
// its work from before the fence (fence_impl.h). Finding that out costs one driver call per live
// stream (a "look"); under PyTorch (32 idle pool streams) that was ~68 000 questions a resnet
// process, ~1 us each on a busy H100, 90-100 ms of the program's host time, and every question
// was asked by the thread that allocates. The same questions asked from another thread cost that
// thread nothing measurable: a thread asking 33 questions every 200 us (1.36 M a process) beside
// native resnet left its wall time at 0.993x (H100, 2026-11-24, docs/benchmarks.md; 7a332ed).
//
// How. One thread, started at the first fence recorded while more than a few streams are live:
//   1. read the fence clock (`upto`, the last fence recorded): every fence up to it has had its
//      frees issued, so the work queued before those frees is queued by now;
//   2. record a mark (an event) on the legacy stream of every device we hold a context of: it
//      passes after that work on the legacy, blocking and per-thread streams (facts 1 and 3), as
//      each fence's own legacy event does;
//   3. poll the marks, napping between questions (20 us, doubling up to 200 us);
//   4. look at every non-blocking stream and retired event, as a program thread would for a fence
//      numbered `upto` (an idle answer covers every fence up to the clock; a busy stream gets a
//      sweep, and the look for the same `upto` is made again after a nap until the sweep has
//      passed: a new `upto` each time would sweep an always-busy stream anew and never publish);
//   5. publish `upto`: a query or wait of any fence up to it answers at once, without a driver
//      call, and a poll in passing of a later one is left to the watcher (CCI_FENCE_PUT_OFF).
// Ahead of that, whenever a fence has been recorded since its last such look (at a round's start and
// between the polls of step 3), it looks at the streams for the newest fence without sweeping the
// busy ones (cci_cuda_fence_look_ahead): an idle answer then spares the program's own look of that
// stream for every fence up to it, and THE ORDER's question to it. The marks wait for the GPU to
// reach them, milliseconds behind the host under PyTorch; a program thread whose fence's legacy event
// had passed in that time asked every stream itself (~50 000 questions a resnet process; 527bb9b).
// A program thread that needs a fence the watcher has not reached (a miss, a wait) asks as before;
// the watcher only ever answers "passed", for the same reasons a look does.
//
// Captures. Nothing is recorded on a legacy stream or asked of a stream while a capture begun
// through the runtime may be underway: steps 2 and 4 run inside the capture gate (streams.c), where
// such a capture is counted before it begins. A capture begun behind our back (the driver API, a
// static cudart) is not counted; each stream is asked whether it captures before it is queried.
// The thread's calls run in relaxed capture mode, so that another thread's global-mode capture
// never refuses them (a refused call breaks that capture: seen on the H100 before this was so).
//
// Lifetime. The watcher is stopped at exit by an atexit handler registered when it starts, so after
// CUDA's own (it runs before CUDA is torn down). A fork child has no watcher. A device whose
// context goes is neither marked nor asked again (cci_cuda_fence_mark). After repeated errors it
// gives up and the program's threads ask as before.
#include "fence_watcher.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "backend_cuda.h"
#include "fence.h"
#include "log.h"
#include "real.h"
#include "settings.h"
#include "captures.h"

enum { NOT_STARTED, RUNNING, GONE };  // GONE: stopped, gave up, or never to start (switched off)
static _Atomic int state = NOT_STARTED;
static _Atomic int stopping;
static _Atomic int sleeping;  // waits for news on `news`
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t news = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static _Atomic int thread_made;  // `thread` exists and is joined by the stop (once)

#define NAP_MIN_NS 20000
#define NAP_MAX_NS 200000
#define GIVE_UP_ERRORS 16  // rounds in a row that met a driver error

// Sleeps *pause, then doubles it up to NAP_MAX_NS: the next nap of the same wait.
static void nap(long *pause)
{
    struct timespec t = {0, *pause};
    nanosleep(&t, NULL);
    *pause = *pause * 2 > NAP_MAX_NS ? NAP_MAX_NS : *pause * 2;
}

// Sleeps until the clock passes `published` or a stop. 1 to go on, 0 to stop.
static int wait_for_news(unsigned long long published)
{
    pthread_mutex_lock(&lock);
    // Seen asleep before the clock is read again: a record that moved the clock after this read
    // sees `sleeping` (both sequentially consistent) and signals under the lock.
    atomic_store(&sleeping, 1);
    while (!atomic_load(&stopping) && cci_cuda_fence_clock() <= published)
        pthread_cond_wait(&news, &lock);
    atomic_store(&sleeping, 0);
    pthread_mutex_unlock(&lock);
    return !atomic_load(&stopping);
}

typedef struct mark {
    CUevent e;
    int device;
    unsigned gen;
} mark;

// The look ahead (above), when a fence has been recorded since the last one. Watcher thread only.
static unsigned long long looked_ahead;
static void look_ahead(void)
{
    unsigned long long now = cci_cuda_fence_clock();
    if (now <= looked_ahead || !cci_capture_gate_enter())
        return;
    // An error here is the round's to meet and count (its own look asks the same streams).
    (void)cci_cuda_fence_look_ahead(now);
    cci_capture_gate_leave();
    looked_ahead = now;
}

// Steps 2 and 3: 1 every device's mark passed, 0 not now (a capture may be underway), -1 error.
static int marks_passed(void)
{
    mark m[CCI_PL_MAX_DEVICES];
    int n = 0, rc = 1;
    if (!cci_capture_gate_enter())
        return 0;
    for (int d = 0; d < CCI_PL_MAX_DEVICES && rc == 1; d++) {
        if (!cci_cuda_backend_primary(d, 0))
            continue;
        m[n].e = cci_cuda_fence_mark(d, &m[n].gen);
        m[n].device = d;
        if (m[n].e)
            n++;
        else
            rc = -1;
    }
    cci_capture_gate_leave();
    long pause = NAP_MIN_NS;
    for (int i = 0; i < n && rc == 1;) {
        int p = cci_cuda_fence_mark_passed(m[i].device, m[i].e, m[i].gen);
        if (p < 0 || atomic_load(&stopping))
            rc = -1;
        else if (p == 1)
            i++;
        else {
            look_ahead();
            nap(&pause);
        }
    }
    for (int i = 0; i < n; i++)
        cci_cuda_fence_mark_give(m[i].device, m[i].e, m[i].gen);
    return n == 0 && rc == 1 ? -1 : rc;  // no device to mark: nothing can be vouched for
}

// Step 4 (inside the capture gate): 1 every fence up to `upto` passed, 0 not yet, -1 error.
static int look_upto(unsigned long long upto)
{
    if (!cci_capture_gate_enter())
        return 0;
    int rc = cci_cuda_fence_look_upto(upto);
    cci_capture_gate_leave();
    return rc;
}

// The watcher's calls must never meet another thread's global-mode capture: a question from any
// thread while one runs is refused and breaks it (seen on the H100, 2026-11-24, 4687cf3: a capture
// through cudaStreamBeginCapture invalidated while the watcher polled its mark). In relaxed mode, kept
// for the thread's life, they are not refused. 0 when the driver cannot do that.
static int relax(void)
{
    const cci_real_driver *t = cci_real_drv();
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    return t->cuThreadExchangeStreamCaptureMode && t->cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
}

static void *watch(void *unused)
{
    (void)unused;
    if (!relax()) {
        cci_log(CCI_LOG_DEBUG, "fence watcher: the driver cannot relax this thread's capture mode; "
                "the program's threads ask about fences themselves");
        atomic_store(&state, GONE);
        return NULL;
    }
    unsigned long long published = 0;
    // The round's target: kept until it is published, so that a stream always busy (NCCL's)
    // holds it back only until the sweep recorded for it has passed. A new target each time would
    // record a new sweep each time and never publish while fences keep coming.
    unsigned long long target = 0;
    int marked = 0;  // the target's marks have passed
    long pause = NAP_MIN_NS;
    int errors = 0;
    while (wait_for_news(published)) {
        look_ahead();
        if (!target) {
            target = cci_cuda_fence_clock();
            marked = 0;
        }
        int rc = marked ? 1 : marks_passed();
        if (rc == 1) {
            marked = 1;
            rc = look_upto(target);
        }
        if (rc == 1) {
            cci_cuda_fence_publish(target);
            published = target;
            target = 0;
            pause = NAP_MIN_NS;
            errors = 0;
            continue;
        }
        if (rc < 0) {
            target = 0;  // marks and sweeps anew
            if (++errors >= GIVE_UP_ERRORS) {
                cci_log(CCI_LOG_DEBUG, "fence watcher: %d rounds in a row failed; the program's threads "
                        "ask about fences themselves from now on", errors);
                break;
            }
        } else {
            errors = 0;
        }
        nap(&pause);  // a busy stream's sweep, a capture, an error: again a little later
    }
    atomic_store(&state, GONE);
    return NULL;
}

static void start(void)
{
    int expected = NOT_STARTED;
    if (!atomic_compare_exchange_strong(&state, &expected, RUNNING))
        return;
    if (!cci_settings_get()->fence_watcher) {
        atomic_store(&state, GONE);
        return;
    }
    // No signal of the program's is delivered to our thread: it inherits a mask blocking all.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, NULL, watch, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        cci_log(CCI_LOG_DEBUG, "fence watcher: no thread (error %d); the program's threads ask "
                "about fences themselves", rc);
        atomic_store(&state, GONE);
        return;
    }
    atomic_store(&thread_made, 1);
    // After CUDA's own handlers (registered when CUDA started), so it runs before them.
    atexit(cci_fence_watcher_stop);
}

void cci_fence_watcher_news(void)
{
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s == NOT_STARTED) {
        start();
        return;
    }
    if (s == RUNNING && atomic_load(&sleeping)) {
        pthread_mutex_lock(&lock);
        pthread_cond_signal(&news);
        pthread_mutex_unlock(&lock);
    }
}

int cci_fence_watcher_running(void)
{
    return atomic_load_explicit(&state, memory_order_relaxed) == RUNNING;
}

void cci_fence_watcher_stop(void)
{
    if (atomic_exchange(&stopping, 1) || !atomic_exchange(&thread_made, 0))
        return;
    pthread_mutex_lock(&lock);
    pthread_cond_signal(&news);
    pthread_mutex_unlock(&lock);
    // A round ends within a nap and a few driver calls; a driver call that never returns (a hung
    // device) must not hang the program's exit.
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    if (pthread_timedjoin_np(thread, NULL, &until) != 0)
        cci_log(CCI_LOG_DEBUG, "fence watcher: still in a driver call at exit; left running");
    atomic_store(&state, GONE);
}

void cci_fence_watcher_atfork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&news, NULL);
    atomic_store(&sleeping, 0);
    atomic_store(&stopping, 0);
    atomic_store(&thread_made, 0);
    looked_ahead = 0;
    // A child that goes on with CUDA starts a watcher of its own at its first dear fence.
    atomic_store(&state, NOT_STARTED);
}
