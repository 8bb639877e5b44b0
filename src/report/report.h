// SPDX-License-Identifier: MIT
// Reports: the exit-time memory summary, the fragmentation report, their JSON and HTML forms,
// the out-of-memory message and the timeline that feeds them.
//
// Statistics are data; printers are derived. Everything a report shows is first copied into one
// cci_report_snapshot (taken under each allocator's lock, one device at a time), then printed
// from that copy with no lock held. The text, JSON and HTML printers read only the snapshot, so
// the three forms can never disagree.
//
// How the preload uses this (the wiring is the preload's; this is the contract):
//
//   start-up, right after creating the allocator of each device:
//       cci_allocator_track_peak(a, 1);              // keep the layout at each new reserved peak
//       tl[dev] = cci_report_timeline_create(0, CCI_TIMELINE_CLOCK_MONOTONIC);
//       cci_report_timeline_attach(tl[dev], a);      // before the device's first allocation
//
//   exit path (the exit sequence, while the allocators still exist):
//       cci_report_dump(allocs, tl, ndev, report_pattern, report_format, 0);
//     (the pattern and format are what CCI_REPORT / CCI_REPORT_FORMAT said: the preload's settings
//     read them; this library reads no environment)
//     It prints nothing (returns 1) when no device allocation ever went through us; guard it so it
//     runs once per process, and skip it entirely when the layer is disabled.
//
//   live dump (SIGUSR1): the handler itself must only wake a dumper thread (write(2) one byte to a
//     pipe, or sem_post); the thread then calls cci_report_dump(..., force = 1). Never gather or
//     print inside the handler: gathering takes the allocator locks (the interrupted thread may hold
//     one) and allocates memory.
//
//   out of memory: when cci_malloc finally returns CCI_EOOM, before returning
//     cudaErrorMemoryAllocation, and with no allocator lock held:
//       cci_report_oom(2, a, tl[dev], requested, device_free_or_minus_1);
//
//   the public cci_dump_report(path): cci_report_dump(allocs, tl, ndev, path, NULL, 1) (the
//     name's extension picks the format; %p/%r/%h are expanded there too).
//
// Everything here reads host-side bookkeeping only, never the device, so it works from a
// destructor after CUDA has shut down. Dumps from several threads at once are safe (each takes
// its own snapshot); their output to one destination would interleave, so serialise them there.
//
// Async-signal safety, function by function:
//   NOT safe: cci_report_snapshot_take / _free, cci_report_render, cci_report_write,
//             cci_report_dump, cci_report_oom, cci_report_open_destination, the timeline functions
//             (locks, malloc, stdio formatting).
//   safe:     cci_report_write_all (a write(2) loop over a buffer rendered beforehand). A handler
//             may therefore write a report that a normal thread rendered earlier, nothing more.
//   The timeline's observer runs under the allocator lock and never allocates or blocks for
//   long: about 10 ns per allocator event with the monotonic clock (a coarse clock, 1-4 ms).
#ifndef CCI_REPORT_H
#define CCI_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "allocator.h"
#include "tuner.h"
#include "vmm_counts.h"

typedef enum cci_report_format { CCI_REPORT_TEXT, CCI_REPORT_JSON, CCI_REPORT_HTML } cci_report_format;

// ---- timeline: allocated and reserved bytes over time, fed by an allocator observer ---------

typedef enum cci_timeline_clock {
    CCI_TIMELINE_CLOCK_MONOTONIC, ///< x axis in microseconds since the timeline was created
    CCI_TIMELINE_CLOCK_EVENTS,    ///< x axis in allocator events (deterministic, for tests)
} cci_timeline_clock;

/// One sample closes an interval: values at its end, and the highest values seen inside it, so
/// peaks survive when samples are merged.
typedef struct cci_timeline_sample {
    uint64_t t;               ///< microseconds or event number, by the timeline's clock
    uint64_t allocated;
    uint64_t reserved;
    uint64_t allocated_max;
    uint64_t reserved_max;
} cci_timeline_sample;

