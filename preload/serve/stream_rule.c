// SPDX-License-Identifier: MIT
// The reuse rule (stream_rule.h states and argues it). The flags the fences need are pushed down
// into the stream registry (cuda/stream_registry.h); the fences never ask the rule.
#include "stream_rule.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/types.h>

#include "allocator.h"
#include "backend_cuda.h"
#include "captures.h"
#include "fence.h"
#include "log.h"
#include "settings.h"
#include "state.h"

_Atomic int cci__rule_fenced;
_Thread_local int cci__rule_thread_seen __attribute__((tls_model("initial-exec")));
_Atomic int cci__rule_first_device = -1;

static _Atomic int threads_seen;
static _Atomic int reason;  // cci_rule_reason of the current fenced spell (ORDERED: none)
// The reasons that no stream destruction undoes (second thread or device, peer access, capture)
// that arose, one bit each (1 << reason): the rule never returns to ordered after any of them.
static _Atomic unsigned lasting;
// Beyond the legacy stream's implicit synchronisation: a second device, peer access, a capture.
#define UNORDERED_BY_LEGACY ((1u << CCI_RULE_SECOND_DEVICE) | (1u << CCI_RULE_PEER_ACCESS) | \
                             (1u << CCI_RULE_CAPTURE))
// Serialises the switch: a second caller must not go on (and create its stream) before the
// first caller's synchronisation has finished. Also serialises the return with creations.
static pthread_mutex_t switch_lock = PTHREAD_MUTEX_INITIALIZER;
static int creating;               // observed stream creations between begin and end; switch_lock
static _Atomic unsigned returns;   // times the rule returned to ordered
static _Atomic unsigned return_tries;
#define RETURN_TRY_EVERY 16        // fenced frees between two tries (a try may query events)

static const char *reason_text(int why)
{
    switch (why) {
    case CCI_RULE_STREAM_CREATED: return "the first stream creation";
    case CCI_RULE_SECOND_THREAD: return "a second host thread (its per-thread default stream is "
                                        "not ordered with the first's)";
    case CCI_RULE_SECOND_DEVICE: return "a second device";
    case CCI_RULE_PEER_ACCESS: return "peer access";
    case CCI_RULE_CAPTURE: return "a stream capture";
    default: return "nothing (ordered)";
    }
}

static int stream_rule_disabled(void)
{
    return (cci_settings_get()->debug_unsafe & CCI_DEBUG_UNSAFE_NO_STREAM_RULE) != 0;
}

// Every device with an allocator, once no queued work can touch a freed block. Switch lock held.
static void sync_devices(const char *why)
{
    cci_backend be = cci_cuda_backend();
    // immediate_reuse:True never fences, so nothing needs the synchronisation.
    int devices = cci_state_config()->immediate_reuse ? 0 : cci_state_device_bound();
    int skipped = cci_cuda_fence_reuse_sync_begin(), synced = 1;
    for (int d = 0; d < devices; d++) {
        if (cci_state_allocator_peek(d) && be.ops->synchronize(be.ctx, d) != CCI_OK) {
            synced = 0;
            cci_log(CCI_LOG_WARNING, "device %d: the synchronisation %s failed; blocks freed before "
                    "it may be reused early", d, why);
        }
    }
    cci_cuda_fence_reuse_sync_end(skipped, synced);
}

// Before work that the legacy stream does not order (a non-blocking stream, another device, a
// capture) can exist: if a fence was ever taken as a barrier, blocks handed out since may still
// have old work queued, which that new work would not be ordered after. Flag read after the
// caller announced itself (seq_cst): a record either sees the announcement and is no barrier, or
// took its barrier before this load and its blocks' old work is covered by the sync.
static void sync_after_barriers(void)
{
    if (cci_fences_barriers_granted())
        sync_devices("before work the fences' barriers do not order");
}

// Switch lock held.
static void switch_locked(cci_rule_reason why)
{
    if (atomic_load(&reason) == CCI_RULE_ORDERED) {
        // Flag first (seq_cst): a free that still reads "ordered" after this point cannot exist,
        // and one that read it before queued its work before the synchronisation below.
        atomic_store(&cci__rule_fenced, 1);
        sync_devices("at the switch to fenced frees");
        atomic_store(&reason, why);
        cci_log(CCI_LOG_DEBUG, "stream rule: frees are fenced from now on (%s)", reason_text(why));
    }
}

// Switch lock held, before `why` can exist: the switch when the rule is ordered (its
// synchronisation covers the barriers too); when already fenced, the synchronisation that work
// outside the legacy stream's order (`beyond_legacy`) needs once barriers were taken.
static void fence_from_now_locked(cci_rule_reason why, int beyond_legacy)
{
    if (atomic_load(&reason) == CCI_RULE_ORDERED)
        switch_locked(why);
    else if (beyond_legacy)
        sync_after_barriers();
}

void cci_rule_switch(cci_rule_reason why)
{
    // A reason the return cannot undo is marked under the lock the return decides under, so a
    // return can never follow it; once marked, a fenced rule stays fenced.
    int lasting_reason = why != CCI_RULE_STREAM_CREATED;
    if (atomic_load(&reason) != CCI_RULE_ORDERED &&
        (!lasting_reason || (atomic_load(&lasting) & (1u << why))))
        return;  // switched and synchronised already
    if (stream_rule_disabled())
        return;
    pthread_mutex_lock(&switch_lock);
    if (lasting_reason) {
        atomic_fetch_or(&lasting, 1u << why);
        // Pushed down before the synchronisation below reads whether barriers were granted (both
        // seq_cst): a fence that asks later sees the flag; one that asked earlier is synchronised.
        if ((1u << why) & UNORDERED_BY_LEGACY)
            atomic_store(&cci__fences_beyond_legacy, 1);
        atomic_store(&cci__stream_registry_no_return, 1);
        atomic_store(&cci__stream_registry_emptied, 0);
    }
    fence_from_now_locked(why, ((1u << why) & UNORDERED_BY_LEGACY) != 0);
    pthread_mutex_unlock(&switch_lock);
}

