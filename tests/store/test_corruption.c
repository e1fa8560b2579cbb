/*
 * The corruption cases test_recovery.c does not cover, each with the outcome
 * doc/design.md's recovery table gives it:
 *
 *   zeroed header (first 100 bytes)     not SQLite: set aside, a new cache starts
 *   random bytes in the WAL             SQLite drops frames that fail their
 *                                       checksum: entries may be lost, none wrong
 *   random bytes in the -shm file       rebuilt by the next first connection:
 *                                       nothing lost, nothing wrong
 *   an artifact or an input altered in  a miss, the entry deleted and counted;
 *   the file itself, digests unchanged  never handed out
 *   a lowered name, log or toolchain    a miss, never handed out
 *   altered, or their row gone
 *
 * After every case: no wrong bytes are returned, the store takes new entries,
 * SQLite's integrity check passes, and the files a user keeps beside the
 * cache are untouched.
 */
#include <dirent.h>
#include <fcntl.h>

#include "results.h"
#include "store/storeint.h"
#include "storetest.h"

#define ART_MAX (40 * 1024)

/* Entries in the database file itself, then entries only in its WAL (few enough that the
 * WAL stays under what a close keeps: kcache empties a larger one). */
#define BASE_N 30u
#define WAL_N 10u
#define ALL_N (BASE_N + WAL_N)

static uint8_t scratch[ART_MAX];

/* Set while the shared-memory index is garbage: gets may then fail, saying so. */
static int index_garbage;

static struct {
    unsigned cases, recovered, refused, lost, dropped, wrong;
} fig;

/* ---- files -------------------------------------------------------------- */

static void side(char *out, size_t size, const char *path, const char *suffix)
{
    snprintf(out, size, "%s%s", path, suffix);
}

static const char *const keep_names[] = {"notes.txt", "h.db.corrupt-mine", "h.db.bak"};

static void keep_place(void)
{
    for (size_t i = 0; i < KC_ARRAY_SIZE(keep_names); i++)
        test_spit(test_path(keep_names[i]), keep_names[i], strlen(keep_names[i]));
}

static void keep_check(const char *after)
{
    for (size_t i = 0; i < KC_ARRAY_SIZE(keep_names); i++)
        if (!test_same_bytes(test_path(keep_names[i]), (const uint8_t *)keep_names[i],
                        strlen(keep_names[i]))) {
            fprintf(stderr, "after %s: %s was removed or changed\n", after, keep_names[i]);
            test_failures++;
        }
}

/* ---- stores ------------------------------------------------------------- */

static const char header_text[] = "#pragma once\n// a header every entry includes\n";

static void source_of(char *buf, size_t size, unsigned n)
{
    snprintf(buf, size, "// the source of entry %u, long enough to be compressed, %u %u %u\n"
             "#include \"h.h\"\n__global__ void k(int *x) { x[0] = %u; }\n",
             n, n * 3, n * 5, n * 7, n);
}

/* Entry n as st_put() makes it, with its source and a shared header as inputs. */
static int put_with_inputs(kcache_store *s, unsigned n)
{
    char src[256];
    source_of(src, sizeof(src), n);
    kcache_input in[2] = {{KCACHE_INPUT_SOURCE, "k.cu", src, strlen(src)},
                          {KCACHE_INPUT_HEADER, "h.h", header_text, sizeof(header_text) - 1}};
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = st_key(n);
    st_entry_of(&e, n, ART_MAX, scratch);
    e.name = "stress.cu";
    e.toolchain = "test";
    e.n_inputs = 2;
    e.inputs = in;
    return kcache_store_put(s, &e);
}

static int inputs_ok(const kcache_entry *e, unsigned n)
{
    char src[256];
    source_of(src, sizeof(src), n);
    return e->n_inputs == 2 && e->inputs[0].size == strlen(src) &&
           !memcmp(e->inputs[0].data, src, strlen(src)) &&
           e->inputs[1].size == sizeof(header_text) - 1 &&
           !memcmp(e->inputs[1].data, header_text, sizeof(header_text) - 1);
}

/* Entries [first, first + n) with inputs; the WAL folded into the file when `fold`. */
static void fill(const char *path, unsigned first, unsigned n, int fold)
{
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = first; i < first + n; i++)
        CHECK_RC(put_with_inputs(s, i), 0);
    kcache_store_close(s);
    if (!fold)
        return;
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    REQUIRE(st_sql_int(db, "PRAGMA wal_checkpoint(TRUNCATE)") == 0);
    sqlite3_close(db);
}

