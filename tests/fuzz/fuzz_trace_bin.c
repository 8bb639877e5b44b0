// SPDX-License-Identifier: MIT
// Fuzz target: the binary trace reader (docs/trace-format.md) on arbitrary bytes.
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "trace.h"
#include "trace_bin.h"

// An action the trace's events may carry (cci_event_kind): the device record (CCI_TBIN_DEVICE)
// is the reader's own and never an event.
static int is_event_action(unsigned action)
{
    return action <= CCI_EV_OOM || action == CCI_EV_SEGMENT_MAP || action == CCI_EV_SEGMENT_UNMAP;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cci_trace t;
    char err[256] = "";
    memset(&t, 0, sizeof t);
    if (cci_trace_parse_bin(data, size, "fuzz", &t, err, sizeof err) == 0) {
        for (size_t i = 0; i < t.n; i++)  // every event the reader kept names a real action
            if (!is_event_action(t.ev[i].action))
                abort();
        cci_trace_free(&t);
    } else if (!err[0] || strchr(err, '\n')) {
        abort();
    }
    return 0;
}
