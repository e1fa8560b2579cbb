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
 *     renamed to segments/<ms>-<host>-<pid>-<n>-k<key>.kcb.
 *   - A lookup lists segments/ and opens each segment immutable (no lock);
 *     the one that holds the key is imported into the local store whole (a
 *     hit fills the node, and the checks above are the importer's).
 *   - Compaction, by the publisher that finds KC_SHARED_COMPACT_AT segments
 *     or more: at most one at a time by a lease file made with O_EXCL whose
 *     age is bounded (KC_SHARED_LEASE_AGE_S; an older one, or one of a dead
 *     process of this host, is moved aside). It merges the segments that
 *     choose() picks (size-tiered by entry count; all of them past the cap)
 *     into a local store capped at shared_max_size (the store's LRU holds
 *     the cap), publishes the result as one segment, then deletes the
 *     merged one-entry segments and moves merged ones into retired/, kept
 *     for readers that may be copying them (KC_SHARED_GRACE_S, at most
 *     KC_SHARED_KEEP_RETIRED); a reader that finds a segment gone lists
 *     again. It also deletes what killed writers left (sweep()). The lease
 *     is advisory: two compactions at once (a lease broken early) publish
 *     duplicates, which the next one merges; nothing published is removed
 *     before a segment that holds it is in place. Killed at any point, a
 *     compaction leaves the tier readable and losing nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "format/settings.h"

#define KC_SHARED_COMPACT_AT 32  /* segments that make a publisher compact */
#define KC_SHARED_LEASE_AGE_S 60 /* a compaction lease older than this is a dead one's */
#define KC_SHARED_LEASE_EMPTY_S 5 /* and an empty one older than this */
#define KC_SHARED_GRACE_S 600    /* merged segments kept for readers that listed them */
#define KC_SHARED_KEEP_RETIRED 8 /* and at most this many of them */
#define KC_SHARED_COPY_MAX (UINT64_C(16) << 20) /* a segment read whole before its import */
#define KC_SHARED_PATH 4096

struct kc_shared {
    kcache_store *store; /* borrowed */
    char dir[KC_SHARED_PATH / 2];
    char local[KC_SHARED_PATH / 2]; /* the store's directory: segments are made here first */
    char host[64];
    int read_only;
    int dirs_made; /* make_dirs() */
    uint64_t max_size;
    atomic_uint seq; /* threads of one process share the tier: no two names alike */
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
    atomic_init(&sh->seq, 0);
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
    *out = sh;
    return 0;
}

/*
 * Makes segments/ and retired/ if they are not there, once per handle, before
 * the first write: not at open, where two round trips to the file server
 * would cost every process its time, a local hit's too.
 */
static void make_dirs(kc_shared *sh)
{
    if (sh->dirs_made)
        return;
    /* As the directory's own mode and the umask say: a group's shared directory stays one. */
    char sub[KC_SHARED_PATH];
    path_of(sub, sh, "segments", NULL);
    mkdir(sub, 0777);
    path_of(sub, sh, "retired", NULL);
    mkdir(sub, 0777);
    sh->dirs_made = 1;
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
    kc_strv_free(l->v, l->n);
    memset(l, 0, sizeof(*l));
}

static int newest_first(const void *a, const void *b)
{
    return strcmp(*(char *const *)b, *(char *const *)a);
}

/*
 * The names in sub ending in ".kcb" (a temporary copy ends otherwise), or
 * with any, any not hidden; newest first.
 */
static int list_names(struct names *out, const kc_shared *sh, const char *sub, int any)
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
        if (de->d_name[0] == '.' || (!any && (n < 5 || strcmp(de->d_name + n - 4, ".kcb") != 0)))
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

static int list(struct names *out, const kc_shared *sh, const char *sub)
{
    return list_names(out, sh, sub, 0);
}

static int list_all(struct names *out, const kc_shared *sh, const char *sub)
{
    return list_names(out, sh, sub, 1);
}

/* A fresh name: time first, so that names sort by age across hosts (to the clocks' skew). */
static void fresh_name(char *out, size_t size, kc_shared *sh, const char *what)
{
    snprintf(out, size, "%013lld-%s-%ld-%u%s.kcb", (long long)kc_now_ms(), sh->host,
             (long)getpid(), atomic_fetch_add(&sh->seq, 1) + 1, what);
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

/*
 * The segment at path copied into the local store's directory (into copy, a
 * fresh "shared-in-" name) in one sequential read, for the import to read
 * there. On a network file system each page SQLite reads apart is a round
 * trip to the server, and an import opens the file twice and looks for
 * settings beside it: a one-entry segment on sshfs took about 40 of them
 * (0.2-0.7 ms each with the machine idle, milliseconds each under load);
 * now an open and a read or two. The copy is what is checked and imported,
 * so the checks see one version of the file throughout. Returns 0, 1 when
 * the segment is larger than KC_SHARED_COPY_MAX or not a regular file
 * (imported in place), or -1 when it cannot be read or copied.
 */
static int copy_in(kc_shared *sh, const char *path, char *copy, size_t copy_size)
{
    struct stat st;
    /* O_NONBLOCK: a FIFO planted under a segment's name must not hang the reader in open(). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    /* Not a file: imported in place, where the import's own check refuses it. */
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > KC_SHARED_COPY_MAX) {
        close(fd);
        return 1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *data = kc_malloc(size ? size : 1);
    ssize_t n = 1;
    while (data && got < size && (n = read(fd, data + got, size - got)) > 0)
        got += (size_t)n;
    close(fd);
    char name[256], err[KC_ERRMSG_SIZE];
    fresh_name(name, sizeof(name), sh, "");
    snprintf(copy, copy_size, "%s/shared-in-%s", sh->local, name);
    int rc = data && got == size && n >= 0 &&
                     kcache_file_write(copy, data, size, 0600, 0, err, sizeof(err)) == 0
                 ? 0
                 : -1;
    free(data);
    return rc;
}

int kc_shared_fetch(kcache_entry **out, kc_shared *sh, const kcache_key *key)
{
    *out = NULL;
    char hex[KCACHE_KEY_HEX_SIZE], tag[32];
    kcache_key_hex(hex, key);
    snprintf(tag, sizeof(tag), "-k%.16s", hex);
    /* A segment removed between the listing and the read: its entries are in a newer one. */
    for (int round = 0; round < 3; round++) {
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
            char copy[KC_SHARED_PATH];
            int copied = copy_in(sh, path, copy, sizeof(copy));
            int rc = copied < 0 ? KCACHE_EIO
                                : kcache_bundle_import(NULL, sh->store, copied ? path : copy, NULL);
            if (copied == 0)
                unlink(copy);
            if (rc == 0 && kcache_store_get(out, sh->store, key, KCACHE_GET_NO_TOUCH) == 0) {
                kc_store_count(sh->store, KC_SC_HITS, 1);
                names_free(&l);
                return 1;
            }
            if (rc && stat(path, &st) != 0) {
                gone = 1;
            } else if (copied < 0) {
                kc_store_count(sh->store, KC_SC_ERRORS, 1);
                say(sh, "cannot copy the shared segment %s into %s: check the space and "
                    "permissions there", path, sh->local);
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
    make_dirs(sh);
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

/* The lease's text into buf: 1, or 0 when there is none to read. */
static int read_lease(char *buf, size_t size, const char *lease)
{
    int fd = open(lease, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return 1;
}

/*
 * Whether the lease at path, made at made (its mtime), is a dead compactor's
 * before KC_SHARED_LEASE_AGE_S: its text ("host pid ms") names a process of
 * this host that is no longer running, or it has no text KC_SHARED_LEASE_EMPTY_S
 * after it was made (its maker was killed between the create and the write:
 * a live one writes at once). Another host's process cannot be judged here.
 */
static int lease_dead_early(const kc_shared *sh, const char *lease, time_t made)
{
    char buf[256], host[64];
    long pid = 0;
    if (!read_lease(buf, sizeof(buf), lease))
        return time(NULL) - made >= KC_SHARED_LEASE_EMPTY_S;
    return sscanf(buf, "%63s %ld", host, &pid) == 2 && !strcmp(host, sh->host) && pid > 0 &&
           kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/*
 * Takes the compaction lease: 0 taken, 1 another holds it. A lease older than
 * KC_SHARED_LEASE_AGE_S (its mtime against this host's clock), or one
 * lease_dead_early() judges dead, is moved aside once and taken.
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
        if (time(NULL) - st.st_mtime < KC_SHARED_LEASE_AGE_S &&
            !lease_dead_early(sh, lease, st.st_mtime))
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
    if (read_lease(buf, sizeof(buf), lease) && !strcmp(buf, mine))
        unlink(lease);
}

/* The grace given to temporary files and retired segments; the tests ask for less. */
static time_t grace_s(void)
{
    uint64_t n;
    const char *v = getenv("KCACHE_TEST_SHARED_GRACE_S");
    return v && kcache_parse_count(&n, v, 0, KC_SHARED_GRACE_S) == 0 ? (time_t)n
                                                                      : KC_SHARED_GRACE_S;
}

/*
 * What killed processes and past compactions leave, deleted:
 *   - retired/: a segment once it has been retired for longer than the grace
 *     (the time its name starts with: a rename keeps the mtime of the write),
 *     and any beyond the newest KC_SHARED_KEEP_RETIRED, so that a burst of
 *     compactions cannot fill an inode quota. A reader that listed a
 *     segment deleted early finds it gone and lists again (kc_shared_fetch());
 *   - segments/: a writer's temporary copy ("NAME.kcb.tmp-...") not written
 *     to for longer than the grace: its writer was killed;
 *   - the local store's directory: this tier's local work files
 *     ("shared-out-", "shared-compact-", "shared-in-": a bundle, a whole
 *     store, a segment's copy) as old.
 */
static void sweep_dir(const char *dir, const char *const *prefixes, size_t n_prefixes,
                      time_t older_than)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int ours = 0;
        for (size_t i = 0; i < n_prefixes && !ours; i++)
            ours = prefixes[i][0] == '*' ? strstr(de->d_name, prefixes[i] + 1) != NULL
                                         : !strncmp(de->d_name, prefixes[i], strlen(prefixes[i]));
        char path[KC_SHARED_PATH];
        struct stat st;
        if (!ours || de->d_name[0] == '.' ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path))
            continue;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime < older_than)
            unlink(path);
    }
    if (d)
        closedir(d);
}

static void sweep(kc_shared *sh)
{
    time_t now = time(NULL), grace = grace_s();
    static const char *const tmp[] = {"*.kcb.tmp-"};
    static const char *const local[] = {"shared-out-", "shared-compact-", "shared-in-"};
    char dir[KC_SHARED_PATH];
    path_of(dir, sh, "segments", NULL);
    sweep_dir(dir, tmp, KC_ARRAY_SIZE(tmp), now - grace);
    sweep_dir(sh->local, local, KC_ARRAY_SIZE(local), now - grace);
    struct names l = {0};
    if (list_all(&l, sh, "retired"))
        return;
    for (size_t i = 0; i < l.n; i++) { /* newest first */
        char path[KC_SHARED_PATH];
        long long at = strtoll(l.v[i], NULL, 10);
        if (i >= KC_SHARED_KEEP_RETIRED || at / 1000 < (long long)(now - grace)) {
            path_of(path, sh, "retired", l.v[i]);
            unlink(path);
        }
    }
    names_free(&l);
}

/* A segment as compaction sees it. */
struct seg {
    const char *name; /* borrowed from the listing */
    uint64_t size;    /* bytes */
    uint64_t entries; /* as its name says: "-k<key>" one, "-n<count>" a merged one's */
    int merge;
};

static uint64_t entries_of(const char *name)
{
    const char *k = strrchr(name, '-');
    return k && k[1] == 'n' ? strtoull(k + 2, NULL, 10) : 1;
}

static int larger_first(const void *a, const void *b)
{
    const struct seg *x = a, *y = b;
    return x->entries < y->entries ? 1 : x->entries > y->entries ? -1 : strcmp(x->name, y->name);
}

/*
 * Which segments to merge (size-tiered, as LSM trees do): each segment that
 * holds more entries than all smaller ones together is left as it is, the
 * rest are merged into one. So an entry is rewritten about
 * log2(entries / KC_SHARED_COMPACT_AT) times in its life, not at every
 * compaction, and the tier holds at most that many merged segments (their
 * counts at least double from one to the next) plus the one-entry segments
 * published since. Entries, not bytes: a one-entry segment is a whole
 * SQLite file, tens of KiB of pages for a kernel of a few hundred bytes.
 * When the segments together pass the cap, every one is merged, under the
 * cap. Returns how many are to be merged.
 */
static size_t choose(struct seg *v, size_t n, uint64_t cap)
{
    uint64_t total = 0, rest = 0;
    for (size_t i = 0; i < n; i++) {
        total += v[i].size;
        rest += v[i].entries;
    }
    qsort(v, n, sizeof(*v), larger_first);
    size_t kept = 0;
    for (size_t i = 0; i < n && total <= cap; i++) {
        rest -= v[i].entries;
        if (v[i].entries <= rest)
            break;
        kept++;
    }
    for (size_t i = 0; i < n; i++)
        v[i].merge = i >= kept;
    return n - kept;
}

/* Imports each segment to merge into t; marks in done those to remove. */
static void merge_into(kc_shared *sh, kcache_store *t, const struct seg *v, size_t n, char *done)
{
    for (size_t i = 0; i < n; i++) {
        char path[KC_SHARED_PATH];
        struct stat st;
        if (!v[i].merge)
            continue;
        path_of(path, sh, "segments", v[i].name);
        int rc = kcache_bundle_import(NULL, t, path, NULL);
        if (rc && stat(path, &st) != 0)
            continue; /* removed by another compaction meanwhile */
        if (rc) {
            /* It will never pass: removed, so that the count stays bounded. */
            kc_store_count(sh->store, KC_SC_REJECTED, 1);
            say(sh, "shared segment %s refused and retired: %s", path, kcache_store_errmsg(t));
        }
        done[i] = 1;
    }
}

/*
 * Removes the merged segments, now that what they hold is in place: a
 * one-entry segment is deleted (a reader copies it in one read, and one that
 * finds it gone lists again); a merged one is retired, for readers that may
 * be copying it.
 */
static void remove_merged(kc_shared *sh, const struct seg *v, size_t n, const char *done)
{
    for (size_t i = 0; i < n; i++) {
        char from[KC_SHARED_PATH], to[KC_SHARED_PATH], aside[300];
        if (!done[i])
            continue;
        path_of(from, sh, "segments", v[i].name);
        if (strrchr(v[i].name, '-')[1] == 'k') {
            unlink(from);
            continue;
        }
        snprintf(aside, sizeof(aside), "%013lld-%s", (long long)kc_now_ms(), v[i].name);
        path_of(to, sh, "retired", aside);
        rename(from, to);
    }
}

/* The listed segments with their sizes (one that vanished meanwhile left out). */
static int sized(struct seg **out, size_t *n, const kc_shared *sh, const struct names *l)
{
    *n = 0;
    if (!(*out = kc_calloc(l->n ? l->n : 1, sizeof(**out))))
        return KCACHE_ENOMEM;
    for (size_t i = 0; i < l->n; i++) {
        char path[KC_SHARED_PATH];
        struct stat st;
        path_of(path, sh, "segments", l->v[i]);
        if (stat(path, &st) == 0)
            (*out)[(*n)++] = (struct seg){l->v[i], (uint64_t)st.st_size, entries_of(l->v[i]), 0};
    }
    return 0;
}

int kc_shared_compact(kc_shared *sh)
{
    char mine[256];
    if (sh->read_only)
        return 1;
    make_dirs(sh);
    if (lease_take(sh, mine, sizeof(mine)))
        return 1;
    struct names l = {0};
    struct seg *v = NULL;
    size_t n = 0;
    char *done = NULL, name[256], local[KC_SHARED_PATH] = "", db[KC_SHARED_PATH + 8] = "",
         err[KC_ERRMSG_SIZE] = "";
    kcache_store *t = NULL;
    int rc = list(&l, sh, "segments");
    if (!rc)
        rc = sized(&v, &n, sh, &l);
    if (rc || n < 2 || choose(v, n, sh->max_size) < 2)
        goto out;
    if (!(done = kc_calloc(n, 1))) {
        rc = KCACHE_ENOMEM;
        goto out;
    }
    fresh_name(name, sizeof(name), sh, "");
    snprintf(local, sizeof(local), "%s/shared-compact-%s", sh->local, name);
    snprintf(db, sizeof(db), "%s.db", local);
    remove_local_store(db);
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    so.max_size = sh->max_size; /* the store's LRU holds the tier's cap */
    if ((rc = kcache_store_open(&t, &so, err, sizeof(err))))
        goto out;
    merge_into(sh, t, v, n, done);
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    if ((rc = kcache_bundle_export(&r, t, local, NULL))) {
        snprintf(err, sizeof(err), "%s", kcache_store_errmsg(t));
        goto out;
    }
    char tag[32]; /* its entry count in its name, for choose() */
    snprintf(tag, sizeof(tag), "-merged-n%llu", (unsigned long long)r.entries);
    fresh_name(name, sizeof(name), sh, tag);
    if ((rc = place(sh, local, name, err, sizeof(err))))
        goto out;
    remove_merged(sh, v, n, done); /* only now, with what they hold in place */
    kc_store_count(sh->store, KC_SC_COMPACTIONS, 1);
out:
    if (rc && rc != KCACHE_ENOMEM)
        say(sh, "compacting the shared directory %s: %s", sh->dir, err[0] ? err : "failed");
    kcache_store_close(t);
    if (local[0] && done) {
        unlink(local);
        remove_local_store(db);
    }
    if (!rc)
        sweep(sh); /* also when nothing needed merging: what killed processes left */
    free(done);
    free(v);
    names_free(&l);
    lease_release(sh, mine);
    return rc;
}
