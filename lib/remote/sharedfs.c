/*
 * The shared file system tier: kernels shared by the nodes of a cluster
 * through a directory on its file system (NFS, Lustre, GPFS, sshfs), with
 * no server. doc/shared-tier.md has the design; the decisions, in short:
 *
 *   - Nothing that a network file system does badly: no byte-range lock
 *     across hosts, no shared memory, no WAL, no file rewritten in place.
 *     A file appears whole by rename (atomic on these file systems) and is
 *     never changed after; the only operations are create, rename, read and
 *     unlink.
 *   - A segment is a kcache bundle (store/bundle.c), so it is checked on
 *     arrival as any bundle is: identity, schema, integrity, every digest,
 *     the key recomputed from its material, kind and arch against the key,
 *     a signature when remote_secret is set (required with
 *     import_require_signature). Each compile publishes its entry as a
 *     segment of its own: written locally, copied under a temporary name,
 *     renamed to segments/<ms>-<host>-<pid>-<n>.kcb.
 *   - A lookup lists segments/ and opens each segment immutable (no lock);
 *     the one that holds the key is imported into the local store whole (a
 *     hit fills the node, and the checks above are the importer's).
 *   - Compaction, by the publisher that finds KC_SHARED_COMPACT_AT segments
 *     or more: at most one at a time by a lease file made with O_EXCL whose
 *     age is bounded (KC_SHARED_LEASE_AGE_S; an older one is a dead
 *     compactor's and is moved aside). It imports every segment into a
 *     local store capped at shared_max_size (the store's LRU holds the
 *     cap), publishes the result as one segment, then moves the merged
 *     ones into retired/, deleted after KC_SHARED_GRACE_S so that a reader
 *     that listed them can still read them. The lease is advisory: two
 *     compactions at once (a lease broken early) publish duplicates, which
 *     the next one merges; nothing published is removed before a segment
 *     that holds it is in place. Killed at any point, a compaction leaves
 *     the tier readable and losing nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kcache/bundle.h"
#include "remote/sharedfs.h"
#include "store/storelib.h"
#include "util/common.h"
#include "util/settings.h"

#define KC_SHARED_COMPACT_AT 32  /* segments that make a publisher compact */
#define KC_SHARED_LEASE_AGE_S 60 /* a compaction lease older than this is a dead one's */
#define KC_SHARED_GRACE_S 600    /* merged segments kept for readers that listed them */
#define KC_SHARED_PATH 4096

struct kc_shared {
    kcache_store *store; /* borrowed */
    char dir[KC_SHARED_PATH / 2];
    char local[KC_SHARED_PATH / 2]; /* the store's directory: segments are made here first */
    char host[64];
    int read_only;
    uint64_t max_size;
    unsigned seq;
    kcache_log_fn log;
    void *log_userdata;
};

