/*
 * This file implements the object-storage backends (backend.h) through
 * libcurl: an S3-compatible bucket (remote = s3://BUCKET/PREFIX, requests
 * signed with AWS Signature V4 by libcurl) and a plain HTTP server
 * (remote = http(s)://HOST/PATH: GET, PUT and HEAD of one object per entry,
 * as nginx's WebDAV module, bazel-remote or a bucket's HTTP gateway serve).
 * The only file that knows libcurl, which it opens at run time (below);
 * the addresses and credentials are objaddr.c's.
 *
 * The guarantees are the Redis backend's:
 *   - One deadline per operation (remote_timeout): a backend call must be
 *     over by then, connecting, TLS, every request it makes and every byte
 *     of every reply included (CURLOPT_TIMEOUT_MS of what is left).
 *   - A value's size is bounded before it is read: a declared length over
 *     the bound ends the transfer before the body (CURLOPT_MAXFILESIZE), and
 *     a body without one is cut where it passes the bound. An error reply's
 *     body is kept to its first KC_OBJ_ERR_BODY bytes.
 *   - One libcurl handle per backend, kept: a second request reuses the
 *     connection (no new TCP or TLS handshake). A backend is a remote's,
 *     and a process has one remote: one handle per process.
 *   - Redirects are not followed (the credentials stay with the server named).
 *   - HTTPS is always verified: against the system's CAs, or remote_ca's
 *     alone (a server whose certificate a CA of one's own signed).
 *
 * What these servers lack, decided:
 *   - Fleet lease. S3: a lease object under the prefix, taken with a
 *     conditional PUT (If-None-Match: *, which S3 and SeaweedFS honour);
 *     one older than its ttl by the object's Last-Modified is taken over.
 *     A server that ignores the condition makes every machine a holder:
 *     one compile per machine, never a wrong kernel (the lease is advisory,
 *     tier.h). HTTP: no lease at all (nginx's PUT has no condition); the
 *     local lease still keeps one compile per machine.
 *   - Index. S3: `remote pull` lists the prefix (ListObjectsV2, a page of
 *     1000 an operation), never the hit path; the listing does not say a
 *     kernel's arch, so pull --arch is refused for it (transfer.c). HTTP:
 *     no listing, so pull says it is not supported; hits and pushes need none.
 *   - Eviction is the bucket's (a lifecycle rule) or the server's.
 */
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remote/objaddr.h"

/* What a reply other than a value may hold: a page of a listing. */
#define KC_OBJ_MAX_SMALL_REPLY ((size_t)4 << 20)
/* What is kept of an error reply, for its message. */
#define KC_OBJ_ERR_BODY 1024

struct objstore {
    kc_backend base; /* first */
    kc_objaddr addr;
    CURL *curl;
    struct curl_slist *headers;      /* every request's */
    struct curl_slist *if_none_match; /* the same and If-None-Match: * */
    uint64_t deadline_ns;
};

/* One request's reply: the body into out (at most max) when 2xx, else its first bytes. */
struct reply {
    struct objstore *o;
    kc_buf *out;
    size_t max;
    int too_big;
    int no_memory;
    size_t discarded;
    long status;
    char err[KC_OBJ_ERR_BODY + 1];
    size_t err_len;
    char server[32];
};

/*
 * libcurl, opened at the first object-storage remote: a process without one
 * (a local hit, a program under the drop-in NVRTC) does not load it and the
 * thirty libraries it needs. Its functions, by the names curl.h gives them.
 */
static struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *c, CURLoption option, ...);
    CURLcode (*easy_perform)(CURL *c);
    CURLcode (*easy_getinfo)(CURL *c, CURLINFO info, ...);
    void (*easy_cleanup)(CURL *c);
    const char *(*easy_strerror)(CURLcode rc);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *line);
    void (*slist_free_all)(struct curl_slist *list);
} K;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_missing[256]; /* why libcurl cannot be used; "" when it can */

