/*
 * Checking a remembered include closure. Learnt from ccache's direct mode
 * (its manifests record each include file's path, size, mtime, ctime and
 * digest, and refuse to trust a file modified too close to the compile);
 * written for kcache's own resolution, which also records what was NOT found:
 * a header that appears earlier on the search path changes the compile as
 * surely as an edit does.
 *
 * A closure holds when, for every path the resolution looked at:
 *   - nothing was there and nothing (no regular file) is there now;
 *   - a toolkit header was there and the same file (device, inode, size,
 *     mtime, ctime) is there now (toolkit headers are keyed by the toolkit's
 *     identity, not by content);
 *   - a user file was there and either the same file is there now and its
 *     timestamps were not too recent to trust when it was read, or the file
 *     there now has the digest recorded (read and hashed: only what changed).
 * ctime cannot be set from user space, so an edit that restores size and
 * mtime still shows. An edit within one timestamp tick of the read can leave
 * both times as they were: a file whose mtime or ctime is within
 * KC_IDENTITY_RACY_NS of the moment it was read is always hashed, until a
 * later check sees it old enough and writes the closure back.
 *
 * An absent path may be vouched for by the nearest directory above it that
 * exists (a DIR probe, recorded before it): while that directory's identity
 * holds and is old enough to trust, no entry was added, removed or renamed in
 * it, so the path is still absent without a stat of its own. This keeps the
 * many names toolkit headers look for in user directories at one stat per
 * directory on a hit.
 *
 * Encoding (all little endian): "KCM3", count u32, then per probe: state u8,
 * path length u32, path bytes; for an absent path the voucher (1 + index of a
 * DIR probe, or 0) u32; for a file, toolkit header or directory dev, ino,
 * size u64, mtime, ctime i64, and for a file its digest. When the files were
 * read is kept beside it (the store shares one closure between kernels).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile/manifest.h"

static int put_u64(kc_buf *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    return kc_buf_append(b, x, 8);
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int put_probe(kc_buf *b, const kc_probe *p)
{
    uint8_t state = (uint8_t)p->state;
    size_t n = strlen(p->path);
    if (kc_buf_append(b, &state, 1) || kc_buf_append_u32(b, (uint32_t)n) ||
        kc_buf_append(b, p->path, n))
        return KCACHE_ENOMEM;
    if (p->state == KC_PROBE_ABSENT)
        return kc_buf_append_u32(b, p->vouch) ? KCACHE_ENOMEM : 0;
    if (put_u64(b, p->dev) || put_u64(b, p->ino) || put_u64(b, p->size) ||
        put_u64(b, (uint64_t)p->mtime_ns) || put_u64(b, (uint64_t)p->ctime_ns))
        return KCACHE_ENOMEM;
    if (p->state == KC_PROBE_FILE && kc_buf_append(b, p->digest, KC_DIGEST_SIZE))
        return KCACHE_ENOMEM;
    return 0;
}

static int put_header(kc_buf *b, uint32_t n)
{
    b->size = 0;
    if (kc_buf_append(b, "KCM3", 4) || kc_buf_append_u32(b, n))
        return KCACHE_ENOMEM;
    return 0;
}

int kc_manifest_encode(kc_buf *out, const kc_probe *probes, size_t n)
{
    if (n > UINT32_MAX || put_header(out, (uint32_t)n))
        return KCACHE_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (put_probe(out, &probes[i]))
            return KCACHE_ENOMEM;
    return 0;
}

/* Reads one probe at *off; its path points into a copy in pathbuf. 0, or -1 if it does not parse. */
static int get_probe(const uint8_t *p, size_t size, size_t *off, kc_probe *q, char *pathbuf,
                     size_t pathbuf_size)
{
    size_t o = *off;
    if (size - o < 5)
        return -1;
    q->state = p[o];
    uint32_t n = kc_read_u32(p + o + 1);
    o += 5;
    if (size - o < n || n >= pathbuf_size || q->state > KC_PROBE_DIR)
        return -1;
    memcpy(pathbuf, p + o, n);
    pathbuf[n] = '\0';
    q->path = pathbuf;
    o += n;
    if (q->state == KC_PROBE_ABSENT) {
        if (size - o < 4)
            return -1;
        q->vouch = kc_read_u32(p + o);
        o += 4;
    } else {
        if (size - o < 40)
            return -1;
        q->dev = get_u64(p + o);
        q->ino = get_u64(p + o + 8);
        q->size = get_u64(p + o + 16);
        q->mtime_ns = (int64_t)get_u64(p + o + 24);
        q->ctime_ns = (int64_t)get_u64(p + o + 32);
        o += 40;
        if (q->state == KC_PROBE_FILE) {
            if (size - o < KC_DIGEST_SIZE)
                return -1;
            memcpy(q->digest, p + o, KC_DIGEST_SIZE);
            o += KC_DIGEST_SIZE;
        }
    }
    *off = o;
    return 0;
}

