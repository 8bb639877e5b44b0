// SPDX-License-Identifier: MIT
// The CUDA backend's fence group: events on every stream that may still use a freed block. Its
// pieces are the fence_*.c files (fence_impl.h says which covers what, and why).
#ifndef CCI_PRELOAD_FENCE_H
#define CCI_PRELOAD_FENCE_H

#include "backend.h"
#include "ccinterpose.h"
#include "real.h"
#include "stream_registry.h"

/// Wired into the CUDA backend's ops with CCI_CAP_FENCES (backend_cuda.c, fence_ops.c).
extern const cci_backend_fence_ops cci_cuda_fence_ops;

/// Before a stream is destroyed (called by the stream registry with its lock held): records an
/// event on it that every fence recorded while the stream existed (born <= the fence's registry
/// epoch) includes until it passes; if none can be recorded, waits for the stream's work instead.
/// Frees the stream's cover (its sweeps are superseded by that event).
void cci_cuda_fence_retire_stream(CUstream s, int device, unsigned long long born,
                                  cci_stream_cover *cover);

/// Whether every destroyed stream's last work has run: 1 (every retired event passed; they leave
/// the list), 0 (one is pending), -1 (a query failed). Asks the driver about the pending ones,
/// newest first, up to the first still pending.
int cci_cuda_fence_retired_done(void);

/// A non-blocking stream just registered, its handle not yet the program's, once a fence was ever
/// taken as a barrier or ordered instead of waited for (THE BARRIER, THE ORDER): the stream
/// waits for the legacy stream's earlier work before any of its own (or, failing that, the
/// legacy stream is synchronised), so no block handed out before can meet old work there.
void cci_cuda_fence_order_new_stream(CUstream s, int device);
/// Around a synchronisation of every device by the stream rule: _begin before it (1 when a free
/// had skipped its fence since the last order at reuse), _end after it with that answer and
/// whether it succeeded. A synchronisation covers those frees, so none is left to order.
int cci_cuda_fence_reuse_sync_begin(void);
void cci_cuda_fence_reuse_sync_end(int skipped, int synced);

/// The stream's registry entry goes without a retire (its device's context goes): frees the
/// cover; its events went with the context. NULL is fine.
void cci_cuda_fence_forget_cover(cci_stream_cover *cover);

/// Before a device's primary context goes (cci_cuda_backend_drop_device): its events go with it.
void cci_cuda_fence_drop_device(int device);

/// In a fork child: forget the parent's events without driver calls.
void cci_cuda_fence_atfork_child(void);

/// What fences cost the host, into the fence_* fields of *out (the statistics; the backend's
/// costs operation). Counted for the whole process: a fence covers every device.
void cci_cuda_fence_costs(cci_stats *out);
/// At CCI_LOG=info: the lines of what fences cost the host (records, queries, time blocked in
/// waits), printed from those fields of the statistics, for a run that recorded any. Called once
/// at exit, after the rule's own line.
void cci_cuda_fence_log_costs(const cci_stats *s);

/// For the fence watcher (fence_watcher.c), which looks at the fences from a thread of its own
/// (fence_for_watcher.c). The fences never call the watcher by name: before the first fence is
/// recorded, it is registered here: `news` is called at a record where looks are dear (many live
/// streams), and while `running` answers 1 a poll in passing leaves a fence the watcher has not
/// reached yet to it. NULL for either: none.
void cci_cuda_fence_watched_by(void (*news)(void), int (*running)(void));
/// The fence clock: the last fence recorded (fences are numbered 1, 2, ...).
unsigned long long cci_cuda_fence_clock(void);
/// A mark: an event of the pool recorded now on `device`'s legacy stream, in its primary context
/// as it is (never retained anew), or NULL. The caller keeps every capture out (the capture gate).
CUevent cci_cuda_fence_mark(int device, unsigned *gen);
/// 1 the mark passed, 0 pending, -1 an error or the device's context went since the mark.
int cci_cuda_fence_mark_passed(int device, CUevent e, unsigned gen);
/// The mark back to its pool.
void cci_cuda_fence_mark_give(int device, CUevent e, unsigned gen);
/// A look, for every fence up to `upto`, at every non-blocking stream (each asked whether it
/// captures first) and retired event: 1 every one has run its work from before those fences
/// (their legacy part is the caller's: marks recorded after reading the clock), 0 some is pending
/// (a busy stream got a sweep), -1 an error. The caller keeps every capture out.
int cci_cuda_fence_look_upto(unsigned long long upto);
/// A look ahead, for every fence up to `upto` (the clock as the caller read it): each non-blocking
/// stream not yet found idle since the last of them is asked (whether it captures first), and an
/// idle one is covered for them all; a busy one is left as it is (no sweep). It lets the program's
/// looks and THE ORDER's first pass skip streams found idle since, before the fences' legacy part
/// has passed. 0, or -1 on an error. The caller keeps every capture out.
int cci_cuda_fence_look_ahead(unsigned long long upto);
/// Every fence up to `upto` has passed: its queries and waits answer without a driver call.
void cci_cuda_fence_publish(unsigned long long upto);

#endif
