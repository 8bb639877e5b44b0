// SPDX-License-Identifier: MIT
// Fuzz target: the configuration parser. Any string either fails with one line of error, or
// parses; a parsed configuration printed in canonical form must parse again and print the same.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_target.h"

static void must(int cond, const char *what, const char *a, const char *b)
{
    if (cond)
        return;
    fprintf(stderr, "fuzz_config: %s\n  first:  %s\n  second: %s\n", what, a, b);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *str = malloc(size + 1);
    if (!str)
        return 0;
    memcpy(str, data, size);
    str[size] = '\0';
    cci_config c, before;
    cci_config_default(&c);
    before = c;
    char err[256], once[1024], twice[1024];
    err[0] = '\0';
    if (cci_config_parse(&c, str, "CCI_ALLOC_CONF", err, sizeof err, NULL, NULL) != 0) {
        must(memcmp(&c, &before, sizeof c) == 0, "a failed parse changed the configuration", str, "");
        must(err[0] != '\0' && strchr(err, '\n') == NULL, "a failed parse must give one line", str, err);
        free(str);
        return 0;
    }
    int n = cci_config_format(&c, once, sizeof once);
    must(n > 0 && (size_t)n < sizeof once, "the canonical form does not fit 1 KiB", str, "");
    cci_config again;
    cci_config_default(&again);
    must(cci_config_parse(&again, once, "CCI_ALLOC_CONF", err, sizeof err, NULL, NULL) == 0,
         "the canonical form does not parse", once, err);
    cci_config_format(&again, twice, sizeof twice);
    must(strcmp(once, twice) == 0, "parse, print, parse again prints differently", once, twice);
    free(str);
    return 0;
}
