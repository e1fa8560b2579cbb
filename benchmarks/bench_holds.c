/*
 * How long each maintenance verb holds the cache's write lock, on a large cache.
 *
 *   bench_holds DIR PROFILE_WRITES [N [POOL.cubin...]]
 *
 * Fills DIR/holds.db with N entries (default 5000) through `profile_writes
 * DB batch N 64` (sizes log-normal around 40 KiB, CUBIN-like bytes), then
 * runs export, recompress (to zstd), prune (to half), vacuum (after deleting
 * a third of the entries one by one), clear and import (the export's
 * bundle) in turn. While each runs, a probe thread on a connection of its
 * own takes the write lock (BEGIN IMMEDIATE; COMMIT) every millisecond,
 * retrying every 100 us while it is held: its longest wait bounds the
 * verb's longest hold from below within about a millisecond. A user's
 * command waits that long for the lock. Clocks, so the machine's load shows:
 * run it on a quiet machine, or read the figures as upper bounds.
 */
#include <kcache/bundle.h>
#include <kcache/store.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile_common.h"

/* The holds of the main thread's write transactions on the cache, for the verb running. */
static pthread_t main_thread;
static const char *cache_path;
static double hold_wall0, hold_cpu0, hold_wall_max, hold_cpu_max;
static unsigned holds;

static double cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* SQLite's profile callback: a statement has finished. */
static int on_statement(unsigned type, void *ctx, void *p, void *x)
{
    (void)ctx;
    (void)x;
    sqlite3 *db = sqlite3_db_handle(p);
    const char *f = sqlite3_db_filename(db, "main");
    const char *sql = sqlite3_sql(p);
    if (type != SQLITE_TRACE_PROFILE || !pthread_equal(pthread_self(), main_thread) || !f ||
        !cache_path || !strstr(f, cache_path) || !sql)
        return 0;
    if (!strcmp(sql, "BEGIN IMMEDIATE")) {
        hold_wall0 = now_us();
        hold_cpu0 = cpu_us();
    } else if (hold_wall0 && (!strcmp(sql, "COMMIT") || !strcmp(sql, "ROLLBACK"))) {
        double wall = now_us() - hold_wall0, cpu = cpu_us() - hold_cpu0;
        hold_wall_max = wall > hold_wall_max ? wall : hold_wall_max;
        hold_cpu_max = cpu > hold_cpu_max ? cpu : hold_cpu_max;
        holds++;
        hold_wall0 = 0;
    }
    return 0;
}

/* Every connection of this process, the library's included, reports its statements. */
static int watch_connection(sqlite3 *db, const char **err, const void *api)
{
    (void)err;
    (void)api;
    sqlite3_trace_v2(db, SQLITE_TRACE_PROFILE, on_statement, NULL);
    return SQLITE_OK;
}

struct probe {
    const char *path;
    atomic_int stop;
    double longest_us;
    unsigned takes;
    int failed;
};

static int retry(void *ud, int n)
{
    (void)ud;
    (void)n;
    usleep(100);
    return 1;
}

static void *probe_run(void *arg)
{
    struct probe *p = arg;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(p->path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        p->failed = 1;
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_handler(db, retry, NULL);
    while (!atomic_load(&p->stop)) {
        double t0 = now_us();
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
            p->failed = 1;
            break;
        }
        double waited = now_us() - t0;
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        if (waited > p->longest_us)
            p->longest_us = waited;
        p->takes++;
        usleep(1000);
    }
    sqlite3_close(db);
    return NULL;
}

enum verb { EXPORT, RECOMPRESS, PRUNE, VACUUM, CLEAR, IMPORT };
static const char *const verb_names[] = {"export", "recompress", "prune", "vacuum", "clear",
                                         "import"};

static int delete_every_third(kcache_store *s)
{
    kcache_filter f = KCACHE_FILTER_INIT;
    kcache_key *keys = NULL;
    size_t n = 0;
    int rc = kcache_store_list_keys(&keys, &n, s, &f);
    for (size_t i = 0; !rc && i < n; i += 3)
        rc = kcache_store_delete(s, &keys[i]);
    kcache_keys_free(keys);
    return rc;
}

