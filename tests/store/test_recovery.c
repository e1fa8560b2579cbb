/*
 * Every row of doc/design.md's recovery table, as a user would meet it: what is
 * found at the path, what open, get and put then do, what is left on disk.
 * A cache may lose entries, never a user's data, never correctness.
 */
#include <dirent.h>
#include <fcntl.h>

#include "store/storeint.h"
#include "storetest.h"

#define ART_MAX (40 * 1024)

static uint8_t scratch[ART_MAX];

/* ---- files ------------------------------------------------------------ */

/* Puts bytes at a database path the way a user would find them: alone, with
 * no -wal or -shm of an earlier database beside them. */
static void plant(const char *path, const void *p, size_t n)
{
    char side[600];
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
    test_spit(path, p, n);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/*
 * Names of the files kcache set aside for base: base.corrupt-YYYYMMDDTHHMMSS...
 * without their -wal companions. Sorted, oldest first.
 */
static size_t quarantined(const char *base, char names[][256], size_t max)
{
    char prefix[256];
    snprintf(prefix, sizeof(prefix), "%s.corrupt-", base);
    size_t plen = strlen(prefix), n = 0;
    DIR *d = opendir(test_dir());
    REQUIRE(d);
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, prefix, plen) != 0 || len < plen + 9 ||
            de->d_name[plen] != '2' || de->d_name[plen + 8] != 'T' ||
            !strcmp(de->d_name + len - 4, "-wal"))
            continue;
        if (n < max)
            snprintf(names[n], 256, "%s", de->d_name);
        n++;
    }
    closedir(d);
    for (size_t i = 1; i < n && i < max; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[256];
            memcpy(t, names[j], 256);
            memcpy(names[j], names[j - 1], 256);
            memcpy(names[j - 1], t, 256);
        }
    return n;
}

/* Files a user keeps next to the cache: kcache must never remove them. */
struct bystander {
    const char *name;
    const char *text;
};

static const struct bystander bystanders[] = {
    {"notes.txt", "my notes\n"},
    {"garbage.db.corrupt-mine", "a user's file that happens to share the prefix\n"},
    {"garbage.db.corrupt-0-old", "sorts before every timestamp\n"},
    {"bounded.db.corrupt-backup", "another one\n"},
    {"bounded.db.corrupt-1999", "and another\n"},
    {"bounded.db.bak", "a backup\n"},
};

static void bystanders_place(void)
{
    for (size_t i = 0; i < KC_ARRAY_SIZE(bystanders); i++)
        test_spit(test_path(bystanders[i].name), bystanders[i].text, strlen(bystanders[i].text));
}

static void bystanders_check(const char *after)
{
    for (size_t i = 0; i < KC_ARRAY_SIZE(bystanders); i++) {
        if (!test_same_bytes(test_path(bystanders[i].name), (const uint8_t *)bystanders[i].text,
                        strlen(bystanders[i].text))) {
            fprintf(stderr, "after %s: %s was removed or changed\n", after, bystanders[i].name);
            test_failures++;
        }
    }
}

/* ---- stores ----------------------------------------------------------- */

/* A closed store at path holding entries [first, first + n). */
static void make_store(const char *path, unsigned first, unsigned n)
{
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = first; i < first + n; i++)
        CHECK_RC(st_put(s, i, ART_MAX, scratch), 0);
    kcache_store_close(s);
    /* kcache keeps its WAL across a close; a plain connection's close folds
     * it into the file, so that the damage below lands on every page. */
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(st_sql_int(db, "PRAGMA wal_checkpoint(TRUNCATE)") == 0);
    sqlite3_close(db);
    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    REQUIRE(!exists(wal));
}

/* The store works: a put is read back intact, and stays readable. */
static void check_usable(kcache_store *s, unsigned n, const char *what)
{
    int rc = st_put(s, n, ART_MAX, scratch);
    if (rc) {
        fprintf(stderr, "%s: put: %d %s\n", what, rc, kcache_store_errmsg(s));
        test_failures++;
        return;
    }
    kcache_entry *e = NULL;
    kcache_key k = st_key(n);
    rc = kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH);
    if (rc || !st_entry_ok(e, n, ART_MAX, scratch)) {
        fprintf(stderr, "%s: get after put: %d %s\n", what, rc, kcache_store_errmsg(s));
        test_failures++;
    }
    kcache_entry_free(e);
}

