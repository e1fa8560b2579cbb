/*
 * The store's handle and its entries' reads: open, close, get, delete (put.c
 * puts); the handle's lock and the messages said under it; the init
 * functions of the store's versioned structs; the SQL of its named
 * statements, prepared once per connection.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/settings.h"
#include "store/storeint.h"
#include "format/keyfmt.h"
#include "kcache/bundle.h"
#include "kcache/store.h"
#include "kcache/verify.h"
#include "util/common.h"

static void store_free(kcache_store *s)
{
    kc_decoded_free(s);
    kc_db_free(&s->db);
    kc_codec_free(s->codec);
    kc_buf_free(&s->scratch);
    free(s->chunks_checked);
    free(s->touches);
    free(s->usage);
    free(s->counters);
    pthread_mutex_destroy(&s->lock);
    kc_errmsg_forget(s);
    free(s);
}

static int store_open(kcache_store **out, const kcache_store_options *options, int any_owner,
                      char *errbuf, size_t errbuf_size);

KCACHE_API int kcache_store_open(kcache_store **out, const kcache_store_options *options,
                                 char *errbuf, size_t errbuf_size)
{
    return store_open(out, options, 0, errbuf, errbuf_size);
}

int kc_store_open_bundle(kcache_store **out, const char *path, char *errbuf, size_t errbuf_size)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    o.read_only = 1;
    return store_open(out, &o, 1, errbuf, errbuf_size);
}

static int store_open(kcache_store **out, const kcache_store_options *options, int any_owner,
                      char *errbuf, size_t errbuf_size)
{
    static const kcache_store_options defaults = KCACHE_STORE_OPTIONS_INIT;
    if (errbuf && errbuf_size)
        errbuf[0] = '\0';
    if (!out)
        return kc_fmt(errbuf, errbuf_size, KCACHE_EINVAL, "kcache_store_open: out is NULL");
    *out = NULL;
    if (!options)
        options = &defaults;
    if (kc_version_check(errbuf, errbuf_size, "kcache_store_options", options->version,
                         KCACHE_STORE_OPTIONS_VERSION))
        return KCACHE_EINVAL;
    kcache_store *s = kc_calloc(1, sizeof(*s));
    if (!s)
        return kc_fmt(errbuf, errbuf_size, KCACHE_ENOMEM, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    s->db.lock_fd = -1;
    s->db.stmt_sql = kc_stmt_sql;
    s->db.stmts = s->stmts;
    s->db.n_stmts = KC_STMT_COUNT;
    s->db.msg_owner = s;
    s->db.read_only = options->read_only != 0;
    s->db.no_create = options->version >= 2 && options->no_create;
    s->db.any_owner = any_owner;
    s->db.log = options->log;
    s->db.log_userdata = options->log_userdata;
    s->last_flush_ns = kc_mono_ns();
    /* Caller, environment, kcache.conf beside the database, default. */
    int rc = kc_config_path(&s->db.path, options->path, s->db.errmsg, sizeof(s->db.errmsg));
    if (!rc)
        rc = kc_config_max_size_at(&s->max_size, options->max_size, s->db.path, s->db.errmsg,
                                   sizeof(s->db.errmsg));
    if (!rc)
        rc = kc_config_busy_timeout_at(&s->db.busy_timeout_ms, options->busy_timeout_ms, s->db.path,
                                       s->db.errmsg, sizeof(s->db.errmsg));
    if (!rc)
        rc = kc_config_compression_at(&s->compression,
                                      options->version >= 3 ? options->compression : NULL,
                                      s->db.path, s->db.errmsg, sizeof(s->db.errmsg));
    if (!rc) {
        /* Said, not fatal: the settings are what they would be without those files. */
        char ignored[3 * KC_ERRMSG_SIZE];
        char *save = NULL;
        if (kc_config_ignored(s->db.path, ignored, sizeof(ignored)))
            for (char *line = strtok_r(ignored, "\n", &save); line;
                 line = strtok_r(NULL, "\n", &save))
                kc_db_log(&s->db, KCACHE_LOG_WARNING, "%s", line);
    }
    if (!rc && kc_codec_new(&s->codec))
        rc = kc_err(s, KCACHE_ENOMEM, "out of memory");
    struct stat st;
    int fresh = !rc && !s->db.read_only && stat(s->db.path, &st) != 0;
    if (!rc)
        rc = kc_db_open(&s->db);
    /* Said once a node: when the cache is made in the node-local directory (settings.c). */
    char moved[KC_ERRMSG_SIZE];
    if (!rc && fresh && kc_config_node_local(moved, sizeof(moved), s->db.path))
        kc_db_log(&s->db, KCACHE_LOG_WARNING, "%s", moved);
    if (!rc && s->db.replaced_damaged)
        s->pending_corrupt++; /* stats' corrupt counts damaged files too */
    /* What opening said (a damaged file set aside), with no handle yet to call back. */
    kc_logq_deliver(&s->db.logq, s->db.log, s->db.log_userdata);
    if (rc) {
        kc_fmt(errbuf, errbuf_size, rc, "%s", s->db.errmsg);
        store_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

KCACHE_API void kcache_store_close(kcache_store *store)
{
    if (!store)
        return;
    pthread_mutex_lock(&store->lock);
    if (store->db.conn) {
        int rc = kc_record_locked(store, 1);
        if (rc == KCACHE_EBUSY && store->pending_failures) {
            /*
             * The lock another process held kept this compile's entry out,
             * and now its count too: kept in PATH-lock (db/alone.c) for the
             * next flush, so that stats counts every kernel returned uncached.
             */
            kc_spill_add(&store->db, store->pending_failures);
        } else if (rc == KCACHE_EFULL && (store->pending_failures || store->pending_corrupt)) {
            /*
             * A full disk took the store's failure, and the flush that would
             * count it found no room either: stats would say 0 failures after
             * as many warnings. The counters alone are a few bytes; a WAL
             * checkpointed and truncated gives back its room, and they fit.
             * Hits and usage are given up for them. (Only if nobody reads:
             * a close never waits.)
             */
            kc_db_busy(&store->db, 0);
            sqlite3_wal_checkpoint_v2(store->db.conn, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
            kc_db_busy(&store->db, store->db.busy_timeout_ms);
            store->n_touches = 0;
            store->n_usage = 0;
            /* And when even that finds no room, the count waits in PATH-lock (db/alone.c). */
            if (kc_flush_locked(store, 1) != 0)
                kc_spill_add(&store->db, store->pending_failures);
        }
        /*
         * A close checkpoints only when this handle wrote or the WAL is
         * large (db/conn.c, kc_db_settle: a hit must not write), and even
         * then not while another process reads, so a WAL kept from being
         * truncated would stay past the cap for good. The last writer out
         * brings the files back under it; when they already are, this is
         * two stat() calls.
         */
        if (!store->db.read_only && !store->db.newer_schema)
            kc_maybe_prune_locked(store);
    }
    kc_unlock(store);
    store_free(store);
}

KCACHE_API const char *kcache_store_errmsg(const kcache_store *store)
{
    /* The lock is the store's own state, not the caller's: reading under it changes nothing. */
    kcache_store *s = (kcache_store *)store;
    return kc_errmsg_thread(s, s ? s->db.errmsg : NULL, s ? &s->lock : NULL, "no store");
}

KCACHE_API const char *kcache_store_path(const kcache_store *store)
{
    return store ? store->db.path : NULL;
}

KCACHE_API uint64_t kcache_store_max_size(const kcache_store *store)
{
    return store ? store->max_size : 0;
}

KCACHE_API int kcache_store_read_only(const kcache_store *store)
{
    return store ? store->db.read_only || store->db.newer_schema : 1;
}

KCACHE_API int kcache_store_schema_version(const kcache_store *store)
{
    return store ? store->db.schema_version : 0;
}

/* ---- get ------------------------------------------------------------- */

static void free_inputs(struct kc_row *r)
{
    for (size_t i = 0; i < r->n_inputs; i++) {
        free((void *)r->inputs[i].name);
        free((void *)r->inputs[i].data);
    }
    free(r->inputs);
    r->inputs = NULL;
    r->n_inputs = 0;
    free(r->material);
    r->material = NULL;
}

/* An entry's inputs, its own and its shared list's; listed must be the list's number of items. */
static int load_inputs(kcache_store *s, int64_t id, struct kc_row *r, int64_t listed)
{
    sqlite3_stmt *st;
    int rc = kc_db_stmt(&s->db, &st,
                        s->db.schema_version >= 8 ? KC_STMT_GET_INPUTS : KC_STMT_GET_INPUTS_V7);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    size_t cap = 0;
    int64_t from_list = 0;
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        from_list += sqlite3_column_int(st, 7);
        kcache_input *grown = kc_grow(r->inputs, &cap, r->n_inputs, sizeof(*grown), 8);
        if (!grown)
            return KCACHE_ENOMEM;
        r->inputs = grown;
        kcache_input *in = &r->inputs[r->n_inputs];
        const char *name;
        size_t name_n = kc_col_text(st, 1, &name);
        int64_t size = sqlite3_column_int64(st, 2);
        const void *stored = sqlite3_column_blob(st, 5);
        size_t stored_n = (size_t)sqlite3_column_bytes(st, 5);
        const void *digest = sqlite3_column_blob(st, 4);
        void *data = NULL;
        if (size < 0 || sqlite3_column_bytes(st, 4) != KC_DIGEST_SIZE)
            return KCACHE_ECORRUPT;
        if (!kc_codec_known(sqlite3_column_int(st, 3)))
            return KCACHE_ENOTSUP; /* see unreadable() */
        if ((rc = kc_decode(s->codec, &data, sqlite3_column_int(st, 3), stored, stored_n,
                            (size_t)size)))
            return rc;
        uint8_t check[KC_DIGEST_SIZE];
        kc_digest(check, data, (size_t)size);
        in->role = sqlite3_column_int(st, 0);
        in->name = kc_memdup(name, name_n);
        in->data = data;
        in->size = (size_t)size;
        r->n_inputs++;
        if (!in->name)
            return KCACHE_ENOMEM;
        if (memcmp(check, digest, KC_DIGEST_SIZE) != 0)
            return KCACHE_ECORRUPT;
    }
    if (src != SQLITE_DONE)
        return kc_sqlerr(&s->db, src, "reading inputs");
    /* A list or an input of it that is gone would drop inputs unseen. */
    return from_list == listed ? 0 : KCACHE_ECORRUPT;
}

static int delete_locked(kcache_store *s, const kcache_key *key)
{
    int rc = kc_db_begin_write(&s->db);
    if (rc)
        return rc;
    int64_t changed = 0;
    if ((rc = kc_delete_key(s, key, &changed)))
        goto fail;
    if ((rc = kc_pending_write(s)) || (rc = kc_db_commit(&s->db)))
        goto fail;
    kc_pending_clear(s);
    return changed ? 0 : KCACHE_ENOTFOUND;
fail:
    kc_db_rollback(&s->db);
    return rc;
}

/*
 * An entry (or one of its inputs) stored with a codec this build does not
 * know. Damage could write such a number, but so does a newer kcache sharing
 * the cache with a new `compression`: deleting would throw away the other
 * build's good entries on every hit. So it is a miss that changes nothing
 * (not deleted, not counted as damage); the next put of the key replaces it.
 * verify still lists it, with this message.
 */
static int unreadable(kcache_store *s, const kcache_key *key, int codec)
{
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, key);
    s->get_found_damage = 1;
    if (codec >= 0)
        return kc_err(s, KCACHE_ENOTFOUND,
                      "entry %s is stored in codec %d, which this kcache cannot read (a newer "
                      "kcache wrote it?): left in place; upgrade kcache to use it", hex, codec);
    return kc_err(s, KCACHE_ENOTFOUND,
                  "entry %s has an input in a codec this kcache cannot read (a newer kcache "
                  "wrote it?): left in place; upgrade kcache to use it", hex);
}

