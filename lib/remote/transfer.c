/* The tools' calls on the remote: check the connection, push and pull many entries. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote/remoteint.h"

void kc_remote_set_log(kcache_remote *r, kcache_log_fn log, void *userdata)
{
    r->log = log;
    r->log_userdata = userdata;
}

static int backend_error(kcache_remote *r, int rc)
{
    kc_remote_failed(r, rc);
    return rc;
}

/* A failure's message noted for the calling thread (util/common.h: kc_errmsg_note()). */
static int noted(kcache_remote *r, int rc)
{
    if (rc) {
        kc_remote_lock(r);
        kc_errmsg_note(r, r->errmsg);
        kc_remote_unlock(r);
    }
    return rc;
}

/* 0, or KCACHE_EINVAL with the one message for a struct of an unknown version. */
static int known_version(kcache_remote *r, const char *type, unsigned version, unsigned max)
{
    char msg[KC_ERRMSG_SIZE];
    if (!kc_version_check(msg, sizeof(msg), type, version, max))
        return 0;
    kc_remote_lock(r);
    snprintf(r->errmsg, sizeof(r->errmsg), "%s", msg);
    kc_remote_unlock(r);
    return noted(r, KCACHE_EINVAL);
}

KCACHE_API int kcache_remote_check(kcache_remote_info *out, kcache_remote *remote)
{
    if (!remote || !out)
        return KCACHE_EINVAL;
    if (known_version(remote, "kcache_remote_info", out->version, KCACHE_REMOTE_INFO_VERSION))
        return KCACHE_EINVAL;
    kcache_remote_info info = {KCACHE_REMOTE_INFO_VERSION};
    char index[320];
    snprintf(index, sizeof(index), "%sindex", remote->prefix);
    kc_remote_lock(remote);
    int64_t left = remote->down_until_ms > 0 ? remote->down_until_ms - kc_now_ms() : 0;
    kc_remote_usable(remote); /* reads the file into down_until_ms */
    left = KC_MAX(left, remote->down_until_ms - kc_now_ms());
    info.down_for_s = left > 0 ? (int)((left + 999) / 1000) : 0;
    int rc = remote->backend->ops->info(remote->backend, &info, index);
    if (rc) {
        snprintf(remote->errmsg, sizeof(remote->errmsg), "%s", remote->backend->errmsg);
    } else {
        /* It answers: compiles on this machine may use it again now. */
        if (info.down_for_s)
            unlink(remote->down_path);
        remote->down_until_ms = 0;
        info.refuses_writes = !strcmp(info.policy, "noeviction") && info.maxmemory &&
                              info.used_memory >= info.maxmemory - info.maxmemory / 20;
    }
    kc_remote_unlock(remote);
    size_t n = KC_MIN(sizeof(info), sizeof(*out)); /* an older caller's struct may be shorter */
    memcpy(out, &info, n);
    return noted(remote, rc);
}

struct walk {
    kcache_remote *r;
    const kcache_filter *filter;
    kcache_key *keys;
    size_t n, cap;
};

/* Collects index members "arch/hex" that pass the filter's architecture. */
static int collect(void *ud, const char *member)
{
    struct walk *w = ud;
    const char *slash = strrchr(member, '/');
    kcache_key key;
    if (!slash || kcache_key_parse(&key, slash + 1) != 0)
        return 0; /* not ours: skipped */
    if (w->filter && w->filter->arch &&
        (strlen(w->filter->arch) != (size_t)(slash - member) ||
         strncmp(member, w->filter->arch, (size_t)(slash - member)) != 0))
        return 0;
    kcache_key *grown = kc_grow(w->keys, &w->cap, w->n, sizeof(*grown), 64);
    if (!grown)
        return KCACHE_ENOMEM;
    w->keys = grown;
    w->keys[w->n++] = key;
    return 0;
}

/* One key the store lacks, taken from the remote: under the lock (its scratch buffer, its codec). */
static int pull_one_locked(kcache_transfer *t, kcache_remote *remote, const kcache_key *key)
{
    char name[512];
    kc_remote_name(name, sizeof(name), remote, "entry", key);
    int g = remote->backend->ops->get(remote->backend, &remote->scratch, name, KC_WIRE_MAX_VALUE);
    if (g == KCACHE_ENOTFOUND)
        return 0; /* evicted by the server since it was indexed */
    if (g == KCACHE_ECORRUPT) {
        t->rejected++;
        return 0;
    }
    if (g)
        return backend_error(remote, g);
    int a = kc_remote_admit(NULL, remote, key, remote->scratch.data, remote->scratch.size);
    if (a == 0) {
        t->entries++;
        t->bytes += remote->scratch.size;
    } else if (a == 1) {
        t->conflicts++; /* the key landed here meanwhile, with other bytes */
    } else {
        t->rejected++;
    }
    return 0;
}

/*
 * The index read, then each key the store lacks taken, the lock held for
 * one key at a time: progress is said with no lock held, so the callback
 * may use the remote and the store. Whether the store has a key is asked
 * when its turn comes, so an entry the callback put meanwhile is not taken.
 */