static void curl_open(void)
{
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(curl_missing, sizeof(curl_missing),
                 "libcurl cannot be loaded (apt-get install libcurl4): %s", dlerror());
        return;
    }
    struct {
        void *fn;
        const char *name;
    } want[] = {
        {&K.global_init, "curl_global_init"},     {&K.easy_init, "curl_easy_init"},
        {&K.easy_setopt, "curl_easy_setopt"},     {&K.easy_perform, "curl_easy_perform"},
        {&K.easy_getinfo, "curl_easy_getinfo"},   {&K.easy_cleanup, "curl_easy_cleanup"},
        {&K.easy_strerror, "curl_easy_strerror"}, {&K.slist_append, "curl_slist_append"},
        {&K.slist_free_all, "curl_slist_free_all"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        void *sym = dlsym(h, want[i].name);
        if (!sym) {
            snprintf(curl_missing, sizeof(curl_missing),
                     "libcurl.so.4 has no %s: install libcurl 7.75 or later", want[i].name);
            return;
        }
        memcpy(want[i].fn, &sym, sizeof(sym)); /* a function pointer from dlsym's */
    }
    CURLcode rc = K.global_init(CURL_GLOBAL_DEFAULT);
    if (rc)
        snprintf(curl_missing, sizeof(curl_missing), "libcurl cannot start: %s",
                 K.easy_strerror(rc));
}

/* A failure said in the backend's errmsg (backend.h). */
#define fail(x, ...) kc_backend_fail(&(x)->base, __VA_ARGS__)

/* The operation under way must be over by now + remote_timeout. */
static void begin(struct objstore *o)
{
    o->deadline_ns = kc_mono_ns() + (uint64_t)o->addr.timeout_ms * 1000000u;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct reply *x = ud;
    size_t len = size * n;
    if (!x->status)
        K.easy_getinfo(x->o->curl, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status >= 200 && x->status < 300 && !x->out) {
        x->discarded += len; /* a PUT's or DELETE's answer: not ours to keep */
        return x->discarded > x->max ? 0 : len;
    }
    if (x->status >= 200 && x->status < 300) {
        if (len > x->max - KC_MIN(x->max, x->out->size)) {
            x->too_big = 1;
            return 0; /* ends the transfer: the rest is never read */
        }
        if (kc_buf_append(x->out, p, len)) {
            x->no_memory = 1;
            return 0;
        }
        return len;
    }
    size_t keep = KC_MIN(len, KC_OBJ_ERR_BODY - x->err_len);
    memcpy(x->err + x->err_len, p, keep);
    x->err_len += keep;
    x->err[x->err_len] = '\0';
    return keep == len ? len : 0; /* enough of an error to say it */
}

/* Copies the printable ASCII of [p, p + n) into out: what a server says is shown safely. */
static void printable(char *out, size_t size, const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < size; i++)
        if (p[i] >= 0x20 && p[i] < 0x7f)
            out[k++] = p[i];
    out[k] = '\0';
}

/* Headers are not NUL-terminated: each is read within its length. */
static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct reply *x = ud;
    size_t len = size * n;
    if (len > 7 && !strncasecmp(p, "server:", 7)) {
        size_t v = 7;
        while (v < len && p[v] == ' ')
            v++;
        size_t end = v;
        while (end < len && p[end] != '\r' && p[end] != '\n')
            end++;
        printable(x->server, sizeof(x->server), p + v, end - v);
    }
    return len;
}

/* The S3 error code of an error reply (" <Code>"'s text), or "". */
static void error_code(char *out, size_t size, const struct reply *x)
{
    out[0] = '\0';
    const char *b = strstr(x->err, "<Code>");
    const char *e = b ? strstr(b, "</Code>") : NULL;
    if (b && e && e - b - 6 < 64 && size > 1) {
        out[0] = ' ';
        printable(out + 1, size - 1, b + 6, (size_t)(e - b - 6));
    }
}

/* What an HTTP status other than 2xx (and a get's 404) means for the caller. */
static int status_error(struct objstore *o, const struct reply *x, const char *what)
{
    char code[80];
    error_code(code, sizeof(code), x);
    const char *who = o->addr.shown;
    if (x->status == 401 || x->status == 403)
        return fail(o, KCACHE_EIO, "remote %s: %s refused (HTTP %ld%s): %s", who, what,
                    x->status, code,
                    o->addr.s3 ? "check the credentials (AWS_ACCESS_KEY_ID and "
                                 "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and s3_region"
                               : "check remote_token or the user and password in remote");
    if (x->status == 413 || x->status == 507)
        return fail(o, KCACHE_EFULL, "remote %s refuses writes (HTTP %ld%s): give it room "
                    "(nginx: client_max_body_size)", who, x->status, code);
    if (x->status >= 300 && x->status < 400)
        return fail(o, KCACHE_EIO, "remote %s: %s: HTTP %ld%s, a redirect, not followed: "
                    "give the server's own address (s3_endpoint, s3_region)", who, what,
                    x->status, code);
    return fail(o, KCACHE_EIO, "remote %s: %s: HTTP %ld%s", who, what, x->status, code);
}

