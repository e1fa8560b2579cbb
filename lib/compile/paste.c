/* What ## can make of the pieces that reach it: the program's name, or a header's caller's. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compileint.h"
#include "util/strmap.h"

/* ---- what ## can make --------------------------------------------------- */

/*
 * A paste makes one token of its operands' spellings, and the pieces it
 * joins came into the expansion from somewhere: the program's own text (its
 * source, options, name expressions, in-memory headers) or the replacement
 * list of a macro the expansion reached; a paste's result can be pasted
 * again, so what a paste makes is a run of two or more such pieces (a piece
 * alone is spelled where it came from, and judged there). A piece that
 * starts with a digit can be anything (__LINE__ and __COUNTER__ make
 * numbers). A header's code expands under the header's own name, and no
 * invocation spans files (NVRTC does not finish one left open at a header's
 * end from the file that includes it): what only a header's code spells
 * never reaches the program's expansions, except as what it made of them
 * (kc_spans_paste_caller judges those). The toolkit headers the resolution
 * followed are read for their macros: what their replacement lists spell
 * are pieces, and their pastes paste; a toolkit macro's own FILE is left
 * to the check after the compile, as a toolkit macro that expands __FILE__
 * is (kc_name_shows). What NVRTC's built-in headers define (no file holds
 * them) is left there too.
 *
 * So the program's name can come out of a ## only when one of its
 * expansion's macros pastes and a run of its pieces spells __FILE__, its
 * kin, or a macro that reaches them; the reach is followed to a fixed point
 * over the macros a run of pieces can name. CuPy's NAN leads through
 * _CUDA_VSTD to _LIBCUDACXX_CONCAT(__, _LIBCUDACXX_CUDA_ABI_VERSION): no
 * run of its pieces spells a name that carries FILE. An invocation in a
 * header's code is reached the same way from its own text (the macro's
 * name and the parenthesised groups after it), and only __BASE_FILE__,
 * __builtin_FILE and the macros that expand them count there.
 */
struct reach {
    const struct macros *m;
    unsigned char *seen; /* per definition */
    size_t *todo;
    size_t n_todo;
    kc_smap pieces;
    /* The pieces' hashes (piece_hash()), for runs_of_pieces: a substring's is
     * taken from the prefixes'; a collision can only make a name look buildable. */
    uint64_t *hashes;
    size_t n_hashes, cap_hashes; /* cap: a power of two, or 0 */
    int pastes;  /* a reached definition pastes */
    int named;   /* a reached identifier can carry the name (or kcache cannot tell) */
    int header;  /* the expansion is a header's code: only the caller's name counts */
    int rc;
};

static const char *const pasted_names[] = {"__FILE__", "__BASE_FILE__", "__builtin_FILE",
                                           "__FILE_NAME__"};
/* What names the program's file in a header's code (its own __FILE__ is its own name). */
static const char *const caller_names[] = {"__BASE_FILE__", "__builtin_FILE"};

#define FNV_PRIME 0x100000001b3ULL

/*
 * A piece's hash, polynomial (h = h * FNV_PRIME + byte, from 0) so that
 * runs_of_pieces can take any substring's from the prefixes' in one step.
 */
static uint64_t piece_hash(const char *s, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = h * FNV_PRIME + (unsigned char)s[i];
    return h;
}

static int hash_has(const struct reach *r, uint64_t h)
{
    if (!r->cap_hashes)
        return 0;
    h |= 1; /* 0 marks a free slot */
    for (size_t i = (size_t)h & (r->cap_hashes - 1);; i = (i + 1) & (r->cap_hashes - 1)) {
        if (r->hashes[i] == h)
            return 1;
        if (!r->hashes[i])
            return 0;
    }
}

static int hash_put(struct reach *r, uint64_t h)
{
    if (2 * (r->n_hashes + 1) > r->cap_hashes) {
        size_t cap = r->cap_hashes ? 2 * r->cap_hashes : 1024;
        uint64_t *v = kc_calloc(cap, sizeof(*v)), *old = r->hashes;
        if (!v)
            return KCACHE_ENOMEM;
        size_t old_cap = r->cap_hashes;
        r->hashes = v;
        r->cap_hashes = cap;
        r->n_hashes = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i])
                hash_put(r, old[i]); /* room is there: cannot fail */
        free(old);
    }
    h |= 1;
    size_t i = (size_t)h & (r->cap_hashes - 1);
    while (r->hashes[i] && r->hashes[i] != h)
        i = (i + 1) & (r->cap_hashes - 1);
    r->n_hashes += !r->hashes[i];
    r->hashes[i] = h;
    return 0;
}

