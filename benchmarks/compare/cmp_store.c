/*
 * Store level: the kcache store against the file-per-entry cache (fpe.c) and
 * the floor (the same stored bytes as a zstd frame in a plain file, read and
 * decoded), on a synthetic set of distinct entries of realistic sizes. kcache
 * runs under each `compression` setting (one database each: "kcache" is
 * the default, lz4, then "kcache zstd" and "kcache none"), and lz4 has its
 * floor too (an LZ4 block as kcache writes it, read and decoded).
 *
 * Figures: hit latency by size (warm, and cold: pages dropped with
 * posix_fadvise(DONTNEED) after a sync, then open + get + close), populate
 * time, disk bytes and files, throughput with 1, 2 and 4 processes, prune
 * cost, and on-disk size sampled while writing past a cap.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lz4.h>
#include <zstd.h>

#include <kcache/store.h>

#include "cmp_store.h"
#include "cmp_util.h"
#include "fpe.h"
#include "sqlite_floor.h"
/* What the store writes, so that the floors decode frames of the same shape. */
#include "util/frames.h"


/*
 * kcache's systems first, one per `compression` setting, in kc_setting's
 * order: "kcache" is the default (KC_COMPRESSION_DEFAULT in lib/util/codec.h),
 * so that every other row of the page is kcache as users get it.
 */
enum { SYS_KCACHE, SYS_KC_ZSTD, SYS_KC_NONE, SYS_FPE, SYS_FLOOR, SYS_FLOOR_LZ4, N_SYS };
#define N_KC 3
static const char *const sys_name[N_SYS] = {"kcache",         "kcache zstd", "kcache none",
                                            "file-per-entry", "floor",       "floor lz4"};
static const char *const kc_setting[N_KC] = {"lz4", "zstd", "none"};
static const char *const kc_db_name[N_KC] = {"kcache.db", "kcache-zstd.db", "kcache-none.db"};

#define N_BINS 5
static const size_t bin_lo[N_BINS + 1] = {4 * KIB,   8 * KIB,   32 * KIB,
                                          128 * KIB, 512 * KIB, 1024 * KIB + 1};
static const char *const bin_name[N_BINS] = {"4-8 KiB", "8-32 KiB", "32-128 KiB",
                                             "128-512 KiB", "512-1024 KiB"};

/* The word pool: 16-byte words (one sm_90 instruction each) of real CUBINs. */
static uint8_t *pool;
static size_t pool_words;

static void entry_bytes(uint64_t i, uint8_t *out, size_t size)
{
    cmp_entry_bytes(i, out, size, pool, pool_words);
}

static kcache_key entry_key(uint64_t i)
{
    kcache_key k;
    cmp_fill_random(k.bytes, sizeof(k.bytes), i * UINT64_C(2654435761) + 99);
    return k;
}

/* compression: the setting the store writes with (reads do not depend on it). */
static kcache_store *open_store(const char *path, uint64_t max_size, const char *compression)
{
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = path;
    o.max_size = max_size;
    o.compression = compression;
    kcache_store *s = NULL;
    char err[512];
    if (kcache_store_open(&s, &o, err, sizeof(err)) != 0)
        cmp_fail("opening %s: %s", path, err);
    return s;
}

static void kc_entry(kcache_entry *e, uint64_t i, const uint8_t *data, size_t n)
{
    *e = (kcache_entry)KCACHE_ENTRY_INIT;
    e->key = entry_key(i);
    e->kind = KCACHE_KIND_CUBIN;
    e->arch = "sm_90";
    e->name = "bench.cu";
    e->toolchain = "bench";
    e->data = data;
    e->size = n;
    e->compile_ns = 1000000;
}

static void kc_put(kcache_store *s, uint64_t i, const uint8_t *data, size_t n)
{
    kcache_entry e;
    kc_entry(&e, i, data, n);
    if (kcache_store_put(s, &e) != 0)
        cmp_fail("kcache put: %s", kcache_store_errmsg(s));
}

static fpe_cache *open_fpe(const char *dir, uint64_t max_size)
{
    fpe_cache *c;
    int rc = fpe_open(&c, dir, max_size);
    if (rc)
        cmp_fail("opening %s: %s", dir, strerror(-rc));
    return c;
}

static void db_files(const char *db, char wal[4200], char shm[4200])
{
    cmp_fmt(wal, 4200, "%s-wal", db);
    cmp_fmt(shm, 4200, "%s-shm", db);
}

static uint64_t kc_disk(const char *db)
{
    char wal[4200], shm[4200];
    db_files(db, wal, shm);
    return cmp_file_size(db) + cmp_file_size(wal);
}

static uint64_t fpe_bytes(const char *dir)
{
    fpe_usage u;
    fpe_disk_usage(dir, &u);
    return u.apparent_bytes;
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
}

static void remove_tree(const char *path)
{
    char cmd[4400];
    cmp_fmt(cmd, sizeof(cmd), "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_compare: '%s' failed\n", cmd);
}

/* ---- one get of each system ------------------------------------------- */

struct sample {
    uint64_t index;
    size_t size;
    uint8_t *bytes;
    char floor_path[4200];
    char floor_lz4_path[4200];
};

static double get_kcache_flags(kcache_store *s, const struct sample *x, unsigned flags)
{
    kcache_key k = entry_key(x->index);
    kcache_entry *e = NULL;
    double t0 = cmp_now();
    int rc = kcache_store_get(&e, s, &k, flags);
    double t = cmp_now() - t0;
    if (rc)
        cmp_fail("kcache get: %s", kcache_store_errmsg(s));
    if (e->size != x->size || memcmp(e->data, x->bytes, x->size) != 0)
        cmp_fail("kcache returned wrong bytes");
    kcache_entry_free(e);
    return t;
}