/* Every key in range either reads back exactly as put, or is a miss. */
static unsigned check_no_wrong_bytes(kcache_store *s, unsigned first, unsigned n,
                                     const char *what)
{
    unsigned present = 0;
    for (unsigned i = first; i < first + n; i++) {
        kcache_entry *e = NULL;
        kcache_key k = st_key(i);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT);
        if (rc == 0) {
            present++;
            if (!st_entry_ok(e, i, ART_MAX, scratch)) {
                fprintf(stderr, "%s: entry %u came back with wrong bytes\n", what, i);
                test_failures++;
            }
        } else if (rc != KCACHE_ENOTFOUND) {
            fprintf(stderr, "%s: get %u: %d %s\n", what, i, rc, kcache_store_errmsg(s));
            test_failures++;
        }
        kcache_entry_free(e);
    }
    return present;
}

static uint64_t stats_corrupt(kcache_store *s)
{
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    uint64_t v = st ? st->corrupt : UINT64_MAX;
    kcache_stats_free(st);
    return v;
}

/* ---- not SQLite, or SQLite says corrupt -------------------------------- */

/* What is found is set aside byte for byte, a new cache starts, the log says so. */
static void expect_set_aside(const char *name, const uint8_t *bytes, size_t n, const char *what)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path(name));
    char before[8][256], after[8][256];
    size_t n_before = quarantined(name, before, 8);
    struct st_log l;
    kcache_store *s = st_open_counted(path, &l, what);
    if (!s)
        return;
    CHECK(l.warnings == 1);
    CHECK(strstr(l.last, path) && strstr(l.last, ".corrupt-"));
    size_t n_after = quarantined(name, after, 8);
    CHECK(n_after == KC_MIN(n_before + 1, 3));
    /* The newest one holds exactly what was found. */
    if (n_after)
        CHECK(test_same_bytes(test_path(after[KC_MIN(n_after, 8) - 1]), bytes, n));
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    CHECK(!kcache_store_read_only(s));
    CHECK(stats_corrupt(s) == 1);
    check_no_wrong_bytes(s, 0, 10, what);
    check_usable(s, 1000, what);
    kcache_store_close(s);
    CHECK(st_integrity_ok(path));
    /* Reopening finds a healthy cache: nothing more is set aside. */
    char err[512];
    CHECK_RC(st_open_logged(&s, path, &l, err, sizeof(err)), 0);
    CHECK(l.warnings == 0);
    kcache_store_close(s);
    CHECK(quarantined(name, after, 8) == n_after);
    bystanders_check(what);
}

static void test_garbage(void)
{
    static uint8_t junk[20000];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)"this is not a database, just text\n"[i % 34];
    test_spit(test_path("garbage.db"), junk, sizeof(junk));
    /* A stale WAL next to it must go with it, never be replayed into the new file. */
    test_spit(test_path("garbage.db-wal"), junk, 5000);
    expect_set_aside("garbage.db", junk, sizeof(junk), "garbage file");
    CHECK(!exists(test_path("garbage.db-wal")) ||
          st_file_size(test_path("garbage.db-wal")) != 5000);

    /* Short ones, and one that starts like SQLite and then is not. */
    test_spit(test_path("short.db"), "x", 1);
    expect_set_aside("short.db", (const uint8_t *)"x", 1, "one-byte file");
    uint8_t fake[4096];
    memset(fake, 0xa5, sizeof(fake));
    memcpy(fake, "SQLite format 3", 16);
    test_spit(test_path("fake.db"), fake, sizeof(fake));
    expect_set_aside("fake.db", fake, sizeof(fake), "file with an SQLite header and garbage");
}

