/*
 * The search (see deps.h for NVRTC's order): one spelling resolved from one
 * includer, and each path looked at on the way: a user file (read with its
 * identity and digest, or from the process's memo), a toolkit header by its
 * real path, or nothing; and what the manifest records of it, with the
 * directory that vouches for an absent name.
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

static int add_probe(struct resolver *r, const char *path, const kc_probe *p)
{
    kc_deps *o = r->out;
    if (kc_res_grow((void **)&o->probes, &r->cap_probes, o->n_probes, sizeof(*o->probes)))
        return KCACHE_ENOMEM;
    kc_probe *q = &o->probes[o->n_probes];
    *q = *p;
    /* A directory is the name's by where it lies (manifest.c), not by who asked. */
    q->beside_name = p->state != KC_PROBE_DIR && r->looking_beside;
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
    char *dir = kc_path_dirname(path);
    int rc = dir ? 0 : KCACHE_ENOMEM;
    size_t v = 0;
    while (!rc) {
        if (kc_smap_find(&r->vouchers, dir, &v))
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
            rc = rc ? rc : kc_smap_put(&r->vouchers, dir, v);
            break;
        }
        if (!strcmp(dir, "/") || !strcmp(dir, ".") || n_missing == 64) {
            v = 0;
            break;
        }
        char *up = kc_path_dirname(dir);
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
            rc = kc_smap_put(&r->vouchers, missing[i], v);
        free(missing[i]);
    }
    free(dir);
    *out = rc ? 0 : (uint32_t)v;
    return rc;
}

/* Whether an absolute real path lies in the toolkit; *rel: below its root. */
static int in_toolkit_root(const struct resolver *r, const char *real, const char **rel)
{
    *rel = kc_path_below(r->req->toolkit_root, real);
    return *rel && **rel; /* a file, never the root itself */
}

/*
 * A toolkit header found at path: a node of its own (once per file), scanned
 * for what it includes but never handed over or hashed into the key. Sets
 * *node to 1 + its index.
 */
static int toolkit_node(struct resolver *r, const char *path, const char *rel,
                        const struct stat *seen, size_t *node)
{
    size_t v;
    if (kc_smap_find(&r->tk_nodes, rel, &v)) {
        *node = v + 1;
        return 0;
    }
    size_t k;
    int rc = kc_res_new_node(r, &k);
    if (rc)
        return rc < 0 ? rc : 0;
    struct node *nd = &r->nodes[k];
    nd->toolkit = 1;
    struct stat st;
    kc_probe id;
    memset(&id, 0, sizeof(id));
    kc_identity_of(&id, seen); /* the look's own stat, a moment ago */
    kc_memo *memo = kc_memo_get(path, &id);
    if (memo) {
        nd->memo = memo;
        nd->text = memo->text;
        nd->size = memo->size;
        nd->dirs = memo->dirs;
        nd->n_dirs = memo->n_dirs;
        nd->id = memo->id;
    } else {
        /* Read for its includes, not hashed: the toolkit's build keys it. */
        memset(&st, 0, sizeof(st));
        if ((rc = kc_read_file_stat(path, KC_IDENTITY_MAX_SIZE, &nd->text, &nd->size, &st))) {
            if (rc == KCACHE_ENOMEM)
                return rc;
            /* Gone or unreadable since the stat: NVRTC could not be sure to read it either. */
            kc_res_not_hermetic(r, "unreadable_header", "cannot read %s", path);
            return 0;
        }
        kc_identity_of(&nd->id, &st);
        nd->id.state = KC_PROBE_TOOLKIT;
    }
    if (!(nd->path = kc_strdup(path)) || !(nd->dir = kc_path_dirname(path)) ||
        kc_smap_put(&r->tk_nodes, rel, k))
        return KCACHE_ENOMEM;
    *node = k + 1;
    return 0;
}

/*
 * The real path of a regular file in one of the toolkit's directories (*out,
 * NULL when it cannot be had): realpath() of the file itself when it is a
 * link, else its directory's real path (one realpath() per directory and
 * resolution, kc_res_toolkit_dir()) and its name; a directory outside the
 * toolkit makes it a user file, as its own realpath() would. 0 or ENOMEM.
 */
