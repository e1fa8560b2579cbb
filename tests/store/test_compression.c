/*
 * The `compression` setting: each entry records its codec, so a
 * store holds a mix and the setting can change at any time. What a user
 * would notice: every entry reads back whatever the store writes now, stats
 * add up across codecs, a bundle of one setting imports into a store of
 * another, an entry whose codec this build does not know is a counted
 * miss (never a crash), and a bad value is a one-line error naming the
 * valid ones.
 */
#include <kcache/bundle.h>
#include <kcache/verify.h>

#include "storetest.h"
#include "util/codec.h"

#define ART_SIZE 50000
static uint8_t scratch[ART_SIZE + 1];

static const char *const settings[] = {"zstd", "lz4", "none"};
/* The codec column each setting writes for a compressible artifact (util/codec.h). */
static const int codec_of[] = {1, 3, 0}; /* lz4 writes blocks (codec 3); codec 2, its frames of before, is read only */

static kcache_store *open_with(const char *path, const char *compression)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX;
    o.compression = compression;
    return st_open_with(&o);
}

/* Entry n's CUBIN, keyed from its key material (so it can go through a bundle). */
static void make_entry(kcache_entry *e, char material[32], unsigned n)
{
    *e = (kcache_entry)KCACHE_ENTRY_INIT;
    st_material_entry(e, material, n);
    e->kind = KCACHE_KIND_CUBIN;
    e->arch = "sm_90";
    e->name = "k.cu";
    e->size = ART_SIZE - n;
    st_fill(scratch, e->size, n);
    e->data = scratch;
}

/* Entry n with one input. */
static int put_entry(kcache_store *s, unsigned n)
{
    char src[160];
    snprintf(src, sizeof(src), "// input of entry %u, compressible enough: %0100u\n", n, n);
    kcache_input in[1] = {{KCACHE_INPUT_SOURCE, "k.cu", src, strlen(src)}};
    kcache_entry e;
    char material[32];
    make_entry(&e, material, n);
    e.n_inputs = 1;
    e.inputs = in;
    return kcache_store_put(s, &e);
}

/* Entry n read back whole: artifact and input. Returns its stored size, or -1. */
static int64_t check_entry(kcache_store *s, unsigned n)
{
    char material[32];
    kcache_key k = st_material_key(material, n);
    kcache_entry *e = NULL;
    int rc = kcache_store_get(&e, s, &k, KCACHE_GET_INPUTS);
    if (rc) {
        fprintf(stderr, "entry %u: %d %s\n", n, rc, kcache_store_errmsg(s));
        return -1;
    }
    size_t size = ART_SIZE - n;
    static uint8_t want[ART_SIZE + 1];
    st_fill(want, size, n);
    char src[160];
    snprintf(src, sizeof(src), "// input of entry %u, compressible enough: %0100u\n", n, n);
    int ok = e->size == size && memcmp(e->data, want, size) == 0 && e->n_inputs == 1 &&
             e->inputs[0].size == strlen(src) && !memcmp(e->inputs[0].data, src, strlen(src));
    int64_t stored = ok ? (int64_t)e->stored_size : -1;
    if (!ok)
        fprintf(stderr, "entry %u: wrong bytes\n", n);
    kcache_entry_free(e);
    return stored;
}

static sqlite3 *sql_open(const char *path)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static int64_t codec_count(sqlite3 *db, const char *table, int codec)
{
    char sql[128];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE codec = %d", table, codec);
    return st_sql_int(db, sql);
}