/*
 * Whether r's kind or arch is not what its key material (kcache's format)
 * says: the key holds both, so an entry that differs was altered after its
 * put, and a flipped kind would hand PTX out as a CUBIN. Material that says
 * it is kcache's and does not parse is damage too; material in another
 * format (a caller's own, through kcache_store_put) says nothing. *ours: 1
 * when it is kcache's.
 */
static int target_differs(const struct kc_row *r, int *ours)
{
    char kind[16], arch[64];
    *ours = 0;
    if (!r->key_material_size)
        return 0;
    int known = kc_key_target(kind, sizeof(kind), arch, sizeof(arch), r->key_material,
                              r->key_material_size);
    if (known <= 0)
        return known < 0;
    *ours = 1;
    const char *has = kcache_kind_name(r->kind);
    return !has || strcmp(kind, has) != 0 || r->arch_n != strlen(arch) ||
           memcmp(r->arch, arch, r->arch_n) != 0;
}

/*
 * Whether r's key material is in kcache's format and no longer parses, says
 * another target or hashes to another key: damage to the material or to the
 * header list it shares.
 */
static int material_differs(const struct kc_row *r)
{
    int ours;
    if (target_differs(r, &ours))
        return 1;
    if (!ours)
        return 0;
    uint8_t d[KC_DIGEST_SIZE];
    kc_digest(d, r->key_material, r->key_material_size);
    return memcmp(d, r->key.bytes, KCACHE_KEY_SIZE) != 0;
}

