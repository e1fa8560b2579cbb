/*
 * Over 700 lines: the settings table, its read of the settings files and its writer share
 * internals.
 *
 * Settings: a flag > the environment > the settings files > the default. The
 * files, each later one winning: /etc/kcache.conf, the user's
 * ($KCACHE_CONFIG, else $XDG_CONFIG_HOME/kcache/kcache.conf, else
 * ~/.config/kcache/kcache.conf), and kcache.conf in the cache directory. A
 * file is obeyed only when it is its user's or root's, nobody else can write
 * it, and its directory is not one others can write (unless sticky): a
 * setting can name the remote whose kernels a hit returns. The store asks for
 * those it needs (path, cap, busy timeout, compression); `kcache config`
 * lists them all with where each came from (file:line).
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/codec.h"
#include "util/common.h"
#include "util/netfs.h"
#include "format/settings.h"
#include "kcache/config.h"

#define KC_CONFIG_FILE_NAME "kcache.conf"
#define KC_SYSTEM_CONFIG_FILE "/etc/kcache.conf"
/* A config file is a few lines; anything larger is not one. */
#define KC_CONFIG_FILE_MAX (64 * 1024)

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int join(char **out, const char *a, const char *b, char *err, size_t err_size)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = kc_malloc(n);
    if (!p)
        return kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    snprintf(p, n, "%s%s%s", a, (*a && a[strlen(a) - 1] == '/') ? "" : "/", b);
    *out = p;
    return 0;
}

/*
 * Where the cache goes when the default directory is on a network file
 * system: a directory of the user's own on this node. WAL cannot be used
 * there (util/netfs.c), and refusing every command left a new user on a
 * cluster with an error from the default settings. /var/tmp, not /tmp: it
 * outlives a reboot, as a cache should. Kernels are shared between nodes by
 * the shared tier (shared = DIR), never by the database.
 */
#define KC_NODE_LOCAL_FORMAT "/var/tmp/kcache-%u"
#define KC_NODE_LOCAL_ORIGIN "node-local: default on network fs"

/*
 * The node-local directory instead of default_dir's dir (on the network file
 * system net), when it can be used: checked as any directory kcache writes
 * in (create.c), so that a directory another user made at its name is
 * refused, not used. Made by the store (db/open.c), 0700.
 */
static int node_local_dir(char **out, const char *dir, const char *net, char *err,
                          size_t err_size)
{
    char local[64];
    snprintf(local, sizeof(local), KC_NODE_LOCAL_FORMAT, (unsigned)geteuid());
    struct stat st;
    char why[KC_ERRMSG_SIZE];
    if (lstat(local, &st) == 0 && kcache_dir_check(local, why, sizeof(why)) != 0)
        return kc_fmt(err, err_size, KCACHE_EIO,
                      "%s is on a network file system (%s), and the node-local directory "
                      "instead cannot be used: %s; set KCACHE_DIR to a local directory",
                      dir, net, why);
    if (lstat(local, &st) == 0 && (S_ISLNK(st.st_mode) || st.st_uid != geteuid()))
        return kc_fmt(err, err_size, KCACHE_EIO,
                      "%s is on a network file system (%s), and the node-local directory "
                      "instead, %s, is %s: set KCACHE_DIR to a local directory",
                      dir, net, local, S_ISLNK(st.st_mode) ? "a symbolic link" : "not yours");
    *out = kc_strdup(local);
    return *out ? 0 : kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
}

/*
 * The cache directory without a flag: $KCACHE_DIR, $XDG_CACHE_HOME/kcache,
 * ~/.cache/kcache; the last two replaced by the node-local directory when
 * they are on a network file system (*net then names it). An explicit
 * KCACHE_DIR is taken as it is: on a network file system the store refuses
 * it, saying why.
 */
static int default_dir_on(char **out, const char **origin, char *net, size_t net_size,
                          char *err, size_t err_size)
{
    const char *v;
    char *dir = NULL;
    int rc;
    *origin = "";
    net[0] = '\0';
    if ((v = env("KCACHE_DIR"))) {
        *origin = "KCACHE_DIR";
        *out = kc_strdup(v);
        return *out ? 0 : kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    }
    if ((v = env("XDG_CACHE_HOME")) && v[0] == '/')
        rc = join(&dir, v, "kcache", err, err_size);
    else if ((v = env("HOME")))
        rc = join(&dir, v, ".cache/kcache", err, err_size);
    else
        return kc_fmt(err, err_size, KCACHE_EINVAL,
                      "no cache location: set KCACHE_DIR (or HOME or XDG_CACHE_HOME)");
    if (rc)
        return rc;
    if (!kc_netfs_name(dir, net, net_size)) {
        *out = dir;
        return 0;
    }
    *origin = KC_NODE_LOCAL_ORIGIN;
    rc = node_local_dir(out, dir, net, err, err_size);
    free(dir);
    return rc;
}

static int default_dir(char **out, const char **origin, char *err, size_t err_size)
{
    char net[128];
    return default_dir_on(out, origin, net, sizeof(net), err, err_size);
}

int kc_config_node_local(char *msg, size_t size, const char *db_path)
{
    char net[128], err[KC_ERRMSG_SIZE], *dir = NULL, *path = NULL;
    const char *origin;
    int is = 0;
    if (env("KCACHE_PATH") || default_dir_on(&dir, &origin, net, sizeof(net), err, sizeof(err)))
        return 0;
    if (net[0] && !join(&path, dir, "kcache.db", err, sizeof(err)) && !strcmp(path, db_path)) {
        const char *v = env("XDG_CACHE_HOME");
        snprintf(msg, size,
                 "the default cache directory (%s) is on a network file system (%s): this "
                 "node's cache is %s; set KCACHE_DIR to choose another, and shared = DIR to "
                 "share kernels between nodes",
                 v && v[0] == '/' ? "$XDG_CACHE_HOME/kcache" : "~/.cache/kcache", net, dir);
        is = 1;
    }
    free(dir);
    free(path);
    return is;
}