/* Written with zstd, then lz4, then none: all readable by every setting; stats add up. */
static void test_mixed(void)
{
    const char *path = test_path("mixed.db");
    for (unsigned k = 0; k < 3; k++) {
        kcache_store *s = open_with(path, settings[k]);
        for (unsigned n = 0; n < 4; n++)
            CHECK_RC(put_entry(s, 10 * k + n), 0);
        kcache_store_close(s);
    }
    sqlite3 *db = sql_open(path);
    for (unsigned k = 0; k < 3; k++) {
        CHECK(codec_count(db, "entry", codec_of[k]) == 4);
        CHECK(codec_count(db, "input", codec_of[k]) == 4);
    }
    int64_t stored_sql = st_sql_int(db, "SELECT sum(stored_size) FROM entry");
    int64_t raw_sql = st_sql_int(db, "SELECT sum(raw_size) FROM entry");
    sqlite3_close(db);

    /* Read with each setting, and with none given (the default). */
    for (int k = -1; k < 3; k++) {
        kcache_store *s = open_with(path, k < 0 ? NULL : settings[k]);
        uint64_t stored[3] = {0, 0, 0}, raw = 0;
        for (unsigned w = 0; w < 3; w++) {
            for (unsigned n = 0; n < 4; n++) {
                int64_t got = check_entry(s, 10 * w + n);
                CHECK(got > 0);
                if (got < 0)
                    continue;
                stored[w] += (uint64_t)got;
                raw += ART_SIZE - (10 * w + n);
                /* Compressed where the setting compresses, as is where it does not. */
                if (codec_of[w])
                    CHECK((size_t)got < ART_SIZE - (10 * w + n));
                else
                    CHECK((size_t)got == ART_SIZE - (10 * w + n));
            }
        }
        /* lz4 stores more than zstd for the same kind of bytes, less than none. */
        CHECK(stored[0] < stored[1] && stored[1] < stored[2]);
        kcache_stats *st = NULL;
        REQUIRE(kcache_store_stats(&st, s) == 0);
        CHECK(st->entries == 12);
        CHECK(st->raw_bytes == raw && (int64_t)raw == raw_sql);
        CHECK(st->stored_bytes == stored[0] + stored[1] + stored[2]);
        CHECK((int64_t)st->stored_bytes == stored_sql);
        CHECK(st->corrupt == 0);
        CHECK(st->hits == 12u * (unsigned)(k + 2)); /* every get so far hit */
        kcache_stats_free(st);
        kcache_verify_result vr = KCACHE_VERIFY_RESULT_INIT;
        CHECK_RC(kcache_store_verify(&vr, s, NULL, NULL, NULL), 0);
        CHECK(vr.entries == 12 && vr.damaged == 0 && vr.integrity_ok);
        kcache_store_close(s);
    }
}

/* A bundle exported from an lz4 store is lz4 inside, and imports into a zstd store. */
static void test_bundle(void)
{
    const char *src_path = test_path("lz4.db"), *dst_path = test_path("zstd.db");
    const char *bundle = test_path("lz4.kcache");
    kcache_store *src = open_with(src_path, "lz4");
    for (unsigned n = 100; n < 105; n++)
        CHECK_RC(put_entry(src, n), 0);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&r, src, bundle, NULL), 0);
    CHECK(r.entries == 5);
    kcache_store_close(src);

    sqlite3 *db = sql_open(bundle);
    CHECK(codec_count(db, "entry", 3) == 5);
    CHECK(codec_count(db, "input", 3) == 5);
    sqlite3_close(db);

    kcache_store *dst = open_with(dst_path, "zstd");
    r = (kcache_bundle_result)KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_import(&r, dst, bundle, NULL), 0);
    CHECK(r.entries == 5 && r.added == 5);
    for (unsigned n = 100; n < 105; n++)
        CHECK(check_entry(dst, n) > 0);
    kcache_store_close(dst);
    /* Merged as the store writes: zstd. */
    db = sql_open(dst_path);
    CHECK(codec_count(db, "entry", 1) == 5);
    CHECK(codec_count(db, "input", 1) == 5);
    sqlite3_close(db);
}

static int warnings;
static void count_warning(void *ud, int level, const char *msg)
{
    (void)ud;
    (void)level;
    (void)msg;
    warnings++;
}

