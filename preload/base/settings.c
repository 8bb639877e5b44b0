// SPDX-License-Identifier: MIT
// The one reader of the environment (settings.h).
#include "settings.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static cci_settings settings;
static pthread_once_t read_once = PTHREAD_ONCE_INIT;

static const char *env_lookup(const char *name)
{
    return getenv(name);  // the only getenv of the layer
}

static int parse_log_level(const char *v)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    for (int i = 0; v && i < 4; i++)
        if (strcmp(v, names[i]) == 0)
            return i;
    return -1;
}

static void read_log(cci_settings *s, const char *v)
{
    s->log_level = -1;
    s->bad_log[0] = '\0';
    if (!v || !*v)
        return;
    s->log_level = parse_log_level(v);
    if (s->log_level < 0)
        snprintf(s->bad_log, sizeof s->bad_log, "%s", v);  // a copy: the environment may change
}

void cci_settings_read_log_level(void)
{
    cci_settings early;
    read_log(&early, env_lookup("CCI_LOG"));
    if (early.log_level >= 0)
        cci_log_set_level((cci_log_level)early.log_level);
}

// A plain non-negative decimal of at most 9 digits, else -1: a malformed rank is ignored.
static int parse_rank(const char *v)
{
    if (!v || !*v || strlen(v) > 9 || strspn(v, "0123456789") != strlen(v))
        return -1;
    return atoi(v);
}

// A plain positive decimal below NSIG, else -1.
static int signal_number(const char *v)
{
    if (!*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 4)
        return -1;
    int n = atoi(v);
    return n > 0 && n < NSIG ? n : -1;
}

// "RTMIN", "RTMIN+n", "RTMAX", "RTMAX-n" (after any SIG prefix); -1 for anything else.
static int realtime_name(const char *v)
{
    int base;
    char sign;
    if (!strncasecmp(v, "RTMIN", 5))
        base = SIGRTMIN, sign = '+';
    else if (!strncasecmp(v, "RTMAX", 5))
        base = SIGRTMAX, sign = '-';
    else
        return -1;
    if (v[5] == '\0')
        return base;
    int n = v[5] == sign ? signal_number(v + 6) : -1;
    return n < 0 ? -1 : sign == '+' ? base + n : base - n;
}

int cci_settings_parse_dump_signal(const char *v)
{
    if (!v || !*v)
        return SIGUSR1;
    if (!strcasecmp(v, "none") || !strcmp(v, "0") || !strcasecmp(v, "off"))
        return 0;
    int sig = signal_number(v);
    if (sig < 0) {
        if (!strncasecmp(v, "SIG", 3))
            v += 3;
        sig = !strcasecmp(v, "USR1") ? SIGUSR1 : !strcasecmp(v, "USR2") ? SIGUSR2 : realtime_name(v);
    }
    // Every other signal has a meaning a program or its user relies on (SIGSEGV must kill,
    // SIGTERM and SIGINT must stop): taking it over for the dump would silently break that.
    if (sig == SIGUSR1 || sig == SIGUSR2 || (sig >= SIGRTMIN && sig <= SIGRTMAX))
        return sig;
    return -1;
}

static void collect_notice(const char *line, void *ud)
{
    cci_settings *s = ud;
    if (s->nnotices < CCI_SETTINGS_MAX_NOTICES)
        snprintf(s->notices[s->nnotices++], sizeof s->notices[0], "%s", line);
}

static void read_config(cci_settings *s, const char *(*lookup)(const char *))
{
    static const char *const names[] = {"CCI_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
    const char *conf = NULL;
    s->conf_var = names[0];
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !conf; i++) {
        if ((conf = lookup(names[i])) != NULL)
            s->conf_var = names[i];
    }
    s->conf_set = conf != NULL;
    snprintf(s->conf_text, sizeof s->conf_text, "%s", conf ? conf : "");
    cci_config_default(&s->config);
    s->config_ok = !conf || cci_config_parse(&s->config, conf, s->conf_var, s->config_error,
                                             sizeof s->config_error, collect_notice, s) == 0;
}

// A path variable's "nothing to write" (CCI_REPORT, CCI_TRACE): a file of that name is still
// reachable as ./off.
static int path_off(const char *v)
{
    return v && (!strcasecmp(v, "off") || !strcasecmp(v, "none"));
}

static void read_report(cci_settings *s, const char *(*lookup)(const char *))
{
    const char *p = lookup("CCI_REPORT");
    if (path_off(p))
        s->report_off = 1;
    else if (p && strlen(p) < sizeof s->report_pattern)
        strcpy(s->report_pattern, p);
    else if (p)
        s->report_too_long = 1;
    const char *f = lookup("CCI_REPORT_FORMAT");
    if (f && strlen(f) < sizeof s->report_format && !strchr(f, '\n')) {
        // Checked by the report library's parser where it is used; too long cannot be a name.
        strcpy(s->report_format, f);
    } else if (f) {
        snprintf(s->bad_report_format, sizeof s->bad_report_format, "%s", f);
    }
    const char *sig = lookup("CCI_DUMP_SIGNAL");
    s->dump_signal = cci_settings_parse_dump_signal(sig);
    if (s->dump_signal < 0) {
        snprintf(s->bad_dump_signal, sizeof s->bad_dump_signal, "%s", sig);
        s->dump_signal = 0;
    }
}

