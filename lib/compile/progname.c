/*
 * The program's name: keyed only where it can change the bytes or the log.
 *
 * CuPy names every program `<a new temporary directory>/kern.cu`; with the
 * name in every key, a second process never hits. What NVIDIA's NVRTC 13.0
 * does with the name, measured (doc/design.md, "The program's name"):
 *
 *   - PTX and CUBIN without line information hold no trace of it: the same
 *     source under two names in two directories gives the same bytes;
 *   - line information (-lineinfo, -G) holds it, and LTO-IR always does;
 *   - __FILE__, __BASE_FILE__, __builtin_FILE() (so source_location and
 *     NVRTC's built-in assert) expanded in the program put it in the bytes,
 *     also through a macro defined in a header and invoked in the program,
 *     and also when only its length is used (sizeof(__FILE__));
 *   - every warning and error in the log starts with it ("NAME(LINE): ...");
 *   - an anonymous namespace's members are named after its last component,
 *     made an identifier ("_INTERNAL_00000000_7_kern_cu_..."), in PTX and CUBIN;
 *   - quoted includes are looked for beside it: the resolution sees those
 *     lookups as any other, and the closure's key holds the directory.
 *
 * The decision, in two steps. Before the compile (kc_name_free_request), a
 * request may leave the name out of its key only when no option asks for
 * line information or LTO-IR; the source, the options, the name expressions
 * and the in-memory headers hold no identifier with FILE in it, no #line
 * and no ## or %:%: (splices undone); none of them names a macro of the user
 * headers or of the -D operands that expands __FILE__, __BASE_FILE__ or
 * __builtin_FILE, itself or through other macros, nor one whose ## can make
 * such a name of the pieces that reach it (pastes_name_it), the pieces of
 * the toolkit headers' macros it reaches included (libcu++'s
 * _LIBCUDACXX_ABI_NAMESPACE is the piece __4; CCCL's _CUDA_VSTD pastes a
 * namespace's name, never __FILE__); no user header's code names
 * __BASE_FILE__ or __builtin_FILE (a default argument is the caller's
 * file); and no invocation in a user header's code (an -include file's
 * included) of a macro that pastes can make one of those, or a macro that
 * expands them, of its own pieces and those of the macros it reaches
 * (spans_paste_caller).
 * A header's own __FILE__ is that header's name, not the program's: CuPy's
 * bundled CCCL is full of them. A toolkit macro's own __FILE__ (and its
 * __BASE_FILE__, __builtin_FILE) is left to the check after the compile, as
 * are NVRTC's built-in headers' macros, which no file holds. After the compile (kc_name_shows), the
 * result is filed under the key without the name only when its log is empty
 * and its artifact does not hold the name's last component, as bytes
 * (CUBIN), as PTX's decimal byte lists, or as an identifier (an anonymous
 * namespace's members are named after it: "_INTERNAL_00000000_7_kern_cu_..."):
 * what a toolkit macro or function carries of the name (CCCL's _CCCL_ASSERT,
 * CUB's CubDebug, source_location::current()) is caught there.
 * A result whose log is empty and whose artifact holds the name's last
 * component but neither its directory, the directory's own last component,
 * nor the whole name, is filed under a key with the last component alone:
 * an anonymous namespace's members are named after it, and NVIDIA's NVRTC
 * gives the same bytes for it in any directory (CCCL's CUB kernels, under
 * CuPy's <a new temporary directory>/kern.cu, measured with NVRTC 13.0).
 * Anything else is filed under the key with the name, as before. Misses
 * cost nothing more; a request whose result needs its name costs one or two
 * more lookups on a hit.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compileint.h"
#include "util/strmap.h"

static int ident_char(unsigned char c)
{
    return isalnum(c) || c == '_';
}

/* The length of the # at t[i]: 1, 2 for its digraph %: (so %:%: is ##), or 0 if none. */
static size_t hash_at(const char *t, size_t n, size_t i)
{
    if (t[i] == '#')
        return 1;
    return t[i] == '%' && i + 1 < n && t[i + 1] == ':' ? 2 : 0;
}

/*
 * 1 if text holds an identifier containing "FILE", a #line directive or a
 * token paste (## can make __FILE__ of two identifiers that are not).
 */
