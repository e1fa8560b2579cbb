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
 * A closure may stand for any directory of the program's name (CuPy names
 * each program <a new temporary directory>/kern.cu): the main source's
 * "quoted" includes are looked for beside the name, and those looks are
 * recorded relative to the name's directory, as are the directories at or
 * under it; a check joins them to the directory of the name it checks for,
 * so the same looks under a new directory must find what they found (a
 * header placed there beside the new name does not hold). Only where the
 * directory can change nothing else (kc_manifest_any_dir()): nothing was
 * found beside the name, no path under it was also looked at another way
 * (an -I directory there: that look stays where it was), and no header is
 * the program's own file.
 *
 * A hit's check is remembered for the process (kc_manifest_check_watched(),
 * closwatch.c): while inotify reports no change to the directories and
 * files a full check covered, a check of the same closure skips their
 * stat()s and makes only the others.
 *
 * Encoding (all little endian), compact so that a hit decodes little and
 * hashes no path: "KCM4", the directory table (count u32, then per directory
 * 1 if it is relative to the name's directory else 0 u8, its length u32 and
 * bytes; "KCM3" has no such byte), then count u32 and per probe: state u8, its
 * directory (index into the table u32, or UINT32_MAX for a name relative to
 * the working directory without a slash), its base name (length u32,
 * bytes); for an absent path the voucher (1 + index of a DIR probe, or 0)
 * u32; for a file, toolkit header or directory dev, ino, size u64, mtime,
 * ctime i64, and for a file its digest. When the files were read is kept
 * beside it (the store shares one closure between kernels).
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile/manifest.h"
#include "util/strmap.h"

#define NO_DIR UINT32_MAX

static int put_u64(kc_buf *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    return kc_buf_append(b, x, 8);
}

/* Little-endian, in one load: a hit reads five of these for each of ~1,000 files. */
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* ---- encoding ---------------------------------------------------------- */

/*
 * The index of a directory in the table (added to dirs if new), or NO_DIR for
 * KCACHE_ENOMEM. sym: the name is relative to the program name's directory.
 */
static uint32_t dir_index(kc_smap *t, const char *path, size_t n, int sym, kc_buf *dirs)
{
    char name[PATH_MAX + 1];
    size_t v;
    if (n + 1 >= sizeof(name))
        return NO_DIR;
    name[0] = sym ? 's' : 'a'; /* "" is "/" and also the name's directory */
    memcpy(name + 1, path, n);
    name[n + 1] = '\0';
    if (kc_smap_find(t, name, &v))
        return (uint32_t)v;
    v = t->n;
    uint8_t flag = (uint8_t)sym;
    if (v >= NO_DIR || kc_smap_put(t, name, v) || kc_buf_append(dirs, &flag, 1) ||
        kc_buf_append_u32(dirs, (uint32_t)n) || kc_buf_append(dirs, path, n))
        return NO_DIR;
    return (uint32_t)v;
}

static int put_probe(kc_buf *b, const kc_probe *p, uint32_t dir, const char *base,
                     uint32_t vouch)
{
    uint8_t state = (uint8_t)p->state;
    size_t n = strlen(base);
    if (kc_buf_append(b, &state, 1) || kc_buf_append_u32(b, dir) ||
        kc_buf_append_u32(b, (uint32_t)n) || kc_buf_append(b, base, n))
        return KCACHE_ENOMEM;
    if (p->state == KC_PROBE_ABSENT)
        return kc_buf_append_u32(b, vouch) ? KCACHE_ENOMEM : 0;
    if (put_u64(b, p->dev) || put_u64(b, p->ino) || put_u64(b, p->size) ||
        put_u64(b, (uint64_t)p->mtime_ns) || put_u64(b, (uint64_t)p->ctime_ns))
        return KCACHE_ENOMEM;
    if (p->state == KC_PROBE_FILE && kc_buf_append(b, p->digest, KC_DIGEST_SIZE))
        return KCACHE_ENOMEM;
    return 0;
}

/* The path below name_dir ("." for name_dir itself) when p is recorded relative to it, or NULL. */
static const char *below_name_dir(const kc_probe *p, const char *name_dir)
{
    if (!name_dir)
        return NULL;
    size_t n = strlen(name_dir);
    if (p->state == KC_PROBE_DIR) {
        if (!strcmp(p->path, name_dir))
            return ".";
        return !strncmp(p->path, name_dir, n) && p->path[n] == '/' ? p->path + n + 1 : NULL;
    }
    if (!p->beside_name)
        return NULL;
    assert(!strncmp(p->path, name_dir, n) && p->path[n] == '/');
    return p->path + n + 1;
}

