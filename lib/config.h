/* Where settings come from: the caller, the environment, or the default. */
#ifndef KC_CONFIG_H
#define KC_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/*
 * The database path: explicit, else $KCACHE_PATH, else $KCACHE_DIR/kcache.db,
 * else $XDG_CACHE_HOME/kcache/kcache.db, else $HOME/.cache/kcache/kcache.db.
 * *out is allocated. Returns 0 or an error with a message in err.
 */
int kc_config_path(char **out, const char *explicit_path, char *err, size_t err_size);

/* The cap: explicit if non-zero, else $KCACHE_MAX_SIZE, else the default. */
int kc_config_max_size(uint64_t *out, uint64_t explicit_size, char *err, size_t err_size);

#endif
