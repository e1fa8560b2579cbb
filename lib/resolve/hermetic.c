/*
 * Toolkit headers the hermetic compile hands NVRTC by spelling, and the proof
 * that with them NVRTC finds what it finds reading the disk.
 *
 * The hermetic compile passes --no-source-include, so that NVRTC reads no
 * user file from disk; that also stops it looking beside toolkit headers.
 * The toolkit's crt/ headers include "host_defines.h", "math_functions.h"
 * and others, which plain NVRTC finds beside them in crt/, and which
 * -I <toolkit>/include alone resolves to include/host_defines.h, a
 * deprecated wrapper: another file. Every <cuda_runtime.h> did that.
 *
 * Decisions:
 *   - Such a spelling goes to NVRTC as an in-memory header of that name,
 *     which NVRTC takes before anything on disk, from any includer, and whose
 *     text is one #include of the file plain NVRTC found, by its real path:
 *     NVRTC reads it from the toolkit as it reads every toolkit header (by
 *     real path, so its __FILE__ is the one the toolkit's -I directories give).
 *   - Only that spelling changes. Every lookup of it the resolution left to
 *     the toolkit (each includer's, every branch as the scanner sees them)
 *     must have found that same file; one that found another file or nothing
 *     (an angled <math_functions.h> is include/'s wrapper; a __has_include
 *     false) leaves the compile uncached ("toolkit_beside"). A user file
 *     never goes by that name (names.c keeps canonical names off spellings
 *     left to the toolkit, and a user file a toolkit header finds under it
 *     makes the name ambiguous already).
 *     Putting the includer's directory ahead of the -I list instead would
 *     change every name looked up there: CUTLASS's <mma.h> (include/mma.h,
 *     the wrapper) would become crt/mma.h, and cuFFTDx stay uncached.
 *   - A spelling is handed so when the hermetic compile would take another
 *     file for it, and also when it would find nothing (b/z.h's "w.h" that
 *     only b/ holds: live, that would fail the hermetic compile). When the
 *     latter kind conflicts with another lookup, they are chosen again
 *     without it: such an include in a branch not taken was harmless before
 *     and stays so, and that compile stays cached as it was.
 *   - Every other lookup left to the toolkit keeps NVRTC's search of the
 *     toolkit's -I directories, which the hermetic compile passes in the
 *     request's order, without the user's. One found beside its includer is
 *     searched again there: finding another file makes the compile
 *     uncached; finding nothing is allowed, as everywhere in the hermetic
 *     compile: an include that is live then fails the hermetic compile,
 *     which falls back to reading the disk. One found through a toolkit -I
 *     directory finds the same there (the order is kept, and the user
 *     directories dropped from ahead of it held nothing of that name: what
 *     is found through a user directory, a link into the toolkit too, is a
 *     user file, handed over) and costs nothing. All of this runs on a miss
 *     only: a hit reads its closure.
 *   - A handed header is one #include deeper than the file it names, which
 *     only __INCLUDE_LEVEL__ can tell: a compile whose texts (any of them,
 *     comments too) spell it is uncached when something is handed. An
 *     -include found in the working directory is a lookup like any other: a
 *     spelling handed in memory would come before it there too.
 *   - The spellings handed so are keyed with the file each names (below the
 *     toolkit's root; absent from the key when there are none), and a
 *     recompile hands them again (compile/recompile.c).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "resolve/resolveint.h"

void kc_res_look_clear(struct tklook *l)
{
    free(l->spelling);
    free(l->rel);
    free(l->beside);
}

int kc_res_record_look(struct resolver *r, const char *spelling, const char *rel,
                       const char *beside, size_t from)
{
    kc_buf id = {0};
    int rc = kc_buf_append(&id, spelling, strlen(spelling) + 1) ||
                     kc_buf_append(&id, rel ? rel : "", strlen(rel ? rel : "") + 1) ||
                     kc_buf_append(&id, beside ? beside : "", strlen(beside ? beside : "") + 1)
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
            l->from = from;
            if (!(l->spelling = kc_strdup(spelling)) || (rel && !(l->rel = kc_strdup(rel))) ||
                (beside && !(l->beside = kc_strdup(beside))) ||
                (unique && kc_smap_put(&r->by_look, (const char *)id.data, r->n_looks))) {
                kc_res_look_clear(l);
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
    *rel = NULL;
    at[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 1 + kc_res_stdh_too(spelling); k++) {
            struct stat st;
            int len = snprintf(at, at_size, k ? "%s/%s.stdh" : "%s/%s", dirs[i], spelling);
            if (len < 0 || (size_t)len >= at_size || stat(at, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            char *real = realpath(at, NULL);
            const char *below = real ? kc_path_below(r->req->toolkit_root, real) : NULL;
            if (below && *below && !(*rel = kc_strdup(below))) {
                free(real);
                return KCACHE_ENOMEM;
            }
            free(real);
            return 1;
        }
    }
    at[0] = '\0';
    return 0;
}

/* The lookups a spelling is handed for, and to which header. */
struct handed {
    const char *spelling, *rel;
    int weak; /* only because the hermetic compile would find nothing */
};

static const struct handed *handed_for(const struct handed *h, size_t n, const char *spelling)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(h[i].spelling, spelling))
            return &h[i];
    return NULL;
}

