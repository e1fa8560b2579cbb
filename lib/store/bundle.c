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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcache/bundle.h"
#include "store/ingest.h"
#include "store/storeint.h"

/* A bundle at most this large is written with small pages (make_single_file()). */
#define KC_BUNDLE_SMALL (1 << 20)

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
 * read-only anywhere. Its signatures (ingest.c, carried.c), when there are
 * some, are written first, while it is still nobody's but ours.
 */
static int make_single_file(kcache_store *s, const char *path, const uint8_t *sig,
                            kc_bundle_sig *closures, const kc_secret *secret)
{
    sqlite3 *db = NULL;
    int src = kc_sqlite_open(&db, path, SQLITE_OPEN_READWRITE);
    if (src == SQLITE_OK && sig)
        src = kc_bundle_sig_write(db, sig);
    if (src == SQLITE_OK && sig && closures->n)
        src = kc_carried_sig_write(db, closures, secret);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
    /*
     * A small bundle (the shared tier publishes each compile as one) is
     * mostly the root pages of its tables, one page each: with pages of
     * 1 KiB a one-entry bundle of a 68 KiB CUBIN is 40 KiB, not 128 KiB,
     * and that is what a shared hit reads over the network.
     */
    struct stat st;
    if (src == SQLITE_OK && stat(path, &st) == 0 && st.st_size <= KC_BUNDLE_SMALL)
        src = sqlite3_exec(db, "PRAGMA page_size = 1024; VACUUM", NULL, NULL, NULL);
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
    if (kc_check_version(store, options, "kcache_bundle_options", KCACHE_BUNDLE_OPTIONS_VERSION))
        return KCACHE_EINVAL;
    /* An older caller's struct ends before the fields of later versions: those keep defaults. */
    if (options)
        memcpy(o, options, options->version >= 2 ? sizeof(*o)
                                                 : offsetof(kcache_bundle_options, sign));
    if (kc_check_version(store, out, "kcache_bundle_result", KCACHE_BUNDLE_RESULT_VERSION))
        return KCACHE_EINVAL;
    if (!strcmp(path, kcache_store_path(store)))
        return kc_err_locking(store, KCACHE_EINVAL, "%s is the cache itself: give another file",
                          path);
    return 0;
}

/*
 * The entries of keys copied from store into dst, each with its include
 * closures (carried.c); sig and closures: added to, when signing.
 */
