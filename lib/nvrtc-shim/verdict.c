/*
 * The verdict on a miss's observation (observe.c records it): each path NVRTC
 * opened or probed must be in the key's closure in the same state (a file, or
 * nothing), or be a toolkit file by its real path, one of NVRTC's own fixed
 * probes, or the system's; anything else, and the miss is not stored.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvrtc-shim/observeint.h"

/* ---- the verdict ------------------------------------------------------------------ */

/*
 * path as absolute (against cwd) with "." components and repeated slashes
 * folded; ".." is kept, since after a symbolic link it is not the lexical
 * parent. NULL if out of memory.
 */
static char *absolute(const char *cwd, const char *path)
{
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *joined = malloc(n), *out = malloc(n);
    if (!joined || !out) {
        free(joined);
        free(out);
        return NULL;
    }
    snprintf(joined, n, "%s%s%s", path[0] == '/' ? "" : cwd, path[0] == '/' ? "" : "/", path);
    size_t o = 0;
    for (const char *p = joined; *p;) {
        while (*p == '/')
            p++;
        size_t len = strcspn(p, "/");
        if (len == 0)
            break;
        if (!(len == 1 && p[0] == '.')) {
            out[o++] = '/';
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    free(joined);
    return out;
}

struct known {
    char *path;
    int found;
};

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct known *)a)->path, ((const struct known *)b)->path);
}

/* One record of the observation, its path made absolute. */
struct look {
    char *path;
    int op, seen;
};

static int by_look(const void *a, const void *b)
{
    const struct look *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : x->op != y->op ? x->op - y->op : x->seen - y->seen;
}

static int under(const char *path, const char *root)
{
    size_t n = strlen(root);
    return !strncmp(path, root, n) && (path[n] == '/' || path[n] == '\0');
}

/*
 * Whether abs is a folder above a file the closure found there: NVRTC stats
 * the folders of a header's path once it has opened the header (checked with
 * NVRTC 13 and CuPy's tree: cuda/std/version, then cuda/std and cuda). The
 * header is keyed; its folders exist as long as it does.
 */
static int above_found(const struct known *k, size_t n, const char *abs)
{
    size_t len = strlen(abs), lo = 0, hi = n;
    while (lo < hi) { /* the first path not before abs */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(k[mid].path, abs) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < n && !strncmp(k[i].path, abs, len); i++)
        if (k[i].path[len] == '/' && k[i].found)
            return 1;
    return 0;
}

/*
 * Real paths of folders, remembered for one verdict: a compile reads many
 * files of few folders, and sorted paths come folder by folder.
 */
struct dir_memo {
    char dir[8][PATH_MAX];
    int in[8];
    unsigned next;
};

/* 1 if the folder's real path is under root, 0 if not, -1 if it does not exist. */
static int dir_in(struct dir_memo *m, const char *dir, const char *root)
{
    for (unsigned i = 0; i < 8; i++)
        if (m->dir[i][0] && !strcmp(m->dir[i], dir))
            return m->in[i];
    char real[PATH_MAX];
    int in = realpath(*dir ? dir : "/", real) ? under(real, root) : -1;
    unsigned slot = m->next++ % 8;
    snprintf(m->dir[slot], sizeof(m->dir[slot]), "%s", dir);
    m->in[slot] = in;
    return in;
}

/*
 * A toolkit file or folder by its real path (after symbolic links and ".."),
 * or nothing inside one: the nearest existing folder above it is in the
 * toolkit. Both are keyed by the toolkit's build.
 */
