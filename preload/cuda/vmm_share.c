// SPDX-License-Identifier: MIT
// The importing side of CUDA IPC on virtual-memory blocks: pages another process exported as
// file descriptors (cci_cuda_vmm_export there) mapped into one range of ours.
//
// The range is reserved for exactly the pages received, never the exporter's whole segment, so
// an importer's address space grows with what it opened only. Access is granted to the
// importing device alone, as cudaIpcOpenMemHandle maps an allocation into the current device's
// context. Nothing here is shared with the allocator's own tables (vmm.c): an imported range is
// not ours to serve, unmap or pool.
#include "vmm.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cuda_context.h"
#include "log.h"
#include "real.h"

static void unmap_all(const cci_vmm_import *im, size_t mapped, size_t imported)
{
    const cci_real_driver *t = cci_real_drv();
    if (mapped)
        t->cuMemUnmap((CUdeviceptr)im->base, mapped);
    for (size_t i = 0; i < imported; i++)
        t->cuMemRelease((CUmemGenericAllocationHandle)im->handles[i]);
}

int cci_cuda_vmm_import(int device, const cci_vmm_piece *pieces, size_t n, cci_vmm_import *out, int *cu)
{
    memset(out, 0, sizeof *out);
    const cci_real_driver *t = cci_real_drv();
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (cu)
        *cu = r;
    if (!n || !t->cuMemImportFromShareableHandle || !t->cuMemAddressReserve || !t->cuMemMap ||
        !t->cuMemSetAccess || !t->cuMemUnmap || !t->cuMemRelease || !t->cuMemAddressFree)
        return CCI_EBACKEND;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += pieces[i].size;
    out->handles = calloc(n, sizeof *out->handles);
    if (!out->handles)
        return CCI_EOOM;
    out->device = device;
    cci_driver_scope sc;
    if (cci_cuda_enter(device, &sc)) {
        free(out->handles);
        out->handles = NULL;
        return CCI_EBACKEND;
    }
    size_t imported = 0, mapped = 0;
    uint64_t at[5] = {cci_pl_now_ns()};  // the phases' ends, for the debug line
    for (; imported < n; imported++) {
        CUmemGenericAllocationHandle h = 0;
        r = t->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)pieces[imported].fd,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS)
            break;
        out->handles[imported] = h;
    }
    CUdeviceptr base = 0;
    at[1] = cci_pl_now_ns();
    if (imported == n) {
        // The driver's default alignment is the granularity; every page is a multiple of it.
        r = t->cuMemAddressReserve(&base, total, 0, 0, 0);
    }
    at[2] = cci_pl_now_ns();
    if (imported == n && r == CUDA_SUCCESS) {
        out->base = (uintptr_t)base;
        for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
            r = t->cuMemMap(base + mapped, pieces[i].size, 0, (CUmemGenericAllocationHandle)out->handles[i], 0);
            if (r == CUDA_SUCCESS)
                mapped += pieces[i].size;
        }
        at[3] = cci_pl_now_ns();
        if (r == CUDA_SUCCESS) {
            CUmemAccessDesc desc = {{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
            r = t->cuMemSetAccess(base, total, &desc, 1);
        }
    }
    if (r != CUDA_SUCCESS) {
        unmap_all(out, mapped, imported);
        if (base)
            t->cuMemAddressFree(base, total);
        cci_cuda_leave(&sc);
        cci_log(CCI_LOG_DEBUG, "device %d: importing %zu pages (%zu bytes) failed (%zu imported, %zu bytes mapped; "
                "CUresult %d)", device, n, total, imported, mapped, r);
        free(out->handles);
        memset(out, 0, sizeof *out);
        if (cu)
            *cu = r;
        return CCI_EBACKEND;
    }
    cci_cuda_leave(&sc);
    at[4] = cci_pl_now_ns();
    cci_log(CCI_LOG_DEBUG, "device %d: imported %zu pages (%zu bytes): import %.0f us, reserve %.0f us, map %.0f us, "
            "access %.0f us", device, n, total, (at[1] - at[0]) / 1e3, (at[2] - at[1]) / 1e3, (at[3] - at[2]) / 1e3,
            (at[4] - at[3]) / 1e3);
    out->size = total;
    out->n = n;
    if (cu)
        *cu = CUDA_SUCCESS;
    return CCI_OK;
}

void cci_cuda_vmm_unimport(cci_vmm_import *im)
{
    if (!im->handles)
        return;
    cci_driver_scope sc;
    uint64_t t0 = cci_pl_now_ns();
    int entered = cci_cuda_enter(im->device, &sc) == 0;
    unmap_all(im, im->size, im->n);
    uint64_t t1 = cci_pl_now_ns();
    cci_real_drv()->cuMemAddressFree((CUdeviceptr)im->base, im->size);
    if (entered)
        cci_cuda_leave(&sc);
    cci_log(CCI_LOG_DEBUG, "device %d: unmapped %zu imported pages: unmap and release %.0f us, range %.0f us", im->device,
            im->n, (t1 - t0) / 1e3, (cci_pl_now_ns() - t1) / 1e3);
    free(im->handles);
    memset(im, 0, sizeof *im);
}
