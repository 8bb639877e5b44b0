// SPDX-License-Identifier: MIT
// The serving layer: every decision about a device allocation, made once for both API levels,
// in the core's codes (CCI_OK, CCI_EOOM, CCI_EINVAL, CCI_ENOTOURS). The runtime level
// (intercept_runtime.c) and the driver level (intercept_driver.c) only translate arguments and
// answers (cudaError_t, CUresult) and forward what is not ours to CUDA.
//
// One allocator per device behind both levels: what one level allocated, the other can free.
// `level` is CCI_LEVEL_RUNTIME or CCI_LEVEL_DRIVER: it picks the counter and the error name in
// messages, never the decision.
#ifndef CCI_PRELOAD_SERVE_H
#define CCI_PRELOAD_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "addr_map.h"
#include "allocator.h"
#include "levels.h"
#include "settings.h"
#include "state.h"
#include "stream_rule.h"
#include "captures.h"
#include "ipc.h"
#include "observers.h"

// The fast paths below are inline: every served cudaMalloc/cudaFree runs them, and a
// call frame per layer (hook, level, serving layer, core) had cost as much as their work. Only
// the rare outcomes (out of memory, a bad pointer, an owner the address map cannot name) are
// out of line, in serve.c.

// ---- allocation ----------------------------------------------------------------------------

/// 1 when a plain (not stream-ordered) allocation must go to CUDA: during a capture it must
/// behave as CUDA's own (fail and invalidate a global-mode capture, or give real memory that
/// stays outside our pools in relaxed mode). A stream-ordered one passes only when its own
/// stream captures, which each level asks in its own API.
static inline int cci_serve_plain_alloc_passes(void)
{
    return cci_capture_maybe_active();
}

/// Serves `size` bytes on `device` for the core's stream key `stream`. CCI_OK and *addr;
/// CCI_EOOM (the out-of-memory report written, the cache already flushed): the level answers
/// its out-of-memory error; CCI_ENOTOURS: the level passes the call to CUDA (no allocator for
/// this device, or a device failure other than out-of-memory, which CUDA reports in its code).
static inline int cci_serve_alloc(int level, int device, size_t size, uint64_t stream, uintptr_t *addr);

/// The device this thread allocated on last (serve.c).
extern _Thread_local int cci__serve_last_device __attribute__((tls_model("initial-exec")));
/// cci_serve_alloc after the allocator answered `rc` (not CCI_OK): the level's answer.
int cci__serve_alloc_failed(int level, int device, size_t size, int rc);

static inline int cci_serve_alloc(int level, int device, size_t size, uint64_t stream, uintptr_t *addr)
{
    // Before the allocator is asked (no lock held): a second thread or device switches the
    // stream rule, synchronising the devices first (stream_rule.h).
    cci_rule_note_thread();
    cci_rule_note_device(device);
    cci_allocator *a = cci_state_allocator(device);
    if (!a)
        return CCI_ENOTOURS;
    int rc = cci_malloc(a, size, stream, addr);
    if (__builtin_expect(rc != CCI_OK, 0))
        return cci__serve_alloc_failed(level, device, size, rc);
    cci__serve_last_device = device;
    cci_serve_tell_alloc(device, *addr, size);
    cci_pl_count(level);
    return CCI_OK;
}

// ---- release -------------------------------------------------------------------------------

/// The mode of a free that waits for the device in CUDA (cudaFree, cuMemFree), by the stream rule
/// (stream_rule.h): NOW while the program's work can only be ordered (or under
/// immediate_reuse:True), FENCED after the switch, DEFERRED while a capture may be underway.
static inline cci_free_mode cci_serve_sync_free_mode(void)
{
    // A real cudaFree waits for the device, so work still queued anywhere may use the block. The
    // stream rule (stream_rule.h) says when that work can only be ordered before the next
    // owner's: then the block is reusable at once; otherwise it waits for a fence on every stream
    // that may use it. During a capture nothing may be recorded: the block waits for a later
    // synchronisation, as before. immediate_reuse:True: always at once (unsafe, documented).
    cci_rule_note_thread();
    if (__builtin_expect(cci_capture_maybe_active(), 0))
        return CCI_FREE_DEFERRED;
    if (cci_rule_ordered() || cci_state_config()->immediate_reuse)
        return CCI_FREE_NOW;
    // Test-only (CCI_DEBUG_UNSAFE=no-fences): the fence is skipped, the layer is unsafe.
    if (__builtin_expect(cci_settings_get()->debug_unsafe & CCI_DEBUG_UNSAFE_NO_FENCES, 0))
        return CCI_FREE_NOW;
    // Every stream the program created is gone and its work has run: ordered again.
    if (cci_rule_back_to_ordered())
        return CCI_FREE_NOW;
    return CCI_FREE_FENCED;
}

