// SPDX-License-Identifier: MIT
// The transport of ipc_socket.h: an abstract Unix socket "\0ccinterpose-ipc-PID-NONCE" of type
// SOCK_SEQPACKET (one message per request or answer, so no framing), one thread that polls it and
// every connection. An answer is a header, then the pages in messages of at most PIECES_PER_MSG
// descriptors (the kernel takes at most 253 in one message).
//
// Abstract sockets live in the network namespace and vanish with the process: nothing to unlink,
// nothing stale after a crash. Every wait has a time-out, so a stuck peer costs an error, never
// a hang of the program.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ipc_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define PIECES_PER_MSG 64
#define WAIT_SECONDS 30  // an exporter answers in milliseconds; this is for one that hangs

static const char k_ask[8] = {'c', 'c', 'i', 'i', 'p', 'c', 'Q', '1'};
static const char k_answer[8] = {'c', 'c', 'i', 'i', 'p', 'c', 'A', '1'};

typedef struct request {
    char magic[8];
    uint64_t nonce, id;
} request;

typedef struct answer {
    char magic[8];
    int32_t status;
    uint32_t n;
    uint64_t skip, size;
} answer;

typedef struct pieces_msg {
    uint32_t count, pad;
    uint64_t sizes[PIECES_PER_MSG];
} pieces_msg;

typedef struct conn {
    int fd;
    int granted;  // `id` was granted on it: its end ends one import
    uint64_t id;
} conn;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t nonce;
static int listen_fd = -1;
static const cci_ipc_server_ops *server_ops;
// The importer's connections, kept so that a fork child can close its copies.
static int *client_fds;
static size_t client_n, client_cap;

uint64_t cci_ipc_nonce(void)
{
    pthread_mutex_lock(&lock);
    while (!nonce) {
        if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
        }
    }
    uint64_t n = nonce;
    pthread_mutex_unlock(&lock);
    return n;
}

static socklen_t socket_name(struct sockaddr_un *a, int pid, uint64_t n)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int len = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ccinterpose-ipc-%d-%016llx", pid,
                       (unsigned long long)n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