/*
 * A codec number this build does not know (a newer kcache's, or damage): a
 * miss that leaves the entry in place and counts no damage, so that a newer
 * build sharing the cache keeps its entries; the next put of the key
 * replaces it, and verify lists it.
 */
static void test_unknown_codec(void)
{
    const char *path = test_path("unknown.db");
    kcache_store *s = open_with(path, "lz4");
    for (unsigned n = 200; n < 204; n++)
        CHECK_RC(put_entry(s, n), 0);
    kcache_store_close(s);
    char material[32];
    kcache_key k200 = st_material_key(material, 200), k201 = st_material_key(material, 201);
    sqlite3 *db = sql_open(path);
    /* 200's artifact, and 201's input, in codecs nobody wrote. */
    CHECK(sqlite3_exec(db, "UPDATE entry SET codec = 9 WHERE name = 'k.cu' AND raw_size = 49800;"
                       "UPDATE input SET codec = 1000 WHERE id = (SELECT ei.input_id FROM "
                       "entry_input ei JOIN entry e ON e.id = ei.entry_id WHERE e.raw_size = "
                       "49799)",
                       NULL, NULL, NULL) == SQLITE_OK);
    CHECK(sqlite3_changes(db) == 1);
    sqlite3_close(db);

    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.log = count_warning;
    s = NULL;
    REQUIRE(kcache_store_open(&s, &o, NULL, 0) == 0);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &k200, 0), KCACHE_ENOTFOUND);
    CHECK(strstr(kcache_store_errmsg(s), "codec 9") != NULL);
    CHECK(e == NULL);
    CHECK_RC(kcache_store_get(&e, s, &k201, KCACHE_GET_INPUTS), KCACHE_ENOTFOUND);
    CHECK(strstr(kcache_store_errmsg(s), "cannot read") != NULL);
    CHECK(warnings == 0);
    for (unsigned n = 202; n < 204; n++)
        CHECK(check_entry(s, n) > 0);
    kcache_stats *st = NULL;
    REQUIRE(kcache_store_stats(&st, s) == 0);
    CHECK(st->corrupt == 0);
    CHECK(st->entries == 4); /* left in place */
    kcache_stats_free(st);
    /* The next put of the key replaces what this build cannot read. */
    CHECK_RC(put_entry(s, 200), 0);
    CHECK(check_entry(s, 200) > 0);
    kcache_store_close(s);

    /* verify lists one that no get has met. */
    db = sql_open(path);
    CHECK(sqlite3_exec(db, "UPDATE entry SET codec = -3 WHERE raw_size = 49798", NULL, NULL,
                       NULL) == SQLITE_OK);
    sqlite3_close(db);
    s = open_with(path, NULL);
    kcache_verify_result vr = KCACHE_VERIFY_RESULT_INIT;
    CHECK_RC(kcache_store_verify(&vr, s, NULL, NULL, NULL), 0);
    CHECK(vr.entries == 4 && vr.damaged == 2); /* 201 (its input) and 202 */
    kcache_store_close(s);
}

/*
 * A damaged row claiming a huge raw size, in each codec: damage (dropped and
 * counted, a miss), found from the stored bytes' own header before anything
 * of that size is allocated, not an out-of-memory error on every get.
 */
static void test_huge_raw_size(void)
{
    for (unsigned k = 0; k < 3; k++) {
        char path[64], material[32];
        snprintf(path, sizeof(path), "huge-%u.db", k);
        const char *p = test_path(path);
        kcache_store *s = open_with(p, settings[k]);
        CHECK_RC(put_entry(s, 300 + k), 0);
        kcache_store_close(s);
        sqlite3 *db = sql_open(p);
        CHECK(sqlite3_exec(db, "UPDATE entry SET raw_size = 1099511627776", NULL, NULL, NULL) ==
              SQLITE_OK);
        sqlite3_close(db);
        s = open_with(p, settings[k]);
        kcache_key key = st_material_key(material, 300 + k);
        kcache_entry *e = NULL;
        CHECK_RC(kcache_store_get(&e, s, &key, 0), KCACHE_ENOTFOUND);
        CHECK(strstr(kcache_store_errmsg(s), "damaged") != NULL);
        kcache_stats *st = NULL;
        REQUIRE(kcache_store_stats(&st, s) == 0);
        CHECK(st->corrupt == 1 && st->entries == 0);
        kcache_stats_free(st);
        kcache_store_close(s);
    }
}

