// SPDX-License-Identifier: MIT
// The negative control of the RTLD_NEXT test: a dlsym interposer that forwards with an ordinary
// call, as interposers that looped under LLVM OpenMP did. Preloaded instead of libccinterpose,
// it must make dtest_dlsym's `open` wrapper find itself.
#include <dlfcn.h>
#include <string.h>

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = NULL;
    void *sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!sym)
        sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    memcpy(&real, &sym, sizeof sym);
    void *r = real(handle, name);
    __asm__ volatile("" : "+r"(r));  // keeps the call an ordinary one at any optimisation level
    return r;
}
