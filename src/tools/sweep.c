// SPDX-License-Identifier: MIT
// `ccreplay --sweep`: a fixed grid of configurations, replayed in parallel, ranked.
//
// Determinism: every row is an independent replay (its own simulated devices and allocators),
// results land in the row's own slot, and ranking happens after all threads are joined with a
// total order (OOMs, peak reserved, device allocations, then grid position), so neither the
// number of threads nor their timing can change what is printed.
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sweep.h"


static const unsigned split_mb[] = {0, 64, 128, 256, 512, 1024};  // 0 = no limit
static const unsigned divisions[] = {1, 2, 4, 8, 16};              // 1 = plain 512-byte rounding
static const struct {
    const char *conf;  // appended as is
    int with_capacity_only;
} gc_variants[] = {
    {"", 0},
    {"garbage_collection_threshold:0.8,per_process_memory_fraction:0.9", 1},
    {"garbage_collection_threshold:0.6,per_process_memory_fraction:0.9", 1},
};
// The split limits and roundings above tune ordinary segments, so those rows say
// compact_segments:False: the default is compact segments wherever the device offers the
// virtual-memory API, and the simulated device offers it as a GPU does.
#define ORDINARY "compact_segments:False"
#define SEED_ADVICE ORDINARY ",max_split_size_mb:128"
// The virtual-memory modes are swept with PyTorch's default split and rounding rules (a split
// limit together with expandable segments is a known leak in PyTorch, #123548), under each of
// the gc variants above: the default ("", compact segments) first, so that rows[0] is the default.
static const char *const vmm_modes[] = {"", "expandable_segments:True"};
#define NVMM (sizeof vmm_modes / sizeof vmm_modes[0])

typedef struct row {
    char conf[192];
    int nkeys;
    cci_config cfg;
    cci_replay_result res;
    int rc;                    // cci_replay_until's: 0 done, 1 cut by the deadline, -1 host OOM
    int started;
    int is_baseline;
} row;

typedef struct work {
    const cci_trace *t;
    size_t capacity;
    row *rows;
    size_t n;
    atomic_size_t next;
    const struct timespec *deadline;  // NULL = unbounded
} work;

static int deadline_passed(const struct timespec *d)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > d->tv_sec || (now.tv_sec == d->tv_sec && now.tv_nsec >= d->tv_nsec);
}

static void *worker(void *arg)
{
    work *w = arg;
    for (size_t i; (i = atomic_fetch_add(&w->next, 1)) < w->n;) {
        if (w->deadline && deadline_passed(w->deadline))
            break;  // rows after this one are left unstarted too: every worker stops here
        w->rows[i].started = 1;
        w->rows[i].rc = cci_replay_until(w->t, &w->rows[i].cfg, w->capacity, w->deadline, &w->rows[i].res);
    }
    return NULL;
}

