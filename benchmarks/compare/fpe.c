/*
 * The file-per-entry cache of the comparison benchmark. See fpe.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fpe.h"

#include <blake2.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char fpe_magic[8] = {'K', 'C', 'F', 'P', 'E', '1', 0, 0};

struct fpe_cache {
    char *dir;
    uint64_t max_size;
    uint64_t total;  /* this process's running view of the file sizes */
    int total_known; /* total was set by a scan */
    unsigned tmp_seq;
};

int fpe_open(fpe_cache **out, const char *dir, uint64_t max_size)
{
    *out = NULL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -errno;
    fpe_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->dir = strdup(dir);
    if (!c->dir) {
        free(c);
        return -ENOMEM;
    }
    c->max_size = max_size;
    *out = c;
    return 0;
}

void fpe_close(fpe_cache *cache)
{
    if (!cache)
        return;
    free(cache->dir);
    free(cache);
}

static void hex_key(char out[2 * FPE_KEY_SIZE + 1], const uint8_t key[FPE_KEY_SIZE])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < FPE_KEY_SIZE; i++) {
        out[2 * i] = digits[key[i] >> 4];
        out[2 * i + 1] = digits[key[i] & 15];
    }
    out[2 * FPE_KEY_SIZE] = '\0';
}

void fpe_entry_path(const fpe_cache *cache, const uint8_t key[FPE_KEY_SIZE], char *buf,
                    size_t n)
{
    char hex[2 * FPE_KEY_SIZE + 1];
    hex_key(hex, key);
    snprintf(buf, n, "%s/%.2s/%.2s/%s", cache->dir, hex, hex + 2, hex);
}

static int read_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int fpe_get(fpe_cache *cache, const uint8_t key[FPE_KEY_SIZE], void **data, size_t *size)
{
    char path[4096];
    fpe_entry_path(cache, key, path, sizeof(path));
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 1 : -errno;
    int rc;
    uint8_t header[FPE_HEADER_SIZE];
    uint8_t *buf = NULL;
    rc = read_all(fd, header, sizeof(header));
    uint64_t n = 0;
    if (rc == 0) {
        memcpy(&n, header + 8, 8);
        if (memcmp(header, fpe_magic, 8) != 0 || n > (UINT64_C(1) << 34))
            rc = -EBADMSG;
    }
    if (rc == 0) {
        buf = malloc((size_t)n + 1);
        rc = buf ? read_all(fd, buf, (size_t)n) : -ENOMEM;
    }
    if (rc == 0) {
        uint8_t digest[32];
        blake2b(digest, buf, NULL, sizeof(digest), (size_t)n, 0);
        if (memcmp(digest, header + 16, 32) != 0)
            rc = -EBADMSG;
    }
    if (rc == 0) {
        /* Recording the use for LRU eviction: relatime would not. */
        struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
        futimens(fd, ts);
    }
    close(fd);
    if (rc == -EBADMSG || rc == -EIO) {
        /* Damaged or truncated by someone else: drop it and recompile. */
        unlink(path);
        free(buf);
        return 1;
    }
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *data = buf;
    *size = (size_t)n;
    return 0;
}

static int mkdirs_for(char *path)
{
    /* path is DIR/ab/cd/file: make DIR/ab and DIR/ab/cd. */
    char *last = strrchr(path, '/');
    if (!last)
        return -EINVAL;
    *last = '\0';
    char *mid = strrchr(path, '/');
    int rc = 0;
    if (mid) {
        *mid = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            rc = -errno;
        *mid = '/';
    }
    if (rc == 0 && mkdir(path, 0700) != 0 && errno != EEXIST)
        rc = -errno;
    *last = '/';
    return rc;
}

