/*
 * The Redis backend (backend.h), through hiredis: the only file that knows
 * it. Debian's hiredis (0.14) has no TLS: users put a tunnel in front (README).
 *
 * One deadline per operation (remote_timeout): a backend call (a get, a
 * put, a lease, a check; a page of the index) must be over by then,
 * connecting, authenticating, sending and every byte of the reply included,
 * so a server that answers a byte a second costs one timeout, not one per
 * byte. Every size a reply declares is checked before it is read
 * (resp.h): a get takes at most the value bound, anything else a small one.
 * hiredis connects and formats commands; the bytes on the socket are ours
 * (resp.c). A connection that failed once is dropped, and the caller
 * (remote.c) decides when to try again.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "remote/backend.h"
#include "remote/resp.h"

/* What a reply to anything but a get may hold: INFO, a page of 1000 index members. */
#define KC_REDIS_MAX_SMALL_REPLY ((size_t)4 << 20)

struct redis {
    kc_backend base; /* first */
    kc_endpoint ep;
    redisContext *ctx; /* the connection hiredis made; its fd is read and written by resp.c */
    kc_conn conn;
};

/* A failure said in the backend's errmsg (backend.h). */
#define fail(x, ...) kc_backend_fail(&(x)->base, __VA_ARGS__)

static void drop(struct redis *r)
{
    if (r->ctx)
        redisFree(r->ctx);
    r->ctx = NULL;
    r->conn.beg = r->conn.end = 0;
}

/* The operation under way must be over by deadline (kc_mono_ns()): now + remote_timeout. */
static void begin(struct redis *r)
{
    r->conn.deadline_ns = kc_mono_ns() + (uint64_t)r->ep.timeout_ms * 1000000u;
    r->conn.timed_out = 0;
}

/* A failed exchange: the connection is not trusted again. */
static int io_error(struct redis *r, const char *what, const char *why)
{
    int rc;
    if (r->conn.timed_out)
        rc = fail(r, KCACHE_EIO, "remote %s:%d: %s: no answer within %u ms (remote_timeout)",
                  r->ep.host, r->ep.port, what, r->ep.timeout_ms);
    else
        rc = fail(r, KCACHE_EIO, "remote %s:%d: %s: %s", r->ep.host, r->ep.port, what, why);
    drop(r);
    return rc;
}

/* An error reply: the server's words decide what it means for us. */
static int reply_error(struct redis *r, const kc_resp *rep, const char *what)
{
    if (!strncmp(rep->str, "OOM", 3))
        return fail(r, KCACHE_EFULL,
                    "remote %s:%d refuses writes (%s): use maxmemory-policy allkeys-lru",
                    r->ep.host, r->ep.port, rep->str);
    if (!strncmp(rep->str, "NOAUTH", 6) || !strncmp(rep->str, "WRONGPASS", 9) ||
        !strncmp(rep->str, "NOPERM", 6))
        return fail(r, KCACHE_EIO, "remote %s:%d: %s: check the user and password in remote",
                    r->ep.host, r->ep.port, rep->str);
    return fail(r, KCACHE_EIO, "remote %s:%d: %s: %s", r->ep.host, r->ep.port, what, rep->str);
}

/* Sends one command (argv), formatted by hiredis, before the deadline. */
static int send_command(struct redis *r, const char *what, int argc, const char **argv,
                        const size_t *lens)
{
    char *cmd = NULL, why[256];
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (n < 0 || !cmd)
        return fail(r, KCACHE_ENOMEM, "remote %s:%d: %s: out of memory", r->ep.host, r->ep.port,
                    what);
    int rc = kc_conn_send(&r->conn, cmd, (size_t)n, why, sizeof(why));
    redisFreeCommand(cmd);
    return rc ? io_error(r, what, why) : 0;
}

/*
 * Reads one reply before the deadline, none of its strings over max_string.
 * *out: the reply, never an error one. A declared size over the bound is
 * KCACHE_ECORRUPT, and the connection is dropped: the rest was never read.
 */
