/*
 * kcache explain: why a request would miss. Its key's components side by
 * side with the nearest stored entries (same source name, or same source
 * text), naming each component that differs.
 */
#include <stdlib.h>
#include <string.h>

#include <kcache/compile.h>

#include "cli.h"
#include "compile_args.h"

static const char usage_text[] =
    "usage: kcache explain FILE.cu --arch ARCH [compile options] [-- NVRTC-OPTIONS]\n"
    "\n"
    "Derives the key 'kcache compile' would use with the same options (nothing is\n"
    "compiled) and says whether it would hit. If not, it compares the request's key\n"
    "components (architecture, options, headers, source, toolchain, ...) with the\n"
    "nearest stored entries and names each one that differs.\n"
    "\n"
    "Takes the options of 'kcache compile' (see 'kcache compile --help'), and\n"
    "      --json   machine-readable output (see kcache-json(7))\n"
    "  -h, --help   this text\n";

/* A key's components in order, as (name, value) text pairs. */
struct parts {
    char **name, **value;
    size_t n;
};

static int collect(void *ud, const char *component, const char *value)
{
    struct parts *p = ud;
    char **names = realloc(p->name, (p->n + 1) * sizeof(char *));
    if (!names)
        return -1;
    p->name = names;
    char **values = realloc(p->value, (p->n + 1) * sizeof(char *));
    if (!values)
        return -1;
    p->value = values;
    p->name[p->n] = strdup(component);
    p->value[p->n] = strdup(value);
    if (!p->name[p->n] || !p->value[p->n])
        return -1;
    p->n++;
    return 0;
}

static void parts_free(struct parts *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->name[i]);
        free(p->value[i]);
    }
    free(p->name);
    free(p->value);
    memset(p, 0, sizeof(*p));
}

static const char *single(const struct parts *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->name[i], name))
            return p->value[i];
    return NULL;
}

/* A header component is "SPELLING STATE VALUE": its identity is the spelling. */
static size_t spelling_len(const char *value)
{
    const char *sp = strchr(value, ' ');
    return sp ? (size_t)(sp - value) : strlen(value);
}

static const char *find_value(const struct parts *p, const char *name, const char *value,
                              int by_spelling)
{
    size_t n = by_spelling ? spelling_len(value) : 0;
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->name[i], name) != 0)
            continue;
        if (by_spelling ? spelling_len(p->value[i]) == n && !strncmp(p->value[i], value, n)
                        : !strcmp(p->value[i], value))
            return p->value[i];
    }
    return NULL;
}

struct difference {
    const char *component;
    const char *request; /* NULL: absent from the request */
    const char *entry;   /* NULL: absent from the entry */
};

struct diff {
    struct difference *d;
    size_t n;
};

static void add_diff(struct diff *df, const char *component, const char *req, const char *ent)
{
    struct difference *grown = realloc(df->d, (df->n + 1) * sizeof(*grown));
    if (!grown)
        return;
    df->d = grown;
    df->d[df->n++] = (struct difference){component, req, ent};
}

static void compare(const struct parts *req, const struct parts *ent, struct diff *df)
{
    /* Components with one value: compare them directly. */
    static const char *const singles[] = {"format", "input", "output", "arch", "nvrtc",
                                          "nvjitlink", "toolkit", "source-name",
                                          "any-source-name", "source-base-name",
                                          "any-source-name-log-template", "source",
                                          "extra-digest", "working-directory"};
    for (size_t i = 0; i < sizeof(singles) / sizeof(singles[0]); i++) {
        const char *a = single(req, singles[i]), *b = single(ent, singles[i]);
        if ((a || b) && (!a || !b || strcmp(a, b) != 0))
            add_diff(df, singles[i], a, b);
    }
    /* Options keep their order: a different sequence is a difference even
     * when the same options appear. */
    size_t ia = 0, ib = 0;
    for (;;) {
        while (ia < req->n && strcmp(req->name[ia], "option"))
            ia++;
        while (ib < ent->n && strcmp(ent->name[ib], "option"))
            ib++;
        if (ia >= req->n && ib >= ent->n)
            break;
        const char *a = ia < req->n ? req->value[ia] : NULL;
        const char *b = ib < ent->n ? ent->value[ib] : NULL;
        if (!a || !b || strcmp(a, b) != 0) {
            /* Report what one side has and the other lacks, or the reordering. */
            int a_only = a && !find_value(ent, "option", a, 0);
            int b_only = b && !find_value(req, "option", b, 0);
            if (a_only)
                add_diff(df, "option", a, NULL);
            if (b_only)
                add_diff(df, "option", NULL, b);
            if (!a_only && !b_only)
                add_diff(df, "option order", a, b);
        }
        ia += ia < req->n;
        ib += ib < ent->n;
    }
    /* Sets: name expressions, link inputs and toolkit parts by value, headers by spelling. */
    static const char *const sets[] = {"name-expression", "header", "link-input",
                                       "toolkit-include-dir", "toolkit-handed"};
    for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++) {
        int by_spelling = !strcmp(sets[s], "header");
        for (size_t i = 0; i < req->n; i++) {
            if (strcmp(req->name[i], sets[s]))
                continue;
            const char *other = find_value(ent, sets[s], req->value[i], by_spelling);
            if (!other || strcmp(other, req->value[i]) != 0)
                add_diff(df, sets[s], req->value[i], other);
        }
        for (size_t i = 0; i < ent->n; i++)
            if (!strcmp(ent->name[i], sets[s]) &&
                !find_value(req, sets[s], ent->value[i], by_spelling))
                add_diff(df, sets[s], NULL, ent->value[i]);
    }
}