/*
 * What the hermetic compile gives for l, with h[0..n) handed by spelling: 1
 * when it is what plain NVRTC found (or nothing where a header was), else 0
 * with what it would take in at.
 */
static int same_answer(struct resolver *r, char *const *base, size_t n_base,
                       const struct handed *h, size_t n, const struct tklook *l, char *at,
                       size_t at_size, int *ok)
{
    const struct handed *x = handed_for(h, n, l->spelling);
    if (x) {
        *ok = l->rel && !strcmp(l->rel, x->rel);
        snprintf(at, at_size, "%s/%s", r->req->toolkit_root, x->rel);
        return 0;
    }
    *ok = 1;
    if (!l->beside)
        return 0;
    char *rel = NULL;
    int found = search(r, base, n_base, l->spelling, at, at_size, &rel);
    if (found < 0)
        return found;
    *ok = !found || (l->rel && rel && !strcmp(rel, l->rel));
    free(rel);
    return 0;
}

/*
 * Whether the #include lines that hand h[0..n) over can stand for them: a
 * spelling that also names a user file, a path no string literal can hold,
 * or a text that could tell the extra level, makes the compile not hermetic.
 */
static void refuse_unnameable(struct resolver *r, const struct handed *h, size_t n)
{
    const kc_deps_request *q = r->req;
    for (size_t i = 0; i < n; i++) {
        int user = q->source_name && !strcmp(q->source_name, h[i].spelling);
        for (size_t k = 0; k < r->n_aliases && !user; k++)
            user = !strcmp(r->aliases[k].name, h[i].spelling);
        if (user)
            kc_res_not_hermetic(r, "toolkit_beside",
                                "'%s' names a user file and a toolkit header", h[i].spelling);
        /* The #include handed over is a string literal: nothing in it may need escaping. */
        if (strpbrk(q->toolkit_root, "\"\\\n") || strpbrk(h[i].rel, "\"\\\n"))
            kc_res_not_hermetic(r, "toolkit_beside",
                                "\"%s\" (%s/%s) has a path kcache cannot name in an #include",
                                h[i].spelling, q->toolkit_root, h[i].rel);
    }
    /*
     * A handed header is one #include deeper than the file it names: a text
     * that reads __INCLUDE_LEVEL__ could tell (in a comment too: kcache does
     * not guess).
     */
    for (size_t k = 0; n && k < r->n_nodes; k++) {
        const struct node *nd = &r->nodes[k];
        if (nd->text && memmem(nd->text, nd->size, "__INCLUDE_LEVEL__", 17)) {
            kc_res_not_hermetic(r, "toolkit_beside",
                                "%s reads __INCLUDE_LEVEL__, which a toolkit header handed over "
                                "by name (\"%s\") would change",
                                kc_res_where(nd), h[0].spelling);
            break;
        }
    }
}

int kc_res_hermetic_handed(struct resolver *r)
{
    const kc_deps_request *q = r->req;
    kc_deps *out = r->out;
    if (!q->toolkit_root || !*q->toolkit_root || !r->n_looks)
        return 0;
    struct handed *h = kc_calloc(r->n_looks, sizeof(*h));
    char **base = kc_calloc(q->n_include_dirs + 1, sizeof(char *));
    size_t n_base = 0, n = 0, bad = r->n_looks;
    char at[PATH_MAX];
    int rc = h && base ? 0 : KCACHE_ENOMEM;
    for (size_t i = 0; !rc && i < q->n_include_dirs; i++) {
        const char *real = NULL;
        int inside = 0;
        if (!(rc = kc_res_toolkit_dir(r, q->include_dirs[i], &real, &inside)) && inside)
            base[n_base++] = (char *)q->include_dirs[i];
    }
    /* Each spelling found beside its includer that the -I directories would answer otherwise. */
    for (size_t i = 0; !rc && i < r->n_looks; i++) {
        const struct tklook *l = &r->looks[i];
        char *rel = NULL;
        if (!l->beside || handed_for(h, n, l->spelling))
            continue;
        int found = search(r, base, n_base, l->spelling, at, sizeof(at), &rel);
        if (found < 0) {
            rc = found;
            break;
        }
        if (!found || !rel || strcmp(rel, l->rel) != 0)
            h[n++] = (struct handed){l->spelling, l->rel, !found};
        free(rel);
    }
    /*
     * Every lookup left to the toolkit, with them; then, if one of those
     * handed only because nothing would be found conflicts, without those.
     */
    for (int weak = 1; !rc && weak >= 0; weak--) {
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (weak || !h[i].weak)
                h[kept++] = h[i];
        int dropped = kept < n;
        n = kept;
        if (!weak && !dropped)
            break; /* the same choice as before: the same answer */
        for (bad = 0; !rc && bad < r->n_looks; bad++) {
            int ok = 1;
            if ((rc = same_answer(r, base, n_base, h, n, &r->looks[bad], at, sizeof(at), &ok)) ||
                !ok)
                break;
        }
        if (bad == r->n_looks)
            break;
    }
    if (!rc && bad == r->n_looks)
        refuse_unnameable(r, h, n);
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
    for (size_t i = 0; !rc && !out->not_hermetic && i < n; i++)
        if ((rc = kc_strv_push(&out->handed, &out->n_handed, h[i].spelling)) ||
            (rc = kc_strv_push(&out->handed, &out->n_handed, h[i].rel)))
            break;
    free(h);
    free(base);
    return rc;
}