static int read_reply(struct redis *r, kc_resp **out, const char *what, size_t max_string)
{
    char why[256];
    kc_resp_limits lim = {max_string, KC_MAX(max_string, KC_REDIS_MAX_SMALL_REPLY)};
    *out = NULL;
    kc_resp *rep = NULL;
    int rc = kc_resp_read(&rep, &r->conn, &lim, why, sizeof(why));
    if (rc == KCACHE_ECORRUPT) {
        drop(r);
        return fail(r, KCACHE_ECORRUPT, "%s", why);
    }
    if (rc)
        return io_error(r, what, why);
    if (rep->type == KC_RESP_ERROR) {
        rc = reply_error(r, rep, what);
        kc_resp_free(rep);
        return rc;
    }
    *out = rep;
    return 0;
}

/* Runs a command (argv), connecting first if needed, under the operation's deadline. */
static int command(struct redis *r, kc_resp **out, const char *what, int argc,
                   const char **argv, const size_t *lens, size_t max_string);

static int connect_now(struct redis *r)
{
    /* The connect is part of the operation: its own bound, within what is left. */
    uint64_t now = kc_mono_ns();
    uint64_t left_ms = r->conn.deadline_ns > now ? (r->conn.deadline_ns - now) / 1000000 : 0;
    unsigned ms = (unsigned)KC_MIN((uint64_t)r->ep.connect_ms, left_ms);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    if (ms == 0) {
        r->conn.timed_out = 1;
        return io_error(r, "cannot connect", "");
    }
    r->ctx = redisConnectWithTimeout(r->ep.host, r->ep.port, tv);
    if (!r->ctx)
        return fail(r, KCACHE_EIO, "remote %s:%d: out of memory", r->ep.host, r->ep.port);
    if (r->ctx->err)
        return io_error(r, "cannot connect", r->ctx->errstr);
    r->conn.fd = r->ctx->fd;
    r->conn.beg = r->conn.end = 0;
    kc_resp *rep = NULL;
    int rc = 0;
    if (r->ep.password[0]) {
        const char *argv[3] = {"AUTH", r->ep.user, r->ep.password};
        if (r->ep.user[0])
            rc = command(r, &rep, "AUTH", 3, argv, NULL, 0);
        else {
            argv[1] = r->ep.password;
            rc = command(r, &rep, "AUTH", 2, argv, NULL, 0);
        }
        kc_resp_free(rep);
        rep = NULL;
    }
    if (!rc && r->ep.db) {
        char db[16];
        snprintf(db, sizeof(db), "%d", r->ep.db);
        const char *argv[2] = {"SELECT", db};
        rc = command(r, &rep, "SELECT", 2, argv, NULL, 0);
        kc_resp_free(rep);
    }
    if (rc)
        drop(r);
    return rc;
}

static int command(struct redis *r, kc_resp **out, const char *what, int argc,
                   const char **argv, const size_t *lens, size_t max_string)
{
    *out = NULL;
    int rc;
    if (!r->ctx && (rc = connect_now(r)))
        return rc;
    if ((rc = send_command(r, what, argc, argv, lens)))
        return rc;
    if ((rc = read_reply(r, out, what, max_string ? max_string : KC_REDIS_MAX_SMALL_REPLY)))
        return rc;
    /* Bytes nobody asked for would be read as the next command's reply. */
    if (kc_conn_has_unread(&r->conn)) {
        kc_resp_free(*out);
        *out = NULL;
        return io_error(r, what, "more bytes than one reply");
    }
    return 0;
}

/*
 * One round trip that will not hand over a value larger than the caller
 * takes: the length is checked on the server, so a hostile value is not even
 * sent; and a server that sends one anyway is refused on its declared length
 * (read_reply), before it is read.
 */
static const char get_script[] =
    "local n = redis.call('strlen', KEYS[1])\n"
    "if n > tonumber(ARGV[1]) then return n end\n"
    "return redis.call('get', KEYS[1])";