static double get_kcache(kcache_store *s, const struct sample *x)
{
    return get_kcache_flags(s, x, KCACHE_GET_DEFAULT);
}

static double get_fpe(fpe_cache *c, const struct sample *x)
{
    kcache_key k = entry_key(x->index);
    void *d;
    size_t n;
    double t0 = cmp_now();
    int rc = fpe_get(c, k.bytes, &d, &n);
    double t = cmp_now() - t0;
    if (rc)
        cmp_fail("file-per-entry get: %d", rc);
    if (n != x->size || memcmp(d, x->bytes, n) != 0)
        cmp_fail("file-per-entry returned wrong bytes");
    free(d);
    return t;
}

static double get_floor(const struct sample *x)
{
    double t0 = cmp_now();
    uint8_t *z;
    size_t zn;
    if (cmp_load_file(x->floor_path, &z, &zn) != 0)
        cmp_fail("floor read %s", x->floor_path);
    unsigned long long raw = ZSTD_getFrameContentSize(z, zn);
    if (raw == ZSTD_CONTENTSIZE_UNKNOWN || raw == ZSTD_CONTENTSIZE_ERROR)
        cmp_fail("floor frame has no size");
    uint8_t *out = cmp_xmalloc((size_t)raw + 1);
    size_t d = ZSTD_decompress(out, (size_t)raw, z, zn);
    out[raw] = 0;
    double t = cmp_now() - t0;
    if (ZSTD_isError(d) || d != x->size || memcmp(out, x->bytes, d) != 0)
        cmp_fail("floor decoded wrong bytes");
    free(z);
    free(out);
    return t;
}

/* The block kcache stores for lz4 (util/codec.c: LZ4's fast compressor). */
static size_t floor_lz4_encode(void *dst, size_t cap, const void *src, size_t n)
{
    if (cap < (size_t)LZ4_compressBound((int)n))
        cmp_fail("lz4 bound");
    int z = LZ4_compress_default(src, dst, (int)n, (int)cap);
    if (z <= 0)
        cmp_fail("lz4 compress");
    return (size_t)z;
}

/* The lz4 floor: read the block, decode it whole (kcache adds the stored bytes' XXH3). */
static double get_floor_lz4(const struct sample *x)
{
    double t0 = cmp_now();
    uint8_t *z;
    size_t zn;
    if (cmp_load_file(x->floor_lz4_path, &z, &zn) != 0)
        cmp_fail("floor read %s", x->floor_lz4_path);
    uint8_t *out = cmp_xmalloc(x->size + 1);
    int got = LZ4_decompress_safe((const char *)z, (char *)out, (int)zn, (int)x->size);
    out[x->size] = 0;
    double t = cmp_now() - t0;
    if (got != (int)x->size || memcmp(out, x->bytes, x->size) != 0)
        cmp_fail("lz4 floor decoded wrong bytes");
    free(z);
    free(out);
    return t;
}

/* ---- throughput --------------------------------------------------------- */

