/*
 * Store benchmarks: hit latency against a page-cache + zstd floor,
 * stored size of the corpus CUBINs, puts per second, read throughput with
 * several processes, prune time against cache size, stats time.
 *
 * Uses only the public API, plus zstd and SQLite directly for the floor and
 * for looking inside a database it wrote. See benchmarks/README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>
#include <zstd.h>

#include <kcache/store.h>

#include "bench_artifacts.h"
#include "compare/cmp_util.h"



static struct bench_opt {
    int quick;
    int no_touch;
    const char *json_path;
    const char *workdir;
    const char *corpus;
    const char *nvcc;
    const char *tiled_wrapper;
    const char *kcache_exe;
} opt;


static kcache_key make_key(uint64_t domain, uint64_t n)
{
    kcache_key k;
    cmp_fill_random(k.bytes, sizeof(k.bytes), domain * UINT64_C(1000003) + n);
    return k;
}

static void remove_db(const char *path)
{
    char buf[4096];
    unlink(path);
    snprintf(buf, sizeof(buf), "%s-wal", path);
    unlink(buf);
    snprintf(buf, sizeof(buf), "%s-shm", path);
    unlink(buf);
}

/*
 * Checkpoints a closed database's WAL into the file and truncates it, through
 * a plain SQLite connection: the store may keep its WAL across a close.
 * Returns database + WAL on disk before the checkpoint.
 */
static uint64_t checkpoint_db(const char *path)
{
    char wal[4200];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    uint64_t before = cmp_file_size(path) + cmp_file_size(wal);
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) != SQLITE_OK)
        cmp_fail("checkpointing %s: %s", path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return before;
}

static char *db_path(const char *name)
{
    char *p = cmp_xmalloc(strlen(opt.workdir) + strlen(name) + 32);
    sprintf(p, "%s/bench-%ld-%s.db", opt.workdir, (long)getpid(), name);
    remove_db(p);
    return p;
}

static kcache_store *open_store(const char *path)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = UINT64_MAX; /* each benchmark decides what is evicted */
    kcache_store *s = NULL;
    char err[512];
    int rc = kcache_store_open(&s, &o, err, sizeof(err));
    if (rc)
        cmp_fail("opening %s: %s", path, err);
    return s;
}

static void put_or_die(kcache_store *s, const kcache_key *key, const void *data, size_t n,
                       const char *arch, kcache_kind kind)
{
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = *key;
    e.kind = kind;
    e.arch = arch;
    e.name = "bench.cu";
    e.toolchain = "bench";
    e.data = data;
    e.size = n;
    e.compile_ns = 1000000;
    int rc = kcache_store_put(s, &e);
    if (rc)
        cmp_fail("put: %s", kcache_store_errmsg(s));
}

/* ---- results ---------------------------------------------------------- */

enum goal_dir { GOAL_NONE, GOAL_AT_MOST, GOAL_AT_LEAST };

struct row {
    char bench[24];
    char label[48];
    double value;
    char unit[12];
    double ref; /* NAN: none */
    double ratio; /* NAN: none */
    double goal;
    enum goal_dir dir;
    char note[256];
};

static struct row rows[64];
static size_t n_rows;
static char notes[16][256];
static size_t n_notes;

static struct row *add_row(const char *bench, const char *label, double value, const char *unit)
{
    if (n_rows == sizeof(rows) / sizeof(rows[0]))
        cmp_fail("too many result rows");
    struct row *r = &rows[n_rows++];
    memset(r, 0, sizeof(*r));
    snprintf(r->bench, sizeof(r->bench), "%s", bench);
    snprintf(r->label, sizeof(r->label), "%s", label);
    snprintf(r->unit, sizeof(r->unit), "%s", unit);
    r->value = value;
    r->ref = NAN;
    r->ratio = NAN;
    r->goal = NAN;
    return r;
}

__attribute__((format(printf, 1, 2))) static void add_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (n_notes < sizeof(notes) / sizeof(notes[0]))
        vsnprintf(notes[n_notes++], sizeof(notes[0]), fmt, ap);
    va_end(ap);
}

static const char *row_status(const struct row *r)
{
    if (r->dir == GOAL_NONE || isnan(r->ratio))
        return "";
    int ok = r->dir == GOAL_AT_MOST ? r->ratio <= r->goal : r->ratio >= r->goal;
    return ok ? "ok" : "MISS";
}

static void fmt_num(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "-");
    else if (v != 0 && fabs(v) < 10)
        snprintf(buf, n, "%.3g", v);
    else
        snprintf(buf, n, "%.0f", v);
}

