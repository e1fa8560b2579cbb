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

int cmp_store_main(const struct cmp_store_args *a)
{
    load_pool(a->cubins, a->n_cubins);
    const uint64_t n = a->entries;
    char db[4200], dir[4200], floor_dir[4200], wal[4200], shm[4200];
    /* One database per setting; db (and its wal, shm) is the first, the default's. */
    char kdb[N_KC][4200], kwal[N_KC][4200], kshm[N_KC][4200];
    for (int k = 0; k < N_KC; k++) {
        cmp_fmt(kdb[k], sizeof(kdb[k]), "%s/%s", a->workdir, kc_db_name[k]);
        db_files(kdb[k], kwal[k], kshm[k]);
    }
    snprintf(db, sizeof(db), "%s", kdb[0]);
    snprintf(dir, sizeof(dir), "%s/fpe", a->workdir);
    snprintf(floor_dir, sizeof(floor_dir), "%s/floor", a->workdir);
    /* The least one SQLite file can cost (sqlite_floor.h): the same entries, raw. */
    char sqf_db[4300], sqf_wal[4310];
    snprintf(sqf_db, sizeof(sqf_db), "%s/sqlite-floor.db", a->workdir);
    snprintf(sqf_wal, sizeof(sqf_wal), "%s-wal", sqf_db);
    db_files(db, wal, shm);
    remove_tree(a->workdir);
    if (mkdir(a->workdir, 0700) != 0 || mkdir(floor_dir, 0700) != 0)
        cmp_fail("cannot make %s: %s", a->workdir, strerror(errno));

    /* Sizes, shared with the Python run (cuda.core) through a file. */
    size_t *sizes = cmp_xmalloc(n * sizeof(*sizes));
    uint64_t raw_total = 0;
    double *sz = cmp_xmalloc(n * sizeof(double));
    for (uint64_t i = 0; i < n; i++) {
        sizes[i] = cmp_entry_size(i);
        raw_total += sizes[i];
        sz[i] = (double)sizes[i];
    }
    for (int k = 0; k < N_KC; k++) /* which system is which setting; 1: the default */
        cmp_rec("meta", sys_name[k], "compression", kc_setting[k], k == 0, "");
    cmp_rec("dataset", "-", "entries", "count", (double)n, "");
    cmp_rec("dataset", "-", "entries", "raw_bytes", (double)raw_total, "B");
    cmp_rec("dataset", "-", "entries", "median_size", cmp_quantile(sz, n, 0.5), "B");
    cmp_rec("dataset", "-", "entries", "p99_size", cmp_quantile(sz, n, 0.99), "B");
    free(sz);
    {
        /* How well the synthetic bytes compress, against the real CUBINs. */
        uint8_t *b = cmp_xmalloc(MIB + 1), *zb = cmp_xmalloc(ZSTD_compressBound(MIB));
        uint64_t raw = 0, z = 0;
        for (uint64_t i = 0; i < n && i < 300; i++) {
            entry_bytes(i, b, sizes[i]);
            size_t zn = ZSTD_compress(zb, ZSTD_compressBound(MIB), b, sizes[i], KC_ZSTD_LEVEL);
            if (ZSTD_isError(zn))
                cmp_fail("zstd: %s", ZSTD_getErrorName(zn));
            raw += sizes[i];
            z += zn;
        }
        cmp_rec("dataset", "-", "synthetic", "zstd_ratio", (double)raw / (double)z, "x");
        size_t zn = ZSTD_compress(zb, ZSTD_compressBound(MIB), pool, pool_words * 16,
                                  KC_ZSTD_LEVEL);
        cmp_rec("dataset", "-", "real CUBINs", "zstd_ratio",
                (double)(pool_words * 16) / (double)zn, "x");
        free(b);
        free(zb);
        if (a->ratio_only)
            return 0;
    }
    if (a->sizes_out) {
        FILE *f = fopen(a->sizes_out, "w");
        if (!f)
            cmp_fail("cannot write %s", a->sizes_out);
        for (uint64_t i = 0; i < n; i++)
            fprintf(f, "%zu\n", sizes[i]);
        fclose(f);
    }

    /*
     * Populate all, one entry at a time, each setting's store in turn;
     * generating is not timed. One more store (the default setting), written
     * through kcache_batch_put() (64 entries per transaction), interleaved
     * with the others: what a caller with many entries at once gets. The
     * others have no batch.
     */
    uint8_t *buf = cmp_xmalloc(MIB + 1);
    kcache_store *ks[N_KC];
    for (int k = 0; k < N_KC; k++)
        ks[k] = open_store(kdb[k], UINT64_MAX, kc_setting[k]);
    kcache_store *s = ks[0];
    fpe_cache *c = open_fpe(dir, 0);
    char db_batch[4300];
    snprintf(db_batch, sizeof(db_batch), "%s/kcache-batch.db", a->workdir);
    kcache_store *sb = open_store(db_batch, UINT64_MAX, kc_setting[0]);
    kcache_batch *batch = NULL;
    if (kcache_batch_new(&batch, sb, NULL) != 0)
        cmp_fail("kcache batch: %s", kcache_store_errmsg(sb));
    double t_kcs[N_KC] = {0}, t_fpe = 0, t_batch = 0;
    sqf_writer *sqw = sqf_create(sqf_db);
    for (uint64_t i = 0; i < n; i++) {
        entry_bytes(i, buf, sizes[i]);
        kcache_key k = entry_key(i);
        sqf_put(sqw, k.bytes, buf, sizes[i]); /* not timed: not a compared put */
        for (int ki = 0; ki < N_KC; ki++) {
            double t0 = cmp_now();
            kc_put(ks[ki], i, buf, sizes[i]);
            t_kcs[ki] += cmp_now() - t0;
        }
        double t1 = cmp_now();
        if (fpe_put(c, k.bytes, buf, sizes[i]) != 0)
            cmp_fail("file-per-entry put failed");
        double t2 = cmp_now();
        kcache_entry e;
        kc_entry(&e, i, buf, sizes[i]);
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
    double kc_ratio = (double)raw_total / (double)(kc_disk(db) ? kc_disk(db) : 1);
    if (kc_ratio < 1)
        kc_ratio = 1;
    cmp_rec("populate", "file-per-entry", "all", "puts_per_s", (double)n / t_fpe, "1/s");

    /* Disk: what a user sees after the writers closed. */
    for (int k = 0; k < N_KC; k++) {
        uint64_t kc_app =
            cmp_file_size(kdb[k]) + cmp_file_size(kwal[k]) + cmp_file_size(kshm[k]);
        uint64_t kc_alloc =
            cmp_file_blocks(kdb[k]) + cmp_file_blocks(kwal[k]) + cmp_file_blocks(kshm[k]);
        double kc_files = (cmp_file_size(kdb[k]) > 0) + (access(kwal[k], F_OK) == 0) +
                          (access(kshm[k], F_OK) == 0);
        cmp_rec("disk", sys_name[k], "all", "apparent_bytes", (double)kc_app, "B");
        cmp_rec("disk", sys_name[k], "all", "allocated_bytes", (double)kc_alloc, "B");
        cmp_rec("disk", sys_name[k], "all", "files", kc_files, "");
        cmp_rec("disk", sys_name[k], "all", "dirs", 0, "");
    }
    fpe_usage u;
    fpe_disk_usage(dir, &u);
    cmp_rec("disk", "file-per-entry", "all", "apparent_bytes", (double)u.apparent_bytes, "B");
    cmp_rec("disk", "file-per-entry", "all", "allocated_bytes", (double)u.allocated_bytes, "B");
    cmp_rec("disk", "file-per-entry", "all", "files", (double)u.files, "");
    cmp_rec("disk", "file-per-entry", "all", "dirs", (double)u.dirs, "");

    /* Samples per size bin, with their floor frames. */
    struct sample *samples = cmp_xmalloc(N_BINS * a->per_bin * sizeof(*samples));
    size_t n_samples[N_BINS] = {0};
    for (uint64_t i = 0; i < n; i++) {
        for (int b = 0; b < N_BINS; b++) {
            if (sizes[i] >= bin_lo[b] && sizes[i] < bin_lo[b + 1] &&
                n_samples[b] < a->per_bin) {
                struct sample *x = &samples[b * a->per_bin + n_samples[b]++];
                x->index = i;
                x->size = sizes[i];
                x->bytes = cmp_xmalloc(sizes[i] + 1);
                entry_bytes(i, x->bytes, sizes[i]);
                ZSTD_CCtx *z = ZSTD_createCCtx();
                if (!z)
                    cmp_fail("out of memory");
                ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, KC_ZSTD_LEVEL);
                ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
                size_t bound = ZSTD_compressBound(sizes[i]);
                uint8_t *zb = cmp_xmalloc(bound);
                size_t zn = ZSTD_compress2(z, zb, bound, x->bytes, sizes[i]);
                if (ZSTD_isError(zn))
                    cmp_fail("zstd: %s", ZSTD_getErrorName(zn));
                ZSTD_freeCCtx(z);
                cmp_fmt(x->floor_path, sizeof(x->floor_path), "%s/%llu.zst", floor_dir,
                         (unsigned long long)i);
                cmp_write_file(x->floor_path, zb, zn);
                free(zb);
                size_t lcap = 2 * sizes[i] + 65536;
                uint8_t *lb = cmp_xmalloc(lcap);
                size_t ln = floor_lz4_encode(lb, lcap, x->bytes, sizes[i]);
                cmp_fmt(x->floor_lz4_path, sizeof(x->floor_lz4_path), "%s/%llu.lz4", floor_dir,
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
            for (size_t j = 0; j < n_samples[b]; j++)
                fprintf(f, "%d %llu\n", b, (unsigned long long)samples[b * a->per_bin + j].index);
        fclose(f);
    }

    /* Warm hits: every system interleaved, order rotating, same entries. */
    for (int k = 0; k < N_KC; k++)
        ks[k] = open_store(kdb[k], UINT64_MAX, kc_setting[k]);
    c = open_fpe(dir, 0);
    double *t[N_SYS];
    for (int k = 0; k < N_SYS; k++)
        t[k] = cmp_xmalloc(a->hit_iters * sizeof(double));
    for (int b = 0; b < N_BINS; b++) {
        size_t m = n_samples[b];
        if (!m)
            continue;
        double med_size;
        {
            double *ss = cmp_xmalloc(m * sizeof(double));
            for (size_t j = 0; j < m; j++)
                ss[j] = (double)samples[b * a->per_bin + j].size;
            med_size = cmp_quantile(ss, m, 0.5);
            free(ss);
        }
        for (size_t j = 0; j < m; j++) { /* warm-up: one of each */
            for (int k = 0; k < N_KC; k++)
                get_kcache(ks[k], &samples[b * a->per_bin + j]);
            get_fpe(c, &samples[b * a->per_bin + j]);
            get_floor(&samples[b * a->per_bin + j]);
            get_floor_lz4(&samples[b * a->per_bin + j]);
        }
        for (size_t it = 0; it < a->hit_iters; it++) {
            const struct sample *x = &samples[b * a->per_bin + it % m];
            for (int r = 0; r < N_SYS; r++) {
                int k = (int)((r + it) % N_SYS);
                t[k][it] = k < N_KC          ? get_kcache(ks[k], x)
                           : k == SYS_FPE    ? get_fpe(c, x)
                           : k == SYS_FLOOR  ? get_floor(x)
                                             : get_floor_lz4(x);
            }
        }
        for (int k = 0; k < N_SYS; k++) {
            cmp_rec("hit_warm", sys_name[k], bin_name[b], "median_us",
                    cmp_quantile(t[k], a->hit_iters, 0.5) * 1e6, "us");
            cmp_rec("hit_warm", sys_name[k], bin_name[b], "p99_us",
                    cmp_quantile(t[k], a->hit_iters, 0.99) * 1e6, "us");
            cmp_rec("hit_warm", sys_name[k], bin_name[b], "size", med_size, "B");
        }
    }
    for (int k = 0; k < N_KC; k++)
        kcache_store_close(ks[k]);
    fpe_close(c);

    /*
     * Cold: everything synced, then before each get the files it reads are
     * dropped from the page cache (posix_fadvise DONTNEED; no root needed),
     * and the get is a fresh process's: open, get, close. The same loop
     * without the drop gives the warm one-get-per-process figure.
     */
    sync_dir(a->workdir);
    double *t_open[N_KC], *t_get[N_KC], *t_close[N_KC];
    for (int k = 0; k < N_KC; k++) {
        t_open[k] = cmp_xmalloc(a->cold_iters * sizeof(double));
        t_get[k] = cmp_xmalloc(a->cold_iters * sizeof(double));
        t_close[k] = cmp_xmalloc(a->cold_iters * sizeof(double));
    }
    double *t_nt = cmp_xmalloc(a->cold_iters * sizeof(double));
    double *t_ntc = cmp_xmalloc(a->cold_iters * sizeof(double));
    /* The SQLite floor's time, and the KiB each system had read from the disk
     * (/proc/self/io): the measured reasons behind a slow first or cold hit. */
    double *t_sqf = cmp_xmalloc(a->cold_iters * sizeof(double));
    double *disk[N_SYS + 1];
    for (int k = 0; k <= N_SYS; k++)
        disk[k] = cmp_xmalloc(a->cold_iters * sizeof(double));
    for (int cold = 1; cold >= 0; cold--) {
        const char *group = cold ? "hit_cold" : "hit_open";
        for (int b = 0; b < N_BINS; b++) {
            size_t m = n_samples[b];
            if (!m)
                continue;
            for (size_t it = 0; it < a->cold_iters; it++) {
                const struct sample *x = &samples[b * a->per_bin + it % m];
                for (int r = 0; r < N_SYS; r++) {
                    int k = (int)((r + it) % N_SYS);
                    char path[4200];
                    double t0;
                    uint64_t d0 = 0;
                    if (k < N_KC) {
                        if (cold) {
                            cmp_drop_cache(kdb[k]);
                            cmp_drop_cache(kwal[k]);
                        }
                        d0 = cmp_disk_read_bytes();
                        t0 = cmp_now();
                        kcache_store *s2 = open_store(kdb[k], UINT64_MAX, kc_setting[k]);
                        double ta = cmp_now();
                        get_kcache(s2, x);
                        double tb = cmp_now();
                        kcache_store_close(s2);
                        t_open[k][it] = ta - t0;
                        t_get[k][it] = tb - ta;
                        t_close[k][it] = cmp_now() - tb;
                    } else if (k == SYS_FPE) {
                        kcache_key key = entry_key(x->index);
                        fpe_cache *c2 = open_fpe(dir, 0);
                        fpe_entry_path(c2, key.bytes, path, sizeof(path));
                        fpe_close(c2);
                        if (cold)
                            cmp_drop_cache(path);
                        d0 = cmp_disk_read_bytes();
                        t0 = cmp_now();
                        c2 = open_fpe(dir, 0);
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
                    t[k][it] = cmp_now() - t0;
                    disk[k][it] = (double)(cmp_disk_read_bytes() - d0) / KIB;
                }
                {
                    if (cold) {
                        cmp_drop_cache(sqf_db);
                        cmp_drop_cache(sqf_wal);
                    }
                    kcache_key key = entry_key(x->index);
                    void *data;
                    size_t size;
                    uint64_t d0 = cmp_disk_read_bytes();
                    double t0 = cmp_now();
                    sqf_first_hit(sqf_db, key.bytes, &data, &size);
                    t_sqf[it] = cmp_now() - t0;
                    disk[N_SYS][it] = (double)(cmp_disk_read_bytes() - d0) / KIB;
                    if (size != x->size || memcmp(data, x->bytes, size) != 0)
                        cmp_fail("sqlite floor: entry %llu read back wrong",
                                 (unsigned long long)x->index);
                    free(data);
                }
                if (cold) {
                    sync_dir(a->workdir); /* the touches kcache wrote */
                } else {
                    /* The same without recording the hit: what the touch costs. */
                    double t0 = cmp_now();
                    kcache_store *s2 = open_store(db, UINT64_MAX, kc_setting[0]);
                    get_kcache_flags(s2, x, KCACHE_GET_NO_TOUCH);
                    double tb = cmp_now();
                    kcache_store_close(s2);
                    t_nt[it] = cmp_now() - t0;
                    t_ntc[it] = cmp_now() - tb;
                }
            }
            for (int k = 0; k < N_KC; k++) {
                cmp_rec(group, sys_name[k], bin_name[b], "open_median_us",
                        cmp_quantile(t_open[k], a->cold_iters, 0.5) * 1e6, "us");
                cmp_rec(group, sys_name[k], bin_name[b], "get_median_us",
                        cmp_quantile(t_get[k], a->cold_iters, 0.5) * 1e6, "us");
                cmp_rec(group, sys_name[k], bin_name[b], "close_median_us",
                        cmp_quantile(t_close[k], a->cold_iters, 0.5) * 1e6, "us");
            }
            if (!cold) {
                cmp_rec(group, "kcache", bin_name[b], "no_touch_median_us",
                        cmp_quantile(t_nt, a->cold_iters, 0.5) * 1e6, "us");
                cmp_rec(group, "kcache", bin_name[b], "no_touch_close_median_us",
                        cmp_quantile(t_ntc, a->cold_iters, 0.5) * 1e6, "us");
            }
            for (int k = 0; k < N_SYS; k++) {
                cmp_rec(group, sys_name[k], bin_name[b], "median_us",
                        cmp_quantile(t[k], a->cold_iters, 0.5) * 1e6, "us");
                cmp_rec(group, sys_name[k], bin_name[b], "p99_us",
                        cmp_quantile(t[k], a->cold_iters, 0.99) * 1e6, "us");
            }
            cmp_rec(group, "sqlite floor", bin_name[b], "median_us",
                    cmp_quantile(t_sqf, a->cold_iters, 0.5) * 1e6, "us");
            cmp_rec(group, "sqlite floor", bin_name[b], "p99_us",
                    cmp_quantile(t_sqf, a->cold_iters, 0.99) * 1e6, "us");
            for (int k = 0; cold && k <= N_SYS; k++)
                cmp_rec(group, k < N_SYS ? sys_name[k] : "sqlite floor", bin_name[b],
                        "disk_read_kib_median", cmp_quantile(disk[k], a->cold_iters, 0.5), "KiB");
        }
    }
    for (int k = 0; k < N_SYS; k++)
        free(t[k]);
    for (int k = 0; k <= N_SYS; k++)
        free(disk[k]);
    free(t_sqf);
    for (int k = 0; k < N_KC; k++) {
        free(t_open[k]);
        free(t_get[k]);
        free(t_close[k]);
    }
    free(t_nt);
    free(t_ntc);

    /* Throughput: every entry in page cache, uniform random keys. The other
     * settings with one process (what decoding costs shows there already). */
    for (int k = 0; k < N_KC; k++) {
        cmp_warm_file(kdb[k]);
        cmp_warm_file(kwal[k]);
    }
    for (int procs = 1; procs <= 4; procs *= 2) {
        for (int k = 0; k < (procs == 1 ? N_KC : 1); k++)
            throughput(k, kdb[k], dir, n, procs, a->seconds);
        throughput(SYS_FPE, db, dir, n, procs, a->seconds);
    }
    for (int k = 1; k < N_KC; k++) { /* the rest uses the default's store only */
        unlink(kdb[k]);
        unlink(kwal[k]);
        unlink(kshm[k]);
    }

    /* Prune to half the bytes on disk. */
    {
        s = open_store(db, UINT64_MAX, kc_setting[0]);
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
        c = open_fpe(dir, 0);
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
        cmp_rec("prune", "file-per-entry", "to half", "disk_before", (double)fr.bytes_before,
                "B");
    }
    remove_tree(dir);
    unlink(db);
    unlink(wal);
    unlink(shm);

    /* Writing past a cap: on-disk size sampled as entries go in. */
    {
        const uint64_t cap = a->cap;
        s = open_store(db, cap, kc_setting[0]);
        c = open_fpe(dir, cap);
        uint64_t written = 0, i = 0, step = 0;
        double tk = 0, tf = 0, max_k = 0, max_f = 0;
        uint64_t puts = 0;
        /* Enough raw bytes that even compressed (kcache) they pass the cap
         * cap_factor times over. */
        const uint64_t to_write = (uint64_t)((double)(a->cap_factor * cap) * kc_ratio);
        uint64_t every = (to_write / (60 * KIB)) / 40 + 1;
        while (written < to_write) {
            uint64_t idx = UINT64_C(1) << 40 | i++;
            size_t sn = cmp_entry_size(idx);
            entry_bytes(idx, buf, sn);
            kcache_key k = entry_key(idx);
            double t0 = cmp_now();
            kc_put(s, idx, buf, sn);
            double t1 = cmp_now();
            if (fpe_put(c, k.bytes, buf, sn) != 0)
                cmp_fail("file-per-entry put failed");
            tf += cmp_now() - t1;
            tk += t1 - t0;
            written += sn;
            puts++;
            if (++step % every == 0) {
                double dk = (double)kc_disk(db);
                fpe_usage fu;
                fpe_disk_usage(dir, &fu);
                double df = (double)fu.apparent_bytes;
                char casename[32];
                snprintf(casename, sizeof(casename), "%.3f", (double)written / (double)cap);
                cmp_rec("cap_series", "kcache", casename, "disk_over_cap", dk / (double)cap,
                        "x");
                cmp_rec("cap_series", "file-per-entry", casename, "disk_over_cap",
                        df / (double)cap, "x");
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
        double end_k = (double)kc_disk(db), end_f = (double)fpe_bytes(dir);
        if (end_k > max_k)
            max_k = end_k;
        fpe_disk_usage(dir, &u);
        fpe_prune_result fr;
        c = open_fpe(dir, 0);
        fpe_prune(c, UINT64_MAX, &fr); /* counts only: the entry files' bytes */
        fpe_close(c);
        cmp_rec("cap", "file-per-entry", "end", "files_over_cap",
                (double)fr.bytes_after / (double)cap, "x");
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

    for (size_t j = 0; j < N_BINS * a->per_bin; j++)
        if (j % a->per_bin < n_samples[j / a->per_bin])
            free(samples[j].bytes);
    free(samples);
    free(buf);
    free(sizes);
    free(pool);
    remove_tree(a->workdir);
    return 0;
}
