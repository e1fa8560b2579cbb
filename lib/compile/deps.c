/*
 * The include resolver (see deps.h for NVRTC's search order).
 *
 * One file is one header to NVRTC. NVRTC looks headers handed in memory up by
 * the exact spelling of an #include, and applies #pragma once to the name it
 * was handed a header under (after folding "a/../b"; checked with NVRTC 13).
 * So a file reached as "config.h" and as "../config.h" would be two headers,
 * and #pragma once would not stop the second copy; and "trig.h" of two
 * directories could not both be handed over. kcache therefore gives every
 * file it reads one canonical name and rewrites, in the text it hands to
 * NVRTC, every literal include of that file to the canonical name, in place
 * on its line (line numbers do not move). The canonical name is the path the
 * file has below the include root it was found from: a file found through -I
 * is named by its spelling ("xsf/config.h"), a file found beside its includer
 * by the includer's name's directory joined with the spelling
 * ("xsf/cephes/../config.h" -> "xsf/config.h"), folded. It never depends on
 * where the checkout lives, so keys do not either; it is also what __FILE__
 * says inside a header (plain NVRTC says the path it opened). Two files that
 * would get one name, or a name a toolkit header or a missing header is
 * looked up by, get a prefix "@N/" instead.
 *
 * Computed includes (#include MACRO) cannot be rewritten: the name each can
 * expand to is handed over as an alias whose content includes the canonical
 * name. Every definition of the macro seen anywhere (any branch) is followed,
 * and identifiers inside a <...> operand are expanded the same way, as the
 * preprocessor does for a computed include: a superset of what the compile
 * reads is resolved, so the key is never short of an input.
 *
 * Every path looked at is recorded (kc_probe) with what was found there, for
 * the manifest: absent paths earlier on the search path matter as much as the
 * files found. Each path is looked at once per resolution, a file reached by
 * several paths is read once (matched by device and inode), and the toolkit is
 * told apart by the directory searched, with one realpath() per directory.
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

#include "compile/depmemo.h"
#include "compile/deps.h"

/* A compile that reads more files than this is not one kcache can key. */
#define KC_MAX_FILES 20000
/* How deep a computed include's macros are followed, and how many names it may give. */
#define KC_MAX_EXPANSION 8
#define KC_MAX_CANDIDATES 64

/* ---- small helpers ---------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    void *q = kc_grow(*p, cap, n, elem, 16);
    if (!q)
        return KCACHE_ENOMEM;
    *p = q;
    return 0;
}

/* A string -> index map, open addressing; keys are copied. */
struct map {
    char **keys;
    size_t *vals;
    size_t cap, n;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int map_find(const struct map *m, const char *key, size_t *val)
{
    if (!m->cap)
        return 0;
    for (size_t i = hash_str(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i])
            return 0;
        if (!strcmp(m->keys[i], key)) {
            if (val)
                *val = m->vals[i];
            return 1;
        }
    }
}

static int map_put(struct map *m, const char *key, size_t val)
{
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        char **keys = kc_calloc(cap, sizeof(*keys));
        size_t *vals = kc_calloc(cap, sizeof(*vals));
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return KCACHE_ENOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i])
                continue;
            size_t j = hash_str(m->keys[i]) & (cap - 1);
            while (keys[j])
                j = (j + 1) & (cap - 1);
            keys[j] = m->keys[i];
            vals[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    size_t i = hash_str(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key) != 0)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) {
        if (!(m->keys[i] = kc_strdup(key)))
            return KCACHE_ENOMEM;
        m->n++;
    }
    m->vals[i] = val;
    return 0;
}

static void map_free(struct map *m)
{
    kc_strv_free(m->keys, m->cap);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

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

static char *dirname_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return kc_strdup(".");
    if (slash == path)
        return kc_strdup("/");
    return kc_memdup(path, (size_t)(slash - path));
}

/* ---- the resolution ----------------------------------------------------- */

/* One file read (node 0 is the main source). */
struct node {
    char *path;           /* NULL for the source */
    char *dir;            /* quoted includes look here first; NULL: nowhere */
    size_t parent;        /* the node whose include found it first */
    char *spelling;       /* ... by this spelling */
    int beside;           /* ... in that includer's own directory */
    char *text;           /* owned, except the source's */
    size_t size;
    kc_directive *dirs;
    size_t n_dirs;
    size_t *target;       /* per directive: 1 + the node a literal include names, or 0 */
    char *canon;
    int in_memory;        /* handed over by the caller under spelling: keeps that name */
    int toolkit;          /* a toolkit header: followed for what it includes, never handed over */
    kc_probe id;          /* identity and digest of text as read */
    kc_memo *memo;        /* text and dirs are the memo's, borrowed */
};

/* A spelling left to NVRTC: a toolkit header or a missing one. */
struct leftname {
    char *name;
    int state;            /* KC_DEP_TOOLKIT or KC_DEP_ABSENT */
    char *rel;
    char *path;
};

/* A name a computed (or not rewritable) include is handed over under. */
struct alias {
    char *name;
    size_t node;
};

struct pending {
    size_t node, dir;
};

struct macro {
    char **values;
    size_t n;
};

struct resolver {
    const kc_deps_request *req;
    kc_deps *out;
    struct node *nodes;
    size_t n_nodes, cap_nodes, next_scan;
    struct map by_path;      /* path -> 1 + node index, or 0: not a user file */
    struct map by_identity;  /* "dev:ino" -> node */
    struct map toolkit_dirs; /* directory -> 0 user, 1 + index into dir_reals */
    char **dir_reals;
    size_t n_dir_reals, cap_dir_reals;
    char **tk_rels;          /* toolkit headers found, below the root */
    size_t n_tk_rels, cap_tk_rels;
    size_t cap_probes;
    struct leftname *left;
    size_t n_left, cap_left;
    struct map by_left;      /* name -> index into left */
    struct alias *aliases;
    size_t n_aliases, cap_aliases;
    struct pending *pending;
    size_t n_pending, cap_pending;
    struct map by_memory;    /* in-memory header name -> node */
    struct map by_macro;     /* name -> index into macros */
    /* Spellings that toolkit headers include and NVRTC finds in the toolkit
     * or nowhere: an in-memory header of that name would take their place. */
    struct map tk_names;
    struct map tk_nodes;     /* toolkit path -> node, so each is scanned once */
    struct map vouchers;     /* directory -> 1 + its DIR probe, or 0: none exists */
    struct map wrappers;     /* function-like macros that wrap __has_include */
    struct pending *calls;   /* NAME(arg) seen in conditions, not yet probed */
    size_t n_calls, cap_calls;
    char **func_names, **func_bodies;  /* every function-like #define seen */
    size_t n_funcs, cap_funcs, cap_func_bodies;
    struct macro *macros;
    size_t n_macros, cap_macros;
    char *msg;
    size_t msg_size;
};