int kc_config_path(char **out, const char *explicit_path, char *err, size_t err_size)
{
    const char *v;
    *out = NULL;
    if (explicit_path && *explicit_path)
        v = explicit_path;
    else
        v = env("KCACHE_PATH");
    if (v) {
        *out = kc_strdup(v);
        return *out ? 0 : kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    }
    char *dir = NULL;
    const char *origin;
    int rc = default_dir(&dir, &origin, err, err_size);
    if (!rc)
        rc = join(out, dir, "kcache.db", err, err_size);
    free(dir);
    return rc;
}

/* kcache.conf in the directory of db_path. */
static int file_for(char **out, const char *db_path, char *err, size_t err_size)
{
    const char *slash = strrchr(db_path, '/');
    if (!slash)
        return join(out, ".", KC_CONFIG_FILE_NAME, err, err_size);
    size_t n = (size_t)(slash - db_path);
    char *dir = kc_memdup(db_path, n ? n : 1);
    if (!dir)
        return kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    int rc = join(out, dir, KC_CONFIG_FILE_NAME, err, err_size);
    free(dir);
    return rc;
}

/* The user's settings file: $KCACHE_CONFIG, else under $XDG_CONFIG_HOME or ~/.config; or none. */
static int user_file(char **out, char *err, size_t err_size)
{
    const char *v;
    *out = NULL;
    if ((v = env("KCACHE_CONFIG"))) {
        *out = kc_strdup(v);
        return *out ? 0 : kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    }
    if ((v = env("XDG_CONFIG_HOME")) && v[0] == '/')
        return join(out, v, "kcache/" KC_CONFIG_FILE_NAME, err, err_size);
    if ((v = env("HOME")))
        return join(out, v, ".config/kcache/" KC_CONFIG_FILE_NAME, err, err_size);
    return 0;
}

/* ---- values ------------------------------------------------------------ */

static int check_size(const char *v)
{
    uint64_t n;
    return kcache_parse_max_size(&n, v);
}

static int parse_ms(unsigned *out, const char *v)
{
    uint64_t n;
    if (kcache_parse_count(&n, v, 1, 3600000))
        return KCACHE_EINVAL;
    *out = (unsigned)n;
    return 0;
}

static int check_ms(const char *v)
{
    unsigned n;
    return parse_ms(&n, v);
}

static int parse_bool(int *out, const char *v)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < KC_ARRAY_SIZE(yes); i++) {
        if (!strcasecmp(v, yes[i]))
            return *out = 1, 0;
        if (!strcasecmp(v, no[i]))
            return *out = 0, 0;
    }
    return KCACHE_EINVAL;
}

static int check_bool(const char *v)
{
    int b;
    return parse_bool(&b, v);
}

static int check_compression(const char *v)
{
    int method;
    return kc_compression_parse(&method, v);
}

/* "none" or nothing: no remote, so that one run (a flag, the environment) can turn it off. */
static int check_remote(const char *v)
{
    return v[0] == '\0' || !strcmp(v, "none") || !strncmp(v, "redis://", 8) ||
                   !strncmp(v, "s3://", 5) || !strncmp(v, "http://", 7) ||
                   !strncmp(v, "https://", 8)
               ? 0
               : KCACHE_EINVAL;
}

static int check_endpoint(const char *v)
{
    const char *host = !strncmp(v, "http://", 7) ? v + 7 : !strncmp(v, "https://", 8) ? v + 8
                                                                                    : NULL;
    return host && host[0] && !strpbrk(host, "@/?#") ? 0 : KCACHE_EINVAL;
}

static int check_addressing(const char *v)
{
    return !strcmp(v, "path") || !strcmp(v, "virtual") ? 0 : KCACHE_EINVAL;
}

/* A kind of value: its check, and what the check wants, said in messages; the two together. */
struct value_kind {
    int (*check)(const char *); /* NULL: any text */
    const char *expect;
};

static const struct value_kind as_directory = {NULL, "a directory"};
static const struct value_kind as_file = {NULL, "a file"};
static const struct value_kind as_size = {check_size, "a size such as 2G or 512M (a bare number "
                                                     "is GiB; bytes as 1000B), or 0 or none for "
                                                     "no cap"};
static const struct value_kind as_ms = {check_ms, "milliseconds from 1 to 3600000"};
static const struct value_kind as_bool = {check_bool, "true or false"};
static const struct value_kind as_redis_url = {check_remote,
                                               "redis://[user:password@]host:port[/db], "
                                               "s3://bucket/prefix, http(s)://host/path, or none"};
static const struct value_kind as_text = {NULL, "text"};
static const struct value_kind as_endpoint = {check_endpoint, "http(s)://host[:port]"};
static const struct value_kind as_addressing = {check_addressing, "path or virtual"};
static const struct value_kind as_compression = {check_compression, KC_COMPRESSION_NAMES};

struct setting_def {
    const char *name;
    const char *env;
    int in_file; /* may be set in kcache.conf */
    const struct value_kind *kind;
    const char *description;
};

enum {
    SET_DIR, SET_PATH, SET_MAX_SIZE, SET_BUSY_TIMEOUT, SET_DISABLE, SET_COMPRESSION,
    SET_REMOTE, SET_REMOTE_READ_ONLY, SET_REMOTE_CONNECT_TIMEOUT, SET_REMOTE_TIMEOUT,
    SET_REMOTE_PREFIX, SET_REMOTE_SECRET, SET_REMOTE_TOKEN, SET_S3_ENDPOINT, SET_S3_REGION,
    SET_S3_ADDRESSING, SET_REMOTE_CA, SET_IMPORT_REQUIRE_SIGNATURE, SET_REQUIRE_HIT, SET_LOG,
    SET_SHARED, SET_SHARED_READ_ONLY, SET_SHARED_MAX_SIZE,
    SET_COUNT
};