// Runs w's rows on `jobs` threads (or on this one when none can start); jobs <= 1 runs them on
// the calling thread and starts none.
static void run_rows(work *w, int jobs)
{
    pthread_t th[64];
    int started = 0;
    if (jobs > 64)
        jobs = 64;
    for (int i = 0; jobs > 1 && i < jobs && (size_t)i < w->n; i++)
        if (pthread_create(&th[started], NULL, worker, w) == 0)
            started++;
    if (!started)
        worker(w);  // no thread could start: do the work here rather than fail
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

static const row *cmp_base;

static int cmp_rank(const void *a, const void *b)
{
    const row *x = &cmp_base[*(const size_t *)a], *y = &cmp_base[*(const size_t *)b];
    if (x->rc != y->rc)
        return x->rc ? 1 : -1;
#define CMP(f)                                                                                    \
    if (x->res.f != y->res.f)                                                                     \
        return x->res.f < y->res.f ? -1 : 1;
    CMP(num_ooms)
    CMP(peak_reserved)
    CMP(num_device_alloc)
#undef CMP
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    return (i > j) - (i < j);
}

static size_t build_grid(row *rows, size_t capacity, char *err, size_t errlen)
{
    size_t n = 0;
    for (size_t g = 0; g < sizeof gc_variants / sizeof gc_variants[0]; g++) {
        if (gc_variants[g].with_capacity_only && !capacity)
            continue;
        for (size_t m = 0; m < NVMM; m++) {
            row *r = &rows[n];
            r->nkeys = (*vmm_modes[m] ? 1 : 0) + (*gc_variants[g].conf ? 2 : 0);
            snprintf(r->conf, sizeof r->conf, "%s%s%s", vmm_modes[m],
                     *vmm_modes[m] && *gc_variants[g].conf ? "," : "", gc_variants[g].conf);
            cci_config_default(&r->cfg);
            char perr[256];
            if (cci_config_parse(&r->cfg, r->conf, "sweep", perr, sizeof perr, NULL, NULL) != 0) {
                snprintf(err, errlen, "internal error: grid entry '%s' does not parse: %s", r->conf, perr);
                return 0;
            }
            n++;
        }
        for (size_t s = 0; s < sizeof split_mb / sizeof split_mb[0]; s++)
            for (size_t d = 0; d < sizeof divisions / sizeof divisions[0]; d++) {
                row *r = &rows[n];
                char *p = r->conf;
                size_t left = sizeof r->conf;
                int w;
                r->nkeys = 0;
                r->conf[0] = 0;
#define ADD(...)                                                                                  \
    do {                                                                                          \
        w = snprintf(p, left, "%s", r->nkeys ? "," : "");                                         \
        p += w;                                                                                   \
        left -= (size_t)w;                                                                        \
        w = snprintf(p, left, __VA_ARGS__);                                                       \
        p += w;                                                                                   \
        left -= (size_t)w;                                                                        \
    } while (0)
                ADD(ORDINARY);
                r->nkeys++;
                if (split_mb[s]) {
                    ADD("max_split_size_mb:%u", split_mb[s]);
                    r->nkeys++;
                }
                if (divisions[d] > 1) {
                    ADD("roundup_power2_divisions:%u", divisions[d]);
                    r->nkeys++;
                }
                if (*gc_variants[g].conf) {
                    ADD("%s", gc_variants[g].conf);
                    r->nkeys += 2;
                }
#undef ADD
                cci_config_default(&r->cfg);
                char perr[256];
                if (cci_config_parse(&r->cfg, r->conf, "sweep", perr, sizeof perr, NULL, NULL) != 0) {
                    snprintf(err, errlen, "internal error: grid entry '%s' does not parse: %s", r->conf,
                             perr);
                    return 0;
                }
                n++;
            }
    }
    return n;
}

void cci_sweep_tuner_calls(const cci_replay_result *r, cci_tuner_calls *c)
{
    *c = (cci_tuner_calls){.vmm_mode = r->vmm.mode,
                           .device_allocs = r->num_device_alloc,
                           .device_frees = r->num_device_free,
                           .device_alloc_bytes = r->device_alloc_bytes,
                           .page_creates = r->vmm.page_creates,
                           .maps = r->vmm.maps,
                           .set_access = r->vmm.set_access,
                           .unmaps = r->vmm.unmaps,
                           .page_releases = r->vmm.page_releases};
}

void cci_sweep_whatif_row(cci_report_whatif_row *d, const cci_sweep_row *s)
{
    memset(d, 0, sizeof *d);
    memcpy(d->conf, s->conf, sizeof d->conf);
    d->peak_reserved = s->res.peak_reserved;
    d->peak_allocated = s->res.peak_allocated;
    d->num_device_alloc = s->res.num_device_alloc;
    d->num_ooms = s->res.num_ooms;
    cci_sweep_tuner_calls(&s->res, &d->calls);
}

static void to_tuner(const row *r, cci_tuner_row *t)
{
    *t = (cci_tuner_row){.conf = r->conf, .nkeys = r->nkeys, .num_ooms = r->res.num_ooms,
                         .peak_reserved = r->res.peak_reserved};
    cci_sweep_tuner_calls(&r->res, &t->calls);
}

// The recommendation: the one rule the exit report applies too (tuner.h), against the default
// (rows[0]). NULL when the host has no memory for the comparison.
static const row *recommend(const row *rows, size_t n, double duration_s)
{
    cci_tuner_row *t = malloc(n * sizeof *t);
    if (!t)
        return NULL;
    for (size_t i = 0; i < n; i++)
        to_tuner(&rows[i], &t[i]);
    size_t k = cci_tuner_choose(t, n, 0, duration_s);
    free(t);
    return &rows[k];
}

static double call_us(const row *r)
{
    cci_tuner_row t;
    to_tuner(r, &t);
    return cci_tuner_call_us(&t.calls);
}

static uint64_t call_count(const row *r)
{
    cci_tuner_row t;
    to_tuner(r, &t);
    return cci_tuner_call_count(&t.calls);
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

static double pct(uint64_t now, uint64_t base)
{
    return base ? ((double)now - (double)base) * 100.0 / (double)base : 0.0;
}

static const row *find_row(const row *rows, size_t n, const char *conf)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(rows[i].conf, conf))
            return &rows[i];
    return NULL;
}