static int real_of(struct resolver *r, const char *path, int link, char **out)
{
    *out = NULL;
    const char *slash = strrchr(path, '/');
    if (link || !slash || !slash[1]) {
        if (!(*out = realpath(path, NULL)) && errno == ENOMEM)
            return KCACHE_ENOMEM;
        return 0;
    }
    char *dir = slash == path ? kc_strdup("/") : kc_memdup(path, (size_t)(slash - path));
    const char *dir_real = NULL;
    int inside = 0;
    int rc = dir ? kc_res_toolkit_dir(r, dir, &dir_real, &inside) : KCACHE_ENOMEM;
    free(dir);
    if (rc || !inside)
        return rc; /* outside the toolkit whatever the path says: a user file */
    size_t dn = strcmp(dir_real, "/") ? strlen(dir_real) : 0, bn = strlen(slash + 1);
    if (!(*out = kc_malloc(dn + bn + 2)))
        return KCACHE_ENOMEM;
    memcpy(*out, dir_real, dn);
    (*out)[dn] = '/';
    memcpy(*out + dn + 1, slash + 1, bn + 1);
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
/*
 * Notes how a path under the name's directory was looked at: beside the name,
 * or another way (an -I directory, a header's own directory, an absolute
 * spelling). A path looked at both ways is one probe here, but two looks for
 * another name's directory: the closure then holds only for this directory.
 */
static int note_route(struct resolver *r, const char *path, int beside_name)
{
    const char *dir = r->req->no_source_include ? NULL : r->req->source_dir;
    size_t n = dir ? strlen(dir) : 0;
    if (!dir || strncmp(path, dir, n) != 0 || path[n] != '/')
        return 0;
    size_t bit = beside_name ? 1 : 2, v = 0;
    kc_smap_find(&r->routes, path, &v);
    if (v & bit)
        return 0;
    if ((v | bit) == 3)
        r->out->beside_mixed = 1;
    return kc_smap_put(&r->routes, path, v | bit);
}

/*
 * A regular file looked at in the toolkit's directories: a toolkit header
 * when its real path lies inside the toolkit (*done set), keyed by the
 * toolkit's build; else a user file, whatever the path says (*done left 0).
 */
static int look_toolkit(struct resolver *r, const char *path, int link, int from_toolkit,
                        const struct stat *st, size_t *node, const char **toolkit_rel,
                        int *done)
{
    char *real = NULL;
    const char *rel;
    int rc = real_of(r, path, link, &real);
    if (rc)
        return rc;
    if (!real || !in_toolkit_root(r, real, &rel)) {
        free(real);
        return 0;
    }
    *done = 1;
    kc_probe p;
    memset(&p, 0, sizeof(p));
    p.state = KC_PROBE_TOOLKIT;
    kc_identity_of(&p, st);
    char *copy = kc_strdup(rel);
    free(real);
    if (!copy || kc_res_grow((void **)&r->tk_rels, &r->cap_tk_rels, r->n_tk_rels, sizeof(char *))) {
        free(copy);
        return KCACHE_ENOMEM;
    }
    r->tk_rels[r->n_tk_rels++] = copy;
    *toolkit_rel = copy;
    if ((rc = kc_smap_put(&r->by_path, path, 2 * r->n_tk_rels + 1)) ||
        (!from_toolkit && (rc = add_probe(r, path, &p))))
        return rc;
    return toolkit_node(r, path, copy, st, node);
}

/*
 * A file read (text, size) or found in the memo at path, with identity p: the
 * node it is, new, or the one that file already is by another path.
 */
static int add_file(struct resolver *r, const char *path, const kc_probe *p, char *text,
                    size_t size, kc_memo *memo, size_t *node)
{
    size_t v;
    int rc;
    char id[64];
    snprintf(id, sizeof(id), "%llx:%llx", (unsigned long long)p->dev, (unsigned long long)p->ino);
    if (kc_smap_find(&r->by_identity, id, &v)) {
        /* The same file by another path: one header to NVRTC. From another
         * directory, NVRTC looks for its quoted includes beside that path too. */
        free(text);
        kc_memo_release(memo);
        char *here = kc_path_dirname(path), *a = here ? kc_path_normalized(here) : NULL;
        char *b = a ? kc_path_normalized(r->nodes[v].dir) : NULL;
        if (!b) {
            free(here);
            free(a);
            return KCACHE_ENOMEM;
        }
        if (strcmp(a, b) != 0)
            r->nodes[v].other_dirs = 1;
        free(here);
        free(a);
        free(b);
    } else {
        size_t k;
        if ((rc = kc_res_new_node(r, &k))) {
            free(text);
            kc_memo_release(memo);
            return rc < 0 ? rc : 0;
        }
        struct node *nd = &r->nodes[k];
        nd->text = memo ? memo->text : text;
        nd->size = memo ? memo->size : size;
        nd->id = *p;
        if (memo) {
            nd->memo = memo;
            nd->dirs = memo->dirs;
            nd->n_dirs = memo->n_dirs;
        }
        if (!(nd->path = kc_strdup(path)) || !(nd->dir = kc_path_dirname(path)) ||
            kc_smap_put(&r->by_identity, id, k))
            return KCACHE_ENOMEM;
        v = k;
    }
    if ((rc = kc_smap_put(&r->by_path, path, 2 * (v + 1))) || (rc = add_probe(r, path, p)))
        return rc;
    *node = v + 1;
    return 0;
}

int kc_res_look(struct resolver *r, const char *path, int in_toolkit, int from_toolkit,
                int beside_name, size_t *node, const char **toolkit_rel)
{
    *node = 0;
    *toolkit_rel = NULL;
    size_t v;
    int rc = note_route(r, path, beside_name);
    if (rc)
        return rc;
    r->looking_beside = beside_name;
    if (kc_smap_find(&r->by_path, path, &v)) {
        if (v & 1) {
            *toolkit_rel = r->tk_rels[v / 2 - 1];
            if (kc_smap_find(&r->tk_nodes, *toolkit_rel, &v))
                *node = v + 1;
        } else if (v) {
            *node = v / 2;
        }
        return 0;
    }
    kc_probe p;
    memset(&p, 0, sizeof(p));
    struct stat st;
    /* In the toolkit's directories the link itself is asked first: a file
     * that is no link lies where its directory's real path says (real_of()). */
    int found = (in_toolkit ? lstat(path, &st) : stat(path, &st)) == 0;
    int link = found && S_ISLNK(st.st_mode);
    if (link)
        found = stat(path, &st) == 0;
    int stat_errno = found ? 0 : errno;
    int regular = found && S_ISREG(st.st_mode);
    if (regular && in_toolkit) {
        int done = 0;
        if ((rc = look_toolkit(r, path, link, from_toolkit, &st, node, toolkit_rel, &done)) ||
            done)
            return rc;
    }
    if (!regular && in_toolkit && from_toolkit) {
        /* Nothing there, inside the toolkit: the toolkit's build keys that. */
        return kc_smap_put(&r->by_path, path, 0);
    }
    char *text = NULL;
    size_t size = 0;
    kc_memo *memo = NULL;
    /* Nothing there, or a directory: absent, without opening what stat just found missing. */
    int absent = (!found && (stat_errno == ENOENT || stat_errno == ENOTDIR)) ||
                 (found && S_ISDIR(st.st_mode));
    if (absent) {
        rc = KCACHE_EIO;
        errno = ENOENT;
    } else if (regular) {
        kc_probe id;
        memset(&id, 0, sizeof(id));
        kc_identity_of(&id, &st);
        memo = kc_memo_get(path, &id);
        if (memo && memo->id.state != KC_PROBE_FILE) {
            kc_memo_release(memo); /* kept as a toolkit header's, with no digest */
            memo = NULL;
        }
    }
    if (absent) {
        /* rc and errno say so */
    } else if (memo) {
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
            kc_res_not_hermetic(r, "unreadable_header", "cannot read %s (%s)", path,
                         err == EFBIG ? "larger than 64 MiB" : strerror(err));
        }
        memset(&p, 0, sizeof(p));
        p.state = KC_PROBE_ABSENT;
        if ((rc = kc_smap_put(&r->by_path, path, 0)) || (rc = voucher(r, path, &p.vouch)) ||
            (rc = add_probe(r, path, &p)))
            return rc;
        return 0;
    }
    p.state = KC_PROBE_FILE;
    return add_file(r, path, &p, text, size, memo, node);
}