/*
 * The metadata columns of a get's row into r (the artifact and the shared
 * lists are read after). Returns 1 if the row is damaged (not the key's,
 * a size or the names unreadable), -1 if its codec is one this build does
 * not know, else 0.
 */
static int read_row(struct kc_row *r, sqlite3_stmt *st, const kcache_key *key)
{
    memset(r, 0, sizeof(*r));
    r->key = *key;
    r->kind = sqlite3_column_int(st, 1);
    r->arch_n = kc_col_text(st, 2, &r->arch);
    r->name_n = kc_col_text(st, 3, &r->name);
    int64_t raw_size = sqlite3_column_int64(st, 4);
    r->stored_size = (uint64_t)sqlite3_column_int64(st, 5);
    r->codec = sqlite3_column_int(st, 6);
    if (!kc_codec_known(r->codec))
        return -1;
    kc_row_columns_7_12(r, st);
    r->log_n = kc_col_text(st, 13, &r->log);
    const void *names = sqlite3_column_blob(st, 14);
    /* The row must be the key's: a damaged index can lead a lookup to another
     * entry's row, and handing that out would be a false hit. */
    const void *row_key = sqlite3_column_blob(st, 18);
    int damaged = raw_size < 0 || sqlite3_column_bytes(st, 18) != KCACHE_KEY_SIZE || !row_key ||
                  memcmp(row_key, key->bytes, KCACHE_KEY_SIZE) != 0 ||
                  kc_names_check(&r->names, names, (size_t)sqlite3_column_bytes(st, 14));
    /* The names' check covers the log and the toolchain (entry.c). Every put
     * writes the row of both, whose log is never NULL: without it, an entry
     * would be served with no log and no lowered names. */
    damaged = damaged || sqlite3_column_type(st, 13) == SQLITE_NULL ||
              !kc_names_info_ok(&r->names, r->log, r->log_n, r->toolchain, r->toolchain_n);
    r->key_material = sqlite3_column_blob(st, 15);
    r->key_material_size = (size_t)sqlite3_column_bytes(st, 15);
    r->raw_size = (size_t)raw_size;
    int ours;
    return damaged || target_differs(r, &ours);
}

