// SPDX-License-Identifier: MIT
// CUDA IPC on our memory, the same for both API levels (docs/ipc.md).
//
// A block of an ordinary segment that starts its segment is CUDA's own allocation: the level
// forwards the call and CUDA exports it. A block of a virtual-memory segment has no handle CUDA
// could make, so we make one: the 64 bytes name this process, its socket and an export number.
// Another process running the preload opens it by asking this one for the block's pages
// (base/ipc_socket.h) and mapping them (cuda/vmm_share.c); a process without the preload hands
// the bytes to CUDA, which refuses them.
//
// While an import is open the block stays the importer's too: the program's free of it is
// held (CCI_FREE_HELD) and completes when the last import ends, closed or with its process gone.
#ifndef CCI_PRELOAD_IPC_H
#define CCI_PRELOAD_IPC_H

#include <stdatomic.h>
#include <stdint.h>

#include "allocator.h"
#include "export.h"

/// Exports the block holding `p` for the level's call `fn`. CCI_OK: *handle (64 bytes) is ours;
/// CCI_ENOTOURS: the level forwards to CUDA (not our memory, or a block of an ordinary segment
/// that starts it, after its device finished its queued work); CCI_EINVAL after one warning
/// naming `fn`: the level answers its invalid-value error.
int cci_serve_ipc_export(int level, const char *fn, uintptr_t p, void *handle);

/// Why an open failed, for the levels to name in their own error codes.
enum cci_ipc_open_error {
    CCI_IPC_OPEN_BAD_HANDLE = 1,   ///< our format, damaged: invalid handle
    CCI_IPC_OPEN_MAP_FAILED,       ///< the exporter is gone, refused, or the pages did not map
    CCI_IPC_OPEN_OWN_HANDLE,       ///< a handle of this very process (CUDA refuses that too)
    CCI_IPC_OPEN_NO_MEMORY,        ///< the host is out of memory
};

/// Opens `handle` on `device` (the caller's current one). CCI_OK with *out; CCI_ENOTOURS: not
/// our format, the level forwards to CUDA; CCI_EINVAL with *why set, after one warning naming `fn`.
/// The same handle opened again gives the same address, and needs as many closes.
int cci_serve_ipc_open(const char *fn, const void *handle, int device, uintptr_t *out, int *why);

/// 1 when `handle` is in our format (made by cci_serve_ipc_export in some process).
int cci_serve_ipc_is_ours(const void *handle);

/// Closes what cci_serve_ipc_open opened at `p`. CCI_OK; CCI_ENOTOURS: not ours, forward.
int cci_serve_ipc_close(uintptr_t p);

/// Exports made and not yet forgotten: a free looks up its block only while there are some.
extern _Atomic unsigned cci__ipc_exports CCI_HIDDEN;
/// A free of `p` while exports exist: CCI_OK when its block is imported now (the free is held
/// until the last import ends), else CCI_ENOTOURS (the caller frees it as usual).
int cci__serve_ipc_release(uintptr_t p, uint64_t stream);

/// In a fork child: the parent's exports and imports are forgotten (no CUDA call).
void cci_serve_ipc_atfork_child(void);

#endif
