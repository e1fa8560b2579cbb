/*
 * Warm hits on one open handle (kcache_store_get + kcache_entry_free) and
 * nothing else, for callgrind: what a hit costs outside the codec is read
 * from instruction counts, the machine being shared and noisy.
 *
 *   profile_warm_hit DB fill N SIZE CUBIN...  # N entries of SIZE bytes: the CUBINs'
 *                                             # 16-byte instruction words in random order
 *   profile_warm_hit DB get K                 # K hits, cycling over the first 80 keys
 *   valgrind --tool=callgrind --toggle-collect=measured profile_warm_hit DB get 2000
 *   profile_warm_hit DB time K R              # R rounds of K hits: median microseconds a hit
 *
 * The bytes are what benchmarks/compare stores (sm_90 words shuffled), so the
 * default lz4 compresses them about as it does there (~2.2x).
 */
#include <kcache/store.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profile_common.h"

static int usage(void)
{
    fprintf(stderr, "usage: profile_warm_hit DB fill N SIZE CUBIN... | profile_warm_hit DB get K | "
                    "profile_warm_hit DB time K R\n");
    return 2;
}

static uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void key_of(kcache_key *k, uint64_t i)
{
    uint64_t st = i * UINT64_C(2654435761) + 99;
    for (size_t j = 0; j < sizeof(k->bytes); j += 8) {
        uint64_t v = splitmix(&st);
        memcpy(k->bytes + j, &v, 8);
    }
}

/* The CUBINs' bytes, whole 16-byte words only. */
static uint8_t *load_words(char **paths, int n, size_t *words)
{
    uint8_t *all = NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f)
            return NULL;
        uint8_t buf[1 << 16];
        size_t got;
        while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
            uint8_t *g = realloc(all, total + got);
            if (!g) {
                fclose(f);
                return NULL;
            }
            all = g;
            memcpy(all + total, buf, got);
            total += got;
        }
        fclose(f);
        total -= total % 16;
    }
    *words = total / 16;
    return all;
}

static int fill(kcache_store *s, int n, size_t size, char **cubins, int n_cubins)
{
    size_t words;
    uint8_t *pool = load_words(cubins, n_cubins, &words);
    uint8_t *data = malloc(size ? size : 1);
    int rc = !pool || !data || words < 256;
    for (int i = 0; !rc && i < n; i++) {
        uint64_t st = (uint64_t)i * UINT64_C(1000003) + 5;
        for (size_t pos = 0; pos < size; pos += 16) {
            size_t w = (size_t)(splitmix(&st) % words);
            memcpy(data + pos, pool + w * 16, size - pos < 16 ? size - pos : 16);
        }
        memcpy(data, &i, size < sizeof(i) ? size : sizeof(i));
        kcache_entry e = {.version = KCACHE_ENTRY_VERSION, .kind = KCACHE_KIND_CUBIN,
                          .arch = "sm_90", .name = "block_sort.cu", .data = data, .size = size};
        key_of(&e.key, (uint64_t)i);
        rc = kcache_store_put(s, &e);
    }
    free(data);
    free(pool);
    return rc;
}

/* How many entries DB holds: keys 0.. until the first miss (not counted as a hit). */
static int count_keys(kcache_store *s)
{
    int n = 0;
    for (;; n++) {
        kcache_key k;
        kcache_entry *e = NULL;
        key_of(&k, (uint64_t)n);
        if (kcache_store_get(&e, s, &k, KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA))
            return n;
        kcache_entry_free(e);
    }
}

/* One hit on key i of the first n_keys, and its time when t is given. */
static int hit_once(kcache_store *s, int i, double *t)
{
    kcache_key key;
    kcache_entry *e = NULL;
    key_of(&key, (uint64_t)i);
    double t0 = t ? now_us() : 0;
    int rc = kcache_store_get(&e, s, &key, KCACHE_GET_DEFAULT);
    kcache_entry_free(e);
    if (t)
        *t = now_us() - t0;
    return rc;
}

/* Never inlined nor folded into another: callgrind's --toggle-collect=measured
 * counts these hits and no others. */
__attribute__((noinline, noipa)) static int measured(kcache_store *s, int n_keys, int k, double *t)
{
    int rc = 0;
    for (int i = 0; !rc && i < k; i++)
        rc = hit_once(s, i % n_keys, t ? &t[i] : NULL);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return usage();
    const char *mode = argv[2];
    int is_fill = !strcmp(mode, "fill") && argc >= 6;
    int is_get = !strcmp(mode, "get") && argc == 4;
    int is_time = !strcmp(mode, "time") && argc == 5;
    if (!is_fill && !is_get && !is_time)
        return usage();
    kcache_store *s = profile_open("profile_warm_hit", argv[1], 0);
    if (!s)
        return 1;
    int rc = 0;
    if (is_fill) {
        rc = fill(s, atoi(argv[3]), (size_t)strtoull(argv[4], NULL, 10), argv + 5, argc - 5);
    } else {
        /* benchmarks/compare hits 16 entries of each of its 5 size bins in turn:
         * as many distinct keys make as many touches for the hit log. */
        int n_keys = count_keys(s), k = atoi(argv[3]);
        if (n_keys > 80)
            n_keys = 80;
        int rounds = is_time ? atoi(argv[4]) : 1;
        double *t = is_time ? calloc((size_t)k, sizeof(double)) : NULL;
        double *med = is_time ? calloc((size_t)rounds, sizeof(double)) : NULL;
        rc = n_keys < 1 || k < 1 || rounds < 1 || (is_time && (!t || !med));
        /* Each key once: the pages are in, the statement ready. */
        for (int i = 0; !rc && i < n_keys; i++)
            rc = hit_once(s, i, NULL);
        for (int r = 0; !rc && r < rounds; r++) {
            rc = measured(s, n_keys, k, t);
            if (!rc && t) {
                cmp_sort(t, (size_t)k);
                med[r] = t[k / 2];
            }
        }
        if (!rc && med) {
            cmp_sort(med, (size_t)rounds);
            printf("%.3f\n", med[rounds / 2]);
        }
        free(t);
        free(med);
    }
    if (rc)
        fprintf(stderr, "profile_warm_hit: %s\n", kcache_store_errmsg(s));
    kcache_store_close(s);
    return rc ? 1 : 0;
}
