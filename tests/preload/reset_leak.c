// SPDX-License-Identifier: MIT
// No host memory lost per cudaDeviceReset or per fork child: each used to
// leave the old report timeline behind (~41 KB), without bound for a program that resets in a
// loop or a process tree that forks generation after generation. Measured with mallinfo2, which
// counts what the process's heap holds, the layer's bookkeeping included.
#include <malloc.h>
#include <sys/wait.h>

#include "ptest.h"

#define RESETS 200
#define GENERATIONS 24
#define SLACK ((size_t)1 << 20)  // allocator noise; the leak was RESETS x 41 KB = 8 MB

static size_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static void use_device(void)
{
    void *p[8];
    for (int i = 0; i < 8; i++)
        CUDA_OK(cudaMalloc(&p[i], (size_t)(i + 1) << 16));
    for (int i = 0; i < 8; i++)
        CUDA_OK(cudaFree(p[i]));
}

static void resets(void)
{
    for (int i = 0; i < 20; i++) {  // warm-up: whatever grows once has grown
        use_device();
        CUDA_OK(cudaDeviceReset());
    }
    size_t before = heap_in_use();
    for (int i = 0; i < RESETS; i++) {
        use_device();
        CUDA_OK(cudaDeviceReset());
    }
    size_t after = heap_in_use();
    CHECK(after < before + SLACK, "%d resets grew the heap by %zd bytes (at most %zu allowed)", RESETS,
          (ssize_t)(after - before), SLACK);
}

// Each generation uses the device (an allocator and its timeline exist) and forks the next; the
// last compares its heap with the one the third generation measured.
static void generations(void)
{
    size_t third = 0;
    for (int g = 0; g < GENERATIONS; g++) {
        use_device();
        if (g == 2)
            third = heap_in_use();
        pid_t pid = fork();
        if (pid < 0)
            CHECK(0, "fork failed");
        if (pid > 0) {
            int status;
            waitpid(pid, &status, 0);
            exit(WIFEXITED(status) ? WEXITSTATUS(status) : 2);  // the last generation's verdict
        }
    }
    use_device();
    size_t last = heap_in_use();
    CHECK(last < third + SLACK / 2, "%d fork generations grew the heap by %zd bytes (at most %zu allowed)",
          GENERATIONS - 3, (ssize_t)(last - third), SLACK / 2);
}

// Argument "resets" or "fork" runs one part; none runs both.
int main(int argc, char **argv)
{
    ptest_api api = ptest_get_api();
    CHECK(api.is_active() == 1, "the preload is active");
    if (argc < 2 || strcmp(argv[1], "fork") != 0)
        resets();
    fflush(stdout);
    if (argc < 2 || strcmp(argv[1], "resets") != 0)
        generations();
    return 0;
}
