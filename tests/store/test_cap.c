/*
 * The size cap as a user sees it with ls -l: after a prune to a size, and
 * after every put into a capped store, database plus WAL on disk are at or
 * under the cap, and what goes is what was used least recently.
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "util/common.h"
#include "storetest.h"

#define ART_MAX (200 * 1024)

static uint8_t scratch[ART_MAX];

/* The blocks PATH-lock holds: the reserve for a prune on a full disk (lib/db/alone.c). */
static uint64_t reserve_of(const char *path)
{
    char lock[600];
    struct stat st;
    snprintf(lock, sizeof(lock), "%s-lock", path);
    return stat(lock, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

/* The reserve is a quarter of the file, at least 256 KiB, at most 1 MiB: taken when a handle
 * opens, given back when the file was pruned small. */
static void check_reserve(const char *path, uint64_t least, uint64_t most, const char *when)
{
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_store_close(s);
    uint64_t r = reserve_of(path);
    printf("reserve %s: %llu bytes beside %llu\n", when, (unsigned long long)r,
           (unsigned long long)st_disk(path));
    CHECK(r >= least && r <= most);
}

static void test_prune_to_cap(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("prune.db"));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_store_close(s);
    check_reserve(path, 256 << 10, (256 << 10) + 4096, "of an empty cache");
    s = st_open(path, UINT64_MAX, NULL, NULL);
    unsigned n = 0;
    while (st_disk(path) < (UINT64_C(2) << 20))
        CHECK_RC(st_put(s, n++, ART_MAX, scratch), 0);
    check_reserve(path, st_disk(path) / 4 - 4096, st_disk(path) / 4 + 4096, "at 2 MiB");
    while (st_disk(path) < (UINT64_C(12) << 20))
        CHECK_RC(st_put(s, n++, ART_MAX, scratch), 0);
    check_reserve(path, 1 << 20, 1 << 20, "at 12 MiB");
    uint64_t full = st_disk(path);
    /* The last one a little over an empty file (35 pages of schema 9). */
    static const uint64_t caps[] = {UINT64_C(8) << 20, UINT64_C(4) << 20, UINT64_C(1) << 20,
                                    UINT64_C(256) << 10, UINT64_C(160) << 10};
    uint64_t entries_before = n;
    for (size_t i = 0; i < KC_ARRAY_SIZE(caps); i++) {
        kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
        kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
        o.max_size = caps[i];
        double t0 = st_now();
        CHECK_RC(kcache_store_prune(&r, s, &o), 0);
        double dt = st_now() - t0;
        uint64_t disk = st_disk(path);
        printf("prune to %llu: evicted %llu entries, disk %llu -> %llu bytes (reported %llu), "
               "%.1f ms\n",
               (unsigned long long)caps[i], (unsigned long long)r.evicted,
               (unsigned long long)r.disk_before, (unsigned long long)disk,
               (unsigned long long)r.disk_after, dt * 1e3);
        CHECK(disk <= caps[i]);
        CHECK(r.disk_after == disk);
        CHECK(r.evicted > 0);
        kcache_stats *st = NULL;
        CHECK_RC(kcache_store_stats(&st, s), 0);
        REQUIRE(st);
        CHECK(st->entries + r.evicted == entries_before);
        CHECK(st->file_bytes + st->wal_bytes == disk);
        entries_before = st->entries;
        kcache_stats_free(st);
    }
    /* A dry run changes nothing. */
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    o.max_size = 1;
    o.dry_run = 1;
    uint64_t before = st_disk(path);
    CHECK_RC(kcache_store_prune(&r, s, &o), 0);
    CHECK(st_disk(path) == before);
    kcache_store_close(s);
    CHECK(st_disk(path) <= caps[KC_ARRAY_SIZE(caps) - 1]);
    CHECK(st_integrity_ok(path));
    check_reserve(path, 256 << 10, (256 << 10) + 4096, "pruned small");
    printf("filled to %llu bytes with %u entries\n", (unsigned long long)full, n);
}

static void test_cap_on_put(void)
{
    const uint64_t cap = UINT64_C(3) << 20;
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("capped.db"));
    kcache_store *s = st_open(path, cap, NULL, NULL);
    CHECK(kcache_store_max_size(s) == cap);
    uint64_t worst = 0;
    unsigned over = 0;
    for (unsigned n = 0; n < 300; n++) {
        CHECK_RC(st_put(s, n, ART_MAX, scratch), 0);
        uint64_t disk = st_disk(path);
        worst = KC_MAX(worst, disk);
        if (disk > cap) {
            over++;
            fprintf(stderr, "after put %u: %llu bytes on disk, cap %llu\n", n,
                    (unsigned long long)disk, (unsigned long long)cap);
        }
        /* What was just put is there: eviction takes the least recently used. */
        kcache_entry *e = NULL;
        kcache_key k = st_key(n);
        CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH), 0);
        CHECK(st_entry_ok(e, n, ART_MAX, scratch));
        kcache_entry_free(e);
    }
    CHECK(over == 0);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    REQUIRE(st);
    printf("300 puts under a %llu-byte cap: at most %llu bytes on disk, %llu entries left, "
           "%llu evictions\n",
           (unsigned long long)cap, (unsigned long long)worst, (unsigned long long)st->entries,
           (unsigned long long)st->evictions);
    CHECK(st->evictions > 0 && st->entries < 300);
    kcache_stats_free(st);
    kcache_store_close(s);
    CHECK(st_disk(path) <= cap);
    CHECK(st_integrity_ok(path));
}

