/*
 * Bundles: a selection of a store's entries in a kcache database of its own.
 *
 * Export and the merge go through the store's own get and put, so that a
 * bundle is written and read exactly as a cache is. What a cache never has to
 * fear and a bundle does (it comes from another machine) is checked first on
 * a separate read-only connection: whose file it is, which schema, that the
 * schema holds exactly our objects (a trigger or view of someone else's would
 * run inside our transactions), SQLite's integrity check and plausible sizes.
 * Then every entry is read through the store, which checks its digests,
 * before the first one is merged.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/bundle_check.h"
#include "store/bundle_sign.h"
#include "store/ingest.h"
#include "kcache/bundle.h"
#include <stddef.h>
#include "store/storeint.h"

/* Sets the store's message under its lock (the store's own calls do the same). */
/* Copies another store's message into s (after a call on `from` failed). */
static int pass_err(kcache_store *s, kcache_store *from, int code, const char *what)
{
    return kc_err_locking(s, code, "%s: %s", what, kcache_store_errmsg(from));
}

struct key_item {
    kcache_key key;
    int64_t created_at;
    int64_t accessed_at;
    uint8_t digest[KC_DIGEST_SIZE]; /* as the checking pass read it (import_from) */
};

struct item_list {
    struct key_item *items;
    size_t n, cap;
};

static int collect(void *userdata, const kcache_entry *e)
{
    struct item_list *l = userdata;
    struct key_item *grown = kc_grow(l->items, &l->cap, l->n, sizeof(*grown), 256);
    if (!grown)
        return KCACHE_ENOMEM;
    l->items = grown;
    l->items[l->n].key = e->key;
    l->items[l->n].created_at = e->created_at;
    l->items[l->n].accessed_at = e->accessed_at;
    l->n++;
    return 0;
}

static void progress(const kcache_bundle_options *o, const char *phase, uint64_t done,
                     uint64_t total)
{
    if (o->progress)
        o->progress(o->progress_userdata, phase, done, total);
}

/*
 * put() stamps an entry with the time it was written; a bundle carries the
 * original times so that "the newer of two entries" means the newer compile.
 */