static void set_timeouts(int fd)
{
    struct timeval tv = {WAIT_SECONDS, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// ---- the exporter's thread ------------------------------------------------------------------

static int same_user(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
        return 0;
    return cr.uid == geteuid() || cr.uid == 0;
}

static int send_grant(int fd, const cci_ipc_grant *g)
{
    answer a = {.status = g->status, .n = (uint32_t)g->n, .skip = g->skip, .size = g->size};
    memcpy(a.magic, k_answer, sizeof a.magic);
    if (send(fd, &a, sizeof a, MSG_NOSIGNAL) != (ssize_t)sizeof a)
        return -1;
    for (size_t at = 0; g->status == CCI_IPC_GRANTED && at < g->n;) {
        pieces_msg m = {0};
        m.count = (uint32_t)(g->n - at < PIECES_PER_MSG ? g->n - at : PIECES_PER_MSG);
        memcpy(m.sizes, g->sizes + at, m.count * sizeof *m.sizes);
        char ctl[CMSG_SPACE(PIECES_PER_MSG * sizeof(int))];
        memset(ctl, 0, sizeof ctl);
        struct iovec iov = {&m, sizeof m};
        struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                           .msg_controllen = CMSG_SPACE(m.count * sizeof(int))};
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(m.count * sizeof(int));
        memcpy(CMSG_DATA(c), g->fds + at, m.count * sizeof(int));
        if (sendmsg(fd, &h, MSG_NOSIGNAL) != (ssize_t)sizeof m)
            return -1;
        at += m.count;
    }
    return 0;
}

// One request on a fresh connection: answered, and the connection kept only when granted.
static int serve_request(conn *c)
{
    request q;
    ssize_t got = recv(c->fd, &q, sizeof q, 0);
    if (got != (ssize_t)sizeof q || memcmp(q.magic, k_ask, sizeof q.magic) || q.nonce != nonce)
        return -1;
    cci_ipc_grant g = {.status = CCI_IPC_REFUSED};
    if (same_user(c->fd))
        server_ops->grant(q.id, &g);
    int sent = send_grant(c->fd, &g);
    for (size_t i = 0; i < g.n; i++)
        close(g.fds[i]);
    free(g.fds);
    free(g.sizes);
    if (g.status != CCI_IPC_GRANTED)
        return -1;
    c->granted = 1;
    c->id = q.id;
    if (sent != 0) {  // the importer is gone already: its import ends here
        server_ops->ended(q.id);
        c->granted = 0;
        return -1;
    }
    return 0;
}

// The thread's connections; outside it only a fork child touches them (to close its copies).
static conn *srv_cs;
static size_t srv_n, srv_cap;

static void *serve(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    struct pollfd *pf = NULL;
    for (;;) {
        struct pollfd *npf = realloc(pf, (srv_n + 1) * sizeof *pf);
        if (!npf) {
            sleep(1);  // host out of memory: try again rather than drop a connection
            continue;
        }
        pf = npf;
        pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (size_t i = 0; i < srv_n; i++)
            pf[i + 1] = (struct pollfd){.fd = srv_cs[i].fd, .events = POLLIN};
        if (poll(pf, srv_n + 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            cci_log(CCI_LOG_WARNING, "CUDA IPC: the exporting thread stopped (poll: %s); handles of this "
                    "process can no longer be opened", strerror(errno));
            break;
        }
        for (size_t i = srv_n; i-- > 0;) {
            if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int keep = 0;
            if (!srv_cs[i].granted) {
                keep = serve_request(&srv_cs[i]) == 0;
            } else {
                char b;  // a granted connection says nothing more: readable means closed
                keep = recv(srv_cs[i].fd, &b, 1, MSG_DONTWAIT) > 0;
                if (!keep)
                    server_ops->ended(srv_cs[i].id);
            }
            if (!keep) {
                close(srv_cs[i].fd);
                srv_cs[i] = srv_cs[--srv_n];
            }
        }
        if (pf[0].revents & POLLIN) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 && srv_n == srv_cap) {
                size_t ncap = srv_cap ? 2 * srv_cap : 16;
                conn *ncs = realloc(srv_cs, ncap * sizeof *srv_cs);
                if (ncs) {
                    srv_cs = ncs;
                    srv_cap = ncap;
                }
            }
            if (fd >= 0 && srv_n < srv_cap) {
                set_timeouts(fd);
                srv_cs[srv_n++] = (conn){.fd = fd};
            } else if (fd >= 0) {
                close(fd);
            }
        }
    }
    free(pf);
    return NULL;
}

int cci_ipc_server_start(const cci_ipc_server_ops *ops)
{
    uint64_t n = cci_ipc_nonce();
    pthread_mutex_lock(&lock);
    if (listen_fd >= 0) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t len = socket_name(&a, getpid(), n);
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&a, len) == 0 && listen(fd, 64) == 0 ? 0 : -1;
    const char *what = fd < 0 ? "socket" : "bind/listen";
    int err = errno;
    pthread_t th;
    if (rc == 0) {
        server_ops = ops;
        // The thread must not take the program's signals (an interrupted poll only loops).
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        err = pthread_create(&th, NULL, serve, (void *)(intptr_t)fd);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        what = "pthread_create";
        rc = err ? -1 : 0;
    }
    if (rc == 0) {
        pthread_detach(th);
        listen_fd = fd;
    } else if (fd >= 0) {
        close(fd);
    }
    pthread_mutex_unlock(&lock);
    if (rc != 0)
        cci_log(CCI_LOG_WARNING, "CUDA IPC: cannot start this process's export socket (%s: %s)", what, strerror(err));
    return rc;
}

// ---- the importer's side ----------------------------------------------------------------------

static void track_client(int fd, int add)
{
    pthread_mutex_lock(&lock);
    if (add && client_n == client_cap) {
        size_t cap = client_cap ? 2 * client_cap : 16;
        int *v = realloc(client_fds, cap * sizeof *v);
        if (v) {
            client_fds = v;
            client_cap = cap;
        }
    }
    if (add && client_n < client_cap) {
        client_fds[client_n++] = fd;
    } else if (!add) {
        for (size_t i = 0; i < client_n; i++)
            if (client_fds[i] == fd) {
                client_fds[i] = client_fds[--client_n];
                break;
            }
    }
    pthread_mutex_unlock(&lock);
}

void cci_ipc_conn_close(int conn)
{
    if (conn < 0)
        return;
    track_client(conn, 0);
    close(conn);
}