/// The mode of a stream-ordered free (cudaFreeAsync, cuMemFreeAsync). Freed inside a capture,
/// the block must not return to the stream's pool before the graph exists: it waits for a
/// synchronisation, which the backend refuses during captures.
static inline cci_free_mode cci_serve_stream_free_mode(int stream_capturing)
{
    return stream_capturing ? CCI_FREE_DEFERRED : CCI_FREE_NOW;
}

/// Frees `p` in whichever allocator owns it, found in the process-wide address map without a
/// lock (addr_map.h); only where the map cannot tell, every allocator is asked in turn, the one
/// this thread allocated from last first. CCI_OK; CCI_ENOTOURS: CUDA's memory, the level forwards the call; CCI_EINVAL: inside
/// our memory but not a live block's start (double free, interior pointer), after one warning
/// naming `fn`: the level answers its invalid-value error and the allocator is unchanged.
static inline int cci_serve_release(int level, const char *fn, uintptr_t p, uint64_t stream,
                                    cci_free_mode mode);

/// cci_serve_release where the address map named no single owner (`owner`, CCI_ADDR_*).
int cci__serve_release_unmapped(int level, const char *fn, uintptr_t p, uint64_t stream,
                                cci_free_mode mode, int owner);
/// The warning for a pointer in our memory that is no live block's start; CCI_EINVAL.
int cci__serve_release_invalid(int level, const char *fn, uintptr_t p);

static inline int cci_serve_release(int level, const char *fn, uintptr_t p, uint64_t stream,
                                    cci_free_mode mode)
{
    // A block another process imported (CUDA IPC) is held until every importer closed it.
    if (__builtin_expect(atomic_load_explicit(&cci__ipc_exports, memory_order_relaxed) != 0, 0) &&
        cci__serve_ipc_release(p, stream) == CCI_OK)
        return CCI_OK;
    // One allocator in the process (one device, the usual case): it is the only one that can
    // own p, and its own answer is final (CCI_ENOTOURS for memory in none of its segments, as when
    // the address map cannot name an owner and every allocator is asked), so the map lookup is
    // left out. What that costs: a pointer that is CUDA's own (rare: allocations made during a
    // capture, memory of another allocator) reaches that allocator's locked path instead of
    // being turned away by the map.
    cci_allocator *sole = cci_state_sole_allocator();
    if (__builtin_expect(sole != NULL, 1)) {
        int rc = cci_free(sole, p, stream, mode);
        return __builtin_expect(rc == CCI_EINVAL, 0) ? cci__serve_release_invalid(level, fn, p) : rc;
    }
    // The owner named by the address map, without a lock: its "not ours" is final.
    int owner = cci_addr_map_device(p);
    if (__builtin_expect(owner < 0, 0))
        return cci__serve_release_unmapped(level, fn, p, stream, mode, owner);
    cci_allocator *a = cci_state_allocator_peek(owner);
    int rc = a ? cci_free(a, p, stream, mode) : CCI_ENOTOURS;
    return __builtin_expect(rc == CCI_EINVAL, 0) ? cci__serve_release_invalid(level, fn, p) : rc;
}

// ---- peer access -----------------------------------------------------------------------------

/// The program enabled peer access from `dev` to `peer` (either level): `dev` may now touch
/// `peer`'s memory, so the virtual-memory pages of `peer`, mapped so far and from now on, get
/// access for `dev` too (ordinary segments need nothing: the driver grants those itself).
void cci_serve_peer_enabled(int dev, int peer);

// ---- questions about memory ----------------------------------------------------------------

/// Looks `p` up in the allocator that owns it (the address map; else every allocator) (as cci_block_info: CCI_OK, CCI_EINVAL for our free space,
/// CCI_ENOTOURS). Outputs may be NULL.
int cci_serve_block_info(uintptr_t p, uintptr_t *block, size_t *block_size, uintptr_t *segment,
                         size_t *segment_size);

/// cci_serve_block_info, with the owning allocator's device in *device (-1 when none).
int cci_serve_block_owner(uintptr_t p, uintptr_t *block, size_t *block_size, uintptr_t *segment,
                          size_t *segment_size, int *device);

/// After CUDA answered a free-memory question successfully: adds our cached free bytes on the
/// device to *free_b (never beyond *total_b), because programs that size themselves from free
/// memory should see what they can actually get. Only when memgetinfo_cached_as_free is on;
/// `current_device` (the level's own question, 0 on success) is asked only then. `free_b` may
/// be NULL (OptiX passes free = NULL), `total_b` too.
void cci_serve_mem_get_info(size_t *free_b, const size_t *total_b,
                            int (*current_device)(int *device));

#endif