struct candidate {
    kcache_key key;
    char name[256], arch[32];
    kcache_kind kind;
    struct parts parts;
    struct diff diff;
};

struct search {
    kcache_store *store;
    const struct parts *req;
    const char *source_name, *source;
    struct candidate *c;
    size_t n;
};

static int consider(void *ud, const kcache_entry *e)
{
    struct search *s = ud;
    struct candidate *grown = realloc(s->c, (s->n + 1) * sizeof(*grown));
    if (!grown)
        return -1;
    s->c = grown;
    struct candidate *c = &s->c[s->n];
    memset(c, 0, sizeof(*c));
    c->key = e->key;
    snprintf(c->name, sizeof(c->name), "%s", e->name);
    snprintf(c->arch, sizeof(c->arch), "%s", e->arch);
    c->kind = e->kind;
    s->n++;
    return 0;
}

static int cmp_candidates(const void *x, const void *y)
{
    const struct candidate *a = x, *b = y;
    return a->diff.n < b->diff.n ? -1 : a->diff.n > b->diff.n;
}

static void print_value(const char *v)
{
    fputs(v ? cli_safe(v) : "(absent)", stdout);
}

/* Keeps the candidates of the request's source name or source text, each compared with it. */
static void narrow(struct search *s, const kcache_key *key, const char *want_name,
                   const char *want_source)
{
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++) {
        struct candidate *c = &s->c[i];
        int keep = 0;
        kcache_entry *e = NULL;
        if (memcmp(c->key.bytes, key->bytes, KCACHE_KEY_SIZE) != 0 &&
            kcache_store_get(&e, s->store, &c->key,
                             KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA) == 0 &&
            kcache_key_describe(e->key_material, e->key_material_size, collect, &c->parts) == 0) {
            const char *n = single(&c->parts, "source-name");
            const char *src = single(&c->parts, "source");
            keep = (n && want_name && !strcmp(n, want_name)) ||
                   (src && want_source && !strcmp(src, want_source));
        }
        kcache_entry_free(e);
        if (keep) {
            compare(s->req, &c->parts, &c->diff);
            s->c[kept++] = *c;
        } else {
            parts_free(&c->parts);
        }
    }
    s->n = kept;
}