static int redis_get(kc_backend *b, kc_buf *out, const char *name, size_t max)
{
    struct redis *r = (struct redis *)b;
    char max_s[32];
    snprintf(max_s, sizeof(max_s), "%zu", max);
    const char *argv[] = {"EVAL", get_script, "1", name, max_s};
    kc_resp *rep;
    begin(r);
    int rc = command(r, &rep, "get", 5, argv, NULL, max);
    if (rc)
        return rc;
    if (rep->type == KC_RESP_NIL)
        rc = KCACHE_ENOTFOUND;
    else if (rep->type == KC_RESP_INTEGER)
        rc = fail(r, KCACHE_ECORRUPT, "remote value of %lld bytes is over the bound of %zu",
                  rep->integer, max);
    else if (rep->type != KC_RESP_STRING)
        rc = fail(r, KCACHE_ECORRUPT, "remote value is not a string");
    else {
        /* The reply's bytes become the buffer's: a value is never copied. */
        kc_buf_free(out);
        out->data = (uint8_t *)rep->str;
        out->size = rep->len;
        out->cap = rep->len + 1;
        rep->str = NULL;
    }
    kc_resp_free(rep);
    return rc;
}

static int redis_put(kc_backend *b, const char *name, const void *data, size_t size,
                     const char *index, const char *member, int64_t score)
{
    struct redis *r = (struct redis *)b;
    char score_s[32];
    snprintf(score_s, sizeof(score_s), "%lld", (long long)score);
    /* Both in one pipeline: one round trip, one deadline. */
    const char *set[] = {"SET", name, data};
    size_t set_lens[] = {3, strlen(name), size};
    const char *zadd[] = {"ZADD", index, score_s, member};
    int rc;
    begin(r);
    if (!r->ctx && (rc = connect_now(r)))
        return rc;
    if ((rc = send_command(r, "put", 3, set, set_lens)) ||
        (rc = send_command(r, "put", 4, zadd, NULL)))
        return rc;
    int first_error = 0;
    for (int i = 0; i < 2; i++) {
        kc_resp *rep = NULL;
        /* An error reply is kept as the first error; the pipeline's other reply is read. */
        rc = read_reply(r, &rep, "put", KC_REDIS_MAX_SMALL_REPLY);
        kc_resp_free(rep);
        if (rc && !r->ctx)
            return rc; /* the connection is gone: nothing more to read */
        if (rc && !first_error)
            first_error = rc;
    }
    if (!first_error && kc_conn_has_unread(&r->conn))
        return io_error(r, "put", "more bytes than two replies");
    return first_error;
}

static int redis_lease(kc_backend *b, int *acquired, const char *name, const char *owner,
                       unsigned ttl_ms)
{
    struct redis *r = (struct redis *)b;
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%u", ttl_ms);
    const char *argv[] = {"SET", name, owner, "NX", "PX", ttl};
    kc_resp *rep;
    begin(r);
    int rc = command(r, &rep, "lease", 6, argv, NULL, 0);
    if (rc)
        return rc;
    *acquired = rep->type == KC_RESP_STATUS;
    kc_resp_free(rep);
    return 0;
}

/* Only the owner may extend or drop a lease: a slow owner whose lease expired
 * and was taken must not take it back, nor free the new owner's. */
static const char renew_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then"
    " return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";
static const char release_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then"
    " return redis.call('del', KEYS[1]) end return 0";

static int redis_renew(kc_backend *b, const char *name, const char *owner, unsigned ttl_ms)
{
    struct redis *r = (struct redis *)b;
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%u", ttl_ms);
    const char *argv[] = {"EVAL", renew_script, "1", name, owner, ttl};
    kc_resp *rep;
    begin(r);
    int rc = command(r, &rep, "lease renewal", 6, argv, NULL, 0);
    kc_resp_free(rep);
    return rc;
}

static int redis_release(kc_backend *b, const char *name, const char *owner)
{
    struct redis *r = (struct redis *)b;
    const char *argv[] = {"EVAL", release_script, "1", name, owner};
    kc_resp *rep;
    begin(r);
    int rc = command(r, &rep, "lease release", 5, argv, NULL, 0);
    kc_resp_free(rep);
    return rc;
}

