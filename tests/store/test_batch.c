/*
 * Batches of puts (kcache_batch_*) and the batch inside a bundle import, as
 * a user would notice them:
 *
 *   - every entry of a committed batch reads back exactly; nothing of a
 *     batch is visible before its commit, nothing after kcache_batch_free()
 *     without one; an entry the put rules refuse is refused alone;
 *   - a failure in the middle (the disk fills: a file-size limit in a
 *     child) loses only the transaction it hit: every entry committed
 *     before reads back exactly, no entry of the failed transaction is
 *     there, not even in part, and the totals (stats) match the entries;
 *   - a bundle with a bad entry in the middle imports nothing at all;
 *   - a prune's totals match what is left;
 *   - batches on several threads of one store, with gets between, each
 *     entry once and exact.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kcache/bundle.h>

#include "storetest.h"

#define ART_MAX 60000u

static uint8_t scratch[ART_MAX];

static void make_entry(kcache_entry *e, unsigned n, char material[32])
{
    *e = (kcache_entry)KCACHE_ENTRY_INIT;
    e->key = material ? st_material_key(material, n) : st_key(n);
    if (material) {
        e->key_material = material;
        e->key_material_size = strlen(material);
    }
    st_entry_of(e, n, ART_MAX, scratch);
    e->name = "batch.cu";
    e->toolchain = "test";
}

static int present(kcache_store *s, unsigned n, int exact)
{
    kcache_entry *e = NULL;
    kcache_key k = st_key(n);
    int rc = kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH);
    uint8_t check[ART_MAX];
    int ok = rc == 0 && (!exact || st_entry_ok(e, n, ART_MAX, check));
    kcache_entry_free(e);
    return rc == 0 ? (ok ? 1 : -1) : 0;
}

/* The totals that stats reads (kept by triggers) against the entries themselves. */
static void check_totals(const char *path, const char *what)
{
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t entries = st_sql_int(db, "SELECT entries FROM totals");
    int64_t counted = st_sql_int(db, "SELECT count(*) FROM entry");
    int64_t stored = st_sql_int(db, "SELECT stored_bytes FROM totals");
    int64_t summed = st_sql_int(db, "SELECT coalesce(sum(stored_size), 0) FROM entry");
    int64_t orphans = st_sql_int(db, "SELECT (SELECT count(*) FROM artifact WHERE id NOT IN"
                                     " (SELECT id FROM entry)) + (SELECT count(*) FROM entry"
                                     " WHERE id NOT IN (SELECT id FROM artifact))");
    sqlite3_close(db);
    if (entries != counted || stored != summed || orphans) {
        fprintf(stderr, "%s: totals say %lld entries / %lld bytes, there are %lld / %lld, "
                        "%lld half entries\n",
                what, (long long)entries, (long long)stored, (long long)counted,
                (long long)summed, (long long)orphans);
        test_failures++;
    }
}

static void test_basic(void)
{
    const char *path = test_path("basic.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_batch_options o = KCACHE_BATCH_OPTIONS_INIT;
    o.max_entries = 16;
    kcache_batch *b = NULL;
    CHECK_RC(kcache_batch_new(&b, s, &o), 0);
    REQUIRE(b);
    for (unsigned n = 0; n < 100; n++) {
        kcache_entry e;
        make_entry(&e, n, NULL);
        CHECK_RC(kcache_batch_put(b, &e), 0);
        memset(scratch, 0xab, sizeof(scratch)); /* the batch kept its own copy */
        if (n == 40) {
            /* Refused alone: the batch goes on. */
            e.kind = (kcache_kind)9;
            CHECK_RC(kcache_batch_put(b, &e), KCACHE_EINVAL);
        }
    }
    /* 100 = 6 * 16 + 4: the last four wait, unseen. */
    CHECK(kcache_batch_pending(b) == 4);
    CHECK(present(s, 99, 0) == 0);
    CHECK(present(s, 95, 1) == 1);
    CHECK_RC(kcache_batch_commit(b), 0);
    CHECK(kcache_batch_pending(b) == 0);
    for (unsigned n = 0; n < 100; n++)
        CHECK(present(s, n, 1) == 1);
    /* Freed without a commit: dropped. */
    kcache_entry e;
    make_entry(&e, 1000, NULL);
    CHECK_RC(kcache_batch_put(b, &e), 0);
    kcache_batch_free(b);
    CHECK(present(s, 1000, 0) == 0);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->entries == 100);
    kcache_stats_free(st);
    kcache_store_close(s);
    check_totals(path, "batch");
    CHECK(st_integrity_ok(path));
}

