// SPDX-License-Identifier: MIT
#include "reporting.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "callsites.h"
#include "history.h"
#include "host_cache.h"
#include "program_vmm.h"
#include "log.h"
#include "real.h"
#include "report.h"
#include "state.h"
#include "trace_record.h"
#include "outside.h"

static _Atomic(cci_report_timeline *) timelines[CCI_PL_MAX_DEVICES];
static _Atomic(cci_history *) histories[CCI_PL_MAX_DEVICES];
static uint64_t history_max = CCI_HISTORY_DEFAULT_MAX;
static double whatif_seconds = CCI_WHATIF_DEFAULT_SECONDS;
static char conf_text[256];
static _Atomic int oom_measured[CCI_PL_MAX_DEVICES];
static char report_pattern[1024];
static char report_format[16];
static int report_off;
static int dump_pipe[2] = {-1, -1};
static int dump_signal;
static struct sigaction previous_action;

// Records this allocator's events when CCI_TRACE asked for it (a no-op otherwise).
void cci_pl_trace_attach(int device, cci_allocator *a)
{
    (void)device;
    if (!cci_trace_active())
        return;
    cci_stats st = {.size = sizeof st};
    cci_alloc_stats(a, &st);
    cci_trace_attach(a, (size_t)st.device_capacity);
}

void cci_pl_report_attach(int device, cci_allocator *a)
{
    if ((unsigned)device >= CCI_PL_MAX_DEVICES)
        return;
    cci_allocator_track_peak(a, 1);
    cci_callsites_attach(device, a);
    cci_report_timeline *tl = cci_report_timeline_create(0, CCI_TIMELINE_CLOCK_MONOTONIC);
    if (tl && cci_report_timeline_attach(tl, a) == 0) {
        // One timeline per allocator for the life of the process, like the allocator itself
        // (state.h): a reset empties the allocator in place and the timeline follows its frees.
        atomic_store(&timelines[device], tl);
    } else if (tl) {
        cci_report_timeline_destroy(tl);
    }
    // Kept like the timeline, for the what-ifs at exit; a bounded buffer, not a growing one.
    cci_stats st;
    cci_alloc_stats(a, &st);
    atomic_store(&histories[device], cci_history_attach(a, whatif_seconds > 0 ? history_max : 0,
                                                        st.device_capacity));
}

// Threads for the replay: it runs after the program's work is done (exit) or while it waits
// for its failure (OOM), so every online CPU may help, up to a point where threads stop paying.
// A fork child of a threaded program starts no thread of ours: it replays on the thread it has
// (only the forking thread exists there, and a thread started from such a child is what
// ThreadSanitizer and some libcs refuse).
static int in_fork_child;

