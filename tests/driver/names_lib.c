// SPDX-License-Identifier: MIT
// Names that start like CUDA's but are not ours to touch (cuDNN, cuBLAS, libcurl), and a library
// of its own that happens to define two of the names we wrap: dlsym on its handle must give its
// own functions, exactly as glibc does.
#define API __attribute__((visibility("default")))

API int cudnnCreate(void **h);
API int cublasCreate_v2(void **h);
API void *curl_easy_init(void);
API int cuMemAlloc_v2(unsigned long long *p, unsigned long n);
API int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, int *st);

int cudnnCreate(void **h) { *h = 0; return 0; }
int cublasCreate_v2(void **h) { *h = 0; return 0; }
void *curl_easy_init(void) { return 0; }
int cuMemAlloc_v2(unsigned long long *p, unsigned long n) { *p = n; return 7; }
int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, int *st)
{
    (void)s, (void)v, (void)f, (void)st;
    *p = 0;
    return 7;
}
