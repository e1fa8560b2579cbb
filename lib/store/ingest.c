/*
 * The gate for bytes entering the store from outside it, a bundle's file
 * checked before any entry of it is read, and signed bundles.
 *
 * What the store writes itself it can trust; a bundle (and later an entry
 * from the remote tier) comes from another machine, and was once enough to
 * poison or exhaust a cache: a 150 KB bundle whose input decodes to 1 GiB,
 * referenced four times, took 8 GB to check; entries the store's own put
 * would refuse were merged halfway before one failed; a date in 9999 made a
 * poisoned entry "newer" than every later good one. So every entry from
 * outside passes the same checks before the first byte of it is kept:
 *
 *   - sizes, from what the rows declare, before anything is decoded: per
 *     entry (artifact and inputs) and per batch. Decoding itself never
 *     writes past a declared size (codec.c checks the zstd frame's own
 *     content size against it), so these bounds are the memory bounds;
 *   - the store's own put rules (kind, architecture, ...);
 *   - the key: BLAKE2b-256 of the entry's key material, as key.c makes it,
 *     recomputed and compared. An entry without key material cannot be
 *     checked and is refused;
 *   - the kind and the architecture against what the key material says
 *     (format/keyfmt.h reads it: the store may not know compile/): a valid
 *     key with a PTX under a CUBIN key, or sm_80 code under an sm_90 key,
 *     would otherwise be served to whoever asks for that key. Material in
 *     no format of kcache's is a key no compile of kcache's asks for, and
 *     is held to nothing more;
 *   - an entry keyed by a caller (keyed.c) is data of the namespace its key
 *     material names, and no other entry's material is a caller's;
 *   - the artifact's digest (the store checks the stored bytes; the digest
 *     it hands out comes from the row);
 *   - created_at and accessed_at clamped to now.
 *
 * Local-only records. The drop-in's record of what its NVRTC says of itself
 * (namespace "kcache.nvrtc", lib/nvrtc-shim/facts.c) is believed because the
 * library here answered it: keyed by the library's file name and build-id, a
 * record from elsewhere would be answered for any file claiming that build,
 * and no rebuild can check it (verify has nothing to recompile). So it is
 * never exported or pushed, and one arriving (an older export, the remote) is
 * passed over: a bundle counts it as skipped, the remote as rejected. It costs
 * one load of NVRTC per machine.
 *
 * A bundle is checked whole, every entry through this gate, before anything
 * is merged, so a bad entry found late changes nothing; the merge then
 * commits whole entries in transactions of about KC_HOLD_NS (bundle.c), so
 * an interrupted import leaves a prefix of the bundle's entries, each whole,
 * and importing again adds the rest (doc/design.md, "Importing a bundle").
 *
 * What no check here can see is an artifact that is not what its key
 * material would build (k19's code under k20's key, digests consistent):
 * `kcache verify --recompile` rebuilds entries and removes those that
 * differ.
 *
 * Conflicts. Entries are content-addressed: two entries under one key with
 * different artifact bytes cannot both be what the key builds. An arriving
 * entry (a bundle's, the remote's) for a key the store holds with other
 * bytes is a conflict, and the entry the store holds is kept, whatever the
 * dates say: what this machine compiled or accepted earlier is no less
 * trustworthy than what arrives, and letting the newer win let a poisoned
 * bundle displace good entries (and stick, once in, against good bundles).
 * A conflict is counted ("conflicts") and said with both digests. Only a
 * rebuild can tell which one is right; that needs the compiler, which the
 * store does not know, so it is the caller's (kcache import
 * --resolve-conflicts; on the compile path, the compile that follows a
 * refused remote value replaces both). The same bytes with other metadata
 * are no conflict: the newer wins, as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/ingest.h"
#include "format/keyfmt.h"
#include "kcache/bundle.h"
#include "format/settings.h"

static int query_double(sqlite3 *db, const char *sql, double *out)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        *out = sqlite3_column_double(st, 0);
        src = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return src;
}

/*
 * KCACHE_ECORRUPT, with what said, when size passes its bound: "<says> N MiB
 * with <whose> inputs (at most M MiB<scope>)".
 */
