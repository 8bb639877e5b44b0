// SPDX-License-Identifier: MIT
// CUDA IPC between two processes on a real GPU, through the runtime API only (no kernels: fills
// and checks are cudaMemset / cudaMemcpy), as a program that shares device memory would use it:
//
//   ipc_pair SCENARIO...      or      ipc_pair all
//
// (scripts/gpu-ipc.sh says what each scenario checks.) Each runs in a fresh exporter process "A",
// which spawns the peer "B" (this binary, `--peer`, with A's environment: LD_PRELOAD too, but in
// no-preload-importer); they pass the 64-byte handles and their verdicts over a socketpair. A
// prints one JSON line per scenario; the exit status is 0 only if all were ok. Every wait has a
// time limit (poll, and alarm() in every process): a hang fails, it does not stall.
// IPC_ALARM_S (default 60) and IPC_TARGET_US (default 1000) may be set.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define CHUNK (64 * MiB) // host staging: the unit of every fill and check
#define WAIT_MS 50000    // for one message from the peer, under the 60 s alarm
#define MAXH 8
#define OC_N 50 // open+close pairs per size in open-close-time
#if defined(__x86_64__)
#define ARCH_NATIVE AUDIT_ARCH_X86_64
#else
#define ARCH_NATIVE AUDIT_ARCH_AARCH64 // the other architecture of CUDA hosts
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438 // the same number on every architecture
#endif
static const char *g_role = "A";
static char g_why[600];  // the first failure of this process
static char g_exe[4096]; // this binary, for spawning
static unsigned char *g_host, *g_expect;
static size_t g_verified; // bytes compared in this process
static char g_js[8192];   // the scenario's figures, for its JSON line
static size_t g_jl;
static bool fail(const char *fmt, ...)
{
    char b[sizeof g_why - 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ipc_pair %s[%d]: %s\n", g_role, (int)getpid(), b);
    if (!g_why[0])
        snprintf(g_why, sizeof g_why, "%s: %s", g_role, b);
    return false;
}
#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return fail("%s: %s (line %d)", #call, cudaGetErrorName(e_), __LINE__);                 \
    } while (0)
static void J(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_js + g_jl, sizeof g_js - g_jl, fmt, ap);
    va_end(ap);
    if (n > 0)
        g_jl = g_jl + (size_t)n < sizeof g_js ? g_jl + (size_t)n : sizeof g_js - 1;
}
static void Jarr(const char *key, const double *v, int n)
{
    J(", \"%s\": [", key);
    for (int i = 0; i < n; i++)
        J("%s%.1f", i ? ", " : "", v[i]);
    J("]");
}
static void Jstr(const char *key, const char *s)
{
    J(", \"%s\": \"", key);
    for (; *s; s++)
        J(*s == '"' || *s == '\\' ? "\\%c" : (unsigned char)*s < 32 ? "?" : "%c", *s);
    J("\"");
}
static const char *tf(bool b) { return b ? "true" : "false"; }
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}
static bool maps_have(const char *what) // whether a library of that name is mapped here
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    if (f)
        fclose(f);
    return found;
}