static void not_hermetic(struct resolver *r, const char *reason, const char *fmt, ...)
    KC_PRINTF(3, 4);

static void not_hermetic(struct resolver *r, const char *reason, const char *fmt, ...)
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

/*
 * Whether a directory searched is the toolkit's: one realpath() per
 * directory. *real gets its realpath when it is (for the path below the root).
 */
static int toolkit_dir(struct resolver *r, const char *dir, const char **real, int *inside)
{
    size_t v;
    *inside = 0;
    const char *root = r->req->toolkit_root;
    if (!root || !*root)
        return 0;
    if (!map_find(&r->toolkit_dirs, dir, &v)) {
        char *rp = realpath(dir, NULL);
        size_t n = strlen(root);
        v = 0;
        if (rp && strncmp(rp, root, n) == 0 && (rp[n] == '/' || rp[n] == '\0')) {
            if (grow((void **)&r->dir_reals, &r->cap_dir_reals, r->n_dir_reals, sizeof(char *))) {
                free(rp);
                return KCACHE_ENOMEM;
            }
            r->dir_reals[r->n_dir_reals++] = rp;
            v = r->n_dir_reals;
        } else {
            free(rp);
        }
        if (map_put(&r->toolkit_dirs, dir, v))
            return KCACHE_ENOMEM;
    }
    if (v) {
        *inside = 1;
        *real = r->dir_reals[v - 1];
    }
    return 0;
}

static int add_probe(struct resolver *r, const char *path, const kc_probe *p)
{
    kc_deps *o = r->out;
    if (grow((void **)&o->probes, &r->cap_probes, o->n_probes, sizeof(*o->probes)))
        return KCACHE_ENOMEM;
    kc_probe *q = &o->probes[o->n_probes];
    *q = *p;
    if (!(q->path = kc_strdup(path)))
        return KCACHE_ENOMEM;
    o->n_probes++;
    return 0;
}

/*
 * The DIR probe for the nearest existing directory above path (1 + its index
 * in the probes, recorded once per resolution), or 0. An absent path under a
 * directory whose identity holds is still absent: the closure check stats
 * that directory once instead of every name looked for in it, which is what
 * following toolkit headers past user directories would otherwise cost.
 */
static int voucher(struct resolver *r, const char *path, uint32_t *out)
{
    char *missing[64]; /* directories walked through that do not exist */
    size_t n_missing = 0;
    char *dir = dirname_of(path);
    int rc = dir ? 0 : KCACHE_ENOMEM;
    size_t v = 0;
    while (!rc) {
        if (map_find(&r->vouchers, dir, &v))
            break;
        struct stat st;
        if (stat(dir, &st) == 0) {
            v = 0;
            if (S_ISDIR(st.st_mode) && r->out->n_probes < UINT32_MAX) {
                kc_probe p;
                memset(&p, 0, sizeof(p));
                p.state = KC_PROBE_DIR;
                kc_identity_of(&p, &st);
                if (!(rc = add_probe(r, dir, &p)))
                    v = r->out->n_probes;
            }
            rc = rc ? rc : map_put(&r->vouchers, dir, v);
            break;
        }
        if (!strcmp(dir, "/") || !strcmp(dir, ".") || n_missing == 64) {
            v = 0;
            break;
        }
        char *up = dirname_of(dir);
        if (!up) {
            rc = KCACHE_ENOMEM;
            break;
        }
        missing[n_missing++] = dir;
        dir = up;
    }
    /* A name under a missing directory is vouched for by what vouches for that directory. */
    for (size_t i = 0; i < n_missing; i++) {
        if (!rc)
            rc = map_put(&r->vouchers, missing[i], v);
        free(missing[i]);
    }
    free(dir);
    *out = rc ? 0 : (uint32_t)v;
    return rc;
}

static int new_node(struct resolver *r, size_t *out)
{
    if (r->n_nodes >= KC_MAX_FILES) {
        not_hermetic(r, "too_many_files", "the compile reads more than %d files", KC_MAX_FILES);
        return 1;
    }
    if (grow((void **)&r->nodes, &r->cap_nodes, r->n_nodes, sizeof(*r->nodes)))
        return KCACHE_ENOMEM;
    memset(&r->nodes[r->n_nodes], 0, sizeof(*r->nodes));
    *out = r->n_nodes++;
    return 0;
}

/* Whether an absolute real path lies in the toolkit; *rel: below its root. */
static int in_toolkit_root(const struct resolver *r, const char *real, const char **rel)
{
    const char *root = r->req->toolkit_root;
    size_t n = root ? strlen(root) : 0;
    if (!n || strncmp(real, root, n) != 0 || real[n] != '/')
        return 0;
    *rel = real + n + 1;
    return 1;
}

/*
 * A toolkit header found at path: a node of its own (once per file), scanned
 * for what it includes but never handed over or hashed into the key. Sets
 * *node to 1 + its index.
 */
static int toolkit_node(struct resolver *r, const char *path, const char *rel, size_t *node)
{
    size_t v;
    if (map_find(&r->tk_nodes, rel, &v)) {
        *node = v + 1;
        return 0;
    }
    size_t k;
    int rc = new_node(r, &k);
    if (rc)
        return rc < 0 ? rc : 0;
    struct node *nd = &r->nodes[k];
    nd->toolkit = 1;
    struct stat st;
    kc_probe id;
    memset(&id, 0, sizeof(id));
    if (stat(path, &st) == 0)
        kc_identity_of(&id, &st);
    kc_memo *memo = kc_memo_get(path, &id);
    if (memo) {
        nd->memo = memo;
        nd->text = memo->text;
        nd->size = memo->size;
        nd->dirs = memo->dirs;
        nd->n_dirs = memo->n_dirs;
        nd->id = memo->id;
    } else if ((rc = kc_identity_read(path, &nd->text, &nd->size, &nd->id))) {
        if (rc == KCACHE_ENOMEM)
            return rc;
        /* Gone or unreadable since the stat: NVRTC could not be sure to read it either. */
        not_hermetic(r, "unreadable_header", "cannot read %s", path);
        return 0;
    }
    if (!(nd->path = kc_strdup(path)) || !(nd->dir = dirname_of(path)) ||
        map_put(&r->tk_nodes, rel, k))
        return KCACHE_ENOMEM;
    *node = k + 1;
    return 0;
}

