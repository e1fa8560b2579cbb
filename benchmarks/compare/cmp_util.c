/*
 * Helpers shared by the comparison benchmarks. See cmp_util.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cmp_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void cmp_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program_invocation_short_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void *cmp_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        cmp_fail("out of memory (%zu bytes)", n);
    return p;
}

double cmp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t cmp_splitmix(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void cmp_fill_random(void *dst, size_t n, uint64_t seed)
{
    uint8_t *p = dst;
    uint64_t st = seed;
    while (n >= 8) {
        uint64_t v = cmp_splitmix(&st);
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = cmp_splitmix(&st);
        memcpy(p, &v, n);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void cmp_sort(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
}

double cmp_quantile(double *v, size_t n, double q)
{
    if (!n)
        return NAN;
    cmp_sort(v, n);
    if (q == 0.5 && n % 2 == 0)
        return (v[n / 2 - 1] + v[n / 2]) / 2;
    size_t i = (size_t)ceil(q * (double)n);
    if (i > 0)
        i--;
    return v[i < n ? i : n - 1];
}

size_t cmp_entry_size(uint64_t i)
{
    /* Log-normal, median 40 KiB, sigma 1, clamped to 4 KiB .. 1 MiB. */
    uint64_t st = i * UINT64_C(7919) + 17;
    double u1 = ((double)(cmp_splitmix(&st) >> 11) + 1) / 9007199254740993.0;
    double u2 = (double)(cmp_splitmix(&st) >> 11) / 9007199254740992.0;
    double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
    double s = 40.0 * KIB * exp(z);
    if (s < 4 * KIB)
        s = 4 * KIB;
    if (s > MIB)
        s = MIB;
    return (size_t)s;
}

/* Words per run copied from the pool: 1 (single words in random order) makes
 * zstd compress the set 3.5-3.9x (level 3-6), about as it compresses each corpus CUBIN;
 * longer runs compress better (2: 4.6x, 6: 5.9x). */
#ifndef RUN_WORDS
#define RUN_WORDS 1
#endif

void cmp_entry_bytes(uint64_t i, uint8_t *out, size_t size, const uint8_t *pool,
                     size_t pool_words)
{
    uint64_t st = i * UINT64_C(1000003) + 5;
    size_t pos = 0;
    size_t start = (size_t)(cmp_splitmix(&st) % pool_words);
    while (pos < size) {
        size_t w = start;
        start = (size_t)(cmp_splitmix(&st) % pool_words);
        size_t n = size - pos < 16 ? size - pos : 16;
        memcpy(out + pos, pool + w * 16, n);
        pos += n;
        /* Short runs keep real instruction pairs together; their length sets
         * how well zstd compresses the result (see RUN_WORDS). */
        for (int k = 1; k < RUN_WORDS && pos < size; k++) {
            w = (w + 1) % pool_words;
            n = size - pos < 16 ? size - pos : 16;
            memcpy(out + pos, pool + w * 16, n);
            pos += n;
        }
    }
    memcpy(out, &i, size < 8 ? size : 8);
}

void cmp_fmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (r < 0 || (size_t)r >= n)
        cmp_fail("a path or command is too long (%.60s...)", buf);
}

int cmp_load_file(const char *path, uint8_t **out, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = cmp_xmalloc(n + 1);
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *size = n;
    return 0;
}

void cmp_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
        cmp_fail("cannot write %s: %s", path, strerror(errno));
}

uint64_t cmp_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

uint64_t cmp_file_blocks(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

void cmp_drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    /* Dirty pages are not dropped: callers sync first. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

void cmp_warm_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    static char buf[1 << 20];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    close(fd);
}

static FILE *json;
static int n_recs;

void cmp_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_str(const char *s)
{
    cmp_json_string(json, s);
}

static char *notes[64];
static size_t n_notes;

void cmp_json_open(const char *path, const char *benchmark, int quick)
{
    json = fopen(path, "w");
    if (!json)
        cmp_fail("cannot write %s: %s", path, strerror(errno));
    fprintf(json, "{\"benchmark\": \"%s\", \"mode\": \"%s\", \"time\": %lld,\n \"records\": [\n",
            benchmark, quick ? "quick" : "full", (long long)time(NULL));
}

void cmp_rec(const char *group, const char *system, const char *casename, const char *metric,
             double value, const char *unit)
{
    if (!json)
        return;
    fputs(n_recs++ ? ",\n  {\"group\": " : "  {\"group\": ", json);
    json_str(group);
    fputs(", \"system\": ", json);
    json_str(system);
    fputs(", \"case\": ", json);
    json_str(casename);
    fputs(", \"metric\": ", json);
    json_str(metric);
    fputs(", \"value\": ", json);
    if (isnan(value) || isinf(value))
        fputs("null", json);
    else
        fprintf(json, "%.9g", value);
    fputs(", \"unit\": ", json);
    json_str(unit);
    fputc('}', json);
    fflush(json);
    fprintf(stderr, "  %-10s %-14s %-22s %-16s %14.6g %s\n", group, system, casename, metric,
            value, unit);
}

void cmp_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) >= 0 && n_notes < sizeof(notes) / sizeof(notes[0]))
        notes[n_notes++] = s;
    else
        free(s);
    va_end(ap);
}

void cmp_json_close(void)
{
    if (!json)
        return;
    fputs("\n ],\n \"notes\": [", json);
    for (size_t i = 0; i < n_notes; i++) {
        fputs(i ? ", " : "", json);
        json_str(notes[i]);
        free(notes[i]);
    }
    fputs("]}\n", json);
    if (fclose(json) != 0)
        cmp_fail("cannot write the JSON file");
    json = NULL;
}

uint64_t cmp_disk_read_bytes(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    if (!f)
        return 0;
    char line[128];
    unsigned long long v = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "read_bytes: %llu", &v) == 1)
            break;
    fclose(f);
    return (uint64_t)v;
}
