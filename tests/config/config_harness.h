// SPDX-License-Identifier: MIT
// The checks the configuration tests share (test_config.c, test_config_newest.c): counted checks,
// the notices a parse gives, and the shapes every accepted or rejected string must have.
#ifndef CCI_TESTS_CONFIG_HARNESS_H
#define CCI_TESTS_CONFIG_HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

#define MIB ((size_t)1 << 20)
#define VAR "CCI_ALLOC_CONF"

static int passed, failed;

static inline void check(int ok, int line, const char *what)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "FAIL line %d: %s\n", line, what);
    }
}

#define CHECK(cond) check(!!(cond), __LINE__, #cond)

// ---- notice capture -------------------------------------------------------------------------

#define MAX_WARN 16
typedef struct warnings {
    int n;
    char line[MAX_WARN][600];
} warnings;

static inline void collect(const char *line, void *ud)
{
    warnings *w = ud;
    if (w->n < MAX_WARN)
        snprintf(w->line[w->n], sizeof w->line[0], "%s", line);
    w->n++;
}

static char err[1024];
static warnings warned;

static inline int parse(cci_config *c, const char *s)
{
    memset(&warned, 0, sizeof warned);
    memset(err, 'Z', sizeof err);
    err[sizeof err - 1] = '\0';
    return cci_config_parse(c, s, VAR, err, sizeof err, collect, &warned);
}

static inline int parse_fresh(cci_config *c, const char *s)
{
    cci_config_default(c);
    return parse(c, s);
}

static inline int one_line(const char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r' || (unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            return 0;
    return 1;
}

static inline int same_config(const cci_config *a, const cci_config *b)
{
    if (a->max_split_size != b->max_split_size || a->max_non_split_rounding != b->max_non_split_rounding ||
        a->gc_threshold != b->gc_threshold || a->memory_fraction != b->memory_fraction ||
        a->backend_async != b->backend_async || a->expandable_segments != b->expandable_segments ||
        a->release_lock_on_cudamalloc != b->release_lock_on_cudamalloc ||
        a->immediate_reuse != b->immediate_reuse ||
        a->memgetinfo_cached_as_free != b->memgetinfo_cached_as_free ||
        a->intercept_level != b->intercept_level || a->compact_segments != b->compact_segments ||
        a->large_segment_size != b->large_segment_size ||
        a->throw_on_cudamalloc_oom != b->throw_on_cudamalloc_oom || a->fence_slack_mb != b->fence_slack_mb ||
        a->pinned_use_cuda_host_register != b->pinned_use_cuda_host_register ||
        a->pinned_num_register_threads != b->pinned_num_register_threads ||
        a->pinned_use_background_threads != b->pinned_use_background_threads ||
        a->pinned_reserve_segment_size != b->pinned_reserve_segment_size ||
        a->pinned_free_catch_all != b->pinned_free_catch_all)
        return 0;
    for (int i = 0; i < CCI_ROUNDUP_INTERVALS; i++)
        if (a->roundup_divisions[i] != b->roundup_divisions[i])
            return 0;
    return 1;
}

// A rejected string: -1, the configuration untouched, no notice, and one line that starts with
// the variable's name and contains every given fragment (the key, usually, and the problem).
static inline void expect_error_at(int line, const char *s, ...)
{
    cci_config c, before;
    cci_config_default(&c);
    c.max_split_size = 64 * MIB;  // not a default, so "untouched" means something
    c.roundup_divisions[3] = 2;
    before = c;
    int rc = parse(&c, s);
    char what[4096];
    snprintf(what, sizeof what, "rejects \"%s\" (rc %d, message \"%s\")", s, rc, err);
    check(rc == -1, line, what);
    check(same_config(&c, &before), line, what);
    check(warned.n == 0, line, what);
    check(strncmp(err, VAR ": ", strlen(VAR) + 2) == 0, line, what);
    check(one_line(err), line, what);
    check(strlen(err) < sizeof err - 1, line, what);
    check(strstr(err, "expected") != NULL, line, what);
    va_list ap;
    va_start(ap, s);
    for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;) {
        char w2[4400];
        snprintf(w2, sizeof w2, "%s: message lacks \"%s\"", what, frag);
        check(strstr(err, frag) != NULL, line, w2);
    }
    va_end(ap);
}

#define EXPECT_ERROR(s, ...) expect_error_at(__LINE__, s, __VA_ARGS__, (const char *)NULL)

static inline void expect_ok_at(int line, cci_config *c, const char *s)
{
    int rc = parse_fresh(c, s);
    char what[4096];
    snprintf(what, sizeof what, "accepts \"%s\" (rc %d, message \"%s\")", s, rc, err);
    check(rc == 0 && err[0] == '\0', line, what);
}

#define EXPECT_OK(c, s) expect_ok_at(__LINE__, c, s)

static inline void roundtrip_at(int line, const cci_config *c)
{
    char buf[1024];
    int n = cci_config_format(c, buf, sizeof buf);
    char what[4096];
    snprintf(what, sizeof what, "round trip of \"%s\" (%s)", buf, err);
    check(n > 0 && (size_t)n == strlen(buf), line, what);
    cci_config d;
    cci_config_default(&d);
    int rc = cci_config_parse(&d, buf, VAR, err, sizeof err, NULL, NULL);
    snprintf(what, sizeof what, "round trip of \"%s\" (%s)", buf, err);
    check(rc == 0, line, what);
    check(same_config(c, &d), line, what);
    // Canonical: printing the parsed copy gives the very same string.
    char again[1024];
    cci_config_format(&d, again, sizeof again);
    check(strcmp(buf, again) == 0, line, what);
}

#define ROUNDTRIP(c) roundtrip_at(__LINE__, c)

#endif
