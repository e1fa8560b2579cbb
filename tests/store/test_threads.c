/*
 * One store handle shared by many threads doing everything at once: gets,
 * puts, deletes, prunes, stats and lists. No call may fail, no get may hand
 * out bytes other than those put, and the file must be sound afterwards.
 */
#include <pthread.h>

#include "stress.h"

#define N_THREADS 8
#define N_KEYS 300
#define SIZE_MAX_ART (48 * 1024)
#define OPS_PER_THREAD 1500

static kcache_store *shared;

struct worker {
    unsigned id;
    struct st_tally t;
};

static int count_entry(void *ud, const kcache_entry *e)
{
    unsigned *n = ud;
    if (e->size != st_size(st_key_number(&e->key), SIZE_MAX_ART))
        return -1000; /* metadata not matching what was put: a wrong entry */
    (*n)++;
    return 0;
}

static void fail(struct worker *w, const char *what, int rc)
{
    w->t.errors++;
    fprintf(stderr, "thread %u: %s returned %d: %s\n", w->id, what, rc,
            kcache_store_errmsg(shared));
}

static void *work(void *arg)
{
    struct worker *w = arg;
    uint8_t *scratch = malloc(SIZE_MAX_ART);
    REQUIRE(scratch);
    char who[32];
    snprintf(who, sizeof(who), "thread %u", w->id);
    uint64_t x = w->id * 0x9e3779b97f4a7c15u + 7;
    for (int i = 0; i < OPS_PER_THREAD; i++) {
        unsigned r = st_random(&x);
        unsigned n = r % N_KEYS;
        unsigned op = (r >> 12) % 100;
        int rc;
        if (op < 50) {
            unsigned flags = op < 5 ? KCACHE_GET_NO_DATA : KCACHE_GET_DEFAULT;
            if ((rc = st_get_counted(&w->t, shared, n, flags, SIZE_MAX_ART, scratch, who)))
                fail(w, "get", rc);
        } else if (op < 80) {
            if ((rc = st_put(shared, n, SIZE_MAX_ART, scratch)))
                fail(w, "put", rc);
            else
                w->t.puts++;
        } else if (op < 84) {
            kcache_key k = st_key(n);
            rc = kcache_store_delete(shared, &k);
            if (rc && rc != KCACHE_ENOTFOUND)
                fail(w, "delete", rc);
        } else if (op < 88) {
            kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
            kcache_prune_result res = KCACHE_PRUNE_RESULT_INIT;
            if (op % 2)
                o.max_size = (uint64_t)(1 + r % 3) << 20;
            else
                o.max_entries = 50 + r % 100;
            if ((rc = kcache_store_prune(&res, shared, &o)))
                fail(w, "prune", rc);
            w->t.prunes++;
            w->t.evicted += res.evicted;
        } else if (op < 94) {
            kcache_stats *st = NULL;
            if ((rc = kcache_store_stats(&st, shared)))
                fail(w, "stats", rc);
            else if (st->entries > N_KEYS)
                fail(w, "stats (more entries than keys)", 0);
            kcache_stats_free(st);
        } else {
            unsigned seen = 0;
            kcache_filter f = KCACHE_FILTER_INIT;
            f.sort = (kcache_sort)(r % 5);
            f.arch = r % 2 ? "sm_90" : NULL;
            if ((rc = kcache_store_list(shared, &f, count_entry, &seen)))
                fail(w, "list", rc);
        }
    }
    free(scratch);
    return NULL;
}

int main(void)
{
    const char *path = test_path("threads.db");
    double t0 = st_now();
    /* No cap of its own: the prunes in the mix do the evicting. */
    shared = st_open(path, UINT64_MAX, NULL, NULL);
    pthread_t th[N_THREADS];
    struct worker w[N_THREADS];
    for (unsigned i = 0; i < N_THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].id = i;
        REQUIRE(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    struct st_tally sum = {0};
    for (unsigned i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        st_tally_add(&sum, &w[i].t);
    }
    st_tally_print(&sum, "threads", N_THREADS, OPS_PER_THREAD, st_now() - t0);
    CHECK(sum.errors == 0);
    CHECK(sum.wrong == 0);
    /* The mix did what it is meant to: hits, misses and evictions all happened. */
    CHECK(sum.hits > 0 && sum.misses > 0 && sum.puts > 0 && sum.evicted > 0);

    kcache_stats *st = NULL;
    CHECK_RC(kcache_store_stats(&st, shared), 0);
    REQUIRE(st);
    CHECK(st->hits == sum.hits);
    CHECK(st->misses == sum.misses);
    if (st->corrupt || st->store_failures)
        fprintf(stderr, "corrupt %llu, store_failures %llu\n", (unsigned long long)st->corrupt,
                (unsigned long long)st->store_failures);
    CHECK(st->corrupt == 0 && st->store_failures == 0);
    kcache_stats_free(st);
    kcache_store_close(shared);

    /* Afterwards: sound file, every entry still there byte-identical. */
    CHECK(st_integrity_ok(path));
    sqlite3 *db = NULL;
    REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    int64_t rows = st_sql_int(db, "SELECT count(*) FROM entry");
    CHECK(rows == st_sql_int(db, "SELECT entries FROM totals"));
    CHECK(rows == st_sql_int(db, "SELECT count(*) FROM artifact"));
    CHECK(st_sql_int(db, "SELECT sum(raw_size) FROM entry") ==
          st_sql_int(db, "SELECT raw_bytes FROM totals"));
    sqlite3_close(db);

    kcache_store *s = st_open(path, UINT64_MAX, NULL, NULL);
    uint8_t *scratch = malloc(SIZE_MAX_ART);
    REQUIRE(scratch);
    int64_t present = 0;
    for (unsigned n = 0; n < N_KEYS; n++) {
        kcache_entry *e = NULL;
        kcache_key k = st_key(n);
        int rc = kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH);
        if (rc == 0) {
            present++;
            CHECK(st_entry_ok(e, n, SIZE_MAX_ART, scratch));
        } else {
            CHECK_RC(rc, KCACHE_ENOTFOUND);
            if (strstr(kcache_store_errmsg(s), "damaged"))
                fprintf(stderr, "entry %u: %s\n", n, kcache_store_errmsg(s));
        }
        kcache_entry_free(e);
    }
    if (present != rows)
        fprintf(stderr, "%lld entries readable, %lld rows\n", (long long)present, (long long)rows);
    CHECK(present == rows);
    free(scratch);
    kcache_store_close(s);
    printf("%lld entries checked byte for byte; total %.2f s\n", (long long)present,
           st_now() - t0);
    return test_done();
}
