/* The remote's insides, shared by remote.c (settings, back-off, compile path) and transfer.c. */
#ifndef KC_REMOTEINT_H
#define KC_REMOTEINT_H

#include <pthread.h>

#include "remote/backend.h"
#include "remote/tier.h"
#include "remote/wire.h"
#include "store/storelib.h"
#include "util/codec.h"
#include "util/common.h"

struct kcache_remote {
    pthread_mutex_t lock;
    kcache_store *store; /* borrowed */
    kc_backend *backend;
    kc_endpoint ep;
    char url[512];       /* redacted */
    char prefix[256];
    char owner[128];     /* this process, in leases */
    char down_path[4096];
    int read_only;
    int64_t down_until_ms;      /* left alone until (this process's view) */
    int64_t writes_off_until_ms; /* the server refused a write (full) */
    kc_wire_secret secret;
    kc_codec_ctx *codec;
    kc_buf scratch;
    kcache_log_fn log;
    void *log_userdata;
    kc_logq logq; /* said under the lock, delivered by kc_remote_unlock() */
    char errmsg[KC_ERRMSG_SIZE];
};

/*
 * Sets the message (and logs it as a warning when there is a log callback),
 * under the lock: the log callback hears it once kc_remote_unlock() lets go.
 */
void kc_remote_log(kcache_remote *r, const char *fmt, ...) KC_PRINTF(2, 3);
/*
 * The remote's lock; every lock and unlock of r->lock is these. Held, it
 * holds back every log line this thread would deliver (the store's too: the
 * remote calls into its store under it, and a compiler gives both the same
 * log callback, which may use the remote); kc_remote_unlock() lets go, then
 * delivers them and the remote's own: no callback runs under the lock.
 */
void kc_remote_lock(kcache_remote *r);
void kc_remote_unlock(kcache_remote *r);
/* Whether the remote may be tried now (no back-off in place, here or in the file). */
int kc_remote_usable(kcache_remote *r);
int kc_remote_writable(kcache_remote *r);
void kc_remote_mark_down(kcache_remote *r);
/* Counts and logs a backend failure, leaving the remote alone if it is down. Returns rc. */
int kc_remote_failed(kcache_remote *r, int rc);
/* "<prefix><what>:<key hex>" */
void kc_remote_name(char *out, size_t size, const kcache_remote *r, const char *what,
                    const kcache_key *key);
/*
 * Checks a value and puts it into the store; *out (when not NULL): the
 * store's copy. Returns 0; 1 for a conflict (the store holds the key with
 * other bytes and keeps them: counted and logged with both digests);
 * KCACHE_ECORRUPT for a value refused; or the store's error.
 */
int kc_remote_admit(kcache_entry **out, kcache_remote *r, const kcache_key *key,
                    const void *value, size_t size);
int64_t kc_remote_push_locked(kcache_remote *r, const kcache_entry *e, int64_t created_ms);


#endif
