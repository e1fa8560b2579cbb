/* Redis replies read under one deadline, their sizes bounded as declared (resp.h). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "remote/resp.h"
#include "util/common.h"

/* Nesting kcache's commands never produce; a reply deeper than this is not a kcache server's. */
#define MAX_DEPTH 4

static int fail(kc_conn *c, int timed_out, char *why, size_t why_size, const char *fmt, ...)
    KC_PRINTF(5, 6);
static int fail(kc_conn *c, int timed_out, char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
    c->timed_out = timed_out;
    return KCACHE_EIO;
}

/* Milliseconds left before the deadline for poll(), rounded up; 0 when it has passed. */
static int left_ms(const kc_conn *c)
{
    uint64_t now = kc_mono_ns();
    if (now >= c->deadline_ns)
        return 0;
    uint64_t ms = (c->deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Waits until fd is ready for events, or the deadline. 0, or KCACHE_EIO. */
static int wait_for(kc_conn *c, short events, char *why, size_t why_size)
{
    for (;;) {
        int ms = left_ms(c);
        if (ms == 0)
            return fail(c, 1, why, why_size, "timed out");
        struct pollfd p = {c->fd, events, 0};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0; /* readable, writable, or an error the next call reports */
        if (n < 0 && errno != EINTR)
            return fail(c, 0, why, why_size, "%s", strerror(errno));
    }
}

int kc_conn_send(kc_conn *c, const void *data, size_t size, char *why, size_t why_size)
{
    const char *p = data;
    c->timed_out = 0;
    while (size) {
        int rc = wait_for(c, POLLOUT, why, why_size);
        if (rc)
            return rc;
        /* MSG_NOSIGNAL: a server gone mid-write is an error here, not a SIGPIPE that kills
         * the program that only wanted a kernel. MSG_DONTWAIT: never past the deadline. */
        ssize_t n = send(c->fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (n <= 0)
            return fail(c, 0, why, why_size, "%s", n < 0 ? strerror(errno) : "connection closed");
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

/* Reads what the socket has (at least a byte) into dst, before the deadline. */
static int recv_some(kc_conn *c, void *dst, size_t room, size_t *got, char *why,
                     size_t why_size)
{
    for (;;) {
        int rc = wait_for(c, POLLIN, why, why_size);
        if (rc)
            return rc;
        ssize_t n = recv(c->fd, dst, room, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (n <= 0)
            return fail(c, 0, why, why_size, "%s", n < 0 ? strerror(errno) : "connection closed");
        *got = (size_t)n;
        return 0;
    }
}

/* One "\r\n"-terminated line (without it) into line, at most size - 1 bytes. */
static int read_line(kc_conn *c, char *line, size_t size, char *why, size_t why_size)
{
    for (;;) {
        char *nl = c->end > c->beg ? memchr(c->buf + c->beg, '\n', c->end - c->beg) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - (c->buf + c->beg));
            if (n == 0 || c->buf[c->beg + n - 1] != '\r')
                return fail(c, 0, why, why_size, "a reply that is not Redis's protocol");
            if (n - 1 >= size)
                return fail(c, 0, why, why_size, "a reply line of %zu bytes", n - 1);
            memcpy(line, c->buf + c->beg, n - 1);
            line[n - 1] = '\0';
            c->beg += n + 1;
            return 0;
        }
        if (c->end - c->beg >= size + 1)
            return fail(c, 0, why, why_size, "a reply line longer than %zu bytes", size);
        if (c->beg) {
            memmove(c->buf, c->buf + c->beg, c->end - c->beg);
            c->end -= c->beg;
            c->beg = 0;
        }
        size_t got = 0;
        int rc = recv_some(c, c->buf + c->end, sizeof(c->buf) - c->end, &got, why, why_size);
        if (rc)
            return rc;
        c->end += got;
    }
}

/* Exactly n bytes into dst: first what is buffered, then straight off the socket. */
static int read_exact(kc_conn *c, char *dst, size_t n, char *why, size_t why_size)
{
    size_t have = KC_MIN(n, c->end - c->beg);
    memcpy(dst, c->buf + c->beg, have);
    c->beg += have;
    while (have < n) {
        size_t got = 0;
        int rc = recv_some(c, dst + have, n - have, &got, why, why_size);
        if (rc)
            return rc;
        have += got;
    }
    return 0;
}

static int parse_count(const char *text, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno)
        return -1;
    *out = v;
    return 0;
}

/*
 * The length a bulk string ($) or an array (*) starts with into *n; -1 is
 * Redis's nil in both, and makes r one. 0, or the protocol error.
 */
static int read_length(kc_resp *r, long long *n, kc_conn *c, const char *rest, char *why,
                       size_t why_size)
{
    if (parse_count(rest, n) || *n < -1)
        return fail(c, 0, why, why_size, "a reply that is not Redis's protocol");
    if (*n == -1)
        r->type = KC_RESP_NIL;
    return 0;
}

void kc_resp_free(kc_resp *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->elements; i++)
        kc_resp_free(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}

static int read_one(kc_resp **out, kc_conn *c, const kc_resp_limits *lim, size_t *total,
                    int depth, char *why, size_t why_size)
{
    char line[4096];
    *out = NULL;
    int rc = read_line(c, line, sizeof(line), why, why_size);
    if (rc)
        return rc;
    kc_resp *r = kc_calloc(1, sizeof(*r));
    if (!r)
        return fail(c, 0, why, why_size, "out of memory");
    long long n = 0;
    const char *rest = line + 1;
    switch (line[0]) {
    case '+':
    case '-':
        r->type = line[0] == '+' ? KC_RESP_STATUS : KC_RESP_ERROR;
        r->len = strlen(rest);
        if (!(r->str = kc_strdup(rest)))
            rc = fail(c, 0, why, why_size, "out of memory");
        break;
    case ':':
        r->type = KC_RESP_INTEGER;
        if (parse_count(rest, &r->integer))
            rc = fail(c, 0, why, why_size, "a reply that is not Redis's protocol");
        break;
    case '$':
        if ((rc = read_length(r, &n, c, rest, why, why_size)) || r->type == KC_RESP_NIL)
            break;
        /* The bound, before a byte of it is read or allocated. */
        if ((unsigned long long)n > lim->max_string ||
            (unsigned long long)n > lim->max_total - *total) {
            snprintf(why, why_size, "remote value of %lld bytes is over the bound of %zu", n,
                     KC_MIN(lim->max_string, lim->max_total));
            c->timed_out = 0;
            rc = KCACHE_ECORRUPT;
            break;
        }
        *total += (size_t)n;
        r->type = KC_RESP_STRING;
        r->len = (size_t)n;
        char crlf[2];
        if (!(r->str = kc_malloc(r->len + 1)))
            rc = fail(c, 0, why, why_size, "out of memory");
        else if (!(rc = read_exact(c, r->str, r->len, why, why_size)) &&
                 !(rc = read_exact(c, crlf, 2, why, why_size)) &&
                 (crlf[0] != '\r' || crlf[1] != '\n'))
            rc = fail(c, 0, why, why_size, "a reply that is not Redis's protocol");
        if (r->str)
            r->str[r->len] = '\0';
        break;
    case '*':
        if ((rc = read_length(r, &n, c, rest, why, why_size)) || r->type == KC_RESP_NIL)
            break;
        r->type = KC_RESP_ARRAY;
        /* Each element costs at least a slot: bounded like bytes, before the slots exist. */
        if (depth >= MAX_DEPTH ||
            (unsigned long long)n > (lim->max_total - *total) / sizeof(*r->element)) {
            snprintf(why, why_size, "remote reply of %lld elements is over the bound", n);
            c->timed_out = 0;
            rc = KCACHE_ECORRUPT;
            break;
        }
        *total += (size_t)n * sizeof(*r->element);
        if (n && !(r->element = kc_calloc((size_t)n, sizeof(*r->element)))) {
            rc = fail(c, 0, why, why_size, "out of memory");
            break;
        }
        for (long long i = 0; !rc && i < n; i++) {
            rc = read_one(&r->element[i], c, lim, total, depth + 1, why, why_size);
            if (r->element[i])
                r->elements = (size_t)i + 1;
        }
        break;
    default:
        rc = fail(c, 0, why, why_size, "a reply that is not Redis's protocol");
    }
    if (rc) {
        kc_resp_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int kc_resp_read(kc_resp **out, kc_conn *c, const kc_resp_limits *lim, char *why,
                 size_t why_size)
{
    size_t total = 0;
    c->timed_out = 0;
    return read_one(out, c, lim, &total, 0, why, why_size);
}

int kc_conn_has_unread(const kc_conn *c)
{
    return c->end > c->beg;
}