/// Allocations that needed a new segment although the pool's cached free bytes (reusable, not
/// waiting on a stream) already added up to the request: the free memory was there but in pieces
/// (or kept from the request by max_split_size). An approximation: streams are not told apart.
typedef struct cci_report_misses {
    uint64_t count;
    uint64_t segment_bytes;   ///< bytes of the segments those requests caused
    uint64_t min_request;     ///< smallest block size among them (0 when count == 0)
    uint64_t max_request;
    // The same for requests above 20 MiB, the only ones a max_split_size_mb setting can help
    // (PyTorch does not accept a limit at or below 20 MiB).
    uint64_t large_count;
    uint64_t large_segment_bytes;
    uint64_t large_min_request;
} cci_report_misses;

typedef struct cci_report_timeline cci_report_timeline;

/// max_samples 0 means the default (1024). Memory is allocated here, never in the observer:
/// when the buffer fills, neighbouring samples are merged and the sampling interval doubles.
cci_report_timeline *cci_report_timeline_create(size_t max_samples, cci_timeline_clock clock);
/// Adds the observer to `a`, starting from a's current statistics. 0, or -1 when a has no free
/// observer slot. Attach before the device's first allocation for exact figures. A timeline
/// follows one allocator.
int cci_report_timeline_attach(cci_report_timeline *t, cci_allocator *a);
/// Only once the allocator it observes is destroyed (observers cannot be detached).
void cci_report_timeline_destroy(cci_report_timeline *t);

// ---- the snapshot --------------------------------------------------------------------------

#define CCI_REPORT_HIST_BUCKETS 64   ///< free-block histogram: bucket k holds sizes in [2^k, 2^(k+1))
#define CCI_REPORT_MAX_ADVICE 12  // more than the rules there are (9), so none is ever dropped

/// Figures derived from one layout (now, or at peak reserved).
typedef struct cci_report_frag {
    int valid;                 ///< 0 when no layout was available (e.g. peak not tracked)
    uint64_t reserved;         ///< sum of segment sizes
    uint64_t allocated;        ///< blocks in use by the program
    uint64_t requested;        ///< what the program asked for, of those blocks
    uint64_t pending;          ///< freed blocks not yet reusable (waiting on a stream)
    uint64_t cached_free;      ///< free, reusable blocks
    uint64_t inactive_split;   ///< free blocks inside segments that are split (not releasable)
    uint64_t largest_free;
    uint64_t oversize_free;    ///< free blocks of max_split_size or more (only a limit makes any)
    uint64_t free_blocks;
    uint64_t segments, small_segments;
    uint64_t blocks;
    // Expandable (VMM) segments: their size is their address range; the layout marks the part
    // with no memory behind it as unmapped blocks (state 3), which are neither free nor reserved.
    uint64_t vmm_segments;
    uint64_t address_space;    ///< address range of the VMM segments
    uint64_t mapped;           ///< of which mapped (counted in `reserved`)
    uint64_t unmapped_holes;   ///< unmapped runs inside or at the end of VMM segments
    uint64_t unmapped;         ///< their bytes
    double ratio;              ///< 1 - largest_free / cached_free; 0 when nothing is free
    uint64_t hist_count[CCI_REPORT_HIST_BUCKETS];
    uint64_t hist_bytes[CCI_REPORT_HIST_BUCKETS];
} cci_report_frag;

typedef struct cci_report_advice {
    char rule[24];    ///< stable identifier, e.g. "max_split_size"
    char *text;       ///< one paragraph, naming the figure it rests on (malloc'ed, never cut;
                      ///< NULL only when the host ran out of memory, and then left out)
} cci_report_advice;

/// One configuration replayed over the run's own allocation history.
typedef struct cci_report_whatif_row {
    char conf[192];            ///< CCI_ALLOC_CONF grammar; "" = the defaults
    uint64_t peak_reserved;
    uint64_t peak_allocated;
    uint64_t num_device_alloc;
    uint64_t num_ooms;
    cci_tuner_calls calls;     ///< the device calls the replay made (what the tuner weighs)
} cci_report_whatif_row;

