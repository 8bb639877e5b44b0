// SPDX-License-Identifier: MIT
// The slice of the driver's virtual-memory (VMM) ABI that cuda/vmm.c speaks, by hand like
// cuda_abi.h (which says why no CUDA header is included). Values and layouts are CUDA's own.
#ifndef CCI_CUDA_ABI_VMM_H
#define CCI_CUDA_ABI_VMM_H

#include "cuda_abi.h"

typedef unsigned long long CUmemGenericAllocationHandle;

enum { CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
enum { CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1 };
enum { CU_MEM_LOCATION_TYPE_DEVICE = 0x1 };
enum { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3 };
typedef int CUmemAllocationGranularity_flags;
enum { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1 };

typedef int CUdevice_attribute;
enum { CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
       CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103 };

typedef struct CUmemLocation_st {
    int type;  // CUmemLocationType
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;                  // CUmemAllocationType
    int requestedHandleTypes;  // CUmemAllocationHandleType
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    int flags;  // CUmemAccess_flags
} CUmemAccessDesc;

#endif
