/*
 * The shared tier behind the local store: settings, the back-off shared by
 * the machine's processes, and the compile path's get, lease and push
 * (remote.h), and the init functions of its versioned structs. What is
 * pushed and taken is checked in wire.c; transfer.c holds the tools' calls
 * (check, push, pull).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <stddef.h>

#include "remote/objaddr.h"
#include "remote/remoteint.h"
#include "format/settings.h"
#include "kcache/remote.h"
#include "util/common.h"

/* ---- settings ----------------------------------------------------------- */

int kc_backend_fail(kc_backend *b, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof(b->errmsg), fmt, ap);
    va_end(ap);
    for (char *p = b->errmsg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    return code;
}

int kc_endpoint_parse(kc_endpoint *out, const char *url, char *msg, size_t msg_size)
{
    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (strncmp(url, "redis://", 8) != 0)
        return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                      "remote '%s': expected redis://[user:password@]host:port[/db]", url);
    const char *p = url + 8;
    const char *slash = strchr(p, '/');
    const char *at = NULL;
    for (const char *q = p; *q && (!slash || q < slash); q++)
        if (*q == '@')
            at = q; /* the last one: a password may hold '@' */
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : 0;
        const char *pw = colon ? colon + 1 : p;
        size_t plen = (size_t)(at - pw);
        if (ulen >= sizeof(out->user) || plen >= sizeof(out->password) || plen == 0)
            return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                          "remote: the user or password is empty or too long");
        memcpy(out->user, p, ulen);
        memcpy(out->password, pw, plen);
        p = at + 1;
    }
    size_t hlen = strcspn(p, ":/");
    if (hlen == 0 || hlen >= sizeof(out->host))
        return kc_fmt(msg, msg_size, KCACHE_EINVAL, "remote '%s': no host", url);
    memcpy(out->host, p, hlen);
    p += hlen;
    char *end;
    if (*p == ':') {
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/'))
            return kc_fmt(msg, msg_size, KCACHE_EINVAL, "remote '%s': bad port", url);
        out->port = (int)port;
        p = end;
    }
    if (*p == '/' && p[1]) {
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end || db < 0 || db > 1000000)
            return kc_fmt(msg, msg_size, KCACHE_EINVAL, "remote '%s': bad database number", url);
        out->db = (int)db;
    } else if (*p && strcmp(p, "/")) {
        return kc_fmt(msg, msg_size, KCACHE_EINVAL, "remote '%s': unexpected '%s'", url, p);
    }
    return 0;
}

/* A setting's value into buf ("" when unset); KCACHE_EINVAL with a message when malformed. */
static int setting(char *buf, size_t size, const char *name, const char *flag,
                   const char *db_path, char *msg, size_t msg_size)
{
    int rc = kc_config_value(buf, size, name, flag, db_path);
    if (rc == KCACHE_ENOTFOUND) {
        buf[0] = '\0';
        return 0;
    }
    if (rc)
        return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                      "setting %s (or its KCACHE_ variable) has a value that cannot be used: "
                      "see kcache config",
                      name);
    return 0;
}

static void redact(char *out, size_t size, const kc_endpoint *ep)
{
    snprintf(out, size, "redis://%s%s%s%s:%d/%d", ep->user, ep->password[0] ? ":***" : "",
             ep->password[0] ? "@" : "", ep->host, ep->port, ep->db);
}

/* An s3:// or http(s):// remote: its own settings read, its backend made. */
static int open_objstore(kcache_remote *r, const char *url, const char *db_path, char *msg,
                         size_t msg_size)
{
    char endpoint[512], region[64], addressing[16], token[1024], ca[1024];
    kc_objaddr addr;
    int rc;
    if ((rc = setting(endpoint, sizeof(endpoint), "s3_endpoint", NULL, db_path, msg, msg_size)) ||
        (rc = setting(region, sizeof(region), "s3_region", NULL, db_path, msg, msg_size)) ||
        (rc = setting(addressing, sizeof(addressing), "s3_addressing", NULL, db_path, msg,
                      msg_size)) ||
        (rc = setting(token, sizeof(token), "remote_token", NULL, db_path, msg, msg_size)) ||
        (rc = setting(ca, sizeof(ca), "remote_ca", NULL, db_path, msg, msg_size)))
        return rc;
    kc_objaddr_settings s = {endpoint, region, addressing, token, ca};
    rc = kc_objaddr_parse(&addr, url, &s, msg, msg_size);
    memset(token, 0, sizeof(token));
    if (rc)
        return rc;
    addr.connect_ms = r->ep.connect_ms;
    addr.timeout_ms = r->ep.timeout_ms;
    snprintf(r->url, sizeof(r->url), "%s", addr.shown);
    rc = kc_objstore_new(&r->backend, &addr, msg, msg_size);
    kc_objaddr_forget(&addr);
    return rc;
}

