// SPDX-License-Identifier: MIT
// Parser for the PYTORCH_CUDA_ALLOC_CONF grammar (the printer is config_format.c).
//
// The string is read once, left to right, with a cursor; there is no token vector because the
// only nesting in the grammar is the one bracket list of roundup_power2_divisions. Every key lives
// in one table that says how its value is read (kind) and what is done with it (apply), so the
// generic number/boolean errors are worded the same way for every key.
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
// PyTorch's kLargeBuffer: the default for max_non_split_rounding and the floor for max_split_size.
#define LARGE_BUFFER_MIB 20
// A 1-10 MiB request's shared segment above 1 TiB can only be a mistake (and keeps MiB -> bytes exact).
#define MAX_LARGE_SEGMENT_MIB ((uint64_t)1 << 20)
// PyTorch caps pinned_num_register_threads at this.
#define PINNED_MAX_THREADS 128
// Offending values are quoted in messages; a cap keeps a pasted blob from flooding the log.
#define SHOW_MAX 40

void cci_config_default(cci_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_split_size = SIZE_MAX;
    c->max_non_split_rounding = (size_t)LARGE_BUFFER_MIB * MIB;
    c->memgetinfo_cached_as_free = 1;
    c->intercept_level = CCI_LEVEL_BOTH;
    c->large_segment_size = (size_t)LARGE_BUFFER_MIB * MIB;
    c->pinned_num_register_threads = 1;
    c->compact_segments = -1;  // the device decides (cci_config_resolve)
}

// ---- parse state and messages -------------------------------------------------------------

typedef void (*warn_fn)(const char *line, void *ud);

typedef struct parser {
    cci_config *c;
    const char *var;
    char *err;
    size_t errlen;
    warn_fn warn;  // NULL during the validation pass, so nothing is announced for a bad string
    void *ud;
    int native_key_seen;  // for the backend:cudaMallocAsync notice, as PyTorch gives it
    int non_split_seen;   // max_non_split_rounding_mb given: large_segment_size_mb no longer sets it
} parser;

// Copies user text into out as printable ASCII: a control byte or a non-ASCII byte could break the
// one-line promise (or a terminal), so every such byte becomes \xNN; long text is cut with "...".
static void show(char *out, size_t outlen, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char piece[8];
        if (ch == '\\')
            memcpy(piece, "\\\\", 3);
        else if (ch < 0x20 || ch >= 0x7f)
            snprintf(piece, sizeof piece, "\\x%02x", ch);
        else {
            piece[0] = (char)ch;
            piece[1] = '\0';
        }
        size_t pl = strlen(piece);
        if (i >= SHOW_MAX || o + pl + 4 > outlen) {
            if (o + 4 <= outlen) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        memcpy(out + o, piece, pl);
        o += pl;
    }
    out[o] = '\0';
}