/// What-ifs: the program's allocation history, kept in memory by the preload, replayed at exit
/// under the sweep's grid (src/tools/sweep.h). The preload fills this before the advice is
/// derived (the measure step of cci_report_dump_snapshot); the report library only prints it. state 0: not
/// measured, and `note` says why.
typedef struct cci_report_whatif {
    int measured;                    ///< 1 when `current` and `rows` hold replayed figures
    char note[192];                  ///< why not measured, or "" (shown as is)
    uint64_t events;                 ///< history events replayed
    uint64_t events_dropped;         ///< events past the history cap: not replayed
    uint64_t history_cap;            ///< the cap (CCI_HISTORY_MAX), events
    uint64_t capacity;               ///< device bytes the replay ran at (0 = unlimited)
    double seconds;                  ///< wall clock the replay took
    double bound_seconds;            ///< its bound (CCI_WHATIF_SECONDS)
    size_t planned;                  ///< configurations planned (the current one included)
    size_t replayed;                 ///< of those, replayed in full within the bound
    cci_report_whatif_row current;   ///< the configuration the program ran with, replayed
    size_t nrows;                    ///< every other configuration replayed in full,
    cci_report_whatif_row *rows;     ///< ranked: fewest OOMs, lowest peak, fewest device allocs
                                     ///< (malloc'ed; freed with the snapshot)
} cci_report_whatif;
/// Who holds the memory (CCI_STACKS): the live blocks of one call site, as plain data the preload
/// fills in (src/report never looks for call sites itself). Frames are innermost first, Python
/// frames ("file.py:12 in f") before native ones ("func+0x1c (libx.so+0x1234)").
#define CCI_REPORT_MAX_FRAMES 16
typedef struct cci_report_holder {
    uint64_t bytes;              ///< requested bytes of its live blocks
    uint64_t blocks;
    uint64_t first_seq;          ///< allocation number (1-based) of its oldest live block
    double oldest_age_s;         ///< seconds from that allocation to the snapshot; < 0 unknown
    size_t nframes;
    const char *frames[CCI_REPORT_MAX_FRAMES];
} cci_report_holder;

typedef struct cci_report_holders {
    int valid;                   ///< 0: not recorded (stacks off, or no peak seen yet)
    uint64_t reserved;           ///< reserved bytes when the table was kept (the peak table)
    uint64_t bytes, blocks;      ///< all live blocks recorded, every call site together
    size_t n;
    cci_report_holder *list;     ///< largest first (malloc'ed; NULL when n == 0)
    char *strings;               ///< owns the frame text (malloc'ed; may be NULL)
} cci_report_holders;

/// A live block's call site for the segment map's hover titles: index into holders_now.list.
typedef struct cci_report_block_site {
    uintptr_t addr;
    size_t holder;
} cci_report_block_site;

typedef struct cci_report_device {
    int device;
    cci_stats stats;             ///< taken in the same critical section as `now`
    cci_layout now;
    cci_layout peak;             ///< layout at the last reserved peak (valid when have_peak)
    int have_peak;
    cci_report_frag frag_now, frag_peak;
    cci_timeline_sample *samples;
    size_t nsamples;
    cci_timeline_clock clock;
    cci_report_misses misses;
    int have_timeline;
    char config[1024];           ///< effective configuration, CCI_ALLOC_CONF grammar
    int live;                    ///< taken while the program runs (SIGUSR1, cci_dump_report): figures
                                 ///< are "at the time of the dump" and blocks in use are not leaks
    char device_kind[128];       ///< "" for a CUDA device; else what the device is, e.g. a
                                 ///< simulated one (printed in every format)
    int expandable_requested;    ///< expandable_segments:True was asked for
    cci_report_whatif whatif;    ///< replayed alternatives (measured by the preload at exit)
    // The VMM backend's page pool now: released pages it keeps to map again, device memory that
    // `reserved` (= mapped) leaves out. Filled by cci_report_fill_vmm_pool from the backend that
    // the caller holds (the report library never finds a backend itself).
    int vmm_pool_known;          ///< 0: no VMM backend, or it keeps no count (pooled op NULL)
    uint64_t vmm_pool_pages;
    uint64_t vmm_pool_bytes;
    cci_vmm_counts vmm_calls;    ///< the allocator's calls on the VMM group (mode 0: none)
    size_t nadvice;
    cci_report_advice advice[CCI_REPORT_MAX_ADVICE];
    // Call sites (CCI_STACKS), filled by the preload after the snapshot is taken; all zero when off.
    int stacks;                  ///< frames recorded per allocation; 0 = call sites off
    uint64_t allocations;        ///< allocations recorded so far (the sequence ages count against)
    uint64_t dropped;            ///< allocations whose call site could not be recorded (host memory)
    cci_report_holders holders_peak;  ///< kept when reserved last reached a new peak
    cci_report_holders holders_now;   ///< every call site with live blocks, largest first
    cci_report_block_site *block_sites; ///< live blocks sorted by address (malloc'ed)
    size_t nblock_sites;
} cci_report_device;

