// SPDX-License-Identifier: MIT
// CUDA IPC on blocks of virtual-memory segments, between two processes under the preload (the
// fake driver's pages are memfds, so an import really shares the exporter's bytes). This program
// is process A; it starts itself again as process B ("peer" mode) with one end of a socketpair,
// over which the two pass handles and verdicts. One scenario per run, named by argv[1]:
//   both-ways      runtime level: blocks of several sizes (one in the small pool, one exported by
//                  an interior pointer) shared A -> B and a block B -> A; writes seen both ways;
//                  a handle opened twice gives one address and needs two closes
//   driver         the same through cuIpcGetMemHandle / cuIpcOpenMemHandle_v2 / cuIpcCloseMemHandle
//   no-pidfd       both-ways with pidfd_getfd and ptrace refused (seccomp), as in a container
//                  without CAP_SYS_PTRACE
//   free-open      A frees a block B has open: its bytes stay B's until B closes, then A reuses them
//   importer-dies  B exits without closing: A's held free completes; A's later free is ordinary
//   fork           a fork child of A (exporter) or of B (importer) keeps nothing open
//   no-preload     B runs without the preload: CUDA refuses the handle, no pointer comes back
//   stale          handles of a freed block, of a process that exited, damaged, or A's own
//   no-fd          the device offers no exportable pages: the export is refused with one line
//   few-fds        A's descriptor limit leaves room for one block's pages, B opens four at once:
//                  the exporter keeps descriptors for what fits and exports the rest per open
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ptest.h"

#define MiB ((size_t)1 << 20)
// CUDA's codes for a handle that does not open and a damaged one (the fake's header lacks them).
enum { ERR_MAP_FAILED = 205, ERR_INVALID_HANDLE = 400 };

static ptest_api api;
static int chan = -1;  // the socketpair end to the other process

typedef struct msg {
    int cmd;  // what the message asks or answers
    int ok;
    uint64_t size, seed;
    char handle[64];
} msg;

enum { M_OPEN = 1, M_OPEN_KEEP, M_CLOSE, M_VERIFY, M_EXPORT, M_DIE, M_QUIT, M_REPLY };

static void put(msg m)
{
    CHECK(write(chan, &m, sizeof m) == (ssize_t)sizeof m, "message sent (%s)", strerror(errno));
}

static msg get(void)
{
    msg m;
    ssize_t got = read(chan, &m, sizeof m);
    CHECK(got == (ssize_t)sizeof m, "message received (%zd bytes)", got);
    return m;
}

static msg ask(msg m)
{
    put(m);
    return get();
}

static void *alloc_filled(size_t n, uint64_t seed)
{
    void *p;
    CUDA_OK(cudaMalloc(&p, n));
    ptest_fill(p, n, seed);
    return p;
}

static msg export_of(void *p, size_t size, uint64_t seed)
{
    msg m = {.cmd = M_OPEN, .size = size, .seed = seed};
    CUDA_OK(cudaIpcGetMemHandle((cudaIpcMemHandle_t *)(void *)m.handle, p));
    return m;
}

static uint64_t active_bytes(void)
{
    return (uint64_t)ptest_stats(&api, 0).active_bytes[CCI_POOL_ALL].current;
}

// Waits up to 5 s for what the exporter's thread does after a connection ends.
static int wait_active(uint64_t want)
{
    for (int i = 0; i < 500 && active_bytes() != want; i++)
        ptest_sleep_ms(10);
    return active_bytes() == want;
}

// ---- process B ------------------------------------------------------------------------------

static void *opened[16];