/*
 * Looks at one path (once per resolution). *node is 1 + the file found there
 * (a user file, or with *toolkit_rel set a toolkit header), or 0 for nothing.
 * A file is a toolkit header only by its real path: one reached through the
 * toolkit's directory but lying elsewhere ("/usr/local/cuda/../../home/x.h",
 * a symlink out of it) is a user file, read and hashed like any other.
 * by_path remembers each outcome: 0 nothing, 2 * (1 + node) a user file,
 * 2 * (1 + i) + 1 the toolkit header tk_rels[i] (its node in tk_nodes).
 *
 * Probes are recorded for the manifest, except what a toolkit header's
 * lookups find inside the toolkit, which the toolkit's build keys: on a hit
 * that would be a stat() per toolkit header for nothing.
 */
static int look(struct resolver *r, const char *path, int in_toolkit, int from_toolkit,
                size_t *node, const char **toolkit_rel)
{
    *node = 0;
    *toolkit_rel = NULL;
    size_t v;
    if (map_find(&r->by_path, path, &v)) {
        if (v & 1) {
            *toolkit_rel = r->tk_rels[v / 2 - 1];
            if (map_find(&r->tk_nodes, *toolkit_rel, &v))
                *node = v + 1;
        } else if (v) {
            *node = v / 2;
        }
        return 0;
    }
    kc_probe p;
    memset(&p, 0, sizeof(p));
    int rc;
    struct stat st;
    int regular = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (regular && in_toolkit) {
        char *real = realpath(path, NULL);
        const char *rel;
        if (!real && errno == ENOMEM)
            return KCACHE_ENOMEM;
        if (real && in_toolkit_root(r, real, &rel)) {
            p.state = KC_PROBE_TOOLKIT;
            kc_identity_of(&p, &st);
            char *copy = kc_strdup(rel);
            free(real);
            if (!copy ||
                grow((void **)&r->tk_rels, &r->cap_tk_rels, r->n_tk_rels, sizeof(char *))) {
                free(copy);
                return KCACHE_ENOMEM;
            }
            r->tk_rels[r->n_tk_rels++] = copy;
            *toolkit_rel = copy;
            if ((rc = map_put(&r->by_path, path, 2 * r->n_tk_rels + 1)) ||
                (!from_toolkit && (rc = add_probe(r, path, &p))))
                return rc;
            return toolkit_node(r, path, copy, node);
        }
        free(real); /* outside the toolkit, whatever the path says: a user file */
    }
    if (!regular && in_toolkit && from_toolkit) {
        /* Nothing there, inside the toolkit: the toolkit's build keys that. */
        return map_put(&r->by_path, path, 0);
    }
    char *text = NULL;
    size_t size = 0;
    kc_memo *memo = NULL;
    if (regular) {
        kc_probe id;
        memset(&id, 0, sizeof(id));
        kc_identity_of(&id, &st);
        memo = kc_memo_get(path, &id);
    }
    if (memo) {
        p = memo->id; /* read before, and the same file still: its digest with it */
        rc = 0;
    } else {
        rc = kc_identity_read(path, &text, &size, &p);
    }
    if (rc == KCACHE_ENOMEM)
        return rc;
    if (rc) {
        int err = errno;
        if (err != ENOENT && err != ENOTDIR && err != EISDIR && err != ELOOP &&
            err != ENAMETOOLONG) {
            /* NVRTC could not read it either; if its include is live, NVRTC says so. */
            not_hermetic(r, "unreadable_header", "cannot read %s (%s)", path,
                         err == EFBIG ? "larger than 64 MiB" : strerror(err));
        }
        memset(&p, 0, sizeof(p));
        p.state = KC_PROBE_ABSENT;
        if ((rc = map_put(&r->by_path, path, 0)) || (rc = voucher(r, path, &p.vouch)) ||
            (rc = add_probe(r, path, &p)))
            return rc;
        return 0;
    }
    p.state = KC_PROBE_FILE;
    char id[64];
    snprintf(id, sizeof(id), "%llx:%llx", (unsigned long long)p.dev, (unsigned long long)p.ino);
    if (map_find(&r->by_identity, id, &v)) {
        /* The same file by another path: one header to NVRTC. */
        free(text);
        kc_memo_release(memo);
    } else {
        size_t k;
        if ((rc = new_node(r, &k))) {
            free(text);
            kc_memo_release(memo);
            return rc < 0 ? rc : 0;
        }
        struct node *nd = &r->nodes[k];
        nd->text = memo ? memo->text : text;
        nd->size = memo ? memo->size : size;
        nd->id = p;
        if (memo) {
            nd->memo = memo;
            nd->dirs = memo->dirs;
            nd->n_dirs = memo->n_dirs;
        }
        if (!(nd->path = kc_strdup(path)) || !(nd->dir = dirname_of(path)) ||
            map_put(&r->by_identity, id, k))
            return KCACHE_ENOMEM;
        v = k;
    }
    if ((rc = map_put(&r->by_path, path, 2 * (v + 1))) || (rc = add_probe(r, path, &p)))
        return rc;
    *node = v + 1;
    return 0;
}

static int add_left(struct resolver *r, const char *name, int state, char *rel, const char *path)
{
    size_t v;
    if (map_find(&r->by_left, name, &v)) {
        struct leftname *l = &r->left[v];
        if (l->state != state || (rel && l->rel && strcmp(rel, l->rel) != 0))
            not_hermetic(r, "ambiguous_name",
                         "'%s' names a toolkit header from one place and %s from another",
                         name, state == KC_DEP_ABSENT || l->state == KC_DEP_ABSENT
                                   ? "nothing"
                                   : "another toolkit header");
        free(rel);
        return 0;
    }
    if (grow((void **)&r->left, &r->cap_left, r->n_left, sizeof(*r->left))) {
        free(rel);
        return KCACHE_ENOMEM;
    }
    struct leftname *l = &r->left[r->n_left];
    memset(l, 0, sizeof(*l));
    l->state = state;
    l->rel = rel;
    if (!(l->name = kc_strdup(name)) || (path && !(l->path = kc_strdup(path))) ||
        map_put(&r->by_left, name, r->n_left)) {
        free(l->name);
        free(l->path);
        free(l->rel);
        return KCACHE_ENOMEM;
    }
    r->n_left++;
    return 0;
}