static void print_table(void)
{
    printf("\n%-12s %-34s %12s %-6s %12s %8s %7s %s\n", "benchmark", "case", "value", "unit",
           "reference", "ratio", "goal", "");
    for (size_t i = 0; i < n_rows; i++) {
        const struct row *r = &rows[i];
        char v[32], ref[32], ratio[32], goal[32] = "";
        fmt_num(v, sizeof(v), r->value);
        fmt_num(ref, sizeof(ref), r->ref);
        if (isnan(r->ratio))
            snprintf(ratio, sizeof(ratio), "-");
        else
            snprintf(ratio, sizeof(ratio), "%.2fx", r->ratio);
        if (r->dir != GOAL_NONE)
            snprintf(goal, sizeof(goal), "%s%.3gx", r->dir == GOAL_AT_MOST ? "<=" : ">=", r->goal);
        printf("%-12s %-34s %12s %-6s %12s %8s %7s %s\n", r->bench, r->label, v, r->unit, ref,
               ratio, goal, row_status(r));
        if (r->note[0])
            printf("%-12s   %s\n", "", r->note);
    }
    for (size_t i = 0; i < n_notes; i++)
        printf("note: %s\n", notes[i]);
}

static void json_num(FILE *f, double v)
{
    if (isnan(v) || isinf(v))
        fputs("null", f);
    else
        fprintf(f, "%.6g", v);
}

static void cpu_model(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "model name", 10)) {
            const char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ')
                    c++;
                snprintf(buf, n, "%.*s", (int)strcspn(c, "\n"), c);
            }
            break;
        }
    }
    fclose(f);
}

static void write_json(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        cmp_fail("cannot write %s: %s", path, strerror(errno));
    char model[256];
    cpu_model(model, sizeof(model));
    fprintf(f, "{\n  \"benchmark\": \"bench_store\",\n  \"kcache_version\": ");
    cmp_json_string(f, kcache_version());
    fprintf(f, ",\n  \"mode\": \"%s\",\n  \"machine\": {\"cpus\": %ld, \"cpu_model\": ",
            opt.quick ? "quick" : "full", sysconf(_SC_NPROCESSORS_ONLN));
    cmp_json_string(f, model);
    fprintf(f, ", \"time\": %lld},\n  \"rows\": [\n", (long long)time(NULL));
    for (size_t i = 0; i < n_rows; i++) {
        const struct row *r = &rows[i];
        fputs("    {\"bench\": ", f);
        cmp_json_string(f, r->bench);
        fputs(", \"case\": ", f);
        cmp_json_string(f, r->label);
        fputs(", \"value\": ", f);
        json_num(f, r->value);
        fputs(", \"unit\": ", f);
        cmp_json_string(f, r->unit);
        fputs(", \"reference\": ", f);
        json_num(f, r->ref);
        fputs(", \"ratio\": ", f);
        json_num(f, r->ratio);
        fputs(", \"goal\": ", f);
        if (r->dir == GOAL_NONE) {
            fputs("null", f);
        } else {
            fprintf(f, "{\"%s\": ", r->dir == GOAL_AT_MOST ? "ratio_at_most" : "ratio_at_least");
            json_num(f, r->goal);
            fprintf(f, ", \"met\": %s}", strcmp(row_status(r), "ok") ? "false" : "true");
        }
        fputs(", \"note\": ", f);
        cmp_json_string(f, r->note);
        fprintf(f, "}%s\n", i + 1 < n_rows ? "," : "");
    }
    fputs("  ],\n  \"notes\": [", f);
    for (size_t i = 0; i < n_notes; i++) {
        fputs(i ? ", " : "", f);
        cmp_json_string(f, notes[i]);
    }
    fputs("]\n}\n", f);
    if (fclose(f) != 0)
        cmp_fail("cannot write %s: %s", path, strerror(errno));
}

/* ---- hit latency ------------------------------------------------------- */

