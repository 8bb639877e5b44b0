// SPDX-License-Identifier: MIT
// The tuner's rule and its wording (tuner.h). Numbers are formatted by integer arithmetic, as in
// the rest of the reports: a host program's LC_NUMERIC must not turn a point into a comma.
#include <stdio.h>
#include <string.h>

#include "tuner.h"

// What one device call costs the host, microseconds, on an idle H100 (driver 580, CUDA 13), one
// thread, 2 MiB pages: ../shared/reference/vmm-and-streams-facts.md, "The CUDA virtual-memory
// (VMM) API on the H100". cudaMalloc there: 46-47 us for 2 MiB, 47-50 for 20 MiB, 146-163 for
// 512 MiB, modelled as a fixed part plus a part per MiB; cudaFree 38-39, 53-57 and 348-361 us,
// counted at its 20 MiB figure (the tuner counts frees, not their bytes). Refresh from the
// preload's own counters (cci_stats vmm_*, the exit line) on other hardware; while kernels run
// the calls cost more (cuMemSetAccess 171 us on the H100, 130-1600 us on an H200 under DDP,
// docs/benchmarks.md, "Multi-stream"), so these are lower bounds.
#define US_MALLOC_FIXED 46.0
#define US_MALLOC_PER_MIB 0.21
#define US_FREE 55.0
#define US_MEM_CREATE 13.0
#define US_MEM_MAP 2.0  // (1.3-2.1)
#define US_MEM_SET_ACCESS 30.0
#define US_MEM_UNMAP 22.0
#define US_MEM_RELEASE 15.0
#define COST_ORIGIN "idle-H100 figures"

// Extra device-call time a configuration may add over the reference without being passed over,
// as a share of the recorded run's duration: below it the calls are noise against the run.
#define TIME_SHARE 0.01
// A trace without time stamps (text traces) is scaled as if the run took this long.
#define UNKNOWN_DURATION_S 1.0
// Within this fraction of the lowest peak, the configuration with the fewest keys wins: a setting
// that buys nothing measurable is one more thing to get wrong.
#define NEAR_BEST 0.005

double cci_tuner_call_us(const cci_tuner_calls *c)
{
    if (c->vmm_mode)
        return US_MEM_CREATE * (double)c->page_creates + US_MEM_MAP * (double)c->maps +
               US_MEM_SET_ACCESS * (double)c->set_access + US_MEM_UNMAP * (double)c->unmaps +
               US_MEM_RELEASE * (double)c->page_releases;
    return US_MALLOC_FIXED * (double)c->device_allocs +
           US_MALLOC_PER_MIB * (double)c->device_alloc_bytes / 1048576.0 + US_FREE * (double)c->device_frees;
}

uint64_t cci_tuner_call_count(const cci_tuner_calls *c)
{
    if (c->vmm_mode)
        return c->page_creates + c->maps + c->set_access + c->unmaps + c->page_releases;
    return c->device_allocs + c->device_frees;
}

double cci_tuner_allowance_us(double duration_s)
{
    return TIME_SHARE * (duration_s > 0 ? duration_s : UNKNOWN_DURATION_S) * 1e6;
}

// Total order among the near-best: the reference first (no change for nothing), then fewest
// keys, cheaper calls, lower peak, then the spelling, so input order never matters.
static int better(const cci_tuner_row *x, size_t xi, const cci_tuner_row *y, size_t yi, size_t ref)
{
    if ((xi == ref) != (yi == ref))
        return xi == ref;
    if (x->nkeys != y->nkeys)
        return x->nkeys < y->nkeys;
    double tx = cci_tuner_call_us(&x->calls), ty = cci_tuner_call_us(&y->calls);
    if (tx != ty)
        return tx < ty;
    if (x->peak_reserved != y->peak_reserved)
        return x->peak_reserved < y->peak_reserved;
    int c = strcmp(x->conf ? x->conf : "", y->conf ? y->conf : "");
    return c ? c < 0 : xi < yi;
}