// Receives the pages of an answer; 0, or -1 with every descriptor received so far closed.
static int recv_pieces(int fd, cci_ipc_grant *g)
{
    size_t at = 0;
    while (at < g->n) {
        pieces_msg m;
        char ctl[CMSG_SPACE(PIECES_PER_MSG * sizeof(int))];
        struct iovec iov = {&m, sizeof m};
        struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
        ssize_t got = recvmsg(fd, &h, MSG_CMSG_CLOEXEC);
        struct cmsghdr *c = got == (ssize_t)sizeof m ? CMSG_FIRSTHDR(&h) : NULL;
        size_t nfd = c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS
                         ? (c->cmsg_len - CMSG_LEN(0)) / sizeof(int)
                         : 0;
        int fds[PIECES_PER_MSG];
        if (nfd)
            memcpy(fds, CMSG_DATA(c), (nfd < PIECES_PER_MSG ? nfd : PIECES_PER_MSG) * sizeof(int));
        int ok = c && !(h.msg_flags & MSG_CTRUNC) && nfd == m.count && m.count && at + m.count <= g->n;
        for (size_t i = 0; i < nfd && i < PIECES_PER_MSG; i++) {
            if (ok) {
                g->fds[at + i] = fds[i];
                g->sizes[at + i] = m.sizes[i];
            } else {
                close(fds[i]);
            }
        }
        if (!ok) {
            for (size_t i = 0; i < at; i++)
                close(g->fds[i]);
            return -1;
        }
        at += m.count;
    }
    return 0;
}

int cci_ipc_request(int pid, uint64_t n, uint64_t id, cci_ipc_grant *g, int *conn, char *why, size_t whylen)
{
    memset(g, 0, sizeof *g);
    *conn = -1;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t len = socket_name(&a, pid, n);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, len) != 0) {
        snprintf(why, whylen, "the exporting process %d cannot be reached (%s): it has exited, or runs in "
                 "another network namespace", pid, strerror(errno));
        if (fd >= 0)
            close(fd);
        g->status = CCI_IPC_GONE;
        return g->status;
    }
    set_timeouts(fd);
    request q = {.nonce = n, .id = id};
    memcpy(q.magic, k_ask, sizeof q.magic);
    answer ans;
    int ok = send(fd, &q, sizeof q, MSG_NOSIGNAL) == (ssize_t)sizeof q &&
             recv(fd, &ans, sizeof ans, 0) == (ssize_t)sizeof ans && !memcmp(ans.magic, k_answer, sizeof ans.magic);
    if (!ok) {
        snprintf(why, whylen, "process %d did not answer (%s)", pid, errno ? strerror(errno) : "closed");
        close(fd);
        g->status = CCI_IPC_GONE;
        return g->status;
    }
    g->status = ans.status;
    if (ans.status == CCI_IPC_GRANTED) {
        g->n = ans.n;
        g->skip = ans.skip;
        g->size = ans.size;
        g->fds = calloc(ans.n ? ans.n : 1, sizeof *g->fds);
        g->sizes = calloc(ans.n ? ans.n : 1, sizeof *g->sizes);
        if (!g->fds || !g->sizes || !ans.n || recv_pieces(fd, g) != 0) {
            snprintf(why, whylen, "process %d's answer was cut short", pid);
            free(g->fds);
            free(g->sizes);
            memset(g, 0, sizeof *g);
            close(fd);
            g->status = CCI_IPC_FAILED;
            return g->status;
        }
        track_client(fd, 1);
        *conn = fd;
        return g->status;
    }
    snprintf(why, whylen, "%s", ans.status == CCI_IPC_GONE      ? "the block was freed, or the handle is stale"
                                : ans.status == CCI_IPC_REFUSED ? "the exporting process runs as another user"
                                                                : "the exporting process could not export its pages");
    close(fd);
    return g->status;
}

void cci_ipc_socket_atfork_child(void)
{
    // The only thread: the lock may have been held by a parent thread.
    pthread_mutex_init(&lock, NULL);
    if (listen_fd >= 0)
        close(listen_fd);
    listen_fd = -1;
    for (size_t i = 0; i < client_n; i++)
        close(client_fds[i]);
    client_n = 0;
    for (size_t i = 0; i < srv_n; i++)
        close(srv_cs[i].fd);
    srv_n = 0;
    nonce = 0;  // a socket of its own, if the child ever exports
}