// ---- contents ---------------------------------------------------------------------------------
// A pattern that depends on the position: a mapping at the wrong offset, of the wrong pages or of
// another buffer reads differently from the expected bytes, which one fill byte would not show.
static uint64_t word_at(uint64_t seed, uint64_t i) // word i (bytes 8i..8i+7, little-endian)
{
    uint64_t x = (seed ^ (i * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29) ^ (x >> 47);
}
static void gen(uint64_t seed, size_t pos, size_t len, unsigned char *out)
{
    for (size_t i = 0; i < len; i++) {
        uint64_t w = word_at(seed, (pos + i) >> 3);
        if (((pos + i) & 7) == 0 && len - i >= 8) { // whole words where aligned
            memcpy(out + i, &w, 8);
            i += 7;
        } else {
            out[i] = (unsigned char)(w >> (8 * ((pos + i) & 7)));
        }
    }
}
// What a buffer holds: layers written in order, each a fill byte (byte >= 0) or the pattern.
struct layer { size_t off, len; uint64_t seed; int byte; };
struct layout { size_t len; int n; struct layer l[10]; };
#define FILL(sz, b) ((struct layout){.len = (sz), .n = 1, .l = {{0, (sz), 0, (b)}}})
static void add(struct layout *L, size_t off, size_t len, uint64_t seed, int byte)
{
    if (off + len <= L->len && L->n < 10)
        L->l[L->n++] = (struct layer){off, len, seed, byte};
}
// The owner's contents: the pattern (one byte where only the ends are read) and markers copied in
// apart: at the first bytes, across a 2 MiB page boundary, at an odd middle offset, at the end.
static struct layout owner_layout(size_t len, uint64_t seed, bool pattern)
{
    struct layout L = {.len = len};
    add(&L, 0, len, seed, pattern ? -1 : 0x3C);
    add(&L, 0, 64, seed ^ 0x11, -1);
    add(&L, 2 * MiB - 5, 10, seed ^ 0x22, -1);
    add(&L, len / 2 + 3, 13, seed ^ 0x33, -1);
    add(&L, len - 24, 24, seed ^ 0x44, -1);
    return L;
}
// The importer's writes: a fill of odd length at an odd offset, its own pattern on the last 1/16.
static void add_peer_writes(struct layout *L)
{
    add(L, L->len / 4 + 1, L->len / 8 + 5, 0, 0xB7);
    add(L, L->len - L->len / 16, L->len / 16, L->l[0].seed ^ 0xBEEF, -1);
}
static void expect(const struct layout *L, size_t pos, size_t n, unsigned char *out)
{
    for (int k = 0; k < L->n; k++) {
        const struct layer *y = &L->l[k];
        size_t a = pos > y->off ? pos : y->off, b = pos + n < y->off + y->len ? pos + n : y->off + y->len;
        if (a < b && y->byte >= 0)
            memset(out + (a - pos), y->byte, b - a);
        else if (a < b)
            gen(y->seed, a, b - a, out + (a - pos));
    }
}
// Writes layers from..n-1 and waits: nothing orders the peer's reads after this process's work.
static bool apply(void *d, const struct layout *L, int from)
{
    for (int k = from; k < L->n; k++) {
        const struct layer *y = &L->l[k];
        if (y->byte >= 0)
            CK(cudaMemset((char *)d + y->off, y->byte, y->len));
        for (size_t o = y->off; y->byte < 0 && o < y->off + y->len; o += CHUNK) {
            size_t n = y->off + y->len - o < CHUNK ? y->off + y->len - o : CHUNK;
            gen(y->seed, o, n, g_host);
            CK(cudaMemcpy((char *)d + o, g_host, n, cudaMemcpyHostToDevice));
        }
    }
    CK(cudaDeviceSynchronize());
    return true;
}
static bool verify_range(const void *d, const struct layout *L, size_t pos, size_t len, const char *what)
{
    for (size_t o = pos; o < pos + len; o += CHUNK) {
        size_t n = pos + len - o < CHUNK ? pos + len - o : CHUNK, i = 0, bad = 0;
        CK(cudaMemcpy(g_host, (const char *)d + o, n, cudaMemcpyDeviceToHost));
        expect(L, o, n, g_expect);
        if (!memcmp(g_host, g_expect, n)) {
            g_verified += n;
            continue;
        }
        while (g_host[i] == g_expect[i])
            i++;
        for (size_t j = i; j < n; j++)
            bad += g_host[j] != g_expect[j];
        return fail("%s (%zu KiB buffer): byte %zu reads 0x%02x, expected 0x%02x (%zu wrong of the %zu from there)",
                    what, L->len >> 10, o + i, g_host[i], g_expect[i], bad, n - i);
    }
    return true;
}
#define verify(d, L, what) verify_range((d), (L), 0, (L)->len, (what))

// ---- messages ---------------------------------------------------------------------------------
enum { M_HELLO = 1, M_HANDLES, M_VERDICT, M_DONE, M_OPENED, M_FREED, M_CLOSED };
struct msg {
    int32_t kind, ok, n, code;
    uint64_t size[MAXH], seed[MAXH];
    double fig[3 * MAXH];
    unsigned char h[MAXH][CUDA_IPC_HANDLE_SIZE];
    char text[sizeof g_why];
};
static bool send_msg(int fd, struct msg *m)
{
    if (!m->ok && !m->text[0])
        snprintf(m->text, sizeof m->text, "%s", g_why);
    if (send(fd, m, sizeof *m, MSG_NOSIGNAL) != (ssize_t)sizeof *m)
        return fail("sending message %d: %s", m->kind, strerror(errno));
    return true;
}
static bool recv_msg(int fd, struct msg *m, int kind)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, WAIT_MS);
    if (r == 0)
        return fail("no message %d from the peer within %d s", kind, WAIT_MS / 1000);
    ssize_t n = r > 0 ? recv(fd, m, sizeof *m, 0) : -1;
    if (n == 0)
        return fail("the peer closed the socket while message %d was awaited (it exited?)", kind);
    if (n != (ssize_t)sizeof *m)
        return fail("message %d: got %zd bytes (%s)", kind, n, n < 0 ? strerror(errno) : "short");
    if (m->kind != kind)
        return fail("expected message %d, got %d (%s)", kind, m->kind, m->ok ? "" : m->text);
    return true;
}
// A message that must also report success: the peer's failure becomes this process's.
static bool recv_ok(int fd, struct msg *m, int kind)
{
    return recv_msg(fd, m, kind) && (m->ok || fail("the peer: %s", m->text));
}

