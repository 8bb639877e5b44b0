// SPDX-License-Identifier: MIT
// Our dlsym must answer every lookup it does not substitute exactly as glibc's would: RTLD_NEXT
// and RTLD_DEFAULT relative to the real caller, other handles untouched, and only the exact names
// we wrap replaced, only on the driver's handle. Linked against next_lib.c (which wraps `open`).
// argv[1]: the path of local_mod's library, argv[2]: names_lib's, argv[3] "untouched" when the
// driver level is off.
// Meson builds with _FILE_OFFSET_BITS=64, under which <fcntl.h> renames open to open64: the
// wrapper must be the plain `open` that dlsym(RTLD_NEXT, "open") could find again.
#undef _FILE_OFFSET_BITS
#include <fcntl.h>
#include <unistd.h>

#include "ptest.h"

int dnext_calls(void);
int dnext_found_itself(void);
void *dnext_next(const char *name);
void *dnext_default(const char *name);
void *dnext_next_glibc(const char *name);
void *dnext_default_glibc(const char *name);

static void *(*glibc_dlsym)(void *, const char *);

static void check_untouched(void *h, const char *what)
{
    static const char *const names[] = {"cudnnCreate", "cublasCreate_v2", "curl_easy_init",
                                        "cuMemAlloc_v2", "cuGetProcAddress_v2", "cu", "c", ""};
    int same = 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *ours = dlsym(h, names[i]), *ref = glibc_dlsym(h, names[i]);
        if (ours != ref)
            printf("  %s: %p, glibc %p\n", names[i], ours, ref);
        same &= ours == ref;
    }
    CHECK(same && dlsym(h, "cudnnCreate") != NULL && dlsym(h, "cuMemAlloc_v2") != NULL,
          "%s: cudnnCreate, cublasCreate_v2, curl_easy_init and the library's own cuMemAlloc_v2 / "
          "cuGetProcAddress_v2 are glibc's answers", what);
}

