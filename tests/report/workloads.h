// SPDX-License-Identifier: MIT
// Fixed workloads on the simulated device for the report tests. Each builds one allocator with
// peak tracking and an event-clock timeline, so every figure (timeline included) is the same on
// every run and every machine.
#ifndef CCI_REPORT_WORKLOADS_H
#define CCI_REPORT_WORKLOADS_H

#include "report.h"

typedef struct workload {
    cci_sim_device *sim;
    cci_allocator *a;
    cci_report_timeline *tl;
    size_t oom_request;     ///< the request that failed, for workloads that end in an OOM (else 0)
} workload;

/// Runs workload `name` ("seedfrag", "mixed", "misses") on device `device`. 0, or -1 for an
/// unknown name or a failure (message on stderr).
int workload_run(const char *name, int device, workload *w);
void workload_free(workload *w);
/// The workload names, NULL-terminated.
extern const char *const workload_names[];
/// Replaces the process details with fixed values, so printed reports can be compared.
void workload_fix_process(cci_report_snapshot *s);

#endif