static const struct setting_def defs[SET_COUNT] = {
    {"dir", "KCACHE_DIR", 0, &as_directory, "the cache directory"},
    {"path", "KCACHE_PATH", 0, &as_file, "the database file"},
    {"max_size", "KCACHE_MAX_SIZE", 1, &as_size, "size cap of the database plus its WAL"},
    {"busy_timeout", "KCACHE_BUSY_TIMEOUT", 1, &as_ms,
     "how long to wait for another process's lock (ms)"},
    {"disable", "KCACHE_DISABLE", 1, &as_bool,
     "bypass the cache: compile every time, store nothing"},
    {"compression", "KCACHE_COMPRESSION", 1, &as_compression,
     "how new entries are stored: lz4 (faster hits, the default), zstd (smallest), none"},
    /* The shared tier (lib/remote/); its defaults are <kcache/config.h>'s, as all are. */
    {"remote", "KCACHE_REMOTE", 1, &as_redis_url,
     "a Redis server, S3 bucket or HTTP server shared by several caches (none or empty: no "
     "remote)"},
    {"remote_read_only", "KCACHE_REMOTE_READ_ONLY", 1, &as_bool,
     "only take entries from the remote, never push"},
    {"remote_connect_timeout", "KCACHE_REMOTE_CONNECT_TIMEOUT", 1, &as_ms,
     "how long to wait for the remote to accept (ms)"},
    {"remote_timeout", "KCACHE_REMOTE_TIMEOUT", 1, &as_ms,
     "how long one remote operation may take (ms)"},
    {"remote_prefix", "KCACHE_REMOTE_PREFIX", 1, &as_text,
     "prefix of kcache's Redis keys, so that several caches can share a server"},
    {"remote_secret", "KCACHE_REMOTE_SECRET", 1, &as_text,
     "shared secret: push signed entries, take only entries signed with it; signs bundles"},
    {"remote_token", "KCACHE_REMOTE_TOKEN", 1, &as_text,
     "bearer token sent to an http(s):// remote (basic auth: user:password@ in remote)"},
    {"s3_endpoint", "KCACHE_S3_ENDPOINT", 1, &as_endpoint,
     "the S3 server of an s3:// remote (default AWS's for s3_region)"},
    {"s3_region", "KCACHE_S3_REGION", 1, &as_text,
     "the region requests to an s3:// remote are signed for (default AWS_REGION or us-east-1)"},
    {"s3_addressing", "KCACHE_S3_ADDRESSING", 1, &as_addressing,
     "path (endpoint/bucket/key) or virtual (bucket.endpoint/key); default path with "
     "s3_endpoint, virtual without"},
    {"remote_ca", "KCACHE_REMOTE_CA", 1, &as_file,
     "the CA certificates (PEM) an https:// remote or s3_endpoint is verified against, "
     "instead of the system's"},
    {"import_require_signature", "KCACHE_IMPORT_REQUIRE_SIGNATURE", 1, &as_bool,
     "import only bundles signed with remote_secret"},
    {"require_hit", "KCACHE_REQUIRE_HIT", 1, &as_bool,
     "a request the cache cannot serve fails instead of compiling (deployments that must "
     "start warm)"},
    {"log", "KCACHE_LOG", 1, &as_file,
     "append a line per request to this file: time, process, key, outcome, reason"},
    /* The shared file system tier (lib/remote/sharedfs.c), between the store and the remote. */
    {"shared", "KCACHE_SHARED", 1, &as_directory,
     "a directory on the cluster's file system shared by the nodes' caches (none: no shared "
     "tier)"},
    {"shared_read_only", "KCACHE_SHARED_READ_ONLY", 1, &as_bool,
     "only take entries from the shared directory, never publish"},
    {"shared_max_size", "KCACHE_SHARED_MAX_SIZE", 1, &as_size,
     "size cap of the shared directory, held by its compaction"},
};

/* Whether v is not a value setting i takes. */
static int invalid(int i, const char *v)
{
    return defs[i].kind->check && defs[i].kind->check(v);
}

static int find_def(const char *name)
{
    for (int i = 0; i < SET_COUNT; i++)
        if (!strcmp(defs[i].name, name))
            return i;
    return -1;
}

/*
 * The environment's value of setting i, or NULL. An empty variable is unset,
 * except KCACHE_REMOTE, where it is how one run turns a remote off.
 */
static const char *env_of(int i)
{
    const char *v = getenv(defs[i].env);
    return v && (*v || i == SET_REMOTE) ? v : NULL;
}

/* ---- the file ---------------------------------------------------------- */

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/*
 * Whether the settings file whose status is st must not be obeyed: 0, or 1
 * with why set to the one-line warning that names it and says why. Its
 * directory counts too: whoever can write there can put another file in its
 * place, unless the directory is sticky.
 */