static void throughput(int sys, const char *db, const char *dir, uint64_t n_entries, int procs,
                       double seconds)
{
    int fds[2];
    if (pipe(fds) != 0)
        cmp_fail("pipe: %s", strerror(errno));
    int go[2];
    if (pipe(go) != 0)
        cmp_fail("pipe: %s", strerror(errno));
    pid_t pids[8];
    for (int p = 0; p < procs; p++) {
        pids[p] = fork();
        if (pids[p] < 0)
            cmp_fail("fork: %s", strerror(errno));
        if (pids[p] == 0) {
            close(fds[0]);
            close(go[1]);
            kcache_store *s = sys < N_KC ? open_store(db, UINT64_MAX, kc_setting[sys]) : NULL;
            fpe_cache *c = sys == SYS_FPE ? open_fpe(dir, 0) : NULL;
            char b;
            if (read(go[0], &b, 1) != 0) /* the parent closes it: everyone starts */
                _exit(2);
            uint64_t st = (uint64_t)p * 7777 + 1, ops = 0, bytes = 0;
            double end = cmp_now() + seconds;
            while (cmp_now() < end) {
                uint64_t i = cmp_splitmix(&st) % n_entries;
                kcache_key k = entry_key(i);
                if (s) {
                    kcache_entry *e;
                    if (kcache_store_get(&e, s, &k, KCACHE_GET_DEFAULT) != 0)
                        _exit(3);
                    bytes += e->size;
                    kcache_entry_free(e);
                } else {
                    void *d;
                    size_t n;
                    if (fpe_get(c, k.bytes, &d, &n) != 0)
                        _exit(3);
                    bytes += n;
                    free(d);
                }
                ops++;
            }
            kcache_store_close(s);
            fpe_close(c);
            uint64_t res[2] = {ops, bytes};
            if (write(fds[1], res, sizeof(res)) != (ssize_t)sizeof(res))
                _exit(4);
            _exit(0);
        }
    }
    close(fds[1]);
    close(go[0]);
    usleep(300000); /* let every child open its handle */
    close(go[1]);
    uint64_t ops = 0, bytes = 0;
    for (int p = 0; p < procs; p++) {
        uint64_t res[2];
        if (read(fds[0], res, sizeof(res)) != (ssize_t)sizeof(res))
            cmp_fail("a %s throughput process failed", sys_name[sys]);
        ops += res[0];
        bytes += res[1];
    }
    close(fds[0]);
    for (int p = 0; p < procs; p++) {
        int status;
        waitpid(pids[p], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            cmp_fail("a %s throughput process failed", sys_name[sys]);
    }
    char casename[32];
    snprintf(casename, sizeof(casename), "%d proc", procs);
    cmp_rec("throughput", sys_name[sys], casename, "gets_per_s", (double)ops / seconds, "1/s");
    cmp_rec("throughput", sys_name[sys], casename, "MB_per_s", (double)bytes / seconds / 1e6,
            "MB/s");
}

/* ---- the run ------------------------------------------------------------ */

static void load_pool(const char *const *cubins, size_t n_cubins)
{
    size_t total = 0;
    uint8_t *all = NULL;
    for (size_t i = 0; i < n_cubins; i++) {
        uint8_t *d;
        size_t n;
        if (cmp_load_file(cubins[i], &d, &n) != 0)
            cmp_fail("cannot read %s", cubins[i]);
        n -= n % 16;
        uint8_t *g = realloc(all, total + n);
        if (!g)
            cmp_fail("out of memory");
        all = g;
        memcpy(all + total, d, n);
        total += n;
        free(d);
    }
    if (total < 4096)
        cmp_fail("the CUBINs given hold too few bytes (%zu)", total);
    pool = all;
    pool_words = total / 16;
}

/* What the parts of one run share: its files, the entries' sizes, the samples. */
struct run {
    const struct cmp_store_args *a;
    uint64_t n; /* entries */
    char db[4200], dir[4200], floor_dir[4200], wal[4200], shm[4200];
    /* One database per setting; db (and its wal, shm) is the first, the default's. */
    char kdb[N_KC][4200], kwal[N_KC][4200], kshm[N_KC][4200];
    /* The least one SQLite file can cost (sqlite_floor.h): the same entries, raw. */
    char sqf_db[4300], sqf_wal[4310];
    size_t *sizes;
    uint64_t raw_total;
    double kc_ratio;        /* raw bytes over kcache's disk after populating, at least 1 */
    uint8_t *buf;           /* one entry's bytes */
    struct sample *samples; /* per_bin of each size bin */
    size_t n_samples[N_BINS];
    double *t[N_SYS]; /* each system's times in one bin */
};

/* The run's files named, its directory made anew. */
static void make_paths(struct run *r)
{
    const struct cmp_store_args *a = r->a;
    for (int k = 0; k < N_KC; k++) {
        cmp_fmt(r->kdb[k], sizeof(r->kdb[k]), "%s/%s", a->workdir, kc_db_name[k]);
        db_files(r->kdb[k], r->kwal[k], r->kshm[k]);
    }
    snprintf(r->db, sizeof(r->db), "%s", r->kdb[0]);
    snprintf(r->dir, sizeof(r->dir), "%s/fpe", a->workdir);
    snprintf(r->floor_dir, sizeof(r->floor_dir), "%s/floor", a->workdir);
    snprintf(r->sqf_db, sizeof(r->sqf_db), "%s/sqlite-floor.db", a->workdir);
    snprintf(r->sqf_wal, sizeof(r->sqf_wal), "%s-wal", r->sqf_db);
    db_files(r->db, r->wal, r->shm);
    remove_tree(a->workdir);
    if (mkdir(a->workdir, 0700) != 0 || mkdir(r->floor_dir, 0700) != 0)
        cmp_fail("cannot make %s: %s", a->workdir, strerror(errno));
}

/* The entries' sizes and how well their bytes compress. */
static void dataset(struct run *r)
{
    /* Sizes, shared with the Python run (cuda.core) through a file. */
    r->sizes = cmp_xmalloc(r->n * sizeof(*r->sizes));
    double *sz = cmp_xmalloc(r->n * sizeof(double));
    for (uint64_t i = 0; i < r->n; i++) {
        r->sizes[i] = cmp_entry_size(i);
        r->raw_total += r->sizes[i];
        sz[i] = (double)r->sizes[i];
    }
    for (int k = 0; k < N_KC; k++) /* which system is which setting; 1: the default */
        cmp_rec("meta", sys_name[k], "compression", kc_setting[k], k == 0, "");
    cmp_rec("dataset", "-", "entries", "count", (double)r->n, "");
    cmp_rec("dataset", "-", "entries", "raw_bytes", (double)r->raw_total, "B");
    cmp_rec("dataset", "-", "entries", "median_size", cmp_quantile(sz, r->n, 0.5), "B");
    cmp_rec("dataset", "-", "entries", "p99_size", cmp_quantile(sz, r->n, 0.99), "B");
    free(sz);
    {
        /* How well the synthetic bytes compress, against the real CUBINs. */
        uint8_t *b = cmp_xmalloc(MIB + 1), *zb = cmp_xmalloc(ZSTD_compressBound(MIB));
        uint64_t raw = 0, z = 0;
        for (uint64_t i = 0; i < r->n && i < 300; i++) {
            entry_bytes(i, b, r->sizes[i]);
            size_t zn = ZSTD_compress(zb, ZSTD_compressBound(MIB), b, r->sizes[i], KC_ZSTD_LEVEL);
            if (ZSTD_isError(zn))
                cmp_fail("zstd: %s", ZSTD_getErrorName(zn));
            raw += r->sizes[i];
            z += zn;
        }
        cmp_rec("dataset", "-", "synthetic", "zstd_ratio", (double)raw / (double)z, "x");
        size_t zn =
            ZSTD_compress(zb, ZSTD_compressBound(MIB), pool, pool_words * 16, KC_ZSTD_LEVEL);
        cmp_rec("dataset", "-", "real CUBINs", "zstd_ratio", (double)(pool_words * 16) / (double)zn,
                "x");
        free(b);
        free(zb);
    }
}

static void populate(struct run *r)
{
    const struct cmp_store_args *a = r->a;
    const uint64_t n = r->n;
    /*
     * Populate all, one entry at a time, each setting's store in turn;
     * generating is not timed. One more store (the default setting), written
     * through kcache_batch_put() (64 entries per transaction), interleaved
     * with the others: what a caller with many entries at once gets. The
     * others have no batch.
     */
    kcache_store *ks[N_KC];
    for (int k = 0; k < N_KC; k++)
        ks[k] = open_store(r->kdb[k], UINT64_MAX, kc_setting[k]);
    fpe_cache *c = open_fpe(r->dir, 0);
    char db_batch[4300];
    snprintf(db_batch, sizeof(db_batch), "%s/kcache-batch.db", a->workdir);
    kcache_store *sb = open_store(db_batch, UINT64_MAX, kc_setting[0]);
    kcache_batch *batch = NULL;
    if (kcache_batch_new(&batch, sb, NULL) != 0)
        cmp_fail("kcache batch: %s", kcache_store_errmsg(sb));
    double t_kcs[N_KC] = {0}, t_fpe = 0, t_batch = 0;
    sqf_writer *sqw = sqf_create(r->sqf_db);
    for (uint64_t i = 0; i < n; i++) {
        entry_bytes(i, r->buf, r->sizes[i]);
        kcache_key k = entry_key(i);
        sqf_put(sqw, k.bytes, r->buf, r->sizes[i]); /* not timed: not a compared put */
        for (int ki = 0; ki < N_KC; ki++) {
            double t0 = cmp_now();
            kc_put(ks[ki], i, r->buf, r->sizes[i]);
            t_kcs[ki] += cmp_now() - t0;
        }
        double t1 = cmp_now();
        if (fpe_put(c, k.bytes, r->buf, r->sizes[i]) != 0)
            cmp_fail("file-per-entry put failed");
        double t2 = cmp_now();
        kcache_entry e;
        kc_entry(&e, i, r->buf, r->sizes[i]);
        if (kcache_batch_put(batch, &e) != 0 || (i + 1 == n && kcache_batch_commit(batch) != 0))
            cmp_fail("kcache batch put: %s", kcache_store_errmsg(sb));
        double t3 = cmp_now();
        t_fpe += t2 - t1;
        t_batch += t3 - t2;
    }
    kcache_batch_free(batch);
    kcache_store_close(sb);
    sqf_finish(sqw);
    for (int k = 0; k < N_KC; k++) {
        kcache_store_close(ks[k]);
        cmp_rec("populate", sys_name[k], "all", "puts_per_s", (double)n / t_kcs[k], "1/s");
    }
    fpe_close(c);
    {
        char side[4400];
        unlink(db_batch);
        const char *const ext[] = {"-wal", "-shm", "-lock"};
        for (size_t j = 0; j < 3; j++) {
            snprintf(side, sizeof(side), "%s%s", db_batch, ext[j]);
            unlink(side);
        }
    }
    cmp_rec("populate", "kcache batched", "all", "puts_per_s", (double)n / t_batch, "1/s");
    r->kc_ratio = (double)r->raw_total / (double)(kc_disk(r->db) ? kc_disk(r->db) : 1);
    if (r->kc_ratio < 1)
        r->kc_ratio = 1;
    cmp_rec("populate", "file-per-entry", "all", "puts_per_s", (double)n / t_fpe, "1/s");
}

static void disk_use(struct run *r)
{
    /* Disk: what a user sees after the writers closed. */
    for (int k = 0; k < N_KC; k++) {
        uint64_t kc_app =
            cmp_file_size(r->kdb[k]) + cmp_file_size(r->kwal[k]) + cmp_file_size(r->kshm[k]);
        uint64_t kc_alloc =
            cmp_file_blocks(r->kdb[k]) + cmp_file_blocks(r->kwal[k]) + cmp_file_blocks(r->kshm[k]);
        double kc_files = (cmp_file_size(r->kdb[k]) > 0) + (access(r->kwal[k], F_OK) == 0) +
                          (access(r->kshm[k], F_OK) == 0);
        cmp_rec("disk", sys_name[k], "all", "apparent_bytes", (double)kc_app, "B");
        cmp_rec("disk", sys_name[k], "all", "allocated_bytes", (double)kc_alloc, "B");
        cmp_rec("disk", sys_name[k], "all", "files", kc_files, "");
        cmp_rec("disk", sys_name[k], "all", "dirs", 0, "");
    }
    fpe_usage u;
    fpe_disk_usage(r->dir, &u);
    cmp_rec("disk", "file-per-entry", "all", "apparent_bytes", (double)u.apparent_bytes, "B");
    cmp_rec("disk", "file-per-entry", "all", "allocated_bytes", (double)u.allocated_bytes, "B");
    cmp_rec("disk", "file-per-entry", "all", "files", (double)u.files, "");
    cmp_rec("disk", "file-per-entry", "all", "dirs", (double)u.dirs, "");
}

static void take_samples(struct run *r)
{
    const struct cmp_store_args *a = r->a;
    /* Samples per size bin, with their floor frames. */
    r->samples = cmp_xmalloc(N_BINS * a->per_bin * sizeof(*r->samples));
    for (uint64_t i = 0; i < r->n; i++) {
        for (int b = 0; b < N_BINS; b++) {
            if (r->sizes[i] >= bin_lo[b] && r->sizes[i] < bin_lo[b + 1] &&
                r->n_samples[b] < a->per_bin) {
                struct sample *x = &r->samples[b * a->per_bin + r->n_samples[b]++];
                x->index = i;
                x->size = r->sizes[i];
                x->bytes = cmp_xmalloc(r->sizes[i] + 1);
                entry_bytes(i, x->bytes, r->sizes[i]);
                ZSTD_CCtx *z = ZSTD_createCCtx();
                if (!z)
                    cmp_fail("out of memory");
                ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, KC_ZSTD_LEVEL);
                ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
                size_t bound = ZSTD_compressBound(r->sizes[i]);
                uint8_t *zb = cmp_xmalloc(bound);
                size_t zn = ZSTD_compress2(z, zb, bound, x->bytes, r->sizes[i]);
                if (ZSTD_isError(zn))
                    cmp_fail("zstd: %s", ZSTD_getErrorName(zn));
                ZSTD_freeCCtx(z);
                cmp_fmt(x->floor_path, sizeof(x->floor_path), "%s/%llu.zst", r->floor_dir,
                        (unsigned long long)i);
                cmp_write_file(x->floor_path, zb, zn);
                free(zb);
                size_t lcap = 2 * r->sizes[i] + 65536;
                uint8_t *lb = cmp_xmalloc(lcap);
                size_t ln = floor_lz4_encode(lb, lcap, x->bytes, r->sizes[i]);
                cmp_fmt(x->floor_lz4_path, sizeof(x->floor_lz4_path), "%s/%llu.lz4", r->floor_dir,
                        (unsigned long long)i);
                cmp_write_file(x->floor_lz4_path, lb, ln);
                free(lb);
            }
        }
    }
    if (a->samples_out) {
        FILE *f = fopen(a->samples_out, "w");
        if (!f)
            cmp_fail("cannot write %s", a->samples_out);
        for (int b = 0; b < N_BINS; b++)
            for (size_t j = 0; j < r->n_samples[b]; j++)
                fprintf(f, "%d %llu\n", b,
                        (unsigned long long)r->samples[b * a->per_bin + j].index);
        fclose(f);
    }
}