/* The floor: the stored bytes from a file in page cache, decoded (checksum checked). */
static uint8_t *floor_read(const char *path, size_t *raw_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        cmp_fail("open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0)
        cmp_fail("stat %s: %s", path, strerror(errno));
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *z = cmp_xmalloc(n);
    while (got < n) {
        ssize_t r = read(fd, z + got, n - got);
        if (r <= 0)
            cmp_fail("read %s", path);
        got += (size_t)r;
    }
    close(fd);
    unsigned long long raw = ZSTD_getFrameContentSize(z, n);
    if (raw == ZSTD_CONTENTSIZE_UNKNOWN || raw == ZSTD_CONTENTSIZE_ERROR)
        cmp_fail("floor frame has no size");
    uint8_t *out = cmp_xmalloc((size_t)raw + 1);
    size_t d = ZSTD_decompress(out, (size_t)raw, z, n);
    if (ZSTD_isError(d) || d != raw)
        cmp_fail("floor decode: %s", ZSTD_isError(d) ? ZSTD_getErrorName(d) : "short");
    out[raw] = 0;
    free(z);
    *raw_size = (size_t)raw;
    return out;
}

static void bench_hits(const struct blob *const *arts, const char *const *labels, size_t n_arts)
{
    const unsigned hit_flags = opt.no_touch ? KCACHE_GET_NO_TOUCH : KCACHE_GET_DEFAULT;
    char *path = db_path("hits");
    kcache_store *s = open_store(path);
    for (size_t i = 0; i < n_arts; i++) {
        kcache_key k = make_key(1, i);
        put_or_die(s, &k, arts[i]->data, arts[i]->size, "sm_90", KCACHE_KIND_CUBIN);
    }
    for (size_t a = 0; a < n_arts; a++) {
        const struct blob *b = arts[a];
        kcache_key k = make_key(1, a);
        kcache_entry *e = NULL;
        if (kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH))
            cmp_fail("get: %s", kcache_store_errmsg(s));
        uint64_t stored = e->stored_size;
        kcache_entry_free(e);

        uint8_t *z;
        size_t zn = zstd_frame(&z, b->data, b->size);
        char fpath[4096];
        snprintf(fpath, sizeof(fpath), "%s/bench-%ld-floor-%zu.zst", opt.workdir, (long)getpid(),
                 a);
        cmp_write_file(fpath, z, zn);
        free(z);

        /* Enough samples for a p99, within a few seconds per artifact. */
        size_t iters = b->size <= 64 * KIB ? 20000 : b->size <= MIB ? 4000 : 400;
        if (opt.quick)
            iters /= 10;
        double *tg = cmp_xmalloc(iters * sizeof(double)), *tf = cmp_xmalloc(iters * sizeof(double));
        for (size_t i = 0; i < iters + iters / 20; i++) {
            int warm = i < iters / 20;
            size_t slot = warm ? 0 : i - iters / 20;
            /* Interleaved, alternating order: both see the same machine load. */
            for (int which = 0; which < 2; which++) {
                if ((which ^ (int)(i & 1)) == 0) {
                    double t0 = cmp_now();
                    int rc = kcache_store_get(&e, s, &k, hit_flags);
                    double t1 = cmp_now();
                    if (rc)
                        cmp_fail("get: %s", kcache_store_errmsg(s));
                    if (e->size != b->size || memcmp(e->data, b->data, b->size) != 0)
                        cmp_fail("get returned wrong bytes for %s", labels[a]);
                    kcache_entry_free(e);
                    tg[slot] = t1 - t0;
                } else {
                    size_t rn;
                    double t0 = cmp_now();
                    uint8_t *d = floor_read(fpath, &rn);
                    double t1 = cmp_now();
                    if (rn != b->size || memcmp(d, b->data, rn) != 0)
                        cmp_fail("floor decoded wrong bytes for %s", labels[a]);
                    free(d);
                    tf[slot] = t1 - t0;
                }
            }
        }
        unlink(fpath);
        double gmed = cmp_quantile(tg, iters, 0.5) * 1e6, gp99 = cmp_quantile(tg, iters, 0.99) * 1e6;
        double fmed = cmp_quantile(tf, iters, 0.5) * 1e6, fp99 = cmp_quantile(tf, iters, 0.99) * 1e6;
        free(tg);
        free(tf);
        char label[64];
        snprintf(label, sizeof(label), "%s median", labels[a]);
        struct row *r = add_row("hit", label, gmed, "us");
        r->ref = fmed;
        r->ratio = gmed / fmed;
        r->goal = 2;
        r->dir = GOAL_AT_MOST;
        snprintf(r->note, sizeof(r->note),
                 "%.60s; %zu B raw, %llu B stored (floor %zu B), %.2fx smaller, %zu runs",
                 b->what, b->size, (unsigned long long)stored, zn,
                 (double)b->size / (double)stored, iters);
        snprintf(label, sizeof(label), "%s p99", labels[a]);
        r = add_row("hit", label, gp99, "us");
        r->ref = fp99;
        r->ratio = gp99 / fp99;
        fprintf(stderr, "hit %-24s median %9.1f us (floor %9.1f)  p99 %9.1f us (floor %9.1f)\n",
                labels[a], gmed, fmed, gp99, fp99);
    }
    kcache_store_close(s);
    remove_db(path);
    free(path);
}

/* ---- stored over raw --------------------------------------------------- */

