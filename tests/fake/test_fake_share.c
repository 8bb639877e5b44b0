// SPDX-License-Identifier: MIT
/*
 * Checks what the fake driver offers for sharing memory between processes:
 * cuMemImportFromShareableHandle of an exported VMM fd (fake_vmm_share.c),
 * in this process and in two children that get the fd over a socket, and the
 * legacy cuIpcOpenMemHandle / cudaIpcOpenMemHandle, which never open here
 * (fake_memory.c). Expects FAKECUDA_CAPACITY=16M and FAKECUDA_DEVICES=2 (set
 * by meson).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cuda_driver.h"
#include "fake_cuda_runtime.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define CAPACITY (16 * MiB)
#define PAGE (2 * MiB)
#define POSIX_FD CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

#include "fake_check.h"

static CUcontext g_ctx[2];

static struct fakecu_vmm_stats stats(void)
{
    struct fakecu_vmm_stats s;
    fakecu_vmm_get_stats(&s);
    return s;
}

static bool all_bytes(const void *p, int byte, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)byte)
            return false;
    return true;
}

static void *fd_arg(int fd)
{
    return (void *)(uintptr_t)fd;
}

static CUmemGenericAllocationHandle create_shareable(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.requestedHandleTypes = POSIX_FD;
    CUmemGenericAllocationHandle h = 0;
    CHECK_EQ(cuMemCreate(&h, PAGE, &p, 0), CUDA_SUCCESS);
    return h;
}

static int export_fd(CUmemGenericAllocationHandle h)
{
    int fd = -1;
    CHECK_EQ(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0), CUDA_SUCCESS);
    CHECK(fd >= 0);
    return fd;
}

static CUdeviceptr reserve(void)
{
    CUdeviceptr va = 0;
    CHECK_EQ(cuMemAddressReserve(&va, PAGE, 0, 0, 0), CUDA_SUCCESS);
    return va;
}

static void map_rw(CUdeviceptr at, CUmemGenericAllocationHandle h, int dev)
{
    CHECK_EQ(cuMemMap(at, PAGE, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc d = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK_EQ(cuMemSetAccess(at, PAGE, &d, 1), CUDA_SUCCESS);
}

static int handle_device(CUmemGenericAllocationHandle h)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&p, h), CUDA_SUCCESS);
    CHECK_EQ(p.requestedHandleTypes, POSIX_FD);
    return p.location.id;
}

/* ------------------------------------------------------------------ */
/* An fd and n bytes over a socket, as two processes would share a handle */

static bool send_fd(int sock, int fd, const void *data, size_t n)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &msg, 0) == (ssize_t)n;
}