static int over_bound(char *what, size_t what_size, double size, uint64_t bound, const char *says,
                      const char *whose, const char *scope)
{
    if (size <= (double)bound)
        return 0;
    snprintf(what, what_size, "%s %.0f MiB with %s inputs (at most %llu MiB%s)", says,
             size / (1 << 20), whose, (unsigned long long)(bound >> 20), scope);
    return KCACHE_ECORRUPT;
}

int kc_ingest_check_sizes(sqlite3 *db, int version, char *what, size_t what_size)
{
    /* total(): a float, so that no sum of hostile sizes can overflow into an error. Schema 8:
     * an entry also decodes its shared lists, each time it is read. */
    static const char *const largest_sql[2] = {
        "SELECT coalesce(max(e.raw_size + coalesce((SELECT total(i.size)"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id"
        " WHERE ei.entry_id = e.id), 0)), 0) FROM entry e",
        "SELECT coalesce(max(e.raw_size + coalesce((SELECT total(i.size)"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id WHERE ei.entry_id = e.id), 0)"
        " + (SELECT total(i.size) FROM entry_info f JOIN input_list_item li"
        " ON li.list_id = f.inputs_id JOIN input i ON i.id = li.input_id WHERE f.id = e.id)"
        " + (SELECT total(h.size) FROM entry_info f JOIN header_list h ON h.id = f.headers_id"
        " WHERE f.id = e.id)), 0) FROM entry e",
    };
    static const char *const all_sql[2] = {
        "SELECT (SELECT total(raw_size) FROM entry) + (SELECT total(i.size)"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id)",
        "SELECT (SELECT total(raw_size) FROM entry) + (SELECT total(i.size)"
        " FROM entry_input ei JOIN input i ON i.id = ei.input_id)"
        " + (SELECT total(i.size) FROM entry_info f JOIN input_list_item li"
        " ON li.list_id = f.inputs_id JOIN input i ON i.id = li.input_id)"
        " + (SELECT total(h.size) FROM entry_info f JOIN header_list h ON h.id = f.headers_id)",
    };
    double largest = 0, all = 0;
    const int shared = version >= 8;
    int src = query_double(db, largest_sql[shared], &largest);
    if (src == SQLITE_OK)
        src = query_double(db, all_sql[shared], &all);
    if (src != SQLITE_OK) {
        snprintf(what, what_size, "its sizes cannot be read: %s", sqlite3_errstr(src));
        return KCACHE_ECORRUPT;
    }
    int rc = over_bound(what, what_size, largest, KC_INGEST_MAX_ENTRY,
                        "an entry is too large: it decodes to", "its", "");
    if (!rc)
        rc = over_bound(what, what_size, all, KC_INGEST_MAX_TOTAL,
                        "it is too large: its entries decode to", "their", " in one bundle");
    return rc;
}

int kc_ingest_check_entry(kcache_store *s, kcache_entry *e, int64_t now, char *what,
                          size_t what_size)
{
    uint64_t decoded = e->size;
    for (size_t i = 0; i < e->n_inputs; i++)
        decoded += e->inputs[i].size;
    if (decoded > KC_INGEST_MAX_ENTRY) {
        snprintf(what, what_size, "it is too large (%llu MiB with its inputs)",
                 (unsigned long long)(decoded >> 20));
        return KCACHE_ECORRUPT;
    }
    /* The put rules, with the store's own words; the store's message is restored after. */
    char saved[KC_ERRMSG_SIZE];
    snprintf(saved, sizeof(saved), "%s", s->db.errmsg);
    int rc = kc_put_check(s, e);
    if (rc) {
        const char *why = strstr(s->db.errmsg, ": ");
        snprintf(what, what_size, "%s", why ? why + 2 : s->db.errmsg);
        kc_err(s, 0, "%s", saved);
        return KCACHE_ECORRUPT;
    }
    uint8_t check[KC_DIGEST_SIZE];
    if (!e->key_material_size) {
        snprintf(what, what_size, "it has no key material, so its key cannot be checked");
        return KCACHE_ECORRUPT;
    }
    kc_digest(check, e->key_material, e->key_material_size);
    if (memcmp(check, e->key.bytes, KCACHE_KEY_SIZE) != 0) {
        snprintf(what, what_size, "its key is not the digest of its key material");
        return KCACHE_ECORRUPT;
    }
    char kind[16], arch[64];
    int known = kc_key_target(kind, sizeof(kind), arch, sizeof(arch), e->key_material,
                              e->key_material_size);
    if (known < 0) {
        snprintf(what, what_size, "its key material does not say its kind and architecture");
        return KCACHE_ECORRUPT;
    }
    const char *has_kind = kcache_kind_name(e->kind);
    if (known && (!has_kind || strcmp(kind, has_kind) != 0)) {
        snprintf(what, what_size, "it is a %s under a key for a %s", has_kind ? has_kind : "?",
                 kind);
        return KCACHE_ECORRUPT;
    }
    if (known && strcmp(arch, e->arch ? e->arch : "") != 0) {
        snprintf(what, what_size, "it is for %.32s under a key for %s", e->arch ? e->arch : "",
                 arch);
        return KCACHE_ECORRUPT;
    }
    if ((rc = kc_keyed_check(e, what, what_size)))
        return rc;
    kc_digest(check, e->data, e->size);
    if (memcmp(check, e->digest, KC_DIGEST_SIZE) != 0) {
        snprintf(what, what_size, "it does not match its digest");
        return KCACHE_ECORRUPT;
    }
    e->created_at = e->created_at < 0 ? 0 : e->created_at > now ? now : e->created_at;
    e->accessed_at = e->accessed_at < 0 ? 0 : e->accessed_at > now ? now : e->accessed_at;
    return 0;
}