/*
 * Directories opened once per check, so that each probe is one fstatat() of a
 * base name: a stat() of a full path walks every component again, and on a
 * deep tree (CuPy's CCCL is 15 levels down) the walk was most of a hit.
 */
struct dirs {
    char **names;
    size_t *lens;
    int *fds;
    size_t cap, n;
    size_t last; /* the slot used last: consecutive probes mostly share a directory */
};

static uint64_t hash_dir(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* An fd for the directory part of path (O_PATH), or -1 if it does not open; -2: no memory. */
static int dir_fd(struct dirs *d, const char *path, size_t n)
{
    if (d->cap && d->names[d->last] && d->lens[d->last] == n &&
        !memcmp(d->names[d->last], path, n))
        return d->fds[d->last];
    if (2 * (d->n + 1) > d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        char **names = kc_calloc(cap, sizeof(*names));
        size_t *lens = kc_calloc(cap, sizeof(*lens));
        int *fds = kc_calloc(cap, sizeof(*fds));
        if (!names || !fds || !lens) {
            free(names);
            free(lens);
            free(fds);
            return -2;
        }
        for (size_t i = 0; i < d->cap; i++) {
            if (!d->names[i])
                continue;
            size_t j = hash_dir(d->names[i], d->lens[i]) & (cap - 1);
            while (names[j])
                j = (j + 1) & (cap - 1);
            names[j] = d->names[i];
            lens[j] = d->lens[i];
            fds[j] = d->fds[i];
        }
        free(d->names);
        free(d->lens);
        free(d->fds);
        d->names = names;
        d->lens = lens;
        d->fds = fds;
        d->cap = cap;
        d->last = 0;
    }
    size_t i = hash_dir(path, n) & (d->cap - 1);
    for (; d->names[i]; i = (i + 1) & (d->cap - 1))
        if (d->lens[i] == n && !memcmp(d->names[i], path, n)) {
            d->last = i;
            return d->fds[i];
        }
    if (!(d->names[i] = kc_memdup(path, n)))
        return -2;
    d->lens[i] = n;
    d->last = i;
    d->fds[i] = open(n ? d->names[i] : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d->fds[i] < 0)
        d->fds[i] = -1;
    d->n++;
    return d->fds[i];
}

static void dirs_close(struct dirs *d)
{
    for (size_t i = 0; i < d->cap; i++) {
        if (d->names[i] && d->fds[i] >= 0)
            close(d->fds[i]);
        free(d->names[i]);
    }
    free(d->names);
    free(d->lens);
    free(d->fds);
}

/* stat() of q->path through its directory's fd. 0, -1 (no such file), -2 (no memory). */
static int stat_probe(struct dirs *d, const char *path, struct stat *st)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return stat(path, st) == 0 ? 0 : -1;
    int fd = dir_fd(d, path, (size_t)(slash - path));
    if (fd == -2)
        return -2;
    if (fd < 0)
        return -1;
    return fstatat(fd, slash + 1, st, 0) == 0 ? 0 : -1;
}