KCACHE_API int kcache_remote_open(kcache_remote **out, kcache_store *store, const char *url,
                                  char *errbuf, size_t errbuf_size)
{
    char tmp[KC_ERRMSG_SIZE];
    char *msg = errbuf ? errbuf : tmp;
    size_t msg_size = errbuf ? errbuf_size : sizeof(tmp);
    if (!out || !store)
        return kc_fmt(msg, msg_size, KCACHE_EINVAL, "kcache_remote_open: out or store is NULL");
    *out = NULL;
    const char *db_path = kcache_store_path(store);
    char value[1024], ro[16], cto[16], to[16];
    int rc;
    if ((rc = setting(value, sizeof(value), "remote", url, db_path, msg, msg_size)))
        return rc;
    if (!value[0] || !strcmp(value, "none"))
        return kc_fmt(msg, msg_size, KCACHE_ENOTFOUND,
                      "no remote set: give --remote redis://host:port, set KCACHE_REMOTE, "
                      "or run kcache config remote redis://host:port");
    kcache_remote *r = kc_calloc(1, sizeof(*r));
    if (!r)
        return kc_fmt(msg, msg_size, KCACHE_ENOMEM, "out of memory");
    pthread_mutex_init(&r->lock, NULL);
    r->store = store;
    unsigned connect_ms = KCACHE_DEFAULT_REMOTE_CONNECT_TIMEOUT_MS;
    unsigned timeout_ms = KCACHE_DEFAULT_REMOTE_TIMEOUT_MS;
    char secret[1024];
    int objstore = kc_objaddr_is_url(value);
    if ((rc = objstore ? 0 : kc_endpoint_parse(&r->ep, value, msg, msg_size)) ||
        (rc = setting(ro, sizeof(ro), "remote_read_only", NULL, db_path, msg, msg_size)) ||
        (rc = setting(cto, sizeof(cto), "remote_connect_timeout", NULL, db_path, msg,
                      msg_size)) ||
        (rc = setting(to, sizeof(to), "remote_timeout", NULL, db_path, msg, msg_size)) ||
        (rc = setting(r->prefix, sizeof(r->prefix), "remote_prefix", NULL, db_path, msg,
                      msg_size)) ||
        (rc = setting(secret, sizeof(secret), "remote_secret", NULL, db_path, msg, msg_size)))
        goto fail;
    if (ro[0])
        kc_config_bool(&r->read_only, ro);
    if (cto[0])
        kc_config_ms(&connect_ms, cto);
    if (to[0])
        kc_config_ms(&timeout_ms, to);
    if (!r->prefix[0] && kc_config_value(r->prefix, sizeof(r->prefix), "remote_prefix", NULL,
                                          db_path) == KCACHE_ENOTFOUND)
        snprintf(r->prefix, sizeof(r->prefix), "%s", KCACHE_DEFAULT_REMOTE_PREFIX);
    r->ep.connect_ms = connect_ms;
    r->ep.timeout_ms = timeout_ms;
    kc_wire_secret_init(&r->secret, secret);
    memset(secret, 0, sizeof(secret));
    if (!objstore)
        redact(r->url, sizeof(r->url), &r->ep);
    /* The back-off file sits beside the database: one per cache, shared by its processes. */
    snprintf(r->down_path, sizeof(r->down_path), "%s", db_path);
    char *dir_end = strrchr(r->down_path, '/');
    snprintf(dir_end ? dir_end + 1 : r->down_path,
             sizeof(r->down_path) - (size_t)(dir_end ? dir_end + 1 - r->down_path : 0),
             "remote-down");
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    snprintf(r->owner, sizeof(r->owner), "%s:%ld:%llx", host, (long)getpid(),
             (unsigned long long)(kc_mono_ns() ^ ((uint64_t)getpid() << 32)));
    if (kc_codec_new(&r->codec) || (!objstore && kc_redis_new(&r->backend, &r->ep))) {
        rc = kc_fmt(msg, msg_size, KCACHE_ENOMEM, "out of memory");
        goto fail;
    }
    if (objstore && (rc = open_objstore(r, value, db_path, msg, msg_size)))
        goto fail;
    *out = r;
    return 0;
fail:
    kcache_remote_close(r);
    return rc;
}

