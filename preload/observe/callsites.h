// SPDX-License-Identifier: MIT
// Who holds the memory (CCI_STACKS=N): the call site of each allocation, opt-in.
//
// Hot path, stacks on: the return addresses (glibc backtrace) and, in a Python interpreter whose
// thread holds the GIL, the Python frames are captured with no lock held; then, under this
// module's own mutex, identical stacks are interned in a hash table and the block's address is
// mapped to its stack. Frees are seen by an allocator observer (also at a device reset) and cost
// one hash delete. Nothing is symbolized before a report asks (dladdr, addresses relative to
// their object). Stacks off: one predictable branch per allocation, no observer.
//
// Lock order: an allocator lock may be held when this module's mutex is taken (the observer),
// never the other way round: nothing here calls into an allocator.
#ifndef CCI_PRELOAD_CALLSITES_H
#define CCI_PRELOAD_CALLSITES_H

#include "export.h"
#include <stddef.h>
#include <stdint.h>

#include "allocator.h"
#include "report.h"
#include "settings.h"

/// Frames per stack; 0 = off. Written once at start-up, before the first allocation.
extern int cci__stacks_depth CCI_HIDDEN;

/// Takes CCI_STACKS from the settings (logging a refused value) and, when on, prepares the
/// unwinder and the Python lookup. Start-up, active layer only.
void cci_callsites_start(const cci_settings *s);
/// Observes a new allocator's frees and reserved peaks (when stacks are on).
void cci_callsites_attach(int device, cci_allocator *a);
/// Records the call site of an allocation just served: attached to serving as its allocation
/// observer (serve/observers.h) when stacks are on, so serving pays nothing when they are off.
void cci__callsites_record(int device, uintptr_t addr, size_t size);

/// Fills each device's holders, leak ages and block sites into a snapshot just taken. Host
/// memory running short leaves the tables out. No-op when stacks are off.
void cci_callsites_fill(cci_report_snapshot *s);
/// The top holders of one device now, for the out-of-memory report; 0, or -1 when off or short
/// of host memory. Free with cci_report_holders_free.
int cci_callsites_holders_now(int device, cci_report_holders *out);
/// A fork child: the inherited blocks belong to the parent; start empty (no other thread runs).
void cci_callsites_atfork_child(void);

#endif
