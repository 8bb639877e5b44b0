// SPDX-License-Identifier: MIT
// What program_vmm.c (the calls) and program_vmm_units.c (the bookkeeping) share: the unit and its
// lists, the loose objects, the one state under one lock. Private to those two files.
#ifndef CCI_PRELOAD_PROGRAM_VMM_IMPL_H
#define CCI_PRELOAD_PROGRAM_VMM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uthash.h>

#include "cuda_context.h"
#include "export.h"
#include "program_vmm.h"

enum { MAX_ACCESS = 8 };  // locations whose access a unit remembers (the device and its peers)

typedef struct unit {
    CUdeviceptr va;
    size_t va_size;
    CUmemGenericAllocationHandle h;
    size_t size;
    CUmemAllocationProp prop;
    int device;
    unsigned prog_refs;  // the program's references to h: creates + retains - releases
    unsigned lent_refs;  // those of them answered without a real reference behind (retains)
    int prog_mapped;     // the program believes h is mapped at va
    int prog_va;         // the program believes it holds the reservation
    int shared;          // seen by another process or a multicast object: never kept
    int kept;            // on the device's kept list
    int claimed;         // on the claimed list
    size_t naccess;      // locations granted over exactly the unit, each with its flags
    CUmemAccessDesc access[MAX_ACCESS];
    struct unit *older, *newer;  // the kept list
    UT_hash_handle by_va, by_h;
} unit;

typedef struct loose_handle {
    CUmemGenericAllocationHandle h;
    size_t size;
    CUmemAllocationProp prop;
    int device;
    unsigned refs;
    int shared;
    UT_hash_handle hh;
} loose_handle;

typedef struct loose_range {
    CUdeviceptr va;
    size_t size;
    UT_hash_handle hh;
} loose_range;

typedef struct unit_list {
    struct unit *oldest, *newest;
} unit_list;

typedef struct device_kept {
    unit_list list;  // the kept units, oldest first
    size_t held, held_peak;  // bytes of handles the program holds (units not kept, loose handles)
    size_t kept;
    cci_stats st;  // the program_vmm_* fields only
} device_kept;

typedef struct pvmm_state {
    pthread_mutex_t lock;
    unit *units_by_va, *units_by_h;
    loose_handle *handles;
    loose_range *ranges;
    unit_list claimed;
    device_kept dev[CCI_PL_MAX_DEVICES];
} pvmm_state;
extern pvmm_state cci__pv CCI_HIDDEN;
/// Set once the program made a virtual-memory allocation through us.
extern _Atomic int cci__pvmm_used CCI_HIDDEN;


// Everything below runs under cci__pv.lock (program_vmm_units.c says what each does).
void pv_held_add(int device, int64_t d);
int pv_same_prop(const CUmemAllocationProp *a, const CUmemAllocationProp *b);
void pv_claimed_unlink(unit *u);
void pv_claim(unit *u);
loose_handle *pv_loose_handle_of(CUmemGenericAllocationHandle h);
loose_range *pv_loose_range_of(CUdeviceptr va);
void pv_add_loose_handle(CUmemGenericAllocationHandle h, size_t size, const CUmemAllocationProp *prop,
                           unsigned refs, int shared);
void pv_drop_loose_handle(loose_handle *l);
void pv_add_loose_range(CUdeviceptr va, size_t size);
void pv_drop_loose_range(loose_range *l);
unit *pv_unit_at(CUdeviceptr va);
unit *pv_unit_containing(CUdeviceptr va);
unit *pv_unit_of(CUmemGenericAllocationHandle h);
void pv_settle(unit *u);
void pv_settle_overlapping(CUdeviceptr va, size_t size);
void pv_mark_shared_overlapping(CUdeviceptr va, size_t size);
void pv_maybe_keep(unit *u);
void pv_make_room(int device, size_t size);
void pv_give_back_all(int device);
void pv_make_unit(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h);
int pv_access_granted(const unit *u, const CUmemAccessDesc *desc, size_t count);
void pv_access_note(unit *u, const CUmemAccessDesc *desc, size_t count);
void pv_mark_shared_handle(CUmemGenericAllocationHandle h);

#endif