static int export_entries(kcache_bundle_result *r, kcache_store *store, kcache_store *dst,
                          const struct item_list *keys, const kcache_bundle_options *o,
                          kc_bundle_sig *sig, kc_bundle_sig *closures)
{
    int rc;
    for (size_t i = 0; i < keys->n; i++) {
        progress(o, "exporting", i, keys->n);
        kcache_entry *e = NULL;
        rc = kcache_store_get(&e, store, &keys->items[i].key,
                              KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        if (rc == KCACHE_ENOTFOUND) {
            /* Damaged (the store deleted it) or pruned meanwhile: not exported; only the
             * first is damage (a prune during export is not). */
            r->damaged += (uint64_t)kc_store_get_found_damage(store);
            continue;
        }
        if (rc)
            return rc;
        if (kc_ingest_local_only(e)) { /* it stays on this machine (ingest.c) */
            kcache_entry_free(e);
            continue;
        }
        rc = kcache_store_put(dst, e);
        if (!rc)
            rc = set_times(dst, &e->key, e->created_at, e->accessed_at);
        if (!rc && sig)
            kc_bundle_sig_add(sig, e); /* as the bundle now holds it */
        /* A closure only saves the importer time: one that cannot be copied is left out. */
        if (!rc)
            kc_carried_export(store, dst, &e->key, closures);
        r->bytes += e->size;
        kcache_entry_free(e);
        if (rc)
            return pass_err(store, dst, rc, "writing the bundle");
        r->entries++;
    }
    progress(o, "exporting", keys->n, keys->n);
    return 0;
}

static int export_to(kcache_bundle_result *r, kcache_store *store, const char *path,
                     const kcache_bundle_options *o)
{
    int rc;
    struct item_list keys = {0};
    kcache_store *dst = NULL;
    char *tmp = NULL;
    kc_bundle_sig sig = {0}, closures = {0};
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
    if ((rc = export_entries(r, store, dst, &keys, o, secret.set ? &sig : NULL,
                             secret.set ? &closures : NULL)))
        goto out;
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
    if ((rc = make_single_file(store, tmp, secret.set ? mac : NULL, &closures, &secret)))
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
    kc_bundle_sig_free(&closures);
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

/*
 * An import under way: the bundle, its keys, what the passes found. The
 * first pass checks every entry and writes nothing; the merge reads them
 * again (import_read) and writes them in transactions (merge_pass).
 */
struct import_run {
    kcache_bundle_result *r;
    kcache_store *store, *src;
    const char *path;
    const kcache_bundle_options *o;
    struct item_list keys;
    struct conflict_list conflicts;
    kc_bundle_sig sig;
    kc_secret secret;
    uint8_t claimed[KC_MAC_SIZE];
    int verify;
    int64_t now;
    int listed;    /* the bundle's keys are read: a failure from here on says what was kept */
    size_t merged; /* entries committed by the merge's transactions so far */
    char why[2 * KC_ERRMSG_SIZE]; /* said once nothing of the store is held */
};

/* The checks before anything is read: the store writable, the file, its signature. */
static int import_open(struct import_run *m)
{
    int rc, has_sig = 0;
    kc_bundle_secret(&m->secret, m->store);
    if (!m->o->dry_run && kcache_store_read_only(m->store))
        return kc_err_locking(m->store, KCACHE_EREADONLY,
                              "the cache is read-only: nothing imported");
    if ((rc = kc_bundle_check_file(m->store, m->path, &has_sig, m->claimed)) ||
        (rc = signature_policy(&m->verify, m->store, m->path, m->o, &m->secret, has_sig)))
        return rc;
    char err[KC_ERRMSG_SIZE];
    if ((rc = kc_store_open_bundle(&m->src, m->path, err, sizeof(err))))
        return kc_err_locking(m->store, rc, "%s", err);
    kcache_filter f = KCACHE_FILTER_INIT;
    f.sort = KCACHE_SORT_CREATED;
    if ((rc = kcache_store_list(m->src, &f, collect, &m->keys)))
        return rc == KCACHE_ENOMEM ? kc_err_locking(m->store, rc, "out of memory")
                                   : pass_err(m->store, m->src, rc, m->path);
    m->now = kc_now_ms();
    m->listed = 1;
    return 0;
}

/*
 * Entry k of the bundle, read and through the gate (ingest.c), with no lock
 * of the store held. The first pass records its digest (and adds it to the
 * signature as signed); the merge stops if it is not what the first pass
 * read (the file changed in between).
 */
static int import_read(struct import_run *m, struct key_item *k, int first, kcache_entry **out)
{
    char hex[KCACHE_KEY_HEX_SIZE], what[KC_ERRMSG_SIZE];
    kcache_key_hex(hex, &k->key);
    kcache_entry *e = NULL;
    if (kcache_store_get(&e, m->src, &k->key, KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS)) {
        snprintf(m->why, sizeof(m->why),
                 "%s is damaged: entry %.16s does not match its digest (%s); nothing imported",
                 m->path, hex, kcache_store_errmsg(m->src));
        return KCACHE_ECORRUPT;
    }
    if (first) {
        memcpy(k->digest, e->digest, KC_DIGEST_SIZE);
        if (m->verify)
            kc_bundle_sig_add(&m->sig, e); /* as signed: before the gate clamps its dates */
    } else if (memcmp(k->digest, e->digest, KC_DIGEST_SIZE) != 0) {
        snprintf(m->why, sizeof(m->why),
                 "%s changed while it was imported (entry %.16s); nothing imported", m->path, hex);
        kcache_entry_free(e);
        return KCACHE_ECORRUPT;
    }
    pthread_mutex_lock(&m->store->lock);
    int rc = kc_ingest_check_entry(m->store, e, m->now, what, sizeof(what));
    kc_unlock(m->store);
    if (rc) {
        snprintf(m->why, sizeof(m->why), "%s is damaged: entry %.16s: %s; nothing imported",
                 m->path, hex, what);
        kcache_entry_free(e);
        return rc;
    }
    m->r->entries++;
    m->r->bytes += e->size;
    *out = e;
    return 0;
}

/*
 * What becomes of e, given the store's entry of its key (exists, with its
 * date and digest): a conflict (the store's entry stays, ingest.c), skipped
 * (the store's is as new), or put (*put set), counted in the result.
 */
static int import_decide(struct import_run *m, const kcache_entry *e, int exists,
                         int64_t have_created, const uint8_t have_digest[KC_DIGEST_SIZE],
                         int *put)
{
    *put = 0;
    if (exists && memcmp(have_digest, e->digest, KC_DIGEST_SIZE) != 0) {
        struct conflict *grown =
            kc_grow(m->conflicts.items, &m->conflicts.cap, m->conflicts.n, sizeof(*grown), 8);
        if (!grown) {
            snprintf(m->why, sizeof(m->why), "out of memory; nothing imported");
            return KCACHE_ENOMEM;
        }
        m->conflicts.items = grown;
        struct conflict *c = &m->conflicts.items[m->conflicts.n++];
        c->key = e->key;
        memcpy(c->kept, have_digest, KC_DIGEST_SIZE);
        memcpy(c->refused, e->digest, KC_DIGEST_SIZE);
    } else if (exists && have_created >= e->created_at) {
        /* e's times are clamped to now: a bundle cannot make its entry "newer" for ever. */
        m->r->skipped++;
    } else {
        *(exists ? &m->r->replaced : &m->r->added) += 1;
        *put = 1;
    }
    return 0;
}

/* The first pass: every entry through the gate, the outcome forecast, nothing written. */
static int check_pass(struct import_run *m)
{
    int rc = 0;
    progress(m->o, "checking", 0, m->keys.n);
    for (size_t i = 0; !rc && i < m->keys.n; i++) {
        kcache_entry *e = NULL, *have = NULL;
        if (i)
            progress(m->o, "checking", i, m->keys.n);
        if ((rc = import_read(m, &m->keys.items[i], 1, &e)))
            break;
        if (kc_ingest_local_only(e)) {
            m->r->skipped++; /* believed only where it was written (ingest.c) */
        } else {
            int exists = kcache_store_get(&have, m->store, &e->key,
                                          KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
            int put;
            if (exists != 0 && exists != KCACHE_ENOTFOUND)
                rc = exists;
            else
                rc = import_decide(m, e, exists == 0, exists ? 0 : have->created_at,
                                   exists ? NULL : have->digest, &put);
        }
        kcache_entry_free(have);
        kcache_entry_free(e);
    }
    if (rc || !m->verify)
        return rc;
    uint8_t mac[KC_MAC_SIZE];
    if (kc_bundle_sig_finish(mac, &m->sig, &m->secret)) {
        snprintf(m->why, sizeof(m->why), "out of memory checking the signature; nothing imported");
        return KCACHE_ENOMEM;
    }
    if (!kc_mac_equal(mac, m->claimed)) {
        snprintf(m->why, sizeof(m->why),
                 "%s's signature does not match remote_secret: it was changed after it was "
                 "signed, or signed with another secret; nothing imported",
                 m->path);
        return KCACHE_ECORRUPT;
    }
    return 0;
}

/* Decoded bytes a merge step reads ahead at most (one larger entry is a step alone). */
#define KC_MERGE_STEP_BYTES (UINT64_C(16) << 20)

/* An entry of a merge step: as read, and encoded as the store will hold it. */
struct merge_item {
    kcache_entry *e;
    kc_buf stored, names;
    struct kc_put_ctx ctx;
};

/*
 * Entries [from, from + *n) read, checked and encoded with no lock held
 * (the costly part: decoding the bundle, digests, compressing); *n ends at
 * `most` entries or about KC_MERGE_STEP_BYTES. Local-only records are
 * counted and left out (items[i].e NULL).
 */
static int merge_read(struct import_run *m, kc_codec_ctx *codec, size_t from, size_t most,
                      struct merge_item *items, size_t *n)
{
    uint64_t bytes = 0;
    *n = 0;
    for (size_t i = from; i < m->keys.n && *n < most && bytes < KC_MERGE_STEP_BYTES; i++) {
        struct merge_item *it = &items[(*n)++];
        memset(it, 0, sizeof(*it));
        int rc = import_read(m, &m->keys.items[i], 0, &it->e);
        if (rc)
            return rc;
        if (kc_ingest_local_only(it->e)) {
            m->r->skipped++;
            kcache_entry_free(it->e);
            it->e = NULL;
            continue;
        }
        bytes += it->e->size;
        for (size_t j = 0; j < it->e->n_inputs; j++)
            bytes += it->e->inputs[j].size;
        if ((rc = kc_put_encode(&it->ctx, it->e, codec, m->store->compression, &it->stored,
                                &it->names))) {
            snprintf(m->why, sizeof(m->why), "%s; nothing imported",
                     rc == KCACHE_ENOMEM ? "out of memory" : "an entry's names are too large");
            return rc;
        }
    }
    return 0;
}

static void merge_items_free(struct merge_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        kcache_entry_free(items[i].e);
        kc_buf_free(&items[i].stored);
        kc_buf_free(&items[i].names);
    }
}

/* A merge step's entries written in one transaction, decided against the store as it is now. */
static int merge_write(struct import_run *m, struct merge_item *items, size_t n)
{
    int rc = kc_put_batch_begin(m->store);
    if (rc)
        return rc; /* nothing held */
    for (size_t i = 0; !rc && i < n; i++) {
        const kcache_entry *e = items[i].e;
        if (!e)
            continue;
        int64_t have_created = 0;
        uint8_t have_digest[KC_DIGEST_SIZE];
        int put, exists = kc_ingest_existing(m->store, &e->key, &have_created, have_digest);
        if (exists < 0)
            rc = exists;
        else if (!(rc = import_decide(m, e, exists, have_created, have_digest, &put)) && put)
            rc = kc_put_batch_add_encoded(m->store, &items[i].ctx, e->created_at,
                                          e->created_at);
    }
    int end = kc_put_batch_end(m->store, rc == 0);
    return rc ? rc : end;
}

/*
 * The merge: steps of entries read and encoded with no lock held, each
 * written in one transaction that holds the write lock only for its
 * writes, as many entries a step as take about KC_HOLD_NS to write. One
 * transaction for the whole bundle held the write lock for seconds and
 * made other processes' commands fail ("stayed locked"). Killed during the
 * merge, each entry is whole and a second import adds the rest.
 */
static int merge_pass(struct import_run *m)
{
    /* The first pass's counts were the merge's forecast: the merge counts again. */
    m->r->entries = m->r->bytes = m->r->added = m->r->replaced = m->r->skipped = 0;
    m->conflicts.n = 0;
    kc_codec_ctx *codec = NULL;
    struct merge_item *items = kc_calloc(256, sizeof(*items));
    if (!items || kc_codec_new(&codec)) {
        free(items);
        snprintf(m->why, sizeof(m->why), "out of memory; nothing imported");
        return KCACHE_ENOMEM;
    }
    int rc = 0;
    size_t step = 8;
    while (!rc && m->merged < m->keys.n) {
        progress(m->o, "importing", m->merged, m->keys.n);
        size_t n = 0;
        if (!(rc = merge_read(m, codec, m->merged, step, items, &n))) {
            uint64_t t0 = kc_mono_ns();
            rc = merge_write(m, items, n);
            uint64_t took = kc_mono_ns() - t0;
            if (!rc)
                m->merged += n;
            if (took < KC_HOLD_NS / 4 && step < 256)
                step *= 2;
            else if (took > KC_HOLD_NS && step > 1)
                step /= 2;
        }
        merge_items_free(items, n);
    }
    free(items);
    kc_codec_free(codec);
    return rc;
}

/* The message of a failed import: what happened, and what the merge kept. */
static void import_failed(struct import_run *m, int rc)
{
    /* What the merge's committed transactions hold stays (each entry whole); the rest not. */
    char done[96] = "nothing imported";
    if (m->merged)
        snprintf(done, sizeof(done), "%zu of %zu entries imported; import again for the rest",
                 m->merged, m->keys.n);
    m->r->added = m->r->replaced = m->r->skipped = 0;
    if (m->why[0]) {
        char *nothing = strstr(m->why, "nothing imported");
        if (m->merged && nothing)
            *nothing = '\0';
        kc_err_locking(m->store, rc, "%s%s", m->why, m->merged ? done : "");
    } else {
        char msg[KC_ERRMSG_SIZE];
        snprintf(msg, sizeof(msg), "%s", kcache_store_errmsg(m->store));
        if (!strstr(msg, "nothing imported"))
            kc_err_locking(m->store, rc, "%s; %s", msg, done);
    }
}

/* The conflicts of a finished import: counted, said, and handed to the caller. */
static void import_report(struct import_run *m)
{
    m->r->signed_by_secret = m->verify;
    m->r->conflicts = m->conflicts.n;
    /* Said once the outcome is known: a bundle refused later reports none. */
    if (m->conflicts.n && !m->o->dry_run)
        kc_store_count(m->store, KC_COUNTER_CONFLICTS, m->conflicts.n);
    for (size_t i = 0; i < m->conflicts.n; i++) {
        const struct conflict *c = &m->conflicts.items[i];
        char line[KC_ERRMSG_SIZE];
        kc_ingest_conflict_text(line, sizeof(line), &c->key, c->kept, c->refused, "the bundle");
        kc_log_unlocked(m->store, KCACHE_LOG_WARNING, line);
        if (m->o->conflict)
            m->o->conflict(m->o->conflict_userdata, &c->key, c->kept, c->refused);
    }
    progress(m->o, m->o->dry_run ? "checking" : "importing", m->keys.n, m->keys.n);
}

/*
 * Every entry through the gate (ingest.c) in a first pass that writes
 * nothing, the signature checked at its end: a damaged or re-signed bundle
 * changes nothing. Then the merge (merge_pass), which reads each entry
 * again, through the gate again. A dry run is the first pass alone.
 */
static int import_from(kcache_bundle_result *r, kcache_store *store, const char *path,
                       const kcache_bundle_options *o)
{
    struct import_run m = {.r = r, .store = store, .path = path, .o = o};
    int rc = import_open(&m);
    if (!rc && !(rc = check_pass(&m)) && !o->dry_run)
        rc = merge_pass(&m);
    /* The closures its entries' compiles remembered, so that their first hit here is one. */
    if (!rc && !o->dry_run)
        kc_carried_import(store, m.src, m.keys.n, m.verify ? &m.secret : NULL);
    if (rc && m.listed)
        import_failed(&m, rc);
    else if (!rc)
        import_report(&m);
    kcache_store_close(m.src);
    free(m.keys.items);
    free(m.conflicts.items);
    kc_bundle_sig_free(&m.sig);
    memset(&m.secret, 0, sizeof(m.secret));
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