static void peer(void)
{
    for (;;) {
        msg m = get(), r = {.cmd = M_REPLY};
        cudaIpcMemHandle_t h;
        memcpy(&h, m.handle, sizeof h);
        if (m.cmd == M_OPEN || m.cmd == M_OPEN_KEEP) {
            // Open, check A's bytes, write ours over the first half; M_OPEN_KEEP keeps it open in
            // slot `seed % 16` for a later M_VERIFY / M_CLOSE.
            void *p = NULL;
            cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
            r.ok = e == cudaSuccess && p && ptest_verify(p, m.size, m.seed);
            r.seed = (uint64_t)e;
            if (r.ok && m.cmd == M_OPEN) {
                void *again = NULL;  // the same handle twice: the same address, two closes
                r.ok = cudaIpcOpenMemHandle(&again, h, 0) == cudaSuccess && again == p &&
                       cudaIpcCloseMemHandle(again) == cudaSuccess && ptest_verify(p, m.size, m.seed);
                ptest_fill(p, m.size / 2, m.seed + 100);
                r.ok = r.ok && cudaIpcCloseMemHandle(p) == cudaSuccess;
            } else if (r.ok) {
                opened[m.seed % 16] = p;
            }
        } else if (m.cmd == M_VERIFY) {
            r.ok = ptest_verify(opened[m.seed % 16], m.size, m.seed);
        } else if (m.cmd == M_CLOSE) {
            r.ok = cudaIpcCloseMemHandle(opened[m.seed % 16]) == cudaSuccess;
        } else if (m.cmd == M_EXPORT) {
            // Export a fresh block; the next message says which seed A wrote over its first half
            // (0: A did not open it). Then free it: the free must not stay held, since A closed.
            uint64_t base = active_bytes();
            void *p = alloc_filled(m.size, m.seed);
            r = export_of(p, m.size, m.seed);
            r.cmd = M_REPLY;
            r.ok = 1;
            put(r);
            msg w = get();
            r = (msg){.cmd = M_REPLY, .ok = !w.seed || ptest_verify(p, m.size / 2, w.seed)};
            CUDA_OK(cudaFree(p));
            r.ok = r.ok && wait_active(base);
        } else if (m.cmd == M_DIE) {
            _exit(0);  // with every import still open
        } else {
            r.ok = 1;
            put(r);
            exit(0);
        }
        put(r);
    }
}