// ---- no-ptrace: CAP_SYS_PTRACE dropped, pidfd_getfd and ptrace failing with EPERM -------------
static struct { bool seccomp, tsync, bset_dropped, cap_left; int getfd_errno, ptrace_errno; } g_hard;
// Before any CUDA call. The preload's constructor may have started threads already, so the filter
// goes on all of them (SECCOMP_FILTER_FLAG_TSYNC; plain prctl where that is refused). EPERM from
// the capability calls is expected when not root: the capability is absent then (cap_left).
static void harden(void)
{
    g_hard.bset_dropped = prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) == 0;
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_SYS_PTRACE, 0, 0);
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct cap[2];
    const uint32_t bit = 1u << CAP_SYS_PTRACE; // 19: in the first word
    if (syscall(SYS_capget, &hdr, cap) == 0) {
        cap[0].effective &= ~bit;
        cap[0].permitted &= ~bit;
        cap[0].inheritable &= ~bit;
        syscall(SYS_capset, &hdr, cap); // EPERM ignored
        if (syscall(SYS_capget, &hdr, cap) == 0)
            g_hard.cap_left = ((cap[0].effective | cap[0].permitted) & bit) != 0;
    }
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH_NATIVE, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ptrace, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0) {
        g_hard.tsync = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0;
        g_hard.seccomp = g_hard.tsync || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0;
    }
    // Probes: without the filter these fail with EBADF and ESRCH or EIO, not EPERM.
    g_hard.getfd_errno = syscall(SYS_pidfd_getfd, -1, 0, 0) < 0 ? errno : 0;
    g_hard.ptrace_errno = syscall(SYS_ptrace, 0x7fffffffL, 0L, 0L, 0L) < 0 ? errno : 0;
}