static int replay_jobs(void)
{
    if (in_fork_child)
        return 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

// The exit report's measurement step (the measure step of cci_report_dump_snapshot): each device's history replayed
// under the grid, the current setting and the configurations the advice would name.
static void measure(cci_report_snapshot *s, void *ud)
{
    (void)ud;
    for (int i = 0; i < s->ndevices; i++) {
        cci_report_device *d = &s->devices[i];
        cci_history *h = (unsigned)d->device < CCI_PL_MAX_DEVICES ? atomic_load(&histories[d->device]) : NULL;
        cci_allocator *a = cci_state_allocator_peek(d->device);
        if (!h || !a) {
            snprintf(d->whatif.note, sizeof d->whatif.note, "%s",
                     whatif_seconds <= 0 ? "CCI_WHATIF_SECONDS=0"
                     : !history_max      ? "CCI_HISTORY_MAX=0: no history kept"
                                         : "no history of this device was kept");
            continue;
        }
        char extra[4][192];
        size_t nextra = cci_report_whatif_candidates(d, extra, 4);
        // The device's capacity matters only to a run that came near it (its OOMs and retries
        // flushed the cache); otherwise replays at unlimited capacity leave out the grid's
        // garbage-collection entries, which need one, and take a third of the time.
        uint64_t capacity = d->stats.num_ooms || d->stats.num_alloc_retries ? d->stats.device_capacity : 0;
        cci_history_measure(h, a, conf_text, (const char(*)[192])extra, nextra, capacity, whatif_seconds,
                            replay_jobs(), &d->whatif);
    }
}

// Gathers the allocators and timelines that exist now, in device order.
static int collect(cci_allocator **allocs, cci_report_timeline **tls)
{
    int n = cci_state_device_bound();
    for (int d = 0; d < n; d++) {
        cci_outside_refresh(d);  // other pools' figures as they are now (outside.h)
        allocs[d] = cci_state_allocator_peek(d);
        tls[d] = allocs[d] ? atomic_load(&timelines[d]) : NULL;
    }
    return n;
}

// The test suite's fake CUDA (tests/fake) exports its own inspection functions: a report of a run
// on it names the device as simulated, so nobody takes its figures for a GPU's.
static int simulated_device(void) { return cci_real_dlsym(RTLD_DEFAULT, "fakecu_used_bytes") != NULL; }

// The live dump, the opt-in API's dump and the exit report: one snapshot, the call sites
// (CCI_STACKS) added as plain data, the what-ifs measured when `measure` is given, then printed.
static int dump(const char *pattern, const char *format, int force, cci_report_measure_fn measure)
{
    cci_allocator *allocs[CCI_PL_MAX_DEVICES];
    cci_report_timeline *tls[CCI_PL_MAX_DEVICES];
    int n = collect(allocs, tls);
    cci_report_snapshot s;
    if (cci_report_snapshot_take(&s, allocs, tls, n) != 0) {
        cci_log(CCI_LOG_ERROR, "report: out of host memory while taking the snapshot");
        return -1;
    }
    cci_callsites_fill(&s);   // who holds the memory (CCI_STACKS), as plain data in the snapshot
    if (cci_host_cache_used()) {  // the pinned host cache's section, the whole process's
        s.has_pinned = 1;
        cci_host_cache_stats(&s.pinned);
    }
    if (cci_pvmm_used()) {  // the program's own virtual-memory allocations, every device's
        s.has_program_vmm = 1;
        cci_pvmm_stats(-1, &s.program_vmm);
    }
    if (s.ndevices)           // the backend exists once an allocator does
        cci_report_fill_vmm_pool(&s, cci_cuda_backend());  // pages in the VMM pool, host data only
    if (simulated_device())
        cci_report_set_device_kind(&s, "simulated device (the test suite's fake CUDA: host memory, no GPU)");
    return cci_report_dump_snapshot(&s, pattern, format, force, measure, NULL);
}

int cci_pl_report_dump(const char *path)
{
    return dump(path ? path : report_pattern, path ? NULL : report_format, 1, NULL) < 0 ? -1 : 0;
}

// The top call sites for the OOM block (CCI_STACKS): who filled the device. NULL when stacks
// are off or nothing was recorded; the caller frees the text.
static char *oom_holders_text(int device)
{
    cci_report_holders h;
    char *text = NULL;
    size_t len = 0;
    if (cci_callsites_holders_now(device, &h) != 0)
        return NULL;
    if (cci_report_oom_holders(&h, device, 5, &text, &len) != 0) {
        free(text);
        text = NULL;
    }
    cci_report_holders_free(&h);
    return text;
}

void cci_pl_report_oom(int device, size_t requested)
{
    cci_allocator *a = cci_state_allocator_peek(device);
    if (!a)
        return;
    long long device_free = -1;
    size_t free_b = 0, total_b = 0;
    const cci_real_runtime *rt = cci_real_rt();
    if (rt->cudaMemGetInfo && rt->cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        device_free = (long long)free_b;
    // The first OOM of a device gets the replay's verdict (bounded like the exit's): a program
    // that probes batch sizes by catching OOMs pays for it once, not on every probe.
    char line[512] = "";
    cci_history *h = atomic_load(&histories[device]);
    if (h && !atomic_exchange(&oom_measured[device], 1))
        cci_history_oom_line(h, a, conf_text, whatif_seconds, replay_jobs(), line, sizeof line);
    char *holders = oom_holders_text(device);
    cci_report_oom_extra extra = {.holders = holders, .whatif = line};
    cci_report_oom_ex(STDERR_FILENO, a, atomic_load(&timelines[device]), requested, device_free, &extra);
    free(holders);
}

// ---- the exit report ------------------------------------------------------------------------

// CUDA is already torn down when the exit sequence runs: the report reads host-side data only.
void cci_pl_report_exit(void)
{
    if (report_off)
        return;
    dump(report_pattern, report_format, 0, measure);
}

// ---- live dump on a signal --------------------------------------------------------------------

// The handler only wakes the dumper thread: the interrupted thread may hold an allocator lock,
// and gathering a report takes those locks and allocates.
static void on_dump_signal(int sig, siginfo_t *info, void *uc)
{
    int saved = errno;
    if (dump_pipe[1] >= 0) {
        char c = 1;
        ssize_t w = write(dump_pipe[1], &c, 1);
        (void)w;
    }
    errno = saved;
    // Chain a handler the program had installed; its default action (terminate) is not chained:
    // the point of the dump is that the program goes on.
    if (previous_action.sa_flags & SA_SIGINFO) {
        if (previous_action.sa_sigaction)
            previous_action.sa_sigaction(sig, info, uc);
    } else if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN) {
        previous_action.sa_handler(sig);
    }
}

// The dumper's start, told to start_dumper: until the thread has run its first instruction of its
// own, its start-up (the C library's, a sanitizer's) may be inside an allocator, and a program
// that forks right after start-up would give its child that allocator locked. Measured under
// ASan (commit 02db70a): `fork-summary-once-per-process` hung 6 times in 200 runs, in the child's
// leak check; with the start awaited, 0 in 600.
static pthread_mutex_t dumper_start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dumper_started_cv = PTHREAD_COND_INITIALIZER;
static int dumper_started;

// Waits for the dumper's start, at most about a second: start-up must never hang on it.
static void await_dumper_start(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    pthread_mutex_lock(&dumper_start_lock);
    while (!dumper_started &&
           pthread_cond_timedwait(&dumper_started_cv, &dumper_start_lock, &until) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&dumper_start_lock);
}

static void *dumper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&dumper_start_lock);
    dumper_started = 1;
    pthread_cond_signal(&dumper_started_cv);
    pthread_mutex_unlock(&dumper_start_lock);
    char c;
    for (;;) {
        ssize_t r = read(dump_pipe[0], &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return NULL;
        dump(report_pattern, report_format, 1, NULL);
    }
}