// CCI_HISTORY_MAX: a plain decimal of at most 12 digits. CCI_WHATIF_SECONDS: digits with at
// most one point (no strtod: a host program's locale may expect a comma), at most 3600.
static void read_whatif(cci_settings *s, const char *(*lookup)(const char *))
{
    s->history_max = (uint64_t)4 << 20;  // CCI_HISTORY_DEFAULT_MAX
    s->whatif_seconds = 2.0;             // CCI_WHATIF_DEFAULT_SECONDS
    const char *h = lookup("CCI_HISTORY_MAX");
    if (h && *h) {
        if (strlen(h) <= 12 && strspn(h, "0123456789") == strlen(h))
            s->history_max = strtoull(h, NULL, 10);
        else
            snprintf(s->bad_whatif, sizeof s->bad_whatif, "CCI_HISTORY_MAX=%.40s", h);
    }
    const char *w = lookup("CCI_WHATIF_SECONDS");
    if (w && *w) {
        double v = 0, scale = 0;
        int ok = strlen(w) <= 12;
        for (const char *p = w; ok && *p; p++) {
            if (*p == '.' && scale == 0)
                scale = 1;
            else if (*p >= '0' && *p <= '9')
                v = scale ? v + (*p - '0') * (scale /= 10) : v * 10 + (*p - '0');
            else
                ok = 0;
        }
        if (ok && v <= 3600)
            s->whatif_seconds = v;
        else
            snprintf(s->bad_whatif, sizeof s->bad_whatif, "CCI_WHATIF_SECONDS=%.40s", w);
    }
}

// A switch that is on unless set to "0" (CCI_THREAD_CACHE, CCI_FENCE_WATCHER, CCI_CONTEXT_FENCES,
// CCI_REUSE_ORDERS):
// 0 or 1. Any other value leaves it on and is kept in `bad` for start-up's warning.
static int read_on_switch(const char *v, char *bad, size_t bad_size)
{
    if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
        snprintf(bad, bad_size, "%s", v);
    return !(v && !strcmp(v, "0"));
}

// CCI_DEBUG_UNSAFE: see settings.h. Any unknown word refuses the whole value (the knob stays off).
static void read_debug_unsafe(cci_settings *s, const char *value)
{
    if (!value || !*value)
        return;
    unsigned bits = 0;
    const char *p = value;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 9 && strncmp(p, "no-fences", n) == 0)
            bits |= CCI_DEBUG_UNSAFE_NO_FENCES;
        else if (n == 14 && strncmp(p, "no-stream-rule", n) == 0)
            bits |= CCI_DEBUG_UNSAFE_NO_STREAM_RULE;
        else {
            snprintf(s->bad_debug_unsafe, sizeof s->bad_debug_unsafe, "%s", value);
            return;
        }
        p += n + (p[n] == ',');
    }
    s->debug_unsafe = bits;
}

void cci_settings_read(cci_settings *s, const char *(*lookup)(const char *name))
{
    memset(s, 0, sizeof *s);
    read_log(s, lookup("CCI_LOG"));
    const char *off = lookup("CCI_DISABLE");
    s->disabled = off && *off && strcmp(off, "0") != 0;
    read_config(s, lookup);
    read_report(s, lookup);
    const char *trace = lookup("CCI_TRACE");
    if (path_off(trace))
        trace = NULL;  // as CCI_REPORT=off: no trace (it had been written to a file named "off")
    if (trace && strlen(trace) < sizeof s->trace_pattern)
        strcpy(s->trace_pattern, trace);
    else if (trace)
        s->trace_too_long = 1;
    const char *stacks = lookup("CCI_STACKS");
    s->stacks = parse_rank(stacks);
    if (stacks && *stacks && (s->stacks < 0 || s->stacks > CCI_SETTINGS_MAX_STACKS))
        snprintf(s->bad_stacks, sizeof s->bad_stacks, "%s", stacks);
    if (s->stacks < 0 || s->stacks > CCI_SETTINGS_MAX_STACKS)
        s->stacks = 0;
    s->rank = parse_rank(lookup("RANK"));
    if (s->rank < 0)
        s->rank = parse_rank(lookup("LOCAL_RANK"));
    read_whatif(s, lookup);
    s->thread_cache = read_on_switch(lookup("CCI_THREAD_CACHE"), s->bad_thread_cache, sizeof s->bad_thread_cache);
    s->fence_watcher = read_on_switch(lookup("CCI_FENCE_WATCHER"), s->bad_fence_watcher,
                                      sizeof s->bad_fence_watcher);
    s->pinned_cache = read_on_switch(lookup("CCI_PINNED_CACHE"), s->bad_pinned_cache,
                                     sizeof s->bad_pinned_cache);
    s->keep_mappings = read_on_switch(lookup("CCI_KEEP_MAPPINGS"), s->bad_keep_mappings,
                                      sizeof s->bad_keep_mappings);
    s->context_fences = read_on_switch(lookup("CCI_CONTEXT_FENCES"), s->bad_context_fences,
                                       sizeof s->bad_context_fences);
    s->reuse_orders = read_on_switch(lookup("CCI_REUSE_ORDERS"), s->bad_reuse_orders, sizeof s->bad_reuse_orders);
    read_debug_unsafe(s, lookup("CCI_DEBUG_UNSAFE"));
}

static void read_process_settings(void)
{
    cci_settings_read(&settings, env_lookup);
}

const cci_settings *cci_settings_get(void)
{
    pthread_once(&read_once, read_process_settings);
    return &settings;
}