static void print_gain(FILE *out, const row *rec, const row *base, const char *label)
{
    if (!base || base == rec)
        return;
    uint64_t a = rec->res.peak_reserved, b = base->res.peak_reserved;
    if (a == b)
        fprintf(out, "  vs %s: the same peak reserved, %.1f MiB", label, mib(a));
    else
        fprintf(out, "  vs %s: %.1f MiB -> %.1f MiB peak reserved, %s %.1f MiB (%.1f %%)", label, mib(b),
                mib(a), a < b ? "saves" : "costs", mib(a < b ? b - a : a - b),
                a < b ? -pct(a, b) : pct(a, b));
    if (rec->res.num_ooms != base->res.num_ooms)
        fprintf(out, ", OOMs %llu -> %llu", (unsigned long long)base->res.num_ooms,
                (unsigned long long)rec->res.num_ooms);
    fputc('\n', out);
}

// Prints text wrapped at 100 columns: the first line continues a line already `used` columns
// wide, the others are indented by `indent`. Ends with a newline; a closing ")" goes on the rule.
static void wrap(FILE *out, const char *text, size_t used, size_t indent)
{
    const size_t width = 100;
    size_t col = used;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        size_t w = cci_tuner_word_len(p);
        if (!w)
            break;
        if (col > indent && col + 1 + w > width) {
            fprintf(out, "\n%*s", (int)indent, "");
            col = indent;
        } else if (col > used || (col > indent && p != text)) {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, w, out);
        col += w;
        p += w;
    }
    fputs(indent == 3 ? ")\n" : "\n", out);
}

// JSON string contents: our grid strings and trace paths, escaped so any byte is safe.
static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static void json_row(FILE *out, const row *r)
{
    fprintf(out, "{\"conf\": ");
    json_str(out, r->conf);
    fprintf(out,
            ", \"peak_reserved_bytes\": %llu, \"peak_allocated_bytes\": %llu, \"num_device_alloc\": %llu, "
            "\"num_ooms\": %llu, \"device_calls\": %llu, \"estimated_call_us\": %llu}",
            (unsigned long long)r->res.peak_reserved, (unsigned long long)r->res.peak_allocated,
            (unsigned long long)r->res.num_device_alloc, (unsigned long long)r->res.num_ooms,
            (unsigned long long)call_count(r), (unsigned long long)(call_us(r) + 0.5));
}

// One JSON object: the recommendation and every configuration in rank order. conf "" is the
// default (CCI_ALLOC_CONF unset).
static void print_json(FILE *out, const cci_trace *t, const char *name, size_t capacity, const row *rows,
                       const size_t *order, size_t n, const row *rec, const char *rule)
{
    fprintf(out, "{\"trace\": ");
    json_str(out, name);
    fprintf(out, ", \"events\": %zu, \"simulated_device\": true, \"capacity_bytes\": %llu, \"duration_us\": %llu, \"rule\": ", t->n,
            (unsigned long long)capacity, (unsigned long long)t->duration_us);
    json_str(out, rule);
    fprintf(out, ", \"recommended\": ");
    json_row(out, rec);
    fprintf(out, ", \"results\": [");
    for (size_t k = 0; k < n; k++) {
        fputs(k ? ", " : "", out);
        json_row(out, &rows[order[k]]);
    }
    fprintf(out, "]}\n");
}

#define GRID_MAX                                                                                  \
    (sizeof gc_variants / sizeof gc_variants[0] *                                                 \
     (sizeof split_mb / sizeof split_mb[0] * sizeof divisions / sizeof divisions[0] + NVMM))