static int scan_names_the_file(const char *text, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)text[i];
        size_t hash = hash_at(text, n, i);
        if (hash) {
            size_t j = i + hash;
            while (j < n && (text[j] == ' ' || text[j] == '\t'))
                j++;
            if (j < n && hash_at(text, n, j))
                return 1;
            if (j + 4 <= n && !memcmp(text + j, "line", 4) &&
                (j + 4 == n || !ident_char((unsigned char)text[j + 4])))
                return 1;
            i += hash;
        } else if (isalpha(c) || c == '_') {
            size_t start = i;
            while (i < n && ident_char((unsigned char)text[i]))
                i++;
            for (size_t k = start; k + 4 <= i; k++)
                if (!memcmp(text + k, "FILE", 4))
                    return 1;
        } else {
            i++;
        }
    }
    return 0;
}

/* The same, after the splices (backslash, or the trigraph ??/, then a newline) are undone. */
static int names_the_file(const char *text, size_t n)
{
    if (!memchr(text, '\\', n) && !memmem(text, n, "?" "?/", 3))
        return scan_names_the_file(text, n);
    char *joined = kc_malloc(n + 1);
    if (!joined)
        return 1;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t k = text[i] == '\\' ? i + 1 : i + 3 <= n && !memcmp(text + i, "?" "?/", 3) ? i + 3 : 0;
        while (k && k < n && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r'))
            k++;
        if (k && k < n && text[k] == '\n') {
            i = k + 1;
            continue;
        }
        joined[m++] = text[i++];
    }
    int found = scan_names_the_file(joined, m);
    free(joined);
    return found;
}

static int str_names_the_file(const char *s)
{
    return s && names_the_file(s, strlen(s));
}

/* ---- macros of the user headers that can carry the name ----------------- */

/* What a macro's expansion can carry: the place it is expanded (__FILE__), or its caller's or
 * the program's name wherever it is expanded (__builtin_FILE, __BASE_FILE__). */
enum { TAINT_HERE = 1, TAINT_CALLER = 2 };

struct macro {
    char *name;
    char *body;     /* splices undone */
    unsigned taint;
    size_t repl;    /* where the replacement list starts in body */
    char *params;   /* a function-like macro's parameters, each NUL-ended, then "" (else NULL) */
    int pastes;     /* its replacement list holds ## */
    int toolkit;    /* defined in a toolkit header: read for pastes and pieces, never tainted */
    int paste_reach; /* it pastes, or its replacement list names a macro that does */
};

struct macros {
    struct macro *v;
    size_t n, cap;
    kc_smap index;  /* name -> the first of its definitions; v is sorted by name */
};

/* ident_at() past its first byte's test. */
static size_t ident_from(const char *t, size_t n, size_t i)
{
    if (i > 0 && ident_char((unsigned char)t[i - 1]))
        return 0;
    size_t j = i;
    while (j < n && ident_char((unsigned char)t[j]))
        j++;
    return j - i;
}

/*
 * The length of the identifier that starts at t[i], or 0. The scans ask at
 * nearly every byte of every user header, and most bytes start none: that
 * test is inline, the call made only for a letter or '_'.
 */
static inline size_t ident_at(const char *t, size_t n, size_t i)
{
    return i < n && (isalpha((unsigned char)t[i]) || t[i] == '_') ? ident_from(t, n, i) : 0;
}

/*
 * The end of the logical line that starts at i (splices followed). With joined,
 * its text spliced into it; without, only its end (most lines are no directive).
 */
static size_t logical_line(const char *t, size_t n, size_t i, kc_buf *joined)
{
    if (joined)
        joined->size = 0;
    while (i < n) {
        const char *nl = memchr(t + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - t) : n;
        size_t k = end; /* a splice: a backslash, maybe blanks, then the newline */
        while (k > i && (t[k - 1] == ' ' || t[k - 1] == '\t' || t[k - 1] == '\r'))
            k--;
        int spliced = end < n && k > i && t[k - 1] == '\\';
        if (joined && kc_buf_append(joined, t + i, spliced ? k - 1 - i : end - i))
            return (size_t)-1;
        if (!spliced)
            return end;
        i = end + 1;
    }
    return n;
}