/* Bad values: refused at open with one line naming the valid ones; flag > env > file. */
static void test_setting(void)
{
    const char *path = test_path("setting/kcache.db");
    test_sh("mkdir -p '%s'", test_path("setting"));
    char err[512];
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    kcache_store *s = NULL;

    o.compression = "gzip";
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_EINVAL);
    CHECK(s == NULL && test_one_line(err) && strstr(err, "gzip") &&
          strstr(err, "zstd, lz4 or none"));

    o.compression = NULL;
    setenv("KCACHE_COMPRESSION", "fast", 1);
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_EINVAL);
    CHECK(test_one_line(err) && strstr(err, "KCACHE_COMPRESSION=fast") &&
          strstr(err, "zstd, lz4 or none"));
    unsetenv("KCACHE_COMPRESSION");

    test_write_text(test_path("setting/kcache.conf"), "max_size = 1G\ncompression = zstd9\n");
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_EINVAL);
    CHECK(test_one_line(err) && strstr(err, "kcache.conf:2") && strstr(err, "zstd, lz4 or none"));

    /* The file's value, then the environment's over it, then the flag's over both. */
    test_write_text(test_path("setting/kcache.conf"), "compression = none\n");
    s = open_with(path, NULL);
    CHECK_RC(put_entry(s, 300), 0);
    kcache_store_close(s);
    setenv("KCACHE_COMPRESSION", "lz4", 1);
    s = open_with(path, NULL);
    CHECK_RC(put_entry(s, 301), 0);
    kcache_store_close(s);
    s = open_with(path, "zstd");
    CHECK_RC(put_entry(s, 302), 0);
    kcache_store_close(s);
    unsetenv("KCACHE_COMPRESSION");
    sqlite3 *db = sql_open(path);
    CHECK(codec_count(db, "entry", 0) == 1);
    CHECK(codec_count(db, "entry", 3) == 1);
    CHECK(codec_count(db, "entry", 1) == 1);
    sqlite3_close(db);
}

/* Batches of puts encode with the store's setting too (they compress outside its lock). */
static void test_batch(void)
{
    const char *path = test_path("batch.db");
    for (unsigned k = 0; k < 3; k++) {
        kcache_store *s = open_with(path, settings[k]);
        kcache_batch *b = NULL;
        REQUIRE(kcache_batch_new(&b, s, NULL) == 0);
        for (unsigned n = 400 + 10 * k; n < 403 + 10 * k; n++) {
            char material[32];
            kcache_entry e;
            make_entry(&e, material, n);
            CHECK_RC(kcache_batch_put(b, &e), 0);
        }
        CHECK_RC(kcache_batch_commit(b), 0);
        kcache_batch_free(b);
        kcache_store_close(s);
    }
    sqlite3 *db = sql_open(path);
    for (unsigned k = 0; k < 3; k++)
        CHECK(codec_count(db, "entry", codec_of[k]) == 3);
    sqlite3_close(db);
}

/*
 * An entry an earlier `lz4` wrote as an LZ4 frame (codec 2) still reads
 * under every setting, and `kcache recompress` with lz4 moves it to blocks.
 */