typedef struct cci_report_snapshot {
    int ndevices;
    cci_report_device *devices;
    // Process information. Tests overwrite these with fixed values before printing goldens.
    long pid;
    int rank;
    char program[256];
    char host[128];
    char time_utc[32];           ///< ISO 8601, when the snapshot was taken
    // The preload's pinned host cache, for the whole process (its pinned_* fields only; the
    // preload fills them after the snapshot is taken). No section while has_pinned is 0.
    int has_pinned;
    cci_stats pinned;
    // The program's own virtual-memory allocations kept for reuse, summed over the devices (the
    // program_vmm_* fields only; filled by the preload like the pinned ones).
    int has_program_vmm;
    cci_stats program_vmm;
} cci_report_snapshot;

/// Gathers everything a report needs from `n` allocators (NULL entries are skipped); tls may be
/// NULL, or hold NULL entries, for devices without a timeline. Computes the derived figures and
/// the advice. 0, or -1 on host out-of-memory (nothing to free then).
int cci_report_snapshot_take(cci_report_snapshot *s, cci_allocator *const *allocs,
                             cci_report_timeline *const *tls, int n);
void cci_report_snapshot_free(cci_report_snapshot *s);
/// Recomputes frag_now / frag_peak and the advice from the layouts, stats and misses (the
/// snapshot functions call it; tests that edit a snapshot may call it again).
void cci_report_derive(cci_report_snapshot *s);
/// Frees what the holders own (list and strings) and zeroes them; snapshot_free calls it.
void cci_report_holders_free(cci_report_holders *h);
/// Called between taking a snapshot and printing it: the preload's exit path fills each device's
/// `whatif` there (and may take its time: no lock is held); the advice is derived again after it.
typedef void (*cci_report_measure_fn)(cci_report_snapshot *s, void *ud);
/// Writes the snapshot to the destination (as cci_report_dump does after taking it) and frees
/// it in every case: for callers that add data (call sites, what-ifs) to a snapshot they took.
/// measure may be NULL. force = 1 is a dump while the program runs (the devices are marked live
/// and labelled "at the time of the dump"); 0 the exit report.
int cci_report_dump_snapshot(cci_report_snapshot *s, const char *pattern, const char *format, int force,
                             cci_report_measure_fn measure, void *ud);
/// 1 when some device ever asked the device for memory through us: the exit report is printed
/// only then.
int cci_report_has_activity(const cci_report_snapshot *s);
/// Asks `be`'s virtual-memory group how many released pages it keeps for each device of the
/// snapshot (vmm.pooled: host bookkeeping, no call into the device, so safe at exit) and fills
/// vmm_pool_*. Leaves them unknown when the backend has no VMM group or no pooled query.
void cci_report_fill_vmm_pool(cci_report_snapshot *s, cci_backend be);
/// Configurations the advice rules would like measured beyond the sweep's grid (e.g. the
/// max_split_size_mb the fragmentation misses point to), in CCI_ALLOC_CONF grammar, for the
/// what-if replay. Call after the snapshot was taken. Returns how many were written (<= max).
size_t cci_report_whatif_candidates(const cci_report_device *d, char (*confs)[192], size_t max);

// ---- printing ------------------------------------------------------------------------------

/// Renders the snapshot into a malloc'ed, NUL-terminated buffer (*out, *len). 0 or -1.
int cci_report_render(cci_report_format fmt, const cci_report_snapshot *s, char **out, size_t *len);
/// Renders, then writes in as few write(2) calls as the kernel allows. 0 or -1.
int cci_report_write(int fd, cci_report_format fmt, const cci_report_snapshot *s);
/// write(2) until done, retrying on EINTR and short writes. Async-signal-safe. 0 or -1.
int cci_report_write_all(int fd, const char *buf, size_t len);