static int run_verb(enum verb v, kcache_store *s, const char *bundle)
{
    kcache_bundle_result br = KCACHE_BUNDLE_RESULT_INIT;
    switch (v) {
    case EXPORT:
        return kcache_bundle_export(&br, s, bundle, NULL);
    case RECOMPRESS: {
        kcache_recompress_result r = KCACHE_RECOMPRESS_RESULT_INIT;
        return kcache_store_recompress(&r, s, NULL);
    }
    case PRUNE: {
        kcache_stats *st = NULL;
        int rc = kcache_store_stats(&st, s);
        kcache_prune_options o = KCACHE_PRUNE_OPTIONS_INIT;
        o.max_size = rc ? 0 : (st->file_bytes + st->wal_bytes) / 2;
        kcache_stats_free(st);
        kcache_prune_result r = KCACHE_PRUNE_RESULT_INIT;
        return rc ? rc : kcache_store_prune(&r, s, &o);
    }
    case VACUUM:
        return kcache_store_vacuum(s);
    case CLEAR:
        return kcache_store_clear(s);
    case IMPORT:
        return kcache_bundle_import(&br, s, bundle, NULL);
    }
    return 0;
}

static int fill(const char *profile_writes, const char *db, const char *n, char **pool, int n_pool)
{
    char *argv[64] = {(char *)profile_writes, (char *)db, "batch", (char *)n, "64"};
    int argc = 5;
    for (int i = 0; i < n_pool && argc < 63; i++)
        argv[argc++] = pool[i];
    pid_t pid = fork();
    if (pid == 0) {
        execv(profile_writes, argv);
        _exit(127);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                   WEXITSTATUS(status) == 0
               ? 0
               : -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_holds DIR PROFILE_WRITES [N [POOL.cubin...]]\n");
        return 2;
    }
    char db[4096], bundle[4096];
    snprintf(db, sizeof(db), "%s/holds.db", argv[1]);
    snprintf(bundle, sizeof(bundle), "%s/holds.bundle", argv[1]);
    unlink(db);
    unlink(bundle);
    const char *n = argc > 3 ? argv[3] : "5000";
    if (fill(argv[2], db, n, argv + 4, argc > 4 ? argc - 4 : 0)) {
        fprintf(stderr, "bench_holds: filling %s with %s entries failed\n", db, n);
        return 1;
    }
    main_thread = pthread_self();
    cache_path = db;
    sqlite3_auto_extension((void (*)(void))watch_connection);
    printf("%-11s %9s %6s %14s %13s %15s\n", "verb", "took ms", "holds", "longest hold ms",
           "(its CPU ms)", "probe wait ms");
    int rc = 0;
    for (enum verb v = EXPORT; v <= IMPORT && !rc; v++) {
        kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
        o.path = db;
        o.max_size = UINT64_MAX;
        o.compression = v == RECOMPRESS ? "zstd" : NULL;
        kcache_store *s = NULL;
        char err[256];
        if ((rc = kcache_store_open(&s, &o, err, sizeof(err)))) {
            fprintf(stderr, "bench_holds: %s\n", err);
            break;
        }
        if (v == VACUUM && (rc = delete_every_third(s)))
            fprintf(stderr, "bench_holds: deleting: %s\n", kcache_store_errmsg(s));
        struct probe p = {.path = db};
        pthread_t t;
        pthread_create(&t, NULL, probe_run, &p);
        usleep(20000);
        hold_wall_max = hold_cpu_max = 0;
        holds = 0;
        double t0 = now_us();
        if (!rc && (rc = run_verb(v, s, bundle)))
            fprintf(stderr, "bench_holds: %s: %s\n", verb_names[v], kcache_store_errmsg(s));
        double took = now_us() - t0;
        usleep(20000);
        atomic_store(&p.stop, 1);
        pthread_join(t, NULL);
        kcache_store_close(s);
        if (p.failed)
            fprintf(stderr, "bench_holds: the probe could not take the write lock\n");
        printf("%-11s %9.1f %6u %14.1f %13.1f %15.1f\n", verb_names[v], took / 1e3, holds,
               hold_wall_max / 1e3, hold_cpu_max / 1e3, p.longest_us / 1e3);
        fflush(stdout);
        rc = rc || p.failed;
    }
    unlink(bundle);
    return rc ? 1 : 0;
}