/*
 * Runs the request the handle is set up for, within what is left of the
 * operation. Returns 0 with x->status (any status: the caller decides), or
 * KCACHE_EIO (no reply), KCACHE_ECORRUPT (a value over the bound), KCACHE_ENOMEM.
 */
static int perform(struct objstore *o, struct reply *x, const char *url, const char *what)
{
    CURL *c = o->curl;
    char errbuf[CURL_ERROR_SIZE] = "";
    uint64_t now = kc_mono_ns();
    long left_ms = o->deadline_ns > now ? (long)((o->deadline_ns - now) / 1000000) : 0;
    if (left_ms <= 0)
        return fail(o, KCACHE_EIO, "remote %s: %s: no answer within %u ms (remote_timeout)",
                    o->addr.shown, what, o->addr.timeout_ms);
    K.easy_setopt(c, CURLOPT_URL, url);
    K.easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    K.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    K.easy_setopt(c, CURLOPT_WRITEDATA, x);
    K.easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    K.easy_setopt(c, CURLOPT_HEADERDATA, x);
    K.easy_setopt(c, CURLOPT_TIMEOUT_MS, left_ms);
    K.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, KC_MIN(left_ms, (long)o->addr.connect_ms));
    K.easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->max);
    CURLcode rc = K.easy_perform(c);
    K.easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
    if (!x->status)
        K.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->no_memory)
        return fail(o, KCACHE_ENOMEM, "remote %s: %s: out of memory", o->addr.shown, what);
    if (x->too_big || rc == CURLE_FILESIZE_EXCEEDED) {
        curl_off_t n = -1;
        K.easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &n);
        if (n > 0)
            return fail(o, KCACHE_ECORRUPT, "remote value of %lld bytes is over the bound of %zu",
                        (long long)n, x->max);
        return fail(o, KCACHE_ECORRUPT, "remote value is over the bound of %zu bytes", x->max);
    }
    /* Ended before the operation's deadline: the connection's own, which holds
     * the TLS handshake (and the first loading of the system's CAs) too. */
    if (rc == CURLE_OPERATION_TIMEDOUT && (long)o->addr.connect_ms < left_ms &&
        kc_mono_ns() + 20000000u < o->deadline_ns)
        return fail(o, KCACHE_EIO, "remote %s: %s: not connected within %u ms, TLS "
                    "handshake included (remote_connect_timeout)", o->addr.shown, what,
                    o->addr.connect_ms);
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return fail(o, KCACHE_EIO, "remote %s: %s: no answer within %u ms (remote_timeout)",
                    o->addr.shown, what, o->addr.timeout_ms);
    if (rc == CURLE_WRITE_ERROR && (x->status >= 300 || !x->out))
        return 0; /* a reply cut where it passed what we keep: its status says it */
    /* A chain that ends at no CA we trust (not a name that does not match). */
    if (rc == CURLE_PEER_FAILED_VERIFICATION && strstr(errbuf, "certificate problem"))
        return fail(o, KCACHE_EIO, "remote %s: %s: %s: the server's certificate is not "
                    "trusted: set remote_ca (KCACHE_REMOTE_CA) to the certificate of the CA "
                    "that signed it", o->addr.shown, what, errbuf);
    if (rc == CURLE_SSL_CACERT_BADFILE && o->addr.ca[0])
        return fail(o, KCACHE_EIO, "remote %s: %s: remote_ca %s holds no CA certificate "
                    "(PEM) that can be read: check the path", o->addr.shown, what, o->addr.ca);
    if (rc)
        return fail(o, KCACHE_EIO, "remote %s: %s: %s", o->addr.shown, what,
                    errbuf[0] ? errbuf : K.easy_strerror(rc));
    return 0;
}