static void say(kc_shared *sh, const char *fmt, ...) KC_PRINTF(2, 3);
static void say(kc_shared *sh, const char *fmt, ...)
{
    char line[KC_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (sh->log)
        sh->log(sh->log_userdata, KCACHE_LOG_WARNING, line);
}

static void path_of(char *out, const kc_shared *sh, const char *sub, const char *name)
{
    snprintf(out, KC_SHARED_PATH, "%s/%s%s%s", sh->dir, sub, name ? "/" : "", name ? name : "");
}

int kc_shared_open(kc_shared **out, kcache_store *store, char *msg, size_t msg_size)
{
    *out = NULL;
    const char *db = kcache_store_path(store);
    char dir[KC_SHARED_PATH / 2], ro[16] = "", cap[64] = "";
    int rc = kc_config_value(dir, sizeof(dir), "shared", NULL, db);
    if (rc == KCACHE_ENOTFOUND || (!rc && (!dir[0] || !strcmp(dir, "none"))))
        return KCACHE_ENOTFOUND;
    if (rc || kc_config_value(ro, sizeof(ro), "shared_read_only", NULL, db) == KCACHE_EINVAL ||
        kc_config_value(cap, sizeof(cap), "shared_max_size", NULL, db) == KCACHE_EINVAL)
        return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                      "setting shared (or shared_read_only, shared_max_size) has a value that "
                      "cannot be used: see kcache config");
    if (dir[0] != '/')
        return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                      "shared = %s: give the shared directory as an absolute path", dir);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return kc_fmt(msg, msg_size, KCACHE_EIO,
                      "the shared directory %s is not there: create it on the cluster's file "
                      "system (mkdir -p) or unset shared",
                      dir);
    kc_shared *sh = kc_calloc(1, sizeof(*sh));
    if (!sh)
        return kc_fmt(msg, msg_size, KCACHE_ENOMEM, "out of memory");
    sh->store = store;
    snprintf(sh->dir, sizeof(sh->dir), "%s", dir);
    snprintf(sh->local, sizeof(sh->local), "%s", db);
    char *slash = strrchr(sh->local, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(sh->local, sizeof(sh->local), ".");
    if (ro[0])
        kc_config_bool(&sh->read_only, ro);
    sh->max_size = KCACHE_DEFAULT_SHARED_MAX_SIZE;
    if (cap[0] && kcache_parse_max_size(&sh->max_size, cap) == 0 && sh->max_size == 0)
        sh->max_size = UINT64_MAX; /* 0 or none: no cap, as max_size */
    gethostname(sh->host, sizeof(sh->host) - 1);
    for (char *p = sh->host; *p; p++)
        if (*p == '/' || *p == '-')
            *p = '_'; /* names are split on '-' */
    if (!sh->read_only) {
        /* As the directory's own mode and the umask say: a group's shared directory stays one. */
        char sub[KC_SHARED_PATH];
        path_of(sub, sh, "segments", NULL);
        mkdir(sub, 0777);
        path_of(sub, sh, "retired", NULL);
        mkdir(sub, 0777);
    }
    *out = sh;
    return 0;
}

void kc_shared_close(kc_shared *sh)
{
    free(sh);
}

void kc_shared_set_log(kc_shared *sh, kcache_log_fn log, void *userdata)
{
    sh->log = log;
    sh->log_userdata = userdata;
}

/* ---- segments ---------------------------------------------------------- */

struct names {
    char **v;
    size_t n, cap;
};

static void names_free(struct names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static int newest_first(const void *a, const void *b)
{
    return strcmp(*(char *const *)b, *(char *const *)a);
}

/* The names in sub ending in ".kcb" (a temporary copy ends otherwise), newest first. */
static int list(struct names *out, const kc_shared *sh, const char *sub)
{
    char dir[KC_SHARED_PATH];
    path_of(dir, sh, sub, NULL);
    memset(out, 0, sizeof(*out));
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : KCACHE_EIO;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 4, ".kcb") != 0 || de->d_name[0] == '.')
            continue;
        char **grown = kc_grow(out->v, &out->cap, out->n, sizeof(*grown), 32);
        char *name = kc_strdup(de->d_name);
        if (!grown || !name) {
            free(name);
            rc = KCACHE_ENOMEM;
            break;
        }
        out->v = grown;
        out->v[out->n++] = name;
    }
    closedir(d);
    if (rc)
        names_free(out);
    else if (out->n)
        qsort(out->v, out->n, sizeof(*out->v), newest_first);
    return rc;
}

/* A fresh name: time first, so that names sort by age across hosts (to the clocks' skew). */
static void fresh_name(char *out, size_t size, kc_shared *sh, const char *what)
{
    snprintf(out, size, "%013lld-%s-%ld-%u%s.kcb", (long long)kc_now_ms(), sh->host,
             (long)getpid(), ++sh->seq, what);
}

static void remove_local_store(const char *path)
{
    static const char *const side[] = {"", "-wal", "-shm", "-lock", "-journal", "-hits"};
    char p[KC_SHARED_PATH + 32];
    for (size_t i = 0; i < KC_ARRAY_SIZE(side); i++) {
        snprintf(p, sizeof(p), "%s%s", path, side[i]);
        unlink(p);
    }
}

