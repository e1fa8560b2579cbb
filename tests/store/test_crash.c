/*
 * Crash safety: writer processes (puts with inputs, hits, bundle imports,
 * prunes, vacuum) are killed with SIGKILL at random moments, again and again,
 * and after every kill the cache is checked as the next user would find it:
 *
 *   - it opens with no manual step: no "damaged" warning, nothing set aside;
 *   - SQLite's integrity_check says ok;
 *   - every entry and input it serves matches its digest and is exactly the
 *     bytes that were put for that key (entries are derived from their keys);
 *   - without a cap: every put a writer reported as committed (it writes the
 *     key into a pipe after kcache_store_put() returned 0, before going on)
 *     is still there. With a cap entries may be evicted, so that run checks
 *     integrity and contents only.
 *
 *   test_crash [KILLS]        (default 30; the long suite passes 1000)
 *
 * Figures go to stdout and, when $KCACHE_TEST_RESULTS names a directory, to
 * crash.tsv (crash-long.tsv for 1000 kills or more) there, for tests/report.py.
 */
#include <fcntl.h>
#include <kcache/bundle.h>
#include <kcache/verify.h>
#include <signal.h>
#include <sys/wait.h>

#include "results.h"
#include "storetest.h"

#define ART_MAX 6000u
#define KEY_SPACE 3000u          /* puts replace: the database stays small */
#define BUNDLE_FIRST 1000000u    /* keys of the bundle the writers import */
#define BUNDLE_N 40u
#define CAP (UINT64_C(3) << 20)

static uint8_t scratch[ART_MAX + 64];

/* ---- entries derived from their key, with inputs ------------------------ */

static const char common_header[] = "// shared by every entry: stored once\n#define N 256\n";

static void source_text(char *buf, size_t size, unsigned n)
{
    snprintf(buf, size, "// entry %u\n#include \"common.h\"\n__global__ void k%u(float *x) "
             "{ x[%u %% N] += %u; }\n", n, n, n, n * 7);
}

/*
 * The key of entry n: the bundle's carry key material and a key made from
 * it, as an import requires; the others a key that says its number.
 */
static kcache_key crash_key(unsigned n, char material[32])
{
    if (n >= BUNDLE_FIRST)
        return st_material_key(material, n);
    material[0] = '\0';
    return st_key(n);
}

/* The number of the entry with key k (collect() lists keys). */
static unsigned crash_number(const kcache_key *k)
{
    char material[32];
    for (unsigned i = 0; i < BUNDLE_N; i++) {
        kcache_key b = st_material_key(material, BUNDLE_FIRST + i);
        if (!memcmp(b.bytes, k->bytes, KCACHE_KEY_SIZE))
            return BUNDLE_FIRST + i;
    }
    return st_key_number(k);
}

static int put_entry(kcache_store *s, unsigned n)
{
    char material[32];
    char src[256];
    source_text(src, sizeof(src), n);
    kcache_input in[2] = {
        {KCACHE_INPUT_SOURCE, "k.cu", src, strlen(src)},
        {KCACHE_INPUT_HEADER, "common.h", common_header, sizeof(common_header) - 1},
    };
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = crash_key(n, material);
    e.key_material = material[0] ? material : NULL;
    e.key_material_size = strlen(material);
    st_entry_of(&e, n, ART_MAX, scratch);
    e.name = "k.cu";
    e.toolchain = "test";
    e.compile_ns = 1000000;
    e.n_inputs = 2;
    e.inputs = in;
    return kcache_store_put(s, &e);
}

/* Whether e (got with KCACHE_GET_INPUTS) is exactly what put_entry(n) stored. */
static int entry_exact(const kcache_entry *e, unsigned n)
{
    if (!st_entry_ok(e, n, ART_MAX, scratch))
        return 0;
    char src[256];
    source_text(src, sizeof(src), n);
    return e->n_inputs == 2 && e->inputs[0].role == KCACHE_INPUT_SOURCE &&
           e->inputs[0].size == strlen(src) && !memcmp(e->inputs[0].data, src, strlen(src)) &&
           e->inputs[1].role == KCACHE_INPUT_HEADER &&
           e->inputs[1].size == sizeof(common_header) - 1 &&
           !memcmp(e->inputs[1].data, common_header, sizeof(common_header) - 1) &&
           !strcmp(e->inputs[0].name, "k.cu") && !strcmp(e->inputs[1].name, "common.h");
}

/* ---- the writer ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void report(int fd, unsigned n)
{
    uint32_t v = n;
    if (write(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
        _exit(3);
}

/*
 * Works until killed. Each key is reported only once kcache says it is
 * committed. Failures other than a busy lock (two writers) end the writer
 * with a status the parent reports.
 */