static void test_truncated(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("trunc.db"));
    make_store(path, 0, 60);
    size_t n;
    uint8_t *whole = test_slurp(path, &n);
    REQUIRE(whole && n > 100000);
    size_t cuts[] = {n / 2, n / 2 + 1000, 5000, 4096};
    for (size_t i = 0; i < KC_ARRAY_SIZE(cuts); i++) {
        char what[64];
        snprintf(what, sizeof(what), "database truncated to %zu of %zu bytes", cuts[i], n);
        plant(path, whole, cuts[i]);
        expect_set_aside("trunc.db", whole, cuts[i], what);
    }
    free(whole);
}

/*
 * kcache keeps its WAL across a close, so a database is often found truncated
 * with its WAL beside it. Open cannot tell from sizes alone; reads find the
 * missing pages. No get may return wrong bytes or fail, and the store works.
 */
static void test_truncated_with_wal(void)
{
    char path[512], wal[600];
    snprintf(path, sizeof(path), "%s", test_path("trunc-wal.db"));
    snprintf(wal, sizeof(wal), "%s-wal", path);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < 60; i++)
        CHECK_RC(st_put(s, i, ART_MAX, scratch), 0);
    /* Part of the data folded into the file, the rest left in the WAL. */
    kcache_store_vacuum(s);
    for (unsigned i = 60; i < 90; i++)
        CHECK_RC(st_put(s, i, ART_MAX, scratch), 0);
    kcache_store_close(s);
    uint64_t n = st_file_size(path);
    REQUIRE(n > 100000 && exists(wal));
    REQUIRE(truncate(path, (off_t)(n / 2)) == 0);
    struct st_log l;
    char err[512];
    CHECK_RC(st_open_logged(&s, path, &l, err, sizeof(err)), 0);
    REQUIRE(s);
    unsigned present = check_no_wrong_bytes(s, 0, 90, "truncated with its WAL");
    check_usable(s, 500, "truncated with its WAL");
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    o.max_entries = 10;
    CHECK_RC(kcache_store_prune(NULL, s, &o), 0);
    check_usable(s, 501, "truncated with its WAL");
    kcache_store_close(s);
    printf("truncated with its WAL: %u of 90 entries still served, %d files set aside\n",
           present, l.set_aside);
    bystanders_check("truncated with its WAL");
}

static void test_empty(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("empty.db"));
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    close(fd);
    struct st_log l;
    kcache_store *s = NULL;
    char err[512], names[4][256];
    CHECK_RC(st_open_logged(&s, path, &l, err, sizeof(err)), 0);
    REQUIRE(s);
    CHECK(l.warnings == 0);
    CHECK(quarantined("empty.db", names, 4) == 0);
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    CHECK(stats_corrupt(s) == 0);
    check_usable(s, 7, "empty file");
    kcache_store_close(s);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(st_integrity_ok(path));
}

/*
 * Bytes overwritten inside pages. SQLite may notice only when it reads a
 * damaged page; whatever happens, no get returns other bytes than were put,
 * no call fails, and the store keeps working.
 */