static int in_toolkit(struct dir_memo *m, const char *abs, int seen, const char *root)
{
    if (!root || !*root)
        return 0;
    const char *slash = strrchr(abs, '/');
    const char *base = slash ? slash + 1 : abs;
    struct stat st;
    if (seen != SEEN_ABSENT && (lstat(abs, &st) != 0 || S_ISLNK(st.st_mode) || !strcmp(base, ".") ||
                                !strcmp(base, ".."))) {
        char real[PATH_MAX];
        return realpath(abs, real) && under(real, root);
    }
    /* Not a link itself: where its folder really is says where it is. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", abs);
    for (;;) {
        char *cut = strrchr(dir, '/');
        if (!cut)
            return 0;
        *cut = '\0';
        int in = dir_in(m, dir, root);
        if (in >= 0)
            return in;
    }
}

/* 1 if abs is one of the names NVRTC stats for itself (see kc_observe_verdict). */
static int own_name(const kc_obs *o, const char *abs, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *own = absolute(o->cwd, names[i]);
        int same = own && !strcmp(own, abs);
        free(own);
        if (same)
            return 1;
    }
    return 0;
}

/* Everything a verdict depends on besides the observation, as one string. NULL: no memory. */
static char *closure_text(size_t *size, const kcache_made *made, const char *source_name,
                          const char *const *header_names, size_t n_headers)
{
    const char *root = made->toolkit_root ? made->toolkit_root : "";
    size_t n = strlen(source_name) + strlen(root) + 2;
    for (size_t i = 0; i < n_headers; i++)
        n += strlen(header_names[i]) + 1;
    for (size_t i = 0; i < made->n_probes; i++)
        n += strlen(made->probes[i].path) + 2;
    char *t = malloc(n), *q = t;
    if (!t)
        return NULL;
#define PUT(s_)                                                                                    \
    do {                                                                                           \
        size_t l_ = strlen(s_) + 1;                                                                \
        memcpy(q, (s_), l_);                                                                       \
        q += l_;                                                                                   \
    } while (0)
    PUT(source_name);
    PUT(root);
    for (size_t i = 0; i < n_headers; i++)
        PUT(header_names[i]);
    for (size_t i = 0; i < made->n_probes; i++) {
        *q++ = made->probes[i].found ? '1' : '0';
        PUT(made->probes[i].path);
    }
#undef PUT
    *size = n;
    return t;
}

static const char *verdict(const kc_obs *o, const kcache_made *made, const char *source_name,
                           const char *const *header_names, size_t n_headers);

/* Whether an absolute path is the system's or NVRTC's own cache, never a header. */
static int system_path(const char *abs)
{
    static const char *const roots[] = {"/dev/", "/proc/", "/sys/"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(*roots); i++)
        if (!strncmp(abs, roots[i], strlen(roots[i])))
            return 1;
    char cache[PATH_MAX];
    const char *env = getenv("CUDA_CACHE_PATH"), *home = getenv("HOME");
    int n = env && *env     ? snprintf(cache, sizeof(cache), "%s/", env)
            : home && *home ? snprintf(cache, sizeof(cache), "%s/.nv/ComputeCache/", home)
                            : -1;
    return n > 0 && (size_t)n < sizeof(cache) && !strncmp(abs, cache, (size_t)n);
}

const char *kc_observe_verdict(kc_obs *o, const kcache_made *made, const char *source_name,
                               const char *const *header_names, size_t n_headers)
{
    if (!o)
        return R_INCOMPLETE;
    if (o->taint)
        return o->taint;
    size_t size = 0;
    char *text = closure_text(&size, made, source_name, header_names, n_headers);
    if (!text)
        return R_INCOMPLETE;
    if (o->judged_closure && o->judged_size == size && !memcmp(o->judged_closure, text, size)) {
        free(text);
        return o->judged;
    }
    free(o->judged_closure);
    o->judged_closure = text;
    o->judged_size = size;
    return o->judged = verdict(o, made, source_name, header_names, n_headers);
}