/*
 * d's parameters and where its replacement list starts. A list kcache cannot
 * read leaves the macro without parameters: each identifier of its body then
 * counts as spelled there, which only adds pieces.
 */
static int parse_params(struct macro *d)
{
    const char *b = d->body;
    size_t n = strlen(b), i = 1;
    kc_buf list = {0};
    int rc = 0;
    d->repl = 0;
    while (b[0] == '(' && !rc) {
        while (i < n && (b[i] == ' ' || b[i] == '\t'))
            i++;
        size_t len = ident_at(b, n, i);
        if (len) {
            rc = kc_buf_append(&list, b + i, len) || kc_buf_append(&list, "", 1);
            i += len;
        } else if (i + 3 <= n && !memcmp(b + i, "...", 3)) {
            rc = kc_buf_append(&list, "__VA_ARGS__", sizeof("__VA_ARGS__"));
            i += 3;
        } else if (i < n && b[i] == ')') {
            rc = kc_buf_append(&list, "", 1);
            if (!rc) {
                d->params = (char *)list.data;
                list.data = NULL;
                d->repl = i + 1;
            }
            break;
        } else if (i < n && b[i] == ',') {
            i++;
        } else {
            break;
        }
    }
    kc_buf_free(&list);
    d->pastes = strstr(b + d->repl, "##") || strstr(b + d->repl, "%:%:");
    return rc ? KCACHE_ENOMEM : 0;
}

static int add_macro(struct macros *m, const char *line, size_t n, int toolkit)
{
    size_t i = 0;
    while (i < n && (line[i] == ' ' || line[i] == '\t'))
        i++;
    size_t len = ident_at(line, n, i);
    if (!len)
        return 0;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        struct macro *v = kc_realloc(m->v, cap * sizeof(*v));
        if (!v)
            return KCACHE_ENOMEM;
        m->v = v;
        m->cap = cap;
    }
    struct macro *d = &m->v[m->n];
    d->name = kc_memdup(line + i, len);
    d->body = kc_memdup(line + i + len, n - i - len);
    d->taint = 0;
    d->params = NULL;
    d->toolkit = toolkit;
    d->paste_reach = 0;
    if (!d->name || !d->body || parse_params(d)) {
        free(d->name);
        free(d->body);
        free(d->params);
        return KCACHE_ENOMEM;
    }
    m->n++;
    return 0;
}

/* 1 if a directive's text l ends inside a comment: its body goes on past the line's end. */
static int ends_in_comment(const char *l, size_t n)
{
    char quote = 0;
    int comment = 0;
    for (size_t i = 0; i < n; i++) {
        if (comment) {
            if (l[i] == '*' && i + 1 < n && l[i + 1] == '/') {
                comment = 0;
                i++;
            }
        } else if (quote) {
            if (l[i] == '\\')
                i++;
            else if (l[i] == quote)
                quote = 0;
        } else if (l[i] == '"' || l[i] == '\'') {
            quote = l[i];
        } else if (l[i] == '/' && i + 1 < n && (l[i + 1] == '*' || l[i + 1] == '/')) {
            if (l[i + 1] == '/')
                return 0;
            comment = 1;
            i++;
        }
    }
    return comment;
}

/* The first byte at or after t[i] that is neither a blank nor in a comment (a comment is a space). */
static size_t skip_blank(const char *t, size_t n, size_t i)
{
    while (i < n) {
        if (t[i] == ' ' || t[i] == '\t' || t[i] == '\f' || t[i] == '\v' || t[i] == '\r') {
            i++;
        } else if (t[i] == '/' && i + 1 < n && t[i + 1] == '*') {
            const char *end = i + 2 < n ? memmem(t + i + 2, n - i - 2, "*/", 2) : NULL;
            i = end ? (size_t)(end - t) + 2 : n;
        } else {
            break;
        }
    }
    return i;
}

/*
 * Every #define of text into m. A comment that spans lines is one space, so a
 * definition goes on after it: the lines up to the comment's end join its body
 * (and are still read as lines of their own, which can only add definitions).
 */