/* The received fd, or -1. */
static int recv_fd(int sock, void *data, size_t n)
{
    struct iovec iov = {.iov_base = data, .iov_len = n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != (ssize_t)n)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* ------------------------------------------------------------------ */
/* Across processes                                                    */

struct child {
    pid_t pid;
    int sock;
};

/* The parent's ends of the earlier children's sockets, which a later child
 * closes so that a child whose parent gave up sees the end of its socket. */
static int g_parent_socks[4], g_nparent_socks;

/* The child's side: its own fake driver, the parent's fd and legacy handle
 * from the socket. The import must land on expect_dev, show the parent's
 * 0xA5 in the first half, and take the child's byte at [off, off + PAGE/4). */
static int child_main(int sock, int expect_dev, size_t off, int byte)
{
    CUcontext c = NULL;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
    CUipcMemHandle legacy;
    int fd = recv_fd(sock, &legacy, sizeof legacy);
    CHECK(fd >= 0);
    if (fd < 0)
        return 1;

    /* Legacy memory never crosses: a clean refusal, nothing mapped. */
    CUdeviceptr d = 7;
    CHECK_EQ(cuIpcOpenMemHandle_v2(&d, legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_EQ(cuIpcOpenMemHandle(&d, legacy, 0), CUDA_ERROR_NOT_SUPPORTED);
    cudaIpcMemHandle_t rh;
    memcpy(&rh, &legacy, sizeof rh);
    void *rp = &d;
    CHECK_EQ(cudaIpcOpenMemHandle(&rp, rh, cudaIpcMemLazyEnablePeerAccess), cudaErrorNotSupported);
    CHECK(d == 7 && rp == &d);
    CHECK_EQ(fakecu_used_bytes(0), 0);
    CHECK_EQ(fakecu_live_allocs(0), 0);

    CUmemGenericAllocationHandle h = 0;
    CHECK_EQ(cuMemImportFromShareableHandle(&h, fd_arg(fd), POSIX_FD), CUDA_SUCCESS);
    close(fd);
    CHECK_EQ(handle_device(h), expect_dev);
    CHECK_EQ(fakecu_used_bytes(expect_dev), PAGE);
    CHECK_EQ(stats().imports, 1);
    CUdeviceptr va = reserve();
    map_rw(va, h, expect_dev);
    char *p = (char *)(uintptr_t)va;
    CHECK(all_bytes(p, 0xA5, PAGE / 2));
    CHECK_EQ(fakecu_device_write(expect_dev, p + off, NULL, byte, PAGE / 4), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, PAGE), CUDA_SUCCESS);
    struct fakecu_vmm_stats s = stats();
    CHECK_EQ(s.handles, 0);
    CHECK_EQ(s.physical_bytes, 0);
    CHECK_EQ(fakecu_used_bytes(expect_dev), 0);
    return g_failures ? 1 : 0;
}

/* Forked before the parent's first CUDA call, with ndev devices of its own:
 * the child shares nothing with the parent but what the socket carries. */
static struct child spawn(const char *ndev, int expect_dev, size_t off, int byte)
{
    int sv[2];
    struct child k = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
        CHECK(!"socketpair");
        return k;
    }
    fflush(NULL);
    k.pid = fork();
    if (k.pid == 0) {
        close(sv[0]);
        for (int i = 0; i < g_nparent_socks; i++)
            close(g_parent_socks[i]);
        setenv("FAKECUDA_DEVICES", ndev, 1);
        _exit(child_main(sv[1], expect_dev, off, byte)); /* no destructors: the parent's state is not ours */
    }
    close(sv[1]);
    k.sock = sv[0];
    if (g_nparent_socks < 4)
        g_parent_socks[g_nparent_socks++] = k.sock;
    CHECK(k.pid > 0);
    return k;
}

/* The parent's export, imported by a child with the same devices (the
 * device comes back from the fd) and by one with a single device (the
 * exporter's device 1 does not exist there: the current context's). */
static void test_cross_process(struct child *kids, size_t nkids)
{
    CUmemGenericAllocationHandle h = create_shareable(1);
    CUdeviceptr va = reserve();
    map_rw(va, h, 1);
    char *p = (char *)(uintptr_t)va;
    memset(p, 0xA5, PAGE);
    CUdeviceptr legacy_mem = 0;
    CUipcMemHandle legacy;
    CHECK_EQ(cuMemAlloc_v2(&legacy_mem, 4096), CUDA_SUCCESS);
    CHECK_EQ(cuIpcGetMemHandle(&legacy, legacy_mem), CUDA_SUCCESS);
    int fd = export_fd(h);
    for (size_t i = 0; i < nkids; i++) {
        CHECK(kids[i].sock >= 0 && send_fd(kids[i].sock, fd, &legacy, sizeof legacy));
        close(kids[i].sock);
        int st = 0;
        CHECK(kids[i].pid > 0 && waitpid(kids[i].pid, &st, 0) == kids[i].pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    close(fd);
    CHECK(all_bytes(p, 0xA5, PAGE / 2));
    CHECK(all_bytes(p + PAGE / 2, 0x5A, PAGE / 4));
    CHECK(all_bytes(p + 3 * PAGE / 4, 0x5B, PAGE / 4));
    CHECK_EQ(cuMemUnmap(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, PAGE), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(legacy_mem), CUDA_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* In one process                                                      */

/* An export imported here aliases the original; the four ends (release of
 * either handle, unmap of either mapping) in every order free everything. */
static void test_import_in_process(void)
{
    struct fakecu_vmm_stats s0 = stats();
    size_t used0 = fakecu_used_bytes(1), phys0 = fakecu_vmm_physical_bytes(1);
    static const int perms[24][4] = {
        {0, 1, 2, 3}, {0, 1, 3, 2}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 3, 1, 2}, {0, 3, 2, 1},
        {1, 0, 2, 3}, {1, 0, 3, 2}, {1, 2, 0, 3}, {1, 2, 3, 0}, {1, 3, 0, 2}, {1, 3, 2, 0},
        {2, 0, 1, 3}, {2, 0, 3, 1}, {2, 1, 0, 3}, {2, 1, 3, 0}, {2, 3, 0, 1}, {2, 3, 1, 0},
        {3, 0, 1, 2}, {3, 0, 2, 1}, {3, 1, 0, 2}, {3, 1, 2, 0}, {3, 2, 0, 1}, {3, 2, 1, 0}};
    for (int k = 0; k < 24; k++) {
        CUmemGenericAllocationHandle h[2] = {create_shareable(1), 0};
        int fd = export_fd(h[0]);
        CHECK_EQ(cuMemImportFromShareableHandle(&h[1], fd_arg(fd), POSIX_FD), CUDA_SUCCESS);
        close(fd); /* the import keeps its own descriptor */
        CHECK(h[1] != 0 && h[1] != h[0]);
        CHECK_EQ(handle_device(h[1]), 1);
        struct fakecu_vmm_stats s = stats();
        CHECK_EQ(s.handles - s0.handles, 2);
        CHECK_EQ(s.physical_bytes - s0.physical_bytes, 2 * PAGE);
        CHECK_EQ(s.imports - s0.imports, k + 1);
        CHECK_EQ(fakecu_used_bytes(1) - used0, 2 * PAGE);
        CHECK_EQ(fakecu_vmm_physical_bytes(1) - phys0, 2 * PAGE);
        CUdeviceptr va[2] = {reserve(), reserve()};
        map_rw(va[0], h[0], 1);
        map_rw(va[1], h[1], 1);
        char *a = (char *)(uintptr_t)va[0], *b = (char *)(uintptr_t)va[1];
        memset(a, 0x11 + k, PAGE);
        CHECK(all_bytes(b, 0x11 + k, PAGE));
        CHECK_EQ(fakecu_device_write(1, b + 64, NULL, 0x77, 32), CUDA_SUCCESS);
        CHECK(all_bytes(a + 64, 0x77, 32));
        bool mapped[2] = {true, true};
        for (int i = 0; i < 4; i++) {
            int op = perms[k][i];
            if (op < 2) {
                CHECK_EQ(cuMemRelease(h[op]), CUDA_SUCCESS);
            } else {
                CHECK_EQ(cuMemUnmap(va[op - 2], PAGE), CUDA_SUCCESS);
                mapped[op - 2] = false;
            }
            for (int m = 0; m < 2; m++) /* what is still mapped still holds the bytes */
                if (mapped[m])
                    CHECK(all_bytes((char *)(uintptr_t)va[m] + 64, 0x77, 32));
        }
        CHECK_EQ(cuMemAddressFree(va[0], PAGE), CUDA_SUCCESS);
        CHECK_EQ(cuMemAddressFree(va[1], PAGE), CUDA_SUCCESS);
        s = stats();
        CHECK_EQ(s.handles, s0.handles);
        CHECK_EQ(s.physical_bytes, s0.physical_bytes);
        CHECK_EQ(s.mapped_bytes, s0.mapped_bytes);
        CHECK_EQ(fakecu_used_bytes(1), used0);
    }
}

/* Refusals leave nothing behind. */
static void test_import_errors(void)
{
    struct fakecu_vmm_stats s0 = stats();
    CUmemGenericAllocationHandle h = create_shareable(0), g = 0;
    int fd = export_fd(h);
    CHECK_EQ(cuMemImportFromShareableHandle(NULL, fd_arg(fd), POSIX_FD), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(fd), CU_MEM_HANDLE_TYPE_NONE), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(fd), CU_MEM_HANDLE_TYPE_WIN32), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(fd), CU_MEM_HANDLE_TYPE_FABRIC), CUDA_ERROR_NOT_SUPPORTED);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(-1), POSIX_FD), CUDA_ERROR_INVALID_VALUE);
    int closed = dup(fd);
    close(closed);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(closed), POSIX_FD), CUDA_ERROR_INVALID_VALUE);
    FILE *tmp = tmpfile(); /* a regular file, of the right size, but no export */
    CHECK(tmp && ftruncate(fileno(tmp), PAGE) == 0);
    if (tmp)
        CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(fileno(tmp)), POSIX_FD), CUDA_ERROR_INVALID_VALUE);
    int other = memfd_create("not-fakecuda", MFD_CLOEXEC);
    CHECK(other >= 0 && ftruncate(other, PAGE) == 0);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(other), POSIX_FD), CUDA_ERROR_INVALID_VALUE);
    int empty = memfd_create("fakecuda-dev0", MFD_CLOEXEC); /* our name, no bytes */
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(empty), POSIX_FD), CUDA_ERROR_INVALID_VALUE);
    int sock[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sock), 0);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(sock[0]), POSIX_FD), CUDA_ERROR_INVALID_VALUE);

    /* An import is charged like a creation: a full device refuses it. */
    CUdeviceptr fill = 0;
    size_t room = CAPACITY - fakecu_used_bytes(0);
    CHECK_EQ(cuMemAlloc_v2(&fill, room - PAGE / 2), CUDA_SUCCESS);
    CHECK_EQ(cuMemImportFromShareableHandle(&g, fd_arg(fd), POSIX_FD), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemFree_v2(fill), CUDA_SUCCESS);
    CHECK_EQ(g, 0);

    struct fakecu_vmm_stats s = stats();
    CHECK_EQ(s.imports, s0.imports);
    CHECK_EQ(s.handles - s0.handles, 1);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS);
    close(fd);
    close(other);
    close(empty);
    close(sock[0]);
    close(sock[1]);
    if (tmp)
        fclose(tmp);
}