KCACHE_API void kcache_remote_close(kcache_remote *remote)
{
    if (!remote)
        return;
    if (remote->backend)
        remote->backend->ops->close(remote->backend);
    kc_codec_free(remote->codec);
    kc_buf_free(&remote->scratch);
    memset(&remote->secret, 0, sizeof(remote->secret));
    memset(&remote->ep, 0, sizeof(remote->ep));
    kc_logq_deliver(&remote->logq, NULL, NULL);
    pthread_mutex_destroy(&remote->lock);
    kc_errmsg_forget(remote);
    free(remote);
}

KCACHE_API const char *kcache_remote_errmsg(const kcache_remote *remote)
{
    kcache_remote *r = (kcache_remote *)remote; /* the lock is the handle's own */
    return kc_errmsg_thread(r, r ? r->errmsg : NULL, r ? &r->lock : NULL, "no remote");
}

KCACHE_API const char *kcache_remote_url(const kcache_remote *remote)
{
    return remote ? remote->url : "";
}

KCACHE_API int kcache_remote_read_only(const kcache_remote *remote)
{
    return remote ? remote->read_only : 1;
}

void kc_remote_log(kcache_remote *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
    va_end(ap);
    if (r->log)
        kc_logq_add(&r->logq, KCACHE_LOG_WARNING, r->errmsg);
}

void kc_remote_lock(kcache_remote *r)
{
    pthread_mutex_lock(&r->lock);
    kc_log_hold();
}

void kc_remote_unlock(kcache_remote *r)
{
    kc_logq said = kc_logq_take(&r->logq);
    pthread_mutex_unlock(&r->lock);
    kc_log_release();
    kc_logq_deliver(&said, r->log, r->log_userdata);
}

/* ---- the back-off, shared by the machine's processes ------------------- */

/*
 * Why a file: a remote that is down costs every process one timeout, and a
 * build runs thousands of short processes. The first to fail writes until
 * when the remote is left alone into `remote-down` beside the database; every
 * other process reads it before trying (one small read, on misses only).
 * The file is advisory: lost or garbled, the cost is one more timeout.
 */
static int64_t read_down_until(const kcache_remote *r)
{
    char buf[64];
    int fd = open(r->down_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strtoll(buf, NULL, 10);
}

int kc_remote_usable(kcache_remote *r)
{
    int64_t now = kc_now_ms();
    if (r->down_until_ms > now)
        return 0;
    int64_t until = read_down_until(r);
    if (until > now && until <= now + KCACHE_REMOTE_BACKOFF_S * 1000LL) {
        r->down_until_ms = until;
        return 0;
    }
    return 1;
}

void kc_remote_mark_down(kcache_remote *r)
{
    r->down_until_ms = kc_now_ms() + KCACHE_REMOTE_BACKOFF_S * 1000LL;
    char text[64], err[KC_ERRMSG_SIZE];
    int n = snprintf(text, sizeof(text), "%lld\n", (long long)r->down_until_ms);
    /* Advisory: not written (a directory others can change), the cost is one more timeout. */
    (void)kcache_file_write(r->down_path, text, (size_t)n, 0600, 0, err, sizeof(err));
}

/* Accounts for a backend failure: counted, logged, and the remote left alone when down. */
int kc_remote_failed(kcache_remote *r, int rc)
{
    kc_store_count(r->store, KC_RC_ERRORS, 1);
    if (rc == KCACHE_EIO) {
        kc_remote_mark_down(r);
        kc_remote_log(r, "%s; the remote is left alone for %d s", r->backend->errmsg,
                      KCACHE_REMOTE_BACKOFF_S);
    } else if (rc == KCACHE_EFULL) {
        /* Reads still work; only this process's pushes pause. */
        r->writes_off_until_ms = kc_now_ms() + KCACHE_REMOTE_BACKOFF_S * 1000LL;
        kc_remote_log(r, "%s", r->backend->errmsg);
    } else {
        kc_remote_log(r, "%s", r->backend->errmsg);
    }
    return rc;
}

/* ---- names ------------------------------------------------------------- */

void kc_remote_name(char *out, size_t size, const kcache_remote *r, const char *what,
                    const kcache_key *key)
{
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, key);
    snprintf(out, size, "%s%s:%s", r->prefix, what, hex);
}