int fpe_put(fpe_cache *cache, const uint8_t key[FPE_KEY_SIZE], const void *data, size_t size)
{
    char path[4096], tmp[4200];
    fpe_entry_path(cache, key, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld-%u", path, (long)getpid(), cache->tmp_seq++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT) {
        int rc = mkdirs_for(tmp);
        if (rc)
            return rc;
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return -errno;
    uint8_t header[FPE_HEADER_SIZE];
    uint64_t n = size;
    memcpy(header, fpe_magic, 8);
    memcpy(header + 8, &n, 8);
    blake2b(header + 16, data, NULL, 32, size, 0);
    int rc = write_all(fd, header, sizeof(header));
    if (rc == 0)
        rc = write_all(fd, data, size);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    struct stat old;
    uint64_t replaced = stat(path, &old) == 0 ? (uint64_t)old.st_size : 0;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return rc;
    }
    if (cache->max_size) {
        if (!cache->total_known) {
            fpe_prune_result r;
            return fpe_prune(cache, cache->max_size, &r);
        }
        cache->total += FPE_HEADER_SIZE + size - replaced;
        if (cache->total > cache->max_size) {
            fpe_prune_result r;
            return fpe_prune(cache, cache->max_size, &r);
        }
    }
    return 0;
}

struct fpe_file {
    char *path;
    uint64_t size;
    struct timespec atime;
};

struct fpe_list {
    struct fpe_file *v;
    size_t n, cap;
};

static void free_list(struct fpe_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].path);
    free(l->v);
}

/* Calls itself for the two fan-out levels; collects regular files (when l) and usage. */
static int walk(const char *dir, int depth, struct fpe_list *l, fpe_usage *u)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* removed by another process meanwhile */
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (S_ISDIR(st.st_mode)) {
            if (u) {
                u->dirs++;
                u->apparent_bytes += (uint64_t)st.st_size;
                u->allocated_bytes += (uint64_t)st.st_blocks * 512;
            }
            if (depth < 2)
                rc = walk(path, depth + 1, l, u);
            continue;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        if (u) {
            u->files++;
            u->apparent_bytes += (uint64_t)st.st_size;
            u->allocated_bytes += (uint64_t)st.st_blocks * 512;
        }
        if (l) {
            if (l->n == l->cap) {
                size_t cap = l->cap ? 2 * l->cap : 1024;
                struct fpe_file *v = realloc(l->v, cap * sizeof(*v));
                if (!v) {
                    rc = -ENOMEM;
                    break;
                }
                l->v = v;
                l->cap = cap;
            }
            char *p = strdup(path);
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            l->v[l->n++] = (struct fpe_file){p, (uint64_t)st.st_size, st.st_atim};
        }
    }
    closedir(d);
    return rc;
}

static int cmp_atime(const void *a, const void *b)
{
    const struct fpe_file *x = a, *y = b;
    if (x->atime.tv_sec != y->atime.tv_sec)
        return x->atime.tv_sec < y->atime.tv_sec ? -1 : 1;
    return (x->atime.tv_nsec > y->atime.tv_nsec) - (x->atime.tv_nsec < y->atime.tv_nsec);
}

int fpe_prune(fpe_cache *cache, uint64_t max_size, fpe_prune_result *out)
{
    struct fpe_list l = {0};
    memset(out, 0, sizeof(*out));
    int rc = walk(cache->dir, 0, &l, NULL);
    if (rc) {
        free_list(&l);
        return rc;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < l.n; i++)
        total += l.v[i].size;
    out->scanned = l.n;
    out->bytes_before = total;
    if (total > max_size) {
        qsort(l.v, l.n, sizeof(*l.v), cmp_atime);
        for (size_t i = 0; i < l.n && total > max_size; i++) {
            if (unlink(l.v[i].path) == 0 || errno == ENOENT) {
                total -= l.v[i].size;
                out->evicted++;
            }
        }
    }
    out->bytes_after = total;
    cache->total = total;
    cache->total_known = 1;
    free_list(&l);
    return 0;
}

int fpe_disk_usage(const char *dir, fpe_usage *out)
{
    memset(out, 0, sizeof(*out));
    struct stat st;
    if (stat(dir, &st) == 0) {
        out->dirs = 1;
        out->apparent_bytes = (uint64_t)st.st_size;
        out->allocated_bytes = (uint64_t)st.st_blocks * 512;
    }
    return walk(dir, 0, NULL, out);
}