static void bench_ratio(const struct blob *const *cubins, size_t n)
{
    char *path = db_path("ratio");
    /* What a database holding nothing takes: the schema's fixed cost. */
    kcache_store_close(open_store(path));
    checkpoint_db(path);
    char wal[4200];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    uint64_t empty = cmp_file_size(path) + cmp_file_size(wal);
    remove_db(path);
    kcache_store *s = open_store(path);
    uint64_t raw = 0;
    char names[256] = "";
    for (size_t i = 0; i < n; i++) {
        kcache_key k = make_key(2, i);
        put_or_die(s, &k, cubins[i]->data, cubins[i]->size, "sm_90", KCACHE_KIND_CUBIN);
        raw += cubins[i]->size;
        size_t l = strlen(names);
        snprintf(names + l, sizeof(names) - l, "%s%s", i ? " + " : "", cubins[i]->what);
    }
    kcache_stats *st = NULL;
    if (kcache_store_stats(&st, s))
        cmp_fail("stats: %s", kcache_store_errmsg(s));
    uint64_t stored = st->stored_bytes;
    kcache_stats_free(st);
    kcache_store_close(s);
    uint64_t unchecked = checkpoint_db(path);
    uint64_t disk = cmp_file_size(path) + cmp_file_size(wal);

    /* Where the bytes went: pages in the file and the tables holding them. */
    long long page_size = 0, pages = 0, free_pages = 0, objects = 0;
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        const char *q[] = {"PRAGMA page_size", "PRAGMA page_count", "PRAGMA freelist_count",
                           "SELECT count(*) FROM sqlite_schema WHERE rootpage > 0"};
        long long *dst[] = {&page_size, &pages, &free_pages, &objects};
        for (int i = 0; i < 4; i++) {
            sqlite3_stmt *stmt;
            if (sqlite3_prepare_v2(db, q[i], -1, &stmt, NULL) == SQLITE_OK &&
                sqlite3_step(stmt) == SQLITE_ROW)
                *dst[i] = sqlite3_column_int64(stmt, 0);
            sqlite3_finalize(stmt);
        }
    }
    sqlite3_close(db);

    struct row *r = add_row("size", "corpus CUBINs: db file", (double)disk, "B");
    r->ref = (double)raw;
    r->ratio = (double)raw / (double)disk;
    r->goal = 5;
    r->dir = GOAL_AT_LEAST;
    snprintf(r->note, sizeof(r->note),
             "raw/(file+WAL after checkpoint); %lld pages of %lld B, %lld free, %lld tables+"
             "indexes (1+ page each); %llu B on disk before the checkpoint",
             pages, page_size, free_pages, objects, (unsigned long long)unchecked);
    r = add_row("size", "corpus CUBINs: file - empty db", (double)(disk - empty), "B");
    r->ref = (double)raw;
    r->ratio = disk > empty ? (double)raw / (double)(disk - empty) : NAN;
    snprintf(r->note, sizeof(r->note), "raw/(file - %llu B of an empty kcache database)",
             (unsigned long long)empty);
    r = add_row("size", "corpus CUBINs: artifact bytes", (double)stored, "B");
    r->ref = (double)raw;
    r->ratio = (double)raw / (double)stored;
    snprintf(r->note, sizeof(r->note), "raw/stored, no SQLite overhead: %s", names);
    fprintf(stderr, "size: raw %llu B, stored %llu B, file %llu B\n", (unsigned long long)raw,
            (unsigned long long)stored, (unsigned long long)disk);
    remove_db(path);
    free(path);
}

/* ---- puts per second --------------------------------------------------- */

static void bench_puts(const struct blob *base, size_t size)
{
    size_t n = opt.quick ? 60 : 400;
    char *path = db_path("puts");
    kcache_store *s = open_store(path);
    double *t = cmp_xmalloc(n * sizeof(double)), total = 0;
    struct blob b;
    for (size_t i = 0; i < n; i++) {
        cubin_like(&b, base, size, 1000 + i); /* distinct bytes per key */
        kcache_key k = make_key(3, i);
        double t0 = cmp_now();
        put_or_die(s, &k, b.data, b.size, "sm_90", KCACHE_KIND_CUBIN);
        t[i] = cmp_now() - t0;
        total += t[i];
        free_blob(&b);
    }
    kcache_store_close(s);
    double med = cmp_quantile(t, n, 0.5);
    struct row *r = add_row("put", "265 KiB CUBIN-like, 1 process", (double)n / total, "puts/s");
    snprintf(r->note, sizeof(r->note), "%zu distinct keys; median put %.2f ms, p99 %.2f ms", n,
             med * 1e3, cmp_quantile(t, n, 0.99) * 1e3);
    fprintf(stderr, "puts: %.1f/s\n", (double)n / total);
    free(t);
    remove_db(path);
    free(path);
}

/* ---- read throughput, several processes ------------------------------- */

