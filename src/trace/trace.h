// SPDX-License-Identifier: MIT
// Allocation traces in memory: the event record every reader produces and every consumer (replay,
// sweep, the exit-time what-ifs) reads, and the readers of the three formats.
#ifndef CCI_TRACE_H
#define CCI_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "allocator.h"

typedef struct cci_trace_event {
    uint64_t addr;
    uint64_t size;
    uint64_t stream;
    uint32_t device;
    uint8_t action;   ///< a cci_event_kind (the one event enum, allocator.h)
    /// free_requested only: the cci_free_mode the recording allocator applied (DEFERRED: its
    /// own synchronisation completed it; FENCED: a fence did). 0 where the format has no record
    /// of it (text traces, snapshots, binary traces from before the field).
    uint8_t free_mode;
} cci_trace_event;

/// A trace in memory: the events, per device in recorded order, and what the file said about
/// the run that produced it.
typedef struct cci_trace {
    cci_trace_event *ev;
    size_t n, cap;
    const char *format;        ///< "binary", "text" or "snapshot" (static string)
    char *config;              ///< configuration the run used, when recorded (malloc'd), else NULL
    uint64_t capacity;         ///< device capacity recorded (bytes), 0 = unknown
    uint64_t recorded_ooms;    ///< oom events in the trace (not replayed: OOMs follow from capacity)
    uint64_t skipped;          ///< snapshot entries that carry no allocator change (markers, unknown)
    uint64_t truncated_bytes;  ///< binary: bytes of an incomplete final record that were left out
    uint64_t missing_events;   ///< binary: gaps in the event numbers (buffers lost in a crash)
    /// Microseconds from the first to the last time-stamped event (binary traces' time_ns,
    /// snapshots' time_us); 0 = unknown (text traces). The tuner's scale for call costs.
    uint64_t duration_us;
    /// 1 when a free_completed that does not directly follow its free_requested was decided by
    /// the recording allocator's own synchronisation (our binary traces): the replay then frees
    /// such blocks at free_requested as deferred, and its allocator decides when, as the live one
    /// did. 0 (snapshots, text): a block is released exactly at its free_completed.
    int policy_frees;
} cci_trace;

/// Reads any trace ccreplay accepts: a binary trace (docs/trace-format.md), a text trace
/// (docs/text-trace-format.md) or a pickled PyTorch memory snapshot, each plain or compressed with
/// gzip or xz; the content is recognised by its first bytes, never by the file name. A snapshot is
/// read by a restricted unpickler that builds plain data only (nothing in the file is ever run).
/// 0, or -1 with one line in err that names the file and the problem.
int cci_trace_load(const char *path, cci_trace *t, char *err, size_t errlen);
/// The same from `len` bytes in memory (the fuzz targets' entry); `path` names it in messages.
int cci_trace_load_mem(const uint8_t *data, size_t len, const char *path, cci_trace *t, char *err, size_t errlen);
/// Reads a text trace (docs/text-trace-format.md) from a file. 0, or -1 with one line in err
/// naming the file, the line number and the problem.
int cci_trace_read_text(const char *path, cci_trace *t, char *err, size_t errlen);
/// The same from memory; `name` is used in messages.
int cci_trace_parse_text(const char *buf, size_t len, const char *name, cci_trace *t, char *err,
                         size_t errlen);
/// Appends one event; 0 or -1 on host out-of-memory.
int cci_trace_push(cci_trace *t, const cci_trace_event *e);
void cci_trace_free(cci_trace *t);

#endif