/*
 * 1 if s (n bytes) is a run of two or more pieces; a piece that starts with a
 * digit is any. can[p]: s from p on is a run of pieces; it is one when a piece
 * starting at p ends where such a run starts (ends[], or at n), so only those
 * ends are tried, each substring's hash from the prefixes' (piece_hash()).
 */
static int runs_of_pieces(const struct reach *r, const char *s, size_t n)
{
    unsigned char can[256], first[256];
    uint64_t pre[256], mul[256]; /* prefixes' hashes; FNV_PRIME to the i */
    size_t ends[256], n_ends = 0;
    if (n < 2 || n >= sizeof(can))
        return n >= sizeof(can);
    pre[0] = 0;
    mul[0] = 1;
    for (size_t i = 0; i < n; i++) {
        pre[i + 1] = pre[i] * FNV_PRIME + (unsigned char)s[i];
        mul[i + 1] = mul[i] * FNV_PRIME;
    }
    /* The first piece: a proper prefix. A name without one ends here. */
    int any = 0;
    for (size_t q = 1; q < n; q++) {
        first[q] = isdigit((unsigned char)s[0]) || hash_has(r, pre[q]);
        any |= first[q];
    }
    if (!any)
        return 0;
    can[n] = 1;
    ends[n_ends++] = n;
    for (size_t p = n; p-- > 1;) {
        can[p] = isdigit((unsigned char)s[p]) != 0; /* any piece: up to n, where can[n] is */
        for (size_t k = 0; !can[p] && k < n_ends; k++)
            can[p] = hash_has(r, pre[ends[k]] - pre[p] * mul[ends[k] - p]);
        if (can[p])
            ends[n_ends++] = p;
    }
    for (size_t q = 1; q < n; q++)
        if (first[q] && can[q])
            return 1;
    return 0;
}

static void reach_name(struct reach *r, const char *name)
{
    size_t k;
    if (!kc_smap_find(&r->m->index, name, &k))
        return;
    for (; k < r->m->n && !strcmp(r->m->v[k].name, name); k++) {
        if (r->seen[k])
            continue;
        r->seen[k] = 1;
        r->todo[r->n_todo++] = k; /* each definition once: todo holds m->n */
    }
}

/*
 * An identifier of the expansion: a piece, maybe a macro to follow. One a toolkit macro
 * spells is judged as the toolkit's own __FILE__ is, after the compile, unless it is a
 * user macro that carries the name.
 */