/*
 * The artifact's column of a get's row into r, checked against its stored
 * digest. Returns 1 if it is damaged, -1 if SQLite ran out of memory, else 0.
 */
static int read_artifact(kcache_store *s, struct kc_row *r, sqlite3_stmt *st)
{
    const void *stored_digest = sqlite3_column_blob(st, 16);
    int digest_n = sqlite3_column_bytes(st, 16);
    /* The type first: reading the blob may convert it. SQLite hands out
     * NULL for an empty blob, which is an empty artifact, not a lost one. */
    int type = sqlite3_column_type(st, 17);
    r->stored = sqlite3_column_blob(st, 17);
    r->stored_n = (size_t)sqlite3_column_bytes(st, 17);
    if (!r->stored && type != SQLITE_NULL && sqlite3_errcode(s->db.conn) == SQLITE_NOMEM)
        return -1;
    if (!r->stored && type == SQLITE_BLOB && r->stored_n == 0)
        r->stored = "";
    int damaged = !r->stored || digest_n != KC_DIGEST_SIZE || r->stored_n != r->stored_size ||
                  !kc_stored_digest_ok(stored_digest, r->stored, r->stored_n);
    /* Raw bytes stored with a BLAKE2b stored digest (rows of before) have
     * no frame checksum behind it and it is the artifact's own digest: the
     * two must be equal (damage that hit both the bytes and stored_digest
     * is caught here). An XXH3 stored digest is independent of the
     * artifact's, so damage would have to match two hashes at once. */
    if (!damaged && r->codec == KC_CODEC_RAW && !kc_stored_digest_fast(stored_digest))
        damaged = !r->digest || memcmp(stored_digest, r->digest, KC_DIGEST_SIZE) != 0;
    return damaged;
}

/* A miss, never a damaged kernel: the entry of key is dropped and counted. */
static int found_damage(kcache_store *s, const kcache_key *key)
{
    s->get_found_damage = 1;
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, key);
    s->pending_corrupt++;
    kc_log(s, KCACHE_LOG_WARNING, "entry %s in %s is damaged%s", hex, s->db.path,
           s->db.read_only || s->db.newer_schema ? "" : "; deleted it");
    if (s->db.read_only || s->db.newer_schema)
        return kc_err(s, KCACHE_ENOTFOUND,
                      "entry %s is damaged (left in place: %s)", hex,
                      s->db.newer_schema ? "a newer kcache's cache is only read"
                                         : "the cache was opened to read only");
    if (delete_locked(s, key) == KCACHE_ECORRUPT)
        return KCACHE_ECORRUPT; /* SQLite says the file is damaged: the caller sets it aside */
    return kc_err(s, KCACHE_ENOTFOUND, "entry %s was damaged and has been deleted", hex);
}