static int pull(kcache_transfer *t, kcache_remote *remote, const kcache_filter *filter,
                kcache_progress_fn progress, void *userdata)
{
    struct walk w = {remote, filter, NULL, 0, 0};
    char index[320];
    if (filter && filter->arch && (remote->backend->flags & KC_BACKEND_INDEX_NO_ARCH)) {
        snprintf(remote->errmsg, sizeof(remote->errmsg),
                 "remote pull --arch: the bucket's listing does not say a kernel's arch: "
                 "pull without --arch");
        return KCACHE_EINVAL;
    }
    snprintf(index, sizeof(index), "%sindex", remote->prefix);
    kc_remote_lock(remote);
    int rc = remote->backend->ops->index(remote->backend, index,
                                         filter ? filter->created_since : 0, collect, &w);
    if (rc && rc != KCACHE_ENOMEM)
        backend_error(remote, rc);
    kc_remote_unlock(remote);
    for (size_t i = 0; !rc && i < w.n; i++) {
        kcache_entry *e = NULL;
        if (kcache_store_get(&e, remote->store, &w.keys[i], KCACHE_GET_NO_TOUCH |
                                                              KCACHE_GET_NO_DATA) == 0) {
            t->present++;
        } else {
            kc_remote_lock(remote);
            rc = pull_one_locked(t, remote, &w.keys[i]);
            kc_remote_unlock(remote);
        }
        kcache_entry_free(e);
        if (progress)
            progress(userdata, "pulling", i + 1, w.n);
    }
    free(w.keys);
    if (rc == KCACHE_ENOMEM) {
        kc_remote_lock(remote);
        snprintf(remote->errmsg, sizeof(remote->errmsg), "out of memory");
        kc_remote_unlock(remote);
    }
    return rc;
}

static int push(kcache_transfer *t, kcache_remote *remote, const kcache_filter *filter,
                kcache_progress_fn progress, void *userdata)
{
    if (remote->read_only) {
        snprintf(remote->errmsg, sizeof(remote->errmsg),
                 "the remote is read-only here (remote_read_only): nothing pushed");
        return KCACHE_EREADONLY;
    }
    kcache_key *keys = NULL;
    size_t n = 0;
    int rc = kcache_store_list_keys(&keys, &n, remote->store, filter);
    if (rc) {
        snprintf(remote->errmsg, sizeof(remote->errmsg), "%s",
                 kcache_store_errmsg(remote->store));
        return rc;
    }
    for (size_t i = 0; !rc && i < n; i++) {
        kcache_entry *e = NULL;
        if (kcache_store_get(&e, remote->store, &keys[i], KCACHE_GET_NO_TOUCH) == 0 &&
            !kc_store_local_only(e)) {
            kc_remote_lock(remote);
            int64_t sent = kc_remote_push_locked(remote, e, e->created_at);
            if (sent < 0) /* before a callback the unlock calls can make the backend fail */
                snprintf(remote->errmsg, sizeof(remote->errmsg), "%s", remote->backend->errmsg);
            kc_remote_unlock(remote);
            if (sent < 0) {
                rc = (int)sent;
            } else {
                t->entries++;
                t->bytes += (uint64_t)sent;
            }
        }
        kcache_entry_free(e);
        if (progress)
            progress(userdata, "pushing", i + 1, n);
    }
    kcache_keys_free(keys);
    return rc;
}

/* Pull and push: the arguments checked, then the counts given back whatever happened. */
static int transfer(kcache_transfer *out, kcache_remote *remote, const kcache_filter *filter,
                    kcache_progress_fn progress, void *userdata,
                    int (*run)(kcache_transfer *, kcache_remote *, const kcache_filter *,
                               kcache_progress_fn, void *))
{
    if (!remote)
        return KCACHE_EINVAL;
    if (out && known_version(remote, "kcache_transfer", out->version, KCACHE_TRANSFER_VERSION))
        return KCACHE_EINVAL;
    kcache_transfer t = {KCACHE_TRANSFER_VERSION};
    int rc = run(&t, remote, filter, progress, userdata);
    /* An older caller's struct ends before the fields of later versions. */
    if (out) {
        t.version = out->version;
        memcpy(out, &t, out->version >= 2 ? sizeof(t) : offsetof(kcache_transfer, conflicts));
    }
    return noted(remote, rc);
}

KCACHE_API int kcache_remote_pull(kcache_transfer *out, kcache_remote *remote,
                                  const kcache_filter *filter, kcache_progress_fn progress,
                                  void *userdata)
{
    return transfer(out, remote, filter, progress, userdata, pull);
}

KCACHE_API int kcache_remote_push(kcache_transfer *out, kcache_remote *remote,
                                  const kcache_filter *filter, kcache_progress_fn progress,
                                  void *userdata)
{
    return transfer(out, remote, filter, progress, userdata, push);
}
