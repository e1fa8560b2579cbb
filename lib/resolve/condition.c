/*
 * The #if and #elif conditions, macro-expanded as the preprocessor expands
 * them, for the __has_include each evaluates: a wrapper handed in as an
 * argument and called in a body, a name made by ## or a header name by #,
 * a call completed by the tokens after it. The expansion is the standard's
 * (arguments expanded first unless next to # or ##, substitution, ##
 * pasting, # stringizing, rescanning with the rest of the line, hide sets
 * after Prosser), over every definition seen of each name (any branch, any
 * file, -D, -include), since conditions are not evaluated.
 *
 * Only a condition that names a macro able to reach __has_include is
 * expanded (cond_reaches): in CCCL as CuPy ships it, 13 of the thousands a
 * compile reads. A name is expanded once per path through the definitions:
 * such a condition is expanded again for each choice of definition (or
 * none) of each name it meets, up to KC_COND_PATHS paths. No name is left
 * unexpanded to save paths: what it expands to may be stringized or pasted.
 *
 * Every __has_include met, at any depth, is probed from the file holding
 * the condition; one that cannot be worked out (an operand kcache cannot
 * spell, __has_include_next, a paste that is no token, too many paths)
 * makes the compile not hermetic: it runs uncached and says why.
 */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resolve/resolveint.h"

/* How many paths through the definitions one condition may take, and tokens one path. */
#define KC_COND_PATHS 512
#define KC_COND_STEPS 200000

enum { T_IDENT = 1, T_NUMBER, T_STRING, T_PUNCT, T_MARK };

/* A set of macro names a token may no longer be expanded by (Prosser). */
struct hideset {
    size_t name;
    const struct hideset *next;
};

struct tok {
    const char *s;
    unsigned n;
    unsigned char kind, space; /* space: white space before it, for # */
    unsigned pos;              /* 1 + its place in the condition's own text, or 0 */
    const struct hideset *hs;
    struct tok *next;
};

struct chunk {
    struct chunk *next;
    size_t used, size;
    max_align_t data[];
};

struct arena {
    struct chunk *head;
    int failed;
};

struct def {
    size_t name, next; /* next: the name's next definition, or SIZE_MAX */
    int func, variadic;
    size_t n_params;
    const struct tok **params; /* identifiers (variadic: __VA_ARGS__ last) */
    struct tok *body;          /* an array of n_body */
    size_t n_body;
};

struct name {
    const char *s;
    size_t first, n_defs, n_objects; /* n_objects: object-like definitions among them */
    size_t run, chosen; /* the definition (1 + index) this run chose, 0 none */
};

struct cond {
    size_t node;
    unsigned line;
    struct tok *toks; /* a list */
};

struct kc_cond_state {
    struct arena keep;
    kc_smap by_name;
    struct name *names;
    size_t n_names, cap_names;
    struct def *defs;
    size_t n_defs, cap_defs;
    kc_smap def_text; /* each definition once */
    struct cond *conds;
    size_t n_conds, cap_conds, done;
    size_t gen, done_gen; /* definitions added; the generation conds[0..done) were expanded in */
    kc_smap probed;
    size_t run;
    /* The names that reach __has_include (below), for generation reach_gen. */
    size_t reach_gen, reach_conds; /* ... and with that many conditions' pieces */
    kc_smap pieces;
    unsigned char *reaches; /* per name */
    size_t cap_reaches;
};

/* One expansion of a condition along one path. */
struct run {
    struct resolver *r;
    struct kc_cond_state *st;
    struct arena a;
    size_t node;
    unsigned line;
    size_t steps, pos;
    struct { size_t name, chosen, options; } *stack;
    size_t n_stack, cap_stack;
    int stop; /* not hermetic, or out of memory */
    int rc;
};

/* ---- memory ------------------------------------------------------------ */