/* The legacy API in the exporting process, and bytes that are no handle. */
static void test_legacy_ipc(void)
{
    unsigned long long opens0 = fakecu_ipc_opens(), closes0 = fakecu_ipc_closes();
    size_t used0 = fakecu_used_bytes(0), live0 = fakecu_live_allocs(0);
    CUdeviceptr mem = 0;
    CHECK_EQ(cuMemAlloc_v2(&mem, 8192), CUDA_SUCCESS);
    CUipcMemHandle own;
    CHECK_EQ(cuIpcGetMemHandle(&own, mem + 100), CUDA_SUCCESS);
    CUdeviceptr d = 7;
    CHECK_EQ(cuIpcOpenMemHandle_v2(&d, own, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_EQ(cuIpcOpenMemHandle(&d, own, 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_EQ(cuIpcOpenMemHandle_v2(&d, own, 2), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuIpcOpenMemHandle_v2(NULL, own, 0), CUDA_ERROR_INVALID_VALUE);
    cudaIpcMemHandle_t rown;
    CHECK_EQ(cudaIpcGetMemHandle(&rown, (void *)(uintptr_t)mem), cudaSuccess);
    void *rp = &d;
    CHECK_EQ(cudaIpcOpenMemHandle(&rp, rown, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized);
    CHECK_EQ(cudaGetLastError(), cudaErrorDeviceUninitialized);
    CHECK_EQ(cudaIpcOpenMemHandle(NULL, rown, 0), cudaErrorInvalidValue);

    /* What a process without the fake's handles is handed: random bytes,
     * zeros. A clean error, never a mapping. */
    CUipcMemHandle junk[2];
    srand(12345);
    for (size_t i = 0; i < sizeof junk[0].reserved; i++)
        junk[0].reserved[i] = (char)rand();
    memset(&junk[1], 0, sizeof junk[1]);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(cuIpcOpenMemHandle_v2(&d, junk[i], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(cuIpcOpenMemHandle(&d, junk[i], 0), CUDA_ERROR_INVALID_VALUE);
        cudaIpcMemHandle_t rj;
        memcpy(&rj, &junk[i], sizeof rj);
        CHECK_EQ(cudaIpcOpenMemHandle(&rp, rj, cudaIpcMemLazyEnablePeerAccess), cudaErrorInvalidValue);
    }
    CHECK(d == 7 && rp == &d);
    CHECK_EQ(fakecu_live_allocs(0), live0 + 1);
    CHECK_EQ(fakecu_used_bytes(0), used0 + 8192);
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);

    /* Nothing was opened: nothing closes. */
    CHECK_EQ(cuIpcCloseMemHandle(mem), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuIpcCloseMemHandle(0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cudaIpcCloseMemHandle((void *)(uintptr_t)mem), cudaErrorInvalidValue);
    CHECK_EQ(cudaIpcCloseMemHandle(NULL), cudaErrorInvalidValue);
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK_EQ(cuCtxSetCurrent(NULL), CUDA_SUCCESS); /* no context: that comes first, as in CUDA */
    CHECK_EQ(cuIpcCloseMemHandle(mem), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_EQ(cuIpcOpenMemHandle_v2(&d, own, 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_EQ(cuCtxSetCurrent(g_ctx[0]), CUDA_SUCCESS);

    CHECK_EQ(fakecu_ipc_opens() - opens0, 12); /* cudaIpcOpenMemHandle(NULL, ...) stops in the runtime */
    CHECK_EQ(fakecu_ipc_closes() - closes0, 5);
    CHECK_EQ(cuMemFree_v2(mem), CUDA_SUCCESS);
}

static void test_proc_address(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_EQ(cuGetProcAddress_v2("cuIpcOpenMemHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == (void *)cuIpcOpenMemHandle_v2);
    CHECK_EQ(cuGetProcAddress_v2("cuIpcOpenMemHandle", &fn, 10000, 0, &st), CUDA_SUCCESS);
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == (void *)cuIpcOpenMemHandle);
    CHECK_EQ(cuGetProcAddress_v2("cuIpcOpenMemHandle", &fn, 4000, 0, &st), CUDA_SUCCESS);
    CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == NULL);
    CHECK_EQ(cuGetProcAddress_v2("cuIpcCloseMemHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == (void *)cuIpcCloseMemHandle);
    CHECK_EQ(cuGetProcAddress_v2("cuMemImportFromShareableHandle", &fn, 13000, 0, &st), CUDA_SUCCESS);
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fn == (void *)cuMemImportFromShareableHandle);
}

int main(void)
{
    /* Before any CUDA call here: the children start from a clean fake. */
    struct child kids[2] = {spawn("2", 1, PAGE / 2, 0x5A), spawn("1", 0, 3 * PAGE / 4, 0x5B)};
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "test_fake_share: cuInit failed\n");
        return 1;
    }
    CHECK_EQ(cuDevicePrimaryCtxRetain(&g_ctx[0], 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&g_ctx[1], 1), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(g_ctx[0]), CUDA_SUCCESS);

    test_cross_process(kids, 2);
    test_import_in_process();
    test_import_errors();
    test_legacy_ipc();
    test_proc_address();

    struct fakecu_vmm_stats s = stats();
    CHECK_EQ(s.mapped_bytes, 0);
    CHECK_EQ(s.reserved_bytes, 0);
    CHECK_EQ(s.handles, 0);
    CHECK_EQ(s.physical_bytes, 0);
    CHECK_EQ(fakecu_used_bytes(0), 0);
    CHECK_EQ(fakecu_used_bytes(1), 0);
    if (g_failures) {
        fprintf(stderr, "test_fake_share: %d check(s) failed\n", g_failures);
        return 1;
    }
    printf("test_fake_share: all checks passed\n");
    return 0;
}