static int failf(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int failf(parser *p, const char *fmt, ...)
{
    if (p->err && p->errlen) {
        int n = snprintf(p->err, p->errlen, "%s: ", p->var);
        if (n >= 0 && (size_t)n < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

// The common shape: "VAR: key: 'value' problem: expected form".
static int fail_value(parser *p, const char *key, const char *val, size_t n, const char *problem,
                      const char *expect)
{
    char shown[SHOW_MAX * 4 + 8];
    show(shown, sizeof shown, val, n);
    return failf(p, "%s: '%s' %s: expected %s", key, shown, problem, expect);
}

static void warnf(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warnf(parser *p, const char *fmt, ...)
{
    if (!p->warn)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%s: ", p->var);
    if (n < 0 || (size_t)n >= sizeof line)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    p->warn(line, p->ud);
}

// ---- value readers --------------------------------------------------------------------------

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static unsigned log2_floor(uint64_t v)
{
    unsigned r = 0;
    while (v >>= 1)
        r++;
    return r;
}

typedef enum num_status { NUM_OK, NUM_EMPTY, NUM_NEGATIVE, NUM_NOT_NUMBER, NUM_TRAILING, NUM_RANGE } num_status;

static const char *num_problem(num_status st)
{
    switch (st) {
    case NUM_EMPTY: return "is empty";
    case NUM_NEGATIVE: return "is negative";
    case NUM_NOT_NUMBER: return "is not a number";
    case NUM_TRAILING: return "has trailing characters after the number";
    case NUM_RANGE: return "is out of range";
    case NUM_OK: break;
    }
    return "is invalid";
}

// Decimal digits only: strtoull alone would take "-1" as 2^64-1, "+5", " 5" and "0x10".
// On NUM_RANGE *out is UINT64_MAX so callers that saturate can still use it.
static num_status read_u64(const char *s, size_t n, uint64_t *out)
{
    char buf[32];
    if (n == 0)
        return NUM_EMPTY;
    if (s[0] == '-')
        return NUM_NEGATIVE;
    if (!is_digit(s[0]))
        return NUM_NOT_NUMBER;
    size_t digits = 0;
    while (digits < n && is_digit(s[digits]))
        digits++;
    if (digits < n)
        return NUM_TRAILING;
    // Any all-digit string too long for the buffer is far beyond 2^64 anyway.
    if (n >= sizeof buf) {
        size_t lead = 0;
        while (lead < n - 1 && s[lead] == '0')
            lead++;
        if (n - lead >= sizeof buf) {
            *out = UINT64_MAX;
            return NUM_RANGE;
        }
        s += lead;
        n -= lead;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end != buf + n)
        return NUM_TRAILING;
    if (errno == ERANGE) {
        *out = UINT64_MAX;
        return NUM_RANGE;
    }
    *out = (uint64_t)v;
    return NUM_OK;
}

// Plain decimal or exponent notation; the first-character test keeps out strtod's "inf", "nan",
// hex floats and leading signs, none of which make sense for a fraction.
static num_status read_double(const char *s, size_t n, double *out)
{
    char buf[64];
    if (n == 0)
        return NUM_EMPTY;
    if (s[0] == '-')
        return NUM_NEGATIVE;
    if (!is_digit(s[0]) && !(s[0] == '.' && n > 1 && is_digit(s[1])))
        return NUM_NOT_NUMBER;
    // strtod would also read "0x1p-1" past the leading 0; only decimal notation is offered.
    if (n >= sizeof buf || strspn(s, "0123456789.eE+-") < n)
        return NUM_TRAILING;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    char *end = NULL;
    double v = strtod(buf, &end);
    if (end == buf)
        return NUM_NOT_NUMBER;
    if (end != buf + n)
        return NUM_TRAILING;
    if (errno == ERANGE || !isfinite(v))
        return NUM_RANGE;
    *out = v;
    return NUM_OK;
}

// ---- the key table --------------------------------------------------------------------------

typedef enum key_kind { KIND_BOOL, KIND_UINT, KIND_DOUBLE, KIND_WORD, KIND_RAW } key_kind;

typedef struct value {
    const char *text;  // trimmed value as written
    size_t len;
    int b;             // KIND_BOOL
    uint64_t u;        // KIND_UINT (UINT64_MAX when u_range)
    int u_range;       // KIND_UINT: did not fit 64 bits
    double d;          // KIND_DOUBLE
} value;

typedef struct key_def key_def;
struct key_def {
    const char *name;
    key_kind kind;
    int (*apply)(parser *p, const key_def *k, const value *v);
    const char *expect;  // the accepted form, quoted in every error about this key
    int native;          // meaningless under backend:cudaMallocAsync
    // UINT keys: whether a value beyond 64 bits means "as large as possible" or is an error.
    int saturate;
};

static size_t mib_to_bytes(uint64_t mib)
{
    return mib > SIZE_MAX / MIB ? SIZE_MAX : (size_t)mib * MIB;
}

static int apply_backend(parser *p, const key_def *k, const value *v)
{
    static const char *const names[] = {"native", "cudaMallocAsync"};
    for (int i = 0; i < 2; i++) {
        if (v->len == strlen(names[i]) && memcmp(v->text, names[i], v->len) == 0) {
            p->c->backend_async = i;
            return 0;
        }
    }
    return fail_value(p, k->name, v->text, v->len, "is not a known backend", k->expect);
}

static int apply_max_split(parser *p, const key_def *k, const value *v)
{
    if (!v->u_range && v->u <= LARGE_BUFFER_MIB)
        return fail_value(p, k->name, v->text, v->len, "is too small", k->expect);
    p->c->max_split_size = v->u_range ? SIZE_MAX : mib_to_bytes(v->u);
    return 0;
}

static int apply_non_split(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->max_non_split_rounding = v->u_range ? SIZE_MAX : mib_to_bytes(v->u);
    p->non_split_seen = 1;
    return 0;
}

// PyTorch reads this key before the others and makes it the default of max_non_split_rounding_mb,
// so it sets that allowance too unless the same string gives the allowance itself (either order).
static int apply_large_segment(parser *p, const key_def *k, const value *v)
{
    if (!v->u_range && v->u == 0)
        return fail_value(p, k->name, v->text, v->len, "is too small", k->expect);
    if (v->u_range || v->u > MAX_LARGE_SEGMENT_MIB)
        return fail_value(p, k->name, v->text, v->len, "is too large", k->expect);
    p->c->large_segment_size = mib_to_bytes(v->u);
    if (!p->non_split_seen)
        p->c->max_non_split_rounding = p->c->large_segment_size;
    return 0;
}

static int apply_throw_on_oom(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->throw_on_cudamalloc_oom = v->b;
    return 0;
}

static int read_divisions(parser *p, const key_def *k, const char *s, size_t n, const char *shown,
                          size_t shown_len, unsigned *out)
{
    uint64_t d = 0;
    num_status st = read_u64(s, n, &d);
    if (st != NUM_OK) {
        const char *problem = st == NUM_EMPTY   ? "has no divisions value"
                              : st == NUM_RANGE ? "has too many divisions"
                                                : num_problem(st);
        return fail_value(p, k->name, shown, shown_len, problem, k->expect);
    }
    if (d != 0 && !is_pow2(d))
        return fail_value(p, k->name, shown, shown_len,
                          "has divisions that are not 0 or a power of two", k->expect);
    if (d > UINT_MAX)
        return fail_value(p, k->name, shown, shown_len, "has too many divisions", k->expect);
    *out = (unsigned)d;
    return 0;
}

static void trim(const char **s, size_t *n)
{
    while (*n && is_space(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && is_space((*s)[*n - 1]))
        (*n)--;
}

// The list form: each entry sets only its own interval, except that the first numeric key also
// fills every interval below it and '>' fills every interval after the last numeric key so far
// (all of them when none came before). Intervals named by no rule keep what they had.
static int apply_roundup_list(parser *p, const key_def *k, const char *s, size_t n)
{
    unsigned table[CCI_ROUNDUP_INTERVALS];
    memcpy(table, p->c->roundup_divisions, sizeof table);
    int have_key = 0;
    int have_entry = 0;
    unsigned last = 0;
    size_t pos = 0;
    while (pos <= n) {
        size_t end = pos;
        while (end < n && s[end] != ',')
            end++;
        const char *item = s + pos;
        size_t ilen = end - pos;
        trim(&item, &ilen);
        int last_item = end >= n;
        pos = end + 1;
        if (ilen == 0) {
            // A trailing comma inside the brackets is tolerated, as PyTorch does.
            if (last_item && have_entry)
                break;
            return fail_value(p, k->name, s - 1, n + 2, "has an empty list entry", k->expect);
        }
        const char *colon = memchr(item, ':', ilen);
        if (!colon)
            return fail_value(p, k->name, item, ilen, "has no ':<divisions>'", k->expect);
        const char *key = item;
        size_t klen = (size_t)(colon - item);
        const char *dv = colon + 1;
        size_t dlen = ilen - klen - 1;
        trim(&key, &klen);
        trim(&dv, &dlen);
        unsigned div = 0;
        if (read_divisions(p, k, dv, dlen, item, ilen, &div))
            return -1;
        if (klen == 1 && key[0] == '>') {
            for (unsigned i = have_key ? last + 1 : 0; i < CCI_ROUNDUP_INTERVALS; i++)
                table[i] = div;
        } else {
            uint64_t mib = 0;
            num_status st = read_u64(key, klen, &mib);
            if (st == NUM_EMPTY)
                return fail_value(p, k->name, item, ilen, "has no interval before ':'", k->expect);
            if (st != NUM_OK && st != NUM_RANGE)
                return fail_value(p, k->name, item, ilen,
                                  st == NUM_NOT_NUMBER ? "has an interval that is neither a number nor '>'"
                                                       : num_problem(st),
                                  k->expect);
            if (st == NUM_RANGE || !is_pow2(mib))
                return fail_value(p, k->name, item, ilen,
                                  "has an interval that is not a power of two", k->expect);
            unsigned idx = log2_floor(mib);
            if (idx > CCI_ROUNDUP_INTERVALS - 1)
                idx = CCI_ROUNDUP_INTERVALS - 1;
            if (!have_key) {
                for (unsigned i = 0; i < idx; i++)
                    table[i] = div;
                have_key = 1;
            }
            table[idx] = div;
            last = idx;
        }
        have_entry = 1;
        if (last_item)
            break;
    }
    memcpy(p->c->roundup_divisions, table, sizeof table);
    return 0;
}

static int apply_roundup(parser *p, const key_def *k, const value *v)
{
    if (v->len && v->text[0] == '[') {
        // The splitter guarantees the closing bracket is the value's last character.
        const char *inner = v->text + 1;
        size_t n = v->len - 2;
        const char *t = inner;
        size_t tn = n;
        trim(&t, &tn);
        if (tn == 0)
            return fail_value(p, k->name, v->text, v->len, "is an empty list", k->expect);
        return apply_roundup_list(p, k, inner, n);
    }
    unsigned div = 0;
    if (read_divisions(p, k, v->text, v->len, v->text, v->len, &div))
        return -1;
    for (unsigned i = 0; i < CCI_ROUNDUP_INTERVALS; i++)
        p->c->roundup_divisions[i] = div;
    return 0;
}

static int apply_gc(parser *p, const key_def *k, const value *v)
{
    if (!(v->d > 0.0 && v->d < 1.0))
        return fail_value(p, k->name, v->text, v->len, "is out of range", k->expect);
    p->c->gc_threshold = v->d;
    return 0;
}

static int apply_fraction(parser *p, const key_def *k, const value *v)
{
    if (!(v->d > 0.0 && v->d <= 1.0))
        return fail_value(p, k->name, v->text, v->len, "is out of range", k->expect);
    p->c->memory_fraction = v->d;
    return 0;
}

static int apply_expandable(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->expandable_segments = v->b;
    return 0;
}

static int apply_compact(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->compact_segments = v->b;
    return 0;
}

static int apply_release_lock(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->release_lock_on_cudamalloc = v->b;
    return 0;
}

static int apply_immediate_reuse(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->immediate_reuse = v->b;
    return 0;
}

static int apply_memgetinfo(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->memgetinfo_cached_as_free = v->b;
    return 0;
}

static int apply_fence_slack(parser *p, const key_def *k, const value *v)
{
    if (v->u_range || v->u > ((unsigned long long)1 << 30))
        return fail_value(p, k->name, v->text, v->len, "is too large", k->expect);
    p->c->fence_slack_mb = (long long)v->u;
    return 0;
}

const char *const cci__level_names[4] = {NULL, "runtime", "driver", "both"};

static int apply_intercept_level(parser *p, const key_def *k, const value *v)
{
    for (int i = CCI_LEVEL_RUNTIME; i <= CCI_LEVEL_BOTH; i++) {
        if (v->len == strlen(cci__level_names[i]) && memcmp(v->text, cci__level_names[i], v->len) == 0) {
            p->c->intercept_level = i;
            return 0;
        }
    }
    return fail_value(p, k->name, v->text, v->len, "is not a known level", k->expect);
}

static int apply_graph_reuse(parser *p, const key_def *k, const value *v)
{
    // False is what we do anyway, so only True deserves a notice.
    if (v->b)
        warnf(p, "%s:True is accepted but not honoured yet; ignored", k->name);
    return 0;
}

// The pinned_* keys configure the pinned host cache of the preload (preload/serve/host_cache.c);
// the core itself allocates no host memory, it only keeps the values.
static int apply_pinned_register(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->pinned_use_cuda_host_register = v->b;
    return 0;
}

static int apply_pinned_background(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->pinned_use_background_threads = v->b;
    return 0;
}

static int apply_pinned_catch_all(parser *p, const key_def *k, const value *v)
{
    (void)k;
    p->c->pinned_free_catch_all = v->b;
    return 0;
}

static int apply_pinned_threads(parser *p, const key_def *k, const value *v)
{
    if (v->u_range || v->u > PINNED_MAX_THREADS)
        return fail_value(p, k->name, v->text, v->len, "is too large", k->expect);
    if (!is_pow2(v->u))
        return fail_value(p, k->name, v->text, v->len, "is not a power of two", k->expect);
    p->c->pinned_num_register_threads = (unsigned)v->u;
    return 0;
}

static int apply_pinned_reserve(parser *p, const key_def *k, const value *v)
{
    if (!v->u_range && v->u == 0)
        return fail_value(p, k->name, v->text, v->len, "is too small", k->expect);
    if (v->u_range || v->u > SIZE_MAX / MIB)
        return fail_value(p, k->name, v->text, v->len, "is too large", k->expect);
    p->c->pinned_reserve_segment_size = (size_t)v->u * MIB;
    return 0;
}

#define TRUE_FALSE "True or False"

static const key_def keys[] = {
    {"backend", KIND_WORD, apply_backend, "native or cudaMallocAsync", 0, 0},
    {"max_split_size_mb", KIND_UINT, apply_max_split, "an integer number of MiB > 20", 1, 1},
    {"max_non_split_rounding_mb", KIND_UINT, apply_non_split, "an integer number of MiB >= 0", 1, 1},
    {"roundup_power2_divisions", KIND_RAW, apply_roundup,
     "0 or a power of two, or a list like [256:1,512:2,1024:4,>:8] of <power-of-two MiB or '>'>:"
     "<0 or a power of two>",
     1, 0},
    {"garbage_collection_threshold", KIND_DOUBLE, apply_gc, "a number > 0 and < 1", 1, 0},
    {"expandable_segments", KIND_BOOL, apply_expandable, TRUE_FALSE, 1, 0},
    {"release_lock_on_cudamalloc", KIND_BOOL, apply_release_lock, TRUE_FALSE, 1, 0},
    {"pinned_use_cuda_host_register", KIND_BOOL, apply_pinned_register, TRUE_FALSE, 0, 0},
    {"pinned_num_register_threads", KIND_UINT, apply_pinned_threads,
     "a power of two <= 128", 0, 0},
    {"pinned_use_background_threads", KIND_BOOL, apply_pinned_background, TRUE_FALSE, 0, 0},
    {"pinned_reserve_segment_size_mb", KIND_UINT, apply_pinned_reserve,
     "an integer number of MiB > 0", 0, 0},
    {"graph_capture_record_stream_reuse", KIND_BOOL, apply_graph_reuse, TRUE_FALSE, 1, 0},
    {"per_process_memory_fraction", KIND_DOUBLE, apply_fraction, "a number > 0 and <= 1", 1, 0},
    {"immediate_reuse", KIND_BOOL, apply_immediate_reuse, TRUE_FALSE, 1, 0},
    {"memgetinfo_cached_as_free", KIND_BOOL, apply_memgetinfo, TRUE_FALSE, 1, 0},
    {"intercept_level", KIND_WORD, apply_intercept_level, "runtime, driver or both", 0, 0},
    {"compact_segments", KIND_BOOL, apply_compact, TRUE_FALSE, 1, 0},
    {"large_segment_size_mb", KIND_UINT, apply_large_segment, "an integer number of MiB > 0", 1, 0},
    {"throw_on_cudamalloc_oom", KIND_BOOL, apply_throw_on_oom, TRUE_FALSE, 1, 0},
    {"pinned_free_catch_all", KIND_BOOL, apply_pinned_catch_all, TRUE_FALSE, 0, 0},
    {"fence_slack_mb", KIND_UINT, apply_fence_slack, "an integer number of MiB >= 0", 1, 0},
};

#define NKEYS (sizeof keys / sizeof keys[0])

static const key_def *find_key(const char *s, size_t n)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strlen(keys[i].name) == n && memcmp(keys[i].name, s, n) == 0)
            return &keys[i];
    return NULL;
}

// Edit distance of two short names, ignoring case (capped at 3: only "close" matters), for the
// suggestion; keys themselves are case-sensitive, as in PyTorch.
static unsigned name_distance(const char *a, size_t n, const char *b)
{
    size_t m = strlen(b);
    if (n > 48 || m > 48)
        return 3;
    unsigned row[49];
    for (size_t j = 0; j <= m; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= n; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= m; j++) {
            unsigned up = row[j];
            unsigned best = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m] < 3 ? row[m] : 3;
}

// A key nobody here knows is skipped with one notice, never a reason to turn the layer off: it may
// be a key of a PyTorch release newer than this library (PyTorch itself then accepts it), and
// dropping every other key, the whole cache with them, would punish a typo far more than the typo
// costs. The notice names the closest known key, so a misspelt one is not missed.
static void unknown_key(parser *p, const char *s, size_t n)
{
    char shown[SHOW_MAX * 4 + 8];
    show(shown, sizeof shown, s, n);
    const char *near = NULL;
    unsigned best = 3;
    for (size_t i = 0; i < NKEYS; i++) {
        unsigned d = name_distance(s, n, keys[i].name);
        if (d < best) {
            best = d;
            near = keys[i].name;
        }
    }
    if (near)
        warnf(p, "unknown key '%s' ignored (did you mean '%s'?); the other keys apply", shown, near);
    else
        warnf(p, "unknown key '%s' ignored (not known to this library); the other keys apply", shown);
}

static int apply_value(parser *p, const key_def *k, const char *s, size_t n)
{
    value v = {.text = s, .len = n};
    if (n == 0)
        return failf(p, "%s: empty value: expected %s", k->name, k->expect);
    switch (k->kind) {
    case KIND_BOOL:
        if (n == 4 && memcmp(s, "True", 4) == 0)
            v.b = 1;
        else if (n == 5 && memcmp(s, "False", 5) == 0)
            v.b = 0;
        else
            return fail_value(p, k->name, s, n, "is not True or False", k->expect);
        break;
    case KIND_UINT: {
        num_status st = read_u64(s, n, &v.u);
        if (st == NUM_RANGE && k->saturate)
            v.u_range = 1;
        else if (st != NUM_OK)
            return fail_value(p, k->name, s, n,
                              st == NUM_RANGE ? "is too large" : num_problem(st), k->expect);
        break;
    }
    case KIND_DOUBLE: {
        num_status st = read_double(s, n, &v.d);
        if (st != NUM_OK)
            return fail_value(p, k->name, s, n, num_problem(st), k->expect);
        break;
    }
    case KIND_WORD:
    case KIND_RAW:
        break;
    }
    return k->apply(p, k, &v);
}

// One pass over the whole string. Returns 0 or -1 with the message already written.
static int parse_all(parser *p, const char *str)
{
    size_t pos = 0;
    size_t len = strlen(str);
    for (;;) {
        while (pos < len && is_space(str[pos]))
            pos++;
        if (pos == len)
            return 0;
        size_t kstart = pos;
        while (pos < len && str[pos] != ':' && str[pos] != ',')
            pos++;
        const char *key = str + kstart;
        size_t klen = pos - kstart;
        trim(&key, &klen);
        if (klen == 0) {
            char shown[SHOW_MAX * 4 + 8];
            show(shown, sizeof shown, str + kstart, len - kstart);
            return failf(p, "empty entry at '%s': expected key:value pairs separated by ','", shown);
        }
        const key_def *k = find_key(key, klen);
        if (!k && (pos == len || str[pos] != ':')) {
            char shown[SHOW_MAX * 4 + 8];
            show(shown, sizeof shown, key, klen);
            const char *hint = memchr(key, '=', klen) ? " (keys and values are separated by ':')" : "";
            return failf(p, "'%s' is not a key:value pair%s: expected <key>:<value>", shown, hint);
        }
        if (!k)
            unknown_key(p, key, klen);
        if (pos == len || str[pos] != ':')
            return failf(p, "%s: missing ':' and value: expected %s:<%s>", k->name, k->name,
                         k->expect);
        pos++;
        while (pos < len && is_space(str[pos]))
            pos++;
        size_t vstart = pos;
        // An unknown key's value is skipped by the same rules, so a list does not end it early.
        char kname[SHOW_MAX * 4 + 8];
        if (!k)
            show(kname, sizeof kname, key, klen);
        const char *kn = k ? k->name : kname;
        const char *kexpect = k ? k->expect : "a value, or a list in [ ]";
        if (pos < len && str[pos] == '[') {
            // Commas inside the brackets belong to the list, not to the outer list of keys.
            const char *close = memchr(str + pos, ']', len - pos);
            if (!close)
                return fail_value(p, kn, str + vstart, len - vstart, "has no closing ']'", kexpect);
            pos = (size_t)(close - str) + 1;
            size_t vend = pos;
            while (pos < len && is_space(str[pos]))
                pos++;
            if (pos < len && str[pos] != ',')
                return fail_value(p, kn, str + vstart, len - vstart,
                                  "has trailing characters after ']'", kexpect);
            if (k && k->kind != KIND_RAW)
                return fail_value(p, k->name, str + vstart, vend - vstart, "is a list",
                                  k->expect);
            if (k && apply_value(p, k, str + vstart, vend - vstart))
                return -1;
        } else {
            while (pos < len && str[pos] != ',')
                pos++;
            const char *val = str + vstart;
            size_t vlen = pos - vstart;
            trim(&val, &vlen);
            if (k && apply_value(p, k, val, vlen))
                return -1;
        }
        if (k && k->native)
            p->native_key_seen = 1;
        if (pos == len)
            return 0;
        pos++;  // the ','; a trailing one ends the string cleanly, as in PyTorch
    }
}

// The string is validated on a scratch copy first, so a bad string leaves *c untouched and prints
// nothing but its one error line: no notices for the good keys that came before the bad one.
int cci_config_parse(cci_config *c, const char *str, const char *varname, char *err, size_t errlen,
                     void (*warn)(const char *line, void *ud), void *ud)
{
    if (err && errlen)
        err[0] = '\0';
    if (!str)
        return 0;
    cci_config scratch = *c;
    parser p = {.c = &scratch,
                .var = varname ? varname : "allocator config",
                .err = err,
                .errlen = errlen};
    if (parse_all(&p, str))
        return -1;
    if (!warn) {
        *c = scratch;
        return 0;
    }
    parser q = {.c = c, .var = p.var, .warn = warn, .ud = ud};
    parse_all(&q, str);
    if (q.c->backend_async && q.native_key_seen)
        warnf(&q, "backend:cudaMallocAsync leaves every allocation to the CUDA driver; the other "
                  "allocator keys are ignored");
    return 0;
}
