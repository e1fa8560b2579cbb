/*
 * A cache others use at the same time: entries removed by another handle
 * while verify and export run are no damage; another host's lease does not
 * wedge this one (a heartbeat in the future is taken at once, a live one is
 * waited for, said once, and taken after KCACHE_OTHER_HOST_WAIT); four
 * processes storing into a full disk have each failure counted; a put gets
 * in between another process's back-to-back 40 ms holds within 1 s; a clear
 * lets other writers in while it runs.
 *
 *   test_shared_use                 every case
 *   test_shared_use NAME ...        only these cases (names below)
 */
#include <kcache/bundle.h>
#include <kcache/verify.h>
#include <sys/mount.h>
#include <time.h>

#include "casetest.h"

/* ---- entries removed by another process during export and verify --------------------- */

struct remover {
    kcache_store *other;
    kcache_key *keys;
    size_t n;
};

static void remove_next(void *ud, const char *phase, uint64_t done, uint64_t total)
{
    struct remover *r = ud;
    (void)total;
    if (strcmp(phase, "verifying") && strcmp(phase, "exporting"))
        return;
    if (done + 1 < r->n && done % 2 == 0)
        kcache_store_delete(r->other, &r->keys[done + 1]);
}

static int list_keys_cb(void *ud, const kcache_entry *e)
{
    struct remover *r = ud;
    r->keys[r->n++] = e->key;
    return 0;
}

static void case_deleted_during_maintenance(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    for (int pass = 0; pass < 2; pass++) {
        kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
        kcache_store *other = st_open(db, UINT64_MAX, NULL, NULL);
        for (unsigned i = 0; i < 20; i++)
            REQUIRE(put_real(s, i, NULL, NULL) == 0);
        static kcache_key keys[64];
        struct remover r = {other, keys, 0};
        kcache_filter f = KCACHE_FILTER_INIT;
        f.sort = KCACHE_SORT_CREATED;
        REQUIRE(kcache_store_list(s, &f, list_keys_cb, &r) == 0);
        if (pass == 0) {
            kcache_verify_result vr = KCACHE_VERIFY_RESULT_INIT;
            int rc = kcache_store_verify(&vr, s, remove_next, NULL, &r);
            EXPECT(rc == 0 && vr.damaged == 0, "verify: %d, %llu damaged", rc,
                   (unsigned long long)vr.damaged);
        } else {
            kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
            o.progress = remove_next;
            o.progress_userdata = &r;
            kcache_bundle_result br = KCACHE_BUNDLE_RESULT_INIT;
            int rc = kcache_bundle_export(&br, s, in_case(tc, "out.kcache"), &o);
            EXPECT(rc == 0 && br.damaged == 0, "export: %d, %llu damaged", rc,
                   (unsigned long long)br.damaged);
        }
        kcache_store_clear(s);
        kcache_store_close(other);
        kcache_store_close(s);
    }
}

/* ---- another host's leases ----------------------------------------------------------- */

struct said {
    int n;
    char last[512];
};

static void log_said(void *ud, int level, const char *msg)
{
    struct said *w = ud;
    (void)level;
    if (strstr(msg, "waiting for host"))
        w->n++;
    snprintf(w->last, sizeof(w->last), "%s", msg);
}

static void case_other_host_leases(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    kcache_store_close(s);
    kcache_key k = key_of(13);
    char hex[KCACHE_KEY_HEX_SIZE], sql[512];
    kcache_key_hex(hex, &k);
    /* Another host's lease, its heartbeat a year ahead. */
    snprintf(sql, sizeof(sql), "INSERT INTO lease VALUES (x'%s', 1, 'another-host', %lld)", hex,
             (long long)time(NULL) * 1000 + 365LL * 86400 * 1000);
    st_sql(db, sql);
    s = st_open(db, UINT64_MAX, NULL, NULL);
    int acquired = 0;
    int rc = kc_store_lease_acquire(&acquired, s, &k, 15000);
    EXPECT(rc == 0 && acquired, "a lease with a heartbeat in the future held: %d %d", rc, acquired);
    kcache_store_close(s);

    /* Another host's live lease: waited for, said at once, given up after the bound. */
    kcache_key k2 = key_of(113);
    kcache_key_hex(hex, &k2);
    snprintf(sql, sizeof(sql), "INSERT INTO lease VALUES (x'%s', 1, 'another-host', %lld)", hex,
             (long long)time(NULL) * 1000);
    st_sql(db, sql);
    setenv("KCACHE_OTHER_HOST_WAIT", "300", 1);
    struct said said = {0, ""};
    s = st_open(db, UINT64_MAX, log_said, &said);
    rc = kc_store_lease_acquire(&acquired, s, &k2, 15000);
    EXPECT(rc == 0 && !acquired, "another host's live lease taken at once");
    EXPECT(said.n == 1 && strstr(said.last, "another-host"), "the wait was not said: %s",
           said.last);
    usleep(400000);
    rc = kc_store_lease_acquire(&acquired, s, &k2, 15000);
    EXPECT(rc == 0 && acquired, "another host's lease held past KCACHE_OTHER_HOST_WAIT");
    kcache_store_close(s);
    unsetenv("KCACHE_OTHER_HOST_WAIT");
}