// ---- peers --------------------------------------------------------------------------------------
// hello.fig: seccomp, tsync, getfd errno, ptrace errno, cap left, preload loaded (b_run)
struct peer { pid_t pid; int fd; struct msg hello; };
// Spawns the peer on a socketpair, waits for its hello. posix_spawn: no fork handlers, no CUDA state.
static bool peer_start(struct peer *p, const char *sc, const char *role, bool no_preload)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
        return fail("socketpair: %s", strerror(errno));
    fcntl(sv[0], F_SETFD, FD_CLOEXEC);
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
    char *argv[] = {"ipc_pair", "--peer", (char *)sc, (char *)role, fdarg, NULL};
    if (no_preload) // for B's environment: A's own loading is done, and A has made no CUDA call yet
        unsetenv("LD_PRELOAD");
    int rc = posix_spawn(&p->pid, g_exe, NULL, NULL, argv, environ);
    close(sv[1]);
    p->fd = sv[0];
    if (rc)
        p->pid = -1;
    return rc ? fail("posix_spawn %s: %s", g_exe, strerror(rc)) : recv_msg(p->fd, &p->hello, M_HELLO);
}
static const char *status_text(int st)
{
    static char b[64];
    snprintf(b, sizeof b, "%s %d", st == -1 ? "killed after 20 s, signal" : WIFEXITED(st) ? "exit" : "signal",
             st == -1 ? SIGKILL : WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    return b;
}
static int wait_pid(pid_t pid) // the wait status; -1 when it had to be killed after 20 s
{
    int st = 0;
    for (int t = 0; t < 2000; t++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || r < 0)
            return r < 0 ? 0 : st;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}
static bool exited(int st, int code) { return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == code; }
// The peer must exit 0: a crash or a hang at its exit (the preload's teardown) fails too.
static bool peer_finish(struct peer *p)
{
    close(p->fd);
    int st = wait_pid(p->pid);
    p->pid = -1;
    Jstr("peer_exit", status_text(st));
    return exited(st, 0) || fail("the peer ended with %s", status_text(st));
}

// ---- the two halves of a sharing ----------------------------------------------------------------
// Allocates sz bytes and fills them (owner_layout); with m, exports them and adds the handle (the
// time of cudaIpcGetMemHandle in fig).
static bool own(struct msg *m, size_t sz, uint64_t seed, bool pattern, void **p, struct layout *L)
{
    *L = owner_layout(sz, seed, pattern);
    CK(cudaMalloc(p, sz));
    if (!apply(*p, L, 0))
        return false;
    if (!m)
        return true;
    double t0 = now_us();
    CK(cudaIpcGetMemHandle((cudaIpcMemHandle_t *)(void *)m->h[m->n], *p));
    m->fig[m->n] = now_us() - t0;
    m->size[m->n] = sz;
    m->seed[m->n++] = seed;
    return true;
}
static bool open_h(const struct msg *m, int i, void **d, double *us) // the open's time in *us
{
    cudaIpcMemHandle_t h;
    memcpy(&h, m->h[i], sizeof h);
    *d = NULL;
    double t0 = now_us();
    cudaError_t e = cudaIpcOpenMemHandle(d, h, cudaIpcMemLazyEnablePeerAccess);
    *us = now_us() - t0;
    return e == cudaSuccess || fail("cudaIpcOpenMemHandle of the %llu-byte buffer: %s",
                                    (unsigned long long)m->size[i], cudaGetErrorName(e));
}
static bool close_h(void *d, bool ok) // ok: whether to report a failure (the first one counts)
{
    cudaError_t e = cudaIpcCloseMemHandle(d);
    return ok && (e == cudaSuccess || fail("cudaIpcCloseMemHandle: %s", cudaGetErrorName(e)));
}
// Buffers cudaMalloc'd after the big one, three of them shared: with the preload none of those is
// the first block of its segment (and the 512 KiB one lives among small blocks).
static const size_t k_mid[] = {3 * MiB, 5 * MiB, 64 * MiB, 512 * 1024, 512 * 1024, 3 * MiB};
static const bool k_mid_shared[] = {false, true, true, false, true, false};
#define NBUF 7
// The owner: allocates, fills, exports, waits for the importer's verdict (open times in fig), then
// checks that the shared buffers show the importer's writes and the others are untouched.
static bool export_half(int fd, size_t big, uint64_t seed, struct msg *v)
{
    void *p[NBUF];
    struct layout L[NBUF];
    struct msg m = {.kind = M_HANDLES};
    m.ok = own(&m, big, seed, true, &p[0], &L[0]);
    for (int i = 1; i < NBUF && m.ok; i++)
        m.ok = own(k_mid_shared[i - 1] ? &m : NULL, k_mid[i - 1], seed + (uint64_t)i, true, &p[i], &L[i]);
    if (!send_msg(fd, &m) || !m.ok || !recv_ok(fd, v, M_VERDICT))
        return false;
    for (int i = 0; i < NBUF; i++) {
        bool sh = i == 0 || k_mid_shared[i - 1];
        if (sh)
            add_peer_writes(&L[i]);
        if (!verify(p[i], &L[i], sh ? "the importer's writes, seen by the owner" : "an unshared neighbour"))
            return false;
        CK(cudaFree(p[i]));
    }
    return true;
}
// The importer: opens each handle, checks all its bytes, writes over part of it, closes, answers.
static bool import_half(int fd)
{
    struct msg m, v = {.kind = M_VERDICT, .ok = 1};
    if (!recv_ok(fd, &m, M_HANDLES))
        return false;
    for (int i = 0; i < m.n && v.ok; i++) {
        void *d;
        if (!(v.ok = open_h(&m, i, &d, &v.fig[v.n++])))
            break;
        struct layout L = owner_layout(m.size[i], m.seed[i], true), O = L;
        add_peer_writes(&L);
        v.ok = close_h(d, verify(d, &O, "the owner's contents, seen by the importer") && apply(d, &L, O.n));
    }
    return send_msg(fd, &v) && v.ok;
}

// ---- scenarios, A's side ----------------------------------------------------------------------------
// k buffers at once (the last of `last` bytes), filled, checked, freed: allocation works as usual.
static bool churn(int k, size_t sz, size_t last, uint64_t seed, const char *what)
{
    void *q[16];
    struct layout L;
    size_t fr, tot;
    for (int i = 0; i < k; i++)
        if (!own(NULL, i < k - 1 ? sz : last, seed + (uint64_t)i, true, &q[i], &L) || !verify(q[i], &L, what))
            return false;
    for (int i = 0; i < k; i++)
        CK(cudaFree(q[i]));
    CK(cudaMemGetInfo(&fr, &tot));
    J(", \"free_mib\": %zu, \"total_mib\": %zu", fr >> 20, tot >> 20);
    return (fr > 0 && fr <= tot) || fail("cudaMemGetInfo: free %zu of %zu", fr, tot);
}
// One way, then the other: A owns and B imports, then B owns (its own 1 GiB and neighbours) and A
// imports; B's last message says whether A's writes reached B's memory, and A's open times.
static bool a_both_ways(struct peer *b)
{
    struct msg v = {0}, d;
    bool ok = export_half(b->fd, GiB, 0xA1000, &v);
    if (v.kind == M_VERDICT)
        Jarr("b_open_us", v.fig, v.n);
    if (!ok || !import_half(b->fd) || !recv_msg(b->fd, &d, M_DONE))
        return false;
    Jarr("a_open_us", d.fig, d.n);
    return d.ok || fail("B's check of A's writes: %s", d.text);
}
static bool a_open_close(struct peer *b)
{
    static const size_t sz[3] = {2 * MiB, 64 * MiB, GiB};
    void *p[3];
    struct layout L;
    struct msg m = {.kind = M_HANDLES, .ok = 1}, v;
    for (int i = 0; i < 3; i++)
        if (!own(&m, sz[i], 0xC100 + (uint64_t)i, false, &p[i], &L))
            return false;
    Jarr("get_handle_us", m.fig, 3);
    if (!send_msg(b->fd, &m) || !recv_ok(b->fd, &v, M_VERDICT))
        return false;
    double target = getenv("IPC_TARGET_US") ? atof(getenv("IPC_TARGET_US")) : 1000.0, *p90 = v.fig + 3;
    static const char *key[4] = {"median_us", "p90_us", "first_us", "max_us"};
    J(", \"sizes_mib\": [2, 64, 1024], \"n\": %d", OC_N);
    for (int j = 0; j < 4; j++)
        Jarr(key[j], v.fig + 3 * j, 3);
    J(", \"target_us\": %.0f, \"target_met\": %s", target,
      tf(p90[0] <= target && p90[1] <= target && p90[2] <= target));
    for (int i = 0; i < 3; i++)
        CK(cudaFree(p[i]));
    return true;
}
// A frees a buffer B has open and fills new ones of its size: B must still read the original bytes,
// and B's writes must not reach A's new buffers (the imported pages must not serve A meanwhile).
static bool a_free_while_open(struct peer *b)
{
    enum { K = 8 };
    const size_t sz = 64 * MiB;
    struct layout L, F = FILL(sz, 0x5A);
    void *x, *nb[K];
    struct msg m = {.kind = M_HANDLES, .ok = 1}, r, go = {.kind = M_FREED, .ok = 1};
    if (!own(&m, sz, 0xF100, true, &x, &L) || !send_msg(b->fd, &m) || !recv_ok(b->fd, &r, M_OPENED))
        return false;
    CK(cudaFree(x));
    int at_old = 0;
    for (int k = 0; k < K; k++) {
        CK(cudaMalloc(&nb[k], sz));
        at_old += nb[k] == x;
        if (!apply(nb[k], &F, 0))
            return false;
    }
    J(", \"new_at_freed_address\": %d", at_old);
    if (!send_msg(b->fd, &go) || !recv_ok(b->fd, &r, M_CLOSED))
        return false;
    for (int k = 0; k < K; k++) {
        if (!verify(nb[k], &F, "A's new buffer after B wrote to and closed the freed one"))
            return false;
        CK(cudaFree(nb[k]));
    }
    return churn(K, sz, sz, 0xF200, "a buffer allocated after the close");
}
// Two importers end without closing: one _exit()s, one is killed. Then A frees, allocates, and a
// third importer opens a new buffer: nothing may hang or fail.
static bool a_importer_dies(struct peer *unused)
{
    (void)unused;
    const size_t sz = 64 * MiB;
    struct layout L;
    void *x;
    struct msg m = {.kind = M_HANDLES, .ok = 1}, r, v = {0};
    struct peer p;
    if (!own(&m, sz, 0xD100, true, &x, &L))
        return false;
    static const char *roles[2] = {"exit", "kill"};
    for (int i = 0; i < 2; i++) {
        if (!peer_start(&p, "importer-dies", roles[i], false) || !send_msg(p.fd, &m) || !recv_ok(p.fd, &r, M_OPENED))
            return false;
        if (i == 1)
            kill(p.pid, SIGKILL);
        int st = wait_pid(p.pid);
        close(p.fd);
        J(", \"%s_importer\": \"%s\"", roles[i], status_text(st));
        if (!(i == 0 ? exited(st, 7) : st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
            return fail("importer '%s' ended with %s", roles[i], status_text(st));
    }
    if (!verify(x, &L, "the owner's buffer after its importers died"))
        return false;
    double t0 = now_us();
    CK(cudaFree(x));
    J(", \"free_us\": %.1f", now_us() - t0);
    t0 = now_us();
    if (!churn(5, sz, GiB, 0xD200, "a buffer allocated after the importers died"))
        return false;
    J(", \"realloc_ms\": %.1f", (now_us() - t0) / 1e3);
    return peer_start(&p, "importer-dies", "normal", false) && export_half(p.fd, 64 * MiB, 0xD300, &v) &&
           peer_finish(&p);
}
static bool a_no_preload(struct peer *b)
{
    struct layout L;
    void *x;
    struct msg m = {.kind = M_HANDLES, .ok = 1}, v;
    J(", \"b_preload\": %s", tf(b->hello.fig[5] != 0));
    if (b->hello.fig[5] != 0)
        return fail("the peer has the preload loaded although LD_PRELOAD was removed");
    if (!own(&m, 64 * MiB, 0xE100, true, &x, &L) || !send_msg(b->fd, &m) || !recv_msg(b->fd, &v, M_VERDICT))
        return false;
    Jstr("open_error", cudaGetErrorName((cudaError_t)v.code));
    J(", \"b_alloc_after_ok\": %s", tf(v.fig[1] != 0));
    if (!verify(x, &L, "the owner's buffer after the refused open"))
        return false;
    CK(cudaFree(x));
    return v.ok || fail("B: %s", v.text);
}
// A forks a child that never calls CUDA and leaves through exit(), so that the atexit handlers and
// destructors it inherited run there: A's export must survive, and exporting must still work.
static bool a_fork_child(struct peer *b)
{
    void *x[2];
    struct layout L[2];
    struct msg m = {.kind = M_HANDLES, .ok = 1}, v;
    if (!own(&m, 64 * MiB, 0x9100, true, &x[0], &L[0]))
        return false;
    fflush(NULL);
    pid_t c = fork();
    if (c < 0)
        return fail("fork: %s", strerror(errno));
    if (c == 0) {
        alarm(20);
        exit(0);
    }
    int st = wait_pid(c);
    Jstr("child_exit", status_text(st));
    if (!exited(st, 0))
        return fail("the forked child ended with %s", status_text(st));
    if (!own(&m, 64 * MiB, 0x9101, true, &x[1], &L[1]) || !send_msg(b->fd, &m) || !recv_ok(b->fd, &v, M_VERDICT))
        return false;
    for (int i = 0; i < 2; i++) {
        add_peer_writes(&L[i]);
        if (!verify(x[i], &L[i], i ? "the buffer exported after the fork" : "the buffer exported before the fork"))
            return false;
        CK(cudaFree(x[i]));
    }
    return true;
}

// ---- scenarios, B's side ----------------------------------------------------------------------------
static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
// OC_N opens and closes of each handle, timed; the first and the last mapping are read at both
// ends (not timed). fig: medians, p90s (nearest rank), first times, maxima, 3 sizes each.
static bool b_open_close(int fd, const struct msg *m)
{
    struct msg v = {.kind = M_VERDICT, .ok = 1};
    for (int i = 0; i < m->n && v.ok; i++) {
        double t[OC_N];
        struct layout L = owner_layout(m->size[i], m->seed[i], false);
        for (int k = 0; k < OC_N && v.ok; k++) {
            void *d;
            if (!(v.ok = open_h(m, i, &d, &t[k])))
                break;
            if (k == 0 || k == OC_N - 1)
                v.ok = verify_range(d, &L, 0, 4096, "first bytes") &&
                       verify_range(d, &L, L.len - 2 * MiB, 2 * MiB, "last bytes");
            double t0 = now_us();
            v.ok = close_h(d, v.ok);
            t[k] += now_us() - t0;
        }
        if (!v.ok)
            break;
        v.fig[6 + i] = t[0];
        qsort(t, OC_N, sizeof t[0], cmp_d);
        v.fig[i] = (t[OC_N / 2 - 1] + t[OC_N / 2]) / 2;
        v.fig[3 + i] = t[(OC_N * 9 + 9) / 10 - 1];
        v.fig[9 + i] = t[OC_N - 1];
    }
    return send_msg(fd, &v) && v.ok;
}
// Without the preload: refused, no pointer. An allocation after it is reported, not judged (CUDA's).
static bool b_no_preload(int fd, const struct msg *m)
{
    struct msg v = {.kind = M_VERDICT, .ok = 1};
    void *d = NULL, *y = NULL;
    cudaIpcMemHandle_t h;
    memcpy(&h, m->h[0], sizeof h);
    cudaError_t e = cudaIpcOpenMemHandle(&d, h, cudaIpcMemLazyEnablePeerAccess);
    v.code = (int)e;
    if (e == cudaSuccess)
        v.ok = close_h(d, fail("cudaIpcOpenMemHandle succeeded without the preload (pointer %p)", d));
    else if (d)
        v.ok = fail("cudaIpcOpenMemHandle failed (%s) but wrote a pointer %p", cudaGetErrorName(e), d);
    cudaGetLastError();
    v.fig[1] = cudaMalloc(&y, MiB) == cudaSuccess && cudaFree(y) == cudaSuccess;
    return send_msg(fd, &v) && v.ok;
}
// Opens and checks, says so; dies as the role says, or checks again after A's free, writes, closes.
static bool b_hold(int fd, struct msg *m, const char *role)
{
    struct layout L = owner_layout(m->size[0], m->seed[0], true), W = FILL(m->size[0], 0xC3);
    struct msg v = {.kind = M_OPENED};
    void *d;
    v.ok = open_h(m, 0, &d, &v.fig[0]) && verify(d, &L, "the owner's contents, seen by the importer");
    if (!send_msg(fd, &v) || !v.ok)
        return false;
    if (!strcmp(role, "exit"))
        _exit(7); // without closing, without any exit-time cleanup
    while (!strcmp(role, "kill"))
        pause(); // until A's SIGKILL (or the alarm)
    v.kind = M_CLOSED;
    if (!recv_msg(fd, m, M_FREED))
        return false;
    v.ok = close_h(d, verify(d, &L, "the original contents after the owner's free") && apply(d, &W, 0) &&
                          verify(d, &W, "the importer's own write after the owner's free"));
    return send_msg(fd, &v) && v.ok;
}
static bool b_run(const char *sc, const char *role, int fd)
{
    struct msg m, h = {.kind = M_HELLO, .ok = 1, .fig = {g_hard.seccomp, g_hard.tsync, g_hard.getfd_errno,
                       g_hard.ptrace_errno, g_hard.cap_left, maps_have("libccinterpose")}};
    if (!send_msg(fd, &h))
        return false;
    if (!strcmp(sc, "both-ways") || !strcmp(sc, "no-ptrace")) {
        struct msg pv = {0}, d = {.kind = M_DONE};
        if (!import_half(fd))
            return false;
        d.ok = export_half(fd, GiB, 0xB1000, &pv);
        d.n = pv.kind == M_VERDICT ? pv.n : 0;
        memcpy(d.fig, pv.fig, sizeof d.fig);
        return send_msg(fd, &d) && d.ok;
    }
    if (!strcmp(sc, "fork-child") || !strcmp(role, "normal"))
        return import_half(fd);
    if (!recv_ok(fd, &m, M_HANDLES))
        return false;
    if (!strcmp(sc, "open-close-time"))
        return b_open_close(fd, &m);
    return !strcmp(sc, "no-preload-importer") ? b_no_preload(fd, &m) : b_hold(fd, &m, role);
}
static int peer_main(const char *sc, const char *role, int fd)
{
    g_role = "B";
    if (!strcmp(sc, "no-ptrace"))
        harden();
    struct msg no = {.kind = M_VERDICT};
    if (b_run(sc, role, fd))
        return 0;
    send_msg(fd, &no); // tells A why, should it still be waiting
    return 1;
}

// ---- A and the driver -------------------------------------------------------------------------------
static const struct { const char *name; bool (*run)(struct peer *); } k_sc[] = {
    {"both-ways", a_both_ways}, {"open-close-time", a_open_close}, {"free-while-open", a_free_while_open},
    {"importer-dies", a_importer_dies}, {"no-ptrace", a_both_ways}, {"no-preload-importer", a_no_preload},
    {"fork-child", a_fork_child}};
#define NSC (int)(sizeof k_sc / sizeof k_sc[0])
static int sc_index(const char *name)
{
    for (int s = 0; s < NSC; s++)
        if (!strcmp(name, k_sc[s].name))
            return s;
    return -1;
}
static int exporter_main(int s)
{
    double t0 = now_us();
    bool np = !strcmp(k_sc[s].name, "no-ptrace"), ok;
    if (np)
        harden();
    struct peer b = {.pid = -1, .fd = -1};
    if (k_sc[s].run == a_importer_dies) // it starts its own peers
        ok = a_importer_dies(NULL);
    else
        ok = peer_start(&b, k_sc[s].name, "main", !strcmp(k_sc[s].name, "no-preload-importer")) && k_sc[s].run(&b) &&
             peer_finish(&b);
    if (b.pid > 0) { // failed on the way: the peer may be waiting for a message that will not come
        kill(b.pid, SIGKILL);
        waitpid(b.pid, NULL, 0);
    }
    if (np) {
        const double *f = b.hello.fig;
        J(", \"seccomp\": {\"a\": %s, \"b\": %s, \"tsync\": %s}, \"pidfd_getfd_errno\": [%d, %d], \"ptrace_errno\": "
          "[%d, %d], \"cap_sys_ptrace_left\": [%s, %s], \"bounding_dropped\": %s", tf(g_hard.seccomp), tf(f[0] != 0),
          tf(g_hard.tsync && f[1] != 0), g_hard.getfd_errno, (int)f[2], g_hard.ptrace_errno, (int)f[3],
          tf(g_hard.cap_left), tf(f[4] != 0), tf(g_hard.bset_dropped));
        if (ok && !(g_hard.seccomp && g_hard.getfd_errno == EPERM && g_hard.ptrace_errno == EPERM && f[0] != 0 &&
                    f[2] == EPERM && f[3] == EPERM))
            ok = fail("the seccomp filter is not in place in both processes (see seccomp, *_errno)");
    }
    Jstr("why", ok ? "" : g_why);
    J(", \"libcudart_so_mapped\": %s", tf(maps_have("libcudart.so"))); // false: the static build
    J(", \"preload\": %s", tf(maps_have("libccinterpose")));
    Jstr("alloc_conf", getenv("CCI_ALLOC_CONF") ? getenv("CCI_ALLOC_CONF") : "(unset)");
    J(", \"seconds\": %.2f, \"verified_mib\": %zu", (now_us() - t0) / 1e6, g_verified >> 20);
    printf("{\"scenario\": \"%s\", \"ok\": %s%s}\n", k_sc[s].name, tf(ok), g_js);
    fflush(stdout);
    return ok ? 0 : 1;
}
static void on_alarm(int sig)
{
    (void)sig, (void)!write(2, "ipc_pair: timed out (alarm)\n", 28);
    _exit(124);
}
// Each scenario in a fresh exporter process: no-ptrace changes its process for good, and a crash
// or a hang must cost one scenario, not the rest. The driver itself never calls CUDA.
static bool drive(int s, unsigned alarm_s)
{
    char *av[] = {"ipc_pair", "--exporter", (char *)k_sc[s].name, NULL};
    pid_t pid;
    int st = -1, rc = posix_spawn(&pid, g_exe, NULL, NULL, av, environ);
    if (rc == 0) {
        alarm(alarm_s + 30);
        waitpid(pid, &st, 0);
        alarm(0);
    }
    if (rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) <= 1) // it printed its own line
        return WEXITSTATUS(st) == 0;
    printf("{\"scenario\": \"%s\", \"ok\": false, \"why\": \"the exporter process: %s%s\"}\n", k_sc[s].name,
           rc ? strerror(rc) : status_text(st), rc == 0 && exited(st, 124) ? " (its alarm: a time-out)" : "");
    fflush(stdout);
    return false;
}
int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
    const char *a = getenv("IPC_ALARM_S");
    unsigned alarm_s = a && atoi(a) > 0 ? (unsigned)atoi(a) : 60;
    if (n <= 0 || !(g_host = malloc(CHUNK)) || !(g_expect = malloc(CHUNK)))
        return fprintf(stderr, "ipc_pair: no /proc/self/exe or no memory for the staging buffers\n"), 2;
    g_exe[n] = 0;
    signal(SIGALRM, on_alarm);
    alarm(alarm_s); // the driver sets its own for each scenario
    if (argc == 5 && !strcmp(argv[1], "--peer") && sc_index(argv[2]) >= 0)
        return peer_main(argv[2], argv[3], atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "--exporter") && sc_index(argv[2]) >= 0)
        return exporter_main(sc_index(argv[2]));
    bool usage = argc < 2;
    for (int i = 1; i < argc; i++)
        usage |= strcmp(argv[i], "all") && sc_index(argv[i]) < 0;
    if (usage)
        return fprintf(stderr, "usage: ipc_pair SCENARIO... | all (scenarios: both-ways open-close-time "
                               "free-while-open importer-dies no-ptrace no-preload-importer fork-child)\n"), 2;
    int failed = 0;
    for (int i = 1; i < argc; i++)
        for (int s = 0; s < NSC; s++)
            if (!strcmp(argv[i], "all") || s == sc_index(argv[i]))
                failed += !drive(s, alarm_s);
    return failed ? 1 : 0;
}