static int redis_index(kc_backend *b, const char *index, int64_t since,
                       int (*fn)(void *ud, const char *member), void *ud)
{
    struct redis *r = (struct redis *)b;
    char min[32], off[32];
    snprintf(min, sizeof(min), "%lld", (long long)since);
    for (long long offset = 0;; offset += 1000) {
        snprintf(off, sizeof(off), "%lld", offset);
        const char *argv[] = {"ZRANGEBYSCORE", index, min, "+inf", "LIMIT", off, "1000"};
        kc_resp *rep;
        begin(r); /* a page is an operation: a long index is many */
        int rc = command(r, &rep, "index", 7, argv, NULL, 0);
        if (rc)
            return rc;
        size_t n = rep->type == KC_RESP_ARRAY ? rep->elements : 0;
        for (size_t i = 0; !rc && i < n; i++)
            if (rep->element[i]->type == KC_RESP_STRING)
                rc = fn(ud, rep->element[i]->str);
        kc_resp_free(rep);
        if (rc || n < 1000)
            return rc;
    }
}

/* The value of "field:" in an INFO reply, copied into buf. */
static void info_field(char *buf, size_t size, const char *info, const char *field)
{
    buf[0] = '\0';
    size_t n = strlen(field);
    for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, field, n) && p[n] == ':') {
            p += n + 1;
            size_t len = strcspn(p, "\r\n");
            snprintf(buf, size, "%.*s", (int)KC_MIN(len, size - 1), p);
            return;
        }
    }
}

static int redis_info(kc_backend *b, kcache_remote_info *out, const char *index)
{
    struct redis *r = (struct redis *)b;
    drop(r); /* a check connects afresh, so that it sees what a new process would */
    const char *ping[] = {"PING"};
    kc_resp *rep;
    begin(r); /* the whole check is one operation */
    int rc = command(r, &rep, "PING", 1, ping, NULL, 0);
    if (rc)
        return rc;
    kc_resp_free(rep);
    /* The round trip alone: the connection (and AUTH) happened before t1. */
    uint64_t t1 = kc_mono_ns();
    if ((rc = command(r, &rep, "PING", 1, ping, NULL, 0)))
        return rc;
    out->latency_ns = kc_mono_ns() - t1;
    kc_resp_free(rep);
    const char *info[] = {"INFO", "all"};
    if ((rc = command(r, &rep, "INFO", 2, info, NULL, 0)))
        return rc;
    char buf[64];
    if (rep->type == KC_RESP_STRING) {
        info_field(out->server_version, sizeof(out->server_version), rep->str, "redis_version");
        info_field(out->policy, sizeof(out->policy), rep->str, "maxmemory_policy");
        info_field(buf, sizeof(buf), rep->str, "maxmemory");
        out->maxmemory = strtoull(buf, NULL, 10);
        info_field(buf, sizeof(buf), rep->str, "used_memory");
        out->used_memory = strtoull(buf, NULL, 10);
    }
    kc_resp_free(rep);
    const char *zcard[] = {"ZCARD", index};
    if ((rc = command(r, &rep, "ZCARD", 2, zcard, NULL, 0)))
        return rc;
    out->entries = rep->type == KC_RESP_INTEGER ? (uint64_t)rep->integer : 0;
    kc_resp_free(rep);
    out->authenticated = r->ep.password[0] != '\0';
    return 0;
}

static void redis_close(kc_backend *b)
{
    struct redis *r = (struct redis *)b;
    drop(r);
    free(r);
}

static const struct kc_backend_ops redis_ops = {
    redis_get, redis_put, redis_lease, redis_renew, redis_release, redis_index, redis_info,
    redis_close,
};

int kc_redis_new(kc_backend **out, const kc_endpoint *ep)
{
    struct redis *r = kc_calloc(1, sizeof(*r));
    if (!r)
        return KCACHE_ENOMEM;
    r->base.ops = &redis_ops;
    r->ep = *ep;
    *out = &r->base;
    return 0;
}