/*
 * Entries [0, 30) go in through a batch of 8 per transaction until a
 * file-size limit stops one; the child says on a pipe how many were
 * committed. Then: those read back exactly, none of the rest is there.
 */
static void test_failure_in_the_middle(void)
{
    const char *path = test_path("full.db");
    {
        kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
        CHECK_RC(st_put(s, 5000, ART_MAX, scratch), 0);
        kcache_store_close(s);
    }
    uint64_t before = st_disk(path);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        signal(SIGXFSZ, SIG_IGN);
        /* Room in the WAL for two or three transactions of 8 entries (~100 KiB each). */
        struct rlimit rl = {before + (300 << 10), before + (300 << 10)};
        REQUIRE(setrlimit(RLIMIT_FSIZE, &rl) == 0);
        kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
        kcache_batch_options o = KCACHE_BATCH_OPTIONS_INIT;
        o.max_entries = 8;
        kcache_batch *b = NULL;
        REQUIRE(kcache_batch_new(&b, s, &o) == 0);
        unsigned committed = 0, n;
        int rc = 0;
        for (n = 0; n < 30 && rc == 0; n++) {
            kcache_entry e;
            make_entry(&e, n, NULL);
            rc = kcache_batch_put(b, &e);
            if (rc == 0 && kcache_batch_pending(b) == 0)
                committed = n + 1;
        }
        if (rc == 0 && (rc = kcache_batch_commit(b)) == 0)
            committed = n;
        printf("batch stopped after %u entries, %u committed: %s\n", n, committed,
               rc ? kcache_store_errmsg(s) : "no failure");
        kcache_batch_free(b);
        kcache_store_close(s);
        REQUIRE(write(fds[1], &committed, sizeof(committed)) == sizeof(committed));
        fflush(stdout);
        _exit(rc == KCACHE_EFULL ? 0 : 1);
    }
    close(fds[1]);
    unsigned committed = 0;
    REQUIRE(read(fds[0], &committed, sizeof(committed)) == sizeof(committed));
    close(fds[0]);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the file-size limit did not stop the batch with KCACHE_EFULL\n");
        test_failures++;
    }
    CHECK(committed > 0 && committed < 30 && committed % 8 == 0);
    CHECK(st_integrity_ok(path));
    check_totals(path, "after a failed batch");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    CHECK(present(s, 5000, 0) == 1);
    unsigned lost = 0, wrong = 0;
    for (unsigned n = 0; n < 30; n++) {
        int p = present(s, n, 1);
        if (n < committed && p != 1)
            wrong++;
        if (n >= committed && p != 0)
            lost += 0, wrong++;
        lost += n >= committed;
    }
    if (wrong)
        fprintf(stderr, "after a failed batch: %u entries wrong (committed: %u)\n", wrong,
                committed);
    CHECK(wrong == 0);
    printf("failed batch: %u committed entries intact, %u of the failed transaction and after "
           "absent\n", committed, lost);
    /* The failure was counted, once per entry lost. */
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->store_failures > 0);
    kcache_stats_free(st);
    kcache_store_close(s);
}

/* A bundle whose entry in the middle does not match its digest: nothing is merged. */
static void test_import_bad_middle(void)
{
    const char *src_path = test_path("src.db");
    const char *bundle = test_path("middle.kcache");
    const char *dst_path = test_path("dst.db");
    kcache_store *src = st_open(src_path, UINT64_MAX, NULL, NULL);
    static char material[40][32];
    for (unsigned n = 0; n < 40; n++) {
        kcache_entry e;
        make_entry(&e, n, material[n]);
        CHECK_RC(kcache_store_put(src, &e), 0);
    }
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    CHECK_RC(kcache_bundle_export(&r, src, bundle, NULL), 0);
    CHECK(r.entries == 40);
    kcache_store_close(src);
    /* Entry 20's artifact changed under its digests, as a flipped bit would. */
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open(bundle, &db) == SQLITE_OK);
    kcache_key k = st_material_key(material[20], 20);
    sqlite3_stmt *st = NULL;
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE artifact SET data = zeroblob(length(data))"
                               " WHERE id = (SELECT id FROM entry WHERE key = ?1)",
                               -1, &st, NULL) == SQLITE_OK);
    sqlite3_bind_blob(st, 1, k.bytes, KCACHE_KEY_SIZE, SQLITE_STATIC);
    CHECK(sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(db) == 1);
    sqlite3_finalize(st);
    sqlite3_close(db);

    kcache_store *dst = st_open(dst_path, UINT64_MAX, NULL, NULL);
    CHECK_RC(st_put(dst, 7000, ART_MAX, scratch), 0);
    kcache_bundle_result ir = KCACHE_BUNDLE_RESULT_INIT;
    int rc = kcache_bundle_import(&ir, dst, bundle, NULL);
    CHECK(rc == KCACHE_ECORRUPT);
    CHECK(strstr(kcache_store_errmsg(dst), "nothing imported") != NULL);
    CHECK(ir.added == 0 && ir.replaced == 0);
    kcache_stats *stats = NULL;
    CHECK_RC(kcache_store_stats(&stats, dst), 0);
    CHECK(stats && stats->entries == 1);
    kcache_stats_free(stats);
    kcache_store_close(dst);
    check_totals(dst_path, "after a refused import");
}