/*
 * Copies the finished bundle at local into segments/name: written under a
 * temporary name and renamed into place (kcache_file_write()), synced first.
 */
static int place(kc_shared *sh, const char *local, const char *name, char *err, size_t err_size)
{
    kc_buf b = {0};
    int rc = 0;
    int fd = open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kc_fmt(err, err_size, KCACHE_EIO, "cannot read %s: %s", local, strerror(errno));
    char chunk[65536];
    ssize_t n;
    while (!rc && (n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0)
            rc = kc_fmt(err, err_size, KCACHE_EIO, "cannot read %s: %s", local, strerror(errno));
        else if (kc_buf_append(&b, chunk, (size_t)n))
            rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    }
    close(fd);
    char dst[KC_SHARED_PATH];
    path_of(dst, sh, "segments", name);
    if (!rc)
        rc = kcache_file_write(dst, b.data, b.size, 0644, KCACHE_FILE_SYNC, err, err_size);
    kc_buf_free(&b);
    return rc;
}

/* ---- lookups ----------------------------------------------------------- */

/*
 * Whether the segment called name may hold the key whose tag ("-k" and its
 * first 16 hex digits) is given: a one-entry segment's name ends with its
 * key's tag, so a lookup opens only the segments that may hold its key
 * (measured: opening each of a few segments over sshfs cost most of a
 * shared hit). A name without a tag (a merged segment) may hold any key; a
 * name is only a hint, what is imported is checked whatever it says.
 */
static int named_for(const char *name, const char *tag)
{
    const char *k = strrchr(name, '-'); /* a host name has none (sanitized) */
    return !k || k[1] != 'k' || strlen(k) != strlen(tag) + 4 || !strncmp(k, tag, strlen(tag));
}

int kc_shared_fetch(kcache_entry **out, kc_shared *sh, const kcache_key *key)
{
    *out = NULL;
    char hex[KCACHE_KEY_HEX_SIZE], tag[32];
    kcache_key_hex(hex, key);
    snprintf(tag, sizeof(tag), "-k%.16s", hex);
    /* A segment retired between the listing and the read: its entries are in a newer one. */
    for (int round = 0; round < 2; round++) {
        struct names l;
        int gone = 0;
        if (list(&l, sh, "segments")) {
            kc_store_count(sh->store, KC_SC_ERRORS, 1);
            say(sh, "cannot list the shared directory %s/segments: %s", sh->dir, strerror(errno));
            return 0;
        }
        for (size_t i = 0; i < l.n; i++) {
            char path[KC_SHARED_PATH], err[KC_ERRMSG_SIZE];
            if (!named_for(l.v[i], tag))
                continue;
            path_of(path, sh, "segments", l.v[i]);
            /* A one-entry segment named for the key is imported without a first look. */
            int has = strrchr(l.v[i], '-')[1] == 'k' ? 1
                                                     : kc_store_bundle_has(path, key, err,
                                                                           sizeof(err));
            struct stat st;
            if (has != 1) {
                gone |= has < 0 && stat(path, &st) != 0;
                continue;
            }
            kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
            int rc = kcache_bundle_import(&r, sh->store, path, NULL);
            if (rc == 0 && kcache_store_get(out, sh->store, key, KCACHE_GET_NO_TOUCH) == 0) {
                kc_store_count(sh->store, KC_SC_HITS, 1);
                names_free(&l);
                return 1;
            }
            if (rc && stat(path, &st) != 0) {
                gone = 1;
            } else if (rc) {
                kc_store_count(sh->store, KC_SC_REJECTED, 1);
                say(sh, "shared segment %s refused: %s", path, kcache_store_errmsg(sh->store));
            }
        }
        names_free(&l);
        if (!gone)
            break;
    }
    kc_store_count(sh->store, KC_SC_MISSES, 1);
    return 0;
}

/* ---- publishing -------------------------------------------------------- */