int kc_manifest_any_dir(const kc_probe *probes, size_t n, int beside_mixed,
                        const char *source_path)
{
    if (beside_mixed)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (probes[i].beside_name && probes[i].state != KC_PROBE_ABSENT)
            return 0; /* found beside the name: keyed by its directory */
        if (source_path && !strcmp(probes[i].path, source_path))
            return 0; /* a header is the program's own file */
    }
    return 1;
}

int kc_manifest_encode(kc_buf *out, const kc_probe *probes, size_t n, const char *name_dir)
{
    kc_smap t = {0};
    kc_buf dirs = {0}, list = {0};
    int rc = n > UINT32_MAX ? KCACHE_ENOMEM : 0;
    /* The previous probe's directory: a resolution looks in one directory many times in a row. */
    const char *last = NULL;
    size_t last_n = 0;
    int last_sym = 0;
    uint32_t last_dir = NO_DIR;
    for (size_t i = 0; !rc && i < n; i++) {
        const char *rel = below_name_dir(&probes[i], name_dir);
        const char *path = rel ? rel : probes[i].path;
        const char *slash = strrchr(path, '/');
        uint32_t dir = NO_DIR;
        if (rel || slash) {
            /* "/x" lives in "/", kept as the empty name; "x" beside the name, in "" too. */
            size_t dn = slash ? (size_t)(slash - path) : 0;
            if (last && dn == last_n && (rel != NULL) == last_sym && !memcmp(path, last, dn))
                dir = last_dir;
            else
                dir = dir_index(&t, path, dn, rel != NULL, &dirs);
            last = path, last_n = dn, last_sym = rel != NULL, last_dir = dir;
            if (dir == NO_DIR) {
                rc = KCACHE_ENOMEM;
                break;
            }
        }
        /* A look beside the name is vouched for only by a directory that moves with it. */
        uint32_t vouch = probes[i].vouch;
        if (rel && vouch && (vouch > n || !below_name_dir(&probes[vouch - 1], name_dir)))
            vouch = 0;
        rc = put_probe(&list, &probes[i], dir, slash ? slash + 1 : path, vouch);
    }
    out->size = 0;
    if (!rc && (kc_buf_append(out, "KCM4", 4) || kc_buf_append_u32(out, (uint32_t)t.n) ||
                kc_buf_append(out, dirs.data, dirs.size) ||
                kc_buf_append_u32(out, (uint32_t)n) || kc_buf_append(out, list.data, list.size)))
        rc = KCACHE_ENOMEM;
    kc_smap_free(&t);
    kc_buf_free(&dirs);
    kc_buf_free(&list);
    return rc;
}

/* ---- checking ------------------------------------------------------------ */

/* A decoded closure's directories: their names and, opened on first use, fds. */
struct dirs {
    const uint8_t **names; /* into the blob, not NUL-terminated */
    uint32_t *lens;
    uint8_t *sym;          /* relative to the name's directory */
    int *fds;              /* -3 not opened yet, -1 does not open */
    uint32_t n;
    const char *name_dir;  /* the directory of the name checked for, or NULL */
};

static int read_dirs(struct dirs *d, const uint8_t *p, size_t size, size_t *off, int v4)
{
    if (size - *off < 4)
        return -1;
    uint32_t n = kc_read_u32(p + *off);
    *off += 4;
    if (n > (size - *off) / 4)
        return -1;
    d->names = kc_calloc(n ? n : 1, sizeof(*d->names));
    d->lens = kc_calloc(n ? n : 1, sizeof(*d->lens));
    d->sym = kc_calloc(n ? n : 1, sizeof(*d->sym));
    d->fds = kc_calloc(n ? n : 1, sizeof(*d->fds));
    if (!d->names || !d->lens || !d->sym || !d->fds)
        return KCACHE_ENOMEM;
    d->n = n;
    for (uint32_t i = 0; i < n; i++) {
        if (v4) {
            if (size - *off < 1 || p[*off] > 1)
                return -1;
            d->sym[i] = p[(*off)++];
            /* Relative to a directory this check was not given: it cannot hold. */
            if (d->sym[i] && !d->name_dir)
                return -1;
        }
        if (size - *off < 4)
            return -1;
        uint32_t len = kc_read_u32(p + *off);
        *off += 4;
        if (size - *off < len || len >= PATH_MAX)
            return -1;
        d->names[i] = p + *off;
        d->lens[i] = len;
        d->fds[i] = -3;
        *off += len;
    }
    return 0;
}