static void warm_hits(struct run *r)
{
    const struct cmp_store_args *a = r->a;
    kcache_store *ks[N_KC];
    /* Warm hits: every system interleaved, order rotating, same entries. */
    for (int k = 0; k < N_KC; k++)
        ks[k] = open_store(r->kdb[k], UINT64_MAX, kc_setting[k]);
    fpe_cache *c = open_fpe(r->dir, 0);
    for (int k = 0; k < N_SYS; k++)
        r->t[k] = cmp_xmalloc(a->hit_iters * sizeof(double));
    for (int b = 0; b < N_BINS; b++) {
        size_t m = r->n_samples[b];
        if (!m)
            continue;
        double med_size;
        {
            double *ss = cmp_xmalloc(m * sizeof(double));
            for (size_t j = 0; j < m; j++)
                ss[j] = (double)r->samples[b * a->per_bin + j].size;
            med_size = cmp_quantile(ss, m, 0.5);
            free(ss);
        }
        for (size_t j = 0; j < m; j++) { /* warm-up: one of each */
            for (int k = 0; k < N_KC; k++)
                get_kcache(ks[k], &r->samples[b * a->per_bin + j]);
            get_fpe(c, &r->samples[b * a->per_bin + j]);
            get_floor(&r->samples[b * a->per_bin + j]);
            get_floor_lz4(&r->samples[b * a->per_bin + j]);
        }
        for (size_t it = 0; it < a->hit_iters; it++) {
            const struct sample *x = &r->samples[b * a->per_bin + it % m];
            for (int o = 0; o < N_SYS; o++) {
                int k = (int)((o + it) % N_SYS);
                r->t[k][it] = k < N_KC         ? get_kcache(ks[k], x)
                              : k == SYS_FPE   ? get_fpe(c, x)
                              : k == SYS_FLOOR ? get_floor(x)
                                               : get_floor_lz4(x);
            }
        }
        for (int k = 0; k < N_SYS; k++) {
            cmp_rec("hit_warm", sys_name[k], bin_name[b], "median_us",
                    cmp_quantile(r->t[k], a->hit_iters, 0.5) * 1e6, "us");
            cmp_rec("hit_warm", sys_name[k], bin_name[b], "p99_us",
                    cmp_quantile(r->t[k], a->hit_iters, 0.99) * 1e6, "us");
            cmp_rec("hit_warm", sys_name[k], bin_name[b], "size", med_size, "B");
        }
    }
    for (int k = 0; k < N_KC; k++)
        kcache_store_close(ks[k]);
    fpe_close(c);
}