/* 1: the path holds what q recorded; 0: it does not; *hashed: it took a read to tell. */
static int probe_holds(struct dirs *d, kc_probe *q, int64_t recorded_at, int *hashed)
{
    struct stat st;
    int rc = stat_probe(d, q->path, &st);
    if (rc == -2)
        return KCACHE_ENOMEM;
    if (rc != 0 || !S_ISREG(st.st_mode))
        return q->state == KC_PROBE_ABSENT;
    if (q->state == KC_PROBE_ABSENT)
        return 0;
    kc_probe now = *q;
    kc_identity_of(&now, &st);
    int same = kc_identity_same(&now, q);
    if (q->state == KC_PROBE_TOOLKIT)
        return same;
    if (same && kc_identity_trusted(q, recorded_at))
        return 1;
    if (now.size != q->size)
        return 0; /* other bytes for certain: no need to read them */
    char *text = NULL;
    size_t size = 0;
    kc_probe read_as;
    memset(&read_as, 0, sizeof(read_as));
    if (kc_identity_read(q->path, &text, &size, &read_as) != 0)
        return 0;
    free(text);
    *hashed = 1;
    if (memcmp(read_as.digest, q->digest, KC_DIGEST_SIZE) != 0)
        return 0;
    /* The bytes recorded, under the identity they were just read with. */
    q->dev = read_as.dev;
    q->ino = read_as.ino;
    q->size = read_as.size;
    q->mtime_ns = read_as.mtime_ns;
    q->ctime_ns = read_as.ctime_ns;
    return 1;
}

/*
 * A DIR probe: *vouches when the directory is the one recorded, unchanged and
 * old enough to trust, so that no entry appeared in it since. q takes the
 * identity seen now, for a closure written back (one that never matches when
 * it is no directory now). *changed when it does not vouch though it exists.
 */
static int dir_holds(struct dirs *d, kc_probe *q, int64_t recorded_at, int *vouches,
                     int *changed)
{
    struct stat st;
    int rc = stat_probe(d, q->path, &st);
    if (rc == -2)
        return KCACHE_ENOMEM;
    kc_probe now = *q;
    if (rc == 0 && S_ISDIR(st.st_mode)) {
        kc_identity_of(&now, &st);
    } else {
        now.dev = now.ino = now.size = 0;
        now.mtime_ns = now.ctime_ns = 0;
    }
    *vouches = rc == 0 && kc_identity_same(&now, q) && kc_identity_trusted(q, recorded_at);
    *changed = !*vouches && rc == 0;
    *q = now;
    return 1;
}

int kc_manifest_check(const void *blob, size_t size, int64_t recorded_at, kc_buf *refreshed)
{
    const uint8_t *p = blob;
    refreshed->size = 0;
    if (size < 8 || memcmp(p, "KCM3", 4) != 0)
        return 0;
    uint32_t n = kc_read_u32(p + 4);
    int hashed = 0, holds = 1;
    char path[4096];
    struct dirs d = {0};
    uint8_t *vouched = kc_calloc(n ? n : 1, 1); /* per DIR probe: it vouches */
    if (!vouched)
        return KCACHE_ENOMEM;
    /* Two passes at most: the check, and only if a file had to be hashed, the
     * closure written again with the identities seen now. */
    for (int pass = 0; pass < 2 && holds; pass++) {
        kc_buf fresh = {0};
        size_t off = 8;
        if (pass == 1 && put_header(&fresh, n))
            holds = KCACHE_ENOMEM;
        for (uint32_t i = 0; holds == 1 && i < n; i++) {
            kc_probe q;
            memset(&q, 0, sizeof(q));
            if (get_probe(p, size, &off, &q, path, sizeof(path)) != 0) {
                holds = 0;
                break;
            }
            int v = 0, changed = 0;
            if (q.state == KC_PROBE_DIR) {
                holds = dir_holds(&d, &q, recorded_at, &v, &changed);
                vouched[i] = (uint8_t)v;
                hashed |= changed; /* written back with what it is now */
            } else if (q.state == KC_PROBE_ABSENT && q.vouch && q.vouch - 1 < i &&
                       vouched[q.vouch - 1]) {
                holds = 1; /* its directory says nothing was added */
            } else {
                holds = probe_holds(&d, &q, recorded_at, &hashed);
            }
            if (holds == 1 && pass == 1 && put_probe(&fresh, &q))
                holds = KCACHE_ENOMEM;
        }
        if (holds == 1 && off != size)
            holds = 0;
        if (holds == 1 && pass == 1) {
            *refreshed = fresh;
            fresh = (kc_buf){0};
        }
        kc_buf_free(&fresh);
        if (!hashed)
            break;
    }
    dirs_close(&d);
    free(vouched);
    return holds;
}