/* ---- the search, in NVRTC's order -------------------------------------- */

void kc_res_left_clear(struct leftname *l)
{
    free(l->name);
    free(l->rel);
    free(l->path);
}

static int add_left(struct resolver *r, const char *name, int state, char *rel, const char *path)
{
    size_t v;
    if (kc_smap_find(&r->by_left, name, &v)) {
        struct leftname *l = &r->left[v];
        if (l->state != state || (rel && l->rel && strcmp(rel, l->rel) != 0))
            kc_res_not_hermetic(r, "ambiguous_name",
                         "'%s' names a toolkit header from one place and %s from another",
                         name, state == KC_DEP_ABSENT || l->state == KC_DEP_ABSENT
                                   ? "nothing"
                                   : "another toolkit header");
        free(rel);
        return 0;
    }
    if (kc_res_grow((void **)&r->left, &r->cap_left, r->n_left, sizeof(*r->left))) {
        free(rel);
        return KCACHE_ENOMEM;
    }
    struct leftname *l = &r->left[r->n_left];
    memset(l, 0, sizeof(*l));
    l->state = state;
    l->rel = rel;
    if (!(l->name = kc_strdup(name)) || (path && !(l->path = kc_strdup(path))) ||
        kc_smap_put(&r->by_left, name, r->n_left)) {
        kc_res_left_clear(l);
        return KCACHE_ENOMEM;
    }
    r->n_left++;
    return 0;
}