/* e as a finished bundle of its own at local (a store made beside the cache, exported). */
static int write_segment(const kcache_entry *e, const char *local, char *err,
                         size_t err_size)
{
    char db[KC_SHARED_PATH + 8];
    snprintf(db, sizeof(db), "%s.db", local);
    remove_local_store(db);
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    so.max_size = UINT64_MAX;
    kcache_store *t = NULL;
    int rc = kcache_store_open(&t, &so, err, err_size);
    if (!rc && (rc = kcache_store_put(t, e)))
        snprintf(err, err_size, "%s", kcache_store_errmsg(t));
    if (!rc && (rc = kcache_bundle_export(NULL, t, local, NULL)))
        snprintf(err, err_size, "%s", kcache_store_errmsg(t));
    kcache_store_close(t);
    remove_local_store(db);
    return rc;
}

static size_t count_segments(const kc_shared *sh)
{
    struct names l;
    if (list(&l, sh, "segments"))
        return 0;
    size_t n = l.n;
    names_free(&l);
    return n;
}

/* The segments that make a publisher compact; the tests ask for fewer (a handful of compiles). */
static size_t compact_at(void)
{
    uint64_t n;
    const char *v = getenv("KCACHE_TEST_SHARED_COMPACT_AT");
    return v && kcache_parse_count(&n, v, 2, KC_SHARED_COMPACT_AT) == 0 ? (size_t)n
                                                                       : KC_SHARED_COMPACT_AT;
}

void kc_shared_publish(kc_shared *sh, const kcache_entry *e)
{
    if (sh->read_only || kc_store_local_only(e))
        return;
    char name[256], local[KC_SHARED_PATH], err[KC_ERRMSG_SIZE], hex[KCACHE_KEY_HEX_SIZE];
    char tag[32];
    kcache_key_hex(hex, &e->key);
    snprintf(tag, sizeof(tag), "-k%.16s", hex);
    fresh_name(name, sizeof(name), sh, tag);
    snprintf(local, sizeof(local), "%s/shared-out-%s", sh->local, name);
    int rc = write_segment(e, local, err, sizeof(err));
    if (!rc)
        rc = place(sh, local, name, err, sizeof(err));
    unlink(local);
    if (rc) {
        kc_store_count(sh->store, KC_SC_ERRORS, 1);
        say(sh, "not published to the shared directory: %s", err);
        return;
    }
    kc_store_count(sh->store, KC_SC_PUBLISHES, 1);
    if (count_segments(sh) >= compact_at())
        kc_shared_compact(sh);
}

/* ---- compaction -------------------------------------------------------- */

/*
 * Takes the compaction lease: 0 taken, 1 another holds it. A lease older than
 * KC_SHARED_LEASE_AGE_S (by the file system's clock: its mtime against the
 * time of a file this call touches) is moved aside once and taken.
 */
static int lease_take(kc_shared *sh, char *mine, size_t mine_size)
{
    char lease[KC_SHARED_PATH];
    path_of(lease, sh, "compact.lease", NULL);
    snprintf(mine, mine_size, "%s %ld %lld\n", sh->host, (long)getpid(), (long long)kc_now_ms());
    for (int tries = 0; tries < 2; tries++) {
        int fd = open(lease, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ssize_t w = write(fd, mine, strlen(mine));
            close(fd);
            return w == (ssize_t)strlen(mine) ? 0 : (unlink(lease), 1);
        }
        struct stat st;
        if (errno != EEXIST || stat(lease, &st) != 0)
            return 1;
        if (time(NULL) - st.st_mtime < KC_SHARED_LEASE_AGE_S)
            return 1;
        char aside[KC_SHARED_PATH], name[256];
        fresh_name(name, sizeof(name), sh, "-stale-lease");
        path_of(aside, sh, "retired", name);
        /* Of several that found it stale, one moves it; the others find the new one fresh. */
        if (rename(lease, aside) != 0)
            return 1;
    }
    return 1;
}

/* Lets the lease go if it is still ours (a lease broken as stale is someone else's now). */
static void lease_release(kc_shared *sh, const char *mine)
{
    char lease[KC_SHARED_PATH], buf[256];
    path_of(lease, sh, "compact.lease", NULL);
    int fd = open(lease, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n > 0 && (buf[n] = '\0', !strcmp(buf, mine)))
        unlink(lease);
}

