/*
 * Puts and a prune and nothing else, for instruction counts under callgrind
 * and for perf: the machine is shared and noisy, so where
 * a put's and a prune's time goes is read from counts, not clocks.
 *
 *   profile_writes DB fill N [POOL.cubin...]      # N puts, one at a time
 *   profile_writes DB batch N B [POOL.cubin...]   # N puts, B per batch
 *   profile_writes DB prune PERCENT               # prune to PERCENT of the stored bytes
 *
 * Entries are as benchmarks/compare's synthetic set: sizes log-normal around
 * 40 KiB (4 KiB .. 1 MiB), bytes made of 16-byte words of the CUBINs given
 * (random nibbles without any), so that zstd works as hard as on real ones.
 * Keys have key material, so that `kcache export` and `kcache import` can
 * be timed on the store. The wall time of the timed part goes to stderr.
 */
#include <blake2.h>
#include <kcache/store.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profile_common.h"

static uint8_t *pool;
static size_t pool_words;

static void load_pool(char **files, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(files[i], "rb");
        if (!f) {
            fprintf(stderr, "profile_writes: cannot read %s\n", files[i]);
            exit(1);
        }
        uint8_t buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
            pool = realloc(pool, total + got);
            if (!pool)
                exit(1);
            memcpy(pool + total, buf, got);
            total += got;
        }
        fclose(f);
    }
    if (total < 4096) {
        total = 1 << 16;
        pool = realloc(pool, total);
        if (!pool)
            exit(1);
        uint64_t st = 1;
        for (size_t j = 0; j < total; j++)
            pool[j] = (uint8_t)(cmp_splitmix(&st) & 15);
    }
    pool_words = total / 16;
}

/* Keys as kcache makes them, BLAKE2b-256 of key material, so that a bundle
 * exported from this store can be imported (an import recomputes every key). */
static char material[64];

static void entry_of(kcache_entry *e, uint64_t i, const uint8_t *data, size_t size)
{
    *e = (kcache_entry)KCACHE_ENTRY_INIT;
    snprintf(material, sizeof(material), "profile_writes entry %llu", (unsigned long long)i);
    blake2b(e->key.bytes, material, NULL, sizeof(e->key.bytes), strlen(material), 0);
    e->key_material = material;
    e->key_material_size = strlen(material);
    e->kind = KCACHE_KIND_CUBIN;
    e->arch = "sm_90";
    e->name = "bench.cu";
    e->toolchain = "bench";
    e->data = data;
    e->size = size;
    e->compile_ns = 1000000;
}

static int usage(void)
{
    fprintf(stderr, "usage: profile_writes DB fill N [POOL...] | profile_writes DB batch N B "
                    "[POOL...] | profile_writes DB prune PERCENT\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return usage();
    const char *mode = argv[2];
    int batch = !strcmp(mode, "batch");
    if (strcmp(mode, "fill") && !batch && strcmp(mode, "prune"))
        return usage();
    if (batch && argc < 5)
        return usage();
    kcache_store *s = profile_open("profile_writes", argv[1], UINT64_MAX);
    if (!s)
        return 1;
    int rc = 0;
    double t0 = cmp_now();
    if (!strcmp(mode, "prune")) {
        kcache_stats *st = NULL;
        rc = kcache_store_stats(&st, s);
        kcache_prune_options po = KCACHE_PRUNE_OPTIONS_INIT;
        po.max_size = rc ? 0 : st->stored_bytes / 100 * strtoull(argv[3], NULL, 10);
        kcache_stats_free(st);
        kcache_prune_result pr = KCACHE_PRUNE_RESULT_INIT;
        t0 = cmp_now();
        if (!rc)
            rc = kcache_store_prune(&pr, s, &po);
        double t = cmp_now() - t0;
        fprintf(stderr, "prune: %llu evicted in %.1f ms (%.1f us each)\n",
                (unsigned long long)pr.evicted, t * 1e3,
                pr.evicted ? t * 1e6 / (double)pr.evicted : 0.0);
    } else {
        uint64_t n = strtoull(argv[3], NULL, 10);
        int first_pool = batch ? 5 : 4;
        load_pool(argv + first_pool, argc - first_pool);
        uint8_t *data = malloc(1048576);
        double timed = 0;
        kcache_batch *b = NULL;
        if (batch) {
            kcache_batch_options bo = KCACHE_BATCH_OPTIONS_INIT;
            bo.max_entries = (size_t)strtoull(argv[4], NULL, 10);
            rc = kcache_batch_new(&b, s, &bo);
        }
        for (uint64_t i = 0; data && i < n && !rc; i++) {
            size_t size = cmp_entry_size(i);
            cmp_entry_bytes(i, data, size, pool, pool_words);
            kcache_entry e;
            entry_of(&e, i, data, size);
            t0 = cmp_now();
            rc = b ? kcache_batch_put(b, &e) : kcache_store_put(s, &e);
            if (!rc && b && i + 1 == n)
                rc = kcache_batch_commit(b);
            timed += cmp_now() - t0;
        }
        kcache_batch_free(b);
        free(data);
        fprintf(stderr, "%s: %llu puts in %.1f ms (%.0f puts/s)\n", mode,
                (unsigned long long)n, timed * 1e3, (double)n / timed);
    }
    if (rc)
        fprintf(stderr, "profile_writes: %s\n", kcache_store_errmsg(s));
    kcache_store_close(s);
    free(pool);
    return rc ? 1 : 0;
}