static double read_round(const char *path, int procs, size_t n_keys, size_t size, double secs)
{
    int go[2], res[2];
    if (pipe(go) != 0 || pipe(res) != 0)
        cmp_fail("pipe: %s", strerror(errno));
    pid_t pids[16];
    for (int p = 0; p < procs; p++) {
        pids[p] = fork();
        if (pids[p] < 0)
            cmp_fail("fork: %s", strerror(errno));
        if (pids[p] == 0) {
            close(go[1]);
            close(res[0]);
            kcache_store *s = open_store(path);
            char c;
            if (read(go[0], &c, 1) != 1)
                _exit(1);
            double t0 = cmp_now(), t1 = t0;
            uint64_t hits = 0;
            for (size_t i = 0; t1 - t0 < secs; i++) {
                kcache_key k = make_key(4, (i + (size_t)p) % n_keys);
                kcache_entry *e;
                if (kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT) != 0 || e->size != size)
                    _exit(2);
                kcache_entry_free(e);
                hits++;
                if ((hits & 15) == 0)
                    t1 = cmp_now();
            }
            t1 = cmp_now();
            kcache_store_close(s);
            double rate = (double)hits / (t1 - t0);
            if (write(res[1], &rate, sizeof(rate)) != (ssize_t)sizeof(rate))
                _exit(1);
            _exit(0);
        }
    }
    close(go[0]);
    close(res[1]);
    /* Let every reader open the file before any starts counting. */
    usleep(300000);
    char bytes[16] = {0};
    if (write(go[1], bytes, (size_t)procs) != procs)
        cmp_fail("pipe write");
    close(go[1]);
    double sum = 0;
    int failed = 0;
    for (int p = 0; p < procs; p++) {
        double rate;
        if (read(res[0], &rate, sizeof(rate)) == (ssize_t)sizeof(rate))
            sum += rate;
    }
    for (int p = 0; p < procs; p++) {
        int status;
        while (waitpid(pids[p], &status, 0) < 0 && errno == EINTR)
            ;
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    close(res[0]);
    if (failed)
        cmp_fail("a reader process failed");
    return sum;
}

static void bench_readers(const struct blob *art)
{
    const size_t n_keys = 16;
    char *path = db_path("readers");
    kcache_store *s = open_store(path);
    for (size_t i = 0; i < n_keys; i++) {
        kcache_key k = make_key(4, i);
        put_or_die(s, &k, art->data, art->size, "sm_90", KCACHE_KIND_CUBIN);
    }
    kcache_store_close(s);
    const int procs[] = {1, 2, 4};
    double secs = opt.quick ? 0.5 : 2.0;
    int rounds = opt.quick ? 1 : 3;
    double one = NAN;
    for (size_t i = 0; i < 3; i++) {
        double r[3];
        for (int j = 0; j < rounds; j++)
            r[j] = read_round(path, procs[i], n_keys, art->size, secs);
        double med = cmp_quantile(r, (size_t)rounds, 0.5);
        if (i == 0)
            one = med;
        char label[64];
        snprintf(label, sizeof(label), "%d process%s, %s", procs[i], procs[i] > 1 ? "es" : "",
                 art->real ? "block_sort CUBIN" : "synthetic");
        struct row *row = add_row("read", label, med, "hits/s");
        row->ref = one;
        row->ratio = med / one;
        snprintf(row->note, sizeof(row->note),
                 "median of %d rounds of %.1f s; ref = 1 process; %ld CPUs on this machine",
                 rounds, secs, sysconf(_SC_NPROCESSORS_ONLN));
        fprintf(stderr, "readers %d: %.0f hits/s\n", procs[i], med);
    }
    remove_db(path);
    free(path);
}

/* ---- prune ------------------------------------------------------------- */