void cci_rule_stream_create_begin(unsigned flags)
{
    if (stream_rule_disabled())
        return;
    pthread_mutex_lock(&switch_lock);
    creating++;
    if (flags & CCI_CU_STREAM_NON_BLOCKING)
        cci_fences_nonblocking_creating(1);
    // A non-blocking stream after barriers or orders needs no synchronisation here: its
    // registration makes it wait for the legacy stream's earlier work (cci_cuda_stream_created).
    fence_from_now_locked(CCI_RULE_STREAM_CREATED, 0);
    pthread_mutex_unlock(&switch_lock);
}

void cci_rule_stream_create_end(unsigned flags)
{
    if (stream_rule_disabled())
        return;
    pthread_mutex_lock(&switch_lock);
    creating--;
    if (flags & CCI_CU_STREAM_NON_BLOCKING)
        cci_fences_nonblocking_creating(-1);
    pthread_mutex_unlock(&switch_lock);
}

// Switch lock held. Whether the program's work can only be ordered again (THE RETURN): every
// created stream destroyed (none being created: `creating` is read under the same lock that
// begin takes before forwarding a creation, so a creation is either counted or will find the rule
// ordered and switch again) and their last work run.
static int may_return_locked(void)
{
    if (atomic_load(&lasting) || creating || atomic_load(&reason) != CCI_RULE_STREAM_CREATED ||
        atomic_load(&returns) >= CCI_RULE_MAX_RETURNS || cci_stream_registry_live() != 0)
        return -1;  // not now, and not until the registry empties again
    return cci_cuda_fence_retired_done();
}

int cci__rule_try_return(void)
{
    if (atomic_fetch_add_explicit(&return_tries, 1, memory_order_relaxed) % RETURN_TRY_EVERY)
        return 0;
    if (pthread_mutex_trylock(&switch_lock) != 0)
        return 0;  // a switch or a creation is underway: not now
    int back = 0, may = may_return_locked();
    if (may == 1) {
        // Blocks already pending keep their fences; this free and later ones are NOW.
        atomic_store(&reason, CCI_RULE_ORDERED);
        atomic_store(&cci__rule_fenced, 0);
        atomic_fetch_add(&returns, 1);
        back = 1;
        cci_log(CCI_LOG_DEBUG, "stream rule: ordered again (every created stream destroyed and "
                "its last work run)");
    }
    if (may != 0)  // returned, or cannot until the registry empties again
        atomic_store(&cci__stream_registry_emptied, 0);
    pthread_mutex_unlock(&switch_lock);
    return back;
}

void cci__rule_note_new_thread(void)
{
    cci__rule_thread_seen = 1;
    if (atomic_fetch_add(&threads_seen, 1) >= 1)
        cci_rule_switch(CCI_RULE_SECOND_THREAD);
}

void cci__rule_note_new_device(int device)
{
    int first = -1;
    if (atomic_compare_exchange_strong(&cci__rule_first_device, &first, device))
        return;
    if (first != device)
        cci_rule_switch(CCI_RULE_SECOND_DEVICE);
}

void cci_rule_capture_begins(void)
{
    cci_rule_switch(CCI_RULE_CAPTURE);
    cci_capture_count_begin();
}

void cci_rule_log_exit(void)
{
    if (cci_log_get_level() < CCI_LOG_INFO)
        return;
    cci_stats t;
    cci_state_sum_counters(&t);
    unsigned long long records = t.num_fence_records, waits = t.num_fence_waits, syncs = t.num_sync_all_streams,
                       catch_ups = t.num_fence_catch_ups;
    unsigned long made, live;
    cci_stream_registry_counts(&made, &live);
    int why = atomic_load(&reason);
    unsigned back = atomic_load(&returns);
    if (cci_state_config()->immediate_reuse)
        cci_log(CCI_LOG_INFO, "stream rule: immediate_reuse:True (every free reusable at once, "
                "unsafe with more than one stream); %lu streams created", made);
    else if (why == CCI_RULE_ORDERED && back == 0)
        cci_log(CCI_LOG_INFO, "stream rule: ordered the whole run (every free reusable at once); "
                "%llu fences recorded, the host waited %llu times, %llu device synchronisations",
                records, waits, syncs);
    else if (why == CCI_RULE_ORDERED)
        cci_log(CCI_LOG_INFO, "stream rule: ordered at exit, again %u time(s) after every created "
                "stream was destroyed; %lu streams created; %llu fences recorded, the host waited "
                "for a fence %llu times, %llu device synchronisations", back, made, records, waits,
                syncs);
    else
        cci_log(CCI_LOG_INFO, "stream rule: fenced since %s%s; %lu streams created; %llu fences "
                "recorded, the host waited for a fence %llu times and %llu times for the GPU to "
                "reach its last order, %llu device synchronisations",
                reason_text(why), back ? " (ordered again in between)" : "", made, records, waits,
                catch_ups, syncs);
}

void cci_rule_atfork_child(void)
{
    pthread_mutex_init(&switch_lock, NULL);
    atomic_store(&cci__rule_fenced, 0);
    atomic_store(&reason, CCI_RULE_ORDERED);
    atomic_store(&lasting, 0);
    creating = 0;
    atomic_store(&returns, 0);
    atomic_store(&return_tries, 0);
    atomic_store(&threads_seen, cci__rule_thread_seen);  // the forking thread: the only one left
    atomic_store(&cci__rule_first_device, -1);
}