static void writer(const char *db, const char *bundle, uint64_t cap, uint64_t seed, int fd)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = db;
    o.max_size = cap;
    kcache_store *s = NULL;
    char err[512];
    if (kcache_store_open(&s, &o, err, sizeof(err)) != 0) {
        fprintf(stderr, "writer: open: %s\n", err);
        _exit(4);
    }
    uint64_t x = seed | 1;
    for (;;) {
        unsigned op = (unsigned)(rng_next(&x) % 100);
        int rc = 0;
        if (op < 70) {
            unsigned n = (unsigned)(rng_next(&x) % KEY_SPACE);
            if ((rc = put_entry(s, n)) == 0)
                report(fd, n);
        } else if (op < 85) {
            kcache_entry *e = NULL;
            kcache_key k = st_key((unsigned)(rng_next(&x) % KEY_SPACE));
            rc = kcache_store_get(&e, s, &k, 0);
            kcache_entry_free(e);
            if (rc == KCACHE_ENOTFOUND)
                rc = 0;
        } else if (op < 91) {
            kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
            if ((rc = kcache_bundle_import(&r, s, bundle, NULL)) == 0)
                for (unsigned i = 0; i < BUNDLE_N; i++)
                    report(fd, BUNDLE_FIRST + i);
        } else if (op < 96) {
            kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
            if (cap != UINT64_MAX)
                po.max_size = cap / 2; /* evicts */
            else
                po.accessed_before = 1; /* nothing that old: reclaims space only */
            rc = kcache_store_prune(NULL, s, &po);
        } else if (op < 98) {
            rc = kcache_store_vacuum(s);
        } else {
            rc = kcache_store_flush(s);
        }
        if (rc && rc != KCACHE_EBUSY) {
            fprintf(stderr, "writer: op %u: %s\n", op, kcache_store_errmsg(s));
            _exit(5);
        }
    }
}

/* ---- the checks ---------------------------------------------------------- */

struct log {
    int damaged;
    char last[512];
};

static void log_fn(void *ud, int level, const char *msg)
{
    struct log *l = ud;
    (void)level;
    snprintf(l->last, sizeof(l->last), "%s", msg);
    if (strstr(msg, "damaged") || strstr(msg, "corrupt"))
        l->damaged++;
}

static int collect(void *ud, const kcache_entry *e)
{
    unsigned *list = ud;
    list[list[0] + 1] = crash_number(&e->key);
    list[0]++;
    return 0;
}

struct figures {
    unsigned kills, rounds, writer_errors, open_failures, integrity_failures, damaged_opens;
    unsigned lost, wrong, checked;
    uint64_t committed;
};

/*
 * Everything the store serves must be exact. With `must`, every key marked
 * there must be served too. Returns the number of entries.
 */
