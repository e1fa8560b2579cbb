/*
 * The Redis backend (backend.h), through hiredis: the only file that knows
 * it. Debian's hiredis (0.14) has no TLS: users put a tunnel in front (README).
 *
 * Every operation runs under the connect and operation timeouts; a
 * connection that failed once is dropped, and the caller (remote.c) decides
 * when to try again, so a stalled server costs one timeout.
 */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "remote/backend.h"

struct redis {
    kc_backend base; /* first */
    kc_endpoint ep;
    redisContext *ctx;
};

/*
 * hiredis writes with write(): a server that died mid-write (a large push
 * after its RST) would raise SIGPIPE and kill the program that only wanted a
 * kernel. SIGPIPE is blocked in the calling thread around our socket calls,
 * and one raised there is consumed, so the write fails with EPIPE instead.
 */
struct sigpipe_guard {
    sigset_t old;
    int was_pending;
};

static void sigpipe_block(struct sigpipe_guard *g)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void sigpipe_restore(struct sigpipe_guard *g)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    if (!g->was_pending && sigismember(&pending, SIGPIPE)) {
        const struct timespec none = {0, 0};
        sigtimedwait(&set, NULL, &none);
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static struct timeval tv_ms(unsigned ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

static int fail(struct redis *r, int code, const char *fmt, ...) KC_PRINTF(3, 4);
static int fail(struct redis *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->base.errmsg, sizeof(r->base.errmsg), fmt, ap);
    va_end(ap);
    for (char *p = r->base.errmsg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return code;
}

static void drop(struct redis *r)
{
    if (r->ctx)
        redisFree(r->ctx);
    r->ctx = NULL;
}

/* A failed exchange: the connection is not trusted again. */
static int io_error(struct redis *r, const char *what)
{
    const char *why = r->ctx && r->ctx->errstr[0] ? r->ctx->errstr : "no reply";
    int rc;
    /* hiredis reports a timeout as the socket's EAGAIN: say what it means. */
    if (strstr(why, "temporarily unavailable") || strstr(why, "timed out"))
        rc = fail(r, KCACHE_EIO, "remote %s:%d: %s: no answer within %u ms (remote_timeout)",
                  r->ep.host, r->ep.port, what, r->ep.timeout_ms);
    else
        rc = fail(r, KCACHE_EIO, "remote %s:%d: %s: %s", r->ep.host, r->ep.port, what, why);
    drop(r);
    return rc;
}

/* An error reply: the server's words decide what it means for us. */
static int reply_error(struct redis *r, const redisReply *rep, const char *what)
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

/* Runs a command (argv), connecting first if needed. *out: the reply, never an error one. */
static int command(struct redis *r, redisReply **out, const char *what, int argc,
                   const char **argv, const size_t *lens);

static int connect_now(struct redis *r)
{
    r->ctx = redisConnectWithTimeout(r->ep.host, r->ep.port, tv_ms(r->ep.connect_ms));
    if (!r->ctx)
        return fail(r, KCACHE_EIO, "remote %s:%d: out of memory", r->ep.host, r->ep.port);
    if (r->ctx->err)
        return io_error(r, "cannot connect");
    if (redisSetTimeout(r->ctx, tv_ms(r->ep.timeout_ms)) != REDIS_OK)
        return io_error(r, "cannot set the timeout");
    redisReply *rep = NULL;
    int rc = 0;
    if (r->ep.password[0]) {
        const char *argv[3] = {"AUTH", r->ep.user, r->ep.password};
        if (r->ep.user[0])
            rc = command(r, &rep, "AUTH", 3, argv, NULL);
        else {
            argv[1] = r->ep.password;
            rc = command(r, &rep, "AUTH", 2, argv, NULL);
        }
        freeReplyObject(rep);
        rep = NULL;
    }
    if (!rc && r->ep.db) {
        char db[16];
        snprintf(db, sizeof(db), "%d", r->ep.db);
        const char *argv[2] = {"SELECT", db};
        rc = command(r, &rep, "SELECT", 2, argv, NULL);
        freeReplyObject(rep);
    }
    if (rc)
        drop(r);
    return rc;
}

static int command(struct redis *r, redisReply **out, const char *what, int argc,
                   const char **argv, const size_t *lens)
{
    *out = NULL;
    int rc;
    if (!r->ctx && (rc = connect_now(r)))
        return rc;
    struct sigpipe_guard g;
    sigpipe_block(&g);
    redisReply *rep = redisCommandArgv(r->ctx, argc, argv, lens);
    sigpipe_restore(&g);
    if (!rep)
        return io_error(r, what);
    if (rep->type == REDIS_REPLY_ERROR) {
        rc = reply_error(r, rep, what);
        freeReplyObject(rep);
        return rc;
    }
    *out = rep;
    return 0;
}

/*
 * One round trip that will not hand over a value larger than the caller
 * takes: the length is checked on the server, so a hostile value is not even
 * read off the socket.
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
    redisReply *rep;
    int rc = command(r, &rep, "get", 5, argv, NULL);
    if (rc)
        return rc;
    if (rep->type == REDIS_REPLY_NIL)
        rc = KCACHE_ENOTFOUND;
    else if (rep->type == REDIS_REPLY_INTEGER)
        rc = fail(r, KCACHE_ECORRUPT, "remote value of %lld bytes is over the bound of %zu",
                  (long long)rep->integer, max);
    else if (rep->type != REDIS_REPLY_STRING)
        rc = fail(r, KCACHE_ECORRUPT, "remote value is not a string");
    else {
        out->size = 0;
        rc = kc_buf_append(out, rep->str, rep->len);
    }
    freeReplyObject(rep);
    return rc;
}

static int redis_put(kc_backend *b, const char *name, const void *data, size_t size,
                     const char *index, const char *member, int64_t score)
{
    struct redis *r = (struct redis *)b;
    char score_s[32];
    snprintf(score_s, sizeof(score_s), "%lld", (long long)score);
    /* Both in one pipeline: one round trip, one timeout. */
    const char *set[] = {"SET", name, data};
    size_t set_lens[] = {3, strlen(name), size};
    const char *zadd[] = {"ZADD", index, score_s, member};
    int rc;
    if (!r->ctx && (rc = connect_now(r)))
        return rc;
    if (redisAppendCommandArgv(r->ctx, 3, set, set_lens) != REDIS_OK ||
        redisAppendCommandArgv(r->ctx, 4, zadd, NULL) != REDIS_OK)
        return io_error(r, "put");
    rc = 0;
    struct sigpipe_guard g;
    sigpipe_block(&g);
    for (int i = 0; i < 2; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->ctx, (void **)&rep) != REDIS_OK || !rep) {
            rc = io_error(r, "put");
            break;
        }
        if (rep->type == REDIS_REPLY_ERROR && !rc)
            rc = reply_error(r, rep, "put");
        freeReplyObject(rep);
    }
    sigpipe_restore(&g);
    return rc;
}

