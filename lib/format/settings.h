/* Where settings come from: the caller, the environment, the settings files, or the default. */
#ifndef KC_CONFIG_H
#define KC_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/*
 * The database path: explicit, else $KCACHE_PATH, else $KCACHE_DIR/kcache.db,
 * else $XDG_CACHE_HOME/kcache/kcache.db, else $HOME/.cache/kcache/kcache.db; the last two
 * in /var/tmp/kcache-$UID instead when on a network file system (settings.c).
 * *out is allocated. Returns 0 or an error with a message in err.
 */
int kc_config_path(char **out, const char *explicit_path, char *err, size_t err_size);

/*
 * Whether db_path is the default cache's, moved to the node-local directory
 * because the default directory is on a network file system: 1 with the
 * sentence that says so in msg (the store says it once, when it makes the
 * cache there), else 0.
 */
int kc_config_node_local(char *msg, size_t size, const char *db_path);

/*
 * The cap: explicit if non-zero, else $KCACHE_MAX_SIZE, else max_size in the
 * kcache.conf next to db_path (when db_path is not NULL), else the default.
 */
int kc_config_max_size_at(uint64_t *out, uint64_t explicit_size, const char *db_path, char *err,
                          size_t err_size);

/* The busy timeout in ms: explicit, $KCACHE_BUSY_TIMEOUT, the file, the default. */
int kc_config_busy_timeout_at(unsigned *out, unsigned explicit_ms, const char *db_path, char *err,
                              size_t err_size);

/*
 * How the store encodes what it writes (a KC_CODEC_* from util/codec.h):
 * explicit when not NULL or "", else $KCACHE_COMPRESSION, else compression
 * in the file next to db_path, else KC_COMPRESSION_DEFAULT. A value that is
 * not zstd, lz4 or none is KCACHE_EINVAL with a message naming them.
 */
int kc_config_compression_at(int *out, const char *explicit_value, const char *db_path,
                             char *err, size_t err_size);

/*
 * Whether KCACHE_DISABLE (or disable in the file) turns the cache off. A
 * config file that cannot be read or understood turns it off too (its
 * "disable = true" may be what was not read), and why says why; else why
 * is "".
 */
int kc_config_disabled(const char *db_path, char *why, size_t why_size);

/*
 * The value of a setting kept in kcache.conf (name as in the file): explicit
 * when not NULL (a flag), else its environment variable, else the file next
 * to db_path. Copied into buf. Returns 0, KCACHE_ENOTFOUND when unset, or
 * KCACHE_EINVAL when the value is not what the setting expects (or too long).
 */
int kc_config_value(char *buf, size_t size, const char *name, const char *explicit_value,
                    const char *db_path);
/*
 * The settings files of the cache at db_path that are not obeyed (another
 * user's, writable by others, in a directory others can change): how many,
 * with one line each in out (separated by '\n') naming the file and why.
 */
int kc_config_ignored(const char *db_path, char *out, size_t size);

/* Parses a boolean (1/true/yes/on, 0/false/no/off) and milliseconds (1..3600000). */
int kc_config_bool(int *out, const char *text);
int kc_config_ms(unsigned *out, const char *text);

#endif