/* A spelling a toolkit header's lookup leaves to the toolkit or to nothing. */
static int add_tk_name(struct resolver *r, const char *spelling)
{
    return kc_smap_find(&r->tk_names, spelling, NULL) ? 0 : kc_smap_put(&r->tk_names, spelling, 0);
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
/*
 * Whether an #include of spelling may name the program: NVRTC resolves the
 * program's own name (NULL: "default_program") to the program, ahead of
 * every directory (NVRTC 13.0: a program named kq.h whose header includes
 * "kq.h" reads itself again; under another name the include fails). Judged
 * by the last component, a superset of what NVRTC matches.
 */
static int names_program(const char *name, const char *spelling)
{
    if (!name || !*name)
        name = "default_program";
    const char *a = strrchr(name, '/'), *b = strrchr(spelling, '/');
    return !strcmp(a ? a + 1 : name, b ? b + 1 : spelling);
}

/*
 * The path NVRTC reading the disk opens a header by, and so writes for its
 * __FILE__ and in its diagnostics. Measured with NVRTC 13.0: the -I operand
 * as given, a '/' unless it ends in one, and the spelling ("inc/" and "a.h"
 * give "inc/a.h", "inc//" gives "inc//a.h", "./inc" gives "./inc/a.h");
 * beside its includer, the includer's own such path up to its last '/'
 * ("inc/a.h" including "sub/../b.h" gives "inc/sub/../b.h", unfolded; the
 * program's name is the program's path); an -include found in the working
 * directory and an absolute spelling, the spelling. A file reached by two
 * such paths is ambiguous: NVRTC says the one it reaches first, which the
 * resolution (every branch, breadth first) cannot tell.
 */
static int note_nvpath(struct resolver *r, size_t k, size_t from, size_t i,
                       const char *spelling, int stdh)
{
    struct node *nd = &r->nodes[k];
    if (nd->toolkit || nd->in_memory || k == 0)
        return 0;
    const char *pre = "";
    size_t pre_n = 0;
    int sep = 0;
    if (spelling[0] == '/' || (i == 0 && r->pre_include)) {
        /* the spelling alone */
    } else if (i == 0) {
        if (kc_res_grow((void **)&r->beside, &r->cap_beside, r->n_beside, sizeof(*r->beside)))
            return KCACHE_ENOMEM;
        r->beside[r->n_beside++] = (struct beside){k, from};
        nd->nv_from_name |= from == 0;
        pre = r->nodes[from].nvpath;
        if (!pre) {
            nd->nv_ambiguous = 1;
            return 0;
        }
        const char *slash = strrchr(pre, '/');
        pre_n = slash ? (size_t)(slash - pre) + 1 : 0;
    } else {
        pre = r->req->include_dirs[i - 1];
        pre_n = strlen(pre);
        sep = pre_n == 0 || pre[pre_n - 1] != '/';
    }
    if (stdh) {
        nd->nv_ambiguous = 1; /* not measured */
        return 0;
    }
    size_t n = pre_n + (size_t)sep + strlen(spelling) + 1;
    char *p = kc_malloc(n);
    if (!p)
        return KCACHE_ENOMEM;
    snprintf(p, n, "%.*s%s%s", (int)pre_n, pre, sep ? "/" : "", spelling);
    if (!nd->nvpath) {
        nd->nvpath = p;
        return 0;
    }
    if (strcmp(nd->nvpath, p) != 0)
        nd->nv_ambiguous = 1;
    free(p);
    return 0;
}

void kc_res_nvpath_spread(struct resolver *r)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t j = 0; j < r->n_beside; j++) {
            struct node *nd = &r->nodes[r->beside[j].node];
            const struct node *from = &r->nodes[r->beside[j].from];
            if (!nd->nv_ambiguous && from->nv_ambiguous)
                changed = nd->nv_ambiguous = 1;
            if (!nd->nv_from_name && from->nv_from_name)
                changed = nd->nv_from_name = 1;
        }
    }
}