static void reach_ident(struct reach *r, const char *s, size_t n, int toolkit)
{
    char buf[256];
    if (n >= sizeof(buf)) {
        r->named = 1; /* not a name kcache follows: keyed */
        return;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    unsigned taint = kc_ident_taint(r->m, s, n);
    if (toolkit && strstr(buf, "FILE"))
        taint = 0;
    if (r->header ? (taint & KC_TAINT_CALLER) : taint)
        r->named = 1;
    if (kc_smap_find(&r->pieces, buf, NULL))
        return;
    if (kc_smap_put(&r->pieces, buf, 0) || hash_put(r, piece_hash(buf, n))) {
        r->rc = KCACHE_ENOMEM;
        return;
    }
    reach_name(r, buf);
}

/* The identifiers of text, or of d's replacement list but its parameters. */
static void reach_text(struct reach *r, const struct macro *d, const char *t, size_t n)
{
    for (size_t i = 0; i < n && !r->named && !r->rc;) {
        size_t len = kc_ident_at(t, n, i);
        if (len) {
            if (!d || !kc_is_param(d, t + i, len))
                reach_ident(r, t + i, len, d && d->toolkit);
            i += len;
        } else {
            i++;
        }
    }
}

/* Marks r named when a run of its pieces spells a name that carries the file. */
static void reach_targets(struct reach *r)
{
    const char *const *names = r->header ? caller_names : pasted_names;
    size_t n = r->header ? sizeof(caller_names) / sizeof(*caller_names)
                         : sizeof(pasted_names) / sizeof(*pasted_names);
    for (size_t i = 0; i < n && !r->named; i++)
        if (runs_of_pieces(r, names[i], strlen(names[i])))
            r->named = 1;
}

static int reach_init(struct reach *r, const struct macros *m, int header)
{
    *r = (struct reach){.m = m, .header = header};
    r->seen = kc_calloc(m->n + 1, 1);
    r->todo = kc_calloc(m->n + 1, sizeof(*r->todo));
    if (!r->seen || !r->todo)
        r->rc = KCACHE_ENOMEM;
    return r->rc;
}

/* 1 if r found the name (or could not tell), and frees it. */
static int reach_done(struct reach *r)
{
    int named = r->named || r->rc;
    free(r->seen);
    free(r->todo);
    free(r->hashes);
    kc_smap_free(&r->pieces);
    return named;
}

/* Follows what is to do; then, when something pastes, the names a run of pieces makes. */
static void reach_close(struct reach *r)
{
    for (int more = 1; more && !r->named && !r->rc;) {
        while (r->n_todo && !r->named && !r->rc) {
            const struct macro *d = &r->m->v[r->todo[--r->n_todo]];
            r->pastes |= d->pastes;
            reach_text(r, d, d->body + d->repl, strlen(d->body + d->repl));
        }
        more = 0;
        if (!r->pastes || r->named || r->rc)
            break;
        reach_targets(r);
        for (size_t i = 0; i < r->m->n && !r->named; i++) {
            const char *name = r->m->v[i].name;
            if (!r->seen[i] && (i == 0 || strcmp(name, r->m->v[i - 1].name)) &&
                runs_of_pieces(r, name, strlen(name))) {
                reach_name(r, name);
                more = 1;
            }
        }
    }
}

/* 1 if a ## in the expansion of the program's texts can make the program's name. */
int kc_pastes_name_it(const struct macros *m, const kcache_request *req, const struct work *w)
{
    struct reach r;
    reach_init(&r, m, 0);
    reach_text(&r, NULL, w->source, w->source_size);
    for (size_t i = 0; i < req->n_options; i++)
        if (req->options[i])
            reach_text(&r, NULL, req->options[i], strlen(req->options[i]));
    for (size_t i = 0; i < req->n_name_exprs; i++)
        reach_text(&r, NULL, req->name_exprs[i], strlen(req->name_exprs[i]));
    size_t n_mem = req->version >= 2 ? req->n_headers : 0;
    for (size_t i = 0; i < n_mem; i++)
        if (req->header_contents[i])
            reach_text(&r, NULL, req->header_contents[i], strlen(req->header_contents[i]));
    /*
     * A toolkit or predefined macro that pastes is not read here (only the user
     * headers' macros are collected), so a run of the program's own pieces that
     * spells a name carrying the file keys it, whatever pastes them
     * (_CCCL_PP_CAT(__FI, LE__) with CCCL from the toolkit).
     */
    if (!r.rc)
        reach_targets(&r);
    reach_close(&r);
    return reach_done(&r);
}

/* ---- what a header's code pastes ---------------------------------------- */

/* The end of the string or character literal that starts at t[i] (a line ends it). */
static size_t literal_end(const char *t, size_t n, size_t i)
{
    char q = t[i];
    for (i++; i < n && t[i] != q && t[i] != '\n'; i++)
        if (t[i] == '\\')
            i++;
    return i < n ? i + 1 : n;
}

/* The end of the comment that starts at t[i], or i when none does. */
static size_t comment_end(const char *t, size_t n, size_t i)
{
    if (t[i] != '/' || i + 1 >= n || (t[i + 1] != '/' && t[i + 1] != '*'))
        return i;
    if (t[i + 1] == '/') {
        const char *nl = memchr(t + i, '\n', n - i);
        return nl ? (size_t)(nl - t) : n;
    }
    const char *end = i + 2 < n ? memmem(t + i + 2, n - i - 2, "*/", 2) : NULL;
    return end ? (size_t)(end - t) + 2 : n;
}

/* The first byte at or after t[i] that is no blank, line end, comment or directive line. */
static size_t skip_gap(const char *t, size_t n, size_t i)
{
    while (i < n) {
        size_t j = comment_end(t, n, i);
        if (j != i) {
            i = j;
        } else if (isspace((unsigned char)t[i])) {
            i++;
        } else if (kc_hash_at(t, n, i)) {
            size_t k = i;
            while (k > 0 && (t[k - 1] == ' ' || t[k - 1] == '\t'))
                k--;
            if (k > 0 && t[k - 1] != '\n')
                break;
            i = kc_logical_line(t, n, i, NULL);
        } else {
            break;
        }
    }
    return i;
}

/*
 * The end of an invocation whose macro's name ends at t[i]: each parenthesised group that
 * follows (an expansion that ends in a function-like macro's name takes the next one).
 */
static size_t invocation_end(const char *t, size_t n, size_t i)
{
    for (size_t j = skip_gap(t, n, i); j < n && t[j] == '('; j = skip_gap(t, n, i)) {
        size_t depth = 0;
        for (i = j; i < n;) {
            size_t k = comment_end(t, n, i);
            if (k != i) {
                i = k;
            } else if (t[i] == '"' || (t[i] == '\'' && !(i > 0 && isalnum((unsigned char)t[i - 1])))) {
                i = literal_end(t, n, i);
            } else {
                depth += t[i] == '(';
                depth -= t[i] == ')';
                if (t[i++] == ')' && !depth)
                    break;
            }
        }
    }
    return i;
}

/* 1 if the invocation t (n bytes) of a header's code can paste the caller's name. */
static int span_pastes_caller(const struct macros *m, const char *t, size_t n)
{
    struct reach r;
    if (!reach_init(&r, m, 1)) {
        reach_text(&r, NULL, t, n);
        reach_close(&r);
    }
    return reach_done(&r);
}

static int grow(size_t **v, size_t *cap, size_t n)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 64;
    size_t *w = kc_realloc(*v, c * sizeof(*w));
    if (!w)
        return KCACHE_ENOMEM;
    *v = w;
    *cap = c;
    return 0;
}