static int untrusted(char *why, size_t why_size, const char *file, const struct stat *st)
{
    if (!kc_uid_trusted(st->st_uid)) {
        snprintf(why, why_size, "%s is ignored: it is owned by uid %u, not by you (uid %u) or "
                 "root, and a settings file can name the remote that serves kernels; remove it "
                 "or use a file of your own", file, (unsigned)st->st_uid, (unsigned)geteuid());
        return 1;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, why_size, "%s is ignored: others can write it (mode %04o); run "
                 "'chmod go-w %s'", file, (unsigned)(st->st_mode & 07777), file);
        return 1;
    }
    char *dir = kc_path_dir(file);
    if (!dir) {
        snprintf(why, why_size, "%s is ignored: out of memory", file);
        return 1;
    }
    struct stat ds;
    int bad = stat(dir, &ds) == 0 && !(ds.st_mode & S_ISVTX) &&
              (!kc_uid_trusted(ds.st_uid) || (ds.st_mode & (S_IWGRP | S_IWOTH)));
    if (bad)
        snprintf(why, why_size, "%s is ignored: its directory %s can be changed by others "
                 "(owner uid %u, mode %04o, not sticky); keep settings in a directory of your "
                 "own", file, dir, (unsigned)ds.st_uid, (unsigned)(ds.st_mode & 07777));
    free(dir);
    return bad;
}

/*
 * Reads the whole file (at most KC_CONFIG_FILE_MAX). A missing file is an
 * empty one. With why (not NULL), a file that must not be obeyed (untrusted())
 * reads as missing, with why saying so; else why is "". Only a regular file is read: opening a FIFO for reading blocks
 * until someone writes to it, and every verb (kcache path included) would
 * hang, so the open does not block (O_NONBLOCK) and fstat() decides before
 * the first read.
 */
static int read_file(char **out, const char *file, char *why, size_t why_size, char *err,
                     size_t err_size)
{
    *out = NULL;
    if (why && why_size)
        why[0] = '\0';
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return kc_fmt(err, err_size, KCACHE_EIO, "cannot read %s: %s", file, strerror(errno));
    }
    int rc = 0;
    char *text = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = kc_fmt(err, err_size, KCACHE_EINVAL, "%s is not a regular file: kcache reads its "
                    "settings only from one; remove it or put a file there", file);
        goto out;
    }
    if (why && untrusted(why, why_size, file, &st))
        goto out;
    if (!(text = kc_malloc(KC_CONFIG_FILE_MAX + 1))) {
        rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
        goto out;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, text + n, KC_CONFIG_FILE_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kc_fmt(err, err_size, KCACHE_EIO, "cannot read %s: %s", file, strerror(errno));
            goto out;
        }
        if (r == 0 || (n += (size_t)r) > KC_CONFIG_FILE_MAX)
            break;
    }
    if (n > KC_CONFIG_FILE_MAX) {
        rc = kc_fmt(err, err_size, KCACHE_EINVAL, "%s is not a kcache config file (larger than "
                    "%d KiB)", file, KC_CONFIG_FILE_MAX >> 10);
        goto out;
    }
    text[n] = '\0';
    *out = text;
    text = NULL;
out:
    free(text);
    close(fd);
    return rc;
}

/*
 * kcache.conf read once per process while it stays the same file: one
 * compile asks for six or more settings, and reading the file for each
 * would open and parse it six times. A stat() tells an edit (mtime, ctime, size) or a file replaced
 * (`kcache config` renames a new one over it: another inode). Settings are
 * not inputs to any key, so an edit within one timestamp tick of an earlier
 * read in the same process can only delay a setting, never serve a wrong
 * kernel.
 */
enum { LEVEL_SYSTEM, LEVEL_USER, LEVEL_CACHE, LEVEL_COUNT };

static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *file;
    struct stat st;
    char *text; /* NULL: the file was empty */
} file_memo[LEVEL_COUNT];

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * read_file() through the memo of its level: *out is a copy to free, or NULL
 * for no file, an empty one, or one not obeyed (why says why).
 */
static int read_file_once(char **out, int level, const char *file, char *why, size_t why_size,
                          char *err, size_t err_size)
{
    struct stat before, after;
    *out = NULL;
    why[0] = '\0';
    /* Most caches have no file: the stat that says so is enough, no open after it. A
     * user's or system file behind a directory this user cannot search (HOME left as
     * another user's, under sudo or setpriv) is not one of this user's settings. */
    if (stat(file, &before) != 0)
        return errno == ENOENT || errno == ENOTDIR || (errno == EACCES && level != LEVEL_CACHE)
                   ? 0
                   : read_file(out, file, why, why_size, err, err_size);
    if (!S_ISREG(before.st_mode))
        return read_file(out, file, why, why_size, err, err_size); /* read_file says why */
    if (untrusted(why, why_size, file, &before))
        return 0;
    pthread_mutex_lock(&file_lock);
    int hit = file_memo[level].file && !strcmp(file_memo[level].file, file) &&
              same_file(&file_memo[level].st, &before);
    int rc = 0;
    if (hit && file_memo[level].text && !(*out = kc_strdup(file_memo[level].text)))
        rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    pthread_mutex_unlock(&file_lock);
    if (hit || rc)
        return rc;
    if ((rc = read_file(out, file, why, why_size, err, err_size)) || why[0])
        return rc;
    /* Kept only when nothing changed while it was read. */
    if (stat(file, &after) != 0 || !same_file(&before, &after))
        return 0;
    char *name = kc_strdup(file), *text = *out ? kc_strdup(*out) : NULL;
    if (!name || (*out && !text)) {
        free(name);
        free(text);
        return 0;
    }
    pthread_mutex_lock(&file_lock);
    free(file_memo[level].file);
    free(file_memo[level].text);
    file_memo[level].file = name;
    file_memo[level].text = text;
    file_memo[level].st = before;
    pthread_mutex_unlock(&file_lock);
    return 0;
}

/*
 * Calls fn for each `key = value` line. Lines are split in place. Returns 0
 * or KCACHE_EINVAL naming the file and line.
 */