static unsigned check_store(const char *db, const unsigned char *must, struct figures *f)
{
    struct log l = {0, ""};
    kcache_store *s = st_open(db, UINT64_MAX, log_fn, &l);
    if (l.damaged) {
        fprintf(stderr, "round %u: open found damage: %s\n", f->rounds, l.last);
        f->damaged_opens++;
    }
    static unsigned list[KEY_SPACE + BUNDLE_N + 2];
    list[0] = 0;
    kcache_filter flt = KCACHE_FILTER_INIT;
    CHECK_RC(kcache_store_list(s, &flt, collect, list), 0);
    unsigned n = list[0];
    for (unsigned i = 0; i < n; i++) {
        unsigned k = list[i + 1];
        char material[32];
        kcache_key key = crash_key(k, material);
        kcache_entry *e = NULL;
        int rc = kcache_store_get(&e, s, &key, KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
        f->checked++;
        if (rc != 0 || !entry_exact(e, k)) {
            fprintf(stderr, "round %u: entry %u: rc %d, %s\n", f->rounds, k, rc,
                    rc ? kcache_store_errmsg(s) : "bytes differ from what was put");
            f->wrong++;
        }
        kcache_entry_free(e);
    }
    if (must) {
        for (unsigned k = 0; k < KEY_SPACE + BUNDLE_N; k++) {
            unsigned n_key = k < KEY_SPACE ? k : BUNDLE_FIRST + (k - KEY_SPACE);
            if (!must[k])
                continue;
            char material[32];
            kcache_key key = crash_key(n_key, material);
            kcache_entry *e = NULL;
            int rc = kcache_store_get(&e, s, &key,
                                      KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
            if (rc != 0) {
                fprintf(stderr, "round %u: committed entry %u is gone (rc %d)\n", f->rounds,
                        n_key, rc);
                f->lost++;
            }
            kcache_entry_free(e);
        }
    }
    kcache_stats *stats = NULL;
    CHECK_RC(kcache_store_stats(&stats, s), 0);
    if (stats && stats->corrupt) {
        fprintf(stderr, "round %u: stats count %llu damaged\n", f->rounds,
                (unsigned long long)stats->corrupt);
        f->wrong++;
    }
    kcache_stats_free(stats);
    kcache_store_close(s);
    if (!st_integrity_ok(db)) {
        fprintf(stderr, "round %u: integrity_check failed\n", f->rounds);
        f->integrity_failures++;
    }
    return n;
}

static int corrupt_files(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "ls '%s' | grep -q corrupt", dir);
    return system(cmd) == 0;
}

static void make_bundle(const char *bundle)
{
    kcache_store *s = st_open(test_path("bundle-src.db"), UINT64_MAX, NULL, NULL);
    for (unsigned i = 0; i < BUNDLE_N; i++)
        REQUIRE(put_entry(s, BUNDLE_FIRST + i) == 0);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    REQUIRE(kcache_bundle_export(&r, s, bundle, NULL) == 0 && r.entries == BUNDLE_N);
    kcache_store_close(s);
}

static void drain(int fd, unsigned char *must, struct figures *f)
{
    uint32_t v;
    ssize_t got;
    while ((got = read(fd, &v, sizeof(v))) == (ssize_t)sizeof(v)) {
        unsigned idx = v >= BUNDLE_FIRST ? KEY_SPACE + (v - BUNDLE_FIRST) : v;
        REQUIRE(idx < KEY_SPACE + BUNDLE_N);
        if (must)
            must[idx] = 1;
        f->committed++;
    }
}

/* Runs `kills` rounds of one or two writers on db, each killed at a random moment. */
static void run(const char *name, unsigned kills, uint64_t cap, uint64_t seed, struct figures *f)
{
    char db[600], bundle[640];
    snprintf(db, sizeof(db), "%s", test_path(name));
    snprintf(bundle, sizeof(bundle), "%s.bundle", db);
    make_bundle(bundle);
    static unsigned char must[KEY_SPACE + BUNDLE_N];
    memset(must, 0, sizeof(must));
    uint64_t x = seed;
    double t0 = st_now();
    while (f->kills < kills) {
        f->rounds++;
        int writers = f->rounds % 3 == 0 ? 2 : 1;
        pid_t pid[2];
        int fds[2];
        for (int w = 0; w < writers; w++) {
            int p[2];
            REQUIRE(pipe(p) == 0);
            uint64_t wseed = rng_next(&x);
            pid[w] = fork();
            REQUIRE(pid[w] >= 0);
            if (pid[w] == 0) {
                close(p[0]);
                writer(db, bundle, cap, wseed, p[1]);
                _exit(0);
            }
            close(p[1]);
            fds[w] = p[0];
        }
        for (int w = 0; w < writers; w++) {
            /* Mostly short: a kill during open and the first commits matters as much. */
            unsigned us = (unsigned)(rng_next(&x) % (rng_next(&x) % 4 ? 30000 : 250000));
            usleep(us);
            kill(pid[w], SIGKILL);
        }
        for (int w = 0; w < writers; w++) {
            int status;
            REQUIRE(waitpid(pid[w], &status, 0) == pid[w]);
            if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
                f->kills++;
            } else {
                fprintf(stderr, "round %u: writer ended by itself (status %d)\n", f->rounds,
                        status);
                f->writer_errors++;
            }
            drain(fds[w], cap == UINT64_MAX ? must : NULL, f);
            close(fds[w]);
        }
        check_store(db, cap == UINT64_MAX ? must : NULL, f);
        if (corrupt_files(test_dir())) {
            fprintf(stderr, "round %u: a file was set aside as damaged\n", f->rounds);
            f->damaged_opens++;
        }
    }
    printf("%s: %u kills in %u rounds (%.1f s), %llu puts reported committed, %u entry reads "
           "checked; lost %u, wrong %u, integrity failures %u, damaged opens %u, writer "
           "errors %u\n",
           name, f->kills, f->rounds, st_now() - t0, (unsigned long long)f->committed,
           f->checked, f->lost, f->wrong, f->integrity_failures, f->damaged_opens,
           f->writer_errors);
}

static void record(const char *name, const struct figures *f)
{
    test_record(name, "kills=%u\trounds=%u\tcommitted=%llu\tchecked=%u\tlost=%u\twrong=%u\t"
                "integrity_failures=%u\tdamaged_opens=%u",
                f->kills, f->rounds, (unsigned long long)f->committed, f->checked, f->lost,
                f->wrong, f->integrity_failures, f->damaged_opens);
}

int main(int argc, char **argv)
{
    unsigned kills = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 30;
    if (kills == 0)
        kills = 30;
    signal(SIGPIPE, SIG_IGN);
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    if (getenv("KCACHE_CRASH_SEED"))
        seed = strtoull(getenv("KCACHE_CRASH_SEED"), NULL, 0);
    printf("seed %llu (KCACHE_CRASH_SEED reruns it)\n", (unsigned long long)seed);
    seed |= 1;

    /* Two thirds of the kills with no cap (nothing committed may go), a third under a cap. */
    struct figures nocap = {0}, capped = {0};
    run("nocap.db", kills - kills / 3, UINT64_MAX, seed, &nocap);
    run("capped.db", kills / 3, CAP, seed * 3, &capped);

    struct figures all = nocap;
    all.kills += capped.kills;
    all.rounds += capped.rounds;
    all.checked += capped.checked;
    all.wrong += capped.wrong;
    all.integrity_failures += capped.integrity_failures;
    all.damaged_opens += capped.damaged_opens;
    all.writer_errors += capped.writer_errors;
    record(kills >= 1000 ? "crash-long" : "crash", &all);

    CHECK(nocap.lost == 0);
    CHECK(all.wrong == 0);
    CHECK(all.integrity_failures == 0);
    CHECK(all.damaged_opens == 0);
    CHECK(all.writer_errors == 0);
    CHECK(nocap.committed > 0);
    return test_done();
}
