// SPDX-License-Identifier: MIT
// Printer for the PYTORCH_CUDA_ALLOC_CONF grammar: the effective configuration in canonical form,
// every key, so that parse(format(c)) gives c back (the fuzz target checks that round trip); and
// the one place an unset compact_segments is settled for a device.
#include "config.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

void cci_config_resolve(cci_config *c, int vmm)
{
    // expandable_segments:True alone asks for PyTorch's mode: the default must not override it.
    if (c->compact_segments < 0)
        c->compact_segments = vmm && !c->expandable_segments;
}

// ---- printing -------------------------------------------------------------------------------

typedef struct outbuf {
    char *buf;
    size_t cap;
    size_t len;  // what the whole string needs, even past cap
} outbuf;

static void put(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(outbuf *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *dst = o->len < o->cap ? o->buf + o->len : NULL;
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

// Shortest decimal that reads back as the same double, so the round trip is exact while the
// common values stay readable (0.8, not 0.80000000000000004).
static void put_double(outbuf *o, double d)
{
    char tmp[40];
    for (int prec = 1; prec <= DBL_DECIMAL_DIG; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    put(o, "%s", tmp);
}

static const char *tf(int b)
{
    return b ? "True" : "False";
}

static uint64_t bytes_to_mib(size_t bytes)
{
    // SIZE_MAX came from a value too large to represent; print one the parser saturates again.
    if (bytes == SIZE_MAX)
        return (uint64_t)(SIZE_MAX / MIB) + 1;
    return (uint64_t)(bytes / MIB);
}

// The list is rebuilt from the table: the first key closes the leading run (it fills everything
// below itself), every interval up to the trailing run is named, and '>' covers the trailing run.
static void put_roundup(outbuf *o, const unsigned *t)
{
    unsigned head = 0;
    while (head + 1 < CCI_ROUNDUP_INTERVALS && t[head + 1] == t[0])
        head++;
    if (head == CCI_ROUNDUP_INTERVALS - 1) {
        put(o, "%u", t[0]);
        return;
    }
    unsigned tail = CCI_ROUNDUP_INTERVALS - 1;
    while (tail > 0 && t[tail - 1] == t[CCI_ROUNDUP_INTERVALS - 1])
        tail--;
    put(o, "[%llu:%u", 1ULL << head, t[head]);
    for (unsigned i = head + 1; i < tail; i++)
        put(o, ",%llu:%u", 1ULL << i, t[i]);
    put(o, ",>:%u]", t[tail]);
}

int cci_config_format(const cci_config *c, char *buf, size_t len)
{
    outbuf o = {.buf = buf, .cap = len};
    if (buf && len)
        buf[0] = '\0';
    put(&o, "backend:%s", c->backend_async ? "cudaMallocAsync" : "native");
    // "No limit" and "off" have no spelling the parser accepts, so those keys are left out.
    if (c->max_split_size != SIZE_MAX)
        put(&o, ",max_split_size_mb:%llu", (unsigned long long)bytes_to_mib(c->max_split_size));
    put(&o, ",max_non_split_rounding_mb:%llu",
        (unsigned long long)bytes_to_mib(c->max_non_split_rounding));
    put(&o, ",roundup_power2_divisions:");
    put_roundup(&o, c->roundup_divisions);
    if (c->gc_threshold > 0.0) {
        put(&o, ",garbage_collection_threshold:");
        put_double(&o, c->gc_threshold);
    }
    put(&o, ",expandable_segments:%s", tf(c->expandable_segments));
    put(&o, ",release_lock_on_cudamalloc:%s", tf(c->release_lock_on_cudamalloc));
    if (c->memory_fraction > 0.0) {
        put(&o, ",per_process_memory_fraction:");
        put_double(&o, c->memory_fraction);
    }
    put(&o, ",immediate_reuse:%s", tf(c->immediate_reuse));
    put(&o, ",memgetinfo_cached_as_free:%s", tf(c->memgetinfo_cached_as_free));
    // Printed only when not the default, so the canonical string of every configuration that
    // predates the key (reports, traces, golden files) stays what it was.
    if (c->intercept_level != CCI_LEVEL_BOTH && c->intercept_level >= CCI_LEVEL_RUNTIME &&
        c->intercept_level <= CCI_LEVEL_BOTH)
        put(&o, ",intercept_level:%s", cci__level_names[c->intercept_level]);
    // Likewise only when given (or settled by an allocator for its device, cci_config_resolve):
    // unset is its own state, which the device resolves, so printing nothing reads back as unset.
    if (c->compact_segments >= 0)
        put(&o, ",compact_segments:%s", tf(c->compact_segments));
    // Likewise at their defaults. max_non_split_rounding_mb is printed before this key, and a
    // given allowance wins whatever the order, so the string reads back to the same pair.
    if (c->large_segment_size != ((size_t)20 << 20))
        put(&o, ",large_segment_size_mb:%llu", (unsigned long long)bytes_to_mib(c->large_segment_size));
    if (c->throw_on_cudamalloc_oom)
        put(&o, ",throw_on_cudamalloc_oom:True");
    if (c->fence_slack_mb > 0)  // likewise: only when set
        put(&o, ",fence_slack_mb:%lld", c->fence_slack_mb);
    // The pinned host cache's keys, only where they differ from the defaults.
    if (c->pinned_use_cuda_host_register)
        put(&o, ",pinned_use_cuda_host_register:True");
    if (c->pinned_num_register_threads > 1)
        put(&o, ",pinned_num_register_threads:%u", c->pinned_num_register_threads);
    if (c->pinned_use_background_threads)
        put(&o, ",pinned_use_background_threads:True");
    if (c->pinned_reserve_segment_size)
        put(&o, ",pinned_reserve_segment_size_mb:%llu",
            (unsigned long long)(c->pinned_reserve_segment_size >> 20));
    if (c->pinned_free_catch_all)
        put(&o, ",pinned_free_catch_all:True");
    return o.len > INT_MAX ? INT_MAX : (int)o.len;
}