/* Prunes, filtered and not: the totals stay those of what is left. */
static void test_prune_totals(void)
{
    const char *path = test_path("prune.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    kcache_batch *b = NULL;
    CHECK_RC(kcache_batch_new(&b, s, NULL), 0);
    for (unsigned n = 0; n < 300; n++) {
        kcache_entry e;
        make_entry(&e, n, NULL);
        CHECK_RC(kcache_batch_put(b, &e), 0);
    }
    CHECK_RC(kcache_batch_commit(b), 0);
    kcache_batch_free(b);
    kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
    kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
    o.accessed_before = INT64_MAX;
    o.arch = "sm_80";
    CHECK_RC(kcache_store_prune(&r, s, &o), 0);
    CHECK(r.evicted == 150);
    CHECK(present(s, 2, 0) == 0 && present(s, 3, 1) == 1);
    o = (kcache_prune_options)KCACHE_PRUNE_OPTIONS_INIT;
    o.max_entries = 100;
    CHECK_RC(kcache_store_prune(&r, s, &o), 0);
    CHECK(r.evicted == 50);
    o = (kcache_prune_options)KCACHE_PRUNE_OPTIONS_INIT;
    o.max_size = st_disk(path) / 2;
    CHECK_RC(kcache_store_prune(&r, s, &o), 0);
    CHECK(r.evicted > 0 && st_disk(path) <= o.max_size);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    CHECK(st && st->entries == 100 - r.evicted && st->evictions == 200 + r.evicted);
    kcache_stats_free(st);
    kcache_store_close(s);
    check_totals(path, "after prunes");
    CHECK(st_integrity_ok(path));
}

struct worker {
    kcache_store *s;
    unsigned first;
    int failures;
};

static void *batch_worker(void *arg)
{
    struct worker *w = arg;
    static _Thread_local uint8_t buf[ART_MAX];
    kcache_batch_options o = KCACHE_BATCH_OPTIONS_INIT;
    o.max_entries = 7;
    kcache_batch *b = NULL;
    if (kcache_batch_new(&b, w->s, &o) != 0) {
        w->failures++;
        return NULL;
    }
    for (unsigned n = w->first; n < w->first + 50; n++) {
        kcache_entry e = KCACHE_ENTRY_INIT;
        e.key = st_key(n);
        st_entry_of(&e, n, ART_MAX, buf);
        w->failures += kcache_batch_put(b, &e) != 0;
        /* The store is free between calls: a get from this thread does not wait on the batch. */
        if (n % 10 == 0)
            w->failures += present(w->s, w->first, 0) < 0;
    }
    w->failures += kcache_batch_commit(b) != 0;
    kcache_batch_free(b);
    return NULL;
}

static void test_threads(void)
{
    const char *path = test_path("threads.db");
    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    struct worker w[3] = {{s, 0, 0}, {s, 100, 0}, {s, 200, 0}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        REQUIRE(pthread_create(&t[i], NULL, batch_worker, &w[i]) == 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(w[i].failures == 0);
    }
    for (int i = 0; i < 3; i++)
        for (unsigned n = w[i].first; n < w[i].first + 50; n++)
            CHECK(present(s, n, 1) == 1);
    kcache_store_close(s);
    check_totals(path, "after batches on three threads");
}

int main(void)
{
    test_basic();
    test_failure_in_the_middle();
    test_import_bad_middle();
    test_prune_totals();
    test_threads();
    return test_done();
}
