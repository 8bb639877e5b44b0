// SPDX-License-Identifier: MIT
// The observers of serving (observers.h). Written at start-up, before the mode is published with
// a release store; every reader runs after cci_state_active() read the mode with an acquire load,
// so plain variables are enough.
#include "observers.h"

cci_alloc_observer cci__serve_on_alloc;
static cci_allocator_observer on_allocator[CCI_SERVE_MAX_OBSERVERS];
static int nallocator;
static cci_oom_observer on_oom;

int cci_serve_observe_allocators(cci_allocator_observer fn)
{
    if (nallocator == CCI_SERVE_MAX_OBSERVERS)
        return -1;
    on_allocator[nallocator++] = fn;
    return 0;
}

void cci_serve_observe_oom(cci_oom_observer fn)
{
    on_oom = fn;
}

void cci_serve_observe_allocations(cci_alloc_observer fn)
{
    cci__serve_on_alloc = fn;
}

void cci_serve_tell_allocator(int device, cci_allocator *a)
{
    for (int i = 0; i < nallocator; i++)
        on_allocator[i](device, a);
}

void cci_serve_tell_oom(int device, size_t requested)
{
    if (on_oom)
        on_oom(device, requested);
}
