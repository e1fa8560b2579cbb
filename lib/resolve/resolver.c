/*
 * What every part of the resolver uses (resolveint.h): path folding, nodes, and
 * the one way a resolution is declared not hermetic, which directories are
 * the toolkit's, and the .stdh rule.
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resolve/resolveint.h"

char *kc_path_normalized(const char *path)
{
    size_t len = strlen(path);
    char *res = kc_malloc(len + 2);
    if (!res)
        return NULL;
    int absolute = path[0] == '/';
    char *out = res;
    if (absolute)
        *out++ = '/';
    size_t kept = 0; /* segments in res that a ".." may remove */
    for (const char *in = path + absolute; *in;) {
        const char *end = strchr(in, '/');
        size_t n = end ? (size_t)(end - in) : strlen(in);
        if (n == 0 || (n == 1 && in[0] == '.')) {
            /* "//" and "." are nothing */
        } else if (n == 2 && in[0] == '.' && in[1] == '.') {
            if (kept) {
                out--; /* the slash after the last kept segment */
                while (out > res + absolute && out[-1] != '/')
                    out--;
                kept--;
            } else if (!absolute) {
                memcpy(out, "../", 3);
                out += 3;
            }
        } else {
            memcpy(out, in, n);
            out += n;
            *out++ = '/';
            kept++;
        }
        in += n + (end != NULL);
    }
    if (out > res + absolute && out[-1] == '/')
        out--;
    *out = '\0';
    return res;
}

char *kc_path_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return kc_strdup(".");
    if (slash == path)
        return kc_strdup("/");
    return kc_memdup(path, (size_t)(slash - path));
}

void kc_res_not_hermetic(struct resolver *r, const char *reason, const char *fmt, ...)
{
    if (r->out->not_hermetic)
        return;
    r->out->not_hermetic = 1;
    snprintf(r->out->reason, sizeof(r->out->reason), "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->out->problem, sizeof(r->out->problem), fmt, ap);
    va_end(ap);
}

int kc_res_new_node(struct resolver *r, size_t *out)
{
    if (r->n_nodes >= KC_MAX_FILES) {
        kc_res_not_hermetic(r, "too_many_files", "the compile reads more than %d files", KC_MAX_FILES);
        return 1;
    }
    if (kc_res_grow((void **)&r->nodes, &r->cap_nodes, r->n_nodes, sizeof(*r->nodes)))
        return KCACHE_ENOMEM;
    memset(&r->nodes[r->n_nodes], 0, sizeof(*r->nodes));
    *out = r->n_nodes++;
    return 0;
}

const char *kc_res_where(const struct node *nd)
{
    return nd->path        ? nd->path
           : nd->in_memory ? nd->spelling
           : nd->cmdline   ? "-D"
                           : "the source";
}

/*
 * Whether a directory searched is the toolkit's: one realpath() per
 * directory. *real gets its realpath when it is (for the path below the root).
 */
int kc_res_toolkit_dir(struct resolver *r, const char *dir, const char **real, int *inside)
{
    size_t v;
    *inside = 0;
    const char *root = r->req->toolkit_root;
    if (!root || !*root)
        return 0;
    if (!kc_smap_find(&r->toolkit_dirs, dir, &v)) {
        char *rp = realpath(dir, NULL);
        v = 0;
        if (rp && kc_path_below(root, rp)) {
            if (kc_res_grow((void **)&r->dir_reals, &r->cap_dir_reals, r->n_dir_reals, sizeof(char *))) {
                free(rp);
                return KCACHE_ENOMEM;
            }
            r->dir_reals[r->n_dir_reals++] = rp;
            v = r->n_dir_reals;
        } else {
            free(rp);
        }
        if (kc_smap_put(&r->toolkit_dirs, dir, v))
            return KCACHE_ENOMEM;
    }
    if (v) {
        *inside = 1;
        *real = r->dir_reals[v - 1];
    }
    return 0;
}

/*
 * Whether NVRTC also looks for SPELLING.stdh in a directory where SPELLING is
 * not: it does for a name whose last part has no '.', angled or quoted,
 * beside the includer as in -I directories (checked with NVRTC 13: with -I e
 * -I d, <foo> takes e/foo.stdh over d/foo; <foo.h> never looks for .stdh).
 */
int kc_res_stdh_too(const char *spelling)
{
    const char *base = strrchr(spelling, '/');
    return !strchr(base ? base + 1 : spelling, '.');
}