static int get_locked(kcache_store *s, kcache_entry **out, const kcache_key *key, unsigned flags)
{
    s->get_found_damage = 0;
    sqlite3_stmt *st;
    struct kc_row r;
    int rc = kc_db_stmt(&s->db, &st, s->db.schema_version >= 8 ? KC_STMT_GET : KC_STMT_GET_V7);
    if (rc)
        return rc;
    sqlite3_bind_blob(st, 1, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_DONE) {
        sqlite3_reset(st);
        return kc_err(s, KCACHE_ENOTFOUND, "no entry for this key");
    }
    if (src != SQLITE_ROW)
        return kc_sqlerr(&s->db, src, "reading an entry");

    int64_t id = sqlite3_column_int64(st, 0);
    int damaged = read_row(&r, st, key);
    if (damaged < 0) {
        sqlite3_reset(st);
        return unreadable(s, key, r.codec);
    }
    /* A list is shared, so its row is checked where the entry is read whole (shared.c). */
    int shared = damaged ? 0 : kc_shared_material(s, &r, st, flags & KCACHE_GET_INPUTS);
    if (shared == KCACHE_ENOTSUP) {
        sqlite3_reset(st);
        free_inputs(&r);
        return unreadable(s, key, -1);
    }
    if (shared == KCACHE_ENOMEM) {
        rc = kc_err(s, shared, "out of memory reading an entry");
        goto out;
    }
    damaged |= shared != 0;
    /* Read whole (verify, export): kcache's own material must still give the key. */
    if (!damaged && (flags & KCACHE_GET_INPUTS) && material_differs(&r))
        damaged = 1;
    if (!damaged && !(flags & KCACHE_GET_NO_DATA) && (damaged = read_artifact(s, &r, st)) < 0) {
        sqlite3_reset(st);
        return kc_err(s, KCACHE_ENOMEM, "out of memory reading an artifact");
    }
    if (!damaged && (flags & KCACHE_GET_INPUTS)) {
        /* The items the entry's shared input list must give; -1 when the list is gone. */
        int64_t listed = 0;
        if (sqlite3_column_type(st, 25) != SQLITE_NULL)
            listed = sqlite3_column_type(st, 26) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 26);
        rc = load_inputs(s, id, &r, listed);
        if (rc == KCACHE_ECORRUPT) {
            damaged = 1;
        } else if (rc == KCACHE_ENOTSUP) {
            sqlite3_reset(st);
            free_inputs(&r);
            return unreadable(s, key, -1);
        } else if (rc) {
            goto out;
        }
    }
    if (!damaged) {
        rc = kc_entry_build(out, &r, s->codec);
        if (rc == KCACHE_ECORRUPT)
            damaged = 1;
        else if (rc)
            goto out;
    }
    if (damaged) {
        sqlite3_reset(st);
        free_inputs(&r);
        return found_damage(s, key);
    }
    if (!(flags & KCACHE_GET_NO_TOUCH)) {
        kc_touch(s, key);
        if (!(flags & KCACHE_GET_NO_COUNT))
            kc_usage_add(s, r.arch, r.kind, 1, 0, r.compile_ns);
    }
out:
    sqlite3_reset(st);
    free_inputs(&r);
    if (!rc && !(flags & KCACHE_GET_NO_DATA))
        kc_db_map(&s->db); /* from the next hit on */
    return rc;
}

KCACHE_API int kcache_store_get(kcache_entry **out, kcache_store *store, const kcache_key *key,
                                unsigned flags)
{
    KC_CHECK_ARG(store, store && out && key);
    *out = NULL;
    pthread_mutex_lock(&store->lock);
    int rc;
    KC_WITH_RECOVERY(store, rc, get_locked(store, out, key, flags));
    if (!(flags & KCACHE_GET_NO_TOUCH) && store->db.conn)
        kc_maybe_flush_locked(store);
    kc_unlock(store);
    return rc;
}

int kc_store_get_found_damage(kcache_store *s)
{
    pthread_mutex_lock(&s->lock);
    int found = s->get_found_damage;
    kc_unlock(s);
    return found;
}