int cci_sweep(const cci_trace *t, const char *name, size_t capacity, int jobs, int json, FILE *out, char *err,
              size_t errlen)
{
    size_t max = GRID_MAX;
    row *rows = calloc(max, sizeof *rows);
    size_t *order = calloc(max, sizeof *order);
    int rc = -1;
    if (!rows || !order) {
        snprintf(err, errlen, "out of host memory");
        goto out;
    }
    size_t n = build_grid(rows, capacity, err, errlen);
    if (!n)
        goto out;
    work w = {.t = t, .capacity = capacity, .rows = rows, .n = n};
    atomic_init(&w.next, 0);
    run_rows(&w, jobs);
    for (size_t i = 0; i < n; i++) {
        if (rows[i].rc) {
            snprintf(err, errlen, "out of host memory replaying '%s'", rows[i].conf);
            goto out;
        }
        order[i] = i;
    }
    cmp_base = rows;
    qsort(order, n, sizeof *order, cmp_rank);

    const row *def = &rows[0], *seed = find_row(rows, n, SEED_ADVICE), *lowest = &rows[order[0]];
    double duration_s = (double)t->duration_us / 1e6;
    const row *rec = recommend(rows, n, duration_s);
    char rule[1024];
    cci_tuner_rule_text(rule, sizeof rule, duration_s, "the default's");
    if (!rec) {
        snprintf(err, errlen, "out of host memory");
        goto out;
    }
    if (json) {
        print_json(out, t, name, capacity, rows, order, n, rec, rule);
        rc = 0;
        goto out;
    }
    char cap[64] = "unlimited";
    if (capacity)
        snprintf(cap, sizeof cap, "%.1f MiB", mib(capacity));
    fprintf(out, "sweep of %s: %zu events, simulated device of capacity %s, %zu configurations\n", name, t->n, cap,
            n);
    fprintf(out, "default: compact segments, as on a GPU with the virtual-memory API (the simulated device has it);\n"
                 "         " ORDINARY " gives ordinary segments, expandable_segments:True PyTorch's\n");
    if (!capacity)
        fprintf(out, "not swept: garbage_collection_threshold (needs --capacity)\n");
    fputc('\n', out);
    fprintf(out, "rank  peak reserved MiB  vs default  reserved/allocated  device allocs  device calls  est. call ms  "
                 "OOMs  CCI_ALLOC_CONF\n");
    for (size_t k = 0; k < n; k++) {
        const row *r = &rows[order[k]];
        double ratio =
            r->res.peak_allocated ? (double)r->res.peak_reserved / (double)r->res.peak_allocated : 0.0;
        fprintf(out, "%4zu  %17.1f  %+8.1f %%  %18.3f  %13llu  %12llu  %12.1f  %4llu  %s%s\n", k + 1,
                mib(r->res.peak_reserved), pct(r->res.peak_reserved, def->res.peak_reserved), ratio,
                (unsigned long long)r->res.num_device_alloc, (unsigned long long)call_count(r), call_us(r) / 1000.0,
                (unsigned long long)r->res.num_ooms, *r->conf ? r->conf : "(default: compact segments)",
                r == rec ? "  <- recommended" : "");
    }
    fputc('\n', out);
    char text[2048];
    cci_tuner_row tr, td;
    to_tuner(rec, &tr);
    to_tuner(def, &td);
    cci_tuner_recommendation_text(text, sizeof text, rec == def ? &td : &tr, &td, "the default", duration_s);
    fputs("recommended: ", out);
    wrap(out, text, 13, 2);
    fputs("  (", out);
    wrap(out, rule, 3, 3);
    print_gain(out, rec, seed, "the common advice max_split_size_mb:128 on ordinary segments");
    if (lowest->res.peak_reserved < rec->res.peak_reserved) {
        double extra = call_us(lowest) - call_us(def), allowed = cci_tuner_allowance_us(duration_s);
        fprintf(out,
                "lowest peak reserved in the grid: %.1f MiB with '%s', at %llu device calls, about %.1f ms estimated "
                "(the default: %llu, %.1f ms); passed over by the rule: ",
                mib(lowest->res.peak_reserved), lowest->conf, (unsigned long long)call_count(lowest),
                call_us(lowest) / 1000.0, (unsigned long long)call_count(def), call_us(def) / 1000.0);
        if (lowest->res.num_ooms > rec->res.num_ooms)
            fprintf(out, "more OOMs\n");
        else if (extra > allowed)
            fprintf(out, "%.1f ms more than the default's calls, over the %.1f ms allowed\n", extra / 1000.0,
                    allowed / 1000.0);
        else
            fprintf(out, "its peak is within the margin of the recommendation's, with more keys\n");
    }
    rc = 0;
out:
    free(rows);
    free(order);
    return rc;
}