static void print_json(const char *hex, int found, int keyed, const struct parts *req,
                       const struct search *s, size_t shown)
{
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_object_begin(&j, NULL);
    cli_json_string(&j, "key", hex);
    cli_json_bool(&j, "hit", found == 0);
    cli_json_bool(&j, "cacheable", keyed);
    cli_json_array_begin(&j, "components");
    for (size_t i = 0; i < req->n; i++) {
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "component", req->name[i]);
        cli_json_string(&j, "value", req->value[i]);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_array_begin(&j, "nearest");
    for (size_t i = 0; i < shown; i++) {
        const struct candidate *c = &s->c[i];
        char ch[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(ch, &c->key);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "key", ch);
        cli_json_string(&j, "name", c->name);
        cli_json_string(&j, "arch", c->arch);
        cli_json_string(&j, "kind", kcache_kind_name(c->kind));
        cli_json_array_begin(&j, "differences");
        for (size_t d = 0; d < c->diff.n; d++) {
            cli_json_object_begin(&j, NULL);
            cli_json_string(&j, "component", c->diff.d[d].component);
            cli_json_string(&j, "request", c->diff.d[d].request);
            cli_json_string(&j, "entry", c->diff.d[d].entry);
            cli_json_object_end(&j);
        }
        cli_json_array_end(&j);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_object_end(&j);
    cli_json_finish(&j);
}

static void print_human(const char *hex, int found, const kcache_result *res,
                        const struct search *s, size_t shown)
{
    printf("Request key:  %s\n", hex);
    if (!res->keyed)
        printf("Not cacheable: %s\n", res->store_message);
    else if (found == 0)
        printf("Result:       hit (an entry has this key)\n");
    else
        printf("Result:       miss (no entry has this key)\n");
    if (found != 0 && !shown)
        printf("\nNo stored entry has the same source name or source text.\n");
    for (size_t i = 0; found != 0 && i < shown; i++) {
        const struct candidate *c = &s->c[i];
        char ch[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(ch, &c->key);
        printf("\nNearest entry %.12s  %s  %s  %s: %zu component%s differ%s\n", ch,
               cli_safe(c->name), cli_safe(c->arch), kcache_kind_name(c->kind), c->diff.n,
               c->diff.n == 1 ? "" : "s",
               c->diff.n == 1 ? "s" : "");
        for (size_t d = 0; d < c->diff.n; d++) {
            printf("  %-16s request: ", c->diff.d[d].component);
            print_value(c->diff.d[d].request);
            printf("\n  %-16s entry:   ", "");
            print_value(c->diff.d[d].entry);
            printf("\n");
        }
    }
}

int cmd_explain(int argc, char **argv)
{
    struct compile_args a;
    int status = compile_args_parse(&a, "explain", usage_text, argc, argv);
    if (status < 0 && a.cache_key)
        status = cli_usage_error("explain", "--cache-key is compile's: 'kcache compile "
                                 "--cache-key'");
    if (status >= 0) {
        compile_args_free(&a);
        return status;
    }
    kcache_store *store = NULL;
    kcache_compiler *compiler = NULL;
    kcache_result *res = NULL;
    struct parts req = {0};
    struct search s = {0};
    if (a.from || a.n_files != 1 || a.n_archs != 1) {
        status = cli_usage_error("explain", "explain takes one file and one architecture");
        goto out;
    }
    if ((status = compile_args_compiler(&a, &compiler)) != CLI_OK)
        goto out;
    if (!(store = kcache_compiler_store(compiler))) {
        kcache_request probe;
        compile_args_request(&a, &probe, &a.units[0], a.archs[0]);
        probe.flags |= KCACHE_COMPILE_KEY_ONLY;
        kcache_result *why = NULL;
        kcache_compiler_compile(&why, compiler, &probe);
        status = cli_error("no cache to compare with: %s",
                           why && why->store_message[0] ? why->store_message : "none open");
        kcache_result_free(why);
        goto out;
    }
    kcache_request r;
    compile_args_request(&a, &r, &a.units[0], a.archs[0]);
    r.flags |= KCACHE_COMPILE_KEY_ONLY;
    if (kcache_compiler_compile(&res, compiler, &r) != 0) {
        status = cli_error("%s", res ? res->message : "out of memory");
        goto out;
    }
    if (kcache_key_describe(res->key_material, res->key_material_size, collect, &req) != 0) {
        status = cli_error("out of memory");
        goto out;
    }
    kcache_entry *hit = NULL;
    int found = kcache_store_get(&hit, store, &res->key, KCACHE_GET_NO_TOUCH | KCACHE_GET_NO_DATA);
    kcache_entry_free(hit);

    /* Candidates: entries of the same source name, or of the same source text. */
    s.store = store;
    s.req = &req;
    kcache_filter f = KCACHE_FILTER_INIT;
    f.sort = KCACHE_SORT_ACCESSED;
    f.limit = 20000;
    const char *want_name = single(&req, "source-name");
    const char *want_source = single(&req, "source");
    if (kcache_store_list(store, &f, consider, &s) != 0) {
        status = cli_error("%s", kcache_store_errmsg(store));
        goto out;
    }
    narrow(&s, &res->key, want_name, want_source);
    qsort(s.c, s.n, sizeof(*s.c), cmp_candidates);
    size_t shown = s.n < 3 ? s.n : 3;

    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, &res->key);
    if (a.json)
        print_json(hex, found, res->keyed, &req, &s, shown);
    else
        print_human(hex, found, res, &s, shown);
    status = CLI_OK;
out:
    for (size_t i = 0; i < s.n; i++) {
        parts_free(&s.c[i].parts);
        free(s.c[i].diff.d);
    }
    free(s.c);
    parts_free(&req);
    kcache_result_free(res);
    kcache_compiler_free(compiler);
    compile_args_free(&a);
    return status;
}