/* The handle set for one method; the body (a PUT's) is borrowed until the request ends. */
static void method(struct objstore *o, const char *verb, const void *body, size_t size,
                   int if_none_match)
{
    CURL *c = o->curl;
    K.easy_setopt(c, CURLOPT_HTTPGET, 1L); /* back to a GET: no body, no custom verb */
    K.easy_setopt(c, CURLOPT_NOBODY, !strcmp(verb, "HEAD") ? 1L : 0L);
    K.easy_setopt(c, CURLOPT_CUSTOMREQUEST, NULL);
    if (!strcmp(verb, "PUT")) {
        K.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)size);
        K.easy_setopt(c, CURLOPT_POSTFIELDS, body);
        K.easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    } else if (!strcmp(verb, "DELETE")) {
        K.easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    K.easy_setopt(c, CURLOPT_HTTPHEADER, if_none_match ? o->if_none_match : o->headers);
}

static int obj_get(kc_backend *b, kc_buf *out, const char *name, size_t max)
{
    struct objstore *o = (struct objstore *)b;
    char url[KC_OBJ_URL_SIZE];
    struct reply x = {.o = o, .out = out, .max = max};
    if (kc_objaddr_url(url, sizeof(url), &o->addr, name))
        return fail(o, KCACHE_EINVAL, "remote %s: the name is too long", o->addr.shown);
    out->size = 0;
    begin(o);
    method(o, "GET", NULL, 0, 0);
    int rc = perform(o, &x, url, "get");
    if (rc)
        return rc;
    if (x.status == 404)
        return KCACHE_ENOTFOUND;
    if (x.status != 200)
        return status_error(o, &x, "get");
    return 0;
}

/* One PUT; *status for the caller when it wants to read 412 itself (lease). */
static int put_object(struct objstore *o, long *status, const char *name, const void *data,
                      size_t size, int if_none_match, const char *what)
{
    char url[KC_OBJ_URL_SIZE];
    struct reply x = {.o = o, .max = KC_OBJ_MAX_SMALL_REPLY};
    if (kc_objaddr_url(url, sizeof(url), &o->addr, name))
        return fail(o, KCACHE_EINVAL, "remote %s: the name is too long", o->addr.shown);
    method(o, "PUT", data, size, if_none_match);
    int rc = perform(o, &x, url, what);
    if (rc)
        return rc;
    if (status)
        *status = x.status;
    if (x.status >= 200 && x.status < 300)
        return 0;
    if (status && (x.status == 412 || x.status == 409 || x.status == 501))
        return 0;
    return status_error(o, &x, what);
}

static int obj_put(kc_backend *b, const char *name, const void *data, size_t size,
                   const char *index, const char *member, int64_t score)
{
    /* The bucket's listing is the index (S3); a plain server has none. */
    (void)index, (void)member, (void)score;
    struct objstore *o = (struct objstore *)b;
    begin(o);
    return put_object(o, NULL, name, data, size, 0, "put");
}

/* GET of a small object (a lease's owner) into buf; *status 404 when there is none. */
static int get_small(struct objstore *o, long *status, long *modified, char *buf, size_t size,
                     const char *name, const char *what)
{
    char url[KC_OBJ_URL_SIZE];
    kc_buf body = {0};
    struct reply x = {.o = o, .out = &body, .max = KC_OBJ_ERR_BODY};
    buf[0] = '\0';
    if (kc_objaddr_url(url, sizeof(url), &o->addr, name))
        return fail(o, KCACHE_EINVAL, "remote %s: the name is too long", o->addr.shown);
    method(o, "GET", NULL, 0, 0);
    K.easy_setopt(o->curl, CURLOPT_FILETIME, 1L);
    int rc = perform(o, &x, url, what);
    K.easy_setopt(o->curl, CURLOPT_FILETIME, 0L);
    if (!rc && x.status == 200) {
        size_t n = KC_MIN(body.size, size - 1); /* longer: not an owner of ours */
        memcpy(buf, body.data ? (const char *)body.data : "", n);
        buf[n] = '\0';
        K.easy_getinfo(o->curl, CURLINFO_FILETIME, modified);
    }
    kc_buf_free(&body);
    if (rc)
        return rc == KCACHE_ECORRUPT ? 0 : rc; /* not a lease of ours: someone else's */
    *status = x.status;
    if (x.status != 200 && x.status != 404)
        return status_error(o, &x, what);
    return 0;
}

