// SPDX-License-Identifier: MIT
/*
 * Glue between the two halves of the fake libcuda.so.1: fake_cuda.c (devices,
 * contexts, streams, cuMemAlloc) and fake_vmm.c (the virtual-memory API).
 * Hidden symbols: nothing here is exported from the library.
 */
#ifndef FAKE_VMM_H
#define FAKE_VMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* fake_cuda.c: charge / uncharge bytes of device dev's memory, the figure
 * cuMemGetInfo and fakecu_used_bytes report. Charging fails (false) when the
 * device would exceed its capacity. Neither may be called with fake_vmm.c's
 * lock held (fake_cuda.c's lock is always taken first). */
bool fc_device_charge(int dev, size_t bytes);
void fc_device_uncharge(int dev, size_t bytes);

/* fake_vmm.c: a device reset (cuDevicePrimaryCtxReset, last primary-context
 * release) destroys that device's physical allocations and their mappings.
 * Called by fake_cuda.c with its lock held, after the device's streams have
 * drained and before the device's charge is zeroed. */
void fc_vmm_device_reset(int dev);

/* fake_vmm.c: the mapping that holds p, for the pointer attributes
 * (fake_pointer.c): its device, start and size. false when p is in no
 * mapping (unmapped address space of a reservation included). */
bool fc_vmm_mapping_of(uintptr_t p, int *dev, uintptr_t *base, size_t *size);
/* fake_pointer.c: a device reset forgets the peer access to and from it.
 * Called by fake_cuda.c with its lock held. */
void fc_peer_device_reset(int dev);

/* ---- Shared between fake_vmm.c (the API) and fake_vmm_access.c (the
 * device's accesses); all of it under vmm_lock. ---- */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define VMM_API __attribute__((visibility("default")))
#define VMM_MAX_DEVICES 32 /* access masks are 32 bits; the fake has at most 8 */

struct phys;

/* Both kinds of sorted element start with a span, so one set of helpers
 * keeps them ordered by address. */
struct span {
    uintptr_t va;
    size_t size;
};

struct mapping {
    struct span at;
    struct phys *ph;
    uint32_t read_mask;  /* devices that may read (READ or READWRITE) */
    uint32_t write_mask; /* devices that may write (READWRITE) */
};

struct span_vec {
    char *v;
    size_t n, cap, elem;
};

/* Mutations hold it for writing, device accesses for reading. */
extern pthread_rwlock_t vmm_lock;
extern struct span_vec vmm_res;  /* reservations, sorted by address */
extern struct span_vec vmm_maps; /* mappings (struct mapping), sorted by address */
extern atomic_ullong vmm_faults_unmapped, vmm_faults_no_access;

struct span *vmm_vec_at(const struct span_vec *v, size_t i);
/* First index whose span starts at or after p. */
size_t vmm_vec_lower_bound(const struct span_vec *v, uintptr_t p);
/* Index of the span containing p, or v->n. */
size_t vmm_vec_find(const struct span_vec *v, uintptr_t p);
struct mapping *vmm_map_at(size_t i);

/* ---- fake_vmm.c for fake_vmm_share.c (imports) ---- */
#include "fake_cuda_driver.h"

/* A memfd of cuMemCreate is named this and its device's ordinal, so that an
 * importer, in this process or another, can read the device back. */
#define VMM_MEMFD_PREFIX "fakecuda-dev"

/* The prologue of every VMM entry point: set-up, the driver's init checks;
 * *ndev gets the device count. */
CUresult vmm_enter(int *ndev);
/* Makes fd (size bytes, already charged to dev with fc_device_charge) a new
 * physical allocation with one reference. On failure fd is closed and the
 * charge undone. imported: counted as an import, not a creation. */
CUresult vmm_phys_add(int dev, int fd, size_t size, unsigned handle_types, bool imported,
                      CUmemGenericAllocationHandle *handle);

#endif /* FAKE_VMM_H */
