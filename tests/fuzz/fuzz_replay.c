// SPDX-License-Identifier: MIT
// Fuzz target: replay of whatever the readers accept. The input is any trace ccreplay reads; the
// first byte also picks the simulated device capacity (unlimited or 1 MiB to 128 GiB), so that
// OOM and retry paths are reached. The replay must finish and keep its own books straight.
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_target.h"
#include "replay.h"
#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t capacity = data[0] & 0x80 ? (size_t)1 << (20 + data[0] % 18) : 0;
    cci_trace t;
    char err[256];
    if (cci_trace_load_mem(data + 1, size - 1, "fuzz", &t, err, sizeof err) != 0)
        return 0;
    cci_config cfg;
    cci_config_default(&cfg);
    if (t.config)  // replay under the recorded configuration when it parses, as ccreplay can
        cci_config_parse(&cfg, t.config, "trace", err, sizeof err, NULL, NULL);
    cci_replay_result r;
    memset(&r, 0, sizeof r);
    if (cci_replay(&t, &cfg, capacity, &r) == 0 && r.peak_allocated > r.peak_reserved)
        abort();  // allocated memory always lies inside reserved segments
    cci_trace_free(&t);
    return 0;
}