/* A spelling a toolkit header's lookup leaves to the toolkit or to nothing. */
static int add_tk_name(struct resolver *r, const char *spelling)
{
    return map_find(&r->tk_names, spelling, NULL) ? 0 : map_put(&r->tk_names, spelling, 0);
}

/*
 * Resolves one spelling seen from node `from`, in NVRTC's order. *found is 1
 * + the user file it names, or 0: a toolkit header or nothing, recorded as a
 * name left to NVRTC when a user file asked, and as a toolkit header's
 * lookup (tk_names) when a toolkit header did. Toolkit headers are followed
 * too: what they include is looked for in the user's directories first when
 * those come first, exactly as NVRTC would, and a user file found so is
 * handed over under the spelling the toolkit header uses.
 */
static int add_alias(struct resolver *r, const char *name, size_t node);

static int resolve(struct resolver *r, const char *spelling, int angle, size_t from,
                   size_t *found)
{
    const kc_deps_request *q = r->req;
    int from_toolkit = r->nodes[from].toolkit;
    *found = 0;
    if (!*spelling)
        return 0;
    size_t v;
    if (map_find(&r->by_memory, spelling, &v)) {
        /* Headers handed over in memory come first, by exact spelling, as in NVRTC. */
        *found = v + 1;
        return 0;
    }
    char path[PATH_MAX];
    int rc;
    for (size_t i = 0; i <= q->n_include_dirs; i++) {
        const char *dir;
        if (spelling[0] == '/') {
            if (i > 0)
                break;
            dir = NULL;
        } else if (i == 0) {
            if (angle || !r->nodes[from].dir)
                continue;
            dir = r->nodes[from].dir;
        } else {
            dir = q->include_dirs[i - 1];
        }
        int len = dir ? snprintf(path, sizeof(path), "%s/%s", dir, spelling)
                      : snprintf(path, sizeof(path), "%s", spelling);
        if (len < 0 || (size_t)len >= sizeof(path))
            continue;
        const char *real = NULL;
        int inside = 0;
        if (dir && (rc = toolkit_dir(r, dir, &real, &inside)))
            return rc;
        if (!dir && q->toolkit_root)
            inside = 1; /* an absolute spelling: its real path decides */
        size_t node;
        const char *rel = NULL;
        if ((rc = look(r, path, inside, from_toolkit, &node, &rel)))
            return rc;
        if (rel) {
            if (from_toolkit)
                return add_tk_name(r, spelling);
            char *copy = kc_strdup(rel);
            if (!copy)
                return KCACHE_ENOMEM;
            return add_left(r, spelling, KC_DEP_TOOLKIT, copy, path);
        }
        if (node) {
            struct node *nd = &r->nodes[node - 1];
            if (!nd->spelling && node - 1 != 0) {
                nd->parent = from;
                nd->beside = i == 0 && dir != NULL && !from_toolkit;
                if (!(nd->spelling = kc_strdup(spelling)))
                    return KCACHE_ENOMEM;
            }
            *found = node;
            /* A toolkit header's text is not rewritten: the file goes in under its spelling. */
            return from_toolkit ? add_alias(r, spelling, node - 1) : 0;
        }
    }
    if (from_toolkit)
        return add_tk_name(r, spelling);
    return add_left(r, spelling, KC_DEP_ABSENT, NULL, NULL);
}

static int add_alias(struct resolver *r, const char *name, size_t node)
{
    for (size_t i = 0; i < r->n_aliases; i++) {
        if (strcmp(r->aliases[i].name, name) != 0)
            continue;
        if (r->aliases[i].node != node)
            not_hermetic(r, "ambiguous_computed_include",
                         "'%s' names two different files (%s and %s): include them by "
                         "name",
                         name, r->nodes[r->aliases[i].node].path, r->nodes[node].path);
        return 0;
    }
    if (grow((void **)&r->aliases, &r->cap_aliases, r->n_aliases, sizeof(*r->aliases)))
        return KCACHE_ENOMEM;
    if (!(r->aliases[r->n_aliases].name = kc_strdup(name)))
        return KCACHE_ENOMEM;
    r->aliases[r->n_aliases++].node = node;
    return 0;
}

static int add_macro(struct resolver *r, const char *name, const char *value)
{
    size_t v;
    if (!map_find(&r->by_macro, name, &v)) {
        if (grow((void **)&r->macros, &r->cap_macros, r->n_macros, sizeof(*r->macros)))
            return KCACHE_ENOMEM;
        memset(&r->macros[r->n_macros], 0, sizeof(*r->macros));
        if (map_put(&r->by_macro, name, r->n_macros))
            return KCACHE_ENOMEM;
        v = r->n_macros++;
    }
    struct macro *m = &r->macros[v];
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->values[i], value))
            return 0;
    char **grown = kc_realloc(m->values, (m->n + 1) * sizeof(char *));
    if (!grown)
        return KCACHE_ENOMEM;
    m->values = grown;
    if (!(m->values[m->n] = kc_strdup(value)))
        return KCACHE_ENOMEM;
    m->n++;
    return 0;
}

static int is_ident_char(int c);

static int add_func(struct resolver *r, const char *name, const char *body)
{
    if (grow((void **)&r->func_names, &r->cap_funcs, r->n_funcs, sizeof(char *)) ||
        grow((void **)&r->func_bodies, &r->cap_func_bodies, r->n_funcs, sizeof(char *)))
        return KCACHE_ENOMEM;
    r->func_names[r->n_funcs] = kc_strdup(name);
    r->func_bodies[r->n_funcs] = kc_strdup(body ? body : "");
    r->n_funcs++;
    return r->func_names[r->n_funcs - 1] && r->func_bodies[r->n_funcs - 1] ? 0 : KCACHE_ENOMEM;
}

static const char *where(const struct node *nd)
{
    return nd->path ? nd->path : nd->in_memory ? nd->spelling : "the source";
}

