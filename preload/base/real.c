// SPDX-License-Identifier: MIT
// Finding the real CUDA functions with dlsym, never by linking: a DT_NEEDED on libcudart or
// libcuda would make every non-CUDA child process (shells, compilers) fail at load. The one
// place that loads them: glibc's dlsym, the runtime table, the driver table.
#include "real.h"
#include "forwarding.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "log.h"

// The forwarding mark (forwarding.h): set around every call we pass on to the real functions.
_Thread_local int cci__forwarding __attribute__((tls_model("initial-exec")));

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

#define CCI_X(name, need, params, args) \
    static cudaError_t stub_##name params { return cudaErrorInitializationError; }
CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X

cci_real_runtime cci__rt = {
#define CCI_X(name, need, params, args) .name = stub_##name,
    CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X
};
_Atomic int cci__rt_resolved;
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;

// The need column of the tables, as a number.
#define IS_REQUIRED_REQUIRED 1
#define IS_REQUIRED_OPTIONAL 0
#define IS_REQUIRED(need) IS_REQUIRED_##need

// Stores a dlsym result into a function-pointer slot without an object-to-function cast.
static void set_slot(void *slot, void *sym)
{
    if (sym)
        memcpy(slot, &sym, sizeof sym);
}

// Fills what `handle` has; 1 when it has every REQUIRED runtime function.
static int fill_runtime(void *handle)
{
    int complete = 1;
#define CCI_X(name, need, params, args)                                                      \
    set_slot(&cci__rt.name, cci_real_dlsym(handle, #name));                                 \
    if (IS_REQUIRED(need) && cci__rt.name == stub_##name)                                    \
        complete = 0;
    CCI_REAL_RUNTIME(CCI_X)
#undef CCI_X
    return complete;
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
    int complete;
    void *sym = cci_real_dlsym(RTLD_NEXT, "cudaMalloc");
    if (sym) {
        pin_owner(sym);
        complete = fill_runtime(RTLD_NEXT);
    } else {
        // RTLD_NEXT only walks the global scope; a libcudart that an extension module loaded
        // RTLD_LOCAL is only visible through the list of loaded objects.
        char path[PATH_MAX];
        if (!dl_iterate_phdr(find_cudart, path))
            return;
        void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        if (!h || !cci_real_dlsym(h, "cudaMalloc"))
            return;
        complete = fill_runtime(h);
        cci_log(CCI_LOG_DEBUG, "real CUDA runtime found outside the global scope: %s", path);
    }
    if (complete)
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
// Why no lock here, unlike the runtime: the driver table may be wanted inside a library
// constructor (a dlsym or cuGetProcAddress from a constructor, which holds the loader lock),
// while another thread fills it and needs that very lock for its dladdr/dlopen. So one thread
// publishes the shared copy, and any thread that finds it half-built fills a private copy of
// its own instead of waiting.

cci_real_driver cci__drv;
_Atomic int cci__drv_state;
static _Thread_local cci_real_driver own_drv;  // a thread that lost the race to fill cci__drv
static const cci_real_driver no_driver;       // every entry NULL

// The one place that opens libcuda.so.1. `load` = 0: only the copy already loaded; the one
// cudart loaded is the one whose contexts the program uses. Pinned (RTLD_NODELETE): the table
// must never dangle.
static void *open_libcuda(int load)
{
    return dlopen("libcuda.so.1", RTLD_NOW | RTLD_NODELETE | (load ? 0 : RTLD_NOLOAD));
}

// Where this library lives, so an address of ours is never taken for the driver's.
static int in_this_library(const void *p)
{
    Dl_info self, other;
    return dladdr((const void *)cci__real_drv_find, &self) && dladdr(p, &other) &&
           self.dli_fbase == other.dli_fbase;
}

// The object that defines `sym`, if it looks like a CUDA driver (it exports cuInit and the
// resolver: a library that merely defines one of our names, e.g. a shim, is not the driver).
static void *driver_like(const void *sym)
{
    Dl_info di;
    if (!sym || in_this_library(sym) || !dladdr(sym, &di) || !di.dli_fname)
        return NULL;
    void *h = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (h && (!cci_real_dlsym(h, "cuInit") || !cci_real_dlsym(h, "cuGetProcAddress_v2")))
        h = NULL;  // pinned by NODELETE, which is harmless for a loaded library
    return h;
}

// A handle on a driver library the process already loaded: libcuda.so.1 first (every cudart
// loads that soname); then the object that `hint` lives in; then whatever defines the resolver
// after us in the global scope (searched from here, RTLD_NEXT never finds our own export).
static void *loaded_driver(const void *hint)
{
    void *h = open_libcuda(0);
    if (!h)
        h = driver_like(hint);
    if (!h)
        h = driver_like(cci_real_dlsym(RTLD_NEXT, "cuGetProcAddress_v2"));
    (void)dlerror();  // our probes' failures are not the program's errors to read
    return h;
}

static void fill_driver(cci_real_driver *t, void *h)
{
#define CCI_X(name, need, params, args)                                                      \
    {                                                                                        \
        void *sym = cci_real_dlsym(h, #name);                                                \
        memcpy(&t->name, &sym, sizeof sym);                                                  \
    }
    CCI_REAL_DRIVER_WRAPPED(CCI_X)
    CCI_REAL_DRIVER_CALLED(CCI_X)
    CCI_REAL_DRIVER_VMM(CCI_X)
#undef CCI_X
    (void)dlerror();  // the names an old driver lacks
}

// The table of `h`: the shared one if this thread fills it (or another already did), else a
// private copy (the shared one is being filled right now).
static const cci_real_driver *table_of(void *h)
{
    int expected = CCI_DRV_EMPTY;
    if (atomic_compare_exchange_strong(&cci__drv_state, &expected, CCI_DRV_FILLING)) {
        fill_driver(&cci__drv, h);
        atomic_store_explicit(&cci__drv_state, CCI_DRV_READY, memory_order_release);
        return &cci__drv;
    }
    if (expected == CCI_DRV_READY)
        return &cci__drv;
    fill_driver(&own_drv, h);
    return &own_drv;
}

const cci_real_driver *cci__real_drv_find(const void *hint)
{
    if (atomic_load_explicit(&cci__drv_state, memory_order_acquire) == CCI_DRV_READY)
        return &cci__drv;
    void *h = loaded_driver(hint);
    return h ? table_of(h) : &no_driver;  // not loaded yet: ask again next time
}

int cci_real_drv_load(void)
{
    const cci_real_driver *t = cci_real_drv();
    if (t == &no_driver) {
        void *h = open_libcuda(1);
        if (!h) {
            const char *e = dlerror();
            cci_log(CCI_LOG_ERROR, "cannot load libcuda.so.1 (%s); libccinterpose disabled "
                    "(pass-through)", e ? e : "unknown error");
            return -1;
        }
        t = table_of(h);
    }
    const char *missing = NULL;
#define CCI_X(name, need, params, args)                                                      \
    if (!missing && IS_REQUIRED(need) && !t->name)                                           \
        missing = #name;
    CCI_REAL_DRIVER_WRAPPED(CCI_X)
    CCI_REAL_DRIVER_CALLED(CCI_X)
    CCI_REAL_DRIVER_VMM(CCI_X)
#undef CCI_X
    if (missing) {
        cci_log(CCI_LOG_ERROR, "libcuda.so.1 has no %s; libccinterpose disabled (pass-through)",
                missing);
        return -1;
    }
    return 0;
}