static void test_random_pages(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("pages.db"));
    make_store(path, 0, 60);
    size_t n;
    uint8_t *whole = test_slurp(path, &n);
    REQUIRE(whole);
    uint8_t *copy = malloc(n);
    REQUIRE(copy);
    unsigned set_aside = 0, damaged_entries = 0, still_damaged = 0;
    for (unsigned seed = 1; seed <= 40; seed++) {
        memcpy(copy, whole, n);
        uint64_t x = seed * 0x9e3779b97f4a7c15u;
        unsigned chunks = 1 + seed % 4;
        for (unsigned c = 0; c < chunks; c++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            /* Seeds 1-5 hit the first pages (header, schema, roots) */
            size_t span = seed <= 5 ? KC_MIN(n, 16384) - 100 : n - 100;
            size_t off = 100 + (size_t)(x >> 20) % span;
            size_t len = KC_MIN((size_t)(16 + (x >> 8) % 512), n - off);
            for (size_t i = 0; i < len; i++) {
                x = x * 6364136223846793005u + 1442695040888963407u;
                copy[off + i] = (uint8_t)(x >> 56);
            }
        }
        plant(path, copy, n);
        char what[64];
        snprintf(what, sizeof(what), "random bytes into pages, seed %u", seed);
        struct st_log l;
        kcache_store *s = st_open_counted(path, &l, what);
        if (!s)
            continue;
        unsigned present = check_no_wrong_bytes(s, 0, 60, what);
        damaged_entries += 60 - present;
        /* Writes go on working, and so does a prune that walks every entry. */
        check_usable(s, 2000 + seed, what);
        kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
        o.max_entries = 5;
        int rc = kcache_store_prune(NULL, s, &o);
        if (rc) {
            fprintf(stderr, "%s: prune: %d %s\n", what, rc, kcache_store_errmsg(s));
            test_failures++;
        }
        check_usable(s, 3000 + seed, what);
        kcache_store_close(s);
        set_aside += l.set_aside;
        /* Damage in a page nothing read yet may still be there: the next
         * session meets it under the same contract, and still works. */
        if (!st_integrity_ok(path)) {
            still_damaged++;
            REQUIRE((s = st_open_counted(path, &l, what)));
            check_no_wrong_bytes(s, 0, 60, what);
            check_usable(s, 4000 + seed, what);
            kcache_store_close(s);
        }
        unlink(path);
    }
    printf("random bytes into pages: 40 rounds, %u entries found damaged, %u files set aside, "
           "%u with damage not met yet\n",
           damaged_entries, set_aside, still_damaged);
    free(copy);
    free(whole);
    bystanders_check("random bytes into pages");
}

/* ---- another application's SQLite file --------------------------------- */

static void test_foreign(void)
{
    static const char *const setups[] = {
        "CREATE TABLE songs (title TEXT, year INT); INSERT INTO songs VALUES ('a', 1999);",
        "PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (randomblob(9000));",
        "PRAGMA application_id = 1234; PRAGMA user_version = 3;",
        "PRAGMA user_version = 1;",
        /* kcache's own layout, but not marked as kcache's */
        "CREATE TABLE entry (id INTEGER PRIMARY KEY, key BLOB); PRAGMA user_version = 2;",
    };
    for (size_t i = 0; i < KC_ARRAY_SIZE(setups); i++) {
        char name[32];
        snprintf(name, sizeof(name), "foreign%zu.db", i);
        char path[512];
    snprintf(path, sizeof(path), "%s", test_path(name));
        st_sql(path, setups[i]);
        size_t n;
        uint8_t *before = test_slurp(path, &n);
        REQUIRE(before);
        struct stat st0, st1;
        REQUIRE(stat(path, &st0) == 0);
        for (int ro = 0; ro < 2; ro++) {
            kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
            o.path = path;
            o.read_only = ro;
            kcache_store *s = (kcache_store *)1;
            char err[512];
            CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_EFOREIGN);
            CHECK(s == NULL);
            /* Says which file and what to do. */
            CHECK(strstr(err, path) != NULL);
            CHECK(strstr(err, "KCACHE_PATH") != NULL);
        }
        CHECK(test_same_bytes(path, before, n));
        REQUIRE(stat(path, &st1) == 0);
        CHECK(st1.st_mtim.tv_sec == st0.st_mtim.tv_sec &&
              st1.st_mtim.tv_nsec == st0.st_mtim.tv_nsec);
        CHECK(st1.st_mode == st0.st_mode);
        char side[600], names[2][256];
        snprintf(side, sizeof(side), "%s-wal", path);
        CHECK(!exists(side));
        snprintf(side, sizeof(side), "%s-shm", path);
        CHECK(!exists(side));
        CHECK(quarantined(name, names, 2) == 0);
        free(before);
    }
    bystanders_check("foreign databases");
}

/* ---- schema versions ----------------------------------------------------- */

static void set_user_version(const char *path, int v, const char *extra)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d; %s", v, extra ? extra : "");
    st_sql(path, sql);
}