static void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!a->head || a->head->size - a->head->used < n) {
        size_t size = n > 65536 ? n : 65536;
        struct chunk *c = kc_malloc(sizeof(*c) + size);
        if (!c) {
            a->failed = 1;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->size = size;
        a->head = c;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

static void arena_free(struct arena *a)
{
    for (struct chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
    a->failed = 0;
}

/* ---- tokens ------------------------------------------------------------ */

static int is_id(int c)
{
    return kc_res_is_ident_char(c);
}

static int tok_is(const struct tok *t, const char *s)
{
    return t && t->n == strlen(s) && !memcmp(t->s, s, t->n) && t->kind != T_STRING;
}

/* The length of the punctuator at p (the longest that fits), or 1. */
static size_t punct_len(const char *p, const char *end)
{
    static const struct {
        char s[5];
        unsigned char n;
    } puncts[] = {
        {"%:%:", 4}, {"...", 3}, {"<<=", 3}, {">>=", 3}, {"->*", 3}, {"<=>", 3}, {"##", 2},
        {"%:", 2},   {"<:", 2},  {":>", 2},  {"<%", 2},  {"%>", 2},  {"<<", 2},  {">>", 2},
        {"<=", 2},   {">=", 2},  {"==", 2},  {"!=", 2},  {"&&", 2},  {"||", 2},  {"++", 2},
        {"--", 2},   {"->", 2},  {"::", 2},  {".*", 2},  {"+=", 2},  {"-=", 2},  {"*=", 2},
        {"/=", 2},   {"%=", 2},  {"&=", 2},  {"|=", 2},  {"^=", 2},
    };
    /* Every line of a condition the resolver expands goes through here: the first
     * byte rules out nearly every entry before a comparison. */
    for (size_t i = 0; i < sizeof(puncts) / sizeof(*puncts); i++) {
        size_t n = puncts[i].n;
        assert(n == strlen(puncts[i].s));
        if (puncts[i].s[0] == *p && (size_t)(end - p) >= n && !memcmp(p, puncts[i].s, n))
            return n;
    }
    return 1;
}

/*
 * Splits text (a logical line: no comments, no splices) into a list of
 * tokens that point into it. Returns the list, NULL for none; a->failed on
 * ENOMEM.
 */
static struct tok *lex(struct arena *a, const char *s, size_t n)
{
    struct tok head = {0}, *tail = &head;
    const char *p = s, *end = s + n;
    int space = 0;
    while (p < end) {
        if (isspace((unsigned char)*p)) {
            space = 1;
            p++;
            continue;
        }
        const char *q = p;
        int kind;
        if (isdigit((unsigned char)*p) || (*p == '.' && p + 1 < end && isdigit((unsigned char)p[1]))) {
            kind = T_NUMBER;
            for (q++; q < end; q++) {
                if ((*q == '+' || *q == '-') && strchr("eEpP", q[-1]))
                    continue;
                if (*q == '\'' && q + 1 < end && is_id((unsigned char)q[1]))
                    continue;
                if (!is_id((unsigned char)*q) && *q != '.')
                    break;
            }
        } else if (is_id((unsigned char)*p) || *p == '"' || *p == '\'') {
            while (q < end && is_id((unsigned char)*q))
                q++;
            kind = T_IDENT;
            int prefix = q > p && q < end && (*q == '"' || *q == '\'') &&
                         ((q - p == 1 && strchr("LuUR", *p)) ||
                          (q - p == 2 && (!memcmp(p, "u8", 2) || p[1] == 'R')) ||
                          (q - p == 3 && !memcmp(p, "u8R", 3)));
            if (q == p || prefix) {
                char quote = *q++;
                kind = T_STRING;
                while (q < end && *q != quote)
                    q += *q == '\\' && q + 1 < end ? 2 : 1;
                q += q < end;
            }
        } else {
            kind = T_PUNCT;
            q = p + punct_len(p, end);
        }
        struct tok *t = arena_alloc(a, sizeof(*t));
        if (!t)
            return NULL;
        *t = (struct tok){.s = p, .n = (unsigned)(q - p), .kind = (unsigned char)kind,
                          .space = (unsigned char)space};
        tail = tail->next = t;
        space = 0;
        p = q;
    }
    return head.next;
}

static struct tok *copy_tok(struct arena *a, const struct tok *t)
{
    struct tok *c = arena_alloc(a, sizeof(*c));
    if (c) {
        *c = *t;
        c->next = NULL;
    }
    return c;
}

/* A copy of the list from..upto (exclusive). */
static struct tok *copy_list(struct arena *a, const struct tok *from, const struct tok *upto)
{
    struct tok head = {0}, *tail = &head;
    for (; from != upto; from = from->next) {
        if (!(tail->next = copy_tok(a, from)))
            return NULL;
        tail = tail->next;
    }
    return head.next;
}

static struct tok *last_of(struct tok *l)
{
    while (l && l->next)
        l = l->next;
    return l;
}

/* ---- hide sets --------------------------------------------------------- */

static int hs_has(const struct hideset *h, size_t name)
{
    for (; h; h = h->next)
        if (h->name == name)
            return 1;
    return 0;
}

static const struct hideset *hs_add(struct arena *a, const struct hideset *h, size_t name)
{
    if (hs_has(h, name))
        return h;
    struct hideset *n = arena_alloc(a, sizeof(*n));
    if (n) {
        n->name = name;
        n->next = h;
    }
    return n;
}

static const struct hideset *hs_union(struct arena *a, const struct hideset *x,
                                      const struct hideset *y)
{
    for (; y; y = y->next)
        x = hs_add(a, x, y->name);
    return x;
}

static const struct hideset *hs_both(struct arena *a, const struct hideset *x,
                                     const struct hideset *y)
{
    const struct hideset *out = NULL;
    for (; x; x = x->next)
        if (hs_has(y, x->name))
            out = hs_add(a, out, x->name);
    return out;
}

/* ---- definitions ------------------------------------------------------- */

static int find_name(const struct kc_cond_state *st, const struct tok *t, size_t *out)
{
    char buf[256];
    if (t->kind != T_IDENT || t->n >= sizeof(buf))
        return 0;
    memcpy(buf, t->s, t->n);
    buf[t->n] = '\0';
    return kc_smap_find(&st->by_name, buf, out);
}

static int add_name(struct kc_cond_state *st, const char *s, size_t *out)
{
    if (kc_smap_find(&st->by_name, s, out))
        return 0;
    if (kc_res_grow((void **)&st->names, &st->cap_names, st->n_names, sizeof(*st->names)))
        return KCACHE_ENOMEM;
    char *copy = arena_alloc(&st->keep, strlen(s) + 1);
    if (!copy || kc_smap_put(&st->by_name, s, st->n_names))
        return KCACHE_ENOMEM;
    strcpy(copy, s);
    st->names[st->n_names] = (struct name){.s = copy, .first = SIZE_MAX};
    *out = st->n_names++;
    return 0;
}

static int state(struct resolver *r)
{
    if (!r->cond && !(r->cond = kc_calloc(1, sizeof(*r->cond))))
        return KCACHE_ENOMEM;
    return 0;
}

int kc_res_cond_define(struct resolver *r, const kc_directive *d)
{
    int rc = state(r);
    if (rc)
        return rc;
    struct kc_cond_state *st = r->cond;
    const char *params = d->kind == KC_DIR_FUNC_DEFINE ? (d->params ? d->params : "") : NULL;
    const char *body = d->value ? d->value : "";
    size_t len = strlen(d->text) + strlen(body) + (params ? strlen(params) : 0) + 4;
    char *key = arena_alloc(&st->keep, len);
    if (!key)
        return KCACHE_ENOMEM;
    snprintf(key, len, "%s%c%s%c%s", d->text, params ? '(' : ' ', params ? params : "", 1, body);
    if (kc_smap_find(&st->def_text, key, NULL))
        return 0;
    size_t name;
    if (kc_smap_put(&st->def_text, key, 0) || add_name(st, d->text, &name) ||
        kc_res_grow((void **)&st->defs, &st->cap_defs, st->n_defs, sizeof(*st->defs)))
        return KCACHE_ENOMEM;
    struct def *df = &st->defs[st->n_defs];
    *df = (struct def){.name = name, .next = st->names[name].first, .func = params != NULL};
    /* The definition's text lives in key, which the arena keeps. */
    const char *kp = strchr(key + strlen(d->text) + 1, 1);
    df->body = NULL;
    struct tok *list = lex(&st->keep, kp + 1, strlen(kp + 1));
    for (const struct tok *t = list; t; t = t->next)
        df->n_body++;
    if (df->n_body && !(df->body = arena_alloc(&st->keep, df->n_body * sizeof(*df->body))))
        return KCACHE_ENOMEM;
    size_t i = 0;
    for (const struct tok *t = list; t; t = t->next)
        df->body[i++] = *t;
    if (params) {
        const char *ps = key + strlen(d->text) + 1;
        struct tok *pl = lex(&st->keep, ps, (size_t)(kp - ps));
        size_t np = 0;
        for (struct tok *t = pl; t; t = t->next)
            np += t->kind == T_IDENT || tok_is(t, "...");
        if (np && !(df->params = arena_alloc(&st->keep, np * sizeof(*df->params))))
            return KCACHE_ENOMEM;
        for (struct tok *t = pl, *prev = NULL; t; prev = t, t = t->next) {
            if (tok_is(t, "...") && prev && prev->kind == T_IDENT) {
                df->variadic = 1; /* GNU's NAME...: the last parameter takes the rest */
                continue;
            }
            if (tok_is(t, "...")) {
                df->variadic = 1;
                t->s = "__VA_ARGS__";
                t->n = 11;
                t->kind = T_IDENT;
            } else if (t->kind != T_IDENT) {
                continue;
            }
            df->params[df->n_params++] = t;
        }
    }
    if (st->keep.failed)
        return KCACHE_ENOMEM;
    st->names[name].first = st->n_defs++;
    st->names[name].n_defs++;
    st->names[name].n_objects += !df->func;
    st->gen++;
    return 0;
}

int kc_res_cond_add(struct resolver *r, size_t node, const kc_directive *d)
{
    int rc = state(r);
    if (rc)
        return rc;
    struct kc_cond_state *st = r->cond;
    if (kc_res_grow((void **)&st->conds, &st->cap_conds, st->n_conds, sizeof(*st->conds)))
        return KCACHE_ENOMEM;
    /* The directive's text outlives the resolution's use of it (node or memo). */
    struct tok *toks = lex(&st->keep, d->text, strlen(d->text));
    if (st->keep.failed)
        return KCACHE_ENOMEM;
    unsigned pos = 0;
    for (struct tok *t = toks; t; t = t->next)
        t->pos = ++pos;
    st->conds[st->n_conds++] = (struct cond){node, d->line, toks};
    return 0;
}

/* Index of parameter t of d, or -1. */
static int param_of(const struct def *d, const struct tok *t)
{
    if (!d->func || t->kind != T_IDENT)
        return -1;
    for (size_t i = 0; i < d->n_params; i++)
        if (d->params[i]->n == t->n && !memcmp(d->params[i]->s, t->s, t->n))
            return (int)i;
    return -1;
}

static int is_has_include(const struct tok *t)
{
    return tok_is(t, "__has_include") || tok_is(t, "__has_include_next");
}

/* ---- what can reach __has_include -------------------------------------- */

/*
 * Most conditions cannot evaluate a __has_include that is not spelled in
 * them (the scanner has those): they are not expanded at all. A name
 * "reaches" when one of its definitions spells __has_include or
 * __has_include_next, or names a name that reaches, or has a ## that can
 * paste one of those together. A paste's pieces are any identifier or
 * number spelled in any definition or condition (pieces), the first one the
 * ## operand when it is spelled in the body; a piece alone is no paste (its
 * spelling is already in the text, where it is judged). A condition none of
 * whose identifiers reaches cannot meet a __has_include it does not spell:
 * every token its expansion makes is spelled in a definition it reaches, or
 * pasted by one, or comes from the condition.
 */
static const char target[] = "__has_include_next"; /* "__has_include" is its first 13 */

static int piece(const struct kc_cond_state *st, const char *s, size_t n)
{
    char buf[256];
    if (!n || n >= sizeof(buf))
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return kc_smap_find(&st->pieces, buf, NULL);
}

/* can[p]: whether s[p..] can be made of pieces up to one of the ends (13 and 18 for target). */
static void formable(const struct kc_cond_state *st, const char *s, size_t n, int is_target,
                     unsigned char *can)
{
    for (size_t p = n + 1; p-- > 0;) {
        can[p] = is_target ? p == 13 || p == 18 : p == n;
        for (size_t q = p + 1; !can[p] && q <= n; q++)
            can[p] = can[q] && piece(st, s + p, q - p);
    }
}

/* Whether a ## whose left operand is lhs (NULL: a parameter's) can paste s together. */
static int pastes(const struct kc_cond_state *st, const char *s, size_t n,
                  const unsigned char *can, const struct tok *lhs)
{
    if (lhs) {
        if (lhs->n >= n || memcmp(lhs->s, s, lhs->n))
            return 0;
        for (size_t q = lhs->n + 1; q <= n; q++)
            if (can[q] && piece(st, s + lhs->n, q - lhs->n))
                return 1;
        return 0;
    }
    for (size_t p = 1; p < n; p++)
        for (size_t q = p + 1; piece(st, s, p) && q <= n; q++)
            if (can[q] && piece(st, s + p, q - p))
                return 1;
    return 0;
}

static int add_piece(struct kc_cond_state *st, const struct tok *t)
{
    char buf[256];
    if ((t->kind != T_IDENT && t->kind != T_NUMBER) || t->n >= sizeof(buf))
        return 0;
    memcpy(buf, t->s, t->n);
    buf[t->n] = '\0';
    return kc_smap_find(&st->pieces, buf, NULL) ? 0 : kc_smap_put(&st->pieces, buf, 0);
}

/* Whether definition d reaches, given the names marked so far (can: per name, or NULL). */
static int def_reaches(struct kc_cond_state *st, const struct def *d, const unsigned char *tcan,
                       unsigned char **can)
{
    for (size_t i = 0; i < d->n_body; i++) {
        const struct tok *t = &d->body[i];
        size_t name;
        if (t->kind == T_IDENT && param_of(d, t) < 0) {
            if (is_has_include(t))
                return 1;
            if (find_name(st, t, &name) && st->reaches[name])
                return 1;
        }
        if (!(tok_is(t, "##") || tok_is(t, "%:%:")) || !i)
            continue;
        const struct tok *lhs = param_of(d, &d->body[i - 1]) >= 0 ? NULL : &d->body[i - 1];
        if (pastes(st, target, 18, tcan, lhs))
            return 1;
        for (size_t x = 0; x < st->n_names; x++)
            if (st->reaches[x] && can[x] &&
                pastes(st, st->names[x].s, strlen(st->names[x].s), can[x], lhs))
                return 1;
    }
    return 0;
}

static int compute_reach(struct kc_cond_state *st)
{
    kc_smap_free(&st->pieces);
    memset(&st->pieces, 0, sizeof(st->pieces));
    for (size_t i = 0; i < st->n_defs; i++)
        for (size_t j = 0; j < st->defs[i].n_body; j++)
            if (param_of(&st->defs[i], &st->defs[i].body[j]) < 0 &&
                add_piece(st, &st->defs[i].body[j]))
                return KCACHE_ENOMEM;
    for (size_t i = 0; i < st->n_conds; i++)
        for (const struct tok *t = st->conds[i].toks; t; t = t->next)
            if (add_piece(st, t))
                return KCACHE_ENOMEM;
    if (kc_res_grow((void **)&st->reaches, &st->cap_reaches, st->n_names, 1))
        return KCACHE_ENOMEM;
    memset(st->reaches, 0, st->n_names);
    unsigned char **can = kc_calloc(st->n_names + 1, sizeof(*can));
    if (!can)
        return KCACHE_ENOMEM;
    unsigned char tcan[19];
    formable(st, target, 18, 1, tcan);
    int rc = 0;
    for (int changed = 1; changed && !rc;) {
        changed = 0;
        for (size_t i = 0; i < st->n_defs && !rc; i++) {
            size_t name = st->defs[i].name;
            if (st->reaches[name] || !def_reaches(st, &st->defs[i], tcan, can))
                continue;
            size_t n = strlen(st->names[name].s);
            if (!(can[name] = kc_malloc(n + 1))) {
                rc = KCACHE_ENOMEM;
                break;
            }
            formable(st, st->names[name].s, n, 0, can[name]);
            st->reaches[name] = 1;
            changed = 1;
        }
    }
    for (size_t i = 0; i < st->n_names; i++)
        free(can[i]);
    free(can);
    st->reach_gen = st->gen;
    st->reach_conds = st->n_conds;
    return rc;
}

/* Whether the expansion of c can meet a __has_include that c does not spell. */
static int cond_reaches(const struct kc_cond_state *st, const struct cond *c)
{
    size_t name;
    for (const struct tok *t = c->toks; t; t = t->next)
        if (find_name(st, t, &name) && st->reaches[name])
            return 1;
    return 0;
}

/* ---- one path ---------------------------------------------------------- */

static void run_uncertain(struct run *x, const char *reason, const char *what)
{
    if (x->stop)
        return;
    x->stop = 1;
    kc_res_not_hermetic(x->r, reason, "%s:%u: %s in #if: kcache cannot be sure what the "
                        "compile reads", kc_res_where(&x->r->nodes[x->node]), x->line, what);
}

static void run_nomem(struct run *x)
{
    x->stop = 1;
    x->rc = KCACHE_ENOMEM;
}

/* The definition this path takes for name (NULL: left unexpanded). */
static const struct def *choose(struct run *x, size_t name)
{
    struct kc_cond_state *st = x->st;
    struct name *nm = &st->names[name];
    if (!nm->n_defs)
        return NULL;
    if (nm->run != st->run) {
        size_t chosen;
        if (x->pos < x->n_stack) {
            assert(x->stack[x->pos].name == name);
            chosen = x->stack[x->pos].chosen;
        } else {
            if (kc_res_grow((void **)&x->stack, &x->cap_stack, x->n_stack, sizeof(*x->stack))) {
                run_nomem(x);
                return NULL;
            }
            x->stack[x->n_stack].name = name;
            x->stack[x->n_stack].chosen = chosen = 0;
            x->stack[x->n_stack++].options = nm->n_defs + 1;
        }
        x->pos++;
        nm->run = st->run;
        nm->chosen = chosen;
    }
    size_t d = nm->first;
    if (!nm->chosen)
        return NULL;
    for (size_t i = 1; i < nm->chosen; i++)
        d = st->defs[d].next;
    return &st->defs[d];
}

static struct tok *expand(struct run *x, struct tok *in, int top);

/* Looks up each header name an operand's text can give, from the condition's file. */
static void probe(struct run *x, const char *text)
{
    struct kc_cond_state *st = x->st;
    char key[4096];
    int n = snprintf(key, sizeof(key), "%zu:%s", x->node, text);
    if (n < 0 || (size_t)n >= sizeof(key)) {
        run_uncertain(x, "computed_has_include", "a __has_include operand over 4 KiB");
        return;
    }
    if (kc_smap_find(&st->probed, key, NULL))
        return;
    if (kc_smap_put(&st->probed, key, 0)) {
        run_nomem(x);
        return;
    }
    int ok = 0;
    int rc = kc_res_probe_operand(x->r, text, x->node, &ok);
    if (rc) {
        x->rc = rc;
        x->stop = 1;
    } else if (!ok) {
        char what[600];
        snprintf(what, sizeof(what), "__has_include(%.500s)", text);
        run_uncertain(x, "computed_has_include", what);
    }
}

/*
 * __has_include at t, its operand in the tokens after it: the operand is
 * expanded unless it is one literal, and probed. Returns the tokens after
 * the closing parenthesis.
 */
static struct tok *has_include(struct run *x, const struct tok *t, struct tok *in)
{
    if (tok_is(t, "__has_include_next")) {
        run_uncertain(x, "uncertain_construct", "__has_include_next");
        return NULL;
    }
    if (!in || !tok_is(in, "(")) {
        run_uncertain(x, "computed_has_include", "__has_include without its '('");
        return NULL;
    }
    int depth = 0;
    struct tok *e = in->next;
    for (; e; e = e->next) {
        if (tok_is(e, "("))
            depth++;
        else if (tok_is(e, ")") && depth-- == 0)
            break;
    }
    if (!e) {
        run_uncertain(x, "computed_has_include", "__has_include without its ')'");
        return NULL;
    }
    /* Spelled so in the condition itself: the scanner probed it (or gave up). */
    if (!t->hs && t->pos && !in->hs && in->pos == t->pos + 1)
        return e->next;
    struct tok *op = copy_list(&x->a, in->next, e);
    if (!(op && !op->next && op->kind == T_STRING))
        op = expand(x, op, 0);
    if (x->stop)
        return NULL;
    /*
     * An operand that is no header name once expanded along this path is an
     * error of NVRTC's whatever the files (checked with NVRTC 13): there is
     * nothing to look up.
     */
    const struct tok *lt = last_of(op);
    if (!(op && ((!op->next && op->kind == T_STRING) || (tok_is(op, "<") && tok_is(lt, ">")))))
        return e->next;
    size_t len = 1;
    for (const struct tok *o = op; o; o = o->next)
        len += o->n;
    char *text = arena_alloc(&x->a, len);
    if (!text) {
        run_nomem(x);
        return NULL;
    }
    /* Spacing between the tokens of <...>: what the preprocessors do is drop it. */
    size_t k = 0;
    for (const struct tok *o = op; o; o = o->next) {
        if (o->kind == T_MARK)
            continue;
        memcpy(text + k, o->s, o->n);
        k += o->n;
    }
    text[k] = '\0';
    probe(x, text);
    return e->next;
}

/* The argument as a string literal (#). */
static struct tok *stringize(struct run *x, const struct tok *arg)
{
    size_t len = 3;
    for (const struct tok *t = arg; t; t = t->next)
        len += 1 + 2 * t->n;
    char *s = arena_alloc(&x->a, len);
    struct tok *out = s ? arena_alloc(&x->a, sizeof(*out)) : NULL;
    if (!out) {
        run_nomem(x);
        return NULL;
    }
    size_t k = 0;
    s[k++] = '"';
    for (const struct tok *t = arg; t; t = t->next) {
        if (t->kind == T_MARK)
            continue;
        if (t != arg && t->space)
            s[k++] = ' ';
        for (unsigned i = 0; i < t->n; i++) {
            if (t->kind == T_STRING && (t->s[i] == '"' || t->s[i] == '\\'))
                s[k++] = '\\';
            s[k++] = t->s[i];
        }
    }
    s[k++] = '"';
    *out = (struct tok){.s = s, .n = (unsigned)k, .kind = T_STRING};
    return out;
}

/* lhs ## rhs: one token, relexed. NULL (and the run stopped) when it is not one. */
static struct tok *paste(struct run *x, const struct tok *lhs, const struct tok *rhs)
{
    char *s = arena_alloc(&x->a, lhs->n + rhs->n + 1);
    if (!s) {
        run_nomem(x);
        return NULL;
    }
    memcpy(s, lhs->s, lhs->n);
    memcpy(s + lhs->n, rhs->s, rhs->n);
    s[lhs->n + rhs->n] = '\0';
    struct tok *t = lex(&x->a, s, lhs->n + rhs->n);
    if (x->a.failed) {
        run_nomem(x);
        return NULL;
    }
    if (!t || t->next) {
        char what[300];
        snprintf(what, sizeof(what), "'%.120s ## %.120s', which makes no single token",
                 lhs->kind == T_MARK ? "" : lhs->s, rhs->s);
        run_uncertain(x, "uncertain_construct", what);
        return NULL;
    }
    t->hs = lhs->hs;
    t->space = lhs->space;
    t->pos = 0;
    return t;
}

struct args {
    struct tok **raw, **expanded;
    int *done;
    size_t n;
};

static struct tok *arg_expanded(struct run *x, struct args *a, int p)
{
    if (!a->done[p]) {
        a->done[p] = 1;
        a->expanded[p] = expand(x, copy_list(&x->a, a->raw[p], NULL), 0);
    }
    return copy_list(&x->a, a->expanded[p], NULL);
}

/* A placemarker: an empty argument next to ## (removed after the pasting). */
static struct tok *mark(struct run *x)
{
    struct tok *m = arena_alloc(&x->a, sizeof(*m));
    if (m)
        *m = (struct tok){.s = "", .kind = T_MARK};
    return m;
}

/* Appends list to *tail; returns the new tail. */
static struct tok *append(struct tok *tail, struct tok *list)
{
    tail->next = list;
    while (tail->next)
        tail = tail->next;
    return tail;
}

/*
 * The body of d with its arguments substituted, each token's hide set
 * joined with hs.
 */
static struct tok *subst(struct run *x, const struct def *d, struct args *a,
                         const struct hideset *hs)
{
    struct tok head = {0}, *tail = &head;
    for (size_t i = 0; i < d->n_body && !x->stop; i++) {
        const struct tok *t = &d->body[i];
        const struct tok *next = i + 1 < d->n_body ? &d->body[i + 1] : NULL;
        int p = param_of(d, t);
        if (d->func && (tok_is(t, "#") || tok_is(t, "%:")) && next && param_of(d, next) >= 0) {
            tail = append(tail, stringize(x, a->raw[param_of(d, next)]));
            i++;
            continue;
        }
        if (tok_is(t, "##") || tok_is(t, "%:%:")) {
            if (!next || tail == &head) {
                run_uncertain(x, "uncertain_construct", "## at the end of a macro");
                break;
            }
            int q = param_of(d, next);
            struct tok *rhs = q >= 0 ? copy_list(&x->a, a->raw[q], NULL) : copy_tok(&x->a, next);
            i++;
            if (q >= 0 && tok_is(tail, ",") && d->variadic && (size_t)q == d->n_params - 1) {
                /* GNU's ", ## __VA_ARGS__": the comma goes when there are none. */
                if (!rhs) {
                    tail->kind = T_MARK;
                    tail->n = 0;
                } else {
                    tail = append(tail, rhs);
                }
                continue;
            }
            if (!rhs)
                continue;
            if (tail->kind == T_MARK) {
                *tail = *rhs;
                tail->next = NULL;
                tail = append(tail, rhs->next);
                continue;
            }
            struct tok *joined = paste(x, tail, rhs);
            if (!joined)
                break;
            *tail = *joined;
            tail->next = NULL;
            tail = append(tail, rhs->next);
            continue;
        }
        if (tok_is(t, "__VA_OPT__") && d->variadic && next && tok_is(next, "(")) {
            /* C++20: the parenthesised tokens when the variable arguments are not empty. */
            size_t e = i + 2;
            for (int depth = 0; e < d->n_body; e++) {
                if (tok_is(&d->body[e], "("))
                    depth++;
                else if (tok_is(&d->body[e], ")") && depth-- == 0)
                    break;
            }
            if (e >= d->n_body || (e + 1 < d->n_body && tok_is(&d->body[e + 1], "##")) ||
                (i && tok_is(&d->body[i - 1], "##"))) {
                run_uncertain(x, "uncertain_construct", "__VA_OPT__ with ##");
                break;
            }
            int empty = !a->raw[d->n_params - 1];
            struct def inner = *d;
            inner.body = d->body + i + 2;
            inner.n_body = e - i - 2;
            if (!empty)
                tail = append(tail, subst(x, &inner, a, NULL));
            i = e;
            continue;
        }
        if (p >= 0) {
            struct tok *arg;
            if (next && (tok_is(next, "##") || tok_is(next, "%:%:")))
                arg = a->raw[p] ? copy_list(&x->a, a->raw[p], NULL) : mark(x);
            else
                arg = arg_expanded(x, a, p);
            tail = append(tail, arg);
            continue;
        }
        tail = append(tail, copy_tok(&x->a, t));
    }
    if (x->a.failed)
        run_nomem(x);
    struct tok out = {0}, *o = &out;
    for (struct tok *t = head.next; t; t = t->next) {
        if (t->kind == T_MARK)
            continue;
        t->hs = hs_union(&x->a, t->hs, hs);
        o = o->next = t;
    }
    o->next = NULL;
    return out.next;
}

/*
 * The arguments of a call whose '(' is in (a list of tokens); *rest is what
 * follows the ')', *rparen the ')'. Returns 0, or -1 if the call is not
 * complete.
 */
static int collect(struct run *x, const struct def *d, struct tok *in, struct args *a,
                   struct tok **rest, struct tok **rparen)
{
    size_t cap = d->n_params ? d->n_params : 1;
    a->raw = arena_alloc(&x->a, cap * sizeof(*a->raw));
    a->expanded = arena_alloc(&x->a, cap * sizeof(*a->expanded));
    a->done = arena_alloc(&x->a, cap * sizeof(*a->done));
    if (!a->raw || !a->expanded || !a->done) {
        run_nomem(x);
        return -1;
    }
    memset(a->raw, 0, cap * sizeof(*a->raw));
    memset(a->done, 0, cap * sizeof(*a->done));
    a->n = 1;
    struct tok *start = in->next, *t = start;
    int depth = 0;
    for (; t; t = t->next) {
        if (tok_is(t, "(")) {
            depth++;
        } else if (tok_is(t, ")") && depth-- == 0) {
            break;
        } else if (tok_is(t, ",") && depth == 0 &&
                   !(d->variadic && a->n == d->n_params)) {
            if (a->n <= cap)
                a->raw[a->n - 1] = copy_list(&x->a, start, t);
            a->n++;
            start = t->next;
        }
    }
    if (!t)
        return -1;
    if (a->n <= cap)
        a->raw[a->n - 1] = copy_list(&x->a, start, t);
    *rest = t->next;
    *rparen = t;
    /* F() of a macro of no parameters, and F(a) of F(a, ...) (C++20), are calls too. */
    int fits = a->n == d->n_params || (!d->n_params && a->n == 1 && !a->raw[0]) ||
               (d->variadic && a->n == d->n_params - 1);
    if (!fits) {
        run_uncertain(x, "uncertain_construct", "a macro called with other than its arguments");
        return -1;
    }
    return 0;
}

/*
 * in, macro-expanded: the whole line when top (where 'defined X' keeps X),
 * or an argument alone.
 */
static struct tok *expand(struct run *x, struct tok *in, int top)
{
    struct tok head = {0}, *tail = &head;
    while (in && !x->stop) {
        if (++x->steps > KC_COND_STEPS) {
            run_uncertain(x, "macro_expansion", "a macro expansion too long to follow");
            break;
        }
        struct tok *t = in;
        in = in->next;
        t->next = NULL;
        size_t name;
        if (t->kind != T_IDENT) {
            tail = tail->next = t;
            continue;
        }
        if (top && tok_is(t, "defined")) {
            tail = tail->next = t;
            int paren = in && tok_is(in, "(");
            for (int k = paren ? 3 : 1; k-- && in;) {
                struct tok *u = in;
                in = in->next;
                u->next = NULL;
                tail = tail->next = u;
            }
            continue;
        }
        if (is_has_include(t)) {
            in = has_include(x, t, in);
            t->kind = T_NUMBER;
            t->s = "1";
            t->n = 1;
            tail = tail->next = t;
            continue;
        }
        const struct def *d = NULL;
        /* A name defined only as function-like, and not called, is not expanded. */
        if (find_name(x->st, t, &name) && !hs_has(t->hs, name) &&
            (x->st->names[name].n_objects || (in && tok_is(in, "("))))
            d = choose(x, name);
        if (!d || (d->func && !(in && tok_is(in, "(")))) {
            tail = tail->next = t;
            continue;
        }
        const struct hideset *hs;
        struct args a = {0};
        struct tok *rest = in;
        if (d->func) {
            struct tok *rparen;
            if (collect(x, d, in, &a, &rest, &rparen)) {
                run_uncertain(x, "uncertain_construct", "a macro call without its ')'");
                break;
            }
            hs = hs_add(&x->a, hs_both(&x->a, t->hs, rparen->hs), name);
        } else {
            hs = hs_add(&x->a, t->hs, name);
        }
        struct tok *body = subst(x, d, &a, hs);
        if (x->a.failed)
            run_nomem(x);
        struct tok *bt = last_of(body);
        if (bt) {
            bt->next = rest;
            in = body;
        } else {
            in = rest;
        }
    }
    return head.next;
}

/* Expands one condition along every path; returns 0 or ENOMEM. */
static int expand_condition(struct resolver *r, const struct cond *c)
{
    struct kc_cond_state *st = r->cond;
    struct run x = {.r = r, .st = st, .node = c->node, .line = c->line};
    int rc = 0;
    for (size_t paths = 0;; paths++) {
        if (paths == KC_COND_PATHS) {
            run_uncertain(&x, "macro_expansion",
                          "macros with more ways to expand than kcache follows");
            break;
        }
        st->run++;
        x.pos = 0;
        x.steps = 0;
        struct tok *in = copy_list(&x.a, c->toks, NULL);
        if (x.a.failed)
            run_nomem(&x);
        else
            expand(&x, in, 1);
        arena_free(&x.a);
        if (x.stop)
            break;
        /* The next path: the last choice that has another option takes it. */
        while (x.n_stack && x.stack[x.n_stack - 1].chosen + 1 == x.stack[x.n_stack - 1].options)
            x.n_stack--;
        if (!x.n_stack)
            break;
        x.stack[x.n_stack - 1].chosen++;
    }
    rc = x.rc;
    free(x.stack);
    arena_free(&x.a);
    return rc;
}

int kc_res_cond_expand(struct resolver *r, size_t *progress)
{
    struct kc_cond_state *st = r->cond;
    if (!st)
        return 0;
    if (st->done_gen != st->gen) {
        /* New definitions: every condition may expand otherwise now. */
        st->done = 0;
        st->done_gen = st->gen;
    }
    int stale = st->reach_gen != st->gen || st->reach_conds != st->n_conds || !st->reaches;
    int rc = stale ? compute_reach(st) : 0;
    for (; !rc && st->done < st->n_conds && !r->out->not_hermetic; st->done++) {
        if (cond_reaches(st, &st->conds[st->done]))
            rc = expand_condition(r, &st->conds[st->done]);
        (*progress)++;
    }
    return rc;
}

void kc_res_cond_free(struct resolver *r)
{
    struct kc_cond_state *st = r->cond;
    if (!st)
        return;
    arena_free(&st->keep);
    kc_smap_free(&st->by_name);
    kc_smap_free(&st->def_text);
    kc_smap_free(&st->probed);
    kc_smap_free(&st->pieces);
    free(st->reaches);
    free(st->names);
    free(st->defs);
    free(st->conds);
    free(st);
    r->cond = NULL;
}