size_t cci_tuner_choose(const cci_tuner_row *rows, size_t n, size_t ref, double duration_s)
{
    if (n == 0 || ref >= n)
        return ref;
    uint64_t min_ooms = UINT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (rows[i].num_ooms < min_ooms)
            min_ooms = rows[i].num_ooms;
    double limit = cci_tuner_call_us(&rows[ref].calls) + cci_tuner_allowance_us(duration_s);
    int any_affordable = 0;
    for (size_t i = 0; i < n; i++)
        any_affordable |= rows[i].num_ooms == min_ooms && cci_tuner_call_us(&rows[i].calls) <= limit;
    // Fewer OOMs come first whatever they cost; among equals, calls within the allowance.
#define IN_POOL(r) ((r)->num_ooms == min_ooms && (!any_affordable || cci_tuner_call_us(&(r)->calls) <= limit))
    uint64_t best_peak = UINT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (IN_POOL(&rows[i]) && rows[i].peak_reserved < best_peak)
            best_peak = rows[i].peak_reserved;
    size_t pick = n;
    for (size_t i = 0; i < n; i++) {
        const cci_tuner_row *r = &rows[i];
        if (!IN_POOL(r) || (double)r->peak_reserved > (double)best_peak * (1.0 + NEAR_BEST))
            continue;
        if (pick == n || better(r, i, &rows[pick], pick, ref))
            pick = i;
    }
#undef IN_POOL
    return pick == n ? ref : pick;
}

size_t cci_tuner_word_len(const char *p)
{
    size_t w = strcspn(p, " ");
    if (w && p[w] == ' ' && p[w - 1] >= '0' && p[w - 1] <= '9') {
        const char *q = p + w + 1;
        size_t u = strcspn(q, " ");
        if (u && u <= 4 && !(q[0] >= '0' && q[0] <= '9'))
            w += 1 + u;
    }
    return w;
}

// "12.3": one decimal, locale-proof.
static const char *dec1(double v, char *buf, size_t len)
{
    int neg = v < 0;
    unsigned long long t = (unsigned long long)((neg ? -v : v) * 10.0 + 0.5);
    snprintf(buf, len, "%s%llu.%llu", neg && t ? "-" : "", t / 10, t % 10);
    return buf;
}

// "0.35": two decimals, locale-proof.
static const char *dec2(double v, char *buf, size_t len)
{
    unsigned long long t = (unsigned long long)(v * 100.0 + 0.5);
    snprintf(buf, len, "%llu.%02llu", t / 100, t % 100);
    return buf;
}

// A duration in the unit that reads best: "850 µs", "12.3 ms", "4.2 s".
static const char *span(double us, char *buf, size_t len)
{
    char d[24];
    if (us < 1000.0)
        snprintf(buf, len, "%.0f \xc2\xb5s", us);
    else if (us < 1e6)
        snprintf(buf, len, "%s ms", dec1(us / 1000.0, d, sizeof d));
    else
        snprintf(buf, len, "%s s", dec1(us / 1e6, d, sizeof d));
    return buf;
}

size_t cci_tuner_rule_text(char *buf, size_t len, double duration_s, const char *ref_name)
{
    char a[40], d[40], share[32], per_mib[32];
    char scale[128];
    if (duration_s > 0)
        snprintf(scale, sizeof scale, "the trace's duration, %s", span(duration_s * 1e6, d, sizeof d));
    else
        snprintf(scale, sizeof scale, "an assumed %s (the trace records no time)",
                 span(UNKNOWN_DURATION_S * 1e6, d, sizeof d));
    int w = snprintf(buf, len,
                     "rule: fewest OOMs; then device calls estimated at most %s %% of %s (%s) slower than %s, "
                     "where any such configuration exists; then the fewest keys among those within %s %% of the "
                     "lowest peak reserved. Call costs (%s): cudaMalloc %.0f \xc2\xb5s + %s \xc2\xb5s/MiB, "
                     "cudaFree %.0f \xc2\xb5s, cuMemCreate %.0f \xc2\xb5s, cuMemMap %.0f \xc2\xb5s, "
                     "cuMemSetAccess %.0f \xc2\xb5s, cuMemUnmap %.0f \xc2\xb5s, cuMemRelease %.0f \xc2\xb5s",
                     dec1(TIME_SHARE * 100, share, sizeof share), scale,
                     span(cci_tuner_allowance_us(duration_s), a, sizeof a), ref_name,
                     dec1(NEAR_BEST * 100, d, sizeof d), COST_ORIGIN, US_MALLOC_FIXED,
                     dec2(US_MALLOC_PER_MIB, per_mib, sizeof per_mib), US_FREE,
                     US_MEM_CREATE, US_MEM_MAP, US_MEM_SET_ACCESS, US_MEM_UNMAP, US_MEM_RELEASE);
    return w < 0 ? 0 : (size_t)w;
}