static void test_future_version(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("future.db"));
    make_store(path, 0, 5);
    set_user_version(path, kc_schema_version + 1, NULL);
    size_t n;
    uint8_t *before = test_slurp(path, &n);
    REQUIRE(before);
    struct st_log l;
    kcache_store *s = NULL;
    char err[512];
    CHECK_RC(st_open_logged(&s, path, &l, err, sizeof(err)), 0);
    REQUIRE(s);
    CHECK(l.warnings == 1 && strstr(l.last, "upgrade kcache"));
    CHECK(kcache_store_read_only(s));
    CHECK(kcache_store_schema_version(s) == kc_schema_version + 1);
    /* Reads are served. */
    CHECK(check_no_wrong_bytes(s, 0, 5, "future version") == 5);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->entries == 5);
    kcache_stats_free(st);
    /* Writes are refused, saying what to do. */
    CHECK_RC(st_put(s, 100, ART_MAX, scratch), KCACHE_EVERSION);
    CHECK(strstr(kcache_store_errmsg(s), "upgrade kcache") != NULL);
    kcache_key k = st_key(1);
    CHECK_RC(kcache_store_delete(s, &k), KCACHE_EVERSION);
    CHECK(strstr(kcache_store_errmsg(s), "upgrade kcache") != NULL);
    CHECK_RC(kcache_store_prune(NULL, s, NULL), KCACHE_EVERSION);
    CHECK_RC(kcache_store_clear(s), KCACHE_EVERSION);
    CHECK_RC(kcache_store_vacuum(s), KCACHE_EVERSION);
    kcache_store_close(s);
    /* Nothing was written: the newer kcache finds its file as it left it. */
    CHECK(test_same_bytes(path, before, n));
    free(before);

    /* A newer layout this build cannot read: a get says so too. */
    char path2[512];
    snprintf(path2, sizeof(path2), "%s", test_path("future2.db"));
    make_store(path2, 0, 2);
    set_user_version(path2, kc_schema_version + 5, "ALTER TABLE entry RENAME TO entry_v9;");
    CHECK_RC(st_open_logged(&s, path2, &l, err, sizeof(err)), 0);
    REQUIRE(s);
    kcache_entry *e = NULL;
    k = st_key(0);
    CHECK_RC(kcache_store_get(&e, s, &k, 0), KCACHE_EVERSION);
    CHECK(e == NULL);
    CHECK(strstr(kcache_store_errmsg(s), "upgrade kcache") != NULL);
    kcache_store_close(s);
    bystanders_check("future versions");
}

