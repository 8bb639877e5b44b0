// SPDX-License-Identifier: MIT
// The simulated device: address ranges without memory behind them.
#include <pthread.h>
#include <stdlib.h>

#include "backend.h"
#include "backend_sim_fence.h"
#include "ccinterpose.h"
#include "sim_vmm.h"

#define SIM_BASE ((uintptr_t)0x7f0000000000ull)
#define SIM_ALIGN ((uintptr_t)2 << 20)

struct cci_sim_device {
    pthread_mutex_t lock;
    size_t capacity;
    size_t reserved;
    size_t segments;
    uintptr_t next;          // addresses are never reused, so a stale pointer can never alias
    uint64_t fail_countdown; // fault injection: 0 = off
    cci_sim_fences *fences;  // the fence group's state (backend_sim_fence.c)
    sim_vmm *vmm;            // the virtual-memory group (sim_vmm.c); shares lock and capacity
};

static int sim_reserve(void *ctx, int device, size_t size, uintptr_t *addr)
{
    cci_sim_device *s = ctx;
    int rc = CCI_OK;
    pthread_mutex_lock(&s->lock);
    if (s->fail_countdown && --s->fail_countdown == 0) {
        rc = CCI_EOOM;
    } else if (size > s->capacity - s->reserved - cci__sim_vmm_physical(s->vmm)) {
        rc = CCI_EOOM;
    } else {
        *addr = s->next;
        s->next += (size + SIM_ALIGN - 1) & ~(SIM_ALIGN - 1);
        s->reserved += size;
        s->segments++;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_release(void *ctx, int device, uintptr_t addr, size_t size)
{
    cci_sim_device *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = (size <= s->reserved && s->segments) ? CCI_OK : CCI_EBACKEND;
    if (rc == CCI_OK) {
        s->reserved -= size;
        s->segments--;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static size_t sim_capacity(void *ctx, int device) { return ((cci_sim_device *)ctx)->capacity; }

static size_t sim_available(void *ctx, int device)
{
    (void)device;
    cci_sim_device *s = ctx;
    pthread_mutex_lock(&s->lock);
    size_t used = s->reserved + cci__sim_vmm_physical(s->vmm);
    size_t left = used < s->capacity ? s->capacity - used : 0;
    pthread_mutex_unlock(&s->lock);
    return left;
}

// The cost figures (backend.h, costs): the calls the fence and virtual-memory groups count, and
// no time (nothing runs on a simulated device).
static void sim_costs(void *ctx, int device, cci_stats *out)
{
    (void)device;
    cci__sim_fence_costs(ctx, out);
    cci_sim_vmm_stats v;
    cci_sim_vmm_stats_get(ctx, &v);
    out->vmm_create_calls = v.page_creates;
    out->vmm_map_calls = v.maps;
    out->vmm_set_access_calls = v.set_access_calls;
    out->vmm_unmap_calls = v.unmaps;
    out->vmm_release_calls = v.page_releases;
}

static const cci_backend_ops sim_ops = {
    .reserve = sim_reserve,
    .release = sim_release,
    .capacity = sim_capacity,
    .available = sim_available,
    .synchronize = NULL,
    .caps = CCI_CAP_FENCES | CCI_CAP_VMM,
    .fence = &cci__sim_fence_ops,
    .vmm = &cci__sim_vmm_ops,
    .costs = sim_costs,
};

cci_sim_device *cci_sim_create(size_t capacity)
{
    cci_sim_device *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->fences = cci__sim_fences_create();
    if (!s->fences) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->capacity = capacity;
    s->next = SIM_BASE;
    s->vmm = cci__sim_vmm_create(&s->lock, &s->reserved, capacity);
    if (!s->vmm) {
        cci_sim_destroy(s);
        return NULL;
    }
    return s;
}

void cci_sim_destroy(cci_sim_device *s)
{
    if (!s)
        return;
    cci__sim_vmm_destroy(s->vmm);
    pthread_mutex_destroy(&s->lock);
    cci__sim_fences_destroy(s->fences);
    free(s);
}

cci_backend cci_sim_backend(cci_sim_device *s) { return (cci_backend){.ops = &sim_ops, .ctx = s}; }

void cci_sim_fail_reserve_at(cci_sim_device *s, uint64_t n)
{
    pthread_mutex_lock(&s->lock);
    s->fail_countdown = n;
    pthread_mutex_unlock(&s->lock);
}

size_t cci_sim_reserved(const cci_sim_device *s) { return s->reserved; }
size_t cci_sim_segments(const cci_sim_device *s) { return s->segments; }

cci_sim_fences *cci__sim_fences_of(const cci_sim_device *s) { return s->fences; }

// ---- virtual memory (sim_vmm.c) -----------------------------------------------------------
sim_vmm *cci__sim_vmm_of(void *ctx) { return ((cci_sim_device *)ctx)->vmm; }
