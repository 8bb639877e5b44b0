// SPDX-License-Identifier: MIT
// The serving layer (serve.h): the allocators behind both API levels, and each decision about
// them written once.
#include "serve.h"

#include <inttypes.h>

#include "addr_map.h"
#include "vmm.h"
#include "levels.h"
#include "log.h"
#include "settings.h"
#include "state.h"
#include "stream_rule.h"

// The device this thread allocated on last: the first allocator a free asks when the address
// map cannot name the owner (release_by_scan), so most such frees still take one lookup. Initial-exec:
// the preload is loaded at start-up, so its thread-locals live in the static TLS block and an
// access costs no __tls_get_addr call on the fast path.
_Thread_local int cci__serve_last_device __attribute__((tls_model("initial-exec")));

// The invalid-value error as each level names it, for the messages.
static const char *invalid_value_name(int level)
{
    return level == CCI_LEVEL_RUNTIME ? "cudaErrorInvalidValue" : "CUDA_ERROR_INVALID_VALUE";
}

int cci__serve_alloc_failed(int level, int device, size_t size, int rc)
{
    (void)level;
    if (rc != CCI_EOOM)
        return CCI_ENOTOURS;
    // The report asks the runtime for the device's free memory: that answer must be CUDA's, not
    // the driver wrapper's (which would add our cache).
    cci_pl_forwarding_begin();
    cci_serve_tell_oom(device, size);
    cci_pl_forwarding_end();
    return CCI_EOOM;
}

// Asks the allocator that owns p, named by the address map without a lock: its "not ours" is
// final, and memory in no chunk of ours goes back to CUDA without taking any allocator's lock.
// Where the map cannot tell (a chunk two devices share, or a map left incomplete), every
// allocator in turn until one knows p, the one this thread allocated from last first.
static int ask_owner_named(int owner, uintptr_t p, int (*ask)(cci_allocator *a, uintptr_t p, void *arg),
                           void *arg)
{
    if (__builtin_expect(owner >= 0, 1)) {
        cci_allocator *a = cci_state_allocator_peek(owner);
        return a ? ask(a, p, arg) : CCI_ENOTOURS;
    }
    if (owner == CCI_ADDR_NOT_OURS)
        return CCI_ENOTOURS;
    cci_log(CCI_LOG_DEBUG, "%#" PRIxPTR ": the address map cannot name its owner; asking each device's "
            "allocator", p);
    int hint = cci__serve_last_device;
    cci_allocator *a = cci_state_allocator_peek(hint);
    int rc = a ? ask(a, p, arg) : CCI_ENOTOURS;
    for (int d = 0, n = cci_state_device_bound(); rc == CCI_ENOTOURS && d < n; d++) {
        if (d != hint && (a = cci_state_allocator_peek(d)))
            rc = ask(a, p, arg);
    }
    return rc;
}

static int ask_owner(uintptr_t p, int (*ask)(cci_allocator *a, uintptr_t p, void *arg), void *arg)
{
    return ask_owner_named(cci_addr_map_device(p), p, ask, arg);
}

struct free_args {
    uint64_t stream;
    cci_free_mode mode;
};

static int ask_free(cci_allocator *a, uintptr_t p, void *arg)
{
    const struct free_args *f = arg;
    return cci_free(a, p, f->stream, f->mode);
}

int cci__serve_release_invalid(int level, const char *fn, uintptr_t p)
{
    cci_log(CCI_LOG_WARNING, "%s(%#" PRIxPTR "): not the start of a live block (double free, "
            "or a pointer inside a block); returning %s, the allocator is unchanged", fn, p,
            invalid_value_name(level));
    return CCI_EINVAL;
}

int cci__serve_release_unmapped(int level, const char *fn, uintptr_t p, uint64_t stream,
                                cci_free_mode mode, int owner)
{
    struct free_args f = {stream, mode};
    int rc = ask_owner_named(owner, p, ask_free, &f);
    return __builtin_expect(rc == CCI_EINVAL, 0) ? cci__serve_release_invalid(level, fn, p) : rc;
}

struct info_args {
    uintptr_t *block, *segment;
    size_t *block_size, *segment_size;
    int device;  // the owner's, set by ask_info
};

static int ask_info(cci_allocator *a, uintptr_t p, void *arg)
{
    struct info_args *i = arg;
    i->device = cci_allocator_device(a);
    return cci_block_info(a, p, i->block, i->block_size, i->segment, i->segment_size);
}

int cci_serve_block_info(uintptr_t p, uintptr_t *block, size_t *block_size, uintptr_t *segment,
                         size_t *segment_size)
{
    struct info_args i = {block, segment, block_size, segment_size, -1};
    return ask_owner(p, ask_info, &i);
}

int cci_serve_block_owner(uintptr_t p, uintptr_t *block, size_t *block_size, uintptr_t *segment,
                          size_t *segment_size, int *device)
{
    struct info_args i = {block, segment, block_size, segment_size, -1};
    int rc = ask_owner(p, ask_info, &i);
    *device = i.device;
    return rc;
}

void cci_serve_mem_get_info(size_t *free_b, const size_t *total_b,
                            int (*current_device)(int *device))
{
    int device;
    if (!free_b || !cci_state_config()->memgetinfo_cached_as_free || current_device(&device) != 0)
        return;
    cci_allocator *a = cci_state_allocator_peek(device);
    if (a) {
        *free_b += cci_cached_free_bytes(a);
        if (total_b && *free_b > *total_b)
            *free_b = *total_b;
    }
}

void cci_serve_peer_enabled(int dev, int peer)
{
    cci_vmm_peer_enabled(dev, peer);
}