/* ---- disk full while storing: counted ------------------------------------------------ */

static void case_disk_full_counted(int tc)
{
    /* A real full disk (a tmpfs), where even the count has to find room. */
    const char *full_mnt = in_case(tc, "small");
    if (geteuid() != 0 || test_tmpfs_mount(full_mnt) != 0) {
        printf("disk-full-counted: cannot mount a tmpfs here (needs root): skipped\n");
        cases_skipped++;
        return;
    }
    char db[800], fill[800];
    snprintf(db, sizeof(db), "%s/kcache.db", test_tmpfs_dir);
    snprintf(fill, sizeof(fill), "%s/fill", test_tmpfs_dir);
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    REQUIRE(put_real(s, 1, NULL, NULL) == 0);
    kcache_store_close(s);
    /* Everything but ~100 KiB taken. */
    test_sh("dd if=/dev/zero of='%s' bs=4096 count=$(( $(stat -f -c %%a '%s') - 25 )) "
            "2>/dev/null",
            fill, test_tmpfs_dir);
    unsigned failed = 0;
    for (unsigned p = 0; p < 4; p++) {
        if (have_exe()) {
            /* As users met it: four compiles, each warning that it could not store. */
            char src[800], body[8000] = "";
            snprintf(src, sizeof(src), "%s", in_case(tc, "k.cu"));
            for (int j = 1; j < 300; j++) {
                size_t n = strlen(body);
                snprintf(body + n, sizeof(body) - n, "p[%d]=p[%d]*%u.0f+1;", j, j + 1, p + 1);
            }
            FILE *f = fopen(src, "w");
            REQUIRE(f);
            fprintf(f, "__global__ void k%u(float *p) { %s }\n", p, body);
            fclose(f);
            struct cli_out o;
            run_kcache(&o, db, NULL, 60,
                       ARGS("compile", src, "--arch", "sm_90", "-o", in_case(tc, "k.cubin")));
            if (o.rc == 0 && strstr(o.err, "not cached")) {
                failed++;
                continue;
            }
            if (o.rc == 0 && !strstr(o.err, "not cached"))
                continue; /* it fitted */
            /* No toolkit here: the library's puts instead. */
        }
        fflush(stdout);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            /* Each a process of its own, as four compiles would be. */
            kcache_store *t = st_open(db, UINT64_MAX, NULL, NULL);
            kcache_entry e = KCACHE_ENTRY_INIT;
            static uint8_t big[512 << 10];
            uint64_t x = 88172645463325252u + p; /* incompressible */
            for (size_t i = 0; i < sizeof(big); i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                big[i] = (uint8_t)(x >> 24);
            }
            e.key = st_key(900 + p);
            e.kind = KCACHE_KIND_CUBIN;
            e.arch = "sm_90";
            e.data = big;
            e.size = sizeof(big);
            /* What a compile records: a hit elsewhere, its miss, then the put. */
            kcache_entry *hit = NULL;
            kcache_key k1 = key_of(1);
            kcache_store_get(&hit, t, &k1, 0);
            kcache_entry_free(hit);
            kc_store_count_miss(t, "sm_90", KCACHE_KIND_CUBIN);
            int rc = kcache_store_put(t, &e);
            kcache_store_close(t);
            _exit(rc == KCACHE_EFULL ? 0 : 1);
        }
        int status;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        failed += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    EXPECT(failed >= 3, "only %u of 4 stores failed as disk full", failed);
    unlink(fill);
    s = st_open(db, UINT64_MAX, NULL, NULL);
    kcache_stats *st = NULL;
    REQUIRE(kcache_store_stats(&st, s) == 0);
    EXPECT(st->store_failures == failed, "store failures: %llu after %u disk-full stores",
           (unsigned long long)st->store_failures, failed);
    kcache_stats_free(st);
    kcache_store_close(s);
    test_tmpfs_unmount();
}

/* ---- a writer between other writers' back-to-back holds ------------------------------ */

