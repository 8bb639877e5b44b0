// SPDX-License-Identifier: MIT
// The streams the program created, and what the stream rule (serve/stream_rule.h) pushes down to
// the fences: the registry knows every live stream, the fences read the flags and never ask the
// rule.
#include "stream_registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/types.h>

#include "log.h"
#include "settings.h"

_Atomic int cci__stream_registry_incomplete;
_Atomic int cci__stream_registry_emptied;
_Atomic int cci__stream_registry_no_return;
_Atomic uint64_t cci__stream_generation;

// ---- what the rule pushes down, what the fences grant ----------------------------------------

_Atomic int cci__fences_beyond_legacy;
// THE BARRIER (serve/stream_rule.h): a fence record asked whether it is a barrier, so blocks may
// have been handed out with old work still queued. Set before the answer is known (the order
// the rule's synchronisation after barriers relies on), so also by a record that was none: at
// worst one needless synchronisation per later non-blocking creation. Stays set.
static _Atomic int barriers_granted;
static _Atomic int nonblocking_creating;  // non-blocking creations in flight
static _Atomic size_t nonblocking_live;   // live non-blocking streams in the registry

static int stream_rule_disabled(void)
{
    return (cci_settings_get()->debug_unsafe & CCI_DEBUG_UNSAFE_NO_STREAM_RULE) != 0;
}

void cci_fences_nonblocking_creating(int delta)
{
    atomic_fetch_add(&nonblocking_creating, delta);
}

int cci_fences_barriers_granted(void)
{
    return atomic_load(&barriers_granted);
}

int cci_fences_may_barrier(void)
{
    if (stream_rule_disabled())
        return 0;
    atomic_store(&barriers_granted, 1);  // before the checks: see the rule's sync_after_barriers
    return !atomic_load(&cci__fences_beyond_legacy) && !atomic_load(&nonblocking_creating) &&
           !atomic_load(&nonblocking_live);
}

int cci_fences_may_order(void)
{
    if (stream_rule_disabled())
        return 0;
    atomic_store(&barriers_granted, 1);  // before the check, as for THE BARRIER
    return !atomic_load(&cci__fences_beyond_legacy);
}

// ---- the registry ---------------------------------------------------------------------------

void cci_streams_forget(void)
{
    atomic_fetch_add_explicit(&cci__stream_generation, 1, memory_order_release);
}

typedef struct stream_entry {
    CUstream s;
    int device;
    unsigned flags;
    unsigned long long born;   // cci_stream_ref.born
    cci_stream_cover *cover;   // the fence group's, NULL until it looks at the stream
} stream_entry;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static stream_entry *entries;  // live streams, unordered
static size_t nentries, capacity;
static _Atomic size_t live_streams;  // nentries, for readers without the lock
static unsigned long created;
// Streams registered so far, the source of `born`. Written under the lock; a fence record reads
// it without (seq_cst): a stream registered before the program could use it is counted.
static _Atomic unsigned long long epoch;

static ssize_t find_locked(CUstream s)
{
    for (size_t i = 0; i < nentries; i++)
        if (entries[i].s == s)
            return (ssize_t)i;
    return -1;
}

int cci_stream_registry_add(CUstream s, int device, unsigned flags)
{
    if (!s)
        return 0;
    int added = 0;
    pthread_mutex_lock(&registry_lock);
    // A runtime creation reaches our driver wrapper too (on a real cudart): one entry.
    if (find_locked(s) < 0) {
        if (nentries == capacity) {
            size_t want = capacity ? 2 * capacity : 16;
            stream_entry *grown = realloc(entries, want * sizeof *grown);
            if (!grown) {
                pthread_mutex_unlock(&registry_lock);
                // Unrecorded, its last work would not be fenced: fall back to a whole-device
                // synchronisation at every batch, which needs no registry.
                cci_log(CCI_LOG_WARNING, "out of host memory recording stream %p; frees fall "
                        "back to device synchronisation", (void *)s);
                atomic_store(&cci__stream_registry_incomplete, 1);
                return 0;
            }
            entries = grown;
            capacity = want;
        }
        unsigned long long born = atomic_load(&epoch) + 1;
        entries[nentries++] = (stream_entry){.s = s, .device = device, .flags = flags, .born = born};
        if (flags & CCI_CU_STREAM_NON_BLOCKING)
            atomic_fetch_add(&nonblocking_live, 1);
        atomic_store(&epoch, born);
        atomic_store_explicit(&live_streams, nentries, memory_order_relaxed);
        created++;
        added = 1;
    }
    pthread_mutex_unlock(&registry_lock);
    return added;
}