/* Least recently used goes first: an entry that keeps being hit stays. */
static void test_lru_order(void)
{
    const uint64_t cap = UINT64_C(2) << 20;
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("lru.db"));
    kcache_store *s = st_open(path, cap, NULL, NULL);
    kcache_key hot = st_key(1), cold = st_key(2);
    CHECK_RC(st_put(s, 1, ART_MAX, scratch), 0);
    CHECK_RC(st_put(s, 2, ART_MAX, scratch), 0);
    uint64_t evictions = 0;
    for (unsigned n = 3; n < 200 && evictions < 20; n++) {
        kcache_entry *e = NULL;
        /* Hits are recorded later, in batches; a millisecond apart so they order. */
        usleep(1000);
        CHECK_RC(kcache_store_get(&e, s, &hot, KCACHE_GET_DEFAULT), 0);
        kcache_entry_free(e);
        CHECK_RC(st_put(s, n, ART_MAX, scratch), 0);
        kcache_stats *st = NULL;
        CHECK_RC(kcache_store_stats(&st, s), 0);
        evictions = st ? st->evictions : 0;
        kcache_stats_free(st);
    }
    CHECK(evictions >= 20);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &hot, KCACHE_GET_NO_TOUCH), 0);
    CHECK(st_entry_ok(e, 1, ART_MAX, scratch));
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get(&e, s, &cold, KCACHE_GET_NO_TOUCH), KCACHE_ENOTFOUND);
    kcache_store_close(s);
}

/* A plain connection's TRUNCATE checkpoint: the WAL then holds nothing. */
static void empty_wal(const char *path)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK);
    REQUIRE(sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) ==
            SQLITE_OK);
    sqlite3_close(db);
}

static uint64_t wal_size(const char *path)
{
    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    return st_file_size(wal);
}

/*
 * A process that wrote empties the WAL when it closes, however little it
 * wrote: every process that opens the file next would otherwise replay
 * those frames to rebuild SQLite's index, on every hit, until the WAL grew
 * past what a close always checkpoints.
 */
static void test_writer_close_empties_wal(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("writerwal.db"));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 1, 1024, scratch), 0);
    kcache_store_close(s);
    empty_wal(path);

    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 2, 1024, scratch), 0);
    kcache_store_close(s);
    CHECK(wal_size(path) == 0);

    /* A handle kept until exit (the drop-in's) does the same at its flush. */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 3, 1024, scratch), 0);
    CHECK(wal_size(path) > 0);
    CHECK_RC(kcache_store_flush(s), 0);
    CHECK(wal_size(path) == 0);
    kcache_entry *e = NULL;
    kcache_key k3 = st_key(3);
    CHECK_RC(kcache_store_get(&e, s, &k3, KCACHE_GET_NO_TOUCH), 0);
    kcache_entry_free(e);
    e = NULL;
    kcache_store_close(s);

    /* Every entry is there for the next process. */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned n = 1; n <= 3; n++) {
        kcache_key k = st_key(n);
        CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH), 0);
        CHECK(st_entry_ok(e, n, 1024, scratch));
        kcache_entry_free(e);
        e = NULL;
    }
    kcache_store_close(s);
}