static int collect(struct macros *m, const char *t, size_t n, int toolkit)
{
    kc_buf line = {0}, more = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < n;) {
        size_t j = skip_blank(t, n, i);
        int directive = j < n && hash_at(t, n, j);
        size_t end = logical_line(t, n, i, directive ? &line : NULL);
        for (size_t next = end; !rc && directive && end != (size_t)-1 && next < n &&
                                ends_in_comment((const char *)line.data, line.size);) {
            next = logical_line(t, n, next + 1, &more);
            rc = next == (size_t)-1 || kc_buf_append(&line, " ", 1) ||
                 kc_buf_append(&line, more.data, more.size);
        }
        if (end == (size_t)-1 || rc) {
            rc = KCACHE_ENOMEM;
            break;
        }
        if (directive) {
            const char *l = (const char *)line.data;
            size_t ln = line.size, k = skip_blank(l, ln, 0);
            k = k < ln ? skip_blank(l, ln, k + hash_at(l, ln, k)) : ln;
            if (k + 6 <= ln && !memcmp(l + k, "define", 6) && ident_at(l, ln, k) == 6)
                rc = add_macro(m, l + k + 6, ln - k - 6, toolkit);
        }
        i = end + 1;
    }
    kc_buf_free(&line);
    kc_buf_free(&more);
    return rc;
}

static int cmp_macro(const void *a, const void *b)
{
    return strcmp(((const struct macro *)a)->name, ((const struct macro *)b)->name);
}

/* The taint of the identifier at t (len bytes): its own, or its macro's definitions'. */
static unsigned ident_taint(const struct macros *m, const char *t, size_t len)
{
    char buf[256], *name = len < sizeof(buf) ? buf : kc_malloc(len + 1);
    if (!name)
        return TAINT_HERE | TAINT_CALLER; /* not known: as if it carried the name */
    memcpy(name, t, len);
    name[len] = '\0';
    size_t k;
    unsigned taint = 0;
    if (!strcmp(name, "__builtin_FILE") || !strcmp(name, "__BASE_FILE__"))
        taint = TAINT_CALLER;
    else if (strstr(name, "FILE"))
        taint = TAINT_HERE;
    else if (kc_smap_find(&m->index, name, &k))
        for (; k < m->n && !strcmp(m->v[k].name, name); k++)
            taint |= m->v[k].toolkit ? 0 : m->v[k].taint;
    if (name != buf)
        free(name);
    return taint;
}

/*
 * The taint of a text: the identifiers it names. What ## makes is judged
 * where the pieces are known (pastes_name_it).
 */
static unsigned text_taint(const struct macros *m, const char *t, size_t n)
{
    unsigned taint = 0;
    for (size_t i = 0; i < n;) {
        size_t len = ident_at(t, n, i);
        if (len) {
            taint |= ident_taint(m, t + i, len);
            i += len;
        } else {
            i++;
        }
    }
    return taint;
}

static int is_param(const struct macro *d, const char *s, size_t n)
{
    for (const char *p = d->params; p && *p; p += strlen(p) + 1)
        if (strlen(p) == n && !memcmp(p, s, n))
            return 1;
    return 0;
}

/* 1 if a definition of the identifier at t (len bytes) pastes or names one that does. */
static int name_pastes(const struct macros *m, const char *t, size_t len)
{
    char buf[256];
    size_t k;
    if (len >= sizeof(buf))
        return 1; /* not a name kcache follows: as if it pasted */
    memcpy(buf, t, len);
    buf[len] = '\0';
    if (!kc_smap_find(&m->index, buf, &k))
        return 0;
    for (; k < m->n && !strcmp(m->v[k].name, buf); k++)
        if (m->v[k].paste_reach)
            return 1;
    return 0;
}

/* 1 if d's replacement list names (not as a parameter) a macro that pastes, as marked so far. */
static int body_names_pasting(const struct macros *m, const struct macro *d)
{
    const char *t = d->body + d->repl;
    size_t n = strlen(t);
    for (size_t i = 0; i < n;) {
        size_t len = ident_at(t, n, i);
        if (len && !is_param(d, t + i, len) && name_pastes(m, t + i, len))
            return 1;
        i += len ? len : 1;
    }
    return 0;
}

