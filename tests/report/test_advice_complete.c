// SPDX-License-Identifier: MIT
// No advice text is ever cut: every advice rule is triggered with extreme figures
// (counts near 2^64, sizes of exabytes, configuration strings of 191 characters, a thousand
// what-if rows), in each of its variants (measured by replay, not measured, measured with
// nothing lower), and each text must be whole: it ends with its rule's own last sentence, each
// extreme figure appears in full, and the replayed gains match strings built here independently.
// The longest texts run far past the 480-byte buffer that used to cut them.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_impl.h"

#include "report_check.h"

static const char *text_of(const cci_report_device *d, const char *rule)
{
    for (size_t k = 0; k < d->nadvice; k++)
        if (!strcmp(d->advice[k].rule, rule))
            return d->advice[k].text;
    return NULL;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !memcmp(s + n - m, tail, m);
}

/// The rule fired, its text is whole (ends with `tail`, the rule's last words) and contains each
/// of `parts` (NULL-terminated). Returns the text's length.
static size_t expect(const cci_report_device *d, const char *rule, const char *tail, const char *const *parts)
{
    const char *t = text_of(d, rule);
    CHECK(t != NULL, "rule %s did not fire", rule);
    if (!t)
        return 0;
    CHECK(ends_with(t, tail), "rule %s is cut or ends wrongly: ...%s", rule, t + (strlen(t) > 160 ? strlen(t) - 160 : 0));
    for (size_t i = 0; parts && parts[i]; i++)
        CHECK(strstr(t, parts[i]) != NULL, "rule %s lacks \"%.80s\"", rule, parts[i]);
    return strlen(t);
}

// Figures that make every number as long as it can get.
#define HUGE_COUNT (UINT64_MAX - 1)
#define EXA ((uint64_t)1 << 62)

static void extreme_device(cci_report_device *d)
{
    memset(d, 0, sizeof *d);
    cci_stats *st = &d->stats;
    st->num_ooms = HUGE_COUNT;
    st->num_alloc_retries = HUGE_COUNT - 1;
    st->num_device_alloc = HUGE_COUNT;
    st->num_device_free = HUGE_COUNT - 2;
    st->segment[CCI_POOL_ALL].peak = 1;
    st->max_split_size = UINT64_MAX;
    st->allocation[CCI_POOL_ALL].allocated = INT64_MAX;
    st->reserved_bytes[CCI_POOL_ALL].peak = INT64_MAX;
    st->allocated_bytes[CCI_POOL_ALL].peak = 1;
    cci_report_frag *f = &d->frag_peak;
    f->valid = 1;
    f->reserved = EXA * 3;
    f->allocated = 4096;
    f->cached_free = EXA * 2;
    f->largest_free = 1 << 21;
    f->free_blocks = HUGE_COUNT;
    f->pending = EXA;
    f->ratio = 0.999999;
    d->frag_now = *f;
    cci_report_misses *m = &d->misses;
    m->count = m->large_count = HUGE_COUNT;
    m->large_min_request = EXA;  // a split limit of 2^42 MiB
    m->large_segment_bytes = EXA * 3;
    m->min_request = 1;
    m->max_request = EXA;
}

