/*
 * Several processes, each with its own handle on one file under a small cap:
 * reads, writes and evictions at once. No call may fail (busy is waited out,
 * never returned), no read may return other bytes than were put, and the file
 * must be sound and its totals right afterwards.
 */
#include <sys/mman.h>
#include <sys/wait.h>

#include "stress.h"

#define N_PROCS 4
#define N_KEYS 400
#define SIZE_MAX_ART (64 * 1024)
#define OPS_PER_PROC 1500
#define CAP (UINT64_C(3) << 20)

struct result {
    struct st_tally t;
    uint8_t committed[N_KEYS]; /* a put of this key returned 0 */
};

static void fail(struct result *r, unsigned id, kcache_store *s, const char *what, int rc)
{
    r->t.errors++;
    fprintf(stderr, "process %u: %s returned %d: %s\n", id, what, rc, kcache_store_errmsg(s));
}

static void child(const char *path, unsigned id, struct result *r)
{
    kcache_store *s = st_open(path, CAP, NULL, NULL);
    uint8_t *scratch = malloc(SIZE_MAX_ART);
    REQUIRE(scratch);
    char who[32];
    snprintf(who, sizeof(who), "process %u", id);
    uint64_t x = id * 0x9e3779b97f4a7c15u + 3;
    for (int i = 0; i < OPS_PER_PROC; i++) {
        unsigned rnd = st_random(&x);
        unsigned n = rnd % N_KEYS;
        unsigned op = (rnd >> 12) % 1000;
        int rc;
        if (op < 550) {
            if ((rc = st_get_counted(&r->t, s, n, KCACHE_GET_DEFAULT, SIZE_MAX_ART, scratch, who)))
                fail(r, id, s, "get", rc);
        } else if (op < 945) {
            if ((rc = st_put(s, n, SIZE_MAX_ART, scratch))) {
                fail(r, id, s, "put", rc);
            } else {
                r->t.puts++;
                r->committed[n] = 1;
            }
        } else if (op < 948) {
            kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
            kcache_prune_result res = KCACHE_PRUNE_RESULT_INIT;
            o.max_size = CAP / 2;
            if ((rc = kcache_store_prune(&res, s, &o)))
                fail(r, id, s, "prune", rc);
            r->t.prunes++;
            r->t.evicted += res.evicted;
        } else {
            kcache_stats *st = NULL;
            if ((rc = kcache_store_stats(&st, s)))
                fail(r, id, s, "stats", rc);
            kcache_stats_free(st);
        }
    }
    free(scratch);
    kcache_store_close(s);
}

int main(void)
{
    const char *path = test_path("procs.db");
    double t0 = st_now();
    /* Created first, so that the children race on use, not on creation. */
    kcache_store_close(st_open(path, CAP, NULL, NULL));
    struct result *res = mmap(NULL, N_PROCS * sizeof(*res), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(res != MAP_FAILED);
    memset(res, 0, N_PROCS * sizeof(*res));
    pid_t pids[N_PROCS];
    for (unsigned i = 0; i < N_PROCS; i++) {
        pids[i] = fork();
        REQUIRE(pids[i] >= 0);
        if (pids[i] == 0) {
            child(path, i, &res[i]);
            _exit(0);
        }
    }
    struct result all = {0};
    struct st_tally sum = {0};
    for (unsigned i = 0; i < N_PROCS; i++) {
        int status;
        REQUIRE(waitpid(pids[i], &status, 0) == pids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        st_tally_add(&sum, &res[i].t);
        for (unsigned n = 0; n < N_KEYS; n++)
            all.committed[n] |= res[i].committed[n];
    }
    st_tally_print(&sum, "processes", N_PROCS, OPS_PER_PROC, st_now() - t0);
    CHECK(sum.errors == 0);
    CHECK(sum.wrong == 0);
    CHECK(sum.hits > 0 && sum.misses > 0);

    /* Writers idle, every handle closed: the files are under the cap. */
    uint64_t disk = st_disk(path);
    printf("database + WAL after the run: %llu bytes (cap %llu)\n", (unsigned long long)disk,
           (unsigned long long)CAP);
    CHECK(disk <= CAP);
    CHECK(st_integrity_ok(path));

    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t rows = st_sql_int(db, "SELECT count(*) FROM entry");
    int64_t evictions = st_sql_int(db, "SELECT value FROM counter WHERE name = 'evictions'");
    CHECK(rows == st_sql_int(db, "SELECT count(*) FROM artifact"));
    CHECK(st_sql_int(db, "SELECT sum(raw_size) FROM entry") ==
          st_sql_int(db, "SELECT raw_bytes FROM totals"));
    sqlite3_close(db);

    kcache_store *s = st_open(path, CAP, NULL, NULL);
    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, s), 0);
    REQUIRE(st);
    CHECK((int64_t)st->entries == rows);
    CHECK(st->hits == sum.hits && st->misses == sum.misses);
    CHECK(st->corrupt == 0 && st->store_failures == 0);
    CHECK((int64_t)st->evictions == evictions);
    /* Both kinds happened: prunes asked for, and puts passing the cap. */
    CHECK(sum.evicted > 0 && (uint64_t)evictions > sum.evicted);
    kcache_stats_free(st);

    /* Every committed entry is there with its bytes, or was evicted: with no
     * deletes in the mix, each one missing took an eviction. */
    uint8_t *scratch = malloc(SIZE_MAX_ART);
    REQUIRE(scratch);
    int64_t present = 0, missing = 0, committed = 0;
    for (unsigned n = 0; n < N_KEYS; n++) {
        kcache_entry *e = NULL;
        kcache_key k = st_key(n);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH);
        committed += all.committed[n];
        if (rc == 0) {
            present++;
            CHECK(all.committed[n]);
            CHECK(st_entry_ok(e, n, SIZE_MAX_ART, scratch));
        } else {
            CHECK_RC(rc, KCACHE_ENOTFOUND);
            missing += all.committed[n];
        }
        kcache_entry_free(e);
    }
    CHECK(present == rows);
    CHECK(missing <= evictions);
    free(scratch);
    kcache_store_close(s);
    munmap(res, N_PROCS * sizeof(*res));
    printf("%lld keys committed, %lld present and intact, %lld evicted (%lld evictions); "
           "total %.2f s\n",
           (long long)committed, (long long)present, (long long)missing, (long long)evictions,
           st_now() - t0);
    return test_done();
}
