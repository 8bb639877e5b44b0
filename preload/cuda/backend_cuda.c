// SPDX-License-Identifier: MIT
// The core's device backend over the CUDA driver: plain segments (cuda_context.c), fences
// (fence_*.c) and, where the driver has the virtual-memory API, VMM segments (vmm.c), assembled
// into the one operations table the allocators get.
#include "backend_cuda.h"

#include <pthread.h>
#include <stdatomic.h>

#include "context_fences.h"
#include "cuda_context.h"
#include "fence.h"
#include "fence_watcher.h"
#include "outside.h"
#include "stream_registry.h"
#include "vmm.h"

// The costs of the device's calls, as the statistics carry them: the fences' (counted for the
// whole process) and the device's own VMM calls.
static void cuda_costs(void *ctx, int device, cci_stats *out)
{
    (void)ctx;
    cci_cuda_fence_costs(out);
    cci_cuda_vmm_costs(device, out);
}

static cci_backend_ops cuda_ops = {
    .reserve = cci_cuda_segment_reserve,
    .release = cci_cuda_segment_release,
    .capacity = cci_cuda_capacity,
    .synchronize = cci_cuda_synchronize,
    // Fences: events on the streams that may still use a block, instead of device-wide
    // synchronisations (fence_ops.c).
    .caps = CCI_CAP_FENCES,
    .fence = &cci_cuda_fence_ops,
    .costs = cuda_costs,
    .available = cci_cuda_available,
    .outside = cci_outside_stats,
};

// The optional groups depend on what the loaded driver offers: decided once, before the first
// allocator sees the table.
static pthread_once_t groups_once = PTHREAD_ONCE_INIT;

static void add_groups(void)
{
    cci_cuda_vmm_wire(&cuda_ops);
    // Before any fence can be recorded: the fences tell the watcher through these, never by name.
    cci_cuda_fence_watched_by(cci_fence_watcher_news, cci_fence_watcher_running);
}

cci_backend cci_cuda_backend(void)
{
    pthread_once(&groups_once, add_groups);
    return (cci_backend){.ops = &cuda_ops, .ctx = NULL};
}

void cci_cuda_backend_drop_device(int device)
{
    cci_stream_registry_drop_device(device, cci_cuda_fence_forget_cover);
    cci_cuda_fence_drop_device(device);
    // The allocator's teardown has just unmapped its pages into the VMM pool: they go now, while
    // the context they belong to still exists.
    cci_cuda_vmm_drop_device(device);
    cci_cuda_context_drop(device);
}

void cci_cuda_backend_atfork_child(void)
{
    cci_outside_atfork_child();
    cci_cuda_vmm_atfork_child();
    cci_cuda_context_atfork_child();
}

void cci_cuda_stream_created(CUstream s, int device, unsigned flags)
{
    if (!s)
        return;
    cci_context_fences_note_stream(s, device);  // before any fence could need to cover it
    int added = cci_stream_registry_add(s, device, flags);
    // Blocks handed out under a barrier or an order may still have old work queued that a
    // non-blocking stream's work would not be ordered after. Read after the registry knows the
    // stream (seq_cst): a barrier's record or an order's look that set the flag later sees this
    // stream (creating, live or in the registry) and covers it; one that set it earlier is seen
    // here. The handle is not the program's yet.
    if (added && (flags & CCI_CU_STREAM_NON_BLOCKING) && cci_fences_barriers_granted())
        cci_cuda_fence_order_new_stream(s, device);
}

void cci_cuda_stream_destroyed(CUstream s)
{
    cci_stream_registry_remove(s, cci_cuda_fence_retire_stream, cci_cuda_fence_forget_cover);
}