/*
 * A cache as a crash leaves it: entries [0, BASE_N) in the file itself and
 * [BASE_N, ALL_N) only in its WAL, copied while the store was still open (a
 * close may fold the WAL in), and no -shm. The bytes are returned to restore
 * the state again; free them.
 */
static void crashed_state(const char *path, uint8_t **db_bytes, size_t *dn, uint8_t **wal_bytes,
                          size_t *wn)
{
    char wal[600], shm[600];
    side(wal, sizeof(wal), path, "-wal");
    side(shm, sizeof(shm), path, "-shm");
    fill(path, 0, BASE_N, 1);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned i = BASE_N; i < ALL_N; i++)
        CHECK_RC(put_with_inputs(s, i), 0);
    *db_bytes = test_slurp(path, dn);
    *wal_bytes = test_slurp(wal, wn);
    REQUIRE(*db_bytes && *wal_bytes && *wn > 32 + 24 + 4096);
    kcache_store_close(s);
    test_spit(path, *db_bytes, *dn);
    test_spit(wal, *wal_bytes, *wn);
    unlink(shm);
}

/*
 * Reads entries [first, first + n) with their inputs. Wrong bytes are counted
 * (and fail the test); returns how many were served.
 */
static unsigned read_all(kcache_store *s, unsigned first, unsigned n, const char *what)
{
    unsigned present = 0;
    for (unsigned i = first; i < first + n; i++) {
        kcache_entry *e = NULL;
        kcache_key k = st_key(i);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_INPUTS);
        if (rc == 0) {
            present++;
            if (!st_entry_ok(e, i, ART_MAX, scratch) || !inputs_ok(e, i)) {
                fprintf(stderr, "%s: entry %u came back with wrong bytes\n", what, i);
                fig.wrong++;
                test_failures++;
            }
        } else if (index_garbage && rc == KCACHE_ECORRUPT) {
            CHECK(strstr(kcache_store_errmsg(s), "-shm") != NULL);
        } else if (rc != KCACHE_ENOTFOUND) {
            fprintf(stderr, "%s: get %u: %d %s\n", what, i, rc, kcache_store_errmsg(s));
            test_failures++;
        }
        kcache_entry_free(e);
    }
    return present;
}

static void check_usable(kcache_store *s, unsigned n, const char *what)
{
    int rc = put_with_inputs(s, n);
    if (rc) {
        fprintf(stderr, "%s: put: %d %s\n", what, rc, kcache_store_errmsg(s));
        test_failures++;
        return;
    }
    if (read_all(s, n, 1, what) != 1) {
        fprintf(stderr, "%s: a new entry cannot be read back\n", what);
        test_failures++;
    }
}

static uint64_t stats_corrupt(kcache_store *s)
{
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    uint64_t v = st ? st->corrupt : UINT64_MAX;
    kcache_stats_free(st);
    return v;
}

static size_t count_set_aside(const char *base)
{
    char prefix[256];
    snprintf(prefix, sizeof(prefix), "%s.corrupt-2", base);
    size_t n = 0;
    DIR *d = opendir(test_dir());
    REQUIRE(d);
    for (struct dirent *de; (de = readdir(d));)
        if (!strncmp(de->d_name, prefix, strlen(prefix)) &&
            !strstr(de->d_name + strlen(prefix), "-wal"))
            n++;
    closedir(d);
    return n;
}

static char *newest_set_aside(const char *base)
{
    static char best[512];
    char prefix[256];
    snprintf(prefix, sizeof(prefix), "%s.corrupt-2", base);
    best[0] = '\0';
    DIR *d = opendir(test_dir());
    REQUIRE(d);
    for (struct dirent *de; (de = readdir(d));)
        if (!strncmp(de->d_name, prefix, strlen(prefix)) &&
            !strstr(de->d_name + strlen(prefix), "-wal") && strcmp(de->d_name, best) > 0)
            snprintf(best, sizeof(best), "%s", de->d_name);
    closedir(d);
    return best;
}

/* ---- zeroed header -------------------------------------------------------- */