static void test_old_lz4_frames(void)
{
    const char *path = test_path("frames.db");
    kcache_store *s = open_with(path, "lz4");
    REQUIRE(put_entry(s, 7) == 0);
    kcache_store_close(s);
    /* The row rewritten as the earlier build wrote it. */
    kcache_entry e;
    char material[32];
    make_entry(&e, material, 7);
    kc_codec_ctx *c = NULL;
    REQUIRE(kc_codec_new(&c) == 0);
    kc_buf frame = {0};
    int codec = -1;
    REQUIRE(kc_encode(c, &frame, &codec, KC_CODEC_LZ4, e.data, e.size) == 0 &&
            codec == KC_CODEC_LZ4);
    uint8_t digest[KC_DIGEST_SIZE];
    kc_stored_digest(digest, frame.data, frame.size);
    sqlite3 *db = sql_open(path);
    sqlite3_stmt *st = NULL;
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE artifact SET data = ?1, stored_digest = ?2", -1, &st,
                               NULL) == SQLITE_OK);
    sqlite3_bind_blob(st, 1, frame.data, (int)frame.size, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, digest, KC_DIGEST_SIZE, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    char sql[160];
    snprintf(sql, sizeof(sql), "UPDATE entry SET codec = 2, stored_size = %zu", frame.size);
    REQUIRE(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    CHECK(codec_count(db, "entry", 2) == 1);
    sqlite3_close(db);
    for (size_t k = 0; k < 3; k++) {
        s = open_with(path, settings[k]);
        CHECK(check_entry(s, 7) == (int64_t)frame.size);
        kcache_store_close(s);
    }
    s = open_with(path, "lz4");
    kcache_recompress_result r = KCACHE_RECOMPRESS_RESULT_INIT;
    CHECK_RC(kcache_store_recompress(&r, s, NULL), 0);
    CHECK(r.before[KC_CODEC_LZ4].entries == 1 && r.recompressed == 1);
    CHECK(check_entry(s, 7) > 0);
    kcache_store_close(s);
    db = sql_open(path);
    CHECK(codec_count(db, "entry", 3) == 1 && codec_count(db, "entry", 2) == 0);
    sqlite3_close(db);
    kc_buf_free(&frame);
    kc_codec_free(c);
}

/* The artifact's stored digest and size made to agree with its bytes again. */
static void reseal(sqlite3 *db)
{
    sqlite3_stmt *q = NULL, *u = NULL;
    REQUIRE(sqlite3_prepare_v2(db, "SELECT id, data FROM artifact", -1, &q, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE artifact SET stored_digest = ?2 WHERE id = ?1;", -1,
                               &u, NULL) == SQLITE_OK);
    while (sqlite3_step(q) == SQLITE_ROW) {
        uint8_t d[KC_DIGEST_SIZE];
        int n = sqlite3_column_bytes(q, 1);
        kc_stored_digest(d, sqlite3_column_blob(q, 1), (size_t)n);
        sqlite3_bind_int64(u, 1, sqlite3_column_int64(q, 0));
        sqlite3_bind_blob(u, 2, d, sizeof(d), SQLITE_TRANSIENT);
        CHECK(sqlite3_step(u) == SQLITE_DONE);
        sqlite3_reset(u);
    }
    sqlite3_finalize(q);
    sqlite3_finalize(u);
    CHECK(sqlite3_exec(db, "UPDATE entry SET stored_size = (SELECT length(data) FROM artifact a"
                           " WHERE a.id = entry.id)", NULL, NULL, NULL) == SQLITE_OK);
}

/*
 * An LZ4 block (codec 3) that lies: raw_size off by one either way, a byte
 * of the block changed, the block cut short or given a tail (the digest made
 * to match again, so that only the decoder can tell). Each is a miss, counted
 * as damage, never bytes.
 */
static void test_lz4_lies(void)
{
    static const char *const lies[] = {
        "UPDATE entry SET raw_size = raw_size + 1",
        "UPDATE entry SET raw_size = raw_size - 1",
        "UPDATE artifact SET data = substr(data, 1, 20) || x'ff' || substr(data, 22)",
        "UPDATE artifact SET data = substr(data, 1, length(data) - 1)",
        "UPDATE artifact SET data = substr(data, 1, length(data) - 8)",
        "UPDATE artifact SET data = data || x'00'",
        "UPDATE artifact SET data = data || x'10414243'",
        "UPDATE artifact SET data = data || data",
    };
    for (unsigned i = 0; i < KC_ARRAY_SIZE(lies); i++) {
        for (int sealed = 0; sealed < 2; sealed++) {
            char path[64], material[32];
            snprintf(path, sizeof(path), "lz4-lie-%u-%d.db", i, sealed);
            const char *p = test_path(path);
            kcache_store *s = open_with(p, "lz4");
            CHECK_RC(put_entry(s, 400), 0);
            kcache_store_close(s);
            sqlite3 *db = sql_open(p);
            CHECK(codec_count(db, "entry", 3) == 1);
            CHECK(sqlite3_exec(db, lies[i], NULL, NULL, NULL) == SQLITE_OK);
            if (sealed)
                reseal(db);
            sqlite3_close(db);
            s = open_with(p, "lz4");
            kcache_key key = st_material_key(material, 400);
            kcache_entry *e = NULL;
            int rc = kcache_store_get(&e, s, &key, 0);
            if (rc != KCACHE_ENOTFOUND)
                fprintf(stderr, "lie %u (%s): get gives %d\n", i, sealed ? "sealed" : "as is",
                        rc);
            CHECK_RC(rc, KCACHE_ENOTFOUND);
            kcache_entry_free(e);
            kcache_stats *st = NULL;
            REQUIRE(kcache_store_stats(&st, s) == 0);
            CHECK(st->corrupt == 1 && st->entries == 0);
            kcache_stats_free(st);
            kcache_store_close(s);
        }
    }
}

/*
 * The ways entries change that test_store's books do not take: an import
 * that replaces and adds, a recompress to another codec, and verify
 * deleting an entry found damaged. The totals are kept by code, not
 * triggers (lib/store/prune.c), on each.
 */
static void test_books(void)
{
    const char *a = test_path("books-a.db"), *b = test_path("books-b.db");
    const char *bundle = test_path("books.kcache");
    kcache_store *s = open_with(b, "lz4");
    for (unsigned n = 500; n < 502; n++)
        CHECK_RC(put_entry(s, n), 0);
    kcache_store_close(s);
    usleep(2000); /* the bundle's entries created later: they replace b's */
    s = open_with(a, "zstd");
    for (unsigned n = 500; n < 506; n++)
        CHECK_RC(put_entry(s, n), 0);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&r, s, bundle, NULL), 0);
    kcache_store_close(s);
    s = open_with(b, "lz4");
    CHECK_RC(kcache_bundle_import(&r, s, bundle, NULL), 0);
    CHECK(r.added == 4 && r.replaced == 2);
    kcache_store_close(s);
    st_check_books(b, "an import");
    s = open_with(b, "none");
    kcache_recompress_result rr = KCACHE_RECOMPRESS_RESULT_INIT;
    CHECK_RC(kcache_store_recompress(&rr, s, NULL), 0);
    CHECK(rr.recompressed == 6);
    kcache_store_close(s);
    st_check_books(b, "a recompress");
    sqlite3 *db = sql_open(b);
    CHECK(sqlite3_exec(db, "UPDATE artifact SET data = x'00' || substr(data, 2)"
                           " WHERE id = (SELECT min(id) FROM artifact)", NULL, NULL, NULL) ==
          SQLITE_OK);
    sqlite3_close(db);
    s = open_with(b, "lz4");
    kcache_verify_result vr = KCACHE_VERIFY_RESULT_INIT;
    CHECK_RC(kcache_store_verify(&vr, s, NULL, NULL, NULL), 0);
    CHECK(vr.damaged == 1);
    kcache_store_close(s);
    st_check_books(b, "verify");
}

int main(void)
{
    unsetenv("KCACHE_COMPRESSION");
    test_mixed();
    test_bundle();
    test_unknown_codec();
    test_huge_raw_size();
    test_setting();
    test_batch();
    test_old_lz4_frames();
    test_lz4_lies();
    test_books();
    return test_done();
}
