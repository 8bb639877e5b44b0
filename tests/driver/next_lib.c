// SPDX-License-Identifier: MIT
// A library that wraps `open` and finds the next one with dlsym(RTLD_NEXT), as LLVM's OpenMP and
// many tracing tools do. It comes after libccinterpose in the global scope: if our dlsym
// forwarded RTLD_NEXT by an ordinary call, the search would start after libccinterpose and find
// this very wrapper again.
// Meson builds with _FILE_OFFSET_BITS=64, under which <fcntl.h> renames open to open64: the
// wrapper must be the plain `open` that dlsym(RTLD_NEXT, "open") could find again.
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#define API __attribute__((visibility("default")))

static int calls;
static int found_itself;

API int open(const char *path, int flags, ...);

API int open(const char *path, int flags, ...)
{
    int (*next)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    if (!next || next == open) {
        found_itself = next == open;
        return -1;
    }
    calls++;
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return next(path, flags, mode);
}

API int dnext_calls(void);
API int dnext_found_itself(void);
API void *dnext_next(const char *name);
API void *dnext_default(const char *name);
API void *dnext_next_glibc(const char *name);
API void *dnext_default_glibc(const char *name);

API int dnext_calls(void) { return calls; }
API int dnext_found_itself(void) { return found_itself; }

// What RTLD_NEXT and RTLD_DEFAULT mean when asked from this library: through the process's dlsym
// (libccinterpose's), and through glibc's own, which sees this library as the caller and so
// gives the reference answer.
API void *dnext_next(const char *name) { return dlsym(RTLD_NEXT, name); }
API void *dnext_default(const char *name) { return dlsym(RTLD_DEFAULT, name); }

static void *glibc_dlsym(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = NULL;
    void *sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (!sym)
        sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    memcpy(&real, &sym, sizeof sym);
    return real(handle, name);
}

API void *dnext_next_glibc(const char *name) { return glibc_dlsym(RTLD_NEXT, name); }
API void *dnext_default_glibc(const char *name) { return glibc_dlsym(RTLD_DEFAULT, name); }
