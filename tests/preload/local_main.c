// SPDX-License-Identifier: MIT
// Loads local_lib RTLD_LOCAL and lets it allocate: the preload must find the real libcudart
// among the loaded objects (RTLD_NEXT fails here) and still serve the allocations.
#include <dlfcn.h>
#include <stdio.h>

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        printf((cond) ? "ok: " : "FAIL: ");                                                  \
        printf(__VA_ARGS__);                                                                 \
        printf("\n");                                                                        \
        if (!(cond))                                                                         \
            return 1;                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "loaded %s RTLD_LOCAL (%s)", argv[1], h ? "" : dlerror());
    CHECK(dlsym(RTLD_DEFAULT, "fakecuda_device_allocs") == NULL,
          "libcudart is not in the global scope");
    int (*pairs)(unsigned long long *);
    *(void **)&pairs = dlsym(h, "local_pairs");
    unsigned long long allocs = ~0ull;
    int rc = pairs(&allocs);
    CHECK(rc == 0, "100 cudaMalloc/cudaFree pairs from the module succeed (%d)", rc);
    CHECK(allocs <= 1, "... and were served by the preload (%llu device allocations)", allocs);
    return 0;
}