/* Builds a kcache file of schema version 1, as the first release wrote it. */
static void make_v1(const char *path)
{
    struct kc_db *s = kc_calloc(1, sizeof(*s));
    REQUIRE(s);
    s->path = kc_strdup(path);
    s->busy_timeout_ms = 5000;
    REQUIRE(sqlite3_open(path, &s->conn) == SQLITE_OK);
    REQUIRE(kc_db_exec(s, "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL", "") == 0);
    CHECK_RC(kc_db_migrate_to(s, 1), 0);
    CHECK(s->schema_version == 1);
    /* One entry, written with SQL as version 1 stores them. */
    enum { N = 20000 };
    st_fill(scratch, N, 42);
    kc_codec_ctx *c = NULL;
    REQUIRE(kc_codec_new(&c) == 0);
    kc_buf enc = {0};
    int codec;
    REQUIRE(kc_encode(c, &enc, &codec, KC_CODEC_ZSTD, scratch, N) == 0 && codec == KC_CODEC_ZSTD);
    uint8_t digest[KC_DIGEST_SIZE], stored_digest[KC_DIGEST_SIZE];
    kc_digest(digest, scratch, N);
    kc_digest(stored_digest, enc.data, enc.size);
    kcache_key k = st_key(42);
    sqlite3_stmt *st = NULL;
    static const char insert[] =
        "INSERT INTO entry (id, key, kind, arch, name, raw_size, stored_size, codec, digest,"
        " created_at, accessed_at, hits, compile_ns, toolchain)"
        " VALUES (1, ?1, 1, 'sm_80', 'old.cu', ?2, ?3, ?4, ?5, 1, 1, 3, 7, 'nvrtc 12')";
    REQUIRE(sqlite3_prepare_v2(s->conn, insert, -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_blob(st, 1, k.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, N);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)enc.size);
    sqlite3_bind_int(st, 4, codec);
    sqlite3_bind_blob(st, 5, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    REQUIRE(sqlite3_prepare_v2(s->conn, "INSERT INTO artifact VALUES (1, ?1, ?2)", -1, &st, NULL) ==
            SQLITE_OK);
    sqlite3_bind_blob(st, 1, stored_digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, enc.data, (int)enc.size, SQLITE_STATIC);
    CHECK(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    CHECK(kc_db_exec(s, "INSERT INTO entry_info (id, log) VALUES (1, 'old log')", "") == 0);
    kc_buf_free(&enc);
    kc_codec_free(c);
    sqlite3_close(s->conn);
    free(s->path);
    free(s);
}

static void test_older_version(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("old.db"));
    make_v1(path);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    CHECK(st_sql_int(db, "PRAGMA user_version") == 1);
    CHECK(st_sql_int(db, "PRAGMA application_id") == KC_APPLICATION_ID);
    CHECK(st_sql_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'input'") == 0);
    sqlite3_close(db);

    struct st_log l;
    kcache_store *s = NULL;
    char err[512];
    CHECK_RC(st_open_logged(&s, path, &l, err, sizeof(err)), 0);
    REQUIRE(s);
    CHECK(l.warnings == 0);
    CHECK(kcache_store_schema_version(s) == kc_schema_version);
    CHECK(!kcache_store_read_only(s));
    kcache_entry *e = NULL;
    kcache_key k = st_key(42);
    CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_INPUTS), 0);
    if (e) {
        uint8_t want[20000];
        st_fill(want, sizeof(want), 42);
        CHECK(e->size == sizeof(want) && memcmp(e->data, want, sizeof(want)) == 0);
        CHECK(strcmp(e->arch, "sm_80") == 0 && strcmp(e->log, "old log") == 0);
        CHECK(e->hits == 3 && e->n_inputs == 0);
    }
    kcache_entry_free(e);
    /* What the new version added works: an entry with inputs. */
    kcache_input in = {KCACHE_INPUT_SOURCE, "new.cu", "__global__ void f() {}", 22};
    kcache_entry ne = KCACHE_ENTRY_INIT;
    ne.key = st_key(43);
    ne.kind = KCACHE_KIND_PTX;
    ne.arch = "sm_90";
    ne.data = "ptx";
    ne.size = 3;
    ne.n_inputs = 1;
    ne.inputs = &in;
    CHECK_RC(kcache_store_put(s, &ne), 0);
    e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &ne.key, KCACHE_GET_INPUTS), 0);
    CHECK(e && e->n_inputs == 1 && e->inputs[0].size == 22);
    kcache_entry_free(e);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->entries == 2 && st->schema_version == kc_schema_version);
    kcache_stats_free(st);
    kcache_store_close(s);

    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    CHECK(st_sql_int(db, "PRAGMA user_version") == kc_schema_version);
    CHECK(st_sql_int(db, "SELECT count(*) FROM entry") == 2);
    sqlite3_close(db);
    CHECK(st_integrity_ok(path));
}

/* ---- an artifact altered inside the database ----------------------------- */

/* Flips one byte of entry n's stored artifact; with fix_digest, also makes the
 * stored digest agree, as if both had been damaged. */