int main(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: dlsym_main LOCAL_MOD NAMES_LIB [untouched]");
    int on = !(argc > 3 && strcmp(argv[3], "untouched") == 0);
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
    Dl_info where;
    void *next_open_lib = dnext_next("open");
    CHECK(next_open_lib == dnext_next_glibc("open") && next_open_lib != NULL &&
              dladdr(next_open_lib, &where) && strstr(where.dli_fname, "libc.so"),
          "dlsym(RTLD_NEXT, \"open\") from that library is libc's open (%s)", where.dli_fname);
    static const char *const probe[] = {"open", "puts", "dnext_calls", "dtest_local_only",
                                        "dmod_default",
                                        "cuMemAlloc_v2", "cuGetProcAddress_v2", "no_such_symbol"};
    int same = 1;
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++)
        same &= dnext_next(probe[i]) == dnext_next_glibc(probe[i]) &&
                dnext_default(probe[i]) == dnext_default_glibc(probe[i]);
    CHECK(same, "from that library, dlsym(RTLD_NEXT / RTLD_DEFAULT, ...) answers exactly as glibc's "
          "dlsym called there (open, puts, its own symbols, CUDA names, a missing name)");
    // Called from here, glibc's own dlsym sees this program as the caller: the reference answer.
    void *next_open = dlsym(RTLD_NEXT, "open"), *default_open = dlsym(RTLD_DEFAULT, "open");
    void *ref_next = glibc_dlsym(RTLD_NEXT, "open"), *ref_default = glibc_dlsym(RTLD_DEFAULT, "open");
    CHECK(next_open == ref_next && default_open == ref_default,
          "dlsym(RTLD_NEXT / RTLD_DEFAULT, \"open\") from the program: glibc's answers (%p %p, "
          "libc's is %p)", next_open, default_open, libc_open);
    CHECK(dnext_default("dnext_calls") == (void *)dnext_calls, "RTLD_DEFAULT from the library");

    // A module loaded RTLD_LOCAL, as Python loads extensions: the same answers as glibc's dlsym
    // called from inside the module.
    void *mod = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(mod != NULL, "dlopen(%s, RTLD_LOCAL)", argv[1]);
    void *(*mod_default)(const char *), *(*mod_next)(const char *);
    void *(*mod_default_glibc)(const char *), *(*mod_next_glibc)(const char *);
    memcpy(&mod_default, &(void *){dlsym(mod, "dmod_default")}, sizeof(void *));
    memcpy(&mod_next, &(void *){dlsym(mod, "dmod_next")}, sizeof(void *));
    memcpy(&mod_default_glibc, &(void *){dlsym(mod, "dmod_default_glibc")}, sizeof(void *));
    memcpy(&mod_next_glibc, &(void *){dlsym(mod, "dmod_next_glibc")}, sizeof(void *));
    CHECK(mod_default && mod_next && mod_default_glibc && mod_next_glibc, "the module's functions");
    same = 1;
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++)
        same &= mod_default(probe[i]) == mod_default_glibc(probe[i]) &&
                mod_next(probe[i]) == mod_next_glibc(probe[i]);
    CHECK(same && mod_next("open") != NULL,
          "from the RTLD_LOCAL module, dlsym(RTLD_NEXT / RTLD_DEFAULT, ...) answers as glibc's there");

    // Handles: answered as glibc does unless the name is one we wrap AND the answer is the driver's.
    void *names = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    CHECK(names != NULL, "dlopen(%s)", argv[2]);
    check_untouched(names, "no driver loaded yet");
    void *drv = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(drv != NULL, "dlopen(libcuda.so.1)");
    void *real_alloc = glibc_dlsym(drv, "cuMemAlloc_v2");
    void *our_alloc = dlsym(drv, "cuMemAlloc_v2");
    if (on)
        CHECK(dladdr(our_alloc, &di) && strstr(di.dli_fname, "libccinterpose") && our_alloc != real_alloc,
              "dlsym(libcuda, \"cuMemAlloc_v2\") is our wrapper");
    else
        CHECK(our_alloc == real_alloc, "driver level off: dlsym(libcuda, \"cuMemAlloc_v2\") is the driver's");
    check_untouched(names, "driver loaded");
    CHECK(dlsym(drv, "cuDeviceGet") == glibc_dlsym(drv, "cuDeviceGet") && glibc_dlsym(drv, "cuCtxGetDevice") &&
              dlsym(drv, "cuCtxGetDevice") == glibc_dlsym(drv, "cuCtxGetDevice") &&
              dlsym(drv, "cuMemAlloc") == glibc_dlsym(drv, "cuMemAlloc"),
          "dlsym(libcuda, ...) of names we do not wrap is glibc's answer (cuDeviceGet, "
          "cuCtxGetDevice, the v1 cuMemAlloc)");
    // Managed memory is wrapped only to be counted (docs/interception-levels.md).
    void *managed = dlsym(drv, "cuMemAllocManaged");
    CHECK(on ? managed != glibc_dlsym(drv, "cuMemAllocManaged") : managed == glibc_dlsym(drv, "cuMemAllocManaged"),
          "dlsym(libcuda, \"cuMemAllocManaged\") is %s", on ? "our wrapper" : "the driver's");
    CHECK(dlsym(names, "cuMemAlloc_v2") == glibc_dlsym(names, "cuMemAlloc_v2"),
          "another library's cuMemAlloc_v2 stays its own once the driver is known");
    dlerror();
    CHECK(dlsym(drv, "no_such_symbol") == NULL && dlerror() != NULL, "a failed lookup keeps its dlerror");
    CHECK(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == glibc_dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") &&
              dladdr(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), &di) && strstr(di.dli_fname, "libccinterpose"),
          "dlsym(RTLD_DEFAULT, \"cuMemAlloc_v2\") finds our export first, as glibc does");
    return 0;
}
