/*
 * What the resolver works out from macros (see deps.c): the names a computed
 * include (#include MACRO) can expand to, and the calls of macros that wrap
 * __has_include (CCCL's _CCCL_HAS_INCLUDE(<x>)), whose arguments are probed.
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

/* Whether text names `name` as a whole identifier (followed by '(' when call is set). */
static int mentions(const char *text, const char *name, size_t name_n, int call)
{
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        if (p > text && kc_res_is_ident_char((unsigned char)p[-1]))
            continue;
        const char *e = p + name_n;
        if (kc_res_is_ident_char((unsigned char)*e))
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
static int find_wrappers_now(struct resolver *r, size_t from)
{
    for (int changed = 1; changed; from = 0) {
        changed = 0;
        for (size_t i = from; i < r->n_funcs; i++) {
            const char *name = r->func_names[i];
            if (kc_smap_find(&r->wrappers, name, NULL))
                continue;
            int wraps = mentions(r->func_bodies[i], "__has_include", 13, 0);
            for (size_t j = 0; !wraps && j < r->wrappers.cap; j++) {
                const char *w = r->wrappers.keys[j];
                wraps = w && mentions(r->func_bodies[i], w, strlen(w), 1);
            }
            if (wraps) {
                if (kc_smap_put(&r->wrappers, name, 0))
                    return KCACHE_ENOMEM;
                changed = 1;
            }
        }
        for (size_t j = 0; j < r->by_macro.cap; j++) {
            const char *name = r->by_macro.keys[j];
            if (!name || kc_smap_find(&r->wrappers, name, NULL))
                continue;
            const struct macro *m = &r->macros[r->by_macro.vals[j]];
            for (size_t d = 0; d < m->n; d++) {
                /* Only a value that is one identifier can name a wrapper. */
                const char *v = m->values[d];
                size_t vn = strlen(v);
                int one_identifier = vn && !isdigit((unsigned char)v[0]);
                for (size_t c = 0; one_identifier && c < vn; c++)
                    one_identifier = kc_res_is_ident_char((unsigned char)v[c]);
                if (one_identifier && kc_smap_find(&r->wrappers, v, NULL)) {
                    if (kc_smap_put(&r->wrappers, name, 0))
                        return KCACHE_ENOMEM;
                    changed = 1;
                    break;
                }
            }
        }
    }
    return 0;
}

/*
 * find_wrappers_now() once per round of the resolution, on what is new: a
 * fixpoint over the function-like macros, the object-like macros' values and
 * the wrappers found, so with none of them grown since the last round it
 * still holds, and with the wrappers unchanged a function-like macro judged
 * then is judged alike now (CCCL has thousands, and the rounds are many).
 */
static int find_wrappers(struct resolver *r)
{
    int same_wrappers = r->wrapped_n == r->wrappers.n + 1;
    if (same_wrappers && r->wrapped_funcs == r->n_funcs &&
        r->wrapped_values == r->n_macro_values)
        return 0;
    int rc = find_wrappers_now(r, same_wrappers ? r->wrapped_funcs : 0);
    if (!rc) {
        r->wrapped_funcs = r->n_funcs;
        r->wrapped_values = r->n_macro_values;
        r->wrapped_n = r->wrappers.n + 1;
    }
    return rc;
}

/*
 * Probes the argument of every call of a wrapper; *done counts calls handled.
 * A call looked at before against the same wrappers is not one: only the
 * calls since need a look then.
 */
int kc_res_resolve_calls(struct resolver *r, size_t *progress)
{
    int rc = find_wrappers(r);
    size_t from = r->calls_checked_n == r->wrappers.n + 1 ? r->calls_checked : 0;
    r->calls_checked = r->n_calls;
    r->calls_checked_n = r->wrappers.n + 1;
    for (size_t i = from; !rc && i < r->n_calls; i++) {
        struct pending c = r->calls[i];
        if (c.node == (size_t)-1)
            continue;
        const kc_directive *d = &r->nodes[c.node].dirs[c.dir];
        if (!kc_smap_find(&r->wrappers, d->text, NULL))
            continue;
        r->calls[i].node = (size_t)-1;
        (*progress)++;
        const char *a = d->value ? d->value : "";
        size_t n = strlen(a);
        int angle = n >= 2 && a[0] == '<' && a[n - 1] == '>' && !memchr(a + 1, '>', n - 2);
        int quote = n >= 2 && a[0] == '"' && a[n - 1] == '"' && !memchr(a + 1, '"', n - 2);
        /* Any other argument is worked out where it matters: an #if naming a
         * wrapper, directly or through a macro, is expanded (condition.c). */
        if (!angle && !quote)
            continue;
        char *name = kc_memdup(a + 1, n - 2);
        size_t found;
        if (!name)
            return KCACHE_ENOMEM;
        if (d->in_macro) {
            rc = kc_res_add_macro_probe(r, name, angle, c.node, d->line);
        } else {
            rc = kc_res_resolve(r, name, angle, c.node, &found);
            if (!rc && found && !r->nodes[c.node].toolkit)
                rc = kc_res_add_alias(r, name, found - 1);
        }
        free(name);
    }
    return rc;
}

int kc_res_add_macro_probe(struct resolver *r, const char *spelling, int angle, size_t from,
                           unsigned line)
{
    for (size_t i = 0; i < r->n_mprobes; i++)
        if (r->mprobes[i].angle == angle && !strcmp(r->mprobes[i].spelling, spelling))
            return 0;
    if (kc_res_grow((void **)&r->mprobes, &r->cap_mprobes, r->n_mprobes, sizeof(*r->mprobes)))
        return KCACHE_ENOMEM;
    struct mprobe *p = &r->mprobes[r->n_mprobes];
    *p = (struct mprobe){.angle = angle, .from = from, .line = line};
    if (!(p->spelling = kc_strdup(spelling)))
        return KCACHE_ENOMEM;
    r->n_mprobes++;
    return 0;
}

/*
 * Looks each __has_include of macro text up from every file read so far (see
 * struct mprobe); *progress counts lookups made. Where two files would find
 * different answers, the one name handed to NVRTC cannot stand for both: the
 * compile is not hermetic.
 */
int kc_res_resolve_macro_probes(struct resolver *r, size_t *progress)
{
    for (size_t i = 0; i < r->n_mprobes; i++) {
        while (r->mprobes[i].sites < r->n_nodes) {
            struct mprobe *p = &r->mprobes[i];
            size_t k = p->sites++, found;
            if (r->nodes[k].cmdline)
                continue;
            (*progress)++;
            int rc = kc_res_resolve(r, p->spelling, p->angle, k, &found);
            if (!rc && found && !r->nodes[k].toolkit)
                rc = kc_res_add_alias(r, p->spelling, found - 1);
            if (rc)
                return rc;
            p = &r->mprobes[i];
            if (!p->answered) {
                p->answered = 1;
                p->answer = found;
                p->first = k;
            } else if (found != p->answer) {
                char o = p->angle ? '<' : '"', c = p->angle ? '>' : '"';
                kc_res_not_hermetic(r, "macro_has_include",
                                    "%s:%u: __has_include(%c%s%c) in a macro finds one thing "
                                    "from %s and another from %s, where it may be expanded",
                                    kc_res_where(&r->nodes[p->from]), p->line, o, p->spelling, c,
                                    kc_res_where(&r->nodes[p->first]),
                                    kc_res_where(&r->nodes[k]));
            }
        }
    }
    return 0;
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

int kc_res_is_ident_char(int c)
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
        if (kc_smap_find(&r->by_macro, name, &v))
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
            (i > 0 && (kc_res_is_ident_char((unsigned char)body[i - 1]) || body[i - 1] == '.')))
            continue;
        size_t e = i;
        while (e < n && kc_res_is_ident_char((unsigned char)body[e]))
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
    while (id_n < n && kc_res_is_ident_char((unsigned char)text[id_n]))
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

int kc_res_probe_operand(struct resolver *r, const char *text, size_t node, int *ok)
{
    struct cands c = {0};
    int rc = 0;
    *ok = expand(r, text, 1, &c, &rc);
    for (size_t i = 0; !rc && *ok && i < c.n; i++) {
        size_t found;
        if (!(rc = kc_res_resolve(r, c.names[i], c.angle[i], node, &found)) && found &&
            !r->nodes[node].toolkit)
            rc = kc_res_add_alias(r, c.names[i], found - 1);
    }
    cands_free(&c);
    return rc;
}

int kc_res_resolve_pending(struct resolver *r, const struct pending *p)
{
    struct cands c = {0};
    int rc = 0;
    char *text = kc_strdup(r->nodes[p->node].dirs[p->dir].text);
    if (!text)
        return KCACHE_ENOMEM;
    if (!expand(r, text, 0, &c, &rc) && !rc) {
        const struct node *nd = &r->nodes[p->node];
        kc_res_not_hermetic(r, "computed_include",
                     "%s:%u: '#include %s' names a header kcache cannot work out: define "
                     "that macro with -D as a quoted header name, or include the header by name",
                     nd->path ? nd->path : "the source", nd->dirs[p->dir].line, text);
    }
    for (size_t i = 0; !rc && i < c.n; i++) {
        size_t found;
        if (!(rc = kc_res_resolve(r, c.names[i], c.angle[i], p->node, &found)) && found)
            rc = kc_res_add_alias(r, c.names[i], found - 1);
    }
    free(text);
    cands_free(&c);
    return rc;
}