// ---- cci_sweep_measure ----------------------------------------------------------------------

// Two spellings of one configuration (the grid's "" and a baseline of defaults, say) replay
// alike: rows are told apart by the configuration's canonical string, with an unset
// compact_segments settled as the simulated device settles it (it offers the virtual-memory API):
// a run's allocator reports the settled value, and must meet the grid's default row.
static void canonical(const cci_config *c, char *buf, size_t len)
{
    cci_config r = *c;
    cci_config_resolve(&r, 1);
    cci_config_format(&r, buf, len);
}

static int keys_in(const char *conf)
{
    int n = *conf ? 1 : 0;
    for (const char *p = conf; *p; p++)
        n += *p == ',';
    return n;
}

// Appends r to rows[*n] unless a row with the same canonical configuration is there already.
static void add_unique(row *rows, char (*canon)[1024], size_t *n, const row *r)
{
    char c[1024];
    canonical(&r->cfg, c, sizeof c);
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(canon[i], c))
            return;
    rows[*n] = *r;
    memcpy(canon[*n], c, sizeof c);
    (*n)++;
}

int cci_sweep_measure(const cci_trace *t, const cci_sweep_plan *plan, cci_sweep_outcome *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct timespec t0, deadline;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t cap = 1 + plan->nextra + GRID_MAX;
    row *grid = calloc(GRID_MAX, sizeof *grid), *rows = calloc(cap, sizeof *rows);
    char(*canon)[1024] = calloc(cap, sizeof *canon);
    int rc = -1;
    if (!grid || !rows || !canon) {
        snprintf(err, errlen, "out of host memory");
        goto out;
    }
    size_t ng = build_grid(grid, plan->capacity, err, errlen), n = 0;
    if (!ng)
        goto out;
    if (plan->baseline) {
        row r = {.cfg = *plan->baseline, .is_baseline = 1};
        snprintf(r.conf, sizeof r.conf, "%s", plan->baseline_conf ? plan->baseline_conf : "");
        r.nkeys = keys_in(r.conf);
        add_unique(rows, canon, &n, &r);
    }
    for (size_t i = 0; i < plan->nextra; i++) {
        row r = {0};
        char perr[256];
        snprintf(r.conf, sizeof r.conf, "%s", plan->extra[i]);
        cci_config_default(&r.cfg);
        if (cci_config_parse(&r.cfg, r.conf, "what-if", perr, sizeof perr, NULL, NULL) != 0)
            continue;
        r.nkeys = keys_in(r.conf);
        add_unique(rows, canon, &n, &r);
    }
    // The grid, simplest configurations first: if time runs out, the settings a person would try
    // first are the ones measured.
    for (int k = 0; k <= 8; k++)
        for (size_t i = 0; i < ng; i++)
            if (grid[i].nkeys == k)
                add_unique(rows, canon, &n, &grid[i]);
    work w = {.t = t, .capacity = plan->capacity, .rows = rows, .n = n};
    atomic_init(&w.next, 0);
    if (plan->seconds > 0) {
        double whole = (double)(long)plan->seconds;
        deadline = t0;
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((plan->seconds - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        w.deadline = &deadline;
    }
    run_rows(&w, plan->jobs > 0 ? plan->jobs : 1);
    out->rows = calloc(n ? n : 1, sizeof *out->rows);
    if (!out->rows) {
        snprintf(err, errlen, "out of host memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (rows[i].started && rows[i].rc < 0) {
            snprintf(err, errlen, "out of host memory replaying '%s'", rows[i].conf);
            cci_sweep_outcome_free(out);
            goto out;
        }
        cci_sweep_row *o = &out->rows[i];
        memcpy(o->conf, rows[i].conf, sizeof o->conf);
        o->nkeys = rows[i].nkeys;
        o->is_baseline = rows[i].is_baseline;
        o->state = !rows[i].started ? CCI_SWEEP_SKIPPED : rows[i].rc == 0 ? CCI_SWEEP_DONE : CCI_SWEEP_CUT;
        o->res = rows[i].res;
        out->done += o->state == CCI_SWEEP_DONE;
    }
    out->n = n;
    out->cut_short = out->done < n;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    rc = 0;
out:
    free(grid);
    free(rows);
    free(canon);
    return rc;
}

void cci_sweep_outcome_free(cci_sweep_outcome *o)
{
    free(o->rows);
    memset(o, 0, sizeof *o);
}
