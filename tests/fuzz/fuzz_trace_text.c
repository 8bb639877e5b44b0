// SPDX-License-Identifier: MIT
// Fuzz target: the text trace reader (docs/text-trace-format.md) on arbitrary bytes.
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cci_trace t;
    char err[256] = "";
    memset(&t, 0, sizeof t);
    if (cci_trace_parse_text((const char *)data, size, "fuzz", &t, err, sizeof err) == 0)
        cci_trace_free(&t);
    else if (!err[0] || strchr(err, '\n'))
        abort();
    return 0;
}