/* ---- the compile path -------------------------------------------------- */

/*
 * The checks that belong to the shared tier (its format, bounds before
 * decompressing, signature, checksum: wire.c), then the store's import gate
 * (the one bundles pass: put rules, key from key material, digest) and put.
 */
int kc_remote_admit(kcache_entry **out, kcache_remote *r, const kcache_key *key,
                    const void *value, size_t size)
{
    kc_wire_entry w;
    char why[KC_ERRMSG_SIZE];
    int rc = kc_wire_decode(&w, r->codec, key, value, size, &r->secret, why, sizeof(why));
    if (rc) {
        char hex[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(hex, key);
        kc_store_count(r->store, KC_RC_REJECTED, 1);
        kc_remote_log(r, "remote entry %.16s ignored: %s", hex, why);
        return rc;
    }
    /* --- the rest is the store's: the import gate shared with bundles, then the put --- */
    rc = kc_store_admit(r->store, &w.e, why, sizeof(why));
    uint64_t saved = w.e.compile_ns;
    kc_wire_entry_free(&w);
    if (rc == KCACHE_ECORRUPT) {
        char hex[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(hex, key);
        kc_store_count(r->store, KC_RC_REJECTED, 1);
        kc_remote_log(r, "remote entry %.16s ignored: %s", hex, why);
        return rc;
    }
    if (rc == 1) {
        /* The store kept its own bytes, counted the conflict and logged it: not said twice. */
        snprintf(r->errmsg, sizeof(r->errmsg), "%s", why);
        return rc;
    }
    if (rc) {
        kc_remote_log(r, "remote entry not kept: %s", kcache_store_errmsg(r->store));
        return rc;
    }
    kc_store_count(r->store, KC_RC_SAVED_NS, saved);
    kc_store_count(r->store, KC_RC_BYTES_IN, size);
    return out ? kcache_store_get(out, r->store, key, KCACHE_GET_NO_TOUCH) : 0;
}

/*
 * One remote get, under the lock. 1: found and admitted; 0: none; 2: a value
 * that failed the checks, or a conflict with what the local store got
 * meanwhile (the caller compiles: its fresh bytes replace the local entry
 * and its push the remote's value, so a compile settles a conflict); -1:
 * the remote failed.
 */
static int fetch_locked(kcache_entry **out, kcache_remote *r, const kcache_key *key)
{
    char name[512];
    kc_remote_name(name, sizeof(name), r, "entry", key);
    int rc = r->backend->ops->get(r->backend, &r->scratch, name, KC_WIRE_MAX_VALUE);
    if (rc == KCACHE_ENOTFOUND)
        return 0;
    if (rc == KCACHE_ECORRUPT) { /* over the bound: never read off the socket */
        kc_store_count(r->store, KC_RC_REJECTED, 1);
        kc_remote_log(r, "%s", r->backend->errmsg);
        return 2;
    }
    if (rc) {
        kc_remote_failed(r, rc);
        return -1;
    }
    rc = kc_remote_admit(out, r, key, r->scratch.data, r->scratch.size);
    return rc == 0 ? 1 : rc == KCACHE_ECORRUPT || rc == 1 ? 2 : 0;
}

int kc_remote_fetch(kcache_entry **out, kcache_remote *r, const kcache_key *key)
{
    *out = NULL;
    kc_remote_lock(r);
    int found = -1;
    if (!kc_remote_usable(r))
        kc_store_count(r->store, KC_RC_SKIPPED, 1);
    else if ((found = fetch_locked(out, r, key)) == 1)
        kc_store_count(r->store, KC_RC_HITS, 1);
    else if (found == 0)
        kc_store_count(r->store, KC_RC_MISSES, 1);
    kc_remote_unlock(r);
    return found == 1 ? 1 : found == 0 ? 0 : -1;
}

int kc_remote_lease_or_wait(kcache_entry **out, int *leased, kcache_remote *r,
                            const kcache_key *key, uint64_t deadline_ns)
{
    char name[512];
    unsigned pause_ms = 50;
    *out = NULL;
    *leased = 0;
    if (r->read_only)
        return 0;
    kc_remote_name(name, sizeof(name), r, "lease", key);
    for (;;) {
        kc_remote_lock(r);
        int acquired = 0, rc = 0, found = 0;
        if (!kc_remote_usable(r))
            rc = -1;
        else if ((rc = r->backend->ops->lease(r->backend, &acquired, name, r->owner,
                                              KC_REMOTE_LEASE_TTL_MS)))
            kc_remote_failed(r, rc);
        /* Holder or not, the entry may have landed since the last look. */
        else if ((found = fetch_locked(out, r, key)) == 1)
            kc_store_count(r->store, KC_RC_HITS, 1);
        if (found == 2)
            found = 0; /* a bad value: compile (holding the lease or not) and replace it */
        if (found == 1 && acquired)
            r->backend->ops->release(r->backend, name, r->owner);
        kc_remote_unlock(r);
        if (found == 1)
            return 1;
        if (rc || found < 0)
            return 0; /* the remote failed: compile */
        if (acquired) {
            *leased = 1;
            return 0;
        }
        if (kc_mono_ns() >= deadline_ns)
            return 0;
        struct timespec ts = {0, (long)pause_ms * 1000000L};
        nanosleep(&ts, NULL);
        pause_ms = KC_MIN(pause_ms * 2, 250u);
    }
}

void kc_remote_renew(kcache_remote *r, const kcache_key *key)
{
    char name[512];
    kc_remote_name(name, sizeof(name), r, "lease", key);
    kc_remote_lock(r);
    int rc = kc_remote_usable(r) ? r->backend->ops->renew(r->backend, name, r->owner,
                                                          KC_REMOTE_LEASE_TTL_MS)
                                 : 0;
    if (rc)
        kc_remote_failed(r, rc);
    kc_remote_unlock(r);
}

void kc_remote_release(kcache_remote *r, const kcache_key *key)
{
    char name[512];
    kc_remote_name(name, sizeof(name), r, "lease", key);
    kc_remote_lock(r);
    int rc = kc_remote_usable(r) ? r->backend->ops->release(r->backend, name, r->owner) : 0;
    if (rc)
        kc_remote_failed(r, rc);
    kc_remote_unlock(r);
}

/* Encodes and sends e, under the lock. Returns the bytes sent, or a negative error. */
int64_t kc_remote_push_locked(kcache_remote *r, const kcache_entry *e, int64_t created_ms)
{
    char name[512], index[320], member[128], hex[KCACHE_KEY_HEX_SIZE];
    int rc = kc_wire_encode(&r->scratch, r->codec, KC_WIRE_PUSH_CODEC, e, created_ms,
                            &r->secret);
    if (rc)
        return rc;
    kc_remote_name(name, sizeof(name), r, "entry", &e->key);
    snprintf(index, sizeof(index), "%sindex", r->prefix);
    kcache_key_hex(hex, &e->key);
    snprintf(member, sizeof(member), "%s/%s", e->arch ? e->arch : "", hex);
    rc = r->backend->ops->put(r->backend, name, r->scratch.data, r->scratch.size, index, member,
                              created_ms);
    if (rc)
        return kc_remote_failed(r, rc);
    kc_store_count(r->store, KC_RC_PUSHES, 1);
    kc_store_count(r->store, KC_RC_BYTES_OUT, r->scratch.size);
    return (int64_t)r->scratch.size;
}

int kc_remote_writable(kcache_remote *r)
{
    return !r->read_only && r->writes_off_until_ms <= kc_now_ms();
}

void kc_remote_push(kcache_remote *r, const kcache_entry *e)
{
    kc_remote_lock(r);
    if (!kc_remote_writable(r))
        ;
    else if (!kc_remote_usable(r))
        kc_store_count(r->store, KC_RC_SKIPPED, 1);
    else
        kc_remote_push_locked(r, e, kc_now_ms());
    kc_remote_unlock(r);
}

KCACHE_API int kcache_remote_get(kcache_entry **out, kcache_remote *remote, const kcache_key *key)
{
    if (!out || !remote || !key)
        return KCACHE_EINVAL;
    return kc_remote_fetch(out, remote, key) == 1 ? 0 : KCACHE_ENOTFOUND;
}

KCACHE_API int kcache_remote_put(kcache_remote *remote, const kcache_entry *entry)
{
    if (!remote || !entry || !entry->key_material_size)
        return KCACHE_EINVAL;
    kc_remote_push(remote, entry);
    return 0;
}

/* The exported kcache_xxx_init() of the remote's versioned structs (<kcache/core.h>). */
KC_DEFINE_INIT(kcache_remote_info, sizeof(kcache_remote_info))
KC_DEFINE_INIT(kcache_transfer, offsetof(kcache_transfer, conflicts), sizeof(kcache_transfer))