/* Each macro's taint, to a fixed point (a macro is as tainted as what its body names). */
static int taint_all(struct macros *m)
{
    if (m->n)
        qsort(m->v, m->n, sizeof(*m->v), cmp_macro);
    for (size_t i = 0; i < m->n; i++)
        if ((i == 0 || strcmp(m->v[i].name, m->v[i - 1].name)) &&
            kc_smap_put(&m->index, m->v[i].name, i))
            return KCACHE_ENOMEM;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < m->n; i++) {
            if (m->v[i].toolkit)
                continue; /* a toolkit macro's own FILE is judged after the compile */
            unsigned t = m->v[i].taint | text_taint(m, m->v[i].body, strlen(m->v[i].body));
            changed |= t != m->v[i].taint;
            m->v[i].taint = t;
        }
    }
    for (size_t i = 0; i < m->n; i++)
        m->v[i].paste_reach = m->v[i].pastes;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < m->n; i++)
            if (!m->v[i].paste_reach && body_names_pasting(m, &m->v[i]))
                changed = m->v[i].paste_reach = 1;
    }
    return 0;
}

/*
 * 1 if a header's code (not its directives) names the caller's or the program's name: a
 * default argument __builtin_FILE() (source_location::current()) is the caller's file.
 */
static int code_names_caller(const struct macros *m, const char *t, size_t n)
{
    if (!memmem(t, n, "FILE", 4)) {
        /* Only a macro can then carry it: look for the tainted ones' names. */
        int any = 0;
        for (size_t i = 0; i < m->n && !any; i++)
            any = (m->v[i].taint & TAINT_CALLER) && memmem(t, n, m->v[i].name,
                                                            strlen(m->v[i].name));
        if (!any)
            return 0;
    }
    int directive = 0, at_start = 1;
    for (size_t i = 0; i < n;) {
        char c = t[i];
        if (c == '\n') {
            /* A spliced line goes on as what it was. */
            size_t k = i;
            while (k > 0 && (t[k - 1] == ' ' || t[k - 1] == '\t' || t[k - 1] == '\r'))
                k--;
            if (!(k > 0 && t[k - 1] == '\\'))
                directive = 0;
            at_start = 1;
            i++;
            continue;
        }
        if (at_start && c == '#')
            directive = 1;
        if (c != ' ' && c != '\t')
            at_start = 0;
        size_t len = ident_at(t, n, i);
        if (len) {
            if (!directive && (ident_taint(m, t + i, len) & TAINT_CALLER))
                return 1;
            i += len;
        } else {
            i++;
        }
    }
    return 0;
}

static void macros_free(struct macros *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].name);
        free(m->v[i].body);
        free(m->v[i].params);
    }
    free(m->v);
    kc_smap_free(&m->index);
}

/*
 * What a closure's user headers say of the name, whatever the request: their
 * macros with taints, and whether some header's code names the caller's file.
 * Remembered per process by the digests of the headers' texts: CuPy's ~1,000
 * headers are the same for every kernel, and collecting their macros was a
 * third of a miss's time on an H200 (a sampling profile of CuPy's workload
 * under the drop-in). Entries are never freed while the process runs (at most
 * MEMO_SLOTS closures; another is computed for its request alone).
 */
struct closure_names {
    uint8_t id[KC_DIGEST_SIZE];
    struct macros m;
    int failed; /* a header without its text, or out of memory: the name is keyed */
    int caller;
};

#define MEMO_SLOTS 8
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct closure_names *memo[MEMO_SLOTS];

/*
 * The invocations, in the user headers' code (not their directives), of macros that paste:
 * each text once, one after another with a newline between (text), where each ends (ends),
 * and how many there are up to each header's end (upto).
 */
struct spans {
    kc_buf text;
    size_t *ends, *upto;
    size_t n, cap, n_upto, cap_upto;
    kc_smap judged;
};

static int code_spans(struct spans *s, const struct macros *m, const char *t, size_t n);
static int spans_paste_caller(const struct macros *m, const struct spans *s);

/* A toolkit header's definitions, read where the resolution found it. */
static int collect_toolkit(struct macros *m, const char *path)
{
    char *text;
    size_t size;
    if (kc_read_file(path, (uint64_t)1 << 28, &text, &size))
        return 1; /* as a failure: named */
    int rc = collect(m, text, size, 1);
    free(text);
    return rc;
}