/* Writes n_bytes of 256 KiB random (incompressible) entries, numbered from *next. */
static void fill_incompressible(const char *path, uint64_t n_bytes, uint64_t *next)
{
    const size_t size = 256 * KIB;
    kcache_store *s = open_store(path);
    uint8_t *buf = cmp_xmalloc(size);
    for (uint64_t done = 0; done + size <= n_bytes; done += size, (*next)++) {
        cmp_fill_random(buf, size, 5000 + *next);
        kcache_key k = make_key(5, *next);
        put_or_die(s, &k, buf, size, "sm_90", KCACHE_KIND_CUBIN);
    }
    free(buf);
    kcache_store_close(s);
    /* Let the kernel write the fill back now, not during the timed prune. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/*
 * Median of three prunes evicting `evict` from a cache of `total`, each time
 * from the same size: what one prune takes away is put back (newest) before
 * the next.
 */
static double prune_median(uint64_t total, uint64_t evict, uint64_t *evicted,
                           uint64_t *disk_before, uint64_t *disk_after)
{
    char name[64];
    snprintf(name, sizeof(name), "prune-%llu", (unsigned long long)(total / MIB));
    char *path = db_path(name);
    char wal[4200];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    uint64_t next = 0;
    fill_incompressible(path, total, &next);
    double t[3];
    for (int round = 0; round < 3; round++) {
        if (round > 0)
            fill_incompressible(path, evict, &next);
        kcache_store *s = open_store(path);
        uint64_t disk = cmp_file_size(path) + cmp_file_size(wal);
        kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
        po.max_size = disk - evict;
        kcache_prune_result pr = KCACHE_PRUNE_RESULT_INIT;
        double t0 = cmp_now();
        int rc = kcache_store_prune(&pr, s, &po);
        t[round] = cmp_now() - t0;
        if (rc)
            cmp_fail("prune: %s", kcache_store_errmsg(s));
        kcache_store_close(s);
        *evicted = pr.evicted;
        *disk_before = pr.disk_before;
        *disk_after = pr.disk_after;
    }
    remove_db(path);
    free(path);
    return cmp_quantile(t, 3, 0.5);
}

static void bench_prune(void)
{
    /* Same shape in both modes: evict 1/4 of one cache and 1/20 of the other. */
    const uint64_t evict = opt.quick ? 10 * MIB : 100 * MIB;
    const uint64_t sizes[2] = {4 * evict, 20 * evict};
    double t[2];
    for (int i = 0; i < 2; i++) {
        uint64_t n, before, after;
        t[i] = prune_median(sizes[i], evict, &n, &before, &after);
        char label[64];
        snprintf(label, sizeof(label), "evict %llu MiB of %llu MiB",
                 (unsigned long long)(evict / MIB), (unsigned long long)(sizes[i] / MIB));
        struct row *r = add_row("prune", label, t[i] * 1e3, "ms");
        if (i == 1) {
            r->ref = t[0] * 1e3;
            r->ratio = t[1] / t[0];
            r->goal = 2;
            r->dir = GOAL_AT_MOST;
        }
        snprintf(r->note, sizeof(r->note),
                 "median of 3; %llu entries of 256 KiB random bytes evicted; disk %.1f -> %.1f "
                 "MiB%s",
                 (unsigned long long)n, (double)before / MIB, (double)after / MIB,
                 i == 1 ? "; ref = the smaller cache" : "");
        fprintf(stderr, "prune %s: %.1f ms\n", label, t[i] * 1e3);
    }
    if (opt.quick)
        add_note("quick mode: prune evicts 10 MiB from 40 and 200 MiB (the full run: 100 MiB "
                 "from 400 MiB and 2000 MiB)");
}

/* ---- stats --------------------------------------------------------------- */

static double run_cli_stats(const char *path)
{
    double t0 = cmp_now();
    pid_t pid = fork();
    if (pid < 0)
        cmp_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            close(fd);
        }
        execl(opt.kcache_exe, opt.kcache_exe, "--path", path, "stats", (char *)NULL);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    double t = cmp_now() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        cmp_fail("%s --path %s stats failed", opt.kcache_exe, path);
    return t;
}

static void bench_stats(const struct blob *base)
{
    size_t n = opt.quick ? 20000 : 100000;
    char *path = db_path("stats");
    kcache_store *s = open_store(path);
    static const char *const archs[] = {"sm_80", "sm_86", "sm_89", "sm_90", "compute_90"};
    fprintf(stderr, "stats: filling %zu entries ...\n", n);
    double f0 = cmp_now();
    for (size_t i = 0; i < n; i++) {
        /* 0.5 to 2.5 KiB slices of a real CUBIN: many small entries. */
        size_t len = 512 + (i * 7919) % 2048;
        if (len > base->size)
            len = base->size;
        size_t off = (i * 104729) % (base->size - len + 1);
        kcache_key k = make_key(6, i);
        put_or_die(s, &k, base->data + off, len, archs[i % 5],
                   i % 5 == 4 ? KCACHE_KIND_PTX : KCACHE_KIND_CUBIN);
    }
    double fill = cmp_now() - f0;
    kcache_store_close(s);
    s = open_store(path);
    const int runs = 11;
    double t[11], first = 0;
    uint64_t entries = 0;
    for (int i = 0; i < runs; i++) {
        kcache_stats *st;
        double t0 = cmp_now();
        if (kcache_store_stats(&st, s))
            cmp_fail("stats: %s", kcache_store_errmsg(s));
        t[i] = cmp_now() - t0;
        if (i == 0)
            first = t[i];
        entries = st->entries;
        kcache_stats_free(st);
    }
    kcache_store_close(s);
    if (entries != n)
        cmp_fail("stats counted %llu entries, %zu were put", (unsigned long long)entries, n);
    double med = cmp_quantile(t, (size_t)runs, 0.5) * 1e3;
    char label[64];
    snprintf(label, sizeof(label), "kcache_store_stats, %zuk entries", n / 1000);
    struct row *r = add_row("stats", label, med, "ms");
    r->ref = 100;
    r->ratio = med / 100;
    r->goal = 1;
    r->dir = GOAL_AT_MOST;
    snprintf(r->note, sizeof(r->note),
             "median of %d on a freshly opened store; first call %.1f ms; ref = the 100 ms goal; "
             "fill took %.1f s (%.0f puts/s)",
             runs, first * 1e3, fill, (double)n / fill);
    fprintf(stderr, "stats: %.2f ms\n", med);
    if (opt.kcache_exe && access(opt.kcache_exe, X_OK) == 0) {
        double c[5];
        for (int i = 0; i < 5; i++)
            c[i] = run_cli_stats(path);
        double cmed = cmp_quantile(c, 5, 0.5) * 1e3;
        snprintf(label, sizeof(label), "kcache stats (CLI), %zuk entries", n / 1000);
        r = add_row("stats", label, cmed, "ms");
        snprintf(r->note, sizeof(r->note), "process end to end (fork, exec, open, print), median "
                                           "of 5");
        fprintf(stderr, "cli stats: %.2f ms\n", cmed);
    } else {
        add_note("kcache executable not given (--kcache): CLI stats not timed");
    }
    if (opt.quick)
        add_note("quick mode: stats on %zu entries (the full run: 100000)", n);
    remove_db(path);
    free(path);
}