/* Deletes what has been retired for longer than the grace, and temporary copies as old. */
static void sweep(kc_shared *sh)
{
    static const char *const subs[] = {"retired", "segments"};
    time_t now = time(NULL);
    for (size_t s = 0; s < KC_ARRAY_SIZE(subs); s++) {
        char dir[KC_SHARED_PATH];
        path_of(dir, sh, subs[s], NULL);
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            char path[KC_SHARED_PATH];
            struct stat st;
            if (de->d_name[0] == '.' || (s == 1 && !strstr(de->d_name, ".kcb.tmp-")))
                continue;
            path_of(path, sh, subs[s], de->d_name);
            if (lstat(path, &st) == 0 && now - st.st_mtime > KC_SHARED_GRACE_S)
                unlink(path);
        }
        if (d)
            closedir(d);
    }
}

/* Imports every listed segment into t; marks in done those to retire. */
static void merge_into(kc_shared *sh, kcache_store *t, const struct names *l, char *done)
{
    for (size_t i = 0; i < l->n; i++) {
        char path[KC_SHARED_PATH];
        struct stat st;
        path_of(path, sh, "segments", l->v[i]);
        int rc = kcache_bundle_import(NULL, t, path, NULL);
        if (rc && stat(path, &st) != 0)
            continue; /* retired by another compaction meanwhile */
        if (rc) {
            /* It will never pass: retired, so that the count stays bounded. */
            kc_store_count(sh->store, KC_SC_REJECTED, 1);
            say(sh, "shared segment %s refused and retired: %s", path, kcache_store_errmsg(t));
        }
        done[i] = 1;
    }
}

int kc_shared_compact(kc_shared *sh)
{
    char mine[256];
    if (sh->read_only || lease_take(sh, mine, sizeof(mine)))
        return 1;
    struct names l = {0};
    char *done = NULL, name[256], local[KC_SHARED_PATH] = "", db[KC_SHARED_PATH + 8] = "",
         err[KC_ERRMSG_SIZE] = "";
    kcache_store *t = NULL;
    int rc = list(&l, sh, "segments");
    if (rc || l.n < 2)
        goto out;
    if (!(done = kc_calloc(l.n, 1))) {
        rc = KCACHE_ENOMEM;
        goto out;
    }
    fresh_name(name, sizeof(name), sh, "-merged");
    snprintf(local, sizeof(local), "%s/shared-compact-%s", sh->local, name);
    snprintf(db, sizeof(db), "%s.db", local);
    remove_local_store(db);
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    so.max_size = sh->max_size; /* the store's LRU holds the tier's cap */
    if ((rc = kcache_store_open(&t, &so, err, sizeof(err))))
        goto out;
    merge_into(sh, t, &l, done);
    if ((rc = kcache_bundle_export(NULL, t, local, NULL))) {
        snprintf(err, sizeof(err), "%s", kcache_store_errmsg(t));
        goto out;
    }
    if ((rc = place(sh, local, name, err, sizeof(err))))
        goto out;
    /* Only now, with what they hold in place: the merged segments retired. */
    for (size_t i = 0; i < l.n; i++) {
        char from[KC_SHARED_PATH], to[KC_SHARED_PATH], aside[300];
        if (!done[i])
            continue;
        snprintf(aside, sizeof(aside), "%013lld-%s", (long long)kc_now_ms(), l.v[i]);
        path_of(from, sh, "segments", l.v[i]);
        path_of(to, sh, "retired", aside);
        rename(from, to);
    }
    kc_store_count(sh->store, KC_SC_COMPACTIONS, 1);
    sweep(sh);
out:
    if (rc && rc != KCACHE_ENOMEM)
        say(sh, "compacting the shared directory %s: %s", sh->dir, err[0] ? err : "failed");
    kcache_store_close(t);
    if (local[0] && done) {
        unlink(local);
        remove_local_store(db);
    }
    free(done);
    names_free(&l);
    lease_release(sh, mine);
    return rc;
}