/* The times and disk reads of the one-get-per-process runs, each cold_iters long. */
struct cold_times {
    double *open[N_KC], *get[N_KC], *close[N_KC];
    double *no_touch, *no_touch_close; /* kcache without recording the hit */
    /* The SQLite floor's time, and the KiB each system had read from the disk
     * (/proc/self/io): the measured reasons behind a slow first or cold hit. */
    double *sqf;
    double *disk[N_SYS + 1];
};

/* One fresh process's get of x from system k (open, get, close), its time in r->t[k][it]. */
static void cold_get(struct run *r, struct cold_times *ct, int k, const struct sample *x, int cold,
                     size_t it)
{
    char path[4200];
    double t0;
    uint64_t d0 = 0;
    if (k < N_KC) {
        if (cold) {
            cmp_drop_cache(r->kdb[k]);
            cmp_drop_cache(r->kwal[k]);
        }
        d0 = cmp_disk_read_bytes();
        t0 = cmp_now();
        kcache_store *s2 = open_store(r->kdb[k], UINT64_MAX, kc_setting[k]);
        double ta = cmp_now();
        get_kcache(s2, x);
        double tb = cmp_now();
        kcache_store_close(s2);
        ct->open[k][it] = ta - t0;
        ct->get[k][it] = tb - ta;
        ct->close[k][it] = cmp_now() - tb;
    } else if (k == SYS_FPE) {
        kcache_key key = entry_key(x->index);
        fpe_cache *c2 = open_fpe(r->dir, 0);
        fpe_entry_path(c2, key.bytes, path, sizeof(path));
        fpe_close(c2);
        if (cold)
            cmp_drop_cache(path);
        d0 = cmp_disk_read_bytes();
        t0 = cmp_now();
        c2 = open_fpe(r->dir, 0);
        get_fpe(c2, x);
        fpe_close(c2);
    } else if (k == SYS_FLOOR) {
        if (cold)
            cmp_drop_cache(x->floor_path);
        d0 = cmp_disk_read_bytes();
        t0 = cmp_now();
        get_floor(x);
    } else {
        if (cold)
            cmp_drop_cache(x->floor_lz4_path);
        d0 = cmp_disk_read_bytes();
        t0 = cmp_now();
        get_floor_lz4(x);
    }
    r->t[k][it] = cmp_now() - t0;
    ct->disk[k][it] = (double)(cmp_disk_read_bytes() - d0) / KIB;
}