/*
 * A dry run is a transaction rolled back: its handle's close must not empty
 * the WAL another process left, or the prune after it would start from a
 * smaller file than the dry run measured.
 */
static void test_dry_run_leaves_wal(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("drywal.db"));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL); /* made, and its WAL emptied */
    kcache_store_close(s);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) { /* puts, then exits without closing: its frames stay */
        kcache_store *c = st_open(path, UINT64_MAX, NULL, NULL);
        for (unsigned n = 1; n <= 4; n++)
            if (st_put(c, n, 1024, scratch) != 0)
                _exit(1);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t wal = wal_size(path), disk = st_disk(path);
    REQUIRE(wal > 0 && wal < 256 * 1024); /* under what any close empties */

    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result dry = KCACHE_PRUNE_RESULT_INIT, real = KCACHE_PRUNE_RESULT_INIT;
    o.max_entries = 2;
    o.dry_run = 1;
    CHECK_RC(kcache_store_prune(&dry, s, &o), 0);
    kcache_store_close(s);
    CHECK(wal_size(path) == wal);
    CHECK(st_disk(path) == disk);

    s = st_open(path, UINT64_MAX, NULL, NULL);
    o.dry_run = 0;
    CHECK_RC(kcache_store_prune(&real, s, &o), 0);
    kcache_store_close(s);
    CHECK(dry.evicted == 2 && real.evicted == 2);
    CHECK(dry.disk_before == real.disk_before);
}

/*
 * A process that opens the cache, hits and closes writes nothing to the
 * database (hitlog.c): its hit is still counted, and prune, run by another
 * handle afterwards, still evicts in the order of the accesses.
 */
static void test_hit_writes_nothing(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("nowrite.db"));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    for (unsigned n = 1; n <= 10; n++)
        CHECK_RC(st_put(s, n, ART_MAX, scratch), 0);
    kcache_store_close(s);
    empty_wal(path);
    uint64_t disk = st_disk(path);

    usleep(2000); /* the hit's time after every put's */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_entry *e = NULL;
    kcache_key first = st_key(1), second = st_key(2);
    CHECK_RC(kcache_store_get(&e, s, &first, KCACHE_GET_DEFAULT), 0);
    CHECK(st_entry_ok(e, 1, ART_MAX, scratch));
    kcache_entry_free(e);
    kcache_store_close(s);
    CHECK(wal_size(path) == 0);

    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->hits == 1);
    kcache_stats_free(st);
    /* Half goes: the oldest put (2) before the first, which was hit last. */
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    o.max_size = disk / 2;
    CHECK_RC(kcache_store_prune(&r, s, &o), 0);
    CHECK(r.evicted > 0 && r.evicted < 10);
    CHECK_RC(kcache_store_get(&e, s, &first, KCACHE_GET_NO_TOUCH), 0);
    kcache_entry_free(e);
    CHECK_RC(kcache_store_get(&e, s, &second, KCACHE_GET_NO_TOUCH), KCACHE_ENOTFOUND);
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->hits == 1); /* taken into the database once, not counted twice */
    kcache_stats_free(st);
    kcache_store_close(s);
}

/*
 * The bound on the lag (hitlog.c): with nothing else writing, processes that
 * only hit keep PATH-hits under 64 KiB; past it, one of them takes the log
 * into the database.
 */
static void test_hit_log_bound(void)
{
    char path[512], log[600];
    snprintf(path, sizeof(path), "%s", test_path("bound.db"));
    snprintf(log, sizeof(log), "%s-hits", path);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 1, 4096, scratch), 0);
    kcache_store_close(s);
    kcache_key k = st_key(1);
    uint64_t largest = 0;
    for (unsigned i = 0; i < 600; i++) {
        s = st_open(path, UINT64_MAX, NULL, NULL);
        kcache_entry *e = NULL;
        CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), 0);
        kcache_entry_free(e);
        kcache_store_close(s);
        largest = KC_MAX(largest, st_file_size(log));
    }
    printf("600 processes' hits: PATH-hits at most %llu bytes\n", (unsigned long long)largest);
    CHECK(largest > 0 && largest <= 64 * 1024);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t in_db = st_sql_int(db, "SELECT hits FROM entry");
    sqlite3_close(db);
    CHECK(in_db >= 600 - (int64_t)(64 * 1024 / 80));
    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->hits == 600);
    kcache_stats_free(st);
    kcache_store_close(s);
}