/* A -D operand ("NAME", "NAME=VALUE", "NAME(ARGS)=VALUE") as the #define NVRTC makes of it. */
static int collect_define(struct macros *m, const char *def)
{
    const char *eq = strchr(def, '=');
    kc_buf line = {0};
    int rc = eq ? kc_buf_append(&line, def, (size_t)(eq - def)) || kc_buf_append(&line, " ", 1) ||
                      kc_buf_append(&line, eq + 1, strlen(eq + 1))
                : kc_buf_append(&line, def, strlen(def)) || kc_buf_append(&line, " 1", 2);
    if (!rc)
        rc = add_macro(m, (const char *)line.data, line.size, 0);
    kc_buf_free(&line);
    return rc ? KCACHE_ENOMEM : 0;
}

static void closure_names_build(struct closure_names *c, const struct work *w)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < w->deps.n_deps; i++) {
        const kc_dep *d = &w->deps.deps[i];
        /* A kept resolution holds no texts (compile.c): what they define is not known,
         * so the name is keyed. */
        if (d->state == KC_DEP_USER && d->size && !d->content)
            rc = 1; /* as a failure: named */
        else if (d->state == KC_DEP_USER && d->size)
            rc = collect(&c->m, d->content, d->size, 0);
        /* A toolkit header whose own includes were not listed: what they define is
         * not known. */
        else if (d->state == KC_DEP_TOOLKIT && !w->deps.n_tk_read)
            rc = 1;
    }
    for (size_t i = 0; !rc && i < w->deps.n_tk_read; i++)
        rc = collect_toolkit(&c->m, w->deps.tk_read[i]);
    for (size_t i = 0; !rc && i < w->opts.n_defines; i++)
        rc = collect_define(&c->m, w->opts.defines[i]);
    if (!rc)
        rc = taint_all(&c->m);
    c->failed = rc != 0;
    struct spans sp = {0};
    for (size_t i = 0; !c->failed && !c->caller && i < w->deps.n_deps; i++) {
        const kc_dep *d = &w->deps.deps[i];
        if (d->state != KC_DEP_USER || !d->size)
            continue;
        c->caller = code_names_caller(&c->m, d->content, d->size);
        c->failed = code_spans(&sp, &c->m, d->content, d->size) != 0;
    }
    if (!c->failed && !c->caller)
        c->caller = spans_paste_caller(&c->m, &sp);
    kc_buf_free(&sp.text);
    free(sp.ends);
    free(sp.upto);
    kc_smap_free(&sp.judged);
}

/*
 * The identity of what defines w's macros: its user headers' digests and sizes, its toolkit
 * headers' paths (the toolkit does not change under a process), its -D operands, in order.
 * 0, or -1 (none).
 */
static int closure_id(uint8_t out[KC_DIGEST_SIZE], const struct work *w)
{
    kc_buf b = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < w->deps.n_deps; i++) {
        const kc_dep *d = &w->deps.deps[i];
        uint64_t size = d->size;
        if (d->state == KC_DEP_USER)
            rc = kc_buf_append(&b, d->digest, KC_DIGEST_SIZE) ||
                 kc_buf_append(&b, &size, sizeof(size)) ||
                 kc_buf_append(&b, d->content ? "t" : "-", 1);
    }
    for (size_t i = 0; !rc && i < w->deps.n_tk_read; i++)
        rc = kc_buf_append(&b, "k", 1) ||
             kc_buf_append(&b, w->deps.tk_read[i], strlen(w->deps.tk_read[i]) + 1);
    for (size_t i = 0; !rc && i < w->opts.n_defines; i++)
        rc = kc_buf_append(&b, "D", 1) ||
             kc_buf_append(&b, w->opts.defines[i], strlen(w->opts.defines[i]) + 1);
    if (!rc)
        kc_digest(out, b.data ? b.data : (const void *)"", b.size);
    kc_buf_free(&b);
    return rc ? -1 : 0;
}