static int scan_node(struct resolver *r, size_t k)
{
    struct node *nd = &r->nodes[k];
    int rc = nd->memo ? 0 : kc_scan(&nd->dirs, &nd->n_dirs, nd->text, nd->size);
    if (rc)
        return rc;
    if (!nd->memo && nd->path && r->req->read_at) {
        /* Kept for the next resolution of this process, if it can be trusted. */
        kc_memo *m = kc_memo_adopt(nd->path, &nd->id, &nd->text, nd->size, &nd->dirs,
                                   nd->n_dirs, r->req->read_at);
        if (m) {
            nd->memo = m;
            nd->text = m->text;
            nd->dirs = m->dirs;
        }
    }
    if (!(r->nodes[k].target = kc_calloc(nd->n_dirs + 1, sizeof(size_t))))
        return KCACHE_ENOMEM;
    size_t n = nd->n_dirs;
    for (size_t i = 0; !rc && i < n; i++) {
        /* r->nodes moves as files are added: index it afresh. */
        kc_directive *d = &r->nodes[k].dirs[i];
        switch (d->kind) {
        case KC_DIR_INCLUDE:
        case KC_DIR_HAS_INCLUDE:
            if (!d->computed) {
                size_t found;
                if ((rc = resolve(r, d->text, d->angle, k, &found)))
                    break;
                d = &r->nodes[k].dirs[i];
                r->nodes[k].target[i] = found;
                /* A spelling that cannot be rewritten in place is handed over as is. */
                if (found && !d->exact && !r->nodes[k].toolkit)
                    rc = add_alias(r, d->text, found - 1);
                break;
            }
            if (grow((void **)&r->pending, &r->cap_pending, r->n_pending, sizeof(*r->pending)))
                return KCACHE_ENOMEM;
            r->pending[r->n_pending++] = (struct pending){k, i};
            break;
        case KC_DIR_INCLUDE_NEXT:
            not_hermetic(r, "include_next", "#include_next <%s> (in %s) cannot be made hermetic",
                         d->text, where(&r->nodes[k]));
            break;
        case KC_DIR_DEFINE:
            rc = add_macro(r, d->text, d->value ? d->value : "");
            break;
        case KC_DIR_FUNC_DEFINE:
            rc = add_func(r, d->text, d->value);
            break;
        case KC_DIR_CALL:
            if (grow((void **)&r->calls, &r->cap_calls, r->n_calls, sizeof(*r->calls)))
                return KCACHE_ENOMEM;
            r->calls[r->n_calls++] = (struct pending){k, i};
            break;
        case KC_DIR_UNCERTAIN:
            /* A digit separator lexes as C++14 does, which the scanner follows. */
            if (d->digit_sep && !r->req->before_cxx14)
                break;
            not_hermetic(r, "uncertain_construct",
                         "%s:%u: %s: kcache cannot be sure what the compile reads",
                         where(&r->nodes[k]), d->line, d->text);
            break;
        }
    }
    return rc;
}

/* ---- macros that wrap __has_include ---------------------------------- */

/* Whether text names `name` as a whole identifier (followed by '(' when call is set). */
static int mentions(const char *text, const char *name, size_t name_n, int call)
{
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        if (p > text && is_ident_char((unsigned char)p[-1]))
            continue;
        const char *e = p + name_n;
        if (is_ident_char((unsigned char)*e))
            continue;
        while (call && isspace((unsigned char)*e))
            e++;
        if (!call || *e == '(')
            return 1;
    }
    return 0;
}

/*
 * The function-like macros that reach __has_include (directly, or through
 * another such macro), and the object-like ones that name one: their calls
 * probe what they are given (CCCL's _CCCL_HAS_INCLUDE(<x>)).
 */
static int find_wrappers(struct resolver *r)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < r->n_funcs; i++) {
            const char *name = r->func_names[i];
            if (map_find(&r->wrappers, name, NULL))
                continue;
            int wraps = mentions(r->func_bodies[i], "__has_include", 13, 0);
            for (size_t j = 0; !wraps && j < r->wrappers.cap; j++) {
                const char *w = r->wrappers.keys[j];
                wraps = w && mentions(r->func_bodies[i], w, strlen(w), 1);
            }
            if (wraps) {
                if (map_put(&r->wrappers, name, 0))
                    return KCACHE_ENOMEM;
                changed = 1;
            }
        }
        for (size_t j = 0; j < r->by_macro.cap; j++) {
            const char *name = r->by_macro.keys[j];
            if (!name || map_find(&r->wrappers, name, NULL))
                continue;
            const struct macro *m = &r->macros[r->by_macro.vals[j]];
            for (size_t d = 0; d < m->n; d++) {
                if (map_find(&r->wrappers, m->values[d], NULL)) {
                    if (map_put(&r->wrappers, name, 0))
                        return KCACHE_ENOMEM;
                    changed = 1;
                    break;
                }
            }
        }
    }
    return 0;
}

/* Probes the argument of every call of a wrapper; *done counts calls handled. */
static int resolve_calls(struct resolver *r, size_t *progress)
{
    int rc = find_wrappers(r);
    for (size_t i = 0; !rc && i < r->n_calls; i++) {
        struct pending c = r->calls[i];
        if (c.node == (size_t)-1)
            continue;
        const kc_directive *d = &r->nodes[c.node].dirs[c.dir];
        if (!map_find(&r->wrappers, d->text, NULL))
            continue;
        r->calls[i].node = (size_t)-1;
        (*progress)++;
        const char *a = d->value ? d->value : "";
        size_t n = strlen(a);
        int angle = n >= 2 && a[0] == '<' && a[n - 1] == '>' && !memchr(a + 1, '>', n - 2);
        int quote = n >= 2 && a[0] == '"' && a[n - 1] == '"' && !memchr(a + 1, '"', n - 2);
        if (!angle && !quote) {
            not_hermetic(r, "computed_has_include",
                         "%s:%u: %s(%s) asks __has_include of something kcache cannot work out",
                         where(&r->nodes[c.node]), d->line, d->text, a);
            continue;
        }
        char *name = kc_memdup(a + 1, n - 2);
        size_t found;
        if (!name)
            return KCACHE_ENOMEM;
        rc = resolve(r, name, angle, c.node, &found);
        if (!rc && found && !r->nodes[c.node].toolkit)
            rc = add_alias(r, name, found - 1);
        free(name);
    }
    return rc;
}

/* ---- computed includes ------------------------------------------------ */

struct cands {
    char **names;
    int *angle;
    size_t n;
    int overflow;
};

static int add_cand(struct cands *c, const char *name, size_t n, int angle)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->angle[i] == angle && strlen(c->names[i]) == n && !memcmp(c->names[i], name, n))
            return 0;
    if (c->n >= KC_MAX_CANDIDATES) {
        c->overflow = 1;
        return 0;
    }
    char **names = kc_realloc(c->names, (c->n + 1) * sizeof(char *));
    if (!names)
        return KCACHE_ENOMEM;
    c->names = names;
    int *angles = kc_realloc(c->angle, (c->n + 1) * sizeof(int));
    if (!angles)
        return KCACHE_ENOMEM;
    c->angle = angles;
    if (!(c->names[c->n] = kc_memdup(name, n)))
        return KCACHE_ENOMEM;
    c->angle[c->n++] = angle;
    return 0;
}