static int delete_object(struct objstore *o, const char *name, const char *what)
{
    char url[KC_OBJ_URL_SIZE];
    struct reply x = {.o = o, .max = KC_OBJ_MAX_SMALL_REPLY};
    if (kc_objaddr_url(url, sizeof(url), &o->addr, name))
        return fail(o, KCACHE_EINVAL, "remote %s: the name is too long", o->addr.shown);
    method(o, "DELETE", NULL, 0, 0);
    int rc = perform(o, &x, url, what);
    if (rc || (x.status >= 200 && x.status < 300) || x.status == 404)
        return rc;
    return status_error(o, &x, what);
}

static int obj_lease(kc_backend *b, int *acquired, const char *name, const char *owner,
                     unsigned ttl_ms)
{
    struct objstore *o = (struct objstore *)b;
    *acquired = 1;
    if (!o->addr.s3)
        return 0; /* no fleet lease over plain HTTP (above) */
    *acquired = 0;
    begin(o); /* taking, and taking over an expired one, is one operation */
    for (int attempt = 0; attempt < 2; attempt++) {
        long status = 0, modified = -1;
        char held[128];
        int rc = put_object(o, &status, name, owner, strlen(owner), 1, "lease");
        *acquired = !rc && (status < 300 || status == 501);
        if (rc || *acquired)
            return rc; /* taken, or a server without conditional writes: a holder each */
        if ((rc = get_small(o, &status, &modified, held, sizeof(held), name, "lease")))
            return rc;
        /* Gone meanwhile: try again; older than its ttl (the server's clock wrote
         * Last-Modified, ours reads it: the slack covers skew): take it over. */
        if (status == 200 && (modified < 0 || kc_now_ms() - (int64_t)modified * 1000 <=
                                                  (int64_t)ttl_ms + 5000))
            return 0;
        if (status == 200 && (rc = delete_object(o, name, "lease")))
            return rc;
    }
    return 0;
}

/* Whether owner holds the lease called name (0, *held) or the server failed (an error). */
static int held_by(struct objstore *o, int *held, const char *name, const char *owner,
                   const char *what)
{
    long status = 0, modified = -1;
    char holder[128];
    *held = 0;
    begin(o);
    int rc = get_small(o, &status, &modified, holder, sizeof(holder), name, what);
    *held = !rc && status == 200 && !strcmp(holder, owner);
    return rc;
}

/* Only the owner renews or drops a lease: a lease taken over stays its new owner's. */
static int obj_renew(kc_backend *b, const char *name, const char *owner, unsigned ttl_ms)
{
    (void)ttl_ms; /* a PUT makes it new: Last-Modified is its age */
    struct objstore *o = (struct objstore *)b;
    int held = 0, rc = o->addr.s3 ? held_by(o, &held, name, owner, "lease renewal") : 0;
    return rc || !held ? rc : put_object(o, NULL, name, owner, strlen(owner), 0, "lease renewal");
}

static int obj_release(kc_backend *b, const char *name, const char *owner)
{
    struct objstore *o = (struct objstore *)b;
    int held = 0, rc = o->addr.s3 ? held_by(o, &held, name, owner, "lease release") : 0;
    return rc || !held ? rc : delete_object(o, name, "lease release");
}

/* "2026-11-29T07:59:45.000Z" as ms since the epoch; -1 when it is not that. */
static int64_t iso_ms(const char *s)
{
    struct tm tm = {0};
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec) != 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000;
}

/* The text between <tag> and </tag> in [p, end), or NULL; *len its length. */
static const char *xml_field(const char *p, const char *end, const char *tag, size_t *len)
{
    char open[48], close[48];
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    const char *b = strstr(p, open);
    if (!b || b >= end)
        return NULL;
    b += strlen(open);
    const char *e = strstr(b, close);
    if (!e || e > end)
        return NULL;
    *len = (size_t)(e - b);
    return b;
}

