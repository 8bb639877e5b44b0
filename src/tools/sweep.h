// SPDX-License-Identifier: MIT
// The configuration tuner behind `ccreplay --sweep`: replays one trace under a fixed grid of
// configurations in parallel and ranks them.
#ifndef CCI_SWEEP_H
#define CCI_SWEEP_H

#include <stddef.h>
#include <stdio.h>

#include "replay.h"

/// Runs the grid on `jobs` threads (>= 1) and prints the ranked table and the recommendation to
/// `out`, or with `json` one JSON object: {"trace", "events", "capacity_bytes", "recommended":
/// ROW, "results": [ROW, ...] in rank order}, each ROW {"conf", "peak_reserved_bytes",
/// "peak_allocated_bytes", "num_device_alloc", "num_ooms"} ("conf": "" is the default). The
/// output depends only on the trace and `capacity` (0 = unlimited), never on `jobs` or timing.
/// 0, or -1 with one line in err (host out of memory).
int cci_sweep(const cci_trace *t, const char *name, size_t capacity, int jobs, int json, FILE *out, char *err,
              size_t errlen);

#endif
