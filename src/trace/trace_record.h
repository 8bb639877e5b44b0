// SPDX-License-Identifier: MIT
// The trace recorder: an allocator observer that writes every event to a binary trace
// (docs/trace-format.md) for ccreplay.
//
// Usage by the preload (one recording per process; the recorder reads no environment itself):
//   cci_trace_set_rank(rank_from_the_environment);                    // once, before start
//   cci_trace_start(trace_pattern, effective_config_string);          // once, at initialisation
//   cci_trace_attach(alloc, capacity);                                // each device's allocator
//   cci_trace_fork_child();                                           // in a pthread_atfork child handler
//   cci_trace_stop();                                                 // in the exit sequence
//
// Cost: the observer runs under the allocator lock and only appends a 48-byte record to a
// buffer owned by the calling thread (no lock, no system call). A writer thread empties full
// buffers in the background and writes partly filled ones every 100 ms, so a crash loses at
// most the last ~100 ms; what reached the file is always a readable prefix.
#ifndef CCI_TRACE_RECORD_H
#define CCI_TRACE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "allocator.h"

/// The rank stored in the header and written by %r (-1 = none: the header says -1, %r gives 0).
void cci_trace_set_rank(int rank);

/// Starts recording to the file named by `pattern`, expanded by cci_path_expand
/// (path_template.h: `%p` the process id, `%r` the rank, `%h` the host, `%%` a percent sign,
/// anything else kept as it is). `config_string` (may be
/// NULL) is stored in the header as the configuration the run used. Creates or truncates the
/// file and writes the header at once, so a bad path fails here. 0; or -1 with one error line
/// through cci_log (bad pattern, file not creatable, already recording).
int cci_trace_start(const char *pattern, const char *config_string);

/// Records the events of allocator `a`, whose device has `capacity` bytes (0 = unknown). Call it
/// once per allocator, after cci_trace_start and before the allocator's first use (events before
/// it are not recorded). No-op when not recording. Devices 0..255 only.
void cci_trace_attach(cci_allocator *a, size_t capacity);

/// Writes everything buffered and closes the file. Safe to call twice. The caller runs it at exit
/// (the preload's exit sequence, lifecycle.c; a program using the recorder directly calls it
/// itself: nothing is registered behind its back). Events another thread records during the
/// call may be lost.
void cci_trace_stop(void);

/// For a pthread_atfork child handler: the child inherits the parent's buffers and file, which
/// belong to the parent, so the child stops recording without writing anything (a forked child
/// cannot use CUDA anyway; a process that execs starts its own recording from CCI_TRACE, and `%p`
/// keeps the files apart).
void cci_trace_fork_child(void);

/// 1 while recording.
int cci_trace_active(void);
/// The path being (or last) recorded to; "" when none.
const char *cci_trace_path(void);
/// Events recorded, and events dropped (host out of memory, write errors), in this process.
void cci_trace_counts(uint64_t *recorded, uint64_t *dropped);

#endif