static int parse_lines(char *text, const char *file, char *values[SET_COUNT],
                       int lines[SET_COUNT], char *err, size_t err_size)
{
    int line = 0;
    for (char *p = text; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        line++;
        char *s = trim(p);
        p = nl ? nl + 1 : NULL;
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq)
            return kc_fmt(err, err_size, KCACHE_EINVAL,
                          "%s:%d: expected 'key = value'; fix or remove the line", file, line);
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        int i = find_def(key);
        if (i < 0 || !defs[i].in_file)
            return kc_fmt(err, err_size, KCACHE_EINVAL,
                          "%s:%d: '%s' is not a setting of the config file; fix or remove the "
                          "line",
                          file, line, key);
        if (invalid(i, value))
            return kc_fmt(err, err_size, KCACHE_EINVAL, "%s:%d: %s = '%s': expected %s", file,
                          line, key, value, defs[i].kind->expect);
        values[i] = value;
        lines[i] = line;
    }
    return 0;
}

/*
 * Every settings file read, lowest first: values[i] is the last file's value
 * of setting i (NULL: none), from file level[i], line line[i]; ignored[] says
 * why each file not obeyed was ignored ("" for the others).
 */
struct layers {
    char *file[LEVEL_COUNT]; /* NULL: no file at this level */
    char *text[LEVEL_COUNT];
    char *values[SET_COUNT];
    int level[SET_COUNT];
    int line[SET_COUNT];
    char ignored[LEVEL_COUNT][KC_ERRMSG_SIZE];
};

static void layers_free(struct layers *l)
{
    for (int lv = 0; lv < LEVEL_COUNT; lv++) {
        free(l->file[lv]);
        free(l->text[lv]);
    }
}

/* Reads the files of the cache at db_path (NULL: only the system's and the user's). */
static int layers_load(struct layers *l, const char *db_path, char *err, size_t err_size)
{
    memset(l, 0, sizeof(*l));
    int rc = 0;
    if (!(l->file[LEVEL_SYSTEM] = kc_strdup(KC_SYSTEM_CONFIG_FILE)))
        rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    if (!rc)
        rc = user_file(&l->file[LEVEL_USER], err, err_size);
    if (!rc && db_path)
        rc = file_for(&l->file[LEVEL_CACHE], db_path, err, err_size);
    for (int lv = 0; !rc && lv < LEVEL_COUNT; lv++) {
        char *values[SET_COUNT] = {NULL};
        int lines[SET_COUNT] = {0};
        if (!l->file[lv])
            continue;
        rc = read_file_once(&l->text[lv], lv, l->file[lv], l->ignored[lv],
                            sizeof(l->ignored[lv]), err, err_size);
        if (!rc && l->text[lv])
            rc = parse_lines(l->text[lv], l->file[lv], values, lines, err, err_size);
        for (int i = 0; !rc && i < SET_COUNT; i++) {
            if (values[i]) {
                l->values[i] = values[i];
                l->level[i] = lv;
                l->line[i] = lines[i];
            }
        }
    }
    return rc;
}

/* ---- the loaded config -------------------------------------------------- */

struct kcache_config {
    kcache_setting settings[SET_COUNT];
    char *owned[SET_COUNT * 2]; /* values and origins we allocated */
    size_t n_owned;
    char *file;
    char ignored[LEVEL_COUNT][KC_ERRMSG_SIZE]; /* files not obeyed, and why; "" for none */
    size_t n_ignored;
    char errmsg[KC_ERRMSG_SIZE]; /* the last failure of kcache_config_set() */
};

static const char *keep(kcache_config *c, char *s)
{
    if (!s)
        return NULL;
    c->owned[c->n_owned++] = s;
    return s;
}

KCACHE_API const char *kcache_config_source_name(kcache_config_source source)
{
    switch (source) {
    case KCACHE_CONFIG_FILE: return "file";
    case KCACHE_CONFIG_ENV: return "environment";
    case KCACHE_CONFIG_FLAG: return "flag";
    case KCACHE_CONFIG_DEFAULT: break;
    }
    return "default";
}

KCACHE_API void kcache_config_free(kcache_config *config)
{
    if (!config)
        return;
    for (size_t i = 0; i < config->n_owned; i++)
        free(config->owned[i]);
    free(config->file);
    free(config);
}

static int set_value(kcache_config *c, int i, const char *value, kcache_config_source source,
                     const char *origin)
{
    c->settings[i].value = keep(c, kc_strdup(value));
    c->settings[i].source = source;
    c->settings[i].origin = origin;
    return c->settings[i].value ? 0 : KCACHE_ENOMEM;
}

/* The default of setting i, as kcache config shows it. */
static void default_value(char *def, size_t size, int i)
{
    if (i == SET_MAX_SIZE)
        snprintf(def, size, "%lluG", (unsigned long long)(KCACHE_DEFAULT_MAX_SIZE >> 30));
    else if (i == SET_BUSY_TIMEOUT)
        snprintf(def, size, "%u", KCACHE_DEFAULT_BUSY_TIMEOUT_MS);
    else if (i == SET_COMPRESSION)
        snprintf(def, size, "%s", kc_compression_name(KC_COMPRESSION_DEFAULT));
    else if (i == SET_REMOTE_CONNECT_TIMEOUT)
        snprintf(def, size, "%u", KCACHE_DEFAULT_REMOTE_CONNECT_TIMEOUT_MS);
    else if (i == SET_REMOTE_TIMEOUT)
        snprintf(def, size, "%u", KCACHE_DEFAULT_REMOTE_TIMEOUT_MS);
    else if (i == SET_REMOTE_PREFIX)
        snprintf(def, size, "%s", KCACHE_DEFAULT_REMOTE_PREFIX);
    else if (i == SET_SHARED_MAX_SIZE)
        snprintf(def, size, "%lluG", (unsigned long long)(KCACHE_DEFAULT_SHARED_MAX_SIZE >> 30));
    else if (defs[i].kind == &as_bool)
        snprintf(def, size, "false");
    else
        def[0] = '\0'; /* a text, file or URL: none */
}