int kc_res_resolve(struct resolver *r, const char *spelling, int angle, size_t from,
                   size_t *found)
{
    const kc_deps_request *q = r->req;
    int from_toolkit = r->nodes[from].toolkit;
    *found = 0;
    if (!*spelling)
        return 0;
    if (names_program(q->source_name, spelling)) {
        kc_res_not_hermetic(r, "include_names_program",
                            "#include \"%s\" (in %s) names the program itself, which NVRTC "
                            "reads again in its place", spelling, kc_res_where(&r->nodes[from]));
        return 0;
    }
    size_t v;
    if (kc_smap_find(&r->by_memory, spelling, &v)) {
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
        } else if (i == 0 && r->pre_include) {
            /* An -include is looked for in the working directory, never beside the
             * source, with or without -no-source-include (checked with NVRTC 13). */
            dir = ".";
        } else if (i == 0) {
            /* -no-source-include: NVRTC searches beside no file at all (checked with NVRTC 13). */
            if (angle || !r->nodes[from].dir || q->no_source_include)
                continue;
            dir = r->nodes[from].dir;
        } else {
            dir = q->include_dirs[i - 1];
        }
        int len = dir ? snprintf(path, sizeof(path), "%s/%s", dir, spelling)
                      : snprintf(path, sizeof(path), "%s", spelling);
        if (len < 0 || (size_t)len >= sizeof(path) - 5)
            continue;
        const char *real = NULL;
        int inside = 0;
        if (dir && (rc = kc_res_toolkit_dir(r, dir, &real, &inside)))
            return rc;
        if (!dir && q->toolkit_root)
            inside = 1; /* an absolute spelling: its real path decides */
        size_t node = 0;
        const char *rel = NULL;
        /* The main source's own directory: the program's name's (deps.c made it so). */
        int beside_name = i == 0 && dir && !r->pre_include && from == 0;
        int stdh = 0;
        for (int k = 0; k < 1 + kc_res_stdh_too(spelling) && !node && !rel; k++) {
            if (k)
                memcpy(path + len, ".stdh", 6);
            if ((rc = kc_res_look(r, path, inside, from_toolkit, beside_name, &node, &rel)))
                return rc;
            stdh = k;
        }
        /*
         * What the hermetic compile leaves to NVRTC's search of the toolkit
         * (hermetic.c); an absolute spelling searches nothing. An -include's
         * look in the working directory is made there too, so it is not
         * "beside" anything, but a spelling handed over in memory would
         * still come before it.
         */
        if (rel && dir &&
            (rc = kc_res_record_look(r, spelling, rel, i == 0 && !r->pre_include ? real : NULL,
                                     from)))
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
            if ((rc = note_nvpath(r, node - 1, from, i, spelling, stdh)))
                return rc;
            if (!nd->spelling && node - 1 != 0) {
                nd->parent = from;
                nd->beside = i == 0 && dir != NULL && !from_toolkit;
                if (!(nd->spelling = kc_strdup(spelling)))
                    return KCACHE_ENOMEM;
            }
            *found = node;
            /* A toolkit header's text is not rewritten: the file goes in under its spelling. */
            return from_toolkit ? kc_res_add_alias(r, spelling, node - 1) : 0;
        }
    }
    if (spelling[0] != '/' && (rc = kc_res_record_look(r, spelling, NULL, NULL, from)))
        return rc;
    if (from_toolkit)
        return add_tk_name(r, spelling);
    return add_left(r, spelling, KC_DEP_ABSENT, NULL, NULL);
}

int kc_res_add_alias(struct resolver *r, const char *name, size_t node)
{
    for (size_t i = 0; i < r->n_aliases; i++) {
        if (strcmp(r->aliases[i].name, name) != 0)
            continue;
        if (r->aliases[i].node != node)
            kc_res_not_hermetic(r, "ambiguous_computed_include",
                         "'%s' names two different files (%s and %s): include them by "
                         "name",
                         name, r->nodes[r->aliases[i].node].path, r->nodes[node].path);
        return 0;
    }
    if (kc_res_grow((void **)&r->aliases, &r->cap_aliases, r->n_aliases, sizeof(*r->aliases)))
        return KCACHE_ENOMEM;
    if (!(r->aliases[r->n_aliases].name = kc_strdup(name)))
        return KCACHE_ENOMEM;
    r->aliases[r->n_aliases++].node = node;
    return 0;
}