/* The 1, 5 and 15 minute load averages, as text (static storage). */
static const char *load_average(void)
{
    static char buf[64];
    snprintf(buf, sizeof(buf), "unknown");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return buf;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", a, b, c);
    fclose(f);
    return buf;
}

/* ---- main ------------------------------------------------------------------ */

static const char usage_text[] =
    "usage: bench_store [--quick] [--json FILE] [--workdir DIR] [--corpus DIR]\n"
    "                   [--nvcc PATH] [--tiled-wrapper FILE] [--kcache PATH]\n"
    "\n"
    "  --quick               smaller sizes, under a minute (the table says what changed)\n"
    "  --json FILE           also write the results as JSON\n"
    "  --workdir DIR         compiled CUBINs (kept) and temporary databases (deleted);\n"
    "                        default: $TMPDIR or /tmp\n"
    "  --corpus DIR          the kernel corpus (default: $KCACHE_CORPUS)\n"
    "  --nvcc PATH           nvcc used to build the corpus CUBINs for sm_90\n"
    "  --tiled-wrapper FILE  the .cu that instantiates tiled_gemm (benchmarks/)\n"
    "  --kcache PATH         the kcache CLI, to time `kcache stats` end to end\n"
    "  --no-touch            time hits with KCACHE_GET_NO_TOUCH (what counting hits costs)\n";

