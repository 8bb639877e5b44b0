// SPDX-License-Identifier: MIT
// A module loaded RTLD_LOCAL (as Python loads extensions). glibc searches RTLD_DEFAULT in the
// CALLER's scope, which for this module includes its own dependencies: a lookup forwarded by an
// ordinary call from libccinterpose would search the global scope only and miss them.
#include <dlfcn.h>
#include <string.h>

#define API __attribute__((visibility("default")))

int dtest_local_only(void);

API void *dmod_default(const char *name);
API void *dmod_next(const char *name);
API void *dmod_direct(void);
API void *dmod_default_glibc(const char *name);
API void *dmod_next_glibc(const char *name);

void *dmod_default(const char *name) { return dlsym(RTLD_DEFAULT, name); }
void *dmod_next(const char *name) { return dlsym(RTLD_NEXT, name); }
void *dmod_direct(void) { return (void *)dtest_local_only; }

// The reference: glibc's own dlsym, called from this module.
static void *glibc_dlsym(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = NULL;
    void *sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (!sym)
        sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    memcpy(&real, &sym, sizeof sym);
    return real(handle, name);
}

void *dmod_default_glibc(const char *name) { return glibc_dlsym(RTLD_DEFAULT, name); }
void *dmod_next_glibc(const char *name) { return glibc_dlsym(RTLD_NEXT, name); }