static void cands_free(struct cands *c)
{
    kc_strv_free(c->names, c->n);
    free(c->angle);
}

static int is_ident_char(int c)
{
    return isalnum(c) || c == '_' || c == '$';
}

/* The definitions of a name: the last -D of it, and every #define seen. */
static size_t definitions(struct resolver *r, const char *id, size_t id_n, const char **out,
                          size_t max)
{
    size_t n = 0;
    for (size_t i = r->req->n_defines; i-- > 0 && n < max;) {
        const char *def = r->req->defines[i];
        const char *eq = strchr(def, '=');
        size_t dn = eq ? (size_t)(eq - def) : strlen(def);
        if (dn == id_n && !memcmp(def, id, id_n)) {
            out[n++] = eq ? eq + 1 : "1";
            break;
        }
    }
    char name[256];
    size_t v;
    if (id_n < sizeof(name)) {
        memcpy(name, id, id_n);
        name[id_n] = '\0';
        if (map_find(&r->by_macro, name, &v))
            for (size_t i = 0; i < r->macros[v].n && n < max; i++)
                out[n++] = r->macros[v].values[i];
    }
    return n;
}

/*
 * The body of a <...> operand that came from a macro: its identifiers are
 * macro-expanded (each definition, and the identifier itself for when it is
 * not defined at that point). from: where to look for the next identifier.
 */
static int expand_body(struct resolver *r, const char *body, size_t from, int depth,
                       struct cands *c)
{
    if (c->overflow)
        return 0;
    size_t n = strlen(body);
    for (size_t i = from; i < n; i++) {
        if (!(isalpha((unsigned char)body[i]) || body[i] == '_') ||
            (i > 0 && (is_ident_char((unsigned char)body[i - 1]) || body[i - 1] == '.')))
            continue;
        size_t e = i;
        while (e < n && is_ident_char((unsigned char)body[e]))
            e++;
        const char *defs[16];
        size_t nd = depth < KC_MAX_EXPANSION ? definitions(r, body + i, e - i, defs, 16) : 0;
        if (!nd) {
            i = e;
            continue;
        }
        int rc = expand_body(r, body, e, depth, c); /* not defined here: kept */
        for (size_t k = 0; !rc && k < nd; k++) {
            const char *v = defs[k];
            while (isspace((unsigned char)*v))
                v++;
            size_t vn = strlen(v);
            while (vn && isspace((unsigned char)v[vn - 1]))
                vn--;
            char *next = kc_malloc(i + vn + (n - e) + 1);
            if (!next)
                return KCACHE_ENOMEM;
            memcpy(next, body, i);
            memcpy(next + i, v, vn);
            memcpy(next + i + vn, body + e, n - e + 1);
            rc = expand_body(r, next, i, depth + 1, c);
            free(next);
        }
        return rc;
    }
    /* Spacing inside <...> from tokens: what the preprocessors do is drop it. */
    char *name = kc_malloc(n + 1);
    if (!name)
        return KCACHE_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)body[i]))
            name[k++] = body[i];
    int rc = k ? add_cand(c, name, k, 1) : 0;
    free(name);
    return rc;
}

/* Returns 1 with candidates added, 0 if some definition leads nowhere kcache can follow. */
static int expand(struct resolver *r, const char *text, int depth, struct cands *c, int *rc)
{
    while (isspace((unsigned char)*text))
        text++;
    size_t n = strlen(text);
    while (n && isspace((unsigned char)text[n - 1]))
        n--;
    if (n >= 2 && text[0] == '"' && text[n - 1] == '"' && !memchr(text + 1, '"', n - 2)) {
        *rc = add_cand(c, text + 1, n - 2, 0);
        return !*rc;
    }
    if (n >= 2 && text[0] == '<' && text[n - 1] == '>' && !memchr(text + 1, '>', n - 2)) {
        char *body = kc_memdup(text + 1, n - 2);
        if (!body) {
            *rc = KCACHE_ENOMEM;
            return 0;
        }
        *rc = depth ? expand_body(r, body, 0, depth, c) : add_cand(c, body, n - 2, 1);
        free(body);
        return !*rc && !c->overflow;
    }
    size_t id_n = 0;
    while (id_n < n && is_ident_char((unsigned char)text[id_n]))
        id_n++;
    if (!id_n || id_n != n || depth >= KC_MAX_EXPANSION)
        return 0;
    const char *defs[16];
    size_t nd = definitions(r, text, id_n, defs, 16);
    for (size_t i = 0; i < nd; i++)
        if (!expand(r, defs[i], depth + 1, c, rc))
            return 0;
    return nd > 0 && !c->overflow;
}

static int resolve_pending(struct resolver *r, const struct pending *p)
{
    struct cands c = {0};
    int rc = 0;
    char *text = kc_strdup(r->nodes[p->node].dirs[p->dir].text);
    if (!text)
        return KCACHE_ENOMEM;
    if (!expand(r, text, 0, &c, &rc) && !rc) {
        const struct node *nd = &r->nodes[p->node];
        not_hermetic(r, "computed_include",
                     "%s:%u: '#include %s' names a header kcache cannot work out: define "
                     "that macro with -D as a quoted header name, or include the header by name",
                     nd->path ? nd->path : "the source", nd->dirs[p->dir].line, text);
    }
    for (size_t i = 0; !rc && i < c.n; i++) {
        size_t found;
        if (!(rc = resolve(r, c.names[i], c.angle[i], p->node, &found)) && found)
            rc = add_alias(r, c.names[i], found - 1);
    }
    free(text);
    cands_free(&c);
    return rc;
}

/* ---- canonical names and the texts handed over ------------------------ */

static int name_taken(struct resolver *r, const struct map *canon, const char *name, size_t k)
{
    size_t v;
    if (map_find(canon, name, &v))
        return v != k;
    if (map_find(&r->by_left, name, NULL) || map_find(&r->tk_names, name, NULL))
        return 1;
    for (size_t i = 0; i < r->n_aliases; i++)
        if (!strcmp(r->aliases[i].name, name))
            return r->aliases[i].node != k;
    return r->req->source_name && !strcmp(r->req->source_name, name);
}