static int redis_lease(kc_backend *b, int *acquired, const char *name, const char *owner,
                       unsigned ttl_ms)
{
    struct redis *r = (struct redis *)b;
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%u", ttl_ms);
    const char *argv[] = {"SET", name, owner, "NX", "PX", ttl};
    redisReply *rep;
    int rc = command(r, &rep, "lease", 6, argv, NULL);
    if (rc)
        return rc;
    *acquired = rep->type == REDIS_REPLY_STATUS;
    freeReplyObject(rep);
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
    redisReply *rep;
    int rc = command(r, &rep, "lease renewal", 6, argv, NULL);
    freeReplyObject(rep);
    return rc;
}

static int redis_release(kc_backend *b, const char *name, const char *owner)
{
    struct redis *r = (struct redis *)b;
    const char *argv[] = {"EVAL", release_script, "1", name, owner};
    redisReply *rep;
    int rc = command(r, &rep, "lease release", 5, argv, NULL);
    freeReplyObject(rep);
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
        redisReply *rep;
        int rc = command(r, &rep, "index", 7, argv, NULL);
        if (rc)
            return rc;
        size_t n = rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0;
        for (size_t i = 0; !rc && i < n; i++)
            if (rep->element[i]->type == REDIS_REPLY_STRING)
                rc = fn(ud, rep->element[i]->str);
        freeReplyObject(rep);
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
    redisReply *rep;
    int rc = command(r, &rep, "PING", 1, ping, NULL);
    if (rc)
        return rc;
    freeReplyObject(rep);
    /* The round trip alone: the connection (and AUTH) happened before t1. */
    uint64_t t1 = kc_mono_ns();
    if ((rc = command(r, &rep, "PING", 1, ping, NULL)))
        return rc;
    out->latency_ns = kc_mono_ns() - t1;
    freeReplyObject(rep);
    const char *info[] = {"INFO", "all"};
    if ((rc = command(r, &rep, "INFO", 2, info, NULL)))
        return rc;
    char buf[64];
    if (rep->type == REDIS_REPLY_STRING) {
        info_field(out->server_version, sizeof(out->server_version), rep->str, "redis_version");
        info_field(out->policy, sizeof(out->policy), rep->str, "maxmemory_policy");
        info_field(buf, sizeof(buf), rep->str, "maxmemory");
        out->maxmemory = strtoull(buf, NULL, 10);
        info_field(buf, sizeof(buf), rep->str, "used_memory");
        out->used_memory = strtoull(buf, NULL, 10);
    }
    freeReplyObject(rep);
    const char *zcard[] = {"ZCARD", index};
    if ((rc = command(r, &rep, "ZCARD", 2, zcard, NULL)))
        return rc;
    out->entries = rep->type == REDIS_REPLY_INTEGER ? (uint64_t)rep->integer : 0;
    freeReplyObject(rep);
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
