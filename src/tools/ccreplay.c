// SPDX-License-Identifier: MIT
// ccreplay: replay a recorded allocation trace through the core under any configuration, or
// sweep a grid of configurations and recommend one.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "replay.h"
#include "report.h"
#include "sweep.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ccreplay [--conf STR] [--capacity SIZE] [--fenced-lag N [--fenced-streams S] [--fenced-busy B]\n"
            "                [--fenced-order]] [--json] TRACE\n"
            "       ccreplay --sweep [--capacity SIZE] [--jobs N] [--json] TRACE\n"
            "  TRACE       a cci binary trace (CCI_TRACE=path), a cci text trace, or a pickled PyTorch\n"
            "              memory snapshot (torch.cuda.memory._snapshot()); each plain, .gz or .xz\n"
            "  --conf      allocator configuration, CCI_ALLOC_CONF grammar (default: the library's defaults,\n"
            "              compact segments as on a GPU with the virtual-memory API; compact_segments:False\n"
            "              replays ordinary segments, PyTorch's defaults)\n"
            "  --capacity  simulated device size, e.g. 80G, 512M, 1048576; allocations past it count as\n"
            "              OOMs (default: unlimited)\n"
            "  --fenced-lag  replay every free as a fenced free (the preload's rule once the program has\n"
            "              created a stream) on a simulated device whose fences pass N fence records after\n"
            "              they were recorded (0: a device that keeps up with the host); the output adds\n"
            "              the fences recorded and the host waits (ignored under immediate_reuse)\n"
            "  --fenced-streams  with --fenced-lag: the program has S streams, so a fence costs S stream\n"
            "              events on a GPU and the allocator asks about fences less (default 1)\n"
            "  --fenced-busy  with --fenced-lag: B of the streams always have work in flight (NCCL's under\n"
            "              DDP), so the allocator does not wait for the newest fences on a poor fit\n"
            "              (default 0: idle side streams, PyTorch's stream pool on one GPU)\n"
            "  --fenced-order  with --fenced-lag: a wait for reuse is answered by ordering the streams on\n"
            "              the GPU instead, as the preload does with at most 4 busy streams (counted as\n"
            "              orders; the host waits that remain are those it refuses); with no stream\n"
            "              busy, frees skip their fence and the next allocation orders (orders at reuse)\n"
            "  --json      print one JSON object instead of the table (with --sweep: the recommendation and\n"
            "              every configuration's peaks)\n"
            "  --sweep     replay a grid of configurations and recommend one\n"
            "  --jobs      threads for --sweep (default: the number of online CPUs)\n"
            "exit status: 0 done, 1 out of host memory, 2 bad option or unreadable/malformed trace\n");
}

