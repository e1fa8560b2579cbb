/*
 * Opening a store: one opened with no_create creates
 * nothing (not even its directory) and says "no cache yet"; errors are a
 * counter of their own; a cap of 0/none/unlimited
 * is no cap, in kcache_parse_max_size and through KCACHE_MAX_SIZE; a
 * handle maps the file from its second hit, not its first; a SQLite this
 * program shares with kcache keeps its memory statistics.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <kcache/store.h>
#include <sqlite3.h>

#include "store/storelib.h"
#include "storetest.h"
#include "testutil.h"

static void test_no_create(void)
{
    const char *path = test_path("not/yet/kcache.db");
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    kcache_store *s = NULL;
    char err[512] = "";
    struct stat st;
    o.path = path;
    o.no_create = 1;
    o.read_only = 1;
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_ENOTFOUND);
    CHECK(s == NULL);
    CHECK(strstr(err, "no cache yet at ") && strstr(err, path));
    CHECK(stat(test_path("not"), &st) != 0);
    /* Read-write looking creates nothing either. */
    o.read_only = 0;
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_ENOTFOUND);
    CHECK(stat(test_path("not"), &st) != 0);
    /* An empty file is what a crash before the first table leaves: no cache. */
    const char *empty = test_path("empty.db");
    test_write_text(empty, "");
    o.path = empty;
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), KCACHE_ENOTFOUND);
    /* Once a cache exists, no_create opens it. */
    o.path = path;
    o.no_create = 0;
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), 0);
    kcache_store_close(s);
    o.no_create = 1;
    o.read_only = 1;
    s = NULL;
    CHECK_RC(kcache_store_open(&s, &o, err, sizeof(err)), 0);
    CHECK(s != NULL);
    kcache_store_close(s);
    /* A version 1 caller's struct ends before no_create: it is never read. */
    kcache_store_options v1 = KCACHE_STORE_OPTIONS_INIT;
    v1.version = 1;
    v1.path = test_path("v1/kcache.db");
    v1.no_create = 1; /* beyond a v1 struct: ignored */
    CHECK_RC(kcache_store_open(&s, &v1, err, sizeof(err)), 0);
    kcache_store_close(s);
}

static uint64_t counter(kcache_store *s, const char *name)
{
    uint64_t v = 0;
    CHECK_RC(kcache_store_counter(&v, s, name), 0);
    return v;
}

/* A failed compile is an error, counted apart from misses (compiler.c). */
static void test_counters(void)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    kcache_store *s = NULL;
    o.path = test_path("counters.db");
    REQUIRE(kcache_store_open(&s, &o, NULL, 0) == 0);
    kc_store_count(s, "errors", 1);
    kc_store_count(s, "errors", 1);
    kc_store_count_miss(s, "sm_90", KCACHE_KIND_CUBIN);
    CHECK(counter(s, "errors") == 2);
    kcache_store_close(s); /* writes them */
    REQUIRE(kcache_store_open(&s, &o, NULL, 0) == 0);
    CHECK(counter(s, "errors") == 2);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->misses == 1);
    kcache_stats_free(st);
    kcache_store_close(s);
}

static void test_no_cap(void)
{
    static const char *const none[] = {"0", "none", "NONE", "unlimited"};
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        v = 0;
        CHECK_RC(kcache_parse_max_size(&v, none[i]), 0);
        CHECK(v == UINT64_MAX);
    }
    CHECK_RC(kcache_parse_max_size(&v, "2G"), 0);
    CHECK(v == (UINT64_C(2) << 30));
    CHECK_RC(kcache_parse_max_size(&v, "0K"), KCACHE_EINVAL);
    CHECK_RC(kcache_parse_max_size(&v, "-1"), KCACHE_EINVAL);
    CHECK_RC(kcache_parse_max_size(&v, "nothing"), KCACHE_EINVAL);

    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    kcache_store *s = NULL;
    o.path = test_path("nocap.db");
    setenv("KCACHE_MAX_SIZE", "0", 1);
    CHECK_RC(kcache_store_open(&s, &o, NULL, 0), 0);
    CHECK(kcache_store_max_size(s) == UINT64_MAX);
    kcache_store_close(s);
    unsetenv("KCACHE_MAX_SIZE");
}

/* Whether this process maps the file at path (Linux: /proc/self/maps); -1: cannot tell. */
static int mapped(const char *path)
{
    char real[PATH_MAX], line[PATH_MAX + 256];
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f || !realpath(path, real)) {
        if (f)
            fclose(f);
        return -1;
    }
    int found = 0;
    size_t n = strlen(real);
    while (!found && fgets(line, sizeof(line), f)) {
        char *p = strchr(line, '/');
        found = p && strncmp(p, real, n) == 0 && (p[n] == '\n' || p[n] == '\0');
    }
    fclose(f);
    return found;
}

/*
 * A handle's first hit, and any miss before it, reads through pread(), so
 * that a process's one hit neither sets up a mapping nor reads a whole
 * read-around per cold page through it (db.c: kc_db_map); from its second
 * hit it maps the file. Both hand out the same bytes.
 */
static void test_mapping(void)
{
    const char *path = test_path("mapped.db");
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    kcache_store *s = NULL;
    static uint8_t scratch[200000];
    o.path = path;
    REQUIRE(kcache_store_open(&s, &o, NULL, 0) == 0);
    for (unsigned n = 1; n <= 3; n++)
        CHECK_RC(st_put(s, n, sizeof(scratch), scratch), 0);
    kcache_store_close(s);
    if (mapped(path) < 0) {
        printf("# mapping: /proc/self/maps cannot tell here\n");
        return;
    }
    REQUIRE(kcache_store_open(&s, &o, NULL, 0) == 0);
    /* A miss serves nothing: the first hit after it still reads with pread(). */
    kcache_entry *none = NULL;
    kcache_key absent = st_key(99);
    CHECK_RC(kcache_store_get(&none, s, &absent, 0), KCACHE_ENOTFOUND);
    CHECK(mapped(path) == 0);
    for (unsigned n = 1; n <= 3; n++) {
        kcache_entry *e = NULL;
        kcache_key k = st_key(n);
        CHECK_RC(kcache_store_get(&e, s, &k, 0), 0);
        CHECK(st_entry_ok(e, n, sizeof(scratch), scratch));
        kcache_entry_free(e);
        /* Not after the first hit; after the second and on. */
        CHECK(mapped(path) == (n > 1));
    }
    kcache_store_close(s);
    CHECK(mapped(path) == 0);
}

/*
 * kcache turns SQLite's memory statistics off only in its own copy (a CLI
 * linked statically, db/conn.c): this program's SQLite is a shared library
 * it could use itself, and must still count what is allocated.
 */
static void test_program_sqlite(void)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    kcache_store *s = NULL;
    o.path = test_path("program_sqlite.db");
    static uint8_t scratch[4096];
    REQUIRE(kcache_store_open(&s, &o, NULL, 0) == 0);
    CHECK_RC(st_put(s, 1, sizeof(scratch), scratch), 0);
    if (sqlite3_memory_used() == 0)
        fprintf(stderr, "a SQLite shared with the program lost its memory statistics\n");
    CHECK(sqlite3_memory_used() > 0);
    kcache_store_close(s);
}

int main(void)
{
    unsetenv("KCACHE_MAX_SIZE");
    test_program_sqlite();
    test_no_create();
    test_counters();
    test_no_cap();
    test_mapping();
    return test_done();
}