/* The same get from the SQLite floor, checked. */
static void cold_get_floor(struct run *r, struct cold_times *ct, const struct sample *x, int cold,
                           size_t it)
{
    if (cold) {
        cmp_drop_cache(r->sqf_db);
        cmp_drop_cache(r->sqf_wal);
    }
    kcache_key key = entry_key(x->index);
    void *data;
    size_t size;
    uint64_t d0 = cmp_disk_read_bytes();
    double t0 = cmp_now();
    sqf_first_hit(r->sqf_db, key.bytes, &data, &size);
    ct->sqf[it] = cmp_now() - t0;
    ct->disk[N_SYS][it] = (double)(cmp_disk_read_bytes() - d0) / KIB;
    if (size != x->size || memcmp(data, x->bytes, size) != 0)
        cmp_fail("sqlite floor: entry %llu read back wrong", (unsigned long long)x->index);
    free(data);
}

/* Bin b's figures of one group (hit_cold or hit_open). */
static void cold_records(const struct run *r, const struct cold_times *ct, const char *group, int b,
                         int cold)
{
    const size_t iters = r->a->cold_iters;
    for (int k = 0; k < N_KC; k++) {
        cmp_rec(group, sys_name[k], bin_name[b], "open_median_us",
                cmp_quantile(ct->open[k], iters, 0.5) * 1e6, "us");
        cmp_rec(group, sys_name[k], bin_name[b], "get_median_us",
                cmp_quantile(ct->get[k], iters, 0.5) * 1e6, "us");
        cmp_rec(group, sys_name[k], bin_name[b], "close_median_us",
                cmp_quantile(ct->close[k], iters, 0.5) * 1e6, "us");
    }
    if (!cold) {
        cmp_rec(group, "kcache", bin_name[b], "no_touch_median_us",
                cmp_quantile(ct->no_touch, iters, 0.5) * 1e6, "us");
        cmp_rec(group, "kcache", bin_name[b], "no_touch_close_median_us",
                cmp_quantile(ct->no_touch_close, iters, 0.5) * 1e6, "us");
    }
    for (int k = 0; k < N_SYS; k++) {
        cmp_rec(group, sys_name[k], bin_name[b], "median_us",
                cmp_quantile(r->t[k], iters, 0.5) * 1e6, "us");
        cmp_rec(group, sys_name[k], bin_name[b], "p99_us", cmp_quantile(r->t[k], iters, 0.99) * 1e6,
                "us");
    }
    cmp_rec(group, "sqlite floor", bin_name[b], "median_us",
            cmp_quantile(ct->sqf, iters, 0.5) * 1e6, "us");
    cmp_rec(group, "sqlite floor", bin_name[b], "p99_us", cmp_quantile(ct->sqf, iters, 0.99) * 1e6,
            "us");
    for (int k = 0; cold && k <= N_SYS; k++)
        cmp_rec(group, k < N_SYS ? sys_name[k] : "sqlite floor", bin_name[b],
                "disk_read_kib_median", cmp_quantile(ct->disk[k], iters, 0.5), "KiB");
}

/*
 * Cold: everything synced, then before each get the files it reads are
 * dropped from the page cache (posix_fadvise DONTNEED; no root needed),
 * and the get is a fresh process's: open, get, close. The same loop
 * without the drop gives the warm one-get-per-process figure.
 */