/* One page's members ("/<key hex>") modified at or after since, to fn; *token the next page's. */
static int list_page(const char *xml, const char *prefix, int64_t since, char *token,
                     size_t token_size, int (*fn)(void *ud, const char *member), void *ud)
{
    size_t plen = strlen(prefix), len;
    const char *p = xml;
    int rc = 0;
    while (!rc && (p = strstr(p, "<Contents>"))) {
        const char *end = strstr(p, "</Contents>");
        if (!end)
            break;
        const char *key = xml_field(p, end, "Key", &len);
        const char *mod = xml_field(p, end, "LastModified", &len);
        char member[KCACHE_KEY_HEX_SIZE + 2];
        size_t klen = 0;
        key = xml_field(p, end, "Key", &klen);
        if (key && klen > plen && !strncmp(key, prefix, plen) &&
            (!since || (mod && iso_ms(mod) >= since))) {
            len = klen;
            if (len - plen == KCACHE_KEY_HEX_SIZE - 1) {
                snprintf(member, sizeof(member), "/%.*s", (int)(len - plen), key + plen);
                rc = fn(ud, member);
            }
        }
        p = end;
    }
    const char *t = xml_field(xml, xml + strlen(xml), "NextContinuationToken", &len);
    const char *more = xml_field(xml, xml + strlen(xml), "IsTruncated", &len);
    token[0] = '\0';
    if (t && more && !strncmp(more, "true", 4) && (size_t)(strchr(t, '<') - t) < token_size)
        snprintf(token, token_size, "%.*s", (int)(strchr(t, '<') - t), t);
    return rc;
}

static int obj_index(kc_backend *b, const char *index, int64_t since,
                     int (*fn)(void *ud, const char *member), void *ud)
{
    struct objstore *o = (struct objstore *)b;
    if (!o->addr.s3)
        return fail(o, KCACHE_ENOTSUP, "remote %s: a plain HTTP server has no listing, so "
                    "there is nothing to pull: hits take entries as they are needed",
                    o->addr.shown);
    /* The index's name is "<prefix>index"; the entries are "<prefix>entry:<hex>". */
    char prefix[512], url[KC_OBJ_URL_SIZE], token[1024] = "";
    size_t n = strlen(index);
    snprintf(prefix, sizeof(prefix), "%.*sentry:", (int)(n >= 5 ? n - 5 : 0), index);
    char object_prefix[KC_OBJ_URL_SIZE];
    kc_objaddr_key(object_prefix, sizeof(object_prefix), &o->addr, prefix);
    kc_buf body = {0};
    int rc = 0;
    do {
        if (kc_objaddr_list_url(url, sizeof(url), &o->addr, object_prefix, token)) {
            rc = fail(o, KCACHE_EINVAL, "remote %s: the prefix is too long", o->addr.shown);
            break;
        }
        struct reply x = {.o = o, .out = &body, .max = KC_OBJ_MAX_SMALL_REPLY};
        body.size = 0;
        begin(o); /* a page is an operation: a long listing is many */
        method(o, "GET", NULL, 0, 0);
        if ((rc = perform(o, &x, url, "list")))
            break;
        if (x.status != 200) {
            rc = status_error(o, &x, "list");
            break;
        }
        if ((rc = kc_buf_append(&body, "", 1)))
            break;
        rc = list_page((const char *)body.data, object_prefix, since, token, sizeof(token), fn,
                       ud);
    } while (!rc && token[0]);
    kc_buf_free(&body);
    return rc;
}

static int obj_info(kc_backend *b, kcache_remote_info *out, const char *index)
{
    (void)index; /* counting would list the bucket: not for a check */
    struct objstore *o = (struct objstore *)b;
    char url[KC_OBJ_URL_SIZE];
    if (kc_objaddr_url(url, sizeof(url), &o->addr, "kcache-check"))
        return fail(o, KCACHE_EINVAL, "remote %s: the name is too long", o->addr.shown);
    begin(o); /* the whole check is one operation */
    struct reply x = {.o = o, .max = KC_OBJ_MAX_SMALL_REPLY};
    method(o, "HEAD", NULL, 0, 0);
    /* A check connects afresh, so that it sees what a new process would. */
    K.easy_setopt(o->curl, CURLOPT_FRESH_CONNECT, 1L);
    int rc = perform(o, &x, url, "check");
    K.easy_setopt(o->curl, CURLOPT_FRESH_CONNECT, 0L);
    if (rc)
        return rc;
    /* The round trip alone: the connection (and TLS) happened before t1. */
    struct reply y = {.o = o, .max = KC_OBJ_MAX_SMALL_REPLY};
    uint64_t t1 = kc_mono_ns();
    if ((rc = perform(o, &y, url, "check")))
        return rc;
    out->latency_ns = kc_mono_ns() - t1;
    if (y.status != 404 && (y.status < 200 || y.status >= 300))
        return status_error(o, &y, "check");
    snprintf(out->server_version, sizeof(out->server_version), "%s",
             y.server[0] ? y.server : "unnamed");
    snprintf(out->policy, sizeof(out->policy), "%s",
             o->addr.s3 ? "bucket lifecycle" : "the server's");
    out->authenticated = o->addr.authenticated;
    return 0;
}

