// SPDX-License-Identifier: MIT
// On a real GPU: the pitches the driver chooses (cuMemAllocPitch_v2) for a set of widths and
// element sizes, next to the device's texture pitch alignment, and the codes of bad arguments.
// No CUDA headers: the driver is opened with dlopen, so it builds with any C compiler.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*init_fn)(unsigned);
typedef int (*dev_get_fn)(int *, int);
typedef int (*attr_fn)(int *, int, int);
typedef int (*retain_fn)(void **, int);
typedef int (*set_fn)(void *);
typedef int (*pitch_fn)(unsigned long long *, size_t *, size_t, size_t, unsigned);
typedef int (*free_fn)(unsigned long long);

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("no libcuda.so.1\n");
        return 1;
    }
    init_fn cuInit = (init_fn)dlsym(h, "cuInit");
    dev_get_fn cuDeviceGet = (dev_get_fn)dlsym(h, "cuDeviceGet");
    attr_fn cuDeviceGetAttribute = (attr_fn)dlsym(h, "cuDeviceGetAttribute");
    retain_fn retain = (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
    set_fn cuCtxSetCurrent = (set_fn)dlsym(h, "cuCtxSetCurrent");
    pitch_fn alloc_pitch = (pitch_fn)dlsym(h, "cuMemAllocPitch_v2");
    free_fn mem_free = (free_fn)dlsym(h, "cuMemFree_v2");
    int dev = 0, align = 0, tex_align = 0;
    void *ctx = NULL;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || retain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 2;
    cuDeviceGetAttribute(&align, 14, dev);      // CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT
    cuDeviceGetAttribute(&tex_align, 51, dev);  // CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT
    int max_pitch = 0;
    cuDeviceGetAttribute(&max_pitch, 11, dev);  // CU_DEVICE_ATTRIBUTE_MAX_PITCH
    printf("texture_alignment %d texture_pitch_alignment %d max_pitch %d\n", align, tex_align, max_pitch);
    size_t widths[] = {1, 3, 4, 31, 32, 33, 100, 255, 256, 257, 400, 511, 512, 513, 1000, 1024,
                       1500, 4000, 4096, 4097, 65536, 100000, 1 << 20, (size_t)2147483647, (size_t)2147483648u};
    unsigned elems[] = {4, 8, 16, 0, 1, 2, 3, 32};
    for (size_t e = 0; e < sizeof elems / sizeof elems[0]; e++)
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            unsigned long long p = 0;
            size_t pitch = 0;
            int rc = alloc_pitch(&p, &pitch, widths[w], 3, elems[e]);
            printf("elem %u width %zu height 3 -> rc %d pitch %zu\n", elems[e], widths[w], rc, pitch);
            if (rc == 0)
                mem_free(p);
        }
    unsigned long long p = 0;
    size_t pitch = 0;
    printf("width 0 -> rc %d\n", alloc_pitch(&p, &pitch, 0, 3, 4));
    printf("height 0 -> rc %d pitch %zu\n", alloc_pitch(&p, &pitch, 64, 0, 4), pitch);
    printf("null pitch -> rc %d\n", alloc_pitch(&p, NULL, 64, 3, 4));
    printf("null ptr -> rc %d\n", alloc_pitch(NULL, &pitch, 64, 3, 4));
    // The runtime's cudaMallocPitch / cudaMalloc3D, when a libcudart is found.
    const char *rts[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    void *rt = NULL;
    for (int i = 0; i < 3 && !rt; i++)
        rt = dlopen(rts[i], RTLD_NOW);
    if (rt) {
        typedef int (*mp_fn)(void **, size_t *, size_t, size_t);
        mp_fn mp = (mp_fn)dlsym(rt, "cudaMallocPitch");
        for (size_t w = 0; w < sizeof widths / sizeof widths[0] - 2; w++) {
            void *q = NULL;
            size_t pt = 0;
            int rc = mp(&q, &pt, widths[w], 3);
            printf("runtime width %zu height 3 -> rc %d pitch %zu\n", widths[w], rc, pt);
        }
        void *q = NULL;
        size_t pt = 0;
        printf("runtime width 0 -> rc %d pitch %zu ptr %p\n", mp(&q, &pt, 0, 3), pt, q);
        printf("runtime height 0 -> rc %d pitch %zu ptr %p\n", mp(&q, &pt, 64, 0), pt, q);
    } else {
        printf("no libcudart found\n");
    }
    return 0;
}