KCACHE_API int kcache_store_delete(kcache_store *store, const kcache_key *key)
{
    KC_CHECK_ARG(store, store && key);
    pthread_mutex_lock(&store->lock);
    int rc;
    KC_WITH_RECOVERY(store, rc, delete_locked(store, key));
    if (rc == KCACHE_ENOTFOUND)
        kc_err(store, rc, "no entry for this key");
    kc_unlock(store);
    return rc;
}

int kc_check_version(kcache_store *s, const void *versioned, const char *type, unsigned known)
{
    char msg[KC_ERRMSG_SIZE];
    /* A pointer to a struct points to its first field (C11 6.7.2.1): the version. */
    if (versioned && kc_version_check(msg, sizeof(msg), type, *(const unsigned *)versioned, known))
        return kc_err_locking(s, KCACHE_EINVAL, "%s", msg);
    return 0;
}

int kc_step_by_key(sqlite3_stmt **out, kcache_store *s, const char *sql, const kcache_key *key)
{
    *out = NULL;
    int src = sqlite3_prepare_v2(s->db.conn, sql, -1, out, NULL);
    if (src != SQLITE_OK)
        return src;
    sqlite3_bind_blob(*out, 1, key->bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    return sqlite3_step(*out);
}

/*
 * Letting go of the store's lock, and the messages said under it: every file
 * of the store unlocks through here.
 */
void kc_unlock(kcache_store *s)
{
    kc_logq said = kc_logq_take(&s->db.logq);
    pthread_mutex_unlock(&s->lock);
    kc_logq_deliver(&said, s->db.log, s->db.log_userdata);
}

void kc_log_unlocked(kcache_store *s, int level, const char *msg)
{
    if (!s->db.log)
        return;
    kc_logq one = {0};
    kc_logq_add(&one, level, msg);
    kc_logq_deliver(&one, s->db.log, s->db.log_userdata);
}

int kc_err_locking(kcache_store *s, int code, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&s->lock);
    va_start(ap, fmt);
    kc_db_verr(&s->db, code, fmt, ap);
    va_end(ap);
    kc_unlock(s);
    return code;
}

/* The exported kcache_xxx_init() of the store's versioned structs (<kcache/core.h>). */
KC_DEFINE_INIT(kcache_store_options, offsetof(kcache_store_options, no_create),
               offsetof(kcache_store_options, compression), sizeof(kcache_store_options))
KC_DEFINE_INIT(kcache_entry, sizeof(kcache_entry))
KC_DEFINE_INIT(kcache_batch_options, sizeof(kcache_batch_options))
KC_DEFINE_INIT(kcache_namespace_stats, sizeof(kcache_namespace_stats))
KC_DEFINE_INIT(kcache_filter, sizeof(kcache_filter))
KC_DEFINE_INIT(kcache_prune_options, sizeof(kcache_prune_options))
KC_DEFINE_INIT(kcache_prune_result, sizeof(kcache_prune_result))
KC_DEFINE_INIT(kcache_bundle_options, offsetof(kcache_bundle_options, sign),
               sizeof(kcache_bundle_options))
KC_DEFINE_INIT(kcache_bundle_result, offsetof(kcache_bundle_result, conflicts),
               sizeof(kcache_bundle_result))
KC_DEFINE_INIT(kcache_recompress_options, sizeof(kcache_recompress_options))
KC_DEFINE_INIT(kcache_recompress_result, sizeof(kcache_recompress_result))
KC_DEFINE_INIT(kcache_verify_result, sizeof(kcache_verify_result))

