#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "kcache/store.h"

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
    if ((v = env("KCACHE_DIR")))
        return join(out, v, "kcache.db", err, err_size);
    if ((v = env("XDG_CACHE_HOME")) && v[0] == '/')
        return join(out, v, "kcache/kcache.db", err, err_size);
    if ((v = env("HOME")))
        return join(out, v, ".cache/kcache/kcache.db", err, err_size);
    return kc_fmt(err, err_size, KCACHE_EINVAL,
                  "no cache location: set KCACHE_DIR (or HOME or XDG_CACHE_HOME)");
}

int kc_config_max_size(uint64_t *out, uint64_t explicit_size, char *err, size_t err_size)
{
    if (explicit_size) {
        *out = explicit_size;
        return 0;
    }
    const char *v = env("KCACHE_MAX_SIZE");
    if (v) {
        if (kcache_parse_size(out, v) != 0 || *out == 0)
            return kc_fmt(err, err_size, KCACHE_EINVAL,
                          "KCACHE_MAX_SIZE=%s is not a size: use a number with K, M or G, "
                          "such as 2G",
                          v);
        return 0;
    }
    *out = KCACHE_DEFAULT_MAX_SIZE;
    return 0;
}
