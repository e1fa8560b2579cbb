/*
 * Which toolkit directories the hermetic compile searches, and the proof that
 * with them NVRTC finds what it finds reading the disk.
 *
 * The hermetic compile passes --no-source-include, so that NVRTC reads no
 * user file from disk; that also stops it looking beside toolkit headers.
 * The toolkit's crt/ headers include "host_defines.h", "math_functions.h"
 * and others, which plain NVRTC finds beside them in crt/, and which
 * -I <toolkit>/include alone resolves to include/host_defines.h, a
 * deprecated wrapper: another file. Every <cuda_runtime.h> did that.
 *
 * Decisions:
 *   - Such an includer's directory (real path) is passed ahead of the
 *     request's toolkit -I directories, in the order first needed. NVRTC
 *     then finds the same file, under the same name as the includer's own
 *     (both by real path, as every toolkit header in the hermetic compile).
 *   - A directory put first is searched for every name, not only the one
 *     that needed it. So every lookup the resolution left to NVRTC's search
 *     of the toolkit (each spelling and what plain NVRTC found for it, or
 *     that it found nothing; every branch, taken or not, as the scanner
 *     sees them) is searched again in the hermetic order, and must find the
 *     same toolkit header, or nothing where plain NVRTC found nothing. One
 *     that would find another file, or a file where there was none (a
 *     __has_include that would turn true), leaves the compile uncached
 *     ("toolkit_beside"), as before. Finding nothing where plain NVRTC found
 *     a header is allowed, as everywhere in the hermetic compile: an include
 *     that is live then fails the hermetic compile, which falls back to
 *     reading the disk.
 *   - A directory is put first for an include found beside its includer that
 *     the hermetic order would take from another file, and also for one it
 *     would not find at all (a live one would fail the hermetic compile).
 *     When the latter kind changes another lookup, the directories are
 *     chosen again without it: such an include in a branch not taken was
 *     harmless before and stays so, and that compile stays cached as it was.
 *   - Lookups found through a toolkit -I directory are only searched again
 *     in the directories put first: the request's toolkit directories keep
 *     their order, and dropping user directories from ahead of them changes
 *     nothing for a name none of those held. Lookups found beside an includer
 *     or through a user directory (a link into the toolkit) are searched in
 *     the whole hermetic order. With nothing put first, only those cost a
 *     stat; the rest is paid on a miss only (a hit reads its closure).
 *   - The directories put first are keyed (below the toolkit's root; absent
 *     from the key when there are none, so no other key changed), and a
 *     recompile passes them again (compile/recompile.c).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compile/resolver.h"

int kc_res_record_look(struct resolver *r, const char *spelling, const char *rel,
                       const char *beside, int check_all, size_t from)
{
    kc_buf id = {0};
    int rc = kc_buf_append(&id, spelling, strlen(spelling) + 1) ||
                     kc_buf_append(&id, rel ? rel : "", strlen(rel ? rel : "") + 1) ||
                     kc_buf_append(&id, beside ? beside : "", strlen(beside ? beside : "")) ||
                     kc_buf_append(&id, check_all ? "+" : "-", 2)
                 ? KCACHE_ENOMEM
                 : 0;
    /*
     * The map's keys are C strings: the NULs between the parts become '\n'.
     * A part holding a '\n' of its own (a toolkit directory so named) is
     * remembered again rather than mistaken for another lookup.
     */
    int unique = !rc && !memchr(id.data, '\n', id.size);
    for (size_t i = 0; !rc && i + 1 < id.size; i++)
        if (((char *)id.data)[i] == '\0')
            ((char *)id.data)[i] = '\n';
    if (!rc && (!unique || !kc_smap_find(&r->by_look, (const char *)id.data, NULL))) {
        struct tklook *l = NULL;
        if (kc_res_grow((void **)&r->looks, &r->cap_looks, r->n_looks, sizeof(*r->looks)))
            rc = KCACHE_ENOMEM;
        if (!rc) {
            l = &r->looks[r->n_looks];
            memset(l, 0, sizeof(*l));
            l->check_all = check_all;
            l->from = from;
            if (!(l->spelling = kc_strdup(spelling)) || (rel && !(l->rel = kc_strdup(rel))) ||
                (beside && !(l->beside = kc_strdup(beside))) ||
                (unique && kc_smap_put(&r->by_look, (const char *)id.data, r->n_looks))) {
                free(l->spelling);
                free(l->rel);
                free(l->beside);
                rc = KCACHE_ENOMEM;
            } else {
                r->n_looks++;
            }
        }
    }
    kc_buf_free(&id);
    return rc;
}

/*
 * Searches the directories dirs[0..n) for spelling as NVRTC does (NAME, then
 * NAME.stdh, in each directory in turn). 1 with the path found in at and its
 * toolkit header below the root in *rel (NULL: a file outside the toolkit),
 * 0 for nothing, or KCACHE_ENOMEM.
 */
static int search(const struct resolver *r, char *const *dirs, size_t n, const char *spelling,
                  char *at, size_t at_size, char **rel)
{
    const char *root = r->req->toolkit_root;
    size_t root_len = strlen(root);
    *rel = NULL;
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 1 + kc_res_stdh_too(spelling); k++) {
            struct stat st;
            int len = snprintf(at, at_size, k ? "%s/%s.stdh" : "%s/%s", dirs[i], spelling);
            if (len < 0 || (size_t)len >= at_size || stat(at, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            char *real = realpath(at, NULL);
            if (real && !strncmp(real, root, root_len) && real[root_len] == '/' &&
                !(*rel = kc_strdup(real + root_len + 1))) {
                free(real);
                return KCACHE_ENOMEM;
            }
            free(real);
            return 1;
        }
    }
    return 0;
}