/* The caller's overrides (flags) into flag[], each checked: 0, or KCACHE_EINVAL with err set. */
static int read_overrides(const char *flag[SET_COUNT], const kcache_config_override *overrides,
                          size_t n_overrides, char *err, size_t err_size)
{
    for (size_t k = 0; k < n_overrides; k++) {
        int i = overrides[k].name ? find_def(overrides[k].name) : -1;
        if (i < 0 || !overrides[k].value)
            return kc_fmt(err, err_size, KCACHE_EINVAL, "no setting '%s'",
                          overrides[k].name ? overrides[k].name : "(null)");
        if (invalid(i, overrides[k].value))
            return kc_fmt(err, err_size, KCACHE_EINVAL, "%s: '%s' is not %s", defs[i].name,
                          overrides[k].value, defs[i].kind->expect);
        flag[i] = overrides[k].value;
    }
    return 0;
}

KCACHE_API int kcache_config_load(kcache_config **out, const kcache_config_override *overrides,
                                  size_t n_overrides, char *errbuf, size_t errbuf_size)
{
    char tmp[KC_ERRMSG_SIZE];
    char *err = errbuf ? errbuf : tmp;
    size_t err_size = errbuf ? errbuf_size : sizeof(tmp);
    if (errbuf && errbuf_size)
        errbuf[0] = '\0';
    if (!out)
        return kc_fmt(err, err_size, KCACHE_EINVAL, "kcache_config_load: out is NULL");
    *out = NULL;
    const char *flag[SET_COUNT] = {NULL};
    int rc = read_overrides(flag, overrides, n_overrides, err, err_size);
    if (rc)
        return rc;
    char *dir = NULL, *path = NULL;
    struct layers files = {0};
    kcache_config *c = kc_calloc(1, sizeof(*c));
    if (!c)
        return kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    for (int i = 0; i < SET_COUNT; i++) {
        c->settings[i].name = defs[i].name;
        c->settings[i].env = defs[i].env;
        c->settings[i].description = defs[i].description;
        c->settings[i].value = "";
        c->settings[i].origin = "";
    }

    /* Where the files are: the directory first, then the database in it. */
    const char *origin;
    if (flag[SET_DIR]) {
        rc = set_value(c, SET_DIR, flag[SET_DIR], KCACHE_CONFIG_FLAG, "--dir");
    } else {
        if ((rc = default_dir(&dir, &origin, err, err_size)))
            goto out;
        rc = set_value(c, SET_DIR, dir,
                       !strcmp(origin, "KCACHE_DIR") ? KCACHE_CONFIG_ENV : KCACHE_CONFIG_DEFAULT,
                       origin);
    }
    if (rc)
        goto nomem;
    if (flag[SET_PATH])
        rc = set_value(c, SET_PATH, flag[SET_PATH], KCACHE_CONFIG_FLAG, "--path");
    else if (env("KCACHE_PATH"))
        rc = set_value(c, SET_PATH, env("KCACHE_PATH"), KCACHE_CONFIG_ENV, "KCACHE_PATH");
    else if (!(rc = join(&path, c->settings[SET_DIR].value, "kcache.db", err, err_size)))
        rc = set_value(c, SET_PATH, path, c->settings[SET_DIR].source,
                       c->settings[SET_DIR].origin);
    if (rc)
        goto nomem;
    if ((rc = file_for(&c->file, c->settings[SET_PATH].value, err, err_size)))
        goto out;

    if ((rc = layers_load(&files, c->settings[SET_PATH].value, err, err_size)))
        goto out;
    for (int lv = 0; lv < LEVEL_COUNT; lv++)
        if (files.ignored[lv][0])
            memcpy(c->ignored[c->n_ignored++], files.ignored[lv], KC_ERRMSG_SIZE);
    for (int i = SET_MAX_SIZE; i < SET_COUNT; i++) {
        if (flag[i])
            rc = set_value(c, i, flag[i], KCACHE_CONFIG_FLAG, "flag");
        else if (env_of(i)) {
            const char *v = env_of(i);
            if (invalid(i, v)) {
                rc = kc_fmt(err, err_size, KCACHE_EINVAL, "%s=%s: expected %s", defs[i].env, v,
                            defs[i].kind->expect);
                goto out;
            }
            rc = set_value(c, i, v, KCACHE_CONFIG_ENV, defs[i].env);
        } else if (files.values[i]) {
            /* Where it was written, as an editor or a compiler names a line: file:line. */
            const char *file = files.file[files.level[i]];
            size_t n = strlen(file) + 24;
            char *where = kc_malloc(n);
            if (where)
                snprintf(where, n, "%s:%d", file, files.line[i]);
            rc = where ? set_value(c, i, files.values[i], KCACHE_CONFIG_FILE, keep(c, where))
                       : KCACHE_ENOMEM;
        } else {
            char def[32];
            default_value(def, sizeof(def), i);
            rc = set_value(c, i, def, KCACHE_CONFIG_DEFAULT, "");
        }
        if (rc)
            goto nomem;
    }
    *out = c;
    c = NULL;
    goto out;
nomem:
    rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
out:
    layers_free(&files);
    free(dir);
    free(path);
    kcache_config_free(c);
    return rc;
}

KCACHE_API const char *kcache_config_ignored(const kcache_config *config, size_t i)
{
    return config && i < config->n_ignored ? config->ignored[i] : NULL;
}

KCACHE_API size_t kcache_config_count(const kcache_config *config)
{
    return config ? SET_COUNT : 0;
}

KCACHE_API const kcache_setting *kcache_config_setting(const kcache_config *config, size_t i)
{
    return config && i < SET_COUNT ? &config->settings[i] : NULL;
}

