/*
 * One process's first hit (open + get + close) and nothing else, for
 * instruction counts under callgrind: the machine is shared and
 * noisy, so where the open's cost goes is read from counts, not clocks.
 *
 *   profile_first_hit DB fill N SIZE   # N entries of SIZE bytes (keys 0..N-1)
 *   profile_first_hit DB hit I         # open, get key I, close
 *   valgrind --tool=callgrind profile_first_hit DB hit 5
 *   profile_first_hit DB time N        # N fresh handles, each open + get + close:
 *                                      # medians of each part, in microseconds
 *   profile_first_hit DB cold N        # the same, DB and its WAL dropped from
 *                                      # the page cache before each open
 *
 * Run "hit" once before profiling: the first open after "fill" also makes
 * the -wal and -shm files, which a steady-state hit does not.
 */
#include <kcache/store.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "profile_common.h"

static void key_of(kcache_key *k, int i)
{
    memset(k, 0, sizeof(*k));
    memcpy(k->bytes, &i, sizeof(i));
    k->bytes[31] = 7;
}

static int usage(void)
{
    fprintf(stderr, "usage: profile_first_hit DB fill N SIZE | profile_first_hit DB hit I | "
                    "profile_first_hit DB time|cold N\n");
    return 2;
}

/* Synced, then dropped from the page cache (no root needed). */
static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Wall time of the same thing, for a quick look; the counts above are what to trust. */
static int time_hits(const char *path, int n, int cold)
{
    char wal[4200];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    double *t = calloc(4 * (size_t)n, sizeof(double));
    if (!t)
        return 1;
    for (int i = 0; i < n; i++) {
        kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
        o.path = path;
        kcache_store *s = NULL;
        kcache_entry *e = NULL;
        kcache_key k;
        char err[256];
        key_of(&k, i % 5);
        if (cold) {
            drop_cache(path);
            drop_cache(wal);
        }
        double t0 = now_us();
        if (kcache_store_open(&s, &o, err, sizeof(err))) {
            fprintf(stderr, "profile_first_hit: %s\n", err);
            free(t);
            return 1;
        }
        double t1 = now_us();
        int rc = kcache_store_get(&e, s, &k, 0);
        double t2 = now_us();
        kcache_entry_free(e);
        kcache_store_close(s);
        double t3 = now_us();
        if (rc) {
            fprintf(stderr, "profile_first_hit: key %d is not in %s\n", i % 5, path);
            free(t);
            return 1;
        }
        t[i] = t1 - t0;
        t[n + i] = t2 - t1;
        t[2 * n + i] = t3 - t2;
        t[3 * n + i] = t3 - t0;
    }
    printf("open %.1f us  get %.1f us  close %.1f us  all %.1f us (medians of %d)\n",
           median(t, (size_t)n), median(t + n, (size_t)n), median(t + 2 * n, (size_t)n),
           median(t + 3 * n, (size_t)n), n);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    int fill = argc == 5 && !strcmp(argv[2], "fill");
    if (argc == 4 && (!strcmp(argv[2], "time") || !strcmp(argv[2], "cold")))
        return time_hits(argv[1], atoi(argv[3]) > 0 ? atoi(argv[3]) : 1, argv[2][0] == 'c');
    if (!fill && !(argc == 4 && !strcmp(argv[2], "hit")))
        return usage();
    kcache_store *s = profile_open("profile_first_hit", argv[1], 0);
    if (!s)
        return 1;
    int rc = 0;
    if (fill) {
        int n = atoi(argv[3]);
        size_t size = (size_t)strtoull(argv[4], NULL, 10);
        unsigned char *data = malloc(size ? size : 1);
        /* Compressible about as much as a CUBIN: 4 random bits a byte. */
        for (int i = 0; data && i < n && !rc; i++) {
            for (size_t j = 0; j < size; j++)
                data[j] = (unsigned char)(rand() % 16);
            kcache_entry e = {.version = KCACHE_ENTRY_VERSION, .kind = KCACHE_KIND_CUBIN,
                              .arch = "sm_90", .name = "x.cu", .data = data, .size = size};
            key_of(&e.key, i);
            rc = kcache_store_put(s, &e);
        }
        free(data);
    } else {
        kcache_key k;
        kcache_entry *e = NULL;
        key_of(&k, atoi(argv[3]));
        rc = kcache_store_get(&e, s, &k, 0);
        kcache_entry_free(e);
    }
    if (rc)
        fprintf(stderr, "profile_first_hit: %s\n", kcache_store_errmsg(s));
    kcache_store_close(s);
    return rc ? 1 : 0;
}
