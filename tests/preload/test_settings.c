// SPDX-License-Identifier: MIT
// The one reader of the environment (preload/settings.c), fed from a table instead of the
// process environment: which variable wins, what is refused and what a refusal leaves behind.
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "settings.h"

static unsigned failed;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static const char *const *table;  // name, value, name, value, ..., NULL

static const char *lookup(const char *name)
{
    for (const char *const *t = table; t && *t; t += 2)
        if (strcmp(t[0], name) == 0)
            return t[1];
    return NULL;
}

static cci_settings read_with(const char *const *env)
{
    cci_settings s;
    table = env;
    cci_settings_read(&s, lookup);
    return s;
}

static void test_dump_signal(void)
{
    struct { const char *v; int want; } ok[] = {
        {NULL, SIGUSR1}, {"", SIGUSR1}, {"USR1", SIGUSR1}, {"sigusr2", SIGUSR2}, {"SIGUSR2", SIGUSR2},
        {"none", 0}, {"off", 0}, {"0", 0}, {"RTMIN", SIGRTMIN}, {"SIGRTMIN+3", SIGRTMIN + 3},
        {"rtmax-1", SIGRTMAX - 1}, {"RTMAX", SIGRTMAX},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK(cci_settings_parse_dump_signal(ok[i].v) == ok[i].want, "'%s'", ok[i].v ? ok[i].v : "(unset)");
    char n[16];
    snprintf(n, sizeof n, "%d", SIGUSR2);
    CHECK(cci_settings_parse_dump_signal(n) == SIGUSR2, "SIGUSR2 by number");
    snprintf(n, sizeof n, "%d", SIGRTMIN + 1);
    CHECK(cci_settings_parse_dump_signal(n) == SIGRTMIN + 1, "a real-time signal by number");
    // Signals a program relies on, by number and by name, and garbage.
    const char *refused[] = {"11", "15", "2", "9", "19", "1", "SEGV", "SIGTERM", "INT", "65", "-10",
                             "RTMIN+99", "RTMAX-99", "RTMIN-1", "RTMAX+1", "RTMIN+", "USR3", "10x", "99999"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        CHECK(cci_settings_parse_dump_signal(refused[i]) == -1, "'%s' must be refused", refused[i]);

    const char *env[] = {"CCI_DUMP_SIGNAL", "15", NULL};
    cci_settings s = read_with(env);
    CHECK(s.dump_signal == 0 && strcmp(s.bad_dump_signal, "15") == 0,
          "a refused signal disables the live dump and is kept for the warning");
}

static void test_config(void)
{
    const char *both[] = {"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", "CCI_ALLOC_CONF",
                          "immediate_reuse:True", NULL};
    cci_settings s = read_with(both);
    CHECK(s.config_ok && strcmp(s.conf_var, "CCI_ALLOC_CONF") == 0 && s.config.immediate_reuse,
          "CCI_ALLOC_CONF wins over PYTORCH_CUDA_ALLOC_CONF");
    const char *newer[] = {"PYTORCH_ALLOC_CONF", "max_split_size_mb:x", NULL};
    s = read_with(newer);
    CHECK(!s.config_ok && strcmp(s.conf_var, "PYTORCH_ALLOC_CONF") == 0 && strstr(s.config_error, "max_split_size_mb"),
          "a bad string is kept with its error for start-up to report: '%s'", s.config_error);
    // PyTorch's order: PYTORCH_CUDA_ALLOC_CONF before the generic PYTORCH_ALLOC_CONF.
    const char *pytorch[] = {"PYTORCH_ALLOC_CONF", "max_split_size_mb:128", "PYTORCH_CUDA_ALLOC_CONF",
                             "max_split_size_mb:64", NULL};
    s = read_with(pytorch);
    CHECK(s.config_ok && strcmp(s.conf_var, "PYTORCH_CUDA_ALLOC_CONF") == 0 && s.config.max_split_size == (size_t)64 << 20,
          "PYTORCH_CUDA_ALLOC_CONF wins over PYTORCH_ALLOC_CONF");
    // A key nobody knows is a notice, kept for start-up to print; the rest applies.
    const char *unknown[] = {"CCI_ALLOC_CONF", "not_a_key:1,immediate_reuse:True", NULL};
    s = read_with(unknown);
    CHECK(s.config_ok && s.config.immediate_reuse && s.nnotices == 1 && strstr(s.notices[0], "not_a_key"),
          "an unknown key is one notice: '%s'", s.nnotices ? s.notices[0] : "");
    const char *none[] = {NULL};
    s = read_with(none);
    CHECK(s.config_ok && !s.conf_set && !s.disabled && s.dump_signal == SIGUSR1 && s.rank == -1 &&
              !s.report_pattern[0] && !s.trace_pattern[0] && s.log_level == -1,
          "an empty environment gives the defaults");
    const char *off[] = {"CCI_DISABLE", "0", NULL};
    CHECK(!read_with(off).disabled, "CCI_DISABLE=0 does not disable");
    const char *on[] = {"CCI_DISABLE", "yes", NULL};
    CHECK(read_with(on).disabled, "CCI_DISABLE=yes disables");
}

static void test_rank_report_log(void)
{
    const char *local[] = {"LOCAL_RANK", "3", NULL};
    CHECK(read_with(local).rank == 3, "LOCAL_RANK");
    const char *both[] = {"LOCAL_RANK", "3", "RANK", "5", NULL};
    CHECK(read_with(both).rank == 5, "RANK wins over LOCAL_RANK");
    const char *bad[] = {"LOCAL_RANK", "3", "RANK", "5x", NULL};
    CHECK(read_with(bad).rank == 3, "a malformed RANK is ignored");

    const char *rep[] = {"CCI_REPORT", "OFF", "CCI_REPORT_FORMAT", "json", "CCI_LOG", "loud", NULL};
    cci_settings s = read_with(rep);
    CHECK(s.report_off && strcmp(s.report_format, "json") == 0, "CCI_REPORT=OFF, format kept");
    CHECK(s.log_level == -1 && strcmp(s.bad_log, "loud") == 0, "a bad CCI_LOG is kept for the warning");
    static char longname[5000];
    memset(longname, 'a', sizeof longname - 1);
    const char *big[] = {"CCI_REPORT", longname, "CCI_TRACE", longname, "CCI_REPORT_FORMAT", longname, NULL};
    s = read_with(big);
    CHECK(s.report_too_long && !s.report_pattern[0] && s.trace_too_long && !s.trace_pattern[0] &&
              s.bad_report_format[0] && !s.report_format[0], "overlong values are refused, not cut");
    const char *lvl[] = {"CCI_LOG", "debug", "CCI_TRACE", "t-%p.cct", NULL};
    s = read_with(lvl);
    CHECK(s.log_level == CCI_LOG_DEBUG && strcmp(s.trace_pattern, "t-%p.cct") == 0, "CCI_LOG, CCI_TRACE");
    const char *trace_off[] = {"CCI_TRACE", "Off", NULL}, *trace_none[] = {"CCI_TRACE", "none", NULL};
    CHECK(!read_with(trace_off).trace_pattern[0] && !read_with(trace_none).trace_pattern[0],
          "CCI_TRACE=off and none record nothing, as CCI_REPORT=off");
    const char *trace_file[] = {"CCI_TRACE", "./off", NULL};
    CHECK(strcmp(read_with(trace_file).trace_pattern, "./off") == 0, "a file named off is still ./off");
}

int main(void)
{
    test_dump_signal();
    test_config();
    test_rank_report_log();
    if (failed)
        return 1;
    printf("settings: all checks passed\n");
    return 0;
}
