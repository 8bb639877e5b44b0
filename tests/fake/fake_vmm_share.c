// SPDX-License-Identifier: MIT
/*
 * cuMemImportFromShareableHandle in the fake libcuda.so.1: the other end of
 * cuMemExportToShareableHandle (fake_vmm.c). An exported POSIX handle is a
 * dup of the allocation's memfd; an import makes a new physical allocation
 * over the same file, so its mappings alias every mapping of the original,
 * in this process or in another one the fd was passed to (SCM_RIGHTS).
 *
 * The device travels in the memfd's name (VMM_MEMFD_PREFIX and the ordinal,
 * set by cuMemCreate), which any process holding the fd reads back through
 * /proc/self/fd. An fd without such a name is not an export of this fake.
 *
 * An import is charged to its device as a creation is: each process has its
 * own fake devices, so the importer's cuMemGetInfo shows what it holds, and
 * release, unmap and device reset treat both alike. An import inside the
 * exporting process therefore counts the bytes twice, where a GPU would
 * count them once.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"
#include "fake_vmm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The device ordinal in the name of fd's memfd ("/memfd:<name> (deleted)");
 * false when fd is no memfd named by cuMemCreate. */
static bool memfd_device(int fd, long *dev)
{
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return false;
    target[n] = '\0';
    static const char prefix[] = "/memfd:" VMM_MEMFD_PREFIX;
    const char *digits = target + sizeof prefix - 1;
    if (strncmp(target, prefix, sizeof prefix - 1) || *digits < '0' || *digits > '9')
        return false;
    char *end;
    errno = 0;
    *dev = strtol(digits, &end, 10);
    return !errno && (*end == '\0' || *end == ' ');
}

VMM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                               CUmemAllocationHandleType shHandleType)
{
    int ndev;
    CUresult r = vmm_enter(&ndev);
    if (r)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED; /* no Windows or fabric handles on the fake */
    intptr_t v = (intptr_t)osHandle;
    struct stat st;
    long dev, page = sysconf(_SC_PAGESIZE);
    if (v < 0 || v > INT_MAX || fstat((int)v, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        page <= 0 || st.st_size % page || !memfd_device((int)v, &dev))
        return CUDA_ERROR_INVALID_VALUE;
    if (dev >= ndev) { /* exported by a process with more devices than this one */
        CUdevice cur;
        if ((r = cuCtxGetDevice(&cur)))
            return r;
        dev = cur;
    }
    size_t size = (size_t)st.st_size;
    if (!fc_device_charge((int)dev, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* The fake's own descriptor: the caller keeps, and closes, its one. */
    int fd = fcntl((int)v, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        fc_device_uncharge((int)dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return vmm_phys_add((int)dev, fd, size, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, true, handle);
}