/* Directory i's path into buf. 0, or -1 if too long. */
static int dir_path(const struct dirs *d, uint32_t i, char *buf, size_t size)
{
    int n = !d->sym[i]     ? snprintf(buf, size, "%.*s", (int)d->lens[i], (const char *)d->names[i])
            : d->lens[i]   ? snprintf(buf, size, "%s/%.*s", d->name_dir, (int)d->lens[i],
                                      (const char *)d->names[i])
                           : snprintf(buf, size, "%s", d->name_dir);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static void dirs_close(struct dirs *d)
{
    for (uint32_t i = 0; i < d->n; i++)
        if (d->fds[i] >= 0)
            close(d->fds[i]);
    free(d->names);
    free(d->lens);
    free(d->sym);
    free(d->fds);
}

/* One probe as read: its directory and base name, and its full path when asked. */
struct probe_at {
    kc_probe q;
    uint32_t dir;
    const char *base; /* into namebuf */
    char namebuf[NAME_MAX + 1];
};

/* Reads one probe at *off. 0, or -1 if it does not parse. */
static int get_probe(const uint8_t *p, size_t size, size_t *off, const struct dirs *d,
                     struct probe_at *a)
{
    size_t o = *off;
    kc_probe *q = &a->q;
    memset(q, 0, sizeof(*q));
    if (size - o < 9)
        return -1;
    q->state = p[o];
    a->dir = kc_read_u32(p + o + 1);
    uint32_t n = kc_read_u32(p + o + 5);
    o += 9;
    if (size - o < n || n > NAME_MAX || q->state > KC_PROBE_DIR ||
        (a->dir != NO_DIR && a->dir >= d->n))
        return -1;
    memcpy(a->namebuf, p + o, n);
    a->namebuf[n] = '\0';
    a->base = a->namebuf;
    q->beside_name = q->state != KC_PROBE_DIR && a->dir != NO_DIR && d->sym[a->dir];
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
 * Steps over the probe at *off without reading it: one the memo of closure
 * checks vouches for, in bytes a full check parsed before (the memo is
 * keyed by their digest). 0, or -1 if it runs past the end.
 */
static int skip_probe(const uint8_t *p, size_t size, size_t *off)
{
    size_t o = *off;
    if (size - o < 9)
        return -1;
    int state = p[o];
    size_t n = 9 + (size_t)kc_read_u32(p + o + 5);
    n += state == KC_PROBE_ABSENT ? 4 : state == KC_PROBE_FILE ? 40 + KC_DIGEST_SIZE : 40;
    if (size - o < n)
        return -1;
    *off = o + n;
    return 0;
}

/* The probe's full path into buf (for a read, or a closure written back). 0, or -1 if too long. */
static int full_path(const struct dirs *d, const struct probe_at *a, char *buf, size_t size)
{
    if (a->dir == NO_DIR) {
        int n = snprintf(buf, size, "%s", a->base);
        return n < 0 || (size_t)n >= size ? -1 : 0;
    }
    char dir[PATH_MAX];
    if (dir_path(d, a->dir, dir, sizeof(dir)))
        return -1;
    /* The name's directory itself, as recorded ("." below it). */
    int n = d->sym[a->dir] && !d->lens[a->dir] && !strcmp(a->base, ".")
                ? snprintf(buf, size, "%s", dir)
                : snprintf(buf, size, "%s/%s", dir, a->base);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static uint64_t n_stats; /* stat_probe()'s, for tests */

uint64_t kc_manifest_stat_count(void)
{
    return __atomic_load_n(&n_stats, __ATOMIC_RELAXED);
}

/*
 * stat() of a probe through its directory's fd, opened once per check: a
 * stat() of a full path walks every component again, and on a deep tree
 * (CuPy's CCCL is 15 levels down) the walk was most of a hit.
 * 0, -1 (nothing there), -2 (no memory).
 */
static int stat_probe(struct dirs *d, const struct probe_at *a, struct stat *st)
{
    __atomic_add_fetch(&n_stats, 1, __ATOMIC_RELAXED);
    if (a->dir == NO_DIR)
        return stat(a->base, st) == 0 ? 0 : -1;
    int *fd = &d->fds[a->dir];
    if (*fd == -3) {
        char path[PATH_MAX];
        int bad = dir_path(d, a->dir, path, sizeof(path));
        *fd = bad ? -1 : open(path[0] ? path : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (*fd < 0)
            *fd = -1;
    }
    if (*fd < 0)
        return -1;
    return fstatat(*fd, a->base, st, 0) == 0 ? 0 : -1;
}

/*
 * 1: the path holds what q recorded; 0: it does not; *hashed: it took a read
 * to tell. found: what the watches' set-up found there for probe i
 * (kc_closwatch_answer()), taken for a stat() of its own, or NULL.
 */
static int probe_holds(struct dirs *d, struct probe_at *a, int64_t recorded_at, int *hashed,
                       const kc_closwatch *found, uint32_t i)
{
    kc_probe *q = &a->q;
    struct stat st;
    int rc = found ? kc_closwatch_answer(found, i, &st) : -1;
    rc = rc == 1 ? 0 : rc == 0 ? -1 : stat_probe(d, a, &st);
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
    char path[PATH_MAX];
    char *text = NULL;
    size_t size = 0;
    kc_probe read_as;
    memset(&read_as, 0, sizeof(read_as));
    if (full_path(d, a, path, sizeof(path)) || kc_identity_read(path, &text, &size, &read_as))
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
 * old enough to trust, so that no entry appeared in it since. One that does
 * not vouch is written back (when the closure is, for another reason) with an
 * identity that never matches: the directory it names was the nearest one
 * above its absent names when they were looked for, and once it has changed
 * that may no longer be so (a directory made between it and them: a name
 * added there changes that directory, not this one). Its names are then
 * stat()ed one by one until a resolution records their directory again.
 */
static int dir_holds(struct dirs *d, struct probe_at *a, int64_t recorded_at, int *vouches)
{
    kc_probe *q = &a->q;
    struct stat st;
    int rc = stat_probe(d, a, &st);
    if (rc == -2)
        return KCACHE_ENOMEM;
    kc_probe now = *q;
    if (rc == 0 && S_ISDIR(st.st_mode))
        kc_identity_of(&now, &st);
    *vouches = rc == 0 && S_ISDIR(st.st_mode) && kc_identity_same(&now, q) &&
               kc_identity_trusted(q, recorded_at);
    if (!*vouches) {
        q->dev = q->ino = q->size = 0;
        q->mtime_ns = q->ctime_ns = 0;
    }
    return 1;
}

/* The closure's probes as closwatch.c sees them, and each absolute directory's path. */
static int plan_watch(const struct dirs *d, const uint8_t *p, size_t size, size_t start,
                      uint32_t n, kc_closwatch **out)
{
    char **paths = kc_calloc((size_t)d->n + 1, sizeof(*paths));
    kc_closwatch_probe *pr = kc_calloc((size_t)n + 1, sizeof(*pr));
    struct probe_at *a = kc_malloc(sizeof(*a));
    int rc = paths && pr && a ? 0 : KCACHE_ENOMEM;
    for (uint32_t i = 0; !rc && i < d->n; i++) {
        char path[PATH_MAX];
        /* Relative to the name's or the working directory: stat()ed on every check. */
        if (d->sym[i] || (d->lens[i] && d->names[i][0] != '/') ||
            dir_path(d, i, path, sizeof(path)))
            continue;
        if (!(paths[i] = kc_strdup(path[0] ? path : "/")))
            rc = KCACHE_ENOMEM;
    }
    size_t off = start;
    for (uint32_t i = 0; !rc && i < n; i++) {
        size_t at = off;
        if (get_probe(p, size, &off, d, a) != 0)
            break; /* the check says it does not hold */
        pr[i] = (kc_closwatch_probe){a->dir, a->q.state, p + at + 9, kc_read_u32(p + at + 5),
                                     a->q.state == KC_PROBE_ABSENT ? a->q.vouch : 0};
    }
    if (!rc && off == size)
        rc = kc_closwatch_begin(out, paths, d->n, pr, n);
    for (uint32_t i = 0; paths && i < d->n; i++)
        free(paths[i]);
    free(paths);
    free(pr);
    free(a);
    return rc;
}

/*
 * With watched: the probes a check remembered for this process vouches for
 * in *skip, or, when there is none, the watches for one in *rec.
 */
static int watch_setup(int watched, const struct dirs *d, const uint8_t *p, size_t size,
                       size_t start, uint32_t n, uint8_t *digest, uint8_t **skip,
                       kc_closwatch **rec)
{
    *skip = NULL;
    *rec = NULL;
    if (!watched)
        return 0;
    kc_stored_digest(digest, p, size);
    int watch = 0;
    int rc = kc_closwatch_lookup(skip, &watch, digest, n);
    return rc ? (rc < 0 ? rc : 0) : watch ? plan_watch(d, p, size, start, n, rec) : 0;
}

static int check(const void *blob, size_t size, int64_t recorded_at, const char *name_dir,
                 kc_buf *refreshed, int watched)
{
    const uint8_t *p = blob;
    refreshed->size = 0;
    int v4 = size >= 8 && !memcmp(p, "KCM4", 4);
    if (size < 8 || (!v4 && memcmp(p, "KCM3", 4) != 0))
        return 0;
    struct dirs d = {.name_dir = name_dir};
    size_t start = 4;
    int holds = read_dirs(&d, p, size, &start, v4);
    if (holds) {
        dirs_close(&d);
        return holds == KCACHE_ENOMEM ? holds : 0;
    }
    holds = 1;
    uint32_t n = size - start >= 4 ? kc_read_u32(p + start) : 0;
    start += 4;
    if (start > size || n > (size - start) / 9) {
        dirs_close(&d);
        return 0;
    }
    int hashed = 0;
    uint8_t *vouched = kc_calloc(n ? n : 1, 1); /* per DIR probe: it vouches */
    struct probe_at *a = kc_malloc(sizeof(*a));
    kc_probe *fresh = NULL; /* pass 1: what is there now, for the closure written back */
    uint8_t digest[KC_DIGEST_SIZE], *skip = NULL;
    kc_closwatch *rec = NULL;
    if (!vouched || !a ||
        watch_setup(watched, &d, p, size, start, n, digest, &skip, &rec)) {
        free(vouched);
        free(a);
        dirs_close(&d);
        return KCACHE_ENOMEM;
    }
    /* Two passes at most: the check, and only if a file had to be hashed, again
     * with the identities seen now, written back. */
    for (int pass = 0; pass < 2 && holds == 1; pass++) {
        size_t off = start;
        if (pass == 1 && !(fresh = kc_calloc(n ? n : 1, sizeof(*fresh))))
            holds = KCACHE_ENOMEM;
        for (uint32_t i = 0; holds == 1 && i < n; i++) {
            int covered = skip && (skip[i / 8] >> (i % 8) & 1);
            if (covered && pass == 0) {
                /* Nothing it covers changed since a check here found it (closwatch.c). */
                if (skip_probe(p, size, &off) != 0)
                    holds = 0;
                continue;
            }
            if (get_probe(p, size, &off, &d, a) != 0) {
                holds = 0;
                break;
            }
            int v = 0;
            if (covered && a->q.state != KC_PROBE_DIR) {
                holds = 1; /* as above; read whole for the closure written back */
            } else if (a->q.state == KC_PROBE_DIR) {
                holds = dir_holds(&d, a, recorded_at, &v);
                vouched[i] = (uint8_t)v;
            } else if (a->q.state == KC_PROBE_ABSENT && a->q.vouch && a->q.vouch - 1 < i &&
                       vouched[a->q.vouch - 1]) {
                holds = 1; /* its directory says nothing was added */
            } else {
                holds = probe_holds(&d, a, recorded_at, &hashed, pass ? NULL : rec, i);
            }
            if (holds == 1 && pass == 1) {
                char path[PATH_MAX];
                fresh[i] = a->q;
                if (full_path(&d, a, path, sizeof(path)) || !(fresh[i].path = kc_strdup(path)))
                    holds = KCACHE_ENOMEM;
            }
        }
        if (holds == 1 && off != size)
            holds = 0;
        if (holds == 1 && pass == 1 && kc_manifest_encode(refreshed, fresh, n, name_dir))
            holds = KCACHE_ENOMEM;
        if (!hashed)
            break;
    }
    if (rec && holds == 1 && !hashed)
        kc_closwatch_keep(rec, digest);
    kc_closwatch_free(rec);
    free(skip);
    if (fresh)
        for (uint32_t i = 0; i < n; i++)
            free(fresh[i].path);
    free(fresh);
    free(a);
    free(vouched);
    dirs_close(&d);
    if (holds != 1)
        refreshed->size = 0;
    return holds;
}

int kc_manifest_check(const void *blob, size_t size, int64_t recorded_at, const char *name_dir,
                      kc_buf *refreshed)
{
    return check(blob, size, recorded_at, name_dir, refreshed, 0);
}

int kc_manifest_check_watched(const void *blob, size_t size, int64_t recorded_at,
                              const char *name_dir, kc_buf *refreshed)
{
    return check(blob, size, recorded_at, name_dir, refreshed, 1);
}
