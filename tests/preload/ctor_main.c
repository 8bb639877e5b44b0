// SPDX-License-Identifier: MIT
// Checks what ctor_lib's constructor saw (see ctor_lib.c).
#include "ptest.h"

extern int ctor_result, ctor_cached;

int main(void)
{
    CHECK(ctor_result == cudaSuccess, "cudaMalloc/cudaFree from a library constructor succeed (%d)",
          ctor_result);
    CHECK(ctor_cached == 1, "... and were served by the preload's cache");
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    return 0;
}