static int set_times(kcache_store *s, const kcache_key *key, int64_t created_at,
                     int64_t accessed_at)
{
    static const char sql_both[] = "UPDATE entry SET created_at = ?1, accessed_at = ?2 "
                                   "WHERE key = ?3";
    static const char sql_created[] = "UPDATE entry SET created_at = ?1 WHERE key = ?3";
    sqlite3_stmt *st = NULL;
    pthread_mutex_lock(&s->lock);
    int src = sqlite3_prepare_v2(s->db.conn, accessed_at ? sql_both : sql_created, -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, created_at);
        if (accessed_at)
            sqlite3_bind_int64(st, 2, accessed_at);
        sqlite3_bind_blob(st, 3, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    int rc = src == SQLITE_DONE ? 0 : kc_sqlerr(&s->db, src, "setting an entry's times");
    kc_unlock(s);
    return rc;
}

static void remove_with_sidecars(const char *path)
{
    char side[4096];
    unlink(path);
    snprintf(side, sizeof(side), "%s" KC_DB_WAL, path);
    unlink(side);
    snprintf(side, sizeof(side), "%s" KC_DB_SHM, path);
    unlink(side);
    snprintf(side, sizeof(side), "%s" KC_DB_JOURNAL, path);
    unlink(side);
    snprintf(side, sizeof(side), "%s" KC_DB_LOCK, path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-hits", path);
    unlink(side);
}

/*
 * A bundle is one file: leave WAL mode so that it can be copied and opened
 * read-only anywhere. Its signature (bundle_sign.c), when there is one, is
 * written first, while it is still nobody's but ours.
 */
static int make_single_file(kcache_store *s, const char *path, const uint8_t *sig)
{
    sqlite3 *db = NULL;
    int src = kc_sqlite_open(&db, path, SQLITE_OPEN_READWRITE);
    if (src == SQLITE_OK && sig)
        src = kc_bundle_sig_write(db, sig);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
    int rc = src == SQLITE_OK ? 0
                              : kc_err_locking(s, KCACHE_EIO, "finishing %s: %s", path,
                                           db ? sqlite3_errmsg(db) : sqlite3_errstr(src));
    if (sqlite3_close(db) != SQLITE_OK && !rc)
        rc = kc_err_locking(s, KCACHE_EIO, "finishing %s: could not close it", path);
    int fd = rc ? -1 : open(path, O_RDONLY | O_CLOEXEC);
    if (!rc && (fd < 0 || fsync(fd) != 0))
        rc = kc_err_locking(s, errno == ENOSPC ? KCACHE_EFULL : KCACHE_EIO, "cannot write %s: %s",
                        path, strerror(errno));
    if (fd >= 0)
        close(fd);
    return rc;
}

/* What export and import check before they touch anything. */
static int check_call(kcache_bundle_options *o, kcache_store *store, const char *fn,
                      const char *path, const kcache_bundle_result *out,
                      const kcache_bundle_options *options)
{
    static const kcache_bundle_options defaults = KCACHE_BUNDLE_OPTIONS_INIT;
    *o = defaults;
    if (!store)
        return KCACHE_EINVAL;
    if (!path || !*path)
        return kc_err_locking(store, KCACHE_EINVAL, "%s: no path", fn);
    char msg[KC_ERRMSG_SIZE];
    if (options && kc_version_check(msg, sizeof(msg), "kcache_bundle_options", options->version,
                                    KCACHE_BUNDLE_OPTIONS_VERSION))
        return kc_err_locking(store, KCACHE_EINVAL, "%s", msg);
    /* An older caller's struct ends before the fields of later versions: those keep defaults. */
    if (options)
        memcpy(o, options, options->version >= 2 ? sizeof(*o)
                                                 : offsetof(kcache_bundle_options, sign));
    if (out && kc_version_check(msg, sizeof(msg), "kcache_bundle_result", out->version,
                                KCACHE_BUNDLE_RESULT_VERSION))
        return kc_err_locking(store, KCACHE_EINVAL, "%s", msg);
    if (!strcmp(path, kcache_store_path(store)))
        return kc_err_locking(store, KCACHE_EINVAL, "%s is the cache itself: give another file",
                          path);
    return 0;
}

static int export_to(kcache_bundle_result *r, kcache_store *store, const char *path,
                     const kcache_bundle_options *o)
{
    int rc;
    struct item_list keys = {0};
    kcache_store *dst = NULL;
    char *tmp = NULL;
    kc_bundle_sig sig = {0};
    kc_secret secret;

    kc_bundle_secret(&secret, store);
    if (o->sign && !secret.set) {
        rc = kc_err_locking(store, KCACHE_EINVAL,
                            "cannot sign the bundle: remote_secret is not set here (kcache config "
                            "remote_secret SECRET, or KCACHE_REMOTE_SECRET); nothing written");
        goto out;
    }
    kcache_filter f = KCACHE_FILTER_INIT;
    f.arch = o->arch;
    f.kind = o->kind;
    f.created_since = o->created_since;
    f.sort = KCACHE_SORT_CREATED;
    rc = kcache_store_list(store, &f, collect, &keys);
    if (rc == KCACHE_ENOMEM)
        rc = kc_err_locking(store, rc, "out of memory listing entries");
    if (rc)
        goto out;

    size_t tn = strlen(path) + 32;
    if (!(tmp = kc_malloc(tn))) {
        rc = kc_err_locking(store, KCACHE_ENOMEM, "out of memory");
        goto out;
    }
    snprintf(tmp, tn, "%s.tmp-%ld", path, (long)getpid());
    remove_with_sidecars(tmp);
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = tmp;
    so.max_size = UINT64_MAX;
    /* Written as the cache writes (its `compression`), not by a kcache.conf beside the
     * bundle; whatever the codecs, an import decodes each entry by its own. */
    so.compression = kc_compression_name(store->compression);
    char err[KC_ERRMSG_SIZE];
    if ((rc = kcache_store_open(&dst, &so, err, sizeof(err)))) {
        rc = kc_err_locking(store, rc, "%s", err);
        goto out;
    }
    /* Nobody sees the file before the rename, and it is synced before that: no
     * need to sync every put (this makes an export several times faster). */
    pthread_mutex_lock(&dst->lock);
    kc_db_exec(&dst->db, "PRAGMA synchronous = OFF", "configuring the bundle");
    kc_unlock(dst);
    for (size_t i = 0; i < keys.n; i++) {
        progress(o, "exporting", i, keys.n);
        kcache_entry *e = NULL;
        rc = kcache_store_get(&e, store, &keys.items[i].key,
                              KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        if (rc == KCACHE_ENOTFOUND) {
            /* Damaged (the store deleted it) or pruned meanwhile: not exported; only the
             * first is damage (a prune during export is not). */
            r->damaged += (uint64_t)kc_store_get_found_damage(store);
            continue;
        }
        if (rc)
            goto out;
        if (kc_ingest_local_only(e)) { /* it stays on this machine (ingest.c) */
            kcache_entry_free(e);
            continue;
        }
        rc = kcache_store_put(dst, e);
        if (!rc)
            rc = set_times(dst, &e->key, e->created_at, e->accessed_at);
        if (!rc && secret.set)
            kc_bundle_sig_add(&sig, e); /* as the bundle now holds it */
        r->bytes += e->size;
        kcache_entry_free(e);
        if (rc) {
            rc = pass_err(store, dst, rc, "writing the bundle");
            goto out;
        }
        r->entries++;
    }
    progress(o, "exporting", keys.n, keys.n);
    kcache_store_close(dst);
    dst = NULL;
    /* The temporary store's lock file (db/alone.c): nobody else ever opened it. */
    char lock[4200];
    snprintf(lock, sizeof(lock), "%s" KC_DB_LOCK, tmp);
    unlink(lock);
    uint8_t mac[KC_MAC_SIZE];
    if (secret.set && kc_bundle_sig_finish(mac, &sig, &secret)) {
        rc = kc_err_locking(store, KCACHE_ENOMEM, "out of memory signing the bundle");
        goto out;
    }
    if ((rc = make_single_file(store, tmp, secret.set ? mac : NULL)))
        goto out;
    r->signed_by_secret = secret.set;
    if (rename(tmp, path) != 0) {
        rc = kc_err_locking(store, KCACHE_EIO, "cannot write %s: %s", path, strerror(errno));
        goto out;
    }
out:
    kcache_store_close(dst);
    if (tmp && rc)
        remove_with_sidecars(tmp);
    free(tmp);
    free(keys.items);
    kc_bundle_sig_free(&sig);
    memset(&secret, 0, sizeof(secret));
    return rc;
}


struct conflict {
    kcache_key key;
    uint8_t kept[KC_DIGEST_SIZE], refused[KC_DIGEST_SIZE];
};

struct conflict_list {
    struct conflict *items;
    size_t n, cap;
};

/*
 * Whether a signature is needed and can be checked, before anything is read:
 * a bundle refused for its signature is refused whole, and at once.
 */
static int signature_policy(int *verify, kcache_store *store, const char *path,
                            const kcache_bundle_options *o, const kc_secret *secret, int has_sig)
{
    int required = o->require_signature;
    if (!required && kc_bundle_require_setting(&required, store))
        return kc_err_locking(store, KCACHE_EINVAL,
                              "setting import_require_signature (or "
                              "KCACHE_IMPORT_REQUIRE_SIGNATURE) is not true or false: see "
                              "kcache config; nothing imported");
    if (required && !secret->set)
        return kc_err_locking(store, KCACHE_EINVAL,
                              "a signed bundle is required, and remote_secret is not set here to "
                              "check %s with (kcache config remote_secret SECRET, or "
                              "KCACHE_REMOTE_SECRET); nothing imported",
                              path);
    if (required && !has_sig)
        return kc_err_locking(store, KCACHE_EINVAL,
                              "%s is not signed, and a signed bundle is required "
                              "(--require-signature or import_require_signature): export it with "
                              "remote_secret set; nothing imported",
                              path);
    /* Without the secret a signature cannot be checked: the bundle is then as unsigned. */
    *verify = has_sig && secret->set;
    return 0;
}

static int import_from(kcache_bundle_result *r, kcache_store *store, const char *path,
                       const kcache_bundle_options *o)
{
    int rc;
    struct item_list keys = {0};
    struct conflict_list conflicts = {0};
    kcache_store *src = NULL;
    kcache_entry *e = NULL, *have = NULL;
    kc_bundle_sig sig = {0};
    kc_secret secret;
    uint8_t claimed[KC_MAC_SIZE];
    int has_sig = 0, verify = 0;

    kc_bundle_secret(&secret, store);
    if (!o->dry_run && kcache_store_read_only(store)) {
        rc = kc_err_locking(store, KCACHE_EREADONLY, "the cache is read-only: nothing imported");
        goto out;
    }
    if ((rc = kc_bundle_check_file(store, path, &has_sig, claimed)))
        goto out;
    if ((rc = signature_policy(&verify, store, path, o, &secret, has_sig)))
        goto out;

    char err[KC_ERRMSG_SIZE];
    if ((rc = kc_store_open_bundle(&src, path, err, sizeof(err)))) {
        rc = kc_err_locking(store, rc, "%s", err);
        goto out;
    }
    kcache_filter f = KCACHE_FILTER_INIT;
    f.sort = KCACHE_SORT_CREATED;
    if ((rc = kcache_store_list(src, &f, collect, &keys))) {
        rc = rc == KCACHE_ENOMEM ? kc_err_locking(store, rc, "out of memory")
                                 : pass_err(store, src, rc, path);
        goto out;
    }

    /*
     * Every entry through the gate (ingest.c) in a first pass that writes
     * nothing, the signature checked at its end: a damaged or re-signed
     * bundle changes nothing. Then the merge, in transactions of about
     * KC_HOLD_NS each, so that other processes' writes wait no longer than
     * that: one transaction for the whole bundle held the write lock for
     * seconds and made their commands fail ("stayed locked"). The merge
     * reads each entry again, through the gate again, and stops if one is
     * not what the first pass read (the file changed in between). Killed
     * during the merge, each entry is whole and a second import adds the
     * rest. Entries are read one at a time, so memory stays within one
     * entry's bound. A dry run is the first pass alone.
     */
    int64_t now = kc_now_ms();
    int in_batch = 0;
    size_t merged = 0; /* entries committed by the merge's earlier transactions */
    uint64_t batch_t0 = 0, entry_t0 = 0;
    char why[2 * KC_ERRMSG_SIZE] = ""; /* said once the batch has let go of the store */
    /*
     * A merge transaction holds the store's lock from begin to end, and a
     * callback under it could not use the store. So the merge says its
     * progress between transactions; the checking pass, entry by entry.
     */
    for (int pass = 0; pass < (o->dry_run ? 1 : 2) && !rc; pass++) {
        progress(o, pass ? "importing" : "checking", 0, keys.n); /* before the lock is taken */
        if (pass == 1) {
            /* The first pass's counts were the merge's forecast: the merge counts again. */
            r->entries = r->bytes = r->added = r->replaced = r->skipped = 0;
            conflicts.n = 0;
            if ((rc = kc_put_batch_begin(store)))
                break;
            in_batch = 1;
            batch_t0 = kc_mono_ns();
        }
        for (size_t i = 0; i < keys.n; i++) {
            struct key_item *k = &keys.items[i];
            if (!in_batch && i)
                progress(o, "checking", i, keys.n);
            /* Committed before the next entry would take the transaction past KC_HOLD_NS (as
             * long as the last one took); the lock let go, then the next transaction. */
            uint64_t now_ns = kc_mono_ns();
            if (in_batch && i > merged && 2 * now_ns - batch_t0 - entry_t0 > KC_HOLD_NS) {
                if ((rc = kc_put_batch_end(store, 1)))
                    break;
                in_batch = 0;
                merged = i;
                progress(o, "importing", i, keys.n);
                if ((rc = kc_put_batch_begin(store)))
                    break;
                in_batch = 1;
                batch_t0 = kc_mono_ns();
            }
            entry_t0 = kc_mono_ns();
            char hex[KCACHE_KEY_HEX_SIZE], what[KC_ERRMSG_SIZE];
            kcache_key_hex(hex, &k->key);
            if ((rc =
                     kcache_store_get(&e, src, &k->key, KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS))) {
                snprintf(why, sizeof(why),
                         "%s is damaged: entry %.16s does not match its digest (%s); "
                         "nothing imported",
                         path, hex, kcache_store_errmsg(src));
                rc = KCACHE_ECORRUPT;
                break;
            }
            if (pass == 0) {
                memcpy(k->digest, e->digest, KC_DIGEST_SIZE);
                if (verify)
                    kc_bundle_sig_add(&sig, e); /* as signed: before the gate clamps its dates */
            } else if (memcmp(k->digest, e->digest, KC_DIGEST_SIZE) != 0) {
                snprintf(why, sizeof(why),
                         "%s changed while it was imported (entry %.16s); nothing imported", path,
                         hex);
                rc = KCACHE_ECORRUPT;
                break;
            }
            if (!in_batch)
                pthread_mutex_lock(&store->lock);
            rc = kc_ingest_check_entry(store, e, now, what, sizeof(what));
            if (!in_batch)
                kc_unlock(store);
            if (rc) {
                snprintf(why, sizeof(why), "%s is damaged: entry %.16s: %s; nothing imported", path,
                         hex, what);
                break;
            }
            r->entries++;
            r->bytes += e->size;
            if (kc_ingest_local_only(e)) {
                r->skipped++; /* believed only where it was written (ingest.c) */
                kcache_entry_free(e);
                e = NULL;
                continue;
            }
            int64_t have_created = 0;
            uint8_t have_digest[KC_DIGEST_SIZE];
            int exists;
            if (in_batch) {
                exists = kc_ingest_existing(store, &k->key, &have_created, have_digest);
            } else {
                exists = kcache_store_get(&have, store, &k->key,
                                          KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
                exists = exists == 0 ? 1 : exists == KCACHE_ENOTFOUND ? 0 : exists;
                if (exists == 1) {
                    have_created = have->created_at;
                    memcpy(have_digest, have->digest, KC_DIGEST_SIZE);
                }
                kcache_entry_free(have);
                have = NULL;
            }
            if (exists < 0) {
                rc = exists;
                break;
            }
            if (exists && memcmp(have_digest, e->digest, KC_DIGEST_SIZE) != 0) {
                /* A conflict (ingest.c): the store's entry stays, whatever the dates say. */
                struct conflict *grown =
                    kc_grow(conflicts.items, &conflicts.cap, conflicts.n, sizeof(*grown), 8);
                if (!grown) {
                    snprintf(why, sizeof(why), "out of memory; nothing imported");
                    rc = KCACHE_ENOMEM;
                    break;
                }
                conflicts.items = grown;
                struct conflict *c = &conflicts.items[conflicts.n++];
                c->key = k->key;
                memcpy(c->kept, have_digest, KC_DIGEST_SIZE);
                memcpy(c->refused, e->digest, KC_DIGEST_SIZE);
            } else if (exists && have_created >= e->created_at) {
                /* e's times are clamped to now: a bundle cannot make its entry "newer" for ever. */
                r->skipped++;
            } else {
                if (exists)
                    r->replaced++;
                else
                    r->added++;
                if (in_batch && (rc = kc_put_batch_add(store, e, e->created_at, e->created_at)))
                    break;
            }
            kcache_entry_free(e);
            e = NULL;
        }
        if (!rc && verify && pass == 0) {
            uint8_t mac[KC_MAC_SIZE];
            if (kc_bundle_sig_finish(mac, &sig, &secret)) {
                snprintf(why, sizeof(why),
                         "out of memory checking the signature; nothing imported");
                rc = KCACHE_ENOMEM;
            } else if (!kc_mac_equal(mac, claimed)) {
                snprintf(why, sizeof(why),
                         "%s's signature does not match remote_secret: it was changed after it was "
                         "signed, or signed with another secret; nothing imported",
                         path);
                rc = KCACHE_ECORRUPT;
            }
        }
        if (in_batch) {
            int end = kc_put_batch_end(store, rc == 0);
            in_batch = 0;
            if (!rc && end)
                rc = end;
        }
    }
    if (rc) {
        /* What the merge's committed transactions hold stays (each entry whole); the rest not. */
        char done[96] = "nothing imported";
        if (merged)
            snprintf(done, sizeof(done), "%zu of %zu entries imported; import again for the rest",
                     merged, keys.n);
        r->added = r->replaced = r->skipped = 0;
        if (why[0]) {
            if (merged && strstr(why, "nothing imported"))
                *strstr(why, "nothing imported") = '\0';
            kc_err_locking(store, rc, "%s%s", why, merged ? done : "");
        } else {
            char msg[KC_ERRMSG_SIZE];
            snprintf(msg, sizeof(msg), "%s", kcache_store_errmsg(store));
            if (!strstr(msg, "nothing imported"))
                kc_err_locking(store, rc, "%s; %s", msg, done);
        }
    }
    if (rc)
        goto out;
    r->signed_by_secret = verify;
    r->conflicts = conflicts.n;
    /* Said once the outcome is known: a bundle refused later reports none. */
    if (conflicts.n && !o->dry_run)
        kc_store_count(store, KC_COUNTER_CONFLICTS, conflicts.n);
    for (size_t i = 0; i < conflicts.n; i++) {
        const struct conflict *c = &conflicts.items[i];
        char line[KC_ERRMSG_SIZE];
        kc_ingest_conflict_text(line, sizeof(line), &c->key, c->kept, c->refused, "the bundle");
        kc_log_unlocked(store, KCACHE_LOG_WARNING, line);
        if (o->conflict)
            o->conflict(o->conflict_userdata, &c->key, c->kept, c->refused);
    }
    progress(o, o->dry_run ? "checking" : "importing", keys.n, keys.n);
    rc = 0;
out:
    kcache_entry_free(e);
    kcache_entry_free(have);
    kcache_store_close(src);
    free(keys.items);
    free(conflicts.items);
    kc_bundle_sig_free(&sig);
    memset(&secret, 0, sizeof(secret));
    return rc;
}

/* Export and import: the call checked, then the counts given back whatever happened. */
static int bundle_call(kcache_bundle_result *out, kcache_store *store, const char *path,
                       const kcache_bundle_options *options, const char *fn,
                       int (*run)(kcache_bundle_result *, kcache_store *, const char *,
                                  const kcache_bundle_options *))
{
    kcache_bundle_options o;
    int rc = check_call(&o, store, fn, path, out, options);
    if (rc)
        return rc;
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    rc = run(&r, store, path, &o);
    if (out) {
        /* An older caller's struct ends before the fields of later versions. */
        r.version = out->version;
        memcpy(out, &r, out->version >= 2 ? sizeof(r)
                                          : offsetof(kcache_bundle_result, conflicts));
    }
    return rc;
}

KCACHE_API int kcache_bundle_export(kcache_bundle_result *out, kcache_store *store,
                                    const char *path,
                                    const kcache_bundle_options *options)
{
    return bundle_call(out, store, path, options, "kcache_bundle_export", export_to);
}

KCACHE_API int kcache_bundle_import(kcache_bundle_result *out, kcache_store *store,
                                    const char *path,
                                    const kcache_bundle_options *options)
{
    return bundle_call(out, store, path, options, "kcache_bundle_import", import_from);
}