static void test_zeroed_header(void)
{
    const char *path = test_path("zeroed.db");
    fill(path, 0, 20, 1);
    size_t n;
    uint8_t *bytes = test_slurp(path, &n);
    REQUIRE(bytes && n > 100);
    memset(bytes, 0, 100);
    test_spit(path, bytes, n);
    struct st_log l;
    kcache_store *s = st_open_counted(path, &l, "corruption");
    fig.cases++;
    if (s) {
        CHECK(l.set_aside == 1);
        CHECK(count_set_aside("zeroed.db") == 1);
        /* What was found is kept byte for byte: kcache did not make it what it is now. */
        CHECK(test_same_bytes(test_path(newest_set_aside("zeroed.db")), bytes, n));
        CHECK(read_all(s, 0, 20, "zeroed header") == 0);
        CHECK(stats_corrupt(s) == 1);
        check_usable(s, 500, "zeroed header");
        kcache_store_close(s);
        fig.recovered++;
        fig.dropped += 20; /* the header held the page size: the entries cannot be read */
    }
    CHECK(st_integrity_ok(path));
    /* The next open finds a healthy cache. */
    s = st_open_counted(path, &l, "corruption");
    CHECK(l.warnings == 0);
    kcache_store_close(s);
    free(bytes);
    keep_check("zeroed header");
}

/* ---- random bytes in the WAL ------------------------------------------------ */

static void test_wal_garbage(void)
{
    const char *path = test_path("wal.db");
    char wal[600], shm[600];
    side(wal, sizeof(wal), path, "-wal");
    side(shm, sizeof(shm), path, "-shm");
    size_t dn, wn;
    uint8_t *db_bytes, *wal_bytes;
    crashed_state(path, &db_bytes, &dn, &wal_bytes, &wn);
    uint8_t *copy = malloc(wn);
    REQUIRE(copy);
    unsigned lost = 0, served_wal = 0;
    for (unsigned seed = 1; seed <= 24; seed++) {
        memcpy(copy, wal_bytes, wn);
        uint64_t x = seed * 0x9e3779b97f4a7c15u;
        size_t off, len;
        if (seed == 1) {
            off = 0, len = 32; /* the WAL header: salts and checksums */
        } else if (seed == 2) {
            off = 32, len = 24; /* the first frame's header */
        } else {
            x = x * 6364136223846793005u + 1442695040888963407u;
            off = (size_t)(x >> 20) % (wn - 64);
            len = KC_MIN((size_t)(1 + (x >> 8) % 200), wn - off);
        }
        for (size_t i = 0; i < len; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            copy[off + i] ^= (uint8_t)(1 | x >> 56);
        }
        test_spit(path, db_bytes, dn);
        test_spit(wal, copy, wn);
        unlink(shm); /* as after a reboot: the WAL is all there is */
        char what[64];
        snprintf(what, sizeof(what), "WAL garbage, seed %u", seed);
        struct st_log l;
        kcache_store *s = st_open_counted(path, &l, "corruption");
        fig.cases++;
        if (!s)
            continue;
        /* What was in the file itself cannot be lost to a damaged WAL. */
        unsigned base = read_all(s, 0, BASE_N, what);
        if (base != BASE_N) {
            fprintf(stderr, "%s: %u entries of the database file itself lost\n", what,
                    BASE_N - base);
            fig.lost += BASE_N - base;
            test_failures++;
        }
        unsigned in_wal = read_all(s, BASE_N, WAL_N, what);
        lost += WAL_N - in_wal;
        served_wal += in_wal;
        CHECK(l.set_aside == 0);
        check_usable(s, 1000 + seed, what);
        kcache_store_close(s);
        if (!st_integrity_ok(path)) {
            fprintf(stderr, "%s: integrity check failed\n", what);
            test_failures++;
        } else {
            fig.recovered++;
        }
    }
    fig.dropped += lost;
    printf("random bytes in the WAL: 24 cases, %u entries of the WAL served intact, %u dropped "
           "(frames after the damage), none wrong\n",
           served_wal, lost);
    free(copy);
    free(db_bytes);
    free(wal_bytes);
    keep_check("WAL garbage");
}

/* ---- random bytes in the -shm file ------------------------------------------ */

static void scribble(const char *file, uint64_t seed, size_t from)
{
    size_t n;
    uint8_t *b = test_slurp(file, &n);
    if (!b) {
        /* None yet: garbage of the size SQLite makes one. */
        n = 32768;
        REQUIRE((b = calloc(1, n)));
        test_spit(file, b, n);
    }
    REQUIRE(n > from);
    uint64_t x = seed * 0x9e3779b97f4a7c15u + 7;
    for (size_t i = from; i < n; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        if (seed % 2 || (x >> 60) == 0)
            b[i] = (uint8_t)(x >> 56);
    }
    /* In place: a live connection maps this very file. */
    int fd = open(file, O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, b + from, n - from, (off_t)from) == (ssize_t)(n - from));
    close(fd);
    free(b);
}

