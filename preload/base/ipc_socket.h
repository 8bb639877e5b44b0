// SPDX-License-Identifier: MIT
// How CUDA IPC handles of virtual-memory blocks travel between processes: a Unix socket per
// exporting process, on which the importer asks for an export by number and receives its pages
// as file descriptors (SCM_RIGHTS). The exporter gives them; the importer needs no privilege
// over it (no pidfd_getfd, so no CAP_SYS_PTRACE, which unprivileged containers refuse).
//
// An importer keeps its connection for as long as it keeps the mapping: the exporter learns that
// an import ended, closed or with its process gone, when the connection does, and only then may
// it reuse the memory. Nothing here knows CUDA: the serving layer (serve/ipc.c) says what an
// export is and what a closed import means, through the two callbacks.
#ifndef CCI_PRELOAD_IPC_SOCKET_H
#define CCI_PRELOAD_IPC_SOCKET_H

#include <stddef.h>
#include <stdint.h>

/// What an exporter answers a request with.
enum cci_ipc_status {
    CCI_IPC_GRANTED = 0,
    CCI_IPC_GONE = 1,     ///< no such export now (never made, or its block was freed)
    CCI_IPC_REFUSED = 2,  ///< the importer runs as another user
    CCI_IPC_FAILED = 3,   ///< the exporter could not export the pages
};

/// One answer: `n` pages, their descriptors (the transport closes them once sent) and sizes,
/// `skip` bytes of the first page before the block, the block's `size`.
typedef struct cci_ipc_grant {
    int status;
    size_t n;
    int *fds;
    uint64_t *sizes;
    uint64_t skip, size;
} cci_ipc_grant;

/// The exporter's side. `grant` fills a grant for export `id` (malloc'd arrays, freed by the
/// transport) and counts one import; `ended` is told when a connection that was granted `id`
/// ends. Both run on the transport's own thread, one call at a time.
typedef struct cci_ipc_server_ops {
    void (*grant)(uint64_t id, cci_ipc_grant *g);
    void (*ended)(uint64_t id);
} cci_ipc_server_ops;

/// This process's number for its socket (random, drawn once; it tells a reused pid apart).
uint64_t cci_ipc_nonce(void);
/// Starts the socket and its thread once (later calls only answer). 0, or -1 after one warning.
int cci_ipc_server_start(const cci_ipc_server_ops *ops);

/// The importer's side: asks process `pid` (socket `nonce`) for export `id`. On CCI_IPC_GRANTED
/// *g holds the pages (the caller closes the descriptors and frees the arrays) and *conn the
/// connection to keep open while the import lives. Any other status: nothing to free, *conn -1.
/// Transport failures (no such process, a time-out) answer CCI_IPC_GONE, with `why` filled.
int cci_ipc_request(int pid, uint64_t nonce, uint64_t id, cci_ipc_grant *g, int *conn, char *why, size_t whylen);

/// Ends an import's connection (the exporter sees it end).
void cci_ipc_conn_close(int conn);

/// In a fork child: the parent's socket and connections are closed here (the child's copies
/// would keep the parent's imports alive in the exporters' eyes), and no thread serves.
void cci_ipc_socket_atfork_child(void);

#endif