// A configuration string of 191 characters (the longest a what-if row holds), unique per index.
static void long_conf(char *out, size_t len, const char *head, size_t i)
{
    int n = snprintf(out, len, "%s,garbage_collection_threshold:0.%06zu,roundup_power2_divisions:[", head, i);
    while ((size_t)n + 8 < len - 1)
        n += snprintf(out + n, len - (size_t)n, "%s64:16", out[n - 1] == '[' ? "" : ",");
    snprintf(out + n, len - (size_t)n, "]");
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

// The gain phrase, built here rather than by the library's function.
static void gain(char *out, size_t len, const char *conf, uint64_t peak, uint64_t now)
{
    snprintf(out, len, "%s would have peaked at %.1f MiB instead of %.1f MiB (\xe2\x88\x92%.1f %%)", conf, mib(peak),
             mib(now), 100.0 * (double)(now - peak) / (double)now);
}

#define NROWS 1000

// Measured: `lower` rows peak lower than the current setting (all of them when lower = 1).
static void measure(cci_report_device *d, int lower, uint64_t current_peak)
{
    cci_report_whatif *w = &d->whatif;
    w->measured = 1;
    w->events = HUGE_COUNT;
    w->events_dropped = HUGE_COUNT - 3;
    w->history_cap = HUGE_COUNT - 4;
    w->seconds = 1e6;
    w->bound_seconds = 1e6;
    w->planned = SIZE_MAX;
    w->replayed = SIZE_MAX - 1;
    long_conf(w->current.conf, sizeof w->current.conf, "max_split_size_mb:99999999", 0);
    w->current.peak_reserved = current_peak;
    w->nrows = NROWS;
    w->rows = calloc(NROWS, sizeof *w->rows);
    if (!w->rows)
        exit(1);
    char limit[64];
    snprintf(limit, sizeof limit, "max_split_size_mb:%" PRIu64, EXA / (1 << 20));
    for (size_t i = 0; i < NROWS; i++) {
        cci_report_whatif_row *r = &w->rows[i];
        // Ranked: the named configurations the rules look up come among the long ones.
        if (i == 3)
            snprintf(r->conf, sizeof r->conf, "%s", limit);
        else if (i == 4)
            snprintf(r->conf, sizeof r->conf, "expandable_segments:True");
        else if (i == 5)
            snprintf(r->conf, sizeof r->conf, "compact_segments:True");
        else if (i == 6)
            r->conf[0] = '\0';
        else
            long_conf(r->conf, sizeof r->conf, "expandable_segments:True", i);
        r->peak_reserved = lower ? current_peak / 2 + i * 4096 : current_peak + 1 + i;
        r->num_device_alloc = HUGE_COUNT;
    }
}

static size_t longest;

static void note(size_t n)
{
    if (n > longest)
        longest = n;
}

static void unmeasured_rules(void)
{
    cci_report_device d;
    extreme_device(&d);
    cci__advice_compute(&d);
    char n1[32], n2[32];
    snprintf(n1, sizeof n1, "%" PRIu64, HUGE_COUNT);
    snprintf(n2, sizeof n2, "%" PRIu64, HUGE_COUNT - 1);
    const char *oom[] = {n1, NULL}, *retries[] = {n2, NULL};
    note(expect(&d, "oom", "the advice below says where reserved memory went.", oom));
    note(expect(&d, "retries", "and each retry synchronises the device.", retries));
    char limit[64];
    snprintf(limit, sizeof limit, "Try max_split_size_mb:%" PRIu64 ".", EXA / (1 << 20));
    const char *split[] = {limit, n1, NULL};
    note(expect(&d, "max_split_size", "`ccreplay --conf` or `--sweep` before adopting it.", split));
    note(expect(&d, "peak_waste", "find the setting with the lowest peak.", NULL));
    note(expect(&d, "fragmentation", "allocating long-lived buffers first keeps the holes together.", NULL));
    note(expect(&d, "pending", "freeing on the allocating stream makes it reusable at once.", NULL));
    const char *churn[] = {n1, NULL};
    note(expect(&d, "churn", "release segments that are soon needed again.", churn));
    cci__advice_clear(&d);
}

static void measured_lower_rules(void)
{
    cci_report_device d;
    extreme_device(&d);
    uint64_t now = EXA * 3;
    measure(&d, 1, now);
    cci__advice_compute(&d);
    const cci_report_whatif *w = &d.whatif;
    char g0[512], g1[512], g2[512], gsplit[256], gexp[256], gcompact[256];
    gain(g0, sizeof g0, w->rows[0].conf, w->rows[0].peak_reserved, now);
    gain(g1, sizeof g1, w->rows[1].conf, w->rows[1].peak_reserved, now);
    gain(g2, sizeof g2, w->rows[2].conf, w->rows[2].peak_reserved, now);
    gain(gsplit, sizeof gsplit, w->rows[3].conf, w->rows[3].peak_reserved, now);
    gain(gexp, sizeof gexp, w->rows[4].conf, w->rows[4].peak_reserved, now);
    gain(gcompact, sizeof gcompact, w->rows[5].conf, w->rows[5].peak_reserved, now);
    char cap[160];
    snprintf(cap, sizeof cap, "cap of %" PRIu64 " events (CCI_HISTORY_MAX): %" PRIu64 " later events", HUGE_COUNT - 4,
             HUGE_COUNT - 3);
    // Every row within 0.5 % of the lowest peak at no extra call time: the rule takes the one with
    // the fewest keys, the defaults (row 6), and names it once in full.
    char rec[600], peak_now[64], peak_rec[64];
    snprintf(peak_rec, sizeof peak_rec, "%.1f MiB", mib(w->rows[6].peak_reserved));
    snprintf(peak_now, sizeof peak_now, "%.1f MiB", mib(now));
    snprintf(rec, sizeof rec, "recommended: the defaults (CCI_ALLOC_CONF unset: compact segments): peak reserved %s instead of %s "
             "(\xe2\x88\x92", peak_rec, peak_now);
    const char *whatif[] = {rec, cap, "Its cost: ", NULL};
    size_t n = expect(&d, "what_if", "so these figures cover the start of the run only.", whatif);
    note(n);
    CHECK(n > 480, "what_if text only %zu bytes", n);
    (void)g0, (void)g1, (void)g2;
    char split_tail[300];
    snprintf(split_tail, sizeof split_tail, "Replayed: %s.", gsplit);
    note(expect(&d, "max_split_size", split_tail, NULL));
    // The recommendation is referred to, not repeated; the lower virtual-memory modes cost no more
    // calls here, so they are not named as passed over either.
    const char *best_tail = " Replayed: the defaults (CCI_ALLOC_CONF unset: compact segments) (above).";
    note(expect(&d, "peak_waste", best_tail, NULL));
    CHECK(!strstr(text_of(&d, "peak_waste"), "Passed over"), "peak_waste names modes passed over for no reason");
    (void)gexp, (void)gcompact;
    note(expect(&d, "fragmentation", best_tail, NULL));
    note(expect(&d, "pending", best_tail, NULL));
    note(expect(&d, "churn", best_tail, NULL));
    cci__advice_clear(&d);
    free(d.whatif.rows);
}

static void measured_nothing_lower_rules(void)
{
    cci_report_device d;
    extreme_device(&d);
    uint64_t now = EXA;
    measure(&d, 0, now);
    cci__advice_compute(&d);
    char best[600], none[160];
    snprintf(best, sizeof best, "recommended: keep this run's setting (%s, peak reserved %.1f MiB): no other "
             "configuration does better under the rule.", d.whatif.current.conf, mib(now));
    snprintf(none, sizeof none, " Replayed: no configuration of the grid does better than the current one under the "
             "tuner's rule (%.1f MiB peak reserved).", mib(now));
    const char *whatif[] = {best, NULL};
    note(expect(&d, "what_if", "so these figures cover the start of the run only.", whatif));
    CHECK(text_of(&d, "max_split_size") == NULL, "a measured split limit that is not lower was advised");
    note(expect(&d, "peak_waste", none, NULL));
    note(expect(&d, "fragmentation", none, NULL));
    note(expect(&d, "pending", none, NULL));
    note(expect(&d, "churn", none, NULL));
    cci__advice_clear(&d);
    free(d.whatif.rows);
}

// A split limit is set: its two rules (the limit unused; free memory idle in oversize blocks).
static void limit_rules(int measured)
{
    cci_report_device d;
    extreme_device(&d);
    d.stats.max_split_size = (uint64_t)1 << 60;
    d.stats.oversize_allocations.allocated = 0;
    d.stats.oversize_segments.peak = INT64_MAX;
    d.frag_peak.oversize_free = EXA * 2;
    // Without failures, so that all the other rules fit in the report's CCI_REPORT_MAX_ADVICE.
    d.stats.num_ooms = d.stats.num_alloc_retries = 0;
    uint64_t now = EXA * 3;
    if (measured)
        measure(&d, 1, now);
    cci__advice_compute(&d);
    char lim[96];
    snprintf(lim, sizeof lim, "max_split_size_mb:%" PRIu64 " is set", ((uint64_t)1 << 60) / (1 << 20));
    const char *unused[] = {lim, NULL};
    note(expect(&d, "unused_limit", "the limit changes nothing for this program.", unused));
    if (measured) {
        note(expect(&d, "oversize_idle", " Dropping the limit: the defaults (CCI_ALLOC_CONF unset: compact segments) (above).",
                        NULL));
    } else {
        note(expect(&d, "oversize_idle", "`ccreplay --sweep` on a recorded trace compares the choices.", NULL));
    }
    cci__advice_clear(&d);
    free(d.whatif.rows);
}

static void healthy_and_idle(void)
{
    cci_report_device d;
    memset(&d, 0, sizeof d);
    cci__advice_compute(&d);
    note(expect(&d, "idle", "No device memory was requested through libccinterpose on this device.", NULL));
    cci__advice_clear(&d);
    memset(&d, 0, sizeof d);
    d.stats.num_device_alloc = 1;
    d.stats.max_split_size = UINT64_MAX;
    d.frag_peak.valid = 1;
    d.frag_peak.reserved = d.frag_peak.allocated = EXA * 3;
    cci__advice_compute(&d);
    note(expect(&d, "healthy", "errors or retries and no fragmentation worth acting on.", NULL));
    CHECK(d.nadvice == 1, "healthy comes alone, not with %zu others", d.nadvice - 1);
    cci__advice_clear(&d);
}

int main(void)
{
    unmeasured_rules();
    measured_lower_rules();
    measured_nothing_lower_rules();
    limit_rules(0);
    limit_rules(1);
    healthy_and_idle();
    printf("advice: every rule whole; longest text %zu bytes (the old buffer held 480)\n", longest);
    return failures ? 1 : 0;
}
