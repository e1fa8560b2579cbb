/*
 * One process's first hit (open + get + close) and nothing else, for
 * instruction counts under callgrind (issue 14): the machine is shared and
 * noisy, so where the open's cost goes is read from counts, not clocks.
 *
 *   profile_first_hit DB fill N SIZE   # N entries of SIZE bytes (keys 0..N-1)
 *   profile_first_hit DB hit I         # open, get key I, close
 *   valgrind --tool=callgrind profile_first_hit DB hit 5
 *
 * Run "hit" once before profiling: the first open after "fill" also makes
 * the -wal and -shm files, which a steady-state hit does not.
 */
#include <kcache/store.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void key_of(kcache_key *k, int i)
{
    memset(k, 0, sizeof(*k));
    memcpy(k->bytes, &i, sizeof(i));
    k->bytes[31] = 7;
}

static int usage(void)
{
    fprintf(stderr, "usage: profile_first_hit DB fill N SIZE | profile_first_hit DB hit I\n");
    return 2;
}

int main(int argc, char **argv)
{
    int fill = argc == 5 && !strcmp(argv[2], "fill");
    if (!fill && !(argc == 4 && !strcmp(argv[2], "hit")))
        return usage();
    kcache_store_options o = KCACHE_STORE_OPTIONS_INIT;
    o.path = argv[1];
    kcache_store *s = NULL;
    char err[256];
    if (kcache_store_open(&s, &o, err, sizeof(err))) {
        fprintf(stderr, "profile_first_hit: %s\n", err);
        return 1;
    }
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
