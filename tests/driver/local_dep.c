// SPDX-License-Identifier: MIT
// A dependency of local_mod.c, visible only in that module's local scope when the module is
// loaded RTLD_LOCAL.
__attribute__((visibility("default"))) int dtest_local_only(void);

int dtest_local_only(void)
{
    return 42;
}
