// SPDX-License-Identifier: MIT
// Fuzz target: the restricted unpickler, then the whole snapshot route (decompression, format
// detection, snapshot-to-trace) on the same bytes. Either succeeds or fails with one line; the
// resource caps (trace_load.c) keep a small input from expanding without bound.
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "pickle_reader.h"
#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const cci_pv *root = NULL;
    char err[256];
    cci_pickle_doc *doc = cci_pickle_load(data, size, &root, err, sizeof err);
    if (doc) {
        // Touch the top value as a consumer would.
        if (cci_pv_get(root, "device_traces") && !cci_pv_type_name(root))
            abort();
        cci_pickle_free(doc);
    } else if (!err[0] || strchr(err, '\n')) {
        abort();  // every refusal is one line
    }
    cci_trace t;
    if (cci_trace_load_mem(data, size, "fuzz", &t, err, sizeof err) == 0)
        cci_trace_free(&t);
    else if (!err[0] || strchr(err, '\n'))
        abort();
    return 0;
}