int kc_ingest_local_only(const kcache_entry *e)
{
    /* The namespace lib/nvrtc-shim/facts.c writes. */
    return e->kind == KCACHE_KIND_DATA && e->arch && !strcmp(e->arch, "kcache.nvrtc");
}

int kc_ingest_existing(kcache_store *s, const kcache_key *key, int64_t *created_at,
                       uint8_t digest[KC_DIGEST_SIZE])
{
    sqlite3_stmt *st;
    int src = kc_step_by_key(&st, s, "SELECT created_at, digest FROM entry WHERE key = ?1", key);
    int found = src == SQLITE_ROW;
    if (found) {
        *created_at = sqlite3_column_int64(st, 0);
        const void *d = sqlite3_column_blob(st, 1);
        memset(digest, 0, KC_DIGEST_SIZE);
        if (d && sqlite3_column_bytes(st, 1) == KC_DIGEST_SIZE)
            memcpy(digest, d, KC_DIGEST_SIZE);
        src = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? found : kc_sqlerr(&s->db, src, "reading an entry");
}

void kc_ingest_conflict_text(char *out, size_t size, const kcache_key *key,
                             const uint8_t kept[KC_DIGEST_SIZE],
                             const uint8_t refused[KC_DIGEST_SIZE], const char *from)
{
    char hex[KCACHE_KEY_HEX_SIZE], a[2 * KC_DIGEST_SIZE + 1], b[2 * KC_DIGEST_SIZE + 1];
    kcache_key_hex(hex, key);
    for (int i = 0; i < KC_DIGEST_SIZE; i++) {
        snprintf(a + 2 * i, 3, "%02x", kept[i]);
        snprintf(b + 2 * i, 3, "%02x", refused[i]);
    }
    snprintf(out, size,
             "conflict: entry %s is here with other bytes than %s's: kept the local artifact "
             "(digest %s), refused the arriving one (digest %s)",
             hex, from, a, b);
}

/*
 * Checking a bundle before anything is read from it through the store: whose
 * file it is, which schema, that the schema holds exactly our objects,
 * SQLite's integrity check and plausible sizes (bundle.c says why).
 */
static int query_int(sqlite3 *db, const char *sql, int64_t bind, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (src == SQLITE_OK) {
        if (sqlite3_bind_parameter_count(st) > 0)
            sqlite3_bind_int64(st, 1, bind);
        src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            src = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return src;
}

/*
 * The oldest bundle schema imported: schema 7 only rewrote the text of
 * schema 6's objects (schema/007_compact.sql), so a bundle of either holds
 * the same tables and columns, and each is compared with its own version's
 * objects below.
 */
#define KC_BUNDLE_OLDEST_SCHEMA 6

/*
 * SQLite's integrity_check can put several lines into one row ("*** in
 * database main ***\nPage 3: ..."): messages are one line.
 */
static void integrity_line(char *out, size_t size, const char *text)
{
    static const char banner[] = "*** in database main ***";
    if (!strncmp(text, banner, sizeof(banner) - 1))
        text += sizeof(banner) - 1;
    while (*text == '\n' || *text == ' ')
        text++;
    size_t n = 0;
    for (; *text && n + 1 < size; text++)
        out[n++] = *text == '\n' || *text == '\r' ? ' ' : *text;
    if (size)
        out[n] = '\0';
}

static int check_integrity(sqlite3 *db, char *what, size_t what_size)
{
    sqlite3_stmt *st = NULL;
    int ok = 0;
    int src = sqlite3_prepare_v2(db, "PRAGMA integrity_check(10)", -1, &st, NULL);
    if (src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(st, 0);
        ok = first && !strcmp(first, "ok") && sqlite3_step(st) == SQLITE_DONE;
        if (!ok) {
            char line[160];
            integrity_line(line, sizeof(line), first ? first : "?");
            snprintf(what, what_size, "SQLite's integrity check failed: %s", line);
        }
    } else {
        snprintf(what, what_size, "SQLite cannot check it: %s", sqlite3_errstr(src));
    }
    sqlite3_finalize(st);
    return ok;
}

/*
 * Whether the rows of a bundle (db, of schema version) declare what no
 * export writes: impossible sizes, inputs of entries that are missing.
 * Returns 1 with `what` saying which, else 0.
 */
static int rows_damaged(sqlite3 *db, int64_t version, char *what, size_t what_size)
{
    int64_t bad = 0;
    int src = query_int(db,
                        "SELECT count(*) FROM entry WHERE raw_size < 0 OR raw_size > ?1"
                        " OR stored_size < 0 OR stored_size > ?1",
                        (int64_t)KCACHE_BUNDLE_MAX_ARTIFACT, &bad);
    if (src == SQLITE_OK && !bad)
        src = query_int(db,
                        "SELECT count(*) FROM input WHERE size < 0 OR size > ?1"
                        " OR length(data) > ?1",
                        (int64_t)KCACHE_BUNDLE_MAX_ARTIFACT, &bad);
    if (src == SQLITE_OK && !bad && version >= 8)
        src = query_int(db,
                        "SELECT count(*) FROM header_list WHERE size < 0 OR size > ?1"
                        " OR length(data) > ?1",
                        (int64_t)KCACHE_BUNDLE_MAX_ARTIFACT, &bad);
    if (src == SQLITE_OK && bad) {
        snprintf(what, what_size, "%lld entries or inputs have impossible sizes",
                 (long long)bad);
        return 1;
    }
    /* The store reads inputs with a join: one that is missing would vanish unseen. */
    if (src == SQLITE_OK)
        src = query_int(db,
                        "SELECT count(*) FROM entry_input ei LEFT JOIN input i"
                        " ON i.id = ei.input_id WHERE i.id IS NULL",
                        0, &bad);
    if (src == SQLITE_OK && !bad && version >= 8)
        src = query_int(db,
                        "SELECT count(*) FROM input_list_item li LEFT JOIN input i"
                        " ON i.id = li.input_id WHERE i.id IS NULL",
                        0, &bad);
    if (src == SQLITE_OK && bad) {
        snprintf(what, what_size, "%lld inputs of entries are missing", (long long)bad);
        return 1;
    }
    if (src != SQLITE_OK) {
        snprintf(what, what_size, "%s", sqlite3_errstr(src));
        return 1;
    }
    return 0;
}

/*
 * 1 if the bundle (db) holds exactly the objects of the store s, whose schema
 * is of the bundle's version. Building the steps' own objects to compare
 * with (kc_db_schema_reference()) cost about 10 ms, half of importing a
 * one-entry bundle, and every hit from the shared tier is one; a store's
 * objects are the steps' (or, migrated, as correct: then the reference is
 * built after all).
 */
static int same_objects_as_store(kcache_store *s, sqlite3 *db, int version)
{
    char what[KC_ERRMSG_SIZE];
    pthread_mutex_lock(&s->lock);
    int same = s->db.conn && s->db.schema_version == version &&
               kc_db_same_objects(db, s->db.conn, what, sizeof(what));
    kc_unlock(s);
    return same;
}

/*
 * Everything about the file that the store does not check when it serves an
 * entry. Opens it read-only, with nothing in it allowed to run code.
 */
int kc_bundle_check_file(kcache_store *s, const char *path, int *has_sig,
                         uint8_t sig[KC_MAC_SIZE])
{
    char what[KC_ERRMSG_SIZE] = "";
    sqlite3 *db = NULL, *ref = NULL;
    int rc = 0;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kc_err_locking(s, KCACHE_EIO, "cannot read %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return kc_err_locking(s, KCACHE_EINVAL, "%s is not a file", path);
    if (sb.st_size == 0)
        return kc_err_locking(s, KCACHE_ECORRUPT, "%s is empty, not a kcache bundle", path);

    struct stat live;
    if (stat(kcache_store_path(s), &live) == 0 && live.st_dev == sb.st_dev &&
        live.st_ino == sb.st_ino)
        return kc_err_locking(s, KCACHE_EINVAL, "%s is the cache itself (another name for it)", path);

    /* immutable: no locks, no -journal, -wal or -shm read or made beside the user's file. */
    int src = kc_sqlite_open_immutable(&db, path);
    if (src != SQLITE_OK) {
        rc = kc_err_locking(s, KCACHE_EIO, "cannot open %s: %s", path, sqlite3_errstr(src));
        goto out;
    }
    sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    /*
     * A file in WAL mode (a copy of a live cache) keeps part of itself in a
     * -wal file and cannot be read without making a -shm beside it: a bundle
     * is one file, as kcache export writes it.
     */
    uint8_t h[20];
    sqlite3_file *f = NULL;
    if (sb.st_size >= (off_t)sizeof(h) &&
        sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) == SQLITE_OK && f &&
        f->pMethods && f->pMethods->xRead(f, h, sizeof(h), 0) == SQLITE_OK &&
        !memcmp(h, "SQLite format 3", 16) && (h[18] == 2 || h[19] == 2)) {
        rc = kc_err_locking(s, KCACHE_EINVAL,
                        "%s is in WAL mode, as a live cache is, not a bundle: make one with "
                        "kcache export; nothing imported",
                        path);
        goto out;
    }

    int64_t app = 0, version = 0;
    src = query_int(db, "PRAGMA application_id", 0, &app);
    if (src == SQLITE_OK)
        src = query_int(db, "PRAGMA user_version", 0, &version);
    if (src != SQLITE_OK) {
        rc = kc_err_locking(s, KCACHE_ECORRUPT, "%s is not a kcache bundle (%s); nothing imported",
                        path, sqlite3_errstr(src));
        goto out;
    }
    if (app != KC_APPLICATION_ID) {
        rc = kc_err_locking(s, KCACHE_EFOREIGN,
                        "%s is not a kcache bundle (another application's database); nothing "
                        "imported",
                        path);
        goto out;
    }
    if (version < KC_BUNDLE_OLDEST_SCHEMA || version > kc_schema_version) {
        rc = kc_err_locking(s, KCACHE_EVERSION,
                        "%s has schema %lld and this kcache reads bundles of schema %d to %d: "
                        "export it again with this version of kcache; nothing imported",
                        path, (long long)version, KC_BUNDLE_OLDEST_SCHEMA, kc_schema_version);
        goto out;
    }
    if (!same_objects_as_store(s, db, (int)version)) {
        if (kc_db_schema_reference(&ref, (int)version) != SQLITE_OK) {
            rc = kc_err_locking(s, KCACHE_ENOMEM, "out of memory");
            goto out;
        }
        if (!kc_db_same_objects(db, ref, what, sizeof(what)))
            goto damaged;
    }
    if (!check_integrity(db, what, sizeof(what)))
        goto damaged;

    if (rows_damaged(db, version, what, sizeof(what)))
        goto damaged;
    /* What all of it decodes to, bounded before the first byte is decoded (ingest.c). */
    if (kc_ingest_check_sizes(db, (int)version, what, sizeof(what)))
        goto damaged;
    if ((*has_sig = kc_bundle_sig_read(db, sig)) < 0) {
        rc = kc_err_locking(s, KCACHE_ECORRUPT,
                            "%s has a signature that is not one (not 32 bytes); nothing imported",
                            path);
        goto out;
    }
    goto out;
damaged:
    rc = kc_err_locking(s, KCACHE_ECORRUPT, "%s is damaged: %s; nothing imported", path, what);
out:
    sqlite3_close(ref);
    sqlite3_close(db);
    return rc;
}

/*
 * Signed bundles.
 *
 * Decisions:
 *   - The secret is the shared tier's (remote_secret), signed with the same
 *     keyed BLAKE2b (format/secret.h): a fleet has one secret to hand out, and
 *     the people who may publish to its Redis are the people who may
 *     publish its bundles.
 *   - What is signed is the bundle's contents, not its file: every field an
 *     import merges (key, kind, arch, name, toolchain, log, compile time,
 *     creation time, the artifact's BLAKE2b-256, the key material, the name
 *     expressions with their lowered names, each input's role, name and
 *     BLAKE2b-256), entry by entry, in key order. The artifact is covered
 *     by its digest, which the import gate checks against the bytes. A file
 *     signature would break with any byte SQLite may rewrite and cannot sit
 *     inside the file it signs.
 *   - The signature is a row of the bundle's counter table
 *     (KC_SIG_NAME, the 32 bytes as a blob): no schema change, so a signed
 *     bundle is still a bundle of this schema that any kcache of it imports
 *     (an older one ignores the row), and a stray counter cannot be mistaken
 *     for one (its value is an integer).
 *   - Export signs whenever the secret is set (signing costs one hash per
 *     entry of what is hashed anyway); `--sign` makes a missing secret an
 *     error, for CI that must not ship an unsigned bundle. Import checks a
 *     signature whenever it has the secret, and refuses a bad one; it
 *     refuses an unsigned bundle only when told to (--require-signature,
 *     import_require_signature), so that unsigned bundles keep working.
 */
#define KC_SIG_NAME "bundle_signature_v1"

struct kc_sig_item {
    kcache_key key;
    uint8_t digest[KC_MAC_SIZE];
};

static void add_u64(kc_mac *m, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    kc_mac_update(m, b, sizeof(b));
}

/* Length first: no two different sequences of fields hash the same stream. */
static void add_bytes(kc_mac *m, const void *data, size_t size)
{
    add_u64(m, size);
    if (size)
        kc_mac_update(m, data, size);
}

static void add_text(kc_mac *m, const char *s)
{
    add_bytes(m, s ? s : "", s ? strlen(s) : 0);
}

/* Adds an item: id orders it, digest says all of it. */
static void sig_add_item(kc_bundle_sig *s, const kcache_key *id, const uint8_t digest[KC_MAC_SIZE])
{
    struct kc_sig_item *grown = kc_grow(s->items, &s->cap, s->n, sizeof(*grown), 256);
    if (!grown) {
        s->failed = 1;
        return;
    }
    s->items = grown;
    s->items[s->n].key = *id;
    memcpy(s->items[s->n++].digest, digest, KC_MAC_SIZE);
}

void kc_bundle_sig_add_closure(kc_bundle_sig *s, const kcache_key *base, const kcache_key *key,
                               int64_t recorded_at, const void *closure, size_t size)
{
    /* An item per (base, key), ordered by both: the digest of the two orders it. */
    uint8_t both[2 * KCACHE_KEY_SIZE], digest[KC_MAC_SIZE];
    kcache_key id;
    memcpy(both, base->bytes, KCACHE_KEY_SIZE);
    memcpy(both + KCACHE_KEY_SIZE, key->bytes, KCACHE_KEY_SIZE);
    kc_digest(id.bytes, both, sizeof(both));
    kc_mac m;
    kc_mac_init(&m, NULL);
    add_text(&m, "kcache-bundle-closure-1");
    add_bytes(&m, both, sizeof(both));
    add_u64(&m, (uint64_t)recorded_at);
    add_bytes(&m, closure, size);
    kc_mac_final(&m, digest);
    sig_add_item(s, &id, digest);
}

void kc_bundle_sig_add(kc_bundle_sig *s, const kcache_entry *e)
{
    uint8_t digest[KC_MAC_SIZE];
    kc_mac m;
    kc_mac_init(&m, NULL);
    add_text(&m, "kcache-bundle-entry-1");
    add_bytes(&m, e->key.bytes, KCACHE_KEY_SIZE);
    add_u64(&m, (uint64_t)e->kind);
    add_text(&m, e->arch);
    add_text(&m, e->name);
    add_text(&m, e->toolchain);
    add_text(&m, e->log);
    add_u64(&m, e->compile_ns);
    add_u64(&m, (uint64_t)e->created_at);
    add_bytes(&m, e->digest, sizeof(e->digest));
    add_bytes(&m, e->key_material, e->key_material_size);
    add_u64(&m, e->n_names);
    for (size_t i = 0; i < e->n_names; i++) {
        add_text(&m, e->name_exprs[i]);
        add_text(&m, e->lowered_names[i]);
    }
    add_u64(&m, e->n_inputs);
    for (size_t i = 0; i < e->n_inputs; i++) {
        uint8_t d[KC_DIGEST_SIZE];
        kc_digest(d, e->inputs[i].data, e->inputs[i].size);
        add_u64(&m, (uint64_t)e->inputs[i].role);
        add_text(&m, e->inputs[i].name);
        add_bytes(&m, d, sizeof(d));
    }
    kc_mac_final(&m, digest);
    sig_add_item(s, &e->key, digest);
}

static int by_key(const void *a, const void *b)
{
    return memcmp(((const struct kc_sig_item *)a)->key.bytes,
                  ((const struct kc_sig_item *)b)->key.bytes, KCACHE_KEY_SIZE);
}

int kc_bundle_sig_finish(uint8_t out[KC_MAC_SIZE], kc_bundle_sig *s, const kc_secret *secret)
{
    if (s->failed)
        return KCACHE_ENOMEM;
    if (s->n)
        qsort(s->items, s->n, sizeof(*s->items), by_key);
    kc_mac m;
    kc_mac_init(&m, secret);
    add_text(&m, "kcache-bundle-1");
    add_u64(&m, s->n);
    for (size_t i = 0; i < s->n; i++)
        kc_mac_update(&m, s->items[i].digest, KC_MAC_SIZE);
    kc_mac_final(&m, out);
    return 0;
}

void kc_bundle_sig_free(kc_bundle_sig *s)
{
    free(s->items);
    memset(s, 0, sizeof(*s));
}

int kc_bundle_sig_read(sqlite3 *db, uint8_t out[KC_MAC_SIZE])
{
    return kc_bundle_sig_read_as(db, KC_SIG_NAME, out);
}

int kc_bundle_sig_read_as(sqlite3 *db, const char *name, uint8_t out[KC_MAC_SIZE])
{
    sqlite3_stmt *st = NULL;
    int found = 0;
    int src = sqlite3_prepare_v2(db, "SELECT value FROM counter WHERE name = ?1", -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            /* Anything but 32 bytes under this name is a signature that cannot match. */
            found = sqlite3_column_type(st, 0) == SQLITE_BLOB &&
                            sqlite3_column_bytes(st, 0) == KC_MAC_SIZE
                        ? 1
                        : KCACHE_ECORRUPT;
            if (found == 1)
                memcpy(out, sqlite3_column_blob(st, 0), KC_MAC_SIZE);
            src = SQLITE_DONE;
        }
    }
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? found : KCACHE_ECORRUPT;
}

int kc_bundle_sig_write(sqlite3 *db, const uint8_t sig[KC_MAC_SIZE])
{
    return kc_bundle_sig_write_as(db, KC_SIG_NAME, sig);
}

int kc_bundle_sig_write_as(sqlite3 *db, const char *name, const uint8_t sig[KC_MAC_SIZE])
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO counter (name, value) VALUES (?1, ?2)",
                                 -1, &st, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, sig, KC_MAC_SIZE, SQLITE_STATIC);
        src = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    return src == SQLITE_DONE ? SQLITE_OK : src;
}

void kc_bundle_secret(kc_secret *out, kcache_store *store)
{
    char text[1024];
    if (kc_config_value(text, sizeof(text), "remote_secret", NULL, kcache_store_path(store)))
        text[0] = '\0';
    kc_secret_init(out, text);
    memset(text, 0, sizeof(text));
}

int kc_bundle_require_setting(int *out, kcache_store *store)
{
    char text[32];
    *out = 0;
    int rc = kc_config_value(text, sizeof(text), "import_require_signature", NULL,
                             kcache_store_path(store));
    if (rc == KCACHE_ENOTFOUND)
        return 0;
    if (rc || kc_config_bool(out, text))
        return KCACHE_EINVAL;
    return 0;
}
