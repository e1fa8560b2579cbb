/*
 * A plain main() for the fuzz targets, used when kcache is not built with
 * -Dfuzzing=true: it feeds every file named on the command line, and every
 * file directly inside every directory named there, to
 * LLVMFuzzerTestOneInput() once, so that the seed corpus and every saved
 * crash input replay under `meson test --suite fuzz` with any compiler.
 *
 * Each input is copied into a buffer of exactly its size, so that a read one
 * byte past the end is caught by AddressSanitizer as it would be by libFuzzer.
 * Arguments that start with '-' (libFuzzer options) are ignored. Exit status:
 * 0 when every input ran, 1 when an argument could not be read or named no
 * input at all (a replay of nothing must not pass); a crash is a crash.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz driver: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, size = 0;
    uint8_t *buf = malloc(cap), *exact = NULL;
    int rc = -1;
    if (!buf)
        goto out;
    for (;;) {
        size += fread(buf + size, 1, cap - size, f);
        if (size < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (!bigger)
            goto out;
        buf = bigger;
        cap *= 2;
    }
    if (ferror(f)) {
        fprintf(stderr, "fuzz driver: cannot read %s\n", path);
        goto out;
    }
    /* Exactly sized: nothing readable past the input's last byte. */
    exact = malloc(size ? size : 1);
    if (!exact)
        goto out;
    memcpy(exact, buf, size);
    LLVMFuzzerTestOneInput(exact, size);
    rc = 0;
out:
    if (rc && (!buf || !exact) && !ferror(f))
        fprintf(stderr, "fuzz driver: out of memory reading %s\n", path);
    free(exact);
    free(buf);
    fclose(f);
    return rc;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs the regular files inside dir, in name order so that a run is repeatable. */
static int run_dir(const char *dir, long *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz driver: cannot open directory %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **more = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof(*names));
            if (!more) {
                rc = -1;
                break;
            }
            names = more;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            rc = -1;
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(names[i]) != 0)
                rc = -1;
            else
                (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    long count = 0;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (argv[i][0] == '-')
            continue;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz driver: no such file or directory: %s\n", argv[i]);
            failed = 1;
        } else if (S_ISDIR(st.st_mode)) {
            failed |= run_dir(argv[i], &count) != 0;
        } else if (run_file(argv[i]) != 0) {
            failed = 1;
        } else {
            count++;
        }
    }
    printf("fuzz driver: %ld input(s) ran\n", count);
    if (count == 0) {
        fprintf(stderr, "usage: %s FILE|DIR...: runs each input once; no input was given\n",
                argv[0]);
        return 1;
    }
    return failed;
}