/// Marks every device of the snapshot as a simulated one: `what` says which (e.g. "simulated
/// device (the fake CUDA: host memory, no GPU)"); every format prints it next to the capacity.
void cci_report_set_device_kind(cci_report_snapshot *s, const char *what);

/// "1.5 MiB": a byte count in the largest binary unit that keeps the number >= 1 (the unit every
/// report uses).
const char *cci_report_bytes(int64_t bytes, char *buf, size_t buflen);

// ---- destinations --------------------------------------------------------------------------

/// "text", "json", "html" (case-insensitive; "txt" and "htm" too). 0, or -1 for anything else.
int cci_report_format_parse(const char *name, cci_report_format *out);
/// From the file name: .json, .html/.htm, anything else text.
cci_report_format cci_report_format_for_path(const char *path);
/// The rank of this process, shown in reports and used by %r: the library reads no environment;
/// the caller that did (the preload's settings: RANK, else LOCAL_RANK) sets it once, before any
/// report. Negative = no rank = 0, the default.
void cci_report_set_rank(int rank);
int cci_report_rank(void);
/// Opens where a report goes. `pattern` is expanded by cci_path_expand (path_template.h: %p pid,
/// %r rank, %h host, %% percent, anything else kept as it is). pattern NULL, "" or "-" means stderr (fd 2, *path set to "").
/// `format` (e.g. CCI_REPORT_FORMAT's value) wins over the extension when non-empty; an unknown
/// name is an error. Returns the fd (close it with cci_report_close_destination), or -1 with a
/// logged reason.
int cci_report_open_destination(const char *pattern, const char *format, cci_report_format *fmt,
                                char *path, size_t pathlen);
void cci_report_close_destination(int fd);

/// The whole exit / live-dump path: take a snapshot, choose the destination, print, close.
/// force = 0 prints nothing when there was no device activity. 0 written, 1 nothing to report,
/// -1 error (already logged).
int cci_report_dump(cci_allocator *const *allocs, cci_report_timeline *const *tls, int n,
                    const char *pattern, const char *format, int force);

// ---- out of memory -------------------------------------------------------------------------

/// Writes the out-of-memory block for a request of `requested` bytes that `a` could not serve.
/// device_free: what the driver reports free (cudaMemGetInfo), or -1 when unknown (then capacity
/// minus our reservations is shown, marked as an estimate). tl: the device's timeline or NULL
/// (it adds the fragmentation-miss advice). Formatted into a stack buffer and written with one
/// write(2); the layout is copied (malloc) to find the advice, and left out if that fails. Call
/// it with no allocator lock held. Returns 0 or -1.
int cci_report_oom(int fd, cci_allocator *a, cci_report_timeline *tl, size_t requested,
                   long long device_free);
/// The same text, without the "ccinterpose[pid]: error: " prefix, into buf (tests); returns the
/// length (truncated at buflen - 1).
size_t cci_report_oom_format(char *buf, size_t buflen, cci_allocator *a, cci_report_timeline *tl,
                             size_t requested, long long device_free);

/// What the caller measured for an out-of-memory block, printed at its end. Every field may be
/// NULL or "".
typedef struct cci_report_oom_extra {
    /// Hook for the call-site report (who holds the memory): the top holders, already
    /// formatted as lines, printed before the what-if line.
    const char *holders;
    /// One paragraph: the setting that a replay of the history up to this failure says would
    /// have avoided it, or that none in the grid would (the preload's what-if, at the capacity).
    const char *whatif;
} cci_report_oom_extra;
int cci_report_oom_ex(int fd, cci_allocator *a, cci_report_timeline *tl, size_t requested,
                      long long device_free, const cci_report_oom_extra *extra);
size_t cci_report_oom_format_ex(char *buf, size_t buflen, cci_allocator *a, cci_report_timeline *tl,
                                size_t requested, long long device_free, const cci_report_oom_extra *extra);
/// The top holders block of the out-of-memory report ("top holders of device N: ..."), at most
/// `top` call sites, as text into a malloc'ed buffer (*out, *len). 0 or -1.
/// A hook for the OOM formatter; the preload writes it after the OOM block when stacks are on.
int cci_report_oom_holders(const cci_report_holders *h, int device, size_t top, char **out, size_t *len);

#endif
