// SPDX-License-Identifier: MIT
// A program whose dlsym reference carries the old version node, as binaries built before glibc
// 2.34 (and libcudart.so.13 itself) have: dlsym@GLIBC_2.2.5 on x86-64, dlsym@GLIBC_2.17 on
// AArch64. Our unversioned definition must catch it like the default dlsym@GLIBC_2.34.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void *dlsym_compat(void *handle, const char *name);
#if defined(__x86_64__)
__asm__(".symver dlsym_compat, dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym_compat, dlsym@GLIBC_2.17");
#endif

int main(void)
{
    void *drv = dlopen("libcuda.so.1", RTLD_NOW);
    void *r = drv ? dlsym_compat(drv, "cuGetProcAddress_v2") : NULL;
    Dl_info di;
    int ok = r && dladdr(r, &di) && strstr(di.dli_fname, "libccinterpose");
    printf("%s: dlsym@old-version(libcuda, \"cuGetProcAddress_v2\") answers our resolver (%s)\n",
           ok ? "ok" : "FAIL", r && dladdr(r, &di) ? di.dli_fname : "nothing");
    // The reference: glibc's own dlsym, called from here too (dlvsym skips our unversioned one).
    void *(*glibc_dlsym)(void *, const char *) = NULL;
    void *g = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    memcpy(&glibc_dlsym, &g, sizeof g);
    void *next = dlsym_compat(RTLD_NEXT, "puts");
    int ok2 = g && next && next == glibc_dlsym(RTLD_NEXT, "puts");
    printf("%s: dlsym@old-version(RTLD_NEXT, \"puts\") from the program is glibc's answer\n",
           ok2 ? "ok" : "FAIL");
    return ok && ok2 ? 0 : 1;
}