void cci_stream_registry_remove(CUstream s, void (*retire)(CUstream s, int device,
                                                           unsigned long long born,
                                                           cci_stream_cover *cover),
                                void (*forget)(cci_stream_cover *cover))
{
    if (!s)
        return;
    cci_streams_forget();  // before the handle can be handed out again
    pthread_mutex_lock(&registry_lock);
    ssize_t i = find_locked(s);
    if (i >= 0) {
        stream_entry e = entries[i];
        entries[i] = entries[--nentries];
        if (e.flags & CCI_CU_STREAM_NON_BLOCKING)
            atomic_fetch_sub(&nonblocking_live, 1);
        atomic_store_explicit(&live_streams, nentries, memory_order_relaxed);
        if (retire)
            retire(e.s, e.device, e.born, e.cover);
        else if (forget)
            forget(e.cover);
        // Fenced frees try to return to ordered (THE RETURN), unless the rule said it never can.
        if (nentries == 0 && !atomic_load(&cci__stream_registry_no_return))
            atomic_store(&cci__stream_registry_emptied, 1);
    }
    pthread_mutex_unlock(&registry_lock);
}

void cci_stream_registry_drop_device(int device, void (*forget)(cci_stream_cover *cover))
{
    cci_streams_forget();
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < nentries;) {
        if (entries[i].device == device) {
            if (forget)
                forget(entries[i].cover);
            if (entries[i].flags & CCI_CU_STREAM_NON_BLOCKING)
                atomic_fetch_sub(&nonblocking_live, 1);
            entries[i] = entries[--nentries];
        }
        else
            i++;
    }
    atomic_store_explicit(&live_streams, nentries, memory_order_relaxed);
    pthread_mutex_unlock(&registry_lock);
}

int cci_stream_registry_each_nonblocking(int (*fn)(const cci_stream_ref *r, void *arg), void *arg)
{
    int rc = 0;
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < nentries && rc == 0; i++) {
        stream_entry *e = &entries[i];
        if (e->flags & CCI_CU_STREAM_NON_BLOCKING) {
            cci_stream_ref r = {.s = e->s, .device = e->device, .born = e->born, .cover = &e->cover};
            rc = fn(&r, arg);
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

unsigned long long cci_stream_registry_epoch(void)
{
    return atomic_load(&epoch);
}

size_t cci_stream_registry_live(void)
{
    return atomic_load_explicit(&live_streams, memory_order_relaxed);
}

size_t cci_stream_registry_nonblocking_live(void)
{
    return atomic_load_explicit(&nonblocking_live, memory_order_relaxed);
}

void cci_stream_registry_counts(unsigned long *created_out, unsigned long *live)
{
    pthread_mutex_lock(&registry_lock);
    *created_out = created;
    *live = nentries;
    pthread_mutex_unlock(&registry_lock);
}

void cci_stream_registry_atfork_child(void)
{
    pthread_mutex_init(&registry_lock, NULL);
    nentries = 0;  // their covers are the parent's: forgotten with them
    atomic_store(&live_streams, 0);
    created = 0;
    atomic_store(&barriers_granted, 0);
    atomic_store(&nonblocking_creating, 0);
    atomic_store(&nonblocking_live, 0);
    atomic_store(&cci__fences_beyond_legacy, 0);
    atomic_store(&cci__stream_registry_emptied, 0);
    atomic_store(&cci__stream_registry_no_return, 0);
    atomic_store(&cci__stream_registry_incomplete, 0);
}