static void test_shm_garbage(void)
{
    const char *path = test_path("shm.db");
    char shm[600];
    side(shm, sizeof(shm), path, "-shm");
    char wal[600];
    side(wal, sizeof(wal), path, "-wal");
    size_t dn, wn;
    uint8_t *db_bytes, *wal_bytes;
    crashed_state(path, &db_bytes, &dn, &wal_bytes, &wn);
    for (unsigned seed = 1; seed <= 6; seed++) {
        char what[64];
        snprintf(what, sizeof(what), "-shm garbage with no connection, seed %u", seed);
        test_spit(path, db_bytes, dn);
        test_spit(wal, wal_bytes, wn);
        scribble(shm, seed, 0);
        struct st_log l;
        kcache_store *s = st_open_counted(path, &l, "corruption");
        fig.cases++;
        if (!s)
            continue;
        /* The first connection rebuilds the index from the WAL: nothing is lost. */
        unsigned got = read_all(s, 0, ALL_N, what);
        if (got != ALL_N) {
            fprintf(stderr, "%s: %u entries lost\n", what, ALL_N - got);
            fig.lost += ALL_N - got;
            test_failures++;
        }
        CHECK(l.set_aside == 0);
        kcache_store_close(s);
        CHECK(st_integrity_ok(path));
        fig.recovered++;
    }
    /*
     * While another connection has it mapped: nothing SQLite can promise,
     * except what kcache adds: no wrong bytes come out, and once every
     * connection is gone the next one finds the cache whole.
     */
    for (unsigned seed = 11; seed <= 14; seed++) {
        char what[64];
        snprintf(what, sizeof(what), "-shm garbage under a live connection, seed %u", seed);
        struct st_log l1, l2;
        test_spit(path, db_bytes, dn);
        test_spit(wal, wal_bytes, wn);
        unlink(shm);
        kcache_store *a = st_open_counted(path, &l1, "corruption");
        REQUIRE(a);
        CHECK(read_all(a, 0, 1, what) == 1);
        /* Past the two copies of the header, which SQLite checks itself. */
        scribble(shm, seed, seed % 2 ? 136 : 0);
        index_garbage = 1;
        memset(&l2, 0, sizeof(l2));
        kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
        o.path = path;
        o.max_size = UINT64_MAX;
        o.log = st_log_fn;
        o.log_userdata = &l2;
        kcache_store *b = NULL;
        char err[512] = "";
        int rc = kcache_store_open(&b, &o, err, sizeof(err));
        fig.cases++;
        /* Opening may fail while the index is garbage; it must say why, in one line. */
        if (rc) {
            CHECK(rc == KCACHE_ECORRUPT);
            CHECK(strstr(err, "-shm") && !strchr(err, '\n'));
        }
        if (b) {
            read_all(b, 0, ALL_N, what);
            kcache_store_close(b);
        }
        read_all(a, 0, ALL_N, what);
        index_garbage = 0;
        if (getenv("KCACHE_TEST_VERBOSE"))
            fprintf(stderr, "%s: logs: [%s] [%s] open: [%s]\n", what, l1.last, l2.last, err);
        kcache_store_close(a);
        /* Nothing set aside that was not damaged: the file itself is sound. */
        CHECK(count_set_aside("shm.db") == 0);
        struct st_log l3;
        kcache_store *c = st_open_counted(path, &l3, "corruption");
        REQUIRE(c);
        /* Writes made through a garbage index (a's touches) may have lost entries of
         * the WAL; SQLite promises nothing then. The file's own must all be there. */
        unsigned got = read_all(c, 0, ALL_N, what);
        if (read_all(c, 0, BASE_N, what) != BASE_N) {
            fprintf(stderr, "%s: entries of the database file itself lost\n", what);
            fig.lost += BASE_N;
            test_failures++;
        }
        fig.dropped += ALL_N - got;
        kcache_store_close(c);
        CHECK(st_integrity_ok(path));
        fig.recovered++;
    }
    free(db_bytes);
    free(wal_bytes);
    keep_check("-shm garbage");
}

/* ---- an artifact or input altered in the file itself ------------------------- */

