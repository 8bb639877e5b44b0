// SPDX-License-Identifier: MIT
// Live dump: SIGUSR1 during a multi-threaded workload writes the report (CCI_REPORT, with %p)
// without stopping the program, chains the program's own handler, and never corrupts a block.
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>

#include "ptest.h"

static _Atomic int program_handler_calls;
static _Atomic int stop;
static _Atomic long corrupt, ops;

static void program_handler(int sig)
{
    (void)sig;
    atomic_fetch_add(&program_handler_calls, 1);
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned char *host = malloc(1 << 20);
    while (!atomic_load(&stop)) {
        size_t n = 512 + (size_t)(rand_r(&seed) % (1 << 20));
        unsigned char *d;
        if (cudaMalloc((void **)&d, n) != cudaSuccess)
            continue;
        unsigned char tag = (unsigned char)rand_r(&seed);
        memset(d, tag, n);  // fake device memory is host memory
        for (size_t i = 0; i < n; i += 4096)
            if (d[i] != tag)
                atomic_fetch_add(&corrupt, 1);
        cudaFree(d);
        atomic_fetch_add(&ops, 1);
    }
    free(host);
    return NULL;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: signal_dump EXPECTED_REPORT_PATH");
    signal(SIGUSR1, program_handler);  // installed before our layer starts: must be chained
    void *warm;
    CUDA_OK(cudaMalloc(&warm, 4096));
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    const int dumps = 5;
    for (int i = 0; i < dumps; i++) {
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        kill(getpid(), SIGUSR1);
    }
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(atomic_load(&program_handler_calls) == dumps, "the program's own handler ran %d times",
          atomic_load(&program_handler_calls));
    CHECK(atomic_load(&corrupt) == 0, "%ld operations during the dumps, no corrupted block", atomic_load(&ops));
    char path[512];
    snprintf(path, sizeof path, "%s", argv[1]);
    char *pid = strstr(path, "PID");
    if (pid) {
        char rest[256];
        snprintf(rest, sizeof rest, "%s", pid + 3);
        snprintf(pid, sizeof path - (size_t)(pid - path), "%ld%s", (long)getpid(), rest);
    }
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size > 1000, "live report written to %s (%lld bytes)", path,
          (long long)st.st_size);
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, (size_t)st.st_size + 1);
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    CHECK(got == (size_t)st.st_size && buf[0] == '{' && strstr(buf, "\"allocated_bytes.all.current\""),
          "the report is the JSON form, chosen by the .json extension");
    // Taken while the program ran, on the fake CUDA: labelled as a live dump of a simulated device.
    CHECK(strstr(buf, "\"taken\": \"live\"") && strstr(buf, "\"simulated_device\": true"),
          "the live report says it is live and on a simulated device");
    free(buf);
    cudaFree(warm);
    return 0;
}