KCACHE_API const kcache_setting *kcache_config_find(const kcache_config *config, const char *name)
{
    int i = config && name ? find_def(name) : -1;
    return i < 0 ? NULL : &config->settings[i];
}

KCACHE_API const char *kcache_config_file(const kcache_config *config)
{
    return config ? config->file : NULL;
}

static int mkdirs(char *dir)
{
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(dir, 0700);
        *p = '/';
        if (r && errno != EEXIST)
            return -1;
    }
    return mkdir(dir, 0700) && errno != EEXIST ? -1 : 0;
}

/* Writes text to file through a temporary file and a rename (kcache_file_write()). */
static int replace_file(const char *file, const char *text, size_t n, char *err, size_t err_size)
{
    char *dir = kc_strdup(file);
    if (!dir)
        return kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    int rc = 0;
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdirs(dir))
            rc = kc_fmt(err, err_size, KCACHE_EIO, "cannot create %s: %s", dir, strerror(errno));
    }
    free(dir);
    return rc ? rc : kcache_file_write(file, text, n, 0600, KCACHE_FILE_SYNC, err, err_size);
}

KCACHE_API const char *kcache_config_errmsg(const kcache_config *config)
{
    return kc_errmsg_of(config ? config->errmsg : NULL, "no config");
}

KCACHE_API int kcache_config_set(kcache_config *config, const char *name, const char *value)
{
    if (!config)
        return KCACHE_EINVAL;
    char *err = config->errmsg;
    size_t err_size = sizeof(config->errmsg);
    if (!name)
        return kc_fmt(err, err_size, KCACHE_EINVAL, "kcache_config_set: name is NULL");
    int i = find_def(name);
    if (i < 0)
        return kc_fmt(err, err_size, KCACHE_EINVAL,
                      "no setting '%s' (settings: max_size, busy_timeout, disable, compression, "
                      "remote, remote_read_only, remote_connect_timeout, remote_timeout, "
                      "remote_prefix, remote_secret, remote_token, s3_endpoint, s3_region, "
                      "s3_addressing, remote_ca, import_require_signature)",
                      name);
    if (!defs[i].in_file)
        return kc_fmt(err, err_size, KCACHE_EINVAL,
                      "'%s' cannot be kept in the config file: set %s or use --%s", name,
                      defs[i].env, name);
    if (value && (strchr(value, '\n') || invalid(i, value)))
        return kc_fmt(err, err_size, KCACHE_EINVAL, "%s: '%s' is not %s", name, value,
                      defs[i].kind->expect);

    /* Keep every other line (comments included) as it was; replace or drop ours. */
    char *text = NULL, why[KC_ERRMSG_SIZE];
    kc_buf b = {0};
    int rc = read_file(&text, config->file, why, sizeof(why), err, err_size);
    if (rc)
        return rc;
    /* Its other lines are someone else's: written back, they would become ours. */
    if (why[0])
        return kc_fmt(err, err_size, KCACHE_EIO, "cannot set %s: %s", name, why);
    int done = 0;
    for (char *p = text; p && *p;) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *s = p;
        while (*s == ' ' || *s == '\t')
            s++;
        size_t kn = strlen(name);
        const char *after = s + kn;
        int ours = !strncmp(s, name, kn) && (size_t)(after - p) <= len;
        if (ours) {
            while (*after == ' ' || *after == '\t')
                after++;
            ours = *after == '=';
        }
        if (ours && value && !done) {
            rc = kc_buf_append(&b, name, kn);
            rc = rc ? rc : kc_buf_append(&b, " = ", 3);
            rc = rc ? rc : kc_buf_append(&b, value, strlen(value));
            rc = rc ? rc : kc_buf_append(&b, "\n", 1);
            done = 1;
        } else if (!ours) {
            rc = kc_buf_append(&b, p, len);
            rc = rc ? rc : kc_buf_append(&b, "\n", 1);
        }
        if (rc)
            goto nomem;
        p = nl ? nl + 1 : NULL;
    }
    if (value && !done) {
        rc = kc_buf_append(&b, name, strlen(name));
        rc = rc ? rc : kc_buf_append(&b, " = ", 3);
        rc = rc ? rc : kc_buf_append(&b, value, strlen(value));
        rc = rc ? rc : kc_buf_append(&b, "\n", 1);
        if (rc)
            goto nomem;
    }
    rc = replace_file(config->file, b.data ? (const char *)b.data : "", b.size, err, err_size);
    goto out;
nomem:
    rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
out:
    free(text);
    kc_buf_free(&b);
    return rc;
}

/* ---- what the store asks for ------------------------------------------- */

/*
 * The value the file next to db_path holds for setting i: *out is NULL or a
 * copy to free. A file kcache cannot read or does not understand is an error
 * naming the file and line, never a silent fallback: a stray line next to
 * "disable = true" must not turn the cache back on.
 */
static int file_value(char **out, char *where, size_t where_size, int i, const char *db_path,
                      char *err, size_t err_size)
{
    struct layers files;
    *out = NULL;
    int rc = layers_load(&files, db_path, err, err_size);
    /* The whole value, however long: a copy cut short would read as another number. */
    if (!rc && files.values[i] && !(*out = kc_strdup(files.values[i])))
        rc = kc_fmt(err, err_size, KCACHE_ENOMEM, "out of memory");
    if (!rc && files.values[i])
        snprintf(where, where_size, "%s:%d", files.file[files.level[i]], files.line[i]);
    layers_free(&files);
    return rc;
}

int kc_config_ignored(const char *db_path, char *out, size_t size)
{
    struct layers files;
    char err[KC_ERRMSG_SIZE];
    int n = 0;
    size_t used = 0;
    if (size)
        out[0] = '\0';
    if (layers_load(&files, db_path, err, sizeof(err)) == 0) {
        for (int lv = 0; lv < LEVEL_COUNT; lv++) {
            if (!files.ignored[lv][0])
                continue;
            int w = snprintf(out + used, size - used, "%s%s", n ? "\n" : "", files.ignored[lv]);
            used += w > 0 && (size_t)w < size - used ? (size_t)w : 0;
            n++;
        }
    }
    layers_free(&files);
    return n;
}