static void alter_artifact(const char *path, unsigned n, int fix_digest)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    sqlite3_stmt *st = NULL;
    REQUIRE(sqlite3_prepare_v2(db,
                               "SELECT a.id, a.data FROM artifact a JOIN entry e ON e.id = a.id"
                               " WHERE e.key = ?1",
                               -1, &st, NULL) == SQLITE_OK);
    kcache_key k = st_key(n);
    sqlite3_bind_blob(st, 1, k.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    int64_t id = sqlite3_column_int64(st, 0);
    size_t size = (size_t)sqlite3_column_bytes(st, 1);
    REQUIRE(size > 0);
    uint8_t *data = malloc(size);
    REQUIRE(data);
    memcpy(data, sqlite3_column_blob(st, 1), size);
    sqlite3_finalize(st);
    data[size / 2] ^= 0x10;
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, data, size);
    REQUIRE(sqlite3_prepare_v2(db,
                               fix_digest ? "UPDATE artifact SET data = ?2, stored_digest = ?3"
                                            " WHERE id = ?1"
                                          : "UPDATE artifact SET data = ?2 WHERE id = ?1",
                               -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_blob(st, 2, data, (int)size, SQLITE_STATIC);
    if (fix_digest)
        sqlite3_bind_blob(st, 3, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(data);
}

static int64_t rows_with_key(const char *path, unsigned n)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *st = NULL;
    REQUIRE(sqlite3_prepare_v2(db, "SELECT count(*) FROM entry WHERE key = ?1", -1, &st, NULL) ==
            SQLITE_OK);
    kcache_key k = st_key(n);
    sqlite3_bind_blob(st, 1, k.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static void test_altered_artifact(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("altered.db"));
    /* 1, 2: compressed; 17, 34: tiny, stored raw (see st_size) */
    make_store(path, 0, 40);
    struct {
        unsigned n;
        int fix_digest;
    } cases[] = {{1, 0}, {2, 1}, {17, 0}, {34, 1}};
    for (size_t i = 0; i < KC_ARRAY_SIZE(cases); i++)
        alter_artifact(path, cases[i].n, cases[i].fix_digest);
    struct st_log l;
    kcache_store *s = NULL;
    char err[512];
    CHECK_RC(st_open_logged(&s, path, &l, err, sizeof(err)), 0);
    REQUIRE(s);
    for (size_t i = 0; i < KC_ARRAY_SIZE(cases); i++) {
        unsigned n = cases[i].n;
        kcache_entry *e = (kcache_entry *)1;
        kcache_key k = st_key(n);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT);
        if (rc != KCACHE_ENOTFOUND) {
            fprintf(stderr, "altered entry %u (digest %s): get returned %d\n", n,
                    cases[i].fix_digest ? "matching" : "stale", rc);
            test_failures++;
        }
        CHECK(e == NULL);
        CHECK(strstr(kcache_store_errmsg(s), "damaged") != NULL);
        CHECK(stats_corrupt(s) == i + 1);
        /* Deleted: a second get is a plain miss. */
        CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), KCACHE_ENOTFOUND);
        CHECK(strstr(kcache_store_errmsg(s), "damaged") == NULL);
    }
    CHECK(l.warnings == (int)KC_ARRAY_SIZE(cases));
    /* The rest are untouched. */
    CHECK(check_no_wrong_bytes(s, 0, 40, "altered artifacts") == 40 - KC_ARRAY_SIZE(cases));
    kcache_store_close(s);
    for (size_t i = 0; i < KC_ARRAY_SIZE(cases); i++)
        CHECK(rows_with_key(path, cases[i].n) == 0);
    /* The count survives the handle. */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(stats_corrupt(s) == KC_ARRAY_SIZE(cases));
    kcache_store_close(s);
    CHECK(st_integrity_ok(path));
}

/*
 * A damaged index entry that now names another key: a lookup of that other
 * key lands on this entry's row. Handing it out would be a false hit, the
 * worst thing a cache can do; it must be a miss.
 */