static void obj_close(kc_backend *b)
{
    struct objstore *o = (struct objstore *)b;
    if (o->curl)
        K.easy_cleanup(o->curl);
    K.slist_free_all(o->headers);
    K.slist_free_all(o->if_none_match);
    kc_objaddr_forget(&o->addr);
    free(o);
}

static const struct kc_backend_ops obj_ops = {
    obj_get, obj_put, obj_lease, obj_renew, obj_release, obj_index, obj_info, obj_close,
};

/* list with line appended; NULL (the list freed) when out of memory. */
static struct curl_slist *kc_slist_add(struct curl_slist *list, const char *line)
{
    struct curl_slist *grown = K.slist_append(list, line);
    if (!grown)
        K.slist_free_all(list);
    return grown;
}

/* The options every request of the handle shares; 0 or KCACHE_ENOMEM. */
static int setup(struct objstore *o)
{
    CURL *c = o->curl;
    const kc_objaddr *a = &o->addr;
    K.easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    K.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    K.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    K.easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    K.easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (a->ca[0]) { /* these CAs alone, not the system's as well */
        K.easy_setopt(c, CURLOPT_CAINFO, a->ca);
        K.easy_setopt(c, CURLOPT_CAPATH, NULL);
    }
    K.easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    K.easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    K.easy_setopt(c, CURLOPT_USERAGENT, "kcache");
    if (a->s3 && a->access_key[0]) {
        K.easy_setopt(c, CURLOPT_AWS_SIGV4, a->sigv4);
        K.easy_setopt(c, CURLOPT_USERNAME, a->access_key);
        K.easy_setopt(c, CURLOPT_PASSWORD, a->secret_key);
    } else if (a->user[0] || a->password[0]) {
        K.easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        K.easy_setopt(c, CURLOPT_USERNAME, a->user);
        K.easy_setopt(c, CURLOPT_PASSWORD, a->password);
    } else if (a->token[0]) {
        K.easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        K.easy_setopt(c, CURLOPT_XOAUTH2_BEARER, a->token);
    }
    /* S3: the body is not hashed into the signature (TLS and the entry's own
     * checksum and signature cover it), as the AWS SDKs do over HTTPS. An
     * empty "Expect:" to save 100-continue's round trip would be signed by
     * libcurl 7.88 but not sent: refused, so entries over 1 MiB pay it. */
    const char *base[] = {a->s3 ? "x-amz-content-sha256: UNSIGNED-PAYLOAD" : NULL};
    char session[sizeof(a->session_token) + 32];
    snprintf(session, sizeof(session), "x-amz-security-token: %s", a->session_token);
    for (int both = 0; both < 2; both++) {
        struct curl_slist **list = both ? &o->if_none_match : &o->headers;
        for (size_t i = 0; i < 1; i++)
            if (base[i] && !(*list = kc_slist_add(*list, base[i])))
                return KCACHE_ENOMEM;
        if (a->s3 && a->session_token[0] && !(*list = kc_slist_add(*list, session)))
            return KCACHE_ENOMEM;
        if (both && !(*list = kc_slist_add(*list, "If-None-Match: *")))
            return KCACHE_ENOMEM;
    }
    memset(session, 0, sizeof(session));
    return 0;
}

int kc_objstore_new(kc_backend **out, const kc_objaddr *addr, char *msg, size_t msg_size)
{
    pthread_once(&curl_once, curl_open);
    if (curl_missing[0])
        return kc_fmt(msg, msg_size, KCACHE_EIO, "remote %s: %s", addr->shown, curl_missing);
    struct objstore *o = kc_calloc(1, sizeof(*o));
    if (!o)
        return kc_fmt(msg, msg_size, KCACHE_ENOMEM, "out of memory");
    o->base.ops = &obj_ops;
    o->base.flags = addr->s3 ? KC_BACKEND_INDEX_NO_ARCH : 0;
    o->addr = *addr;
    if (!(o->curl = K.easy_init()) || setup(o)) {
        obj_close(&o->base);
        return kc_fmt(msg, msg_size, KCACHE_ENOMEM, "out of memory");
    }
    *out = &o->base;
    return 0;
}