/*
 * The one precedence rule, flag > environment > kcache.conf > default: the
 * raw text of setting i (NULL: unset, the default applies) and where it came
 * from, said as the messages say it ("KCACHE_MAX_SIZE=", "max_size = ... in
 * kcache.conf"). *owned is what to free. A file that cannot be read or
 * understood is an error naming it, never a silent fallback.
 */
struct raw {
    const char *v;
    char *owned;
    int from_file;
    const char *env;
    char where[KC_ERRMSG_SIZE]; /* the file and line it came from */
};

static int raw_value(struct raw *out, int i, const char *explicit_value, const char *db_path,
                     char *err, size_t err_size)
{
    out->v = explicit_value;
    out->owned = NULL;
    out->from_file = 0;
    out->env = defs[i].env;
    out->where[0] = '\0';
    if (out->v)
        return 0;
    if ((out->v = env_of(i)))
        return 0;
    int rc = file_value(&out->owned, out->where, sizeof(out->where), i, db_path, err, err_size);
    out->v = out->owned;
    out->from_file = out->owned != NULL;
    return rc;
}

/* A value setting i does not take, said with where it came from and what is expected. */
static int refuse(const struct raw *r, int i, const char *expect, char *err, size_t err_size)
{
    if (r->from_file)
        return kc_fmt(err, err_size, KCACHE_EINVAL, "%s: %s = %s is not %s", r->where,
                      defs[i].name, r->v, expect);
    return kc_fmt(err, err_size, KCACHE_EINVAL, "%s=%s is not %s", r->env, r->v, expect);
}

int kc_config_max_size_at(uint64_t *out, uint64_t explicit_size, const char *db_path, char *err,
                          size_t err_size)
{
    *out = KCACHE_DEFAULT_MAX_SIZE;
    if (explicit_size) {
        *out = explicit_size;
        return 0;
    }
    struct raw r;
    int rc = raw_value(&r, SET_MAX_SIZE, NULL, db_path, err, err_size);
    if (!rc && r.v && kcache_parse_max_size(out, r.v) != 0)
        rc = refuse(&r, SET_MAX_SIZE, "a size: use a number with K, M or G, such as 2G "
                    "(a bare number is GiB; 0 or none: no cap)", err, err_size);
    free(r.owned);
    return rc;
}

int kc_config_busy_timeout_at(unsigned *out, unsigned explicit_ms, const char *db_path, char *err,
                              size_t err_size)
{
    *out = KCACHE_DEFAULT_BUSY_TIMEOUT_MS;
    if (explicit_ms) {
        *out = explicit_ms;
        return 0;
    }
    /* A value that cannot be read is an error, as for the cap: silently waiting
     * 5 s instead of what the user asked for would be a surprise found much later. */
    struct raw r;
    int rc = raw_value(&r, SET_BUSY_TIMEOUT, NULL, db_path, err, err_size);
    if (!rc && r.v && parse_ms(out, r.v))
        rc = refuse(&r, SET_BUSY_TIMEOUT, "a time: use milliseconds from 1 to 3600000", err,
                    err_size);
    free(r.owned);
    return rc;
}

int kc_config_compression_at(int *out, const char *explicit_value, const char *db_path,
                             char *err, size_t err_size)
{
    *out = KC_COMPRESSION_DEFAULT;
    /* Never a silent fallback: entries would go on being written in a codec nobody chose. */
    struct raw r;
    int rc = raw_value(&r, SET_COMPRESSION, explicit_value && *explicit_value ? explicit_value : NULL,
                       db_path, err, err_size);
    if (!rc && r.v && kc_compression_parse(out, r.v)) {
        if (r.v == explicit_value)
            rc = kc_fmt(err, err_size, KCACHE_EINVAL, "compression '%s': expected "
                        KC_COMPRESSION_NAMES, explicit_value);
        else
            rc = refuse(&r, SET_COMPRESSION, "a compression: expected " KC_COMPRESSION_NAMES,
                        err, err_size);
    }
    free(r.owned);
    return rc;
}

int kc_config_disabled(const char *db_path, char *why, size_t why_size)
{
    int b = 0;
    if (why_size)
        why[0] = '\0';
    struct raw r;
    if (raw_value(&r, SET_DISABLE, NULL, db_path, why, why_size))
        return 1; /* a file that cannot be read may be what says disable: the safe side */
    if (r.v && parse_bool(&b, r.v))
        b = 1; /* an unreadable value disables: the safe side */
    free(r.owned);
    return b;
}

int kc_config_value(char *buf, size_t size, const char *name, const char *explicit_value,
                    const char *db_path)
{
    int i = find_def(name);
    if (i < 0 || !defs[i].in_file)
        return KCACHE_EINVAL;
    char err[KC_ERRMSG_SIZE];
    struct raw r;
    /* A file that cannot be read is refused here as by the store, which said why first. */
    if (raw_value(&r, i, explicit_value, db_path, err, sizeof(err)))
        return KCACHE_EINVAL;
    int rc = 0;
    if (!r.v)
        rc = KCACHE_ENOTFOUND;
    else if (invalid(i, r.v) || (size_t)snprintf(buf, size, "%s", r.v) >= size)
        rc = KCACHE_EINVAL;
    free(r.owned);
    return rc;
}

int kc_config_bool(int *out, const char *text)
{
    return parse_bool(out, text);
}

int kc_config_ms(unsigned *out, const char *text)
{
    return parse_ms(out, text);
}