/* One hit and a close, then the stats: all must come back, and the hit be served. */
static void hit_and_stats(const char *path, uint64_t want_hits)
{
    kcache_key k = st_key(1);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), 0);
    CHECK(e && st_entry_ok(e, 1, 4096, scratch));
    kcache_entry_free(e);
    kcache_store_close(s);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->hits == want_hits);
    kcache_stats_free(st);
    kcache_store_close(s);
}

/*
 * What a hit may find at PATH-hits (hitlog.c): a FIFO, a directory, a link, a
 * file another user owns, a lock a stopped process holds, megabytes of
 * garbage. None may hang a hit, a close or the stats (the alarm fails the
 * test instead), be written through, or be counted.
 */
static void test_hit_log_hostile(void)
{
    char path[512], log[600], target[600];
    snprintf(path, sizeof(path), "%s", test_path("hostile hits.db"));
    snprintf(log, sizeof(log), "%s-hits", path);
    snprintf(target, sizeof(target), "%s-target", path);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 1, 4096, scratch), 0);
    kcache_store_close(s);
    alarm(60);

    /* A hit the log cannot take goes into the database: counted once either way. */
    REQUIRE(mkfifo(log, 0600) == 0);
    hit_and_stats(path, 1);
    unlink(log);

    REQUIRE(mkdir(log, 0700) == 0);
    hit_and_stats(path, 2);
    rmdir(log);

    FILE *f = fopen(target, "wb");
    REQUIRE(f && fputs("not kcache's", f) >= 0 && fclose(f) == 0);
    REQUIRE(symlink(target, log) == 0);
    hit_and_stats(path, 3);
    CHECK(st_file_size(target) == 12);
    unlink(log);

    /* A hard link to a file of the user's: neither appended to nor emptied. */
    REQUIRE(link(target, log) == 0);
    hit_and_stats(path, 4);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 5, 4096, scratch), 0);
    kcache_store_close(s);
    CHECK(st_file_size(target) == 12);
    unlink(log);

    /* A stopped process's lock: nothing waits for it. */
    int held = open(log, O_RDWR | O_CREAT, 0600);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    REQUIRE(held >= 0 && fcntl(held, F_OFD_SETLK, &fl) == 0);
    hit_and_stats(path, 5);
    close(held);
    unlink(log);

    /* Garbage beyond the bound: ignored by the stats, emptied by the next writer. */
    f = fopen(log, "wb");
    REQUIRE(f);
    for (unsigned i = 0; i < 3u * 1024 * 1024; i++)
        fputc((int)(i * 2654435761u >> 24), f);
    REQUIRE(fclose(f) == 0);
    hit_and_stats(path, 5); /* the append is dropped: the log is past its bound */
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 2, 4096, scratch), 0);
    kcache_store_close(s);
    CHECK(st_file_size(log) == 0);
    hit_and_stats(path, 6);

    /* Another user's log (a shared directory): neither counted, appended to nor emptied. */
    if (geteuid() == 0) {
        s = st_open(path, UINT64_MAX, NULL, NULL);
        CHECK_RC(st_put(s, 3, 4096, scratch), 0); /* takes the log in */
        kcache_store_close(s);
        hit_and_stats(path, 7);
        uint64_t before = st_file_size(log);
        REQUIRE(before > 0 && chown(log, 65534, 65534) == 0 && chmod(log, 0666) == 0);
        hit_and_stats(path, 7); /* the foreign log's record is not counted */
        s = st_open(path, UINT64_MAX, NULL, NULL);
        CHECK_RC(st_put(s, 4, 4096, scratch), 0);
        kcache_store_close(s);
        CHECK(st_file_size(log) == before);
        unlink(log);
    }
    alarm(0);
}