/* The options into opt, its paths made absolute. Returns -1 to go on, else the exit status. */
static int read_options(int argc, char **argv)
{
    static const struct option options[] = {
        {"quick", no_argument, NULL, 'q'},          {"json", required_argument, NULL, 'j'},
        {"workdir", required_argument, NULL, 'w'},  {"corpus", required_argument, NULL, 'c'},
        {"nvcc", required_argument, NULL, 'n'},     {"tiled-wrapper", required_argument, NULL, 't'},
        {"kcache", required_argument, NULL, 'k'},   {"help", no_argument, NULL, 'h'},
        {"no-touch", no_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    opt.corpus = getenv("KCACHE_CORPUS");
    opt.workdir = getenv("TMPDIR");
    if (!opt.workdir || !*opt.workdir)
        opt.workdir = "/tmp";
    int c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'q': opt.quick = 1; break;
        case 'j': opt.json_path = optarg; break;
        case 'w': opt.workdir = optarg; break;
        case 'c': opt.corpus = optarg; break;
        case 'n': opt.nvcc = optarg; break;
        case 't': opt.tiled_wrapper = optarg; break;
        case 'k': opt.kcache_exe = optarg; break;
        case 'T': opt.no_touch = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench_store: unexpected argument '%s'\n%s", argv[optind], usage_text);
        return 2;
    }
    if (opt.corpus && access(opt.corpus, R_OK) != 0)
        opt.corpus = NULL;
    if (mkdir(opt.workdir, 0700) != 0 && errno != EEXIST)
        cmp_fail("cannot create %s: %s", opt.workdir, strerror(errno));
    /* nvcc runs in the corpus directory: every path it is given must be absolute. */
    static char abs_workdir[4096], abs_corpus[4096], abs_wrapper[4096];
    if (!realpath(opt.workdir, abs_workdir))
        cmp_fail("%s: %s", opt.workdir, strerror(errno));
    opt.workdir = abs_workdir;
    if (opt.corpus)
        opt.corpus = realpath(opt.corpus, abs_corpus);
    if (opt.tiled_wrapper && !realpath(opt.tiled_wrapper, abs_wrapper))
        cmp_fail("%s: %s", opt.tiled_wrapper, strerror(errno));
    if (opt.tiled_wrapper)
        opt.tiled_wrapper = abs_wrapper;
    return -1;
}

int main(int argc, char **argv)
{
    int status = read_options(argc, argv);
    if (status >= 0)
        return status;
    signal(SIGPIPE, SIG_IGN);

    struct blob saxpy, block_sort, tiled;
    artifacts_configure(opt.nvcc, opt.corpus, opt.workdir);
    corpus_cubin(&saxpy, "saxpy", "saxpy.cu", 0, 4 * KIB);
    corpus_cubin(&block_sort, "block_sort", "block_sort.cu", 1, 265 * KIB);
    /* Without the wrapper the CUBIN holds no kernel: cache it under another name. */
    corpus_cubin(&tiled, opt.tiled_wrapper ? "tiled_gemm" : "tiled_gemm-uninstantiated",
                 opt.tiled_wrapper ? opt.tiled_wrapper : "tiled_gemm.cu", 0, 11 * KIB);
    const struct blob *const compiled[] = {&saxpy, &block_sort, &tiled};
    for (size_t i = 0; i < 3; i++)
        if (!compiled[i]->real)
            add_note("%s", compiled[i]->fallback);
    if (!opt.tiled_wrapper)
        add_note("--tiled-wrapper not given: tiled_gemm.cu compiled without instantiations");

    /* 4 KiB: the start of the corpus CUBINs laid end to end (ELF header first). */
    struct blob all = {0}, small, mid, big;
    all.size = saxpy.size + tiled.size + block_sort.size;
    all.data = cmp_xmalloc(all.size);
    memcpy(all.data, saxpy.data, saxpy.size);
    memcpy(all.data + saxpy.size, tiled.data, tiled.size);
    memcpy(all.data + saxpy.size + tiled.size, block_sort.data, block_sort.size);
    small.size = 4 * KIB;
    small.data = cmp_xmalloc(small.size);
    memcpy(small.data, all.data, small.size < all.size ? small.size : all.size);
    snprintf(small.what, sizeof(small.what), "first 4 KiB of saxpy+tiled_gemm+block_sort CUBINs");
    cubin_like(&mid, &block_sort, 265 * KIB, 42);
    snprintf(mid.what, sizeof(mid.what), "block_sort CUBIN 16-byte words reshuffled per copy");
    cubin_like(&big, &all, 4 * MIB, 43);
    snprintf(big.what, sizeof(big.what), "corpus CUBINs' 16-byte words reshuffled per copy");

    char load_start[64];
    snprintf(load_start, sizeof(load_start), "%s", load_average());
    printf("bench_store %s, %s mode, %ld CPUs\n", kcache_version(), opt.quick ? "quick" : "full",
           sysconf(_SC_NPROCESSORS_ONLN));
    if (block_sort.real && block_sort.size != 265 * KIB)
        add_note("the block_sort CUBIN for sm_90 from this nvcc is %zu B (%.1f KiB), not 265 KiB: "
                 "it is timed as is, and a 265 KiB CUBIN-like artifact is timed beside it",
                 block_sort.size, (double)block_sort.size / KIB);

    const struct blob *arts[] = {&small, &block_sort, &mid, &big};
    char bs_label[48];
    snprintf(bs_label, sizeof(bs_label), "%.1f KiB block_sort%s", (double)block_sort.size / KIB,
             block_sort.real ? "" : " SYNTH");
    const char *labels[] = {"4 KiB", bs_label, "265 KiB CUBIN-like", "4 MiB CUBIN-like"};
    if (opt.no_touch)
        add_note("--no-touch: hits timed with KCACHE_GET_NO_TOUCH, not the default flags");
    bench_hits(arts, labels, 4);

    const struct blob *cubins[] = {&saxpy, &block_sort, &tiled};
    bench_ratio(cubins, 3);
    bench_puts(&block_sort, 265 * KIB);
    bench_readers(&block_sort);
    bench_prune();
    bench_stats(&all);

    add_note("load average at start %s, at end %s (other work on the machine skews timings)",
             load_start, load_average());
    print_table();
    if (opt.json_path) {
        write_json(opt.json_path);
        printf("results written to %s\n", opt.json_path);
    }
    free_blob(&all);
    free_blob(&small);
    free_blob(&mid);
    free_blob(&big);
    free_blob(&saxpy);
    free_blob(&block_sort);
    free_blob(&tiled);
    return 0;
}