/*
 * Another process writes in a loop, each transaction holding the write lock
 * 40 ms with half a millisecond between them (as 16 processes sharing a
 * cache did): no hold is near the busy timeout, so every put must get in
 * within it (here 1 s). SQLite's own busy timeout slept up to 100 ms between
 * tries, woke almost always inside a hold, and failed ("stayed locked"):
 * a put failed 5 s after it began on a busy cache whose longest hold was
 * half a second.
 */
static void case_between_holds(int tc)
{
    const char *db = in_case(tc, "kcache.db");
    kcache_store_close(st_open(db, UINT64_MAX, NULL, NULL));
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        sqlite3 *raw = NULL;
        if (sqlite3_open(db, &raw) != SQLITE_OK)
            _exit(1);
        sqlite3_busy_timeout(raw, 60000);
        for (;;) {
            sqlite3_exec(raw, "BEGIN IMMEDIATE; INSERT OR REPLACE INTO counter VALUES('hog', 1)",
                         NULL, NULL, NULL);
            usleep(40000);
            sqlite3_exec(raw, "COMMIT", NULL, NULL, NULL);
            usleep(500);
        }
    }
    usleep(200000); /* the loop under way */
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = db;
    o.max_size = UINT64_MAX;
    o.busy_timeout_ms = 1000;
    kcache_store *s = st_open_with(&o);
    unsigned failed = 0;
    char first[512] = "";
    double worst = 0;
    for (unsigned i = 0; i < 10; i++) {
        double t0 = st_now();
        if (put_real(s, 300 + i, NULL, NULL) != 0 && failed++ == 0)
            snprintf(first, sizeof(first), "%s", kcache_store_errmsg(s));
        worst = KC_MAX(worst, st_now() - t0);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    kcache_store_close(s);
    printf("between-holds: %u of 10 puts failed, the slowest took %.0f ms\n", failed,
           worst * 1000);
    EXPECT(failed == 0, "%u of 10 puts failed between 40 ms holds: %s", failed, first);
}

/*
 * A clear lets other writers in while it runs: 1,500 entries cleared in
 * steps, not one transaction that holds the write lock for as long as the
 * whole cache takes to delete, whatever its size. Another handle (busy
 * timeout 1 s) puts an entry at a time meanwhile: each put must succeed,
 * and at least one must commit while the clear is half done (the clear's
 * entries were fewer before the put and some still there after it: a clear
 * in one transaction leaves none once any are gone). The books balance
 * after, what the writer put after the clear began may stay.
 */
static void case_clear_lets_writers_in(int tc)
{
    enum { N = 1500 };
    const char *db = in_case(tc, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < N; i++)
        REQUIRE(put_real(s, i, NULL, NULL) == 0);
    kcache_store_close(s);
    const char *count_sql = "SELECT count(*) FROM entry WHERE arch = 'sm_90'";
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        kcache_store *c = st_open(db, UINT64_MAX, NULL, NULL);
        _exit(kcache_store_clear(c) == 0 ? 0 : 1);
    }
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = db;
    o.max_size = UINT64_MAX;
    o.busy_timeout_ms = 1000;
    kcache_store *w = st_open_with(&o);
    sqlite3 *look = NULL;
    REQUIRE(sqlite3_open_v2(db, &look, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    unsigned puts = 0, failed = 0, inside = 0;
    char first[512] = "";
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        int64_t before = st_sql_int(look, count_sql);
        if (put_real(w, 100000 + puts++, "sm_80", NULL) != 0 && failed++ == 0)
            snprintf(first, sizeof(first), "%s", kcache_store_errmsg(w));
        if (before < N && st_sql_int(look, count_sql) > 0)
            inside++;
    }
    sqlite3_close(look);
    kcache_store_close(w);
    printf("clear-lets-writers-in: %u puts while the clear ran, %u failed, %u inside it\n", puts,
           failed, inside);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the clear failed");
    EXPECT(failed == 0, "%u of %u puts failed while a clear ran: %s", failed, puts, first);
    EXPECT(inside > 0, "no put got in while the clear was half done (%u puts): the clear held "
           "the write lock throughout", puts);
    EXPECT(st_path_int(db, count_sql) == 0, "entries of before the clear are left");
    st_check_books(db, "a clear with a writer");
}

static const struct test_case cases[] = {
    {"deleted-during-maintenance", case_deleted_during_maintenance},
    {"other-host-leases", case_other_host_leases},
    {"disk-full-counted", case_disk_full_counted},
    {"between-holds", case_between_holds},
    {"clear-lets-writers-in", case_clear_lets_writers_in},
};

int main(int argc, char **argv)
{
    return run_cases(argc, argv, cases, KC_ARRAY_SIZE(cases), "shared-use");
}