static const char *verdict(const kc_obs *o, const kcache_made *made, const char *source_name,
                           const char *const *header_names, size_t n_headers)
{
    const char *why = NULL;
    size_t n = made->n_probes, n_seen = 0;
    struct known *k = calloc(n + 1, sizeof(*k));
    struct look *saw = NULL;
    struct dir_memo *memo = calloc(1, sizeof(*memo));
    char *source = absolute(o->cwd, source_name);
    static const char *const nvrtc_names[] = {"__nv_nvrtc_builtin_header.h", "__nv_name_map"};
    const char *pwd = o->pwd;
    if (!k || !source || !memo) {
        why = R_INCOMPLETE;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(k[i].path = absolute(o->cwd, made->probes[i].path))) {
            why = R_INCOMPLETE;
            goto out;
        }
        k[i].found = made->probes[i].found;
    }
    qsort(k, n, sizeof(*k), by_path);
    /* Each path NVRTC looked at, once per way it looked and what it found. */
    for (size_t at = 0; at < o->used; n_seen++)
        at += ((size_t)(unsigned char)o->arena[at + 2] | (size_t)(unsigned char)o->arena[at + 3]
                                                             << 8) +
              5;
    if (!(saw = calloc(n_seen + 1, sizeof(*saw)))) {
        why = R_INCOMPLETE;
        goto out;
    }
    for (size_t at = 0, i = 0; i < n_seen; i++) {
        const char *r = o->arena + at;
        at += ((size_t)(unsigned char)r[2] | (size_t)(unsigned char)r[3] << 8) + 5;
        saw[i].op = r[0];
        saw[i].seen = r[1];
        if (!(saw[i].path = absolute(o->cwd, r + 4))) {
            why = R_INCOMPLETE;
            goto out;
        }
    }
    qsort(saw, n_seen, sizeof(*saw), by_look);
    for (size_t i = 0; i < n_seen && !why; i++) {
        if (i && !by_look(&saw[i - 1], &saw[i]))
            continue;
        int op = saw[i].op, seen = saw[i].seen;
        const char *abs = saw[i].path;
        struct known key = {saw[i].path, 0};
        const struct known *hit = n ? bsearch(&key, k, n, sizeof(*k), by_path) : NULL;
        if (hit) {
            /* The resolver keys what is not a regular file as nothing there. */
            if (hit->found != (seen == SEEN_FILE))
                why = R_CHANGED;
        } else if (op == OP_STAT &&
                   (!strcmp(abs, source) ||
                    (seen != SEEN_FILE &&
                     (under(source, abs) || !strcmp(abs, o->cwd) || own_name(o, abs, &pwd, 1))) ||
                    own_name(o, abs, nvrtc_names, 2) ||
                    own_name(o, abs, header_names, n_headers))) {
            /* NVRTC's own: the program's name and the folders above it, the
             * working directory and $PWD (which names it when both are one), the names
             * of its builtin header and of its name-expression map, the names of
             * the headers handed over in memory; it stats them and never opens
             * them (test_sound.py shows a file there changes nothing). */
        } else if (op == OP_STAT && seen == SEEN_DIR && above_found(k, n, abs)) {
            /* A folder of a keyed header's path, which NVRTC stats after opening it. */
        } else if (system_path(abs)) {
            /* The system's, never a header: NVRTC probes the GPU's device nodes
             * (/dev/char/195:0 where a driver is loaded) and its own compute
             * cache (CUDA_CACHE_PATH, ~/.nv/ComputeCache), whose entries are
             * NVIDIA's bytes for NVIDIA's inputs. */
        } else if (!in_toolkit(memo, abs, seen, made->toolkit_root)) {
            why = R_UNPREDICTED;
            char what[PATH_MAX + 64];
            snprintf(what, sizeof(what), "%s %s, which the key does not cover",
                     op == OP_OPEN ? "an open of" : "a look at", abs);
            kc_obs_say_why(what);
        }
    }
out:
    for (size_t i = 0; saw && i < n_seen; i++)
        free(saw[i].path);
    free(saw);
    free(memo);
    for (size_t i = 0; k && i < n; i++)
        free(k[i].path);
    free(k);
    free(source);
    return why;
}