static int parse_bytes(const char *s, size_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    else if (*end == 'T' || *end == 't')
        shift = 40;
    else if (*end)
        return -1;
    if (shift && end[1] && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0)
        return -1;
    if (v > (SIZE_MAX >> shift))
        return -1;
    *out = (size_t)v << shift;
    return 0;
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

// One line on stderr, exit status 2.
__attribute__((format(printf, 1, 2))) static int bad(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ccreplay: %s (see ccreplay --help)\n", msg);
    return 2;
}

static void print_json(const cci_trace *t, const cci_replay_result *r, const cci_replay_opts *o, double secs)
{
    double ratio = r->peak_allocated ? (double)r->peak_reserved / (double)r->peak_allocated : 0;
    printf("{\"format\": \"%s\", \"events\": %llu, \"peak_allocated_bytes\": %llu, \"peak_reserved_bytes\": "
           "%llu, "
           "\"reserved_to_allocated\": %.4f, \"num_device_alloc\": %llu, \"num_ooms\": %llu, "
           "\"num_alloc_retries\": %llu, \"unmatched_frees\": %llu, \"failed_allocs\": %llu, "
           "\"trace_ooms\": %llu, \"missing_events\": %llu, \"truncated_bytes\": %llu, ",
           t->format, (unsigned long long)r->events, (unsigned long long)r->peak_allocated,
           (unsigned long long)r->peak_reserved, ratio, (unsigned long long)r->num_device_alloc,
           (unsigned long long)r->num_ooms, (unsigned long long)r->num_alloc_retries,
           (unsigned long long)r->unmatched_frees, (unsigned long long)r->failed_allocs,
           (unsigned long long)t->recorded_ooms, (unsigned long long)t->missing_events,
           (unsigned long long)t->truncated_bytes);
    if (o->fenced)
        printf("\"fence_lag\": %llu, \"fence_streams\": %u, \"fence_busy\": %u, \"num_fence_records\": %llu, "
               "\"num_fence_waits\": %llu, \"num_blocking_waits\": %llu, \"num_fence_queries\": %llu, "
               "\"fence_order\": %s, \"num_fence_orders\": %llu, \"num_fence_catch_ups\": %llu, "
               "\"num_reuse_frees\": %llu, \"num_reuse_orders\": %llu, ",
               (unsigned long long)o->fence_lag, o->fence_streams ? o->fence_streams : 1, o->fence_busy,
               (unsigned long long)r->num_fence_records, (unsigned long long)r->num_fence_waits,
               (unsigned long long)r->num_blocking_waits, (unsigned long long)r->num_fence_queries,
               o->fence_order ? "true" : "false", (unsigned long long)r->num_fence_orders,
               (unsigned long long)r->num_fence_catch_ups, (unsigned long long)r->num_reuse_frees,
               (unsigned long long)r->num_reuse_orders);
    const cci_vmm_counts *v = &r->vmm;
    if (v->mode)
        printf("\"vmm_calls\": {\"page_creates\": %llu, \"maps\": %llu, \"set_access\": %llu, \"unmaps\": %llu, "
               "\"unmapped_pages\": %llu, \"page_releases\": %llu, \"pool_hits\": %llu, \"va_reserves\": %llu, "
               "\"va_frees\": %llu, \"reclaims\": %llu, \"syncs\": %llu, \"pool_bytes_peak\": %llu, "
               "\"free_at_peak_max\": %llu, \"deferred_unmaps\": %llu, \"stream_waits\": %llu, "
               "\"churn_raises\": %llu, \"churn_slack_bytes\": %llu, \"estimated_api_us\": %.1f}, ",
               (unsigned long long)v->page_creates, (unsigned long long)v->maps, (unsigned long long)v->set_access,
               (unsigned long long)v->unmaps, (unsigned long long)v->unmapped_pages,
               (unsigned long long)v->page_releases, (unsigned long long)v->pool_hits,
               (unsigned long long)v->va_reserves, (unsigned long long)v->va_frees, (unsigned long long)v->reclaims,
               (unsigned long long)v->syncs, (unsigned long long)v->pool_bytes_peak,
               (unsigned long long)v->free_at_peak_max, (unsigned long long)v->deferred_unmaps,
               (unsigned long long)v->stream_waits, (unsigned long long)v->churn_raises,
               (unsigned long long)v->churn_slack, cci_vmm_estimated_us(v));
    else
        printf("\"vmm_calls\": null, ");
    printf("\"simulated_device\": true, \"first_ooms\": [");
    for (size_t k = 0; k < r->nfirst_ooms; k++) {
        const cci_replay_oom *o = &r->first_ooms[k];
        printf("%s{\"event\": %llu, \"device\": %u, \"recorded\": %s, \"size\": %llu, \"device_free\": %llu, "
               "\"reserved\": %llu, \"largest_free_block\": %llu}",
               k ? ", " : "", (unsigned long long)o->event, o->device, o->recorded ? "true" : "false",
               (unsigned long long)o->size, (unsigned long long)o->device_free, (unsigned long long)o->reserved,
               (unsigned long long)o->largest_free);
    }
    printf("], \"replay_seconds\": %.6f}\n", secs);
}

static void print_text(const char *path, const char *conf, size_t capacity, const cci_trace *t,
                       const cci_replay_result *r, const cci_replay_opts *o, double secs)
{
    double ratio = r->peak_allocated ? (double)r->peak_reserved / (double)r->peak_allocated : 0;
    printf("trace               %s (%s)\n", path, t->format);
    if (t->config && *t->config)
        printf("recorded under      %s\n", t->config);
    printf("configuration       %s\n", *conf ? conf : "(defaults)");
    // The mode in effect, said once: the default is compact segments on the simulated device, as
    // on a GPU with the virtual-memory API, so a bare replay predicts a bare run there.
    printf("segments            %s\n", r->vmm.mode == 2   ? "compact (compact_segments; the default where the device "
                                                              "offers the virtual-memory API)"
                                      : r->vmm.mode == 1 ? "expandable (expandable_segments:True, PyTorch's)"
                                                          : "ordinary (cudaMalloc'd, as with compact_segments:False)");
    if (capacity)
        printf("device              simulated, capacity %.1f MiB\n", mib(capacity));
    else
        printf("device              simulated, capacity unlimited\n");
    printf("events              %llu (%.1f M events/s)\n", (unsigned long long)r->events,
           secs > 0 ? (double)r->events / secs / 1e6 : 0.0);
    printf("peak allocated      %.1f MiB\n", mib(r->peak_allocated));
    printf("peak reserved       %.1f MiB\n", mib(r->peak_reserved));
    printf("reserved/allocated  %.3f\n", ratio);
    printf("device allocations  %llu\n", (unsigned long long)r->num_device_alloc);
    printf("OOMs                %llu\n", (unsigned long long)r->num_ooms);
    for (size_t k = 0; k < r->nfirst_ooms; k++) {
        const cci_replay_oom *o = &r->first_ooms[k];
        char h[4][32];
        printf("%sevent %llu (device %u%s): %s requested; device free %s, reserved %s, largest cached free "
               "block %s\n",
               k ? "                    " : "first OOMs          ", (unsigned long long)o->event, o->device,
               o->recorded ? ", an OOM of the trace" : "", cci_report_bytes((int64_t)o->size, h[0], sizeof h[0]),
               cci_report_bytes((int64_t)o->device_free, h[1], sizeof h[1]),
               cci_report_bytes((int64_t)o->reserved, h[2], sizeof h[2]),
               cci_report_bytes((int64_t)o->largest_free, h[3], sizeof h[3]));
    }
    if (r->num_ooms > r->nfirst_ooms)
        printf("                    (%llu more)\n", (unsigned long long)(r->num_ooms - r->nfirst_ooms));
    printf("alloc retries       %llu\n", (unsigned long long)r->num_alloc_retries);
    if (o->fenced)
        printf("fenced frees        fences pass %llu fence record%s late; %u stream%s, %u busy%s\n",
               (unsigned long long)o->fence_lag, o->fence_lag == 1 ? "" : "s",
               o->fence_streams ? o->fence_streams : 1, o->fence_streams > 1 ? "s" : "", o->fence_busy,
               o->fence_order ? "; waits answered by ordering" : "");
    if (r->num_fence_records || o->fenced)  // fenced frees replayed
        printf("fences              %llu recorded, %llu queries, the host waited %llu times (%llu for a "
               "fence not yet passed)\n",
               (unsigned long long)r->num_fence_records, (unsigned long long)r->num_fence_queries,
               (unsigned long long)r->num_fence_waits, (unsigned long long)r->num_blocking_waits);
    if (o->fence_order)
        printf("orders              %llu waits answered by ordering the streams instead (%llu after the "
               "host waited for the last order)\n",
               (unsigned long long)r->num_fence_orders, (unsigned long long)r->num_fence_catch_ups);
    if (r->num_reuse_frees)
        printf("orders at reuse     %llu frees joined the pool at once, their fence skipped; %llu orders "
               "before such blocks went to new owners\n",
               (unsigned long long)r->num_reuse_frees, (unsigned long long)r->num_reuse_orders);
    const cci_vmm_counts *v = &r->vmm;
    if (v->mode) {
        // The calls a GPU run makes for the same requests, and what they cost there.
        printf("VMM calls           %llu creates, %llu maps, %llu set-access, %llu unmaps (%llu pages), "
               "%llu releases\n",
               (unsigned long long)v->page_creates, (unsigned long long)v->maps, (unsigned long long)v->set_access,
               (unsigned long long)v->unmaps, (unsigned long long)v->unmapped_pages,
               (unsigned long long)v->page_releases);
        printf("VMM reuse           %llu pages mapped again from the pool, %llu reclaims, %llu device syncs "
               "before unmapping\n",
               (unsigned long long)v->pool_hits, (unsigned long long)v->reclaims, (unsigned long long)v->syncs);
        if (v->churn_raises)
            printf("VMM churn           %llu growths let reserved grow instead of moving pages again "
                   "(churn slack %.1f MiB)\n", (unsigned long long)v->churn_raises, mib(v->churn_slack));
        // The per-call costs are an idle device's; while kernels run the H100 took 5-10x longer
        // (set-access 171 us, unmap 121 us, map 18 us): what compact mode cost seedfrag's wall time.
        printf("VMM driver time     %.1f ms estimated (H100 per-call costs on an idle device, several times "
               "more while kernels run; syncs not included)\n",
               cci_vmm_estimated_us(v) / 1000.0);
    }
    if (t->recorded_ooms)
        printf("OOMs in the trace   %llu (replayed as allocation attempts, freed at once if they succeed)\n",
               (unsigned long long)t->recorded_ooms);
    if (r->unmatched_frees)
        printf("unmatched frees     %llu (blocks allocated before the trace began)\n",
               (unsigned long long)r->unmatched_frees);
}

int main(int argc, char **argv)
{
    const char *conf = NULL, *path = NULL;
    size_t capacity = 0;
    int json = 0, sweep = 0, jobs = 0;
    cci_replay_opts opts = {0};
    int busy_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char opt[32];
        // --opt=value and --opt value are both accepted.
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof opt) {
            memcpy(opt, a, (size_t)(eq - a));
            opt[eq - a] = 0;
            a = opt;
            val = eq + 1;
        }
        int takes = !strcmp(a, "--conf") || !strcmp(a, "--capacity") || !strcmp(a, "--jobs") ||
                    !strcmp(a, "--fenced-lag") || !strcmp(a, "--fenced-streams") ||
                    !strcmp(a, "--fenced-busy");
        if (takes && !val) {
            if (i + 1 >= argc)
                return bad("%s needs a value", a);
            val = argv[++i];
        } else if (!takes && val) {
            return bad("%s takes no value", a);
        }
        if (!strcmp(a, "--conf")) {
            conf = val;
        } else if (!strcmp(a, "--capacity")) {
            if (parse_bytes(val, &capacity) != 0 || capacity == 0)
                return bad("--capacity: '%s' is not a size (expected e.g. 80G, 512M, 1048576)", val);
        } else if (!strcmp(a, "--jobs")) {
            char *end;
            long j = strtol(val, &end, 10);
            if (end == val || *end || j < 1 || j > 1024)
                return bad("--jobs: '%s' is not a number of threads from 1 to 1024", val);
            jobs = (int)j;
        } else if (!strcmp(a, "--fenced-lag")) {
            char *end;
            unsigned long long lag = strtoull(val, &end, 10);
            if (end == val || *end || *val < '0' || *val > '9' || lag > 1000000000ull)
                return bad("--fenced-lag: '%s' is not a number of fence records from 0 to 1000000000", val);
            opts.fenced = 1;
            opts.fence_lag = lag;
        } else if (!strcmp(a, "--fenced-streams")) {
            char *end;
            unsigned long n = strtoul(val, &end, 10);
            if (end == val || *end || *val < '0' || *val > '9' || n < 1 || n > 1000000)
                return bad("--fenced-streams: '%s' is not a number of streams from 1 to 1000000", val);
            opts.fence_streams = (unsigned)n;
        } else if (!strcmp(a, "--fenced-busy")) {
            char *end;
            unsigned long n = strtoul(val, &end, 10);
            if (end == val || *end || *val < '0' || *val > '9' || n > 1000000)
                return bad("--fenced-busy: '%s' is not a number of streams from 0 to 1000000", val);
            opts.fence_busy = (unsigned)n;
            busy_given = 1;
        } else if (!strcmp(a, "--fenced-order")) {
            opts.fence_order = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--sweep")) {
            sweep = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((a[0] == '-' && a[1]) || path) {
            return bad("unexpected argument '%s'", argv[i]);
        } else {
            path = a;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    if (sweep && conf)
        return bad("%s cannot be combined with --sweep", "--conf");
    if (sweep && opts.fenced)
        return bad("%s cannot be combined with --sweep", "--fenced-lag");
    if (opts.fence_streams && !opts.fenced)
        return bad("%s needs --fenced-lag", "--fenced-streams");
    if (busy_given && !opts.fenced)
        return bad("%s needs --fenced-lag", "--fenced-busy");
    if (opts.fence_order && !opts.fenced)
        return bad("%s needs --fenced-lag", "--fenced-order");
    if (opts.fence_busy > (opts.fence_streams ? opts.fence_streams : 1))
        return bad("--fenced-busy %u: more busy streams than --fenced-streams gives", opts.fence_busy);
    if (jobs && !sweep)
        return bad("%s only applies to --sweep", "--jobs");

    char err[512];
    cci_config cfg;
    cci_config_default(&cfg);
    if (!conf)
        conf = "";
    if (cci_config_parse(&cfg, conf, "--conf", err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "ccreplay: %s\n", err);
        return 2;
    }
    cci_trace t;
    if (cci_trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "ccreplay: %s\n", err);
        return 2;
    }
    if (t.truncated_bytes)
        fprintf(stderr,
                "ccreplay: warning: %s: the last record is incomplete (%llu bytes, the recording was cut "
                "short); replaying the %zu complete events before it\n",
                path, (unsigned long long)t.truncated_bytes, t.n);
    if (t.missing_events)
        fprintf(stderr,
                "ccreplay: warning: %s: %llu events are missing (buffers lost when the recording ended); "
                "frees of blocks whose allocation is missing are skipped\n",
                path, (unsigned long long)t.missing_events);

    if (sweep) {
        if (!jobs) {
            long n = sysconf(_SC_NPROCESSORS_ONLN);
            jobs = n > 0 ? (int)(n > 1024 ? 1024 : n) : 1;
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = cci_sweep(&t, path, capacity, jobs, json, stdout, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cci_trace_free(&t);
        if (rc != 0) {
            fprintf(stderr, "ccreplay: %s\n", err);
            return 1;
        }
        // On stderr, so that the table itself is the same on every run.
        fprintf(stderr, "ccreplay: sweep took %.2f s on %d thread%s\n",
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, jobs,
                jobs > 1 ? "s" : "");
        return 0;
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cci_replay_result r;
    int rc = cci_replay_opts_until(&t, &cfg, capacity, &opts, NULL, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc != 0) {
        cci_trace_free(&t);
        fprintf(stderr, "ccreplay: out of host memory during the replay\n");
        return 1;
    }
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (json)
        print_json(&t, &r, &opts, secs);
    else
        print_text(path, conf, capacity, &t, &r, &opts, secs);
    cci_trace_free(&t);
    return 0;
}
