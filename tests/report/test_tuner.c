// SPDX-License-Identifier: MIT
// The tuner's rule (src/report/tuner.h) on rows shaped like the workloads that showed the old
// rules wrong (2026-11-28): a generation trace where compact segments peak lowest at twice the
// default's device allocations, and a VMM mode whose calls cost more than the run can spare.
// Each case fails if its part of the rule is taken out: the time allowance (compact would lose
// to expandable on call count), its scale (a short run must refuse the same calls), OOMs first,
// the reference kept within NEAR_BEST, and independence from the input order.
#include <stdio.h>
#include <string.h>

#include "tuner.h"

#include "report_check.h"

#define MIB (1024ull * 1024)

// Ordinary segments: n cudaMalloc of `mib` MiB each, all freed again.
static cci_tuner_calls plain(uint64_t n, uint64_t mib)
{
    return (cci_tuner_calls){.device_allocs = n, .device_frees = n, .device_alloc_bytes = n * mib * MIB};
}

// A VMM mode: `pages` pages created, mapped and released, in `runs` runs of set-access and unmap.
static cci_tuner_calls vmm(int mode, uint64_t pages, uint64_t runs)
{
    return (cci_tuner_calls){.vmm_mode = mode, .device_allocs = runs, .page_creates = pages, .maps = pages,
                             .set_access = runs, .unmaps = runs, .page_releases = pages};
}

static const char *conf_of(const cci_tuner_row *rows, size_t k) { return rows[k].conf; }

static void generation_trace(void)
{
    // 740 MiB with 96 device allocations against expandable's 770 MiB with 44: the old budget
    // (max(2x, default + 16) device allocations) passed compact over.
    cci_tuner_row rows[] = {
        {"", 0, 0, 1020 * MIB, plain(44, 20)},
        {"expandable_segments:True", 1, 0, 770 * MIB, vmm(1, 50, 44)},
        {"compact_segments:True", 1, 0, 740 * MIB, vmm(2, 60, 96)},
        {"max_split_size_mb:128", 1, 0, 1020 * MIB, plain(44, 20)},
    };
    size_t n = sizeof rows / sizeof rows[0];
    double extra = cci_tuner_call_us(&rows[2].calls) - cci_tuner_call_us(&rows[0].calls);
    CHECK(extra > 1000 && extra < 20000, "compact's extra call time %.0f us is not a few milliseconds", extra);
    // A run of 30 s: a few milliseconds are under 1 %: the lowest peak wins.
    size_t k = cci_tuner_choose(rows, n, 0, 30.0);
    CHECK(k == 2, "30 s run: recommended %s, not compact_segments:True", conf_of(rows, k));
    // The same calls in a run of 50 ms are far over 1 %: compact is passed over for expandable, whose
    // calls cost no more than the default's.
    k = cci_tuner_choose(rows, n, 0, 0.05);
    CHECK(k == 1, "50 ms run: recommended %s, not expandable_segments:True", conf_of(rows, k));
    // Unknown duration: the assumed second (10 ms allowed) decides as the arithmetic says.
    double exp_extra = cci_tuner_call_us(&rows[1].calls) - cci_tuner_call_us(&rows[0].calls);
    k = cci_tuner_choose(rows, n, 0, 0);
    size_t want = extra <= cci_tuner_allowance_us(0) ? 2 : exp_extra <= cci_tuner_allowance_us(0) ? 1 : 0;
    CHECK(k == want, "unknown duration: recommended %s, not %s", conf_of(rows, k), conf_of(rows, want));
    // Reversed input, the default still the reference: the same answer.
    cci_tuner_row rev[4];
    for (size_t i = 0; i < n; i++)
        rev[i] = rows[n - 1 - i];
    k = cci_tuner_choose(rev, n, n - 1, 30.0);
    CHECK(!strcmp(rev[k].conf, "compact_segments:True"), "reversed rows: recommended %s", rev[k].conf);
}

static void ooms_first_and_reference_kept(void)
{
    cci_tuner_row rows[] = {
        {"", 0, 3, 900 * MIB, plain(10, 20)},
        {"garbage_collection_threshold:0.8,per_process_memory_fraction:0.9", 2, 0, 950 * MIB, plain(4000, 20)},
        {"roundup_power2_divisions:4", 1, 3, 800 * MIB, plain(10, 20)},
    };
    // Fewer OOMs beat any peak and any call time (4000 extra cudaMalloc in a 1 s run).
    size_t k = cci_tuner_choose(rows, 3, 0, 1.0);
    CHECK(k == 1, "OOMs: recommended %s, not the configuration without OOMs", conf_of(rows, k));
    // Within 0.5 % of the best peak the reference stays, even with more keys than the other.
    cci_tuner_row near[] = {
        {"max_split_size_mb:256", 1, 0, 1000 * MIB, plain(10, 20)},
        {"", 0, 0, 997 * MIB, plain(10, 20)},
    };
    k = cci_tuner_choose(near, 2, 0, 1.0);
    CHECK(k == 0, "near-best: recommended %s, not the reference", conf_of(near, k));
}

static void words(void)
{
    char rule[1024], cost[1024];
    cci_tuner_rule_text(rule, sizeof rule, 12.5, "the default's");
    // The words come from the constants the code applies: 1 % of 12.5 s is 125 ms.
    CHECK(strstr(rule, "at most 1.0 % of the trace's duration, 12.5 s (125.0 ms) slower than the default's"),
          "rule: %s", rule);
    CHECK(strstr(rule, "within 0.5 % of the lowest peak") && strstr(rule, "cudaMalloc 46 \xc2\xb5s + 0.21"),
          "rule: %s", rule);
    cci_tuner_row def = {"", 0, 0, 1020 * MIB, plain(44, 20)};
    cci_tuner_row cmp = {"compact_segments:True", 1, 0, 740 * MIB, vmm(2, 60, 96)};
    cci_tuner_cost_text(cost, sizeof cost, &cmp, &def, 30.0);
    CHECK(strstr(cost, "CUDA IPC") && strstr(cost, "device calls") && strstr(cost, "of the run's 30.0 s"),
          "cost: %s", cost);
    cci_tuner_recommendation_text(cost, sizeof cost, &def, &def, "the default", 30.0);
    CHECK(!strncmp(cost, "keep the default", 16), "kept: %s", cost);
}

int main(void)
{
    generation_trace();
    ooms_first_and_reference_kept();
    words();
    printf("tuner: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