/* The SQL of the store's named statements (storeint.h), prepared once per connection. */
const char *const kc_stmt_sql[KC_STMT_COUNT] = {
    /*
     * Prepared by every hit process. Each bare column makes SQLite work out
     * its declared type and origin table for the result's metadata; the
     * unary + makes the columns expressions, which it skips: 0.27 M -> 0.23 M
     * instructions to prepare, the same rows.
     */
    [KC_STMT_GET] =
        "SELECT +e.id, +e.kind, +e.arch, +e.name, +e.raw_size, +e.stored_size, +e.codec,"
        " +e.digest, +e.created_at, +e.accessed_at, +e.hits, +e.compile_ns, +e.toolchain,"
        " +i.log, +i.names, +i.key_material, +a.stored_digest, +a.data,"
        /* The key as the row has it, read through the rowid: e.key itself
         * would be read from the very index entry that led here. */
        " (SELECT k.key FROM entry k WHERE k.id = e.id),"
        /* The shared lists (shared.c): the header list to put back into the key material,
         * the number of items the input list must give. */
        " +i.headers_id, +i.headers_at, +h.size, +h.codec, +h.data, +h.digest,"
        " +i.inputs_id, (SELECT l.n FROM input_list l WHERE l.id = i.inputs_id)"
        " FROM entry e LEFT JOIN entry_info i ON i.id = e.id LEFT JOIN artifact a ON a.id = e.id"
        " LEFT JOIN header_list h ON h.id = i.headers_id"
        " WHERE e.key = ?1",
    /* An entry's own inputs and those of its shared list, in their order; the last column
     * says which. */
    [KC_STMT_GET_INPUTS] =
        "SELECT ei.role, ei.name, i.size, i.codec, i.digest, i.data, ei.seq, 0"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id WHERE ei.entry_id = ?1"
        " UNION ALL SELECT li.role, li.name, i.size, i.codec, i.digest, i.data,"
        " f.inputs_at + li.seq, 1 FROM entry_info f JOIN input_list_item li"
        " ON li.list_id = f.inputs_id JOIN input i ON i.id = li.input_id WHERE f.id = ?1"
        " ORDER BY 7",
    [KC_STMT_DELETE] = "DELETE FROM entry WHERE key = ?1",
    [KC_STMT_INSERT_ENTRY] =
        "INSERT INTO entry (key, kind, arch, name, raw_size, stored_size, codec, digest,"
        " created_at, accessed_at, hits, compile_ns, toolchain)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 0, ?10, ?11)",
    [KC_STMT_INSERT_INFO] =
        "INSERT INTO entry_info (id, log, names, key_material, headers_id, headers_at, inputs_id,"
        " inputs_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [KC_STMT_INSERT_ARTIFACT] =
        "INSERT INTO artifact (id, stored_digest, data) VALUES (?1, ?2, ?3)",
    [KC_STMT_FIND_INPUT] = "SELECT id FROM input WHERE digest = ?1",
    [KC_STMT_INSERT_INPUT] =
        "INSERT INTO input (digest, size, codec, data) VALUES (?1, ?2, ?3, ?4)",
    [KC_STMT_INSERT_ENTRY_INPUT] =
        "INSERT INTO entry_input (entry_id, seq, role, name, input_id) VALUES (?1, ?2, ?3, ?4, ?5)",
    [KC_STMT_TOUCH] =
        "UPDATE entry SET accessed_at = max(accessed_at, ?2), hits = hits + ?3 WHERE key = ?1",
    [KC_STMT_USAGE_ADD] =
        "INSERT INTO usage (arch, kind, hits, misses, saved_ns) VALUES (?1, ?2, ?3, ?4, ?5)"
        " ON CONFLICT (arch, kind) DO UPDATE SET hits = hits + excluded.hits,"
        " misses = misses + excluded.misses, saved_ns = saved_ns + excluded.saved_ns",
    [KC_STMT_COUNTER_ADD] =
        "INSERT INTO counter (name, value) VALUES (?1, ?2)"
        " ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    [KC_STMT_FIND_PREFIX] = "SELECT key FROM entry WHERE key >= ?1 AND key < ?2 LIMIT 2",
#define KC_LIST_SELECT                                                                             \
    "SELECT id, key, kind, arch, name, raw_size, stored_size, digest, created_at, accessed_at,"    \
    " hits, compile_ns, toolchain FROM entry"                                                      \
    " WHERE (?1 IS NULL OR arch = ?1) AND (?2 = 0 OR kind = ?2)"                                   \
    " AND (?3 = 0 OR accessed_at < ?3) AND (?4 = 0 OR created_at >= ?4)"
    [KC_STMT_LIST_ACCESSED] = KC_LIST_SELECT " ORDER BY accessed_at DESC, id LIMIT ?5",
    [KC_STMT_LIST_CREATED] = KC_LIST_SELECT " ORDER BY created_at DESC, id LIMIT ?5",
    [KC_STMT_LIST_SIZE] = KC_LIST_SELECT " ORDER BY raw_size DESC, id LIMIT ?5",
    [KC_STMT_LIST_HITS] = KC_LIST_SELECT " ORDER BY hits DESC, id LIMIT ?5",
    [KC_STMT_LIST_LRU] = KC_LIST_SELECT " ORDER BY accessed_at ASC, id LIMIT ?5",
#undef KC_LIST_SELECT
    [KC_STMT_LRU_BATCH] =
        "SELECT id, stored_size, accessed_at FROM entry ORDER BY accessed_at, id LIMIT ?1",
    [KC_STMT_TOTALS] = "SELECT entries, raw_bytes, stored_bytes FROM totals",
    [KC_STMT_COUNTERS] = "SELECT name, value FROM counter",
    [KC_STMT_COUNTER_GET] = "SELECT value FROM counter WHERE name = ?1",
    [KC_STMT_USAGE] = "SELECT arch, kind, hits, misses, saved_ns FROM usage",
    [KC_STMT_MANIFEST_GET] =
        "SELECT m.key, m.recorded_at, c.codec, c.raw_size, c.data, c.id, c.parts, c.digest"
        " FROM manifest m"
        " JOIN closure c ON c.id = m.closure_id WHERE m.base = ?1"
        " ORDER BY m.created_at DESC LIMIT ?2",
    /* A file of schema 8 opened to read: every closure whole. */
    [KC_STMT_MANIFEST_GET_V8] =
        "SELECT m.key, m.recorded_at, c.codec, c.raw_size, c.data, c.id, NULL, c.digest"
        " FROM manifest m"
        " JOIN closure c ON c.id = m.closure_id WHERE m.base = ?1"
        " ORDER BY m.created_at DESC LIMIT ?2",
    /* A delete, then an insert: a REPLACE would not fire manifest_removed. */
    [KC_STMT_MANIFEST_DELETE] = "DELETE FROM manifest WHERE base = ?1 AND key = ?2",
    [KC_STMT_MANIFEST_PUT] =
        "INSERT INTO manifest (base, key, closure_id, recorded_at, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5)",
    [KC_STMT_MANIFEST_TRIM] =
        "DELETE FROM manifest WHERE base = ?1 AND key NOT IN"
        " (SELECT key FROM manifest WHERE base = ?1 ORDER BY created_at DESC LIMIT ?2)",
    [KC_STMT_CLOSURE_FIND] = "SELECT id FROM closure WHERE digest = ?1",
    [KC_STMT_CLOSURE_PUT_PARTS] =
        "INSERT INTO closure (digest, raw_size, codec, data, parts) VALUES (?1, ?2, 0, x'', ?3)",
    [KC_STMT_CLOSURE_PART_PUT] =
        "INSERT INTO closure_part (closure_id, seq, chunk_id) VALUES (?1, ?2, ?3)",
    [KC_STMT_CLOSURE_PARTS] =
        "SELECT k.codec, k.size, k.data, k.digest FROM closure_part p JOIN closure_chunk k"
        " ON k.id = p.chunk_id WHERE p.closure_id = ?1 ORDER BY p.seq",
    [KC_STMT_CLOSURE_DIGEST] = "SELECT digest FROM closure WHERE id = ?1",
    [KC_STMT_CHUNK_FIND] = "SELECT id FROM closure_chunk WHERE digest = ?1",
    [KC_STMT_CHUNK_PUT] =
        "INSERT INTO closure_chunk (digest, size, codec, data) VALUES (?1, ?2, ?3, ?4)",
    /* A file of schema 6 or 7 opened to read (a bundle, a read-only cache): nothing shared. */
    [KC_STMT_GET_V7] =
        "SELECT +e.id, +e.kind, +e.arch, +e.name, +e.raw_size, +e.stored_size, +e.codec,"
        " +e.digest, +e.created_at, +e.accessed_at, +e.hits, +e.compile_ns, +e.toolchain,"
        " +i.log, +i.names, +i.key_material, +a.stored_digest, +a.data,"
        " (SELECT k.key FROM entry k WHERE k.id = e.id), NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
        " NULL"
        " FROM entry e LEFT JOIN entry_info i ON i.id = e.id LEFT JOIN artifact a ON a.id = e.id"
        " WHERE e.key = ?1",
    [KC_STMT_GET_INPUTS_V7] =
        "SELECT ei.role, ei.name, i.size, i.codec, i.digest, i.data, ei.seq, 0"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id"
        " WHERE ei.entry_id = ?1 ORDER BY ei.seq",
    [KC_STMT_HEADERS_FIND] = "SELECT id FROM header_list WHERE digest = ?1",
    [KC_STMT_HEADERS_PUT] =
        "INSERT INTO header_list (digest, size, codec, data) VALUES (?1, ?2, ?3, ?4)",
    [KC_STMT_INPUTS_FIND] = "SELECT id FROM input_list WHERE digest = ?1",
    [KC_STMT_INPUTS_PUT] = "INSERT INTO input_list (digest, n) VALUES (?1, ?2)",
    [KC_STMT_INPUTS_PUT_ITEM] =
        "INSERT INTO input_list_item (list_id, seq, role, name, input_id)"
        " VALUES (?1, ?2, ?3, ?4, ?5)",
};