/* The closure's verdicts, remembered or made now (*own: free it after). NULL: out of memory. */
static const struct closure_names *closure_names(const struct work *w, struct closure_names **own)
{
    uint8_t id[KC_DIGEST_SIZE];
    *own = NULL;
    int have_id = closure_id(id, w) == 0;
    if (have_id) {
        pthread_mutex_lock(&memo_lock);
        for (size_t i = 0; i < MEMO_SLOTS && memo[i]; i++) {
            if (!memcmp(memo[i]->id, id, sizeof(id))) {
                const struct closure_names *c = memo[i];
                pthread_mutex_unlock(&memo_lock);
                return c;
            }
        }
        pthread_mutex_unlock(&memo_lock);
    }
    struct closure_names *c = kc_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    closure_names_build(c, w);
    if (have_id) {
        memcpy(c->id, id, sizeof(id));
        pthread_mutex_lock(&memo_lock);
        size_t i = 0;
        while (i < MEMO_SLOTS && memo[i] && memcmp(memo[i]->id, id, sizeof(id)))
            i++;
        if (i < MEMO_SLOTS && !memo[i]) {
            memo[i] = c; /* kept for the process */
            pthread_mutex_unlock(&memo_lock);
            return c;
        }
        pthread_mutex_unlock(&memo_lock);
    }
    *own = c;
    return c;
}

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
 * (spans_paste_caller judges those). The toolkit headers the resolution
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
    unsigned taint = ident_taint(r->m, s, n);
    if (toolkit && strstr(buf, "FILE"))
        taint = 0;
    if (r->header ? (taint & TAINT_CALLER) : taint)
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
        size_t len = ident_at(t, n, i);
        if (len) {
            if (!d || !is_param(d, t + i, len))
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
static int pastes_name_it(const struct macros *m, const kcache_request *req, const struct work *w)
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
        } else if (hash_at(t, n, i)) {
            size_t k = i;
            while (k > 0 && (t[k - 1] == ' ' || t[k - 1] == '\t'))
                k--;
            if (k > 0 && t[k - 1] != '\n')
                break;
            i = logical_line(t, n, i, NULL);
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
static int code_spans(struct spans *s, const struct macros *m, const char *t, size_t n)
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
        } else if (at_start && hash_at(t, n, i)) {
            i = logical_line(t, n, i, NULL);
        } else if (t[i] == '"' || (t[i] == '\'' && !(i > 0 && isalnum((unsigned char)t[i - 1])))) {
            at_start = 0;
            i = literal_end(t, n, i);
        } else if ((len = ident_at(t, n, i)) && name_pastes(m, t + i, len)) {
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
static int spans_paste_caller(const struct macros *m, const struct spans *s)
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

/*
 * 1 if the user headers can put the program's name in the bytes of this source: a
 * macro of theirs that the source (or an option, a name expression) names expands
 * __FILE__, __BASE_FILE__ or __builtin_FILE, itself or through other macros, or
 * pastes (##) one of those names or such a macro's; or their code names __BASE_FILE__
 * or __builtin_FILE (a default argument is the caller's file). A macro that only a
 * header expands carries that header's name, not the program's.
 */
static int headers_name_it(const kcache_request *req, const struct work *w)
{
    struct closure_names *own;
    const struct closure_names *c = closure_names(w, &own);
    int named = !c || c->failed || c->caller;
    if (!named)
        named = text_taint(&c->m, w->source, w->source_size) != 0;
    for (size_t i = 0; !named && i < req->n_options; i++)
        named = req->options[i] && text_taint(&c->m, req->options[i], strlen(req->options[i]));
    for (size_t i = 0; !named && i < req->n_name_exprs; i++)
        named = text_taint(&c->m, req->name_exprs[i], strlen(req->name_exprs[i])) != 0;
    if (!named)
        named = pastes_name_it(&c->m, req, w);
    if (own) {
        macros_free(&own->m);
        free(own);
    }
    return named;
}

int kc_name_free_request(const kcache_request *req, const struct work *w)
{
    /* A caller's compiler other than NVIDIA's NVRTC may use the name as it likes. */
    if (req->version >= 2 && req->compile && !(req->flags & KCACHE_COMPILE_NVRTC_NAMES))
        return 0;
    if (w->workdir[0] || w->kind == KCACHE_KIND_LTOIR || w->opts.dlto)
        return 0;
    if (names_the_file(w->source, w->source_size))
        return 0;
    for (size_t i = 0; i < w->opts.n_canonical; i++)
        if (str_names_the_file(w->opts.canonical[i]))
            return 0;
    for (size_t i = 0; i < req->n_options; i++)
        if (str_names_the_file(req->options[i]))
            return 0;
    for (size_t i = 0; i < req->n_name_exprs; i++)
        if (str_names_the_file(req->name_exprs[i]))
            return 0;
    /* In-memory headers are held to what the source is held to. */
    size_t n_mem = req->version >= 2 ? req->n_headers : 0;
    for (size_t i = 0; i < n_mem; i++)
        if (str_names_the_file(req->header_contents[i]))
            return 0;
    return !headers_name_it(req, w);
}

/* 1 if data holds needle as PTX writes a string: "{47, 116, ...}", any spaces. */
static int decimal_at(const unsigned char *data, size_t n, size_t at, const char *needle,
                      size_t len)
{
    size_t i = at;
    for (size_t k = 0; k < len; k++) {
        if (k) {
            while (i < n && isspace(data[i]))
                i++;
            if (i >= n || data[i++] != ',')
                return 0;
            while (i < n && isspace(data[i]))
                i++;
        }
        unsigned v = 0;
        size_t digits = 0;
        while (i < n && isdigit(data[i]) && digits < 4) {
            v = v * 10 + (unsigned)(data[i++] - '0');
            digits++;
        }
        if (!digits || (i < n && isdigit(data[i])) || v != (unsigned char)needle[k])
            return 0;
    }
    return 1;
}

static int holds(const void *bytes, size_t n, const char *needle)
{
    const unsigned char *data = bytes;
    size_t len = strlen(needle);
    if (!data || !len)
        return 0;
    for (size_t i = 0; i + len <= n; i++) {
        if (data[i] == (unsigned char)needle[0] && !memcmp(data + i, needle, len))
            return 1;
        if (isdigit(data[i]) && (i == 0 || !isdigit(data[i - 1])) &&
            decimal_at(data, n, i, needle, len))
            return 1;
    }
    return 0;
}

/* 1 if the artifact holds text, as bytes, as PTX's byte lists, or made an identifier. */
static int holds_any_form(const struct kc_result *r, const char *text, size_t n)
{
    /* As EDG names what an anonymous namespace holds: "_INTERNAL_00000000_7_kern_cu_..."
     * (every byte that cannot be in an identifier becomes '_'). */
    char *plain = kc_memdup(text, n), *ident = kc_memdup(text, n);
    int shows = 1;
    if (plain && ident) {
        for (char *p = ident; *p; p++)
            if (!ident_char((unsigned char)*p) || (unsigned char)*p >= 0x80)
                *p = '_';
        shows = holds(r->pub.data, r->pub.size, plain) || holds(r->pub.data, r->pub.size, ident);
    }
    free(plain);
    free(ident);
    return shows;
}

int kc_name_shows(const struct kc_result *r, const char *name)
{
    if (r->pub.log && r->pub.log[0])
        return KC_NAME_FULL;
    const char *slash = strrchr(name, '/');
    const char *last = slash ? slash + 1 : name;
    /* A name with no last component: nothing to look for, so it is kept. */
    if (!*last)
        return KC_NAME_FULL;
    if (!holds_any_form(r, last, strlen(last)))
        return KC_NAME_NONE;
    if (!slash)
        return KC_NAME_FULL;
    /*
     * The last component shows (an anonymous namespace's members are named
     * after it; NVRTC 13 gives the same bytes for it in any directory). Its
     * directory must not: neither the whole name, the directory, nor its own
     * last component (a temporary directory's name). A directory too short
     * to tell from other bytes keeps the whole name.
     */
    const char *dir_last = slash;
    while (dir_last > name && dir_last[-1] != '/')
        dir_last--;
    size_t dir_n = (size_t)(slash - name), dir_last_n = (size_t)(slash - dir_last);
    if (dir_n < 4 || dir_last_n < 4 || holds_any_form(r, name, strlen(name)) ||
        holds_any_form(r, name, dir_n) || holds_any_form(r, dir_last, dir_last_n))
        return KC_NAME_FULL;
    return KC_NAME_BASE;
}
