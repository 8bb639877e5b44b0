// SPDX-License-Identifier: MIT
// PyTorch's pluggable allocator, served by the preload: a program that can change one line
// installs these two functions with torch.cuda.memory.CUDAPluggableAllocator(<this library>,
// "cci_torch_alloc", "cci_torch_free") (docs/torch-streams.md).
//
// Why: through cudaMalloc/cudaFree the preload never learns which stream used a block, so every
// free is fenced against all streams (docs/reuse-modes.md). PyTorch passes the stream on every
// call of a pluggable allocator, so a free is stream-ordered like cudaFreeAsync(p, stream):
// reusable at once on that stream, handed to another only after a fence on it. That is PyTorch's
// own allocator's rule, with one gap it does not have: Tensor.record_stream reaches no pluggable
// allocator (torch 2.11), so a tensor used on a side stream and freed on its own must have been
// waited for by the program (as ProcessGroupNCCL does since record streams are avoided by default).
//
// Thin forwarders to the cudaMallocAsync / cudaFreeAsync paths: the decisions are made there.
#include "hooks.h"

#include "export.h"
#include "intercept_runtime.h"
#include "real.h"

// PyTorch allocates on the current device (it passes that device); a different one is made
// current around the call and restored, so the program's current device never changes.
CCI_EXPORT void *cci_torch_alloc(size_t size, int device, cudaStream_t stream)
{
    const cci_real_runtime *rt = cci_real_rt();
    int current = -1;
    if (!rt || rt->cudaGetDevice(&current) != cudaSuccess)
        return NULL;
    if (current != device && rt->cudaSetDevice(device) != cudaSuccess)
        return NULL;
    void *p = NULL;
    cudaError_t rc = cci_pl_malloc_async(&p, size, stream);
    if (current != device)
        rt->cudaSetDevice(current);
    return rc == cudaSuccess ? p : NULL;
}

// The address names the block's allocator, whatever device is current (serve/addr_map.c).
CCI_EXPORT void cci_torch_free(void *ptr, size_t size, int device, cudaStream_t stream)
{
    (void)size;
    (void)device;
    cci_pl_free_async(ptr, stream);
}
