// SPDX-License-Identifier: MIT
// cudaDeviceReset while other threads read the device's allocator: the
// live-report dumper woken by SIGUSR1 every 2 ms ("signal"), or threads that allocate and free
// while one thread resets ("threads"). Before the allocator was reset in place, a reset freed it
// under the readers' feet: SIGSEGV or heap corruption in most runs.
//
// Without arguments the program runs each scenario RUNS times, each in a fresh process (exec of
// itself), and fails when any run did not exit 0: a use-after-free shows only in some runs.
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ptest.h"

extern char **environ;

#define RUNS 4

static _Atomic int stop;


static void *signaller(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        kill(getpid(), SIGUSR1);
        ptest_sleep_ms(2);
    }
    return NULL;
}

// Allocates and frees; errors are expected (a block may vanish in a reset between its malloc and
// its free, and CUDA leaves that race to the program): only the layer's survival is tested.
static void *allocator_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *held[16] = {0};
    while (!atomic_load(&stop)) {
        int i = (int)(rand_r(&seed) % 16);
        if (held[i]) {
            cudaFree(held[i]);
            held[i] = NULL;
        } else if (cudaMalloc(&held[i], (size_t)(1 + rand_r(&seed) % 64) << 12) != cudaSuccess) {
            held[i] = NULL;
        }
        cudaGetLastError();
    }
    for (int i = 0; i < 16; i++)
        if (held[i])
            cudaFree(held[i]);
    cudaGetLastError();
    return NULL;
}

static int scenario(int threads, int resets)
{
    pthread_t t[4];
    int n = 0;
    void *p;
    CUDA_OK(cudaMalloc(&p, 4096));  // the layer is started before the signals begin
    CUDA_OK(cudaFree(p));
    if (threads) {
        for (; n < 3; n++)
            pthread_create(&t[n], NULL, allocator_thread, (void *)(uintptr_t)(n + 1));
    } else {
        pthread_create(&t[n++], NULL, signaller, NULL);
    }
    for (int r = 0; r < resets; r++) {
        void *q[32];
        for (int i = 0; i < 32; i++) {
            if (cudaMalloc(&q[i], (size_t)(1 + (i * 7) % 40) << 14) != cudaSuccess)
                q[i] = NULL;
            if (i % 3 == 2 && q[i - 1]) {
                cudaFree(q[i - 1]);
                q[i - 1] = NULL;
            }
        }
        cudaGetLastError();
        if (cudaDeviceReset() != cudaSuccess)
            cudaGetLastError();
        if (!threads)
            ptest_sleep_ms(1);  // let the dumper run against the fresh state too
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("%s: %d resets survived\n", threads ? "threads" : "signal", resets);
    return 0;
}

static int run_child(const char *self, const char *mode)
{
    char *argv[] = {(char *)self, (char *)mode, NULL};
    pid_t pid;
    if (posix_spawn(&pid, self, NULL, NULL, argv, environ) != 0)
        return -1;
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFSIGNALED(status))
        fprintf(stderr, "%s run killed by signal %d (%s)\n", mode, WTERMSIG(status), strsignal(WTERMSIG(status)));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return scenario(strcmp(argv[1], "threads") == 0, (int)ptest_scale(argc > 2 ? atol(argv[2]) : 150));
    static const char *const modes[] = {"signal", "threads"};
    for (int m = 0; m < 2; m++) {
        int bad = 0;
        for (int i = 0; i < RUNS; i++)
            bad += run_child("/proc/self/exe", modes[m]) != 0;
        CHECK(bad == 0, "%s: %d of %d runs failed", modes[m], bad, RUNS);
    }
    return 0;
}