static int is_vmm(const cci_tuner_row *r) { return r->calls.vmm_mode != 0; }

size_t cci_tuner_gain_text(char *buf, size_t len, const cci_tuner_row *rec, const cci_tuner_row *ref)
{
    char a[32], b[32], p[32];
    uint64_t now = ref->peak_reserved, then = rec->peak_reserved;
    double change = now ? 100.0 * ((double)then - (double)now) / (double)now : 0.0;
    int w = snprintf(buf, len, "%s MiB instead of %s MiB (%s%s %%)", dec1((double)then / 1048576.0, a, sizeof a),
                     dec1((double)now / 1048576.0, b, sizeof b), change < 0 ? "\xe2\x88\x92" : "+",
                     dec1(change < 0 ? -change : change, p, sizeof p));
    return w < 0 ? 0 : (size_t)w;
}

size_t cci_tuner_cost_text(char *buf, size_t len, const cci_tuner_row *rec, const cci_tuner_row *ref,
                           double duration_s)
{
    if (len)
        buf[0] = 0;
    if (rec == ref)
        return 0;
    char t1[40], t2[40], t3[40], pc[32];
    double us = cci_tuner_call_us(&rec->calls), ref_us = cci_tuner_call_us(&ref->calls);
    double scale = (duration_s > 0 ? duration_s : UNKNOWN_DURATION_S) * 1e6;
    size_t w = 0;
#define PUT(...)                                                                                  \
    do {                                                                                          \
        int k_ = snprintf(buf + w, w < len ? len - w : 0, __VA_ARGS__);                           \
        if (k_ > 0)                                                                               \
            w += (size_t)k_;                                                                      \
    } while (0)
    PUT("Its cost: %llu device calls (%s) against %llu, about %s of host time against %s (estimated",
        (unsigned long long)cci_tuner_call_count(&rec->calls),
        is_vmm(rec) ? "cuMemCreate/Map/SetAccess/Unmap/Release" : "cudaMalloc/cudaFree",
        (unsigned long long)cci_tuner_call_count(&ref->calls), span(us, t1, sizeof t1), span(ref_us, t2, sizeof t2));
    if (us > ref_us)
        PUT("; %s more is %s %% of %s %s)", span(us - ref_us, t3, sizeof t3),
            dec2(100.0 * (us - ref_us) / scale, pc, sizeof pc), duration_s > 0 ? "the run's" : "an assumed",
            span(scale, t2, sizeof t2));
    else
        PUT(")");
    PUT(".");
    if (is_vmm(rec) && !is_vmm(ref))
        PUT(" Blocks of virtual-memory segments are shared with CUDA IPC (cudaIpcGetMemHandle) only between "
            "processes that both run libccinterpose; one without it gets an invalid-handle error (docs/ipc.md).");
#undef PUT
    if (w >= len && len)
        buf[len - 1] = 0;
    return w;
}

size_t cci_tuner_recommendation_text(char *buf, size_t len, const cci_tuner_row *rec, const cci_tuner_row *ref,
                                     const char *ref_name, double duration_s)
{
    char gain[96], cost[640], a[32];
    if (rec == ref) {
        int w = snprintf(buf, len, "keep %s (%s, peak reserved %s MiB): no other configuration does better under "
                         "the rule.",
                         ref_name, ref->conf && *ref->conf ? ref->conf : "CCI_ALLOC_CONF unset",
                         dec1((double)ref->peak_reserved / 1048576.0, a, sizeof a));
        return w < 0 ? 0 : (size_t)w;
    }
    cci_tuner_gain_text(gain, sizeof gain, rec, ref);
    cci_tuner_cost_text(cost, sizeof cost, rec, ref, duration_s);
    int w;
    if (rec->conf && *rec->conf)
        w = snprintf(buf, len, "CCI_ALLOC_CONF='%s': peak reserved %s with %s%s. %s", rec->conf, gain, ref_name,
                     rec->num_ooms < ref->num_ooms ? ", and fewer OOMs" : "", cost);
    else
        w = snprintf(buf, len, "the defaults (CCI_ALLOC_CONF unset: compact segments): peak reserved %s with %s%s. %s",
                     gain, ref_name, rec->num_ooms < ref->num_ooms ? ", and fewer OOMs" : "", cost);
    return w < 0 ? 0 : (size_t)w;
}