/* The stored bytes of entry n's artifact (or of its source input). */
static uint8_t *stored_blob(const char *path, unsigned n, int input, size_t *size)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *st = NULL;
    const char *sql = input ? "SELECT i.data FROM entry e JOIN entry_input ei ON ei.entry_id = e.id"
                              " JOIN input i ON i.id = ei.input_id WHERE e.key = ?1 AND ei.seq = 0"
                            : "SELECT a.data FROM artifact a JOIN entry e ON e.id = a.id"
                              " WHERE e.key = ?1";
    REQUIRE(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
    kcache_key k = st_key(n);
    sqlite3_bind_blob(st, 1, k.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    *size = (size_t)sqlite3_column_bytes(st, 0);
    uint8_t *p = malloc(*size + 1);
    REQUIRE(p);
    memcpy(p, sqlite3_column_blob(st, 0), *size);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return p;
}

/*
 * Flips one byte of the blob where it lies in the file, as a bad sector or a
 * stray write would: SQLite's structure stays sound, the digests are as they
 * were. Returns 0 when the blob is not found exactly once in the file (spread
 * over overflow pages: then a shorter piece of it is looked for).
 */
static int alter_in_file(const char *path, const uint8_t *blob, size_t size)
{
    size_t n;
    uint8_t *file = test_slurp(path, &n);
    REQUIRE(file);
    size_t piece = KC_MIN(size, (size_t)64);
    const uint8_t *needle = blob + (size - piece) / 2;
    uint8_t *hit = memmem(file, n, needle, piece);
    int ok = hit && !memmem(hit + 1, n - (size_t)(hit + 1 - file), needle, piece);
    if (ok) {
        hit[piece / 2] ^= 0x40;
        int fd = open(path, O_WRONLY);
        REQUIRE(fd >= 0);
        off_t at = (off_t)(hit + piece / 2 - file);
        REQUIRE(pwrite(fd, hit + piece / 2, 1, at) == 1);
        close(fd);
    }
    free(file);
    return ok;
}

static void test_altered_in_file(void)
{
    const char *path = test_path("inplace.db");
    fill(path, 0, 40, 1);
    /* 1: compressed, spread over overflow pages; 2: compressed; 17, 34: stored raw. */
    struct {
        unsigned n;
        int input;
    } cases[] = {{1, 0}, {2, 0}, {17, 0}, {34, 0}, {5, 1}};
    unsigned altered = 0;
    int done[KC_ARRAY_SIZE(cases)];
    for (size_t i = 0; i < KC_ARRAY_SIZE(cases); i++) {
        size_t size;
        uint8_t *blob = stored_blob(path, cases[i].n, cases[i].input, &size);
        done[i] = size >= 8 && alter_in_file(path, blob, size);
        altered += (unsigned)done[i];
        if (!done[i])
            fprintf(stderr, "entry %u: its stored bytes are not unique in the file; not altered\n",
                    cases[i].n);
        free(blob);
    }
    CHECK(altered >= 4);
    CHECK(st_integrity_ok(path)); /* SQLite cannot see it: only kcache's digests can */
    struct st_log l;
    kcache_store *s = st_open_counted(path, &l, "corruption");
    REQUIRE(s);
    for (size_t i = 0; i < KC_ARRAY_SIZE(cases); i++) {
        if (!done[i])
            continue;
        fig.cases++;
        kcache_entry *e = (kcache_entry *)1;
        kcache_key k = st_key(cases[i].n);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_INPUTS);
        if (rc != KCACHE_ENOTFOUND) {
            fprintf(stderr, "altered %s of entry %u: get returned %d\n",
                    cases[i].input ? "input" : "artifact", cases[i].n, rc);
            if (rc == 0)
                fig.wrong++;
            test_failures++;
        } else {
            fig.refused++;
        }
        CHECK(e == NULL);
        CHECK(strstr(kcache_store_errmsg(s), "damaged") != NULL);
        /* Deleted: the next get is a plain miss, and a recompile can store it again. */
        CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), KCACHE_ENOTFOUND);
        CHECK_RC(put_with_inputs(s, cases[i].n), 0);
        CHECK(read_all(s, cases[i].n, 1, "altered, then stored again") == 1);
    }
    CHECK(stats_corrupt(s) == altered);
    /* Everything else is served as it was put. */
    CHECK(read_all(s, 0, 40, "altered in place") == 40);
    kcache_store_close(s);
    CHECK(st_integrity_ok(path));
    keep_check("altered in place");
}

/* ---- what a hit hands out beside the artifact, altered ------------------------- */

/*
 * Entry n with a log, a name expression and its lowered name, as a compile
 * stores them (the drop-in hands the lowered name to cuModuleGetFunction).
 */