static void cold_hits(struct run *r)
{
    const struct cmp_store_args *a = r->a;
    const size_t bytes = a->cold_iters * sizeof(double);
    struct cold_times ct;
    sync_dir(a->workdir);
    for (int k = 0; k < N_KC; k++) {
        ct.open[k] = cmp_xmalloc(bytes);
        ct.get[k] = cmp_xmalloc(bytes);
        ct.close[k] = cmp_xmalloc(bytes);
    }
    ct.no_touch = cmp_xmalloc(bytes);
    ct.no_touch_close = cmp_xmalloc(bytes);
    ct.sqf = cmp_xmalloc(bytes);
    for (int k = 0; k <= N_SYS; k++)
        ct.disk[k] = cmp_xmalloc(bytes);
    for (int cold = 1; cold >= 0; cold--) {
        for (int b = 0; b < N_BINS; b++) {
            size_t m = r->n_samples[b];
            if (!m)
                continue;
            for (size_t it = 0; it < a->cold_iters; it++) {
                const struct sample *x = &r->samples[b * a->per_bin + it % m];
                for (int o = 0; o < N_SYS; o++)
                    cold_get(r, &ct, (int)((o + it) % N_SYS), x, cold, it);
                cold_get_floor(r, &ct, x, cold, it);
                if (cold) {
                    sync_dir(a->workdir); /* the touches kcache wrote */
                } else {
                    /* The same without recording the hit: what the touch costs. */
                    double t0 = cmp_now();
                    kcache_store *s2 = open_store(r->db, UINT64_MAX, kc_setting[0]);
                    get_kcache_flags(s2, x, KCACHE_GET_NO_TOUCH);
                    double tb = cmp_now();
                    kcache_store_close(s2);
                    ct.no_touch[it] = cmp_now() - t0;
                    ct.no_touch_close[it] = cmp_now() - tb;
                }
            }
            cold_records(r, &ct, cold ? "hit_cold" : "hit_open", b, cold);
        }
    }
    for (int k = 0; k < N_SYS; k++)
        free(r->t[k]);
    for (int k = 0; k <= N_SYS; k++)
        free(ct.disk[k]);
    free(ct.sqf);
    for (int k = 0; k < N_KC; k++) {
        free(ct.open[k]);
        free(ct.get[k]);
        free(ct.close[k]);
    }
    free(ct.no_touch);
    free(ct.no_touch_close);
}

/* Throughput: every entry in page cache, uniform random keys. The other
 * settings with one process (what decoding costs shows there already). */
static void throughput_all(struct run *r)
{
    const struct cmp_store_args *a = r->a;
    for (int k = 0; k < N_KC; k++) {
        cmp_warm_file(r->kdb[k]);
        cmp_warm_file(r->kwal[k]);
    }
    for (int procs = 1; procs <= 4; procs *= 2) {
        for (int k = 0; k < (procs == 1 ? N_KC : 1); k++)
            throughput(k, r->kdb[k], r->dir, r->n, procs, a->seconds);
        throughput(SYS_FPE, r->db, r->dir, r->n, procs, a->seconds);
    }
    for (int k = 1; k < N_KC; k++) { /* the rest uses the default's store only */
        unlink(r->kdb[k]);
        unlink(r->kwal[k]);
        unlink(r->kshm[k]);
    }
}

/* Prune to half the bytes on disk; then the default's store and the file-per-entry cache go. */
static void prune_half(struct run *r)
{
    kcache_store *s = open_store(r->db, UINT64_MAX, kc_setting[0]);
    /* Half of what the entries take (the WAL may hold pages the file
     * does not yet, so half of file + WAL could be met by a checkpoint). */
    kcache_stats *ps;
    if (kcache_store_stats(&ps, s) != 0)
        cmp_fail("stats: %s", kcache_store_errmsg(s));
    kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
    po.max_size = ps->stored_bytes / 2;
    kcache_stats_free(ps);
    kcache_prune_result pr = KCACHE_PRUNE_RESULT_INIT;
    double t0 = cmp_now();
    if (kcache_store_prune(&pr, s, &po) != 0)
        cmp_fail("prune: %s", kcache_store_errmsg(s));
    double tk = cmp_now() - t0;
    kcache_store_close(s);
    cmp_rec("prune", "kcache", "to half", "seconds", tk, "s");
    cmp_rec("prune", "kcache", "to half", "evicted", (double)pr.evicted, "");
    cmp_rec("prune", "kcache", "to half", "bytes_after_over_target",
            (double)pr.disk_after / (double)po.max_size, "x");
    cmp_rec("prune", "kcache", "to half", "disk_before", (double)pr.disk_before, "B");
    fpe_cache *c = open_fpe(r->dir, 0);
    fpe_prune_result fr;
    if (fpe_prune(c, UINT64_MAX, &fr) != 0) /* counts only */
        cmp_fail("file-per-entry scan failed");
    uint64_t target = fr.bytes_after / 2;
    t0 = cmp_now();
    if (fpe_prune(c, target, &fr) != 0)
        cmp_fail("file-per-entry prune failed");
    double tf = cmp_now() - t0;
    fpe_close(c);
    cmp_rec("prune", "file-per-entry", "to half", "seconds", tf, "s");
    cmp_rec("prune", "file-per-entry", "to half", "evicted", (double)fr.evicted, "");
    cmp_rec("prune", "file-per-entry", "to half", "bytes_after_over_target",
            (double)fr.bytes_after / (double)target, "x");
    cmp_rec("prune", "file-per-entry", "to half", "disk_before", (double)fr.bytes_before, "B");
    remove_tree(r->dir);
    unlink(r->db);
    unlink(r->wal);
    unlink(r->shm);
}