static void start_dumper(const cci_settings *st)
{
    int sig = st->dump_signal;
    if (st->bad_dump_signal[0])
        cci_log(CCI_LOG_WARNING, "CCI_DUMP_SIGNAL=%s: only USR1, USR2 or a real-time signal (RTMIN..RTMAX, "
                "%d-%d) may carry the dump; live dumps disabled", st->bad_dump_signal, SIGRTMIN, SIGRTMAX);
    if (!sig)
        return;
    if (pipe2(dump_pipe, O_CLOEXEC) != 0) {
        cci_log(CCI_LOG_WARNING, "no pipe for the dump signal (%s); live dumps disabled", strerror(errno));
        return;
    }
    fcntl(dump_pipe[1], F_SETFL, O_NONBLOCK);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    // The dumper must not take the signal itself: it would only wake itself.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t, &attr, dumper, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        cci_log(CCI_LOG_WARNING, "no dumper thread (%s); live dumps disabled", strerror(rc));
        return;
    }
    await_dumper_start();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_dump_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, &previous_action) == 0)
        dump_signal = sig;
}

void cci_pl_report_start(const cci_settings *st)
{
    report_off = st->report_off;
    history_max = st->history_max;
    whatif_seconds = st->whatif_seconds;
    snprintf(conf_text, sizeof conf_text, "%s", st->conf_text);
    if (st->bad_whatif[0])
        cci_log(CCI_LOG_WARNING, "%s: expected a plain number; keeping the default", st->bad_whatif);
    snprintf(report_pattern, sizeof report_pattern, "%s", st->report_pattern);
    if (st->report_too_long)
        cci_log(CCI_LOG_WARNING, "CCI_REPORT is longer than %zu bytes; reporting to stderr",
                sizeof report_pattern - 1);
    cci_report_format fmt;
    const char *f = st->bad_report_format[0] ? st->bad_report_format : st->report_format;
    if (*f && (st->bad_report_format[0] || cci_report_format_parse(f, &fmt) != 0))
        cci_log(CCI_LOG_WARNING, "CCI_REPORT_FORMAT=%s: expected text, json or html; choosing by the "
                "file name", f);
    else
        snprintf(report_format, sizeof report_format, "%s", f);
    cci_report_set_rank(st->rank);
    start_dumper(st);
}

void cci_pl_report_atfork_child(void)
{
    in_fork_child = 1;
    // The dumper thread does not exist in the child; a signal there would only fill the pipe
    // that the parent's dumper reads. Live dumps stay off in fork children.
    if (dump_pipe[1] >= 0) {
        close(dump_pipe[0]);
        close(dump_pipe[1]);
        dump_pipe[0] = dump_pipe[1] = -1;
    }
    // They observe allocators the child has dropped (state's child handler runs first), and no
    // other thread exists here to read them: the one place where a timeline is freed.
    for (int d = 0; d < CCI_PL_MAX_DEVICES; d++) {
        cci_report_timeline_destroy(atomic_exchange(&timelines[d], NULL));
        cci_history_destroy(atomic_exchange(&histories[d], NULL));
        atomic_store(&oom_measured[d], 0);
    }
}