/*
 * A full disk in the middle of an append (RLIMIT_FSIZE, in a child), the log
 * holding `prefix` bytes of nothing before it: one record goes into PATH-hits
 * whole, then a torn one of a length no multiple of 4. The whole one is not
 * written to the database a second time, the torn one is never taken, nor
 * does it hide a hit appended after it. A prefix of 400000 leaves room for
 * the WAL (from 0), so the child writes the rest into the database; one of
 * 800 does not, and the rest is lost (the log's bound on what may be).
 */
static void hit_through_full_disk(unsigned prefix, int64_t want_entry_hits,
                                  uint64_t want_stats_hits)
{
    char path[512], log[600];
    snprintf(path, sizeof(path), "%s", test_path("full hits.db"));
    snprintf(log, sizeof(log), "%s-hits", path);
    unlink(path);
    unlink(log);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 1, 4096, scratch), 0);
    kcache_store_close(s);
    empty_wal(path);
    FILE *f = fopen(log, "wb");
    REQUIRE(f);
    for (unsigned i = 0; i < prefix; i++)
        fputc(0, f);
    REQUIRE(fclose(f) == 0);
    kcache_key k = st_key(1);
    kcache_entry *e = NULL;
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        s = st_open(path, UINT64_MAX, NULL, NULL);
        if (kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT) != 0)
            _exit(2);
        kcache_entry_free(e);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {prefix + 103, prefix + 103};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(3);
        kcache_store_close(s);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), 0);
    kcache_entry_free(e);
    kcache_store_close(s);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 2, 4096, scratch), 0); /* takes in what the log holds */
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->hits == want_stats_hits);
    kcache_stats_free(st);
    kcache_store_close(s);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t hits = st_sql_int(db, "SELECT sum(hits) FROM entry");
    sqlite3_close(db);
    if (hits != want_entry_hits)
        fprintf(stderr, "a full disk after %u bytes of log: the entries say %lld hits, not %lld\n",
                prefix, (long long)hits, (long long)want_entry_hits);
    CHECK(hits == want_entry_hits);
}

static void test_hit_log_disk_full(void)
{
    hit_through_full_disk(400000, 2, 2);
    /* The child's database write fails too, and what it took from the log is lost. */
    hit_through_full_disk(800, 1, 1);

    /* Records after a torn one of any length are read: 23 bytes, then a hit's. */
    char path[512], log[600];
    snprintf(path, sizeof(path), "%s", test_path("full hits.db"));
    snprintf(log, sizeof(log), "%s-hits", path);
    unlink(log);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_key k = st_key(1);
    kcache_entry *e = NULL;
    CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), 0);
    kcache_entry_free(e);
    kcache_store_close(s);
    uint8_t rec[2 * 80 + 23];
    memset(rec, 0x5a, 23);
    FILE *f = fopen(log, "rb");
    REQUIRE(f && fread(rec + 23, 1, 2 * 80, f) == 2 * 80 && fgetc(f) == EOF && fclose(f) == 0);
    f = fopen(log, "wb");
    REQUIRE(f && fwrite(rec, 1, sizeof(rec), f) == sizeof(rec) && fclose(f) == 0);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->hits == 2); /* one in the database, one behind the torn bytes */
    kcache_stats_free(st);
    kcache_store_close(s);
}

/* The latest time of use the log holds for key n (records: hitlog.c). */
static int64_t logged_use(const char *log, unsigned n)
{
    kcache_key k = st_key(n);
    uint8_t rec[80];
    int64_t last = 0;
    FILE *f = fopen(log, "rb");
    REQUIRE(f);
    while (fread(rec, 1, sizeof(rec), f) == sizeof(rec)) {
        uint32_t type;
        int64_t at;
        memcpy(&type, rec + 4, 4);
        memcpy(&at, rec + 40, 8);
        if (type == 1 && memcmp(rec + 8, k.bytes, KCACHE_KEY_SIZE) == 0)
            last = KC_MAX(last, at);
    }
    fclose(f);
    return last;
}

/*
 * A key hit by several handles is in the log once per handle; taken in, the
 * row must say every hit and the latest time of use, whichever way the
 * touches went into it.
 */