static void test_damaged_index(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("index.db"));
    make_store(path, 0, 3);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t root = st_sql_int(db, "SELECT rootpage FROM sqlite_schema"
                                  " WHERE name = 'sqlite_autoindex_entry_1'");
    int64_t page = st_sql_int(db, "PRAGMA page_size");
    sqlite3_close(db);
    REQUIRE(root > 1 && page >= 512);
    size_t n;
    uint8_t *bytes = test_slurp(path, &n);
    REQUIRE(bytes && (size_t)(root * page) <= n);
    kcache_key k1 = st_key(1), other = k1;
    other.bytes[31] ^= 1; /* same place in key order, another key */
    uint8_t *p = bytes + (root - 1) * page, *hit = NULL;
    for (int64_t i = 0; i + KCACHE_KEY_SIZE <= page; i++)
        if (memcmp(p + i, k1.bytes, KCACHE_KEY_SIZE) == 0)
            hit = p + i;
    REQUIRE(hit);
    hit[31] ^= 1;
    test_spit(path, bytes, n);
    free(bytes);

    /* The damage is real: SQLite itself now finds a row for the other key. */
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *st = NULL;
    REQUIRE(sqlite3_prepare_v2(db, "SELECT count(*) FROM entry WHERE key = ?1", -1, &st, NULL) ==
            SQLITE_OK);
    sqlite3_bind_blob(st, 1, other.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    CHECK(sqlite3_column_int(st, 0) == 1);
    sqlite3_finalize(st);
    sqlite3_close(db);

    struct st_log l;
    kcache_store *s = NULL;
    char err[512];
    CHECK_RC(st_open_logged(&s, path, &l, err, sizeof(err)), 0);
    REQUIRE(s);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &other, KCACHE_GET_DEFAULT), KCACHE_ENOTFOUND);
    CHECK(e == NULL);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get(&e, s, &other, KCACHE_GET_NO_DATA), KCACHE_ENOTFOUND);
    kcache_entry_free(e);
    check_no_wrong_bytes(s, 0, 3, "damaged index");
    check_usable(s, 10, "damaged index");
    kcache_store_close(s);
    bystanders_check("damaged index");
}

/* ---- a directory, and a bounded quarantine ------------------------------- */

static void test_directory(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("dir.db"));
    REQUIRE(mkdir(path, 0755) == 0);
    char inside[700];
    snprintf(inside, sizeof(inside), "%s/keep.txt", path);
    test_spit(inside, "keep", 4);
    for (int ro = 0; ro < 2; ro++) {
        kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
        o.path = path;
        o.read_only = ro;
        kcache_store *s = NULL;
        char err[512];
        int rc = kcache_store_open(&s, &o, err, sizeof(err));
        CHECK(rc == KCACHE_EIO);
        CHECK(s == NULL);
        CHECK(strstr(err, path) && strstr(err, "directory"));
    }
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0755);
    CHECK(test_same_bytes(inside, (const uint8_t *)"keep", 4));
    char names[2][256];
    CHECK(quarantined("dir.db", names, 2) == 0);
    bystanders_check("a directory at the path");
}

static void test_bounded_quarantine(void)
{
    char content[6][64];
    for (int round = 0; round < 6; round++) {
        snprintf(content[round], sizeof(content[round]), "garbage of round %d, not SQLite", round);
        plant(test_path("bounded.db"), content[round], strlen(content[round]));
        char what[64];
        snprintf(what, sizeof(what), "quarantine round %d", round);
        expect_set_aside("bounded.db", (const uint8_t *)content[round], strlen(content[round]),
                         what);
    }
    char names[8][256];
    size_t n = quarantined("bounded.db", names, 8);
    CHECK(n == 3);
    /* The newest three are the ones kept. */
    for (size_t i = 0; i < n && i < 3; i++)
        CHECK(test_same_bytes(test_path(names[i]), (const uint8_t *)content[3 + i],
                         strlen(content[3 + i])));
    bystanders_check("bounded quarantine");
}

int main(void)
{
    double t0 = st_now();
    bystanders_place();
    test_garbage();
    test_truncated();
    test_truncated_with_wal();
    test_empty();
    test_random_pages();
    test_foreign();
    test_future_version();
    test_older_version();
    test_altered_artifact();
    test_damaged_index();
    test_directory();
    test_bounded_quarantine();
    bystanders_check("everything");
    printf("recovery scenarios: %.2f s\n", st_now() - t0);
    return test_done();
}