static int assign_names(struct resolver *r)
{
    struct map canon = {0};
    int rc = 0;
    for (size_t k = 1; !rc && k < r->n_nodes; k++) {
        struct node *nd = &r->nodes[k];
        if (nd->toolkit)
            continue;
        if (nd->in_memory) {
            /* Created first, with distinct names: nothing can have taken one yet. */
            if (!(nd->canon = kc_strdup(nd->spelling)) || map_put(&canon, nd->canon, k))
                rc = KCACHE_ENOMEM;
            continue;
        }
        const char *base = "";
        if (nd->beside && nd->parent != 0)
            base = r->nodes[nd->parent].canon;
        size_t n = strlen(base) + strlen(nd->spelling) + 2;
        char *pref = kc_malloc(n);
        if (!pref) {
            rc = KCACHE_ENOMEM;
            break;
        }
        const char *slash = strrchr(base, '/');
        if (slash && nd->spelling[0] != '/')
            snprintf(pref, n, "%.*s/%s", (int)(slash - base), base, nd->spelling);
        else
            snprintf(pref, n, "%s", nd->spelling);
        char *name = kc_path_normalized(pref);
        free(pref);
        if (!(pref = name)) {
            rc = KCACHE_ENOMEM;
            break;
        }
        for (unsigned i = 2; !rc && (!*name || name_taken(r, &canon, name, k)); i++) {
            /* Taken: a prefix no spelling has, without ".." for NVRTC to fold away. */
            size_t m = strlen(pref) * 3 + 32;
            char *alt = kc_malloc(m);
            if (!alt) {
                rc = KCACHE_ENOMEM;
                break;
            }
            int w = snprintf(alt, m, "@%u/", i);
            for (const char *s = pref; *s; s++) {
                if (s[0] == '.' && s[1] == '.' && (s == pref || s[-1] == '/') &&
                    (s[2] == '/' || !s[2])) {
                    memcpy(alt + w, "up", 2);
                    w += 2;
                    s++;
                } else {
                    alt[w++] = *s == '/' && s == pref ? '_' : *s;
                }
            }
            alt[w] = '\0';
            if (name != pref)
                free(name);
            name = alt;
        }
        if (name != pref)
            free(pref);
        nd->canon = name;
        if (!rc && map_put(&canon, name, k))
            rc = KCACHE_ENOMEM;
    }
    map_free(&canon);
    return rc;
}

/* The node's text with every literal include of a user file spelled by its canonical name. */
static int rewrite(struct resolver *r, size_t k, char **out, size_t *out_size)
{
    const struct node *nd = &r->nodes[k];
    kc_buf b = {0};
    size_t at = 0;
    *out = NULL;
    for (size_t i = 0; i < nd->n_dirs; i++) {
        const kc_directive *d = &nd->dirs[i];
        if (!nd->target[i] || !d->exact)
            continue;
        const char *canon = r->nodes[nd->target[i] - 1].canon;
        size_t len = strlen(d->text);
        if (!strcmp(canon, d->text))
            continue;
        if (kc_buf_append(&b, nd->text + at, d->at - at) ||
            kc_buf_append(&b, canon, strlen(canon)))
            goto nomem;
        at = d->at + len;
    }
    if (!b.size && at == 0)
        return 0;
    if (kc_buf_append(&b, nd->text + at, nd->size - at) || kc_buf_append(&b, "", 1))
        goto nomem;
    *out = (char *)b.data;
    *out_size = b.size - 1;
    return 0;
nomem:
    kc_buf_free(&b);
    return KCACHE_ENOMEM;
}

static int push_dep(kc_deps *o, size_t *cap, kc_dep **out)
{
    if (grow((void **)&o->deps, cap, o->n_deps, sizeof(*o->deps)))
        return KCACHE_ENOMEM;
    *out = &o->deps[o->n_deps++];
    memset(*out, 0, sizeof(**out));
    return 0;
}

static int cmp_dep(const void *a, const void *b)
{
    return strcmp(((const kc_dep *)a)->name, ((const kc_dep *)b)->name);
}

static int emit(struct resolver *r)
{
    kc_deps *o = r->out;
    size_t cap = 0;
    kc_dep *d;
    int rc = rewrite(r, 0, &o->source, &o->source_size);
    for (size_t k = 1; !rc && k < r->n_nodes; k++) {
        struct node *nd = &r->nodes[k];
        char *text = NULL;
        size_t size = 0;
        if (nd->toolkit)
            continue;
        if ((rc = rewrite(r, k, &text, &size)) || (rc = push_dep(o, &cap, &d))) {
            free(text);
            break;
        }
        d->state = KC_DEP_USER;
        if (text) {
            kc_digest(d->digest, text, size);
        } else { /* handed over as read: the digest it was read with */
            if (nd->memo) {
                if (!(text = kc_memdup(nd->text, nd->size))) {
                    rc = KCACHE_ENOMEM;
                    break;
                }
            } else { /* the node gives its text up */
                text = nd->text;
                nd->text = NULL;
            }
            size = nd->size;
            memcpy(d->digest, nd->id.digest, KC_DIGEST_SIZE);
        }
        assert(nd->id.state == KC_PROBE_FILE); /* every text here was read with its digest */
        d->content = text;
        d->size = size;
        if (!(d->name = kc_strdup(nd->canon)) ||
            !(d->path = kc_strdup(nd->path ? nd->path : "(in memory)")))
            rc = KCACHE_ENOMEM;
    }
    for (size_t i = 0; !rc && i < r->n_aliases; i++) {
        const struct node *nd = &r->nodes[r->aliases[i].node];
        if (!strcmp(nd->canon, r->aliases[i].name))
            continue;
        if ((rc = push_dep(o, &cap, &d)))
            break;
        size_t n = strlen(nd->canon) + 16;
        d->state = KC_DEP_USER;
        if (!(d->content = kc_malloc(n)) || !(d->name = kc_strdup(r->aliases[i].name)) ||
            !(d->path = kc_strdup(nd->path ? nd->path : "(in memory)"))) {
            rc = KCACHE_ENOMEM;
            break;
        }
        d->size = (size_t)snprintf(d->content, n, "#include \"%s\"\n", nd->canon);
        kc_digest(d->digest, d->content, d->size);
    }
    for (size_t i = 0; !rc && i < r->n_left; i++) {
        struct leftname *l = &r->left[i];
        if ((rc = push_dep(o, &cap, &d)))
            break;
        d->state = l->state;
        d->name = l->name;
        d->toolkit_rel = l->rel;
        d->path = l->path;
        l->name = l->rel = l->path = NULL;
    }
    if (rc)
        return rc;
    if (o->n_deps)
        qsort(o->deps, o->n_deps, sizeof(*o->deps), cmp_dep);
    for (size_t i = 1; i < o->n_deps; i++)
        if (!strcmp(o->deps[i].name, o->deps[i - 1].name))
            not_hermetic(r, "ambiguous_name", "'%s' would name two headers", o->deps[i].name);
    for (size_t i = 0; i < r->n_aliases; i++)
        if (map_find(&r->tk_names, r->aliases[i].name, NULL))
            not_hermetic(r, "ambiguous_name",
                         "'%s' names a user header from one place and a toolkit header or "
                         "nothing from a toolkit header",
                         r->aliases[i].name);
    return 0;
}