static int put_with_names(kcache_store *s, unsigned n)
{
    static const char *const exprs[] = {"f<int>"}, *const lowered[] = {"_Z1fIiEvPT_"};
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = st_key(n);
    st_entry_of(&e, n, ART_MAX, scratch);
    e.name = "kern.cu";
    e.toolchain = "nvrtc 13.0 (drop-in, /lib/libnvrtc.so.13)";
    e.log = "kern.cu(3): warning #177-D: variable \"v\" was declared but never referenced\n";
    e.n_names = 1;
    e.name_exprs = exprs;
    e.lowered_names = lowered;
    return kcache_store_put(s, &e);
}

/*
 * One bit of an entry's lowered name (f<int> -> f<unsigned char>, a kernel
 * the module may hold too), its log or its toolchain (what the drop-in
 * answers nvrtcVersion from) flipped in place, or the row of its log and
 * names gone: a miss, never served.
 */
static void test_info_altered(void)
{
    static const struct {
        const char *what, *sql;
    } cases[] = {
        {"lowered name", "UPDATE entry_info SET names = CAST(replace(CAST(names AS TEXT), "
                         "'_Z1fIiE', '_Z1fIhE') AS BLOB) WHERE id = (SELECT id FROM entry"
                         " WHERE key = ?1)"},
        {"log", "UPDATE entry_info SET log = replace(log, '#177', '#176') WHERE id = "
                "(SELECT id FROM entry WHERE key = ?1)"},
        {"toolchain", "UPDATE entry SET toolchain = replace(toolchain, '13.0', '13.1')"
                      " WHERE key = ?1"},
        /* Every put writes the row: one gone would serve an empty log and no names. */
        {"info row", "DELETE FROM entry_info WHERE id = (SELECT id FROM entry WHERE key = ?1)"},
    };
    const char *path = test_path("info.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    REQUIRE(s);
    for (unsigned i = 0; i < KC_ARRAY_SIZE(cases); i++)
        CHECK_RC(put_with_names(s, 100 + i), 0);
    kcache_store_close(s);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
    for (unsigned i = 0; i < KC_ARRAY_SIZE(cases); i++) {
        sqlite3_stmt *st = NULL;
        kcache_key k = st_key(100 + i);
        REQUIRE(sqlite3_prepare_v2(db, cases[i].sql, -1, &st, NULL) == SQLITE_OK);
        sqlite3_bind_blob(st, 1, k.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
        REQUIRE(sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(db) == 1);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    REQUIRE(s);
    for (unsigned i = 0; i < KC_ARRAY_SIZE(cases); i++) {
        fig.cases++;
        kcache_entry *e = NULL;
        kcache_key k = st_key(100 + i);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT);
        if (rc != KCACHE_ENOTFOUND) {
            fprintf(stderr, "altered %s: get returned %d%s%s, log \"%.20s\"\n", cases[i].what,
                    rc, rc ? "" : ", lowered name ",
                    rc ? "" : e->n_names ? e->lowered_names[0] : "(none)", rc ? "" : e->log);
            fig.wrong += rc == 0;
            test_failures++;
        } else {
            fig.refused++;
            CHECK(strstr(kcache_store_errmsg(s), "damaged") != NULL);
        }
        kcache_entry_free(e);
    }
    /* Stored again, each is served as put. */
    for (unsigned i = 0; i < KC_ARRAY_SIZE(cases); i++) {
        kcache_entry *e = NULL;
        kcache_key k = st_key(100 + i);
        CHECK_RC(put_with_names(s, 100 + i), 0);
        CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), 0);
        CHECK(e && e->n_names == 1 && !strcmp(e->lowered_names[0], "_Z1fIiEvPT_"));
        kcache_entry_free(e);
    }
    kcache_store_close(s);
    CHECK(st_integrity_ok(path));
}

int main(void)
{
    double t0 = st_now();
    keep_place();
    test_zeroed_header();
    test_wal_garbage();
    test_shm_garbage();
    test_altered_in_file();
    test_info_altered();
    keep_check("everything");
    printf("corruption cases: %u, recovered %u, refused (altered, not served) %u, entries lost "
           "%u, entries in damaged pages or frames dropped %u, wrong bytes returned %u "
           "(%.2f s)\n",
           fig.cases, fig.recovered, fig.refused, fig.lost, fig.dropped, fig.wrong,
           st_now() - t0);
    test_record("corruption", "cases=%u\trecovered=%u\trefused=%u\tlost=%u\tdropped=%u\twrong=%u",
                fig.cases, fig.recovered, fig.refused, fig.lost, fig.dropped, fig.wrong);
    return test_done();
}
