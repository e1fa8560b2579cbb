/*
 * What the shared tier needs from a server: get, put, and a lease. Kept this
 * small so that an HTTP backend (as ccache's and sccache's) can be added
 * beside redis.c without touching the rest (objstore.c: S3 and HTTP). Names are whole keys (the prefix
 * applied); values are opaque bytes (wire.h).
 *
 * Every call returns 0 or: KCACHE_ENOTFOUND (get: no such value),
 * KCACHE_EIO (the server cannot be reached, timed out, or refused us: the
 * caller leaves it alone for a while), KCACHE_EFULL (the server refuses
 * writes), KCACHE_ECORRUPT (get: a value over max bytes), with a one-line
 * message in the backend's errmsg. A backend is used by one thread at a time.
 */
#ifndef KC_BACKEND_H
#define KC_BACKEND_H

#include "kcache/remote.h"
#include "util/common.h"

typedef struct kc_backend kc_backend;

struct kc_backend_ops {
    int (*get)(kc_backend *b, kc_buf *out, const char *name, size_t max);
    /* Stores a value and records member in the index with score (ms since the epoch). */
    int (*put)(kc_backend *b, const char *name, const void *data, size_t size,
               const char *index, const char *member, int64_t score);
    /* Takes the lease called name for owner if free (*acquired), expiring after ttl_ms. */
    int (*lease)(kc_backend *b, int *acquired, const char *name, const char *owner,
                 unsigned ttl_ms);
    /* Extends owner's lease; a lease lost to expiry is not taken back. */
    int (*renew)(kc_backend *b, const char *name, const char *owner, unsigned ttl_ms);
    int (*release)(kc_backend *b, const char *name, const char *owner);
    /* Members of the index with a score at or after since, in chunks. */
    int (*index)(kc_backend *b, const char *index, int64_t since,
                 int (*fn)(void *ud, const char *member), void *ud);
    int (*info)(kc_backend *b, kcache_remote_info *out, const char *index);
    void (*close)(kc_backend *b);
};

/* An index whose members do not say the arch ("/<key hex>"): pull --arch cannot filter. */
#define KC_BACKEND_INDEX_NO_ARCH 1u

struct kc_backend {
    const struct kc_backend_ops *ops;
    unsigned flags; /* KC_BACKEND_ */
    char errmsg[KC_ERRMSG_SIZE];
};

/*
 * Says fmt in b's errmsg on one line (control bytes shown as spaces: a server
 * chooses some of the text) and returns code.
 */
int kc_backend_fail(kc_backend *b, int code, const char *fmt, ...) KC_PRINTF(3, 4);

/* Where and how to reach a server, from remote = URL and the timeouts. */
typedef struct kc_endpoint {
    char host[256];
    int port;
    char user[128];
    char password[256];
    int db;
    unsigned connect_ms, timeout_ms;
} kc_endpoint;

/* Parses redis://[user:password@]host[:port][/db]. Returns 0 or KCACHE_EINVAL (msg says why). */
int kc_endpoint_parse(kc_endpoint *out, const char *url, char *msg, size_t msg_size);

/* A Redis backend (redis.c); nothing is connected until the first call. */
int kc_redis_new(kc_backend **out, const kc_endpoint *ep);

#endif