static pid_t start_peer(const char *self, int with_preload)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(sv[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", sv[1]);
        if (!with_preload)
            unsetenv("LD_PRELOAD");
        execl(self, self, "peer", fd, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    chan = sv[0];
    return pid;
}

static void stop_peer(pid_t pid)
{
    msg m = {.cmd = M_QUIT};
    ask(m);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "process B passed (status %d)", st);
    close(chan);
}

// ---- scenarios (process A) --------------------------------------------------------------------

static void share_to_peer(void *p, size_t size, uint64_t seed, void *export_at)
{
    msg m = export_of(export_at, size, seed);
    CHECK(ask(m).ok, "B opened the %zu-byte block, read A's bytes and wrote its own", size);
    CHECK(ptest_verify(p, size / 2, seed + 100), "A reads B's writes in the %zu-byte block", size);
}

static void both_ways(void)
{
    void *small = alloc_filled(64 * 1024, 1), *mid = alloc_filled(3 * MiB + 4096, 2);
    void *large = alloc_filled(64 * MiB, 3);
    share_to_peer(small, 64 * 1024, 1, small);
    share_to_peer(mid, 3 * MiB + 4096, 2, (char *)mid + 8192);  // a handle names the whole block
    share_to_peer(large, 64 * MiB, 3, large);
    // B -> A: B exports, A opens, checks, writes, closes; B checks A's writes.
    msg r = ask((msg){.cmd = M_EXPORT, .size = 16 * MiB, .seed = 4});
    void *p = NULL;
    cudaIpcMemHandle_t h;
    memcpy(&h, r.handle, sizeof h);
    CUDA_OK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    CHECK(ptest_verify(p, 16 * MiB, 4), "A reads B's block");
    ptest_fill(p, 8 * MiB, 104);
    CUDA_OK(cudaIpcCloseMemHandle(p));
    CHECK(ask((msg){.cmd = M_REPLY, .seed = 104}).ok, "B reads A's writes in its block, and its free completes");
    CUDA_OK(cudaFree(small));
    CUDA_OK(cudaFree(mid));
    CUDA_OK(cudaFree(large));
}

static void driver_level(void)
{
    void *p = alloc_filled(8 * MiB, 5);
    msg m = {.cmd = M_OPEN, .size = 8 * MiB, .seed = 5};
    CU_OK(cuIpcGetMemHandle((CUipcMemHandle *)(void *)m.handle, (CUdeviceptr)(uintptr_t)p));
    CHECK(ask(m).ok, "B opened the driver-level handle");
    CHECK(ptest_verify(p, 4 * MiB, 105), "A reads B's writes");
    msg r = ask((msg){.cmd = M_EXPORT, .size = 4 * MiB, .seed = 6});
    CUipcMemHandle h;
    memcpy(&h, r.handle, sizeof h);
    CUdeviceptr d = 0;
    CU_OK(cuIpcOpenMemHandle_v2(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK(ptest_verify((void *)(uintptr_t)d, 4 * MiB, 6), "A reads B's block through the driver level");
    ptest_fill((void *)(uintptr_t)d, 2 * MiB, 106);
    CU_OK(cuIpcCloseMemHandle(d));
    CHECK(ask((msg){.cmd = M_REPLY, .seed = 106}).ok, "B reads A's writes, and its free completes");
    CUDA_OK(cudaFree(p));
}

// seccomp: pidfd_getfd and ptrace fail with EPERM, everything else runs (x86-64 only). Under
// AddressSanitizer ptrace stays allowed: its leak check stops the process's threads with it.
#if defined(__SANITIZE_ADDRESS__)
#define REFUSED_TOO 438
#else
#define REFUSED_TOO SYS_ptrace
#endif
static int refuse_pidfd(void)
{
#if defined(__x86_64__)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 438 /* pidfd_getfd */, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, REFUSED_TOO, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        return 0;
    return syscall(438, 0, 0, 0) == -1 && errno == EPERM;
#else
    return 0;
#endif
}

static void free_open(void)
{
    uint64_t base = active_bytes();
    void *x = alloc_filled(64 * MiB, 7);
    msg m = export_of(x, 64 * MiB, 7);
    m.cmd = M_OPEN_KEEP;
    CHECK(ask(m).ok, "B opened the block and keeps it open");
    CUDA_OK(cudaFree(x));
    CHECK(active_bytes() == base + 64 * MiB, "the free is held while B has the block open");
    void *more[4];
    for (int i = 0; i < 4; i++) {
        more[i] = alloc_filled(64 * MiB, 9);
        CHECK((uintptr_t)more[i] + 64 * MiB <= (uintptr_t)x || (uintptr_t)more[i] >= (uintptr_t)x + 64 * MiB,
              "a new block does not overlap the imported one");
    }
    CHECK(ask((msg){.cmd = M_VERIFY, .size = 64 * MiB, .seed = 7}).ok, "B still reads A's original bytes");
    CHECK(ask((msg){.cmd = M_CLOSE, .seed = 7}).ok, "B closed it");
    CHECK(wait_active(base + 4 * 64 * MiB), "the held free completed once B closed (active %llu)",
          (unsigned long long)active_bytes());
    for (int i = 0; i < 4; i++)
        CUDA_OK(cudaFree(more[i]));
    void *y = alloc_filled(64 * MiB, 10);  // the pool serves on as usual
    CHECK(ptest_verify(y, 64 * MiB, 10), "a block served after the import ended holds its bytes");
    CUDA_OK(cudaFree(y));
}

static void importer_dies(const char *self, pid_t *pid)
{
    uint64_t base = active_bytes();
    void *x = alloc_filled(32 * MiB, 11), *z = alloc_filled(32 * MiB, 12);
    msg m = export_of(x, 32 * MiB, 11);
    m.cmd = M_OPEN_KEEP;
    CHECK(ask(m).ok, "B opened x");
    m = export_of(z, 32 * MiB, 12);
    m.cmd = M_OPEN_KEEP;
    CHECK(ask(m).ok, "B opened z");
    CUDA_OK(cudaFree(x));  // held: B has it open
    put((msg){.cmd = M_DIE});
    int st = 0;
    CHECK(waitpid(*pid, &st, 0) == *pid, "B exited");
    close(chan);
    CHECK(wait_active(base + 32 * MiB), "x's held free completed when B died (active %llu)",
          (unsigned long long)active_bytes());
    CUDA_OK(cudaFree(z));  // imported by a process that is gone: an ordinary free once noticed
    CHECK(wait_active(base), "z freed (active %llu)", (unsigned long long)active_bytes());
    *pid = start_peer(self, 1);
}

// A fork child of the exporter and one of the importer: neither keeps an import alive.
static void fork_children(void)
{
    void *x = alloc_filled(8 * MiB, 13);
    msg m = export_of(x, 8 * MiB, 13);
    pid_t c = fork();
    if (c == 0)
        _exit(0);
    CHECK(waitpid(c, NULL, 0) == c, "A's fork child exited");
    CHECK(ask(m).ok, "B opened A's block after A forked");
    // A imports B's block, forks a child that lives on, closes: B's free must not be held.
    msg r = ask((msg){.cmd = M_EXPORT, .size = 4 * MiB, .seed = 14});
    cudaIpcMemHandle_t h;
    memcpy(&h, r.handle, sizeof h);
    void *p = NULL;
    CUDA_OK(cudaIpcOpenMemHandle(&p, h, 0));
    ptest_fill(p, 2 * MiB, 114);
    c = fork();
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a failed A
        alarm(60);
        pause();
        _exit(0);
    }
    CUDA_OK(cudaIpcCloseMemHandle(p));
    CHECK(ask((msg){.cmd = M_REPLY, .seed = 114}).ok, "B read A's writes and its free completed, with A's "
          "fork child alive");
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    CUDA_OK(cudaFree(x));
}

static void no_preload(void)
{
    void *x = alloc_filled(4 * MiB, 15);
    msg m = export_of(x, 4 * MiB, 15);
    msg r = ask(m);
    CHECK(!r.ok && r.seed != cudaSuccess, "B without the preload got an error (%d), no pointer", (int)r.seed);
    CUDA_OK(cudaFree(x));
}

static void stale(const char *self, pid_t *pid)
{
    void *x = alloc_filled(4 * MiB, 16);
    msg m = export_of(x, 4 * MiB, 16);
    CUDA_OK(cudaFree(x));  // not imported: an ordinary free, and the handle names nothing now
    CHECK(!ask(m).ok, "a handle of a freed block does not open");
    // Damaged: one byte of the export number changed.
    x = alloc_filled(4 * MiB, 17);
    m = export_of(x, 4 * MiB, 17);
    msg bad = m;
    bad.handle[24] ^= 1;
    msg r = ask(bad);
    CHECK(!r.ok && r.seed == ERR_INVALID_HANDLE, "a damaged handle is an invalid one (%d)", (int)r.seed);
    // Our own handle in this process.
    void *p = NULL;
    cudaIpcMemHandle_t h;
    memcpy(&h, m.handle, sizeof h);
    ptest_capture c = ptest_stderr_begin();
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, 0);
    int lines = ptest_stderr_end(&c, "made by this process", NULL, 0);
    CHECK(e != cudaSuccess && !p && lines == 1, "A's own handle is refused with one line (%d, %d)", (int)e, lines);
    CUDA_OK(cudaFree(x));
    // B exports and exits; A opens afterwards.
    r = ask((msg){.cmd = M_EXPORT, .size = 4 * MiB, .seed = 18});
    CHECK(ask((msg){.cmd = M_REPLY, .seed = 0}).ok, "B freed its block");
    memcpy(&h, r.handle, sizeof h);
    stop_peer(*pid);
    c = ptest_stderr_begin();
    e = cudaIpcOpenMemHandle(&p, h, 0);
    lines = ptest_stderr_end(&c, "cannot open the handle", NULL, 0);
    CHECK((int)e == ERR_MAP_FAILED && lines == 1, "a handle of an exited process fails with one line "
          "(%d, %d)", (int)e, lines);
    *pid = start_peer(self, 1);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void few_fds(void)
{
    void *x[4];
    for (int i = 0; i < 4; i++)
        x[i] = alloc_filled(64 * MiB, 20 + (uint64_t)i);  // 32 pages each in compact mode
    // Room for 48 more descriptors: one block's 32 pages in flight, never one kept as well.
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit");
    rl.rlim_cur = (rlim_t)open_fds() + 48;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "descriptor limit lowered to %llu", (unsigned long long)rl.rlim_cur);
    for (int i = 0; i < 4; i++) {
        msg m = export_of(x[i], 64 * MiB, 20 + (uint64_t)i);
        m.cmd = M_OPEN_KEEP;
        CHECK(ask(m).ok, "B opened block %d while the others stay open", i);
    }
    for (int i = 0; i < 4; i++) {
        CHECK(ask((msg){.cmd = M_VERIFY, .size = 64 * MiB, .seed = 20 + (uint64_t)i}).ok, "B reads block %d", i);
        CHECK(ask((msg){.cmd = M_CLOSE, .seed = 20 + (uint64_t)i}).ok, "B closed block %d", i);
    }
    msg m = export_of(x[3], 64 * MiB, 23);  // opened again: exported again, nothing kept
    CHECK(ask(m).ok, "B opened block 3 again");
    for (int i = 0; i < 4; i++)
        CUDA_OK(cudaFree(x[i]));
    CHECK(open_fds() < (int)rl.rlim_cur - 16, "descriptors given back (%d open)", open_fds());
}

static void no_fd(void)
{
    void *x = alloc_filled(4 * MiB, 19);
    cudaIpcMemHandle_t h;
    ptest_capture c = ptest_stderr_begin();
    cudaError_t e = cudaIpcGetMemHandle(&h, x);
    int lines = ptest_stderr_end(&c, "cannot be exported", NULL, 0);
    CHECK(e == cudaErrorInvalidValue && lines == 1, "the export is refused with one line (%d, %d)", (int)e, lines);
    CHECK(ptest_verify(x, 4 * MiB, 19), "the block is untouched");
    CUDA_OK(cudaFree(x));
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "peer")) {
        chan = atoi(argv[2]);
        if (getenv("IPC_TEST_NO_PIDFD"))
            CHECK(refuse_pidfd(), "B: pidfd_getfd refused");
        CUDA_OK(cudaFree(0));
        if (getenv("LD_PRELOAD"))
            api = ptest_get_api();
        peer();
        return 0;
    }
    if (argc < 2) {
        printf("usage: %s scenario\n", argv[0]);
        return 2;
    }
    const char *sc = argv[1];
    alarm(120);  // a hang is a failure, never a stuck suite
    if (!strcmp(sc, "no-pidfd")) {
        setenv("IPC_TEST_NO_PIDFD", "1", 1);
        CHECK(refuse_pidfd(), "A: pidfd_getfd refused");
    }
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaFree(0));
    api = ptest_get_api();
    pid_t pid = start_peer(argv[0], strcmp(sc, "no-preload") != 0);
    if (!strcmp(sc, "both-ways") || !strcmp(sc, "no-pidfd"))
        both_ways();
    else if (!strcmp(sc, "driver"))
        driver_level();
    else if (!strcmp(sc, "free-open"))
        free_open();
    else if (!strcmp(sc, "importer-dies"))
        importer_dies(argv[0], &pid);
    else if (!strcmp(sc, "fork"))
        fork_children();
    else if (!strcmp(sc, "no-preload"))
        no_preload();
    else if (!strcmp(sc, "stale"))
        stale(argv[0], &pid);
    else if (!strcmp(sc, "no-fd"))
        no_fd();
    else if (!strcmp(sc, "few-fds"))
        few_fds();
    else {
        printf("unknown scenario %s\n", sc);
        return 2;
    }
    stop_peer(pid);
    printf("PASS %s\n", sc);
    return 0;
}
