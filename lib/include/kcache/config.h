/*
 * kcache: settings and where they come from.
 *
 * Every setting is resolved in one order: a command-line flag (given by the
 * caller as an override) > the environment > the settings files > the
 * default. The files, each later one winning: /etc/kcache.conf; the user's,
 * $KCACHE_CONFIG or else $XDG_CONFIG_HOME/kcache/kcache.conf (default
 * ~/.config/kcache/kcache.conf); and `kcache.conf` in the directory of the
 * database, the config file kcache_config_set() writes. Each has
 * `key = value` lines; `#` starts a comment. A file is obeyed only when it is
 * owned by the user or root, writable by nobody else, and in a directory
 * others cannot change (or a sticky one); any other is ignored, and
 * kcache_config_ignored() says which and why.
 *
 * Settings:
 *   dir           the cache directory        KCACHE_DIR      (not in the file)
 *   path          the database file          KCACHE_PATH     (not in the file)
 *   max_size      the size cap, e.g. 2G      KCACHE_MAX_SIZE
 *   busy_timeout  lock wait in milliseconds  KCACHE_BUSY_TIMEOUT
 *   disable       1/true: bypass the cache   KCACHE_DISABLE
 *   compression   zstd, lz4 or none          KCACHE_COMPRESSION
 *                 (how new entries are stored; each keeps its own)
 *   remote, remote_read_only, remote_connect_timeout, remote_timeout,
 *   remote_prefix, remote_secret: the shared tier (see <kcache/remote.h>)
 *   import_require_signature  1/true: import only bundles signed with
 *                 remote_secret (see <kcache/bundle.h>)
 *
 * Thread safety: a kcache_config's settings are not changed after it is
 * loaded and may be read from several threads; kcache_config_set() keeps its
 * message on the config, so calls to it on one config are not concurrent.
 * It writes the file with a rename, so that a reader never sees half of it.
 */
#ifndef KCACHE_CONFIG_H
#define KCACHE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <kcache/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The defaults: what a setting is when no flag, variable or file line sets it
 * (kcache_config_load() shows them; the store and the remote use them).
 * compression's is the codec's own (`kcache config` names it).
 */
#define KCACHE_DEFAULT_MAX_SIZE (UINT64_C(4) << 30)
/* The shared file system tier's cap (shared_max_size), held by its compaction. */
#define KCACHE_DEFAULT_SHARED_MAX_SIZE (UINT64_C(1) << 30)
#define KCACHE_DEFAULT_BUSY_TIMEOUT_MS 5000u
#define KCACHE_DEFAULT_REMOTE_CONNECT_TIMEOUT_MS 500u
#define KCACHE_DEFAULT_REMOTE_TIMEOUT_MS 2000u
#define KCACHE_DEFAULT_REMOTE_PREFIX "kcache:"

/* Where a setting's value came from. */
typedef enum kcache_config_source {
    KCACHE_CONFIG_DEFAULT = 0,
    KCACHE_CONFIG_FILE = 1,
    KCACHE_CONFIG_ENV = 2,
    KCACHE_CONFIG_FLAG = 3,
} kcache_config_source;

/* "default", "file", "environment", "flag". Never NULL. */
KCACHE_API const char *kcache_config_source_name(kcache_config_source source);

/* One setting. Every string is owned by the kcache_config it came from. */
typedef struct kcache_setting {
    const char *name;        /* "max_size" */
    const char *value;       /* as written ("2G"); "" when unset */
    kcache_config_source source;
    const char *origin;      /* the variable, or the file and line ("FILE:LINE"); "" for a default */
    const char *env;         /* the environment variable that sets it */
    const char *description; /* one line */
} kcache_setting;

/* A value given on the command line: it wins over everything else. */
typedef struct kcache_config_override {
    const char *name;
    const char *value;
} kcache_config_override;

typedef struct kcache_config kcache_config;

/*
 * Resolves every setting. overrides (n_overrides of them, may be NULL) name
 * settings given as flags; an unknown name is KCACHE_EINVAL. On success *out
 * is a new object released with kcache_config_free(). On failure *out is NULL
 * and a one-line message is written into errbuf (when not NULL). A config
 * file that cannot be read or has a malformed line is KCACHE_EINVAL naming
 * the file and the line.
 */
KCACHE_API int kcache_config_load(kcache_config **out, const kcache_config_override *overrides,
                                  size_t n_overrides, char *errbuf, size_t errbuf_size);

/* Releases a config. Accepts NULL. */
KCACHE_API void kcache_config_free(kcache_config *config);

/* Number of settings, and the i-th (NULL past the end). Owned by config. */
KCACHE_API size_t kcache_config_count(const kcache_config *config);
KCACHE_API const kcache_setting *kcache_config_setting(const kcache_config *config, size_t i);

/* The setting called name, or NULL. Owned by config. */
KCACHE_API const kcache_setting *kcache_config_find(const kcache_config *config, const char *name);

/* The config file's path (it need not exist). Owned by config. */
KCACHE_API const char *kcache_config_file(const kcache_config *config);

/*
 * The i-th settings file that was not obeyed, as a one-line warning naming it
 * and why (NULL past the last). Owned by config.
 */
KCACHE_API const char *kcache_config_ignored(const kcache_config *config, size_t i);

/*
 * Sets name to value in the config file (value NULL: removes the line),
 * creating the file and its directory if needed, and checking the value
 * first (a size for max_size, a number for busy_timeout, a boolean for
 * disable). Settings that are not kept in the file (dir, path) are
 * KCACHE_EINVAL. The loaded config is not changed: load it again to see the
 * result. Returns 0 or an error whose one-line message is kept on config.
 */
KCACHE_API int kcache_config_set(kcache_config *config, const char *name, const char *value);

/*
 * The message of the last failure on this config, one line, never NULL. Valid
 * until the next call on config.
 */
KCACHE_API const char *kcache_config_errmsg(const kcache_config *config);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_CONFIG_H */