static void resolver_free(struct resolver *r)
{
    for (size_t k = 0; k < r->n_nodes; k++) {
        struct node *nd = &r->nodes[k];
        free(nd->path);
        free(nd->dir);
        free(nd->spelling);
        if (nd->memo) {
            kc_memo_release(nd->memo);
        } else {
            if (k)
                free(nd->text);
            kc_directives_free(nd->dirs, nd->n_dirs);
        }
        free(nd->target);
        free(nd->canon);
    }
    free(r->nodes);
    map_free(&r->by_path);
    map_free(&r->by_identity);
    map_free(&r->toolkit_dirs);
    kc_strv_free(r->dir_reals, r->n_dir_reals);
    kc_strv_free(r->tk_rels, r->n_tk_rels);
    for (size_t i = 0; i < r->n_left; i++) {
        free(r->left[i].name);
        free(r->left[i].rel);
        free(r->left[i].path);
    }
    free(r->left);
    map_free(&r->by_left);
    for (size_t i = 0; i < r->n_aliases; i++)
        free(r->aliases[i].name);
    free(r->aliases);
    free(r->pending);
    map_free(&r->by_memory);
    map_free(&r->by_macro);
    map_free(&r->tk_names);
    map_free(&r->tk_nodes);
    map_free(&r->vouchers);
    map_free(&r->wrappers);
    free(r->calls);
    kc_strv_free(r->func_names, r->n_funcs);
    kc_strv_free(r->func_bodies, r->n_funcs);
    for (size_t i = 0; i < r->n_macros; i++) {
        for (size_t j = 0; j < r->macros[i].n; j++)
            free(r->macros[i].values[j]);
        free(r->macros[i].values);
    }
    free(r->macros);
}

int kc_deps_resolve(kc_deps *out, const kc_deps_request *req, char *msg, size_t msg_size)
{
    struct resolver r = {.req = req, .out = out, .msg = msg, .msg_size = msg_size};
    memset(out, 0, sizeof(*out));
    if (msg && msg_size)
        msg[0] = '\0';
    size_t src;
    int rc = new_node(&r, &src);
    if (!rc) {
        r.nodes[src].text = (char *)req->source; /* borrowed: never freed (k == 0) */
        r.nodes[src].size = req->source_size;
        if (!req->no_source_include && req->source_dir &&
            !(r.nodes[src].dir = kc_strdup(req->source_dir)))
            rc = KCACHE_ENOMEM;
    }
    /*
     * Headers handed over in memory (nvrtcCreateProgram's) are all inputs,
     * read or not, and are scanned; their quoted includes are searched for
     * beside the header's name first, as NVRTC does. A name
     * given twice: NVRTC takes the first, and so does kcache. They keep
     * their names: the caller's includes find them by those.
     */
    for (size_t i = 0; !rc && i < req->n_mem; i++) {
        const char *name = req->mem_names[i];
        size_t k;
        if (map_find(&r.by_memory, name, NULL))
            continue;
        if ((rc = new_node(&r, &k))) {
            rc = rc < 0 ? rc : 0;
            break;
        }
        struct node *nd = &r.nodes[k];
        nd->in_memory = 1;
        nd->size = strlen(req->mem_contents[i]);
        if (!(nd->text = kc_memdup(req->mem_contents[i], nd->size)) ||
            !(nd->spelling = kc_strdup(name)) || map_put(&r.by_memory, name, k)) {
            rc = KCACHE_ENOMEM;
            break;
        }
        nd->id.state = KC_PROBE_FILE;
        kc_digest(nd->id.digest, nd->text, nd->size);
        /* NVRTC looks for an in-memory header's "quoted" includes beside its
         * name, relative to the working directory. */
        if (!(nd->dir = dirname_of(name))) {
            rc = KCACHE_ENOMEM;
            break;
        }
    }
    for (size_t i = 0; !rc && i < req->n_pre_includes; i++) {
        /* -include headers are read as if the main source included them first. */
        size_t found;
        rc = resolve(&r, req->pre_includes[i], 0, src, &found);
        if (!rc && found)
            rc = add_alias(&r, req->pre_includes[i], found - 1);
    }
    size_t done_pending = 0;
    while (!rc) {
        while (!rc && r.next_scan < r.n_nodes)
            rc = scan_node(&r, r.next_scan++);
        size_t progress = 0;
        if (!rc)
            rc = resolve_calls(&r, &progress);
        if (rc || (done_pending == r.n_pending && !progress && r.next_scan == r.n_nodes))
            break;
        /* Computed includes, once every #define in reach has been seen. */
        size_t upto = r.n_pending;
        for (; !rc && done_pending < upto; done_pending++) {
            struct pending p = r.pending[done_pending];
            rc = resolve_pending(&r, &p);
        }
    }
    if (!rc && !out->not_hermetic)
        rc = assign_names(&r);
    if (!rc && !out->not_hermetic)
        rc = emit(&r);
    resolver_free(&r);
    if (rc) {
        if (rc == KCACHE_ENOMEM && msg && msg_size)
            snprintf(msg, msg_size, "out of memory resolving includes");
        kc_deps_free(out);
        return rc;
    }
    return 0;
}

void kc_deps_free(kc_deps *deps)
{
    for (size_t i = 0; i < deps->n_deps; i++) {
        free(deps->deps[i].name);
        free(deps->deps[i].content);
        free(deps->deps[i].toolkit_rel);
        free(deps->deps[i].path);
    }
    free(deps->deps);
    free(deps->source);
    for (size_t i = 0; i < deps->n_probes; i++)
        free(deps->probes[i].path);
    free(deps->probes);
    memset(deps, 0, sizeof(*deps));
}