/* Adds an invocation's text to s, unless s has it (a text with a NUL in it is always added). */
static int add_span(struct spans *s, const char *t, size_t n)
{
    char *span = kc_memdup(t, n);
    if (!span)
        return KCACHE_ENOMEM;
    int rc = 0;
    if (memchr(t, '\0', n) || !kc_smap_find(&s->judged, span, NULL)) {
        rc = kc_smap_put(&s->judged, span, 0) || grow(&s->ends, &s->cap, s->n) ||
             kc_buf_append(&s->text, t, n) || kc_buf_append(&s->text, "\n", 1);
        if (!rc)
            s->ends[s->n++] = s->text.size - 1;
    }
    free(span);
    return rc ? KCACHE_ENOMEM : 0;
}

/* Adds the pasting invocations of a header's code t (n bytes) to s. */
int kc_code_spans(struct spans *s, const struct macros *m, const char *t, size_t n)
{
    int at_start = 1, rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t len, k = comment_end(t, n, i);
        if (k != i) {
            i = k;
        } else if (t[i] == '\n') {
            at_start = 1;
            i++;
        } else if (isspace((unsigned char)t[i])) {
            i++;
        } else if (at_start && kc_hash_at(t, n, i)) {
            i = kc_logical_line(t, n, i, NULL);
        } else if (t[i] == '"' || (t[i] == '\'' && !(i > 0 && isalnum((unsigned char)t[i - 1])))) {
            at_start = 0;
            i = literal_end(t, n, i);
        } else if ((len = kc_ident_at(t, n, i)) && kc_name_pastes(m, t + i, len)) {
            at_start = 0;
            size_t end = invocation_end(t, n, i + len);
            rc = add_span(s, t + i, end - i);
            i = end;
        } else {
            at_start = 0;
            i += len ? len : 1;
        }
    }
    if (!rc && !(rc = grow(&s->upto, &s->cap_upto, s->n_upto)))
        s->upto[s->n_upto++] = s->n;
    return rc;
}

/* span_pastes_caller() of invocations [a, b) of s, reached together. */
static int spans_reach(const struct macros *m, const struct spans *s, size_t a, size_t b)
{
    size_t start = a ? s->ends[a - 1] + 1 : 0;
    return span_pastes_caller(m, (const char *)s->text.data + start, s->ends[b - 1] - start);
}

/*
 * 1 if an invocation of s can paste __BASE_FILE__, __builtin_FILE or a macro that expands
 * them of its pieces (its own, and those of the macros it reaches): its expansion is then
 * the program's name (a default argument is the caller's). What a reach finds only grows
 * with what it starts from, so all invocations are reached at once first, then each
 * header's, then each one alone: CuPy's ~1,000 headers cost one reach.
 */
int kc_spans_paste_caller(const struct macros *m, const struct spans *s)
{
    if (!s->n || !spans_reach(m, s, 0, s->n))
        return 0;
    for (size_t h = 0, first = 0; h < s->n_upto; first = s->upto[h++]) {
        if (s->upto[h] == first || !spans_reach(m, s, first, s->upto[h]))
            continue;
        for (size_t k = first; k < s->upto[h]; k++)
            if (spans_reach(m, s, k, k + 1))
                return 1;
    }
    return 0;
}
