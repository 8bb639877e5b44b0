// SPDX-License-Identifier: MIT
// Honest labels: a dump taken while the program runs (SIGUSR1, cci_dump_report) says "at the time
// of the dump" and calls blocks in use "in use", never leaks "never freed"; a simulated device is
// named as such in the text, JSON and HTML forms. The same snapshot is printed both ways, so each
// check fails if the live flag or the device kind stopped reaching a printer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workloads.h"

#include "report_check.h"

static char *render(cci_report_format f, const cci_report_snapshot *s)
{
    char *out = NULL;
    size_t len;
    return cci_report_render(f, s, &out, &len) == 0 ? out : NULL;
}

int main(void)
{
    workload w;
    if (workload_run("mixed", 0, &w) != 0)
        return 1;
    cci_report_snapshot s;
    cci_report_timeline *tls[1] = {w.tl};
    if (cci_report_snapshot_take(&s, &w.a, tls, 1) != 0)
        return 1;
    workload_fix_process(&s);
    char *exit_text = render(CCI_REPORT_TEXT, &s);
    CHECK(exit_text && strstr(exit_text, "held by the program (never freed)") && strstr(exit_text, "(at exit)"),
          "the exit report lost its exit labels");
    // The workload runs on the core's simulated device: the snapshot names it so by itself.
    CHECK(exit_text && strstr(exit_text, "Device: simulated device (address ranges with no memory behind them)"),
          "the simulated device of the workload is not named");

    s.devices[0].live = 1;
    cci_report_set_device_kind(&s, "simulated device (this test's)");
    cci_report_derive(&s);
    char *text = render(CCI_REPORT_TEXT, &s), *json = render(CCI_REPORT_JSON, &s), *html = render(CCI_REPORT_HTML, &s);
    CHECK(text && json && html, "render");
    if (text && json && html) {
        CHECK(strstr(text, "(live dump: the program was still running)"), "text: no live mark in the header");
        CHECK(strstr(text, "in use by the program (not freed yet)") && !strstr(text, "never freed"),
              "text: blocks in use called leaks");
        CHECK(!strstr(text, "at exit") && !strstr(text, "At exit"), "text: a live dump labelled at exit");
        CHECK(strstr(text, "at the time of the dump"), "text: no 'at the time of the dump'");
        CHECK(strstr(text, "Device: simulated device (this test's)") &&
              strstr(text, "Device capacity: 4.0 GiB, of a simulated device (this test's)"),
              "text: the simulated device is not named");
        CHECK(strstr(json, "\"taken\": \"live\"") && strstr(json, "\"simulated_device\": true") &&
              strstr(json, "\"device_kind\": \"simulated device (this test's)\""), "json: live or simulated missing");
        CHECK(strstr(html, "simulated device (this test&#39;s)") || strstr(html, "simulated device (this test&#x27;s)") ||
              strstr(html, "simulated device (this test's)"), "html: the simulated device is not named");
        CHECK(strstr(html, "In use or cache (at the time of the dump)") && !strstr(html, "At exit") &&
              !strstr(html, "Still allocated"), "html: a live dump labelled at exit");
    }
    free(exit_text);
    free(text);
    free(json);
    free(html);
    cci_report_snapshot_free(&s);
    workload_free(&w);
    printf("labels: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
