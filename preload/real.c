// SPDX-License-Identifier: MIT
// Finding the real CUDA functions with dlsym, never by linking: a DT_NEEDED on libcudart or
// libcuda would make every non-CUDA child process (shells, compilers) fail at load.
#include "real.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "log.h"

// ---- dlsym ----------------------------------------------------------------------------------

static _Atomic(cci_dlsym_fn) real_dlsym;

static void *dlsym_missing(void *handle, const char *name)
{
    (void)handle;
    (void)name;
    return NULL;
}

static void report_missing(void)
{
    cci_log(CCI_LOG_ERROR, "glibc's dlsym not found (dlvsym GLIBC_2.34/2.2.5/2.17); CUDA "
            "functions cannot be found, libccinterpose passes through");
}

// dlvsym with a version skips our unversioned definition (a versioned lookup never binds to an
// unversioned symbol), and RTLD_NEXT starts after us anyway. GLIBC_2.34 is where dlsym moved into
// libc; the older nodes are the original ones of x86-64 (2.2.5) and AArch64 (2.17). Never
// __libc_dlsym: it is gone since glibc 2.34. No memcpy or other libc call but dlvsym here: see
// CCI_NO_SANITIZE.
CCI_NO_SANITIZE cci_dlsym_fn cci_real_dlsym_fn(void)
{
    cci_dlsym_fn f = atomic_load_explicit(&real_dlsym, memory_order_acquire);
    if (__builtin_expect(f != NULL, 1))
        return f;
    void *sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!sym)
        sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (!sym)
        sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
    // POSIX requires object and function pointers to convert; the union says so without a cast
    // that -Wpedantic would flag.
    union { void *obj; cci_dlsym_fn fn; } u = {.obj = sym};
    f = sym ? u.fn : dlsym_missing;
    // Idempotent: racing threads all store the same answer.
    atomic_store_explicit(&real_dlsym, f, memory_order_release);
    if (!sym)
        report_missing();
    return f;
}

// ---- runtime --------------------------------------------------------------------------------

#define CCI_X(name, params, args) \
    static cudaError_t stub_##name params { return cudaErrorInitializationError; }
CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X

cci_real_runtime cci__rt = {
#define CCI_X(name, params, args) .name = stub_##name,
    CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X
};
_Atomic int cci__rt_resolved;
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;

// Stores a dlsym result into a function-pointer slot without an object-to-function cast.
static void set_slot(void *slot, void *sym)
{
    if (sym)
        memcpy(slot, &sym, sizeof sym);
}

static void fill_runtime(void *handle)
{
#define CCI_X(name, params, args) set_slot(&cci__rt.name, cci_real_dlsym(handle, #name));
    CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X
}

static int find_cudart(struct dl_phdr_info *info, size_t size, void *ud)
{
    const char *slash = strrchr(info->dlpi_name, '/');
    const char *base = slash ? slash + 1 : info->dlpi_name;
    if (strncmp(base, "libcudart.so", 12) != 0 || strlen(info->dlpi_name) >= PATH_MAX)
        return 0;
    strcpy(ud, info->dlpi_name);
    return 1;
}

// The library that defines `sym`, kept loaded for the rest of the process: our table would
// dangle if a dlclose unmapped it.
static void *pin_owner(void *sym)
{
    Dl_info di;
    if (!dladdr(sym, &di) || !di.dli_fname)
        return NULL;
    return dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

static void resolve_runtime(void)
{
    void *sym = cci_real_dlsym(RTLD_NEXT, "cudaMalloc");
    if (sym) {
        pin_owner(sym);
        fill_runtime(RTLD_NEXT);
    } else {
        // RTLD_NEXT only walks the global scope; a libcudart that an extension module loaded
        // RTLD_LOCAL is only visible through the list of loaded objects.
        char path[PATH_MAX];
        if (!dl_iterate_phdr(find_cudart, path))
            return;
        void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        if (!h || !cci_real_dlsym(h, "cudaMalloc"))
            return;
        fill_runtime(h);
        cci_log(CCI_LOG_DEBUG, "real CUDA runtime found outside the global scope: %s", path);
    }
    atomic_store_explicit(&cci__rt_resolved, 1, memory_order_release);
}

const cci_real_runtime *cci__real_rt_resolve(void)
{
    pthread_mutex_lock(&rt_lock);
    if (!atomic_load_explicit(&cci__rt_resolved, memory_order_relaxed))
        resolve_runtime();
    pthread_mutex_unlock(&rt_lock);
    return &cci__rt;
}

// ---- driver ---------------------------------------------------------------------------------

cci_real_driver cci_real_drv;

int cci_real_drv_load(void)
{
    // The copy cudart already loaded is the one whose contexts the program uses.
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        cci_log(CCI_LOG_ERROR, "cannot load libcuda.so.1 (%s); libccinterpose disabled (pass-through)",
                e ? e : "unknown error");
        return -1;
    }
#define CCI_X(name, params) set_slot(&cci_real_drv.name, cci_real_dlsym(h, #name));
    CCI_REAL_DRIVER(CCI_X)
#undef CCI_X
    const char *missing = NULL;
#define CCI_X(name, params)                                                                   \
    if (!missing && !cci_real_drv.name && strcmp(#name, "cuThreadExchangeStreamCaptureMode")) \
        missing = #name;
    CCI_REAL_DRIVER(CCI_X)
#undef CCI_X
    if (missing) {
        cci_log(CCI_LOG_ERROR, "libcuda.so.1 has no %s; libccinterpose disabled (pass-through)",
                missing);
        return -1;
    }
    return 0;
}
