// SPDX-License-Identifier: MIT
// Our dlsym must answer every lookup it does not substitute exactly as glibc's would: RTLD_NEXT
// and RTLD_DEFAULT relative to the real caller, other handles untouched, and only the exact names
// we wrap replaced, only on the driver's handle. Linked against next_lib.c (which wraps `open`).
// argv[1]: the path of local_mod's library, argv[2]: names_lib's.
#include <fcntl.h>
#include <unistd.h>

#include "ptest.h"

int dnext_calls(void);
int dnext_found_itself(void);
void *dnext_next(const char *name);
void *dnext_default(const char *name);

static void *(*glibc_dlsym)(void *, const char *);

static void check_untouched(void *h, const char *what)
{
    static const char *const names[] = {"cudnnCreate", "cublasCreate_v2", "curl_easy_init",
                                        "cuMemAlloc_v2", "cuGetProcAddress_v2", "cu", "c", ""};
    int same = 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        same &= dlsym(h, names[i]) == glibc_dlsym(h, names[i]);
    CHECK(same && dlsym(h, "cudnnCreate") != NULL && dlsym(h, "cuMemAlloc_v2") != NULL,
          "%s: cudnnCreate, cublasCreate_v2, curl_easy_init and the library's own cuMemAlloc_v2 / "
          "cuGetProcAddress_v2 are glibc's answers", what);
}

int main(int argc, char **argv)
{
    CHECK(argc == 3, "usage: dlsym_main LOCAL_MOD NAMES_LIB");
    void *sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (!sym)
        sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    memcpy(&glibc_dlsym, &sym, sizeof sym);
    Dl_info di;
    CHECK(dladdr((void *)dlsym, &di) && strstr(di.dli_fname, "libccinterpose"),
          "this program's dlsym is libccinterpose's (%s)", di.dli_fname);

    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *libc_open = glibc_dlsym(libc, "open");
    CHECK(libc_open != NULL, "libc's open");

    // RTLD_NEXT from a library after us: the next object after THAT library.
    int fd = open("/dev/null", O_RDONLY);
    CHECK(fd >= 0 && dnext_calls() == 1 && !dnext_found_itself(),
          "a library's open wrapper finds the next open with dlsym(RTLD_NEXT) and works");
    close(fd);
    CHECK(dnext_next("open") == libc_open, "dlsym(RTLD_NEXT, \"open\") from that library is libc's open");
    CHECK(dnext_next("dnext_calls") == NULL, "and never the library's own symbols");
    // Called from here, glibc's own dlsym sees this program as the caller: the reference answer.
    CHECK(dlsym(RTLD_NEXT, "open") == glibc_dlsym(RTLD_NEXT, "open") &&
              dlsym(RTLD_DEFAULT, "open") == glibc_dlsym(RTLD_DEFAULT, "open") &&
              dlsym(RTLD_NEXT, "open") == (void *)open,
          "dlsym(RTLD_NEXT / RTLD_DEFAULT, \"open\") from the program: glibc's answers (the "
          "library's wrapper)");
    CHECK(dnext_default("dnext_calls") == (void *)dnext_calls, "RTLD_DEFAULT from the library");

    // RTLD_DEFAULT from a module loaded RTLD_LOCAL searches its own dependencies too.
    void *mod = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(mod != NULL, "dlopen(%s, RTLD_LOCAL)", argv[1]);
    void *(*mod_default)(const char *), *(*mod_next)(const char *), *(*mod_direct)(void);
    memcpy(&mod_default, &(void *){dlsym(mod, "dmod_default")}, sizeof(void *));
    memcpy(&mod_next, &(void *){dlsym(mod, "dmod_next")}, sizeof(void *));
    memcpy(&mod_direct, &(void *){dlsym(mod, "dmod_direct")}, sizeof(void *));
    CHECK(mod_default && mod_next && mod_direct, "the module's functions");
    CHECK(dlsym(RTLD_DEFAULT, "dtest_local_only") == NULL,
          "the module's dependency is not in the global scope");
    CHECK(mod_default("dtest_local_only") == mod_direct(),
          "dlsym(RTLD_DEFAULT) from the RTLD_LOCAL module finds its dependency's symbol");
    CHECK(mod_next("dtest_local_only") == mod_direct(),
          "dlsym(RTLD_NEXT) from the module finds it after the module");

    // Handles: answered as glibc does unless the name is one we wrap AND the answer is the driver's.
    void *names = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    CHECK(names != NULL, "dlopen(%s)", argv[2]);
    check_untouched(names, "no driver loaded yet");
    void *drv = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(drv != NULL, "dlopen(libcuda.so.1)");
    void *real_alloc = glibc_dlsym(drv, "cuMemAlloc_v2");
    void *our_alloc = dlsym(drv, "cuMemAlloc_v2");
    CHECK(dladdr(our_alloc, &di) && strstr(di.dli_fname, "libccinterpose") && our_alloc != real_alloc,
          "dlsym(libcuda, \"cuMemAlloc_v2\") is our wrapper");
    check_untouched(names, "driver loaded");
    CHECK(dlsym(drv, "cuDeviceGet") == glibc_dlsym(drv, "cuDeviceGet") &&
              dlsym(drv, "cuMemAllocManaged") == glibc_dlsym(drv, "cuMemAllocManaged") &&
              dlsym(drv, "cuMemAlloc") == glibc_dlsym(drv, "cuMemAlloc"),
          "dlsym(libcuda, ...) of names we do not wrap is glibc's answer (cuDeviceGet, "
          "cuMemAllocManaged, the v1 cuMemAlloc)");
    CHECK(dlsym(names, "cuMemAlloc_v2") == glibc_dlsym(names, "cuMemAlloc_v2"),
          "another library's cuMemAlloc_v2 stays its own once the driver is known");
    dlerror();
    CHECK(dlsym(drv, "no_such_symbol") == NULL && dlerror() != NULL, "a failed lookup keeps its dlerror");
    CHECK(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == our_alloc,
          "dlsym(RTLD_DEFAULT, \"cuMemAlloc_v2\") finds our export first");
    return 0;
}