/*
 * Whether the hermetic order finds what plain NVRTC found for l: *ok 1, or 0
 * with the path it would take instead in at ("" when it would find nothing).
 * Finding nothing where plain NVRTC found a header is ok unless exact.
 */
static int same_answer(struct resolver *r, char *const *dirs, size_t n_first, size_t n,
                       const struct tklook *l, int exact, char *at, size_t at_size, int *ok)
{
    char *rel = NULL;
    int found = search(r, dirs, l->check_all || l->beside ? n : n_first, l->spelling, at, at_size,
                       &rel);
    if (found < 0)
        return found;
    if (!found)
        at[0] = '\0';
    /* Nothing where there was a header: the include, if live, fails the hermetic compile. */
    *ok = found ? l->rel && rel && !strcmp(rel, l->rel) : !exact || !l->rel;
    free(rel);
    return 0;
}

/*
 * Puts first (dirs[0..*n_first), then the request's toolkit directories
 * base[0..n_base)) each directory a beside lookup needs, in the order first
 * needed: one where the hermetic order would find another file, and with
 * weak set, one where it would find nothing (*weak_used says whether any went
 * in for that alone).
 */
static int choose_first(struct resolver *r, char **dirs, size_t *n_first, char *const *base,
                        size_t n_base, int weak, int *weak_used)
{
    char at[PATH_MAX];
    int rc = 0;
    *weak_used = 0;
    for (size_t i = 0; !rc && i < r->n_looks; i++) {
        const struct tklook *l = &r->looks[i];
        if (!l->beside)
            continue;
        memcpy(dirs + *n_first, base, n_base * sizeof(*base));
        int ok = 0;
        if ((rc = same_answer(r, dirs, *n_first, *n_first + n_base, l, weak, at, sizeof(at),
                              &ok)) ||
            ok)
            continue;
        size_t k = 0;
        while (k < *n_first && strcmp(dirs[k], l->beside) != 0)
            k++;
        if (k < *n_first)
            continue; /* already first, and still not the same: the check says so */
        if (!(dirs[*n_first] = kc_strdup(l->beside)))
            return KCACHE_ENOMEM;
        (*n_first)++;
        *weak_used |= !at[0];
    }
    memcpy(dirs + *n_first, base, n_base * sizeof(*base));
    return rc;
}

/* The first lookup the hermetic order answers otherwise (*bad; r->n_looks: none), at: what it finds. */
static int first_wrong(struct resolver *r, char *const *dirs, size_t n_first, size_t n,
                       char *at, size_t at_size, size_t *bad)
{
    for (*bad = 0; *bad < r->n_looks; (*bad)++) {
        const struct tklook *l = &r->looks[*bad];
        int ok = 1, rc;
        if ((l->beside || l->check_all || n_first) &&
            (rc = same_answer(r, dirs, n_first, n, l, 0, at, at_size, &ok)))
            return rc;
        if (!ok)
            return 0;
    }
    return 0;
}

int kc_res_hermetic_dirs(struct resolver *r)
{
    const kc_deps_request *q = r->req;
    kc_deps *out = r->out;
    if (!q->toolkit_root || !*q->toolkit_root || !r->n_looks)
        return 0;
    /* The hermetic order: the directories put first, then the request's toolkit ones. */
    char **dirs = kc_calloc(r->n_looks + q->n_include_dirs + 1, sizeof(char *));
    char **base = kc_calloc(q->n_include_dirs + 1, sizeof(char *));
    size_t n_first = 0, n_base = 0, bad = 0;
    char at[PATH_MAX];
    int rc = dirs && base ? 0 : KCACHE_ENOMEM;
    for (size_t i = 0; !rc && i < q->n_include_dirs; i++) {
        const char *real = NULL;
        int inside = 0;
        if (!(rc = kc_res_toolkit_dir(r, q->include_dirs[i], &real, &inside)) && inside)
            base[n_base++] = (char *)q->include_dirs[i];
    }
    /*
     * First with the directories of includes the hermetic order would not
     * find at all too; if that changes another lookup, without them: such an
     * include in a branch not taken was harmless before, and stays so.
     */
    for (int weak = 1; !rc && weak >= 0; weak--) {
        int weak_used = 0;
        for (; n_first > 0; n_first--)
            free(dirs[n_first - 1]);
        if (!(rc = choose_first(r, dirs, &n_first, base, n_base, weak, &weak_used)))
            rc = first_wrong(r, dirs, n_first, n_first + n_base, at, sizeof(at), &bad);
        if (bad == r->n_looks || !weak_used)
            break;
    }
    if (!rc && bad < r->n_looks) {
        const struct tklook *l = &r->looks[bad];
        if (!l->rel)
            kc_res_not_hermetic(r, "toolkit_beside",
                                "'%s' (in %s) is found nowhere NVRTC reading the disk looks, "
                                "where the hermetic compile would take %s",
                                l->spelling, kc_res_where(&r->nodes[l->from]), at);
        else
            kc_res_not_hermetic(r, "toolkit_beside",
                                "\"%s\" (in %s) is %s/%s to NVRTC reading the disk, where the "
                                "hermetic compile would take %s",
                                l->spelling, kc_res_where(&r->nodes[l->from]), q->toolkit_root,
                                l->rel, at);
    }
    size_t root_len = strlen(q->toolkit_root);
    for (size_t i = 0; !rc && !out->not_hermetic && i < n_first; i++) {
        const char *rel = dirs[i][root_len] == '/' ? dirs[i] + root_len + 1 : ".";
        rc = kc_strv_push(&out->first_dirs, &out->n_first_dirs, rel);
    }
    for (size_t i = 0; dirs && i < n_first; i++)
        free(dirs[i]);
    free(dirs);
    free(base);
    return rc;
}