/* Writing past a cap: on-disk size sampled as entries go in. */
static void past_cap(struct run *r)
{
    const struct cmp_store_args *a = r->a;
    const uint64_t cap = a->cap;
    kcache_store *s = open_store(r->db, cap, kc_setting[0]);
    fpe_cache *c = open_fpe(r->dir, cap);
    uint64_t written = 0, i = 0, step = 0;
    double tk = 0, tf = 0, max_k = 0, max_f = 0;
    uint64_t puts = 0;
    /* Enough raw bytes that even compressed (kcache) they pass the cap
     * cap_factor times over. */
    const uint64_t to_write = (uint64_t)((double)(a->cap_factor * cap) * r->kc_ratio);
    uint64_t every = (to_write / (60 * KIB)) / 40 + 1;
    while (written < to_write) {
        uint64_t idx = UINT64_C(1) << 40 | i++;
        size_t sn = cmp_entry_size(idx);
        entry_bytes(idx, r->buf, sn);
        kcache_key k = entry_key(idx);
        double t0 = cmp_now();
        kc_put(s, idx, r->buf, sn);
        double t1 = cmp_now();
        if (fpe_put(c, k.bytes, r->buf, sn) != 0)
            cmp_fail("file-per-entry put failed");
        tf += cmp_now() - t1;
        tk += t1 - t0;
        written += sn;
        puts++;
        if (++step % every == 0) {
            double dk = (double)kc_disk(r->db);
            fpe_usage fu;
            fpe_disk_usage(r->dir, &fu);
            double df = (double)fu.apparent_bytes;
            char casename[32];
            snprintf(casename, sizeof(casename), "%.3f", (double)written / (double)cap);
            cmp_rec("cap_series", "kcache", casename, "disk_over_cap", dk / (double)cap, "x");
            cmp_rec("cap_series", "file-per-entry", casename, "disk_over_cap", df / (double)cap,
                    "x");
            cmp_rec("cap_series", "file-per-entry", casename, "files_over_cap",
                    (double)(fu.apparent_bytes - fu.dirs * 4096) / (double)cap, "x");
            if (dk > max_k)
                max_k = dk;
            if (df > max_f)
                max_f = df;
        }
    }
    kcache_stats *st = NULL;
    double evicted = 0;
    if (kcache_store_stats(&st, s) == 0) {
        evicted = (double)st->evictions;
        cmp_rec("cap", "kcache", "end", "entries", (double)st->entries, "");
        kcache_stats_free(st);
    }
    kcache_store_close(s);
    fpe_close(c);
    double end_k = (double)kc_disk(r->db), end_f = (double)fpe_bytes(r->dir);
    if (end_k > max_k)
        max_k = end_k;
    fpe_usage u;
    fpe_disk_usage(r->dir, &u);
    fpe_prune_result fr;
    c = open_fpe(r->dir, 0);
    fpe_prune(c, UINT64_MAX, &fr); /* counts only: the entry files' bytes */
    fpe_close(c);
    cmp_rec("cap", "file-per-entry", "end", "files_over_cap", (double)fr.bytes_after / (double)cap,
            "x");
    cmp_rec("cap", "file-per-entry", "end", "dirs", (double)u.dirs, "");
    cmp_rec("cap", "-", "cap", "bytes", (double)cap, "B");
    cmp_rec("cap", "-", "written", "raw_over_cap", (double)written / (double)cap, "x");
    cmp_rec("cap", "kcache", "max", "disk_over_cap", max_k / (double)cap, "x");
    cmp_rec("cap", "kcache", "end", "disk_over_cap", end_k / (double)cap, "x");
    cmp_rec("cap", "kcache", "all", "puts_per_s", (double)puts / tk, "1/s");
    cmp_rec("cap", "kcache", "all", "evicted", evicted, "");
    cmp_rec("cap", "file-per-entry", "max", "disk_over_cap", max_f / (double)cap, "x");
    cmp_rec("cap", "file-per-entry", "end", "disk_over_cap", end_f / (double)cap, "x");
    cmp_rec("cap", "file-per-entry", "all", "puts_per_s", (double)puts / tf, "1/s");
    cmp_rec("cap", "file-per-entry", "end", "entries", (double)u.files, "");
    cmp_note("cap: kcache counts database + WAL against its cap, the file-per-entry cache "
             "the sizes of its entry files (directories not counted), as cuda.core does");
}

int cmp_store_main(const struct cmp_store_args *a)
{
    struct run *r = cmp_xmalloc(sizeof(*r));
    memset(r, 0, sizeof(*r));
    r->a = a;
    r->n = a->entries;
    load_pool(a->cubins, a->n_cubins);
    make_paths(r);
    dataset(r);
    if (a->ratio_only)
        return 0;
    if (a->sizes_out) {
        FILE *f = fopen(a->sizes_out, "w");
        if (!f)
            cmp_fail("cannot write %s", a->sizes_out);
        for (uint64_t i = 0; i < r->n; i++)
            fprintf(f, "%zu\n", r->sizes[i]);
        fclose(f);
    }
    r->buf = cmp_xmalloc(MIB + 1);
    populate(r);
    disk_use(r);
    take_samples(r);
    warm_hits(r);
    cold_hits(r);
    throughput_all(r);
    prune_half(r);
    past_cap(r);
    for (size_t j = 0; j < N_BINS * a->per_bin; j++)
        if (j % a->per_bin < r->n_samples[j / a->per_bin])
            free(r->samples[j].bytes);
    free(r->samples);
    free(r->buf);
    free(r->sizes);
    free(pool);
    remove_tree(a->workdir);
    free(r);
    return 0;
}