static void test_hit_log_same_key(void)
{
    char path[512], log[600];
    snprintf(path, sizeof(path), "%s", test_path("same key.db"));
    snprintf(log, sizeof(log), "%s-hits", path);
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 1, 4096, scratch), 0);
    CHECK_RC(st_put(s, 2, 4096, scratch), 0);
    kcache_store_close(s);
    for (unsigned round = 0; round < 4; round++) {
        s = st_open(path, UINT64_MAX, NULL, NULL);
        for (unsigned n = 1; n <= 2; n++) {
            kcache_key k = st_key(n);
            kcache_entry *e = NULL;
            for (unsigned i = 0; i <= round; i++) {
                CHECK_RC(kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT), 0);
                kcache_entry_free(e);
            }
        }
        kcache_store_close(s);
        usleep(3000); /* each handle's stamps in milliseconds of their own */
    }
    int64_t last1 = logged_use(log, 1), last2 = logged_use(log, 2);
    CHECK(last1 > 0 && last2 > 0);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 3, 4096, scratch), 0); /* takes in what the log holds */
    kcache_store_close(s);
    CHECK(st_file_size(log) == 0);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    CHECK(st_sql_int(db, "SELECT hits FROM entry ORDER BY id LIMIT 1") == 1 + 2 + 3 + 4);
    CHECK(st_sql_int(db, "SELECT hits FROM entry ORDER BY id LIMIT 1 OFFSET 1") == 1 + 2 + 3 + 4);
    CHECK(st_sql_int(db, "SELECT accessed_at FROM entry ORDER BY id LIMIT 1") == last1);
    CHECK(st_sql_int(db, "SELECT accessed_at FROM entry ORDER BY id LIMIT 1 OFFSET 1") == last2);
    sqlite3_close(db);
}

/*
 * Processes that hit (each append under the shared lock) while others put
 * (each put takes the log in under the exclusive one): no hit is counted
 * twice or lost, and nobody waits for good.
 */
static void test_hit_log_concurrent(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", test_path("busy hits.db"));
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(s, 1, 4096, scratch), 0);
    kcache_store_close(s);
    enum { HITTERS = 6, PUTTERS = 2, ROUNDS = 40 };
    pid_t pids[HITTERS + PUTTERS];
    alarm(120);
    for (unsigned c = 0; c < HITTERS + PUTTERS; c++) {
        REQUIRE((pids[c] = fork()) >= 0);
        if (pids[c])
            continue;
        for (unsigned r = 0; r < ROUNDS; r++) {
            kcache_store *cs = st_open(path, UINT64_MAX, NULL, NULL);
            if (c < HITTERS) {
                kcache_key k = st_key(1);
                kcache_entry *e = NULL;
                if (kcache_store_get(&e, cs, &k, KCACHE_GET_DEFAULT) != 0)
                    _exit(2);
                kcache_entry_free(e);
            } else if (st_put(cs, 100 + c * ROUNDS + r, 4096, scratch) != 0) {
                _exit(3);
            }
            kcache_store_close(cs);
        }
        _exit(0);
    }
    for (unsigned c = 0; c < HITTERS + PUTTERS; c++) {
        int status = 0;
        REQUIRE(waitpid(pids[c], &status, 0) == pids[c]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    alarm(0);
    s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    if (!st || st->hits != HITTERS * ROUNDS)
        fprintf(stderr, "%u hits, stats say %llu\n", HITTERS * ROUNDS,
                st ? (unsigned long long)st->hits : 0ull);
    CHECK(st && st->hits == HITTERS * ROUNDS);
    kcache_stats_free(st);
    CHECK_RC(st_put(s, 2, 4096, scratch), 0);
    kcache_store_close(s);
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t in_db = st_sql_int(db, "SELECT max(hits) FROM entry");
    if (in_db != HITTERS * ROUNDS)
        fprintf(stderr, "%u hits, the entry says %lld\n", HITTERS * ROUNDS, (long long)in_db);
    CHECK(in_db == HITTERS * ROUNDS);
    sqlite3_close(db);
}

int main(void)
{
    double t0 = st_now();
    test_prune_to_cap();
    test_cap_on_put();
    test_lru_order();
    test_writer_close_empties_wal();
    test_dry_run_leaves_wal();
    test_hit_writes_nothing();
    test_hit_log_bound();
    test_hit_log_hostile();
    test_hit_log_disk_full();
    test_hit_log_same_key();
    test_hit_log_concurrent();
    printf("cap tests: %.2f s\n", st_now() - t0);
    return test_done();
}
