// SPDX-License-Identifier: MIT
// The runtime's pinned host memory entry points we define (hooks_host.c); the driver's are
// declared in hooks_driver.h with every wrapped driver function.
#ifndef CCI_PRELOAD_HOOKS_HOST_H
#define CCI_PRELOAD_HOOKS_HOST_H

#include "cuda_abi.h"
#include "export.h"

CCI_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
CCI_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size);
CCI_EXPORT cudaError_t cudaFreeHost(void *ptr);
CCI_EXPORT cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost);
CCI_EXPORT cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags);

#endif
