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
 * such a name of the pieces that reach it (kc_pastes_name_it, paste.c), the pieces of
 * the toolkit headers' macros it reaches included (libcu++'s
 * _LIBCUDACXX_ABI_NAMESPACE is the piece __4; CCCL's _CUDA_VSTD pastes a
 * namespace's name, never __FILE__); no user header's code names
 * __BASE_FILE__ or __builtin_FILE (a default argument is the caller's
 * file) nor holds a line directive (it may name the program's file); and no
 * invocation in a user header's code (an -include file's included) of a
 * macro that pastes can make one of those, or a macro that
 * expands them, of its own pieces and those of the macros it reaches
 * (kc_spans_paste_caller, paste.c).
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
 * A result whose artifact holds no form of the last component and whose
 * log shows the name only as its diagnostics' prefix is filed under a log
 * template's key (KC_TAG_LOG_TEMPLATE), its log stored with each prefix's
 * name replaced by KC_NAME_PLACEHOLDER, which a hit fills with its own name
 * (kc_name_fill()). Measured with NVRTC 13.0 (an unused variable, #warning,
 * #pragma message, a warning in a user header, an error; names in two
 * directories, "a" and "b", "k.cu" and "z/k.cu"; -lineinfo): NVRTC prints
 * the name verbatim ("./x/../kern.cu", spaces, tabs, UTF-8), a NULL or ""
 * name as "default_program" (the drop-in passes that as the name); each of
 * the program's diagnostics starts a line with "NAME(LINE): "; a header's
 * starts with its path (beside the name: the name's directory); an error's
 * log ends with 'detected in the compilation of "NAME".' (never stored); no
 * other byte of the log depends on the name. A log is a template only when
 * every occurrence of the name is such a prefix at the start of a line, and
 * what is left holds no trace of it: not the whole name, its last component,
 * its directory nor the directory's last component, as text or made an
 * identifier (a directory or its last component under 4 bytes keeps the
 * name, as for KC_NAME_BASE); the log does not hold the placeholder, the
 * name no newline, and every diagnostic in it is one whose message never
 * spans lines (diagnostics_one_line()). The key says whether the name has a
 * directory: a header found beside a name without one prints without it.
 * Anything else is filed under the key with the name, as before. A miss
 * costs one more entry lookup and one more closure lookup (the template's);
 * a request whose result needs its name costs one to three more lookups on
 * a hit.
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
size_t kc_hash_at(const char *t, size_t n, size_t i)
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
        size_t hash = kc_hash_at(text, n, i);
        if (hash) {
            size_t j = i + hash;
            while (j < n && (text[j] == ' ' || text[j] == '\t'))
                j++;
            if (j < n && kc_hash_at(text, n, j))
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

/* kc_ident_at() past its first byte's test. */
size_t kc_ident_from(const char *t, size_t n, size_t i)
{
    if (i > 0 && ident_char((unsigned char)t[i - 1]))
        return 0;
    size_t j = i;
    while (j < n && ident_char((unsigned char)t[j]))
        j++;
    return j - i;
}

/*
 * The end of the logical line that starts at i (splices followed). With joined,
 * its text spliced into it; without, only its end (most lines are no directive).
 */
size_t kc_logical_line(const char *t, size_t n, size_t i, kc_buf *joined)
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
        size_t len = kc_ident_at(b, n, i);
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

/* Frees what d holds, not d. */
static void macro_clear(struct macro *d)
{
    free(d->name);
    free(d->body);
    free(d->params);
}

static int add_macro(struct macros *m, const char *line, size_t n, int toolkit)
{
    size_t i = 0;
    while (i < n && (line[i] == ' ' || line[i] == '\t'))
        i++;
    size_t len = kc_ident_at(line, n, i);
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
        macro_clear(d);
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
        int directive = j < n && kc_hash_at(t, n, j);
        size_t end = kc_logical_line(t, n, i, directive ? &line : NULL);
        for (size_t next = end; !rc && directive && end != (size_t)-1 && next < n &&
                                ends_in_comment((const char *)line.data, line.size);) {
            next = kc_logical_line(t, n, next + 1, &more);
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
            k = k < ln ? skip_blank(l, ln, k + kc_hash_at(l, ln, k)) : ln;
            if (k + 6 <= ln && !memcmp(l + k, "define", 6) && kc_ident_at(l, ln, k) == 6)
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
unsigned kc_ident_taint(const struct macros *m, const char *t, size_t len)
{
    char buf[256], *name = len < sizeof(buf) ? buf : kc_malloc(len + 1);
    if (!name)
        return KC_TAINT_HERE | KC_TAINT_CALLER; /* not known: as if it carried the name */
    memcpy(name, t, len);
    name[len] = '\0';
    size_t k;
    unsigned taint = 0;
    if (!strcmp(name, "__builtin_FILE") || !strcmp(name, "__BASE_FILE__"))
        taint = KC_TAINT_CALLER;
    else if (strstr(name, "FILE"))
        taint = KC_TAINT_HERE;
    else if (kc_smap_find(&m->index, name, &k))
        for (; k < m->n && !strcmp(m->v[k].name, name); k++)
            taint |= m->v[k].toolkit ? 0 : m->v[k].taint;
    if (name != buf)
        free(name);
    return taint;
}

/*
 * The taint of a text: the identifiers it names. What ## makes is judged
 * where the pieces are known (kc_pastes_name_it).
 */
static unsigned text_taint(const struct macros *m, const char *t, size_t n)
{
    unsigned taint = 0;
    for (size_t i = 0; i < n;) {
        size_t len = kc_ident_at(t, n, i);
        if (len) {
            taint |= kc_ident_taint(m, t + i, len);
            i += len;
        } else {
            i++;
        }
    }
    return taint;
}

int kc_is_param(const struct macro *d, const char *s, size_t n)
{
    for (const char *p = d->params; p && *p; p += strlen(p) + 1)
        if (strlen(p) == n && !memcmp(p, s, n))
            return 1;
    return 0;
}

/* 1 if a definition of the identifier at t (len bytes) pastes or names one that does. */
int kc_name_pastes(const struct macros *m, const char *t, size_t len)
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
        size_t len = kc_ident_at(t, n, i);
        if (len && !kc_is_param(d, t + i, len) && kc_name_pastes(m, t + i, len))
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
 * 1 if a header's code (not its directives) names an identifier whose taint is in mask:
 * the caller's or the program's name (a default argument __builtin_FILE(), as in
 * source_location::current(), is the caller's file), or the header's own.
 */
static int code_names(const struct macros *m, const char *t, size_t n, unsigned mask)
{
    if (!memmem(t, n, "FILE", 4) && !((mask & KC_TAINT_HERE) && memmem(t, n, "assert", 6))) {
        /* Only a macro can then carry it: look for the tainted ones' names. */
        int any = 0;
        for (size_t i = 0; i < m->n && !any; i++)
            any = (m->v[i].taint & mask) && memmem(t, n, m->v[i].name, strlen(m->v[i].name));
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
        size_t len = kc_ident_at(t, n, i);
        if (len) {
            /* NVRTC's assert is built in (no file defines it) and expands __FILE__. */
            if (!directive && ((kc_ident_taint(m, t + i, len) & mask) ||
                               ((mask & KC_TAINT_HERE) && len == 6 && !memcmp(t + i, "assert", 6))))
                return 1;
            i += len;
        } else {
            i++;
        }
    }
    return 0;
}

static int code_names_caller(const struct macros *m, const char *t, size_t n)
{
    return code_names(m, t, n, KC_TAINT_CALLER);
}

/* 1 if a header's code (not its directives) may expand its own __FILE__, or its caller's. */
static int code_names_own_file(const struct macros *m, const char *t, size_t n)
{
    return code_names(m, t, n, KC_TAINT_HERE | KC_TAINT_CALLER);
}

static void macros_free(struct macros *m)
{
    for (size_t i = 0; i < m->n; i++)
        macro_clear(&m->v[i]);
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
    int caller;   /* the headers can put the program's name in the bytes or the log */
    int own_file; /* some header's code may expand its own __FILE__ (kc_paths_free_request) */
};

#define MEMO_SLOTS 8
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct closure_names *memo[MEMO_SLOTS];

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

/*
 * 1 if a line of text starts with a line directive: "#line" or the "# 5"
 * form (%: for #). One that names a file makes NVRTC print the header's
 * diagnostics under that name, the program's as well ("kern.cu(5): "), and
 * expand its __FILE__ so. A '#' inside a line ("see #1234") is none.
 */
static int names_a_line(const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t hash = kc_hash_at(text, n, i), b = i;
        while (hash && b > 0 && (text[b - 1] == ' ' || text[b - 1] == '\t'))
            b--;
        if (!hash || (b > 0 && text[b - 1] != '\n'))
            continue;
        size_t j = i + hash;
        while (j < n && (text[j] == ' ' || text[j] == '\t'))
            j++;
        if (j < n && (isdigit((unsigned char)text[j]) ||
                      (j + 4 <= n && !memcmp(text + j, "line", 4) &&
                       (j + 4 == n || !ident_char((unsigned char)text[j + 4])))))
            return 1;
    }
    return 0;
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
        c->caller = code_names_caller(&c->m, d->content, d->size) ||
                    names_a_line(d->content, d->size);
        c->failed = kc_code_spans(&sp, &c->m, d->content, d->size) != 0;
    }
    for (size_t i = 0; !c->failed && !c->own_file && i < w->deps.n_deps; i++) {
        const kc_dep *d = &w->deps.deps[i];
        if (d->state == KC_DEP_USER && d->nvpath && d->content)
            c->own_file = code_names_own_file(&c->m, d->content, d->size);
    }
    if (!c->failed && !c->own_file)
        c->own_file = sp.n > 0; /* what a paste in a header's code makes is not followed here */
    if (!c->failed && !c->caller)
        c->caller = kc_spans_paste_caller(&c->m, &sp);
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

/*
 * 1 if the user headers can put the program's name in the bytes of this source: a
 * macro of theirs that the source (or an option, a name expression) names expands
 * __FILE__, __BASE_FILE__ or __builtin_FILE, itself or through other macros, or
 * pastes (##) one of those names or such a macro's; or their code names __BASE_FILE__
 * or __builtin_FILE (a default argument is the caller's file), or holds a line
 * directive (it may name the program). A macro that only a header expands carries
 * that header's name, not the program's.
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
        named = kc_pastes_name_it(&c->m, req, w);
    if (own) {
        macros_free(&own->m);
        free(own);
    }
    return named;
}

/*
 * 1 if NVRTC reads name as an option: NVRTC 13.0 hands the program's name
 * to its front end as an argument, so one that starts with '-' ("-" alone
 * aside) fails the compile ("invalid option: -k.cu"; "-DV=5" and "--":
 * "missing source file name"), whatever the source. Measured.
 */
static int name_is_option(const char *name)
{
    return name && name[0] == '-' && name[1];
}

int kc_name_free_request(const kcache_request *req, const struct work *w)
{
    /* A caller's compiler other than NVIDIA's NVRTC may use the name as it likes. */
    if (req->version >= 2 && req->compile && !(req->flags & KCACHE_COMPILE_NVRTC_NAMES))
        return 0;
    /* Its own answer (a failure), never another name's entry. */
    if (name_is_option(w->source_name))
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

int kc_paths_free_request(const struct work *w, const char **unsure)
{
    *unsure = NULL;
    int any = 0;
    for (size_t i = 0; i < w->deps.n_deps && !any; i++)
        any = w->deps.deps[i].state == KC_DEP_USER && w->deps.deps[i].nvpath;
    if (!any)
        return 1;
    struct closure_names *own;
    const struct closure_names *c = closure_names(w, &own);
    int free_ = c && !c->failed && !c->own_file;
    for (size_t i = 0; c && !free_ && !*unsure && i < w->deps.n_deps; i++) {
        const kc_dep *d = &w->deps.deps[i];
        if (d->state != KC_DEP_USER || !d->nv_ambiguous || !d->content)
            continue;
        struct spans sp = {0};
        if (c->failed || code_names_own_file(&c->m, d->content, d->size) ||
            kc_code_spans(&sp, &c->m, d->content, d->size) || sp.n)
            *unsure = d->name;
        kc_buf_free(&sp.text);
        free(sp.ends);
        free(sp.upto);
        kc_smap_free(&sp.judged);
    }
    if (own) {
        macros_free(&own->m);
        free(own);
    }
    return free_;
}

/* The end of the (at most four) decimal digits at data[i], their value in *v. */
static size_t decimal_at_most4(const unsigned char *data, size_t n, size_t i, unsigned *v)
{
    size_t start = i;
    *v = 0;
    while (i < n && i - start < 4 && isdigit(data[i]))
        *v = *v * 10 + (unsigned)(data[i++] - '0');
    return i;
}

/*
 * The strings an artifact holds: its bytes, then each of PTX's byte lists
 * ("{47, 116, ...}") decoded, NUL after each. NULL: out of memory.
 */
static kc_buf *artifact_strings(const void *data, size_t size)
{
    kc_buf *b = kc_calloc(1, sizeof(*b));
    const unsigned char *p = data;
    if (!b || kc_buf_append(b, data ? data : (const void *)"", size) || kc_buf_append(b, "", 1))
        goto nomem;
    for (size_t i = 0; i < size; i++) {
        if (p[i] != '{')
            continue;
        size_t j = i + 1;
        int items = 0;
        while (j < size) {
            while (j < size && isspace(p[j]))
                j++;
            unsigned v = 0;
            size_t end = decimal_at_most4(p, size, j, &v);
            if (end == j || v > 255)
                break;
            j = end;
            unsigned char c = (unsigned char)v;
            if (kc_buf_append(b, &c, 1))
                goto nomem;
            items++;
            while (j < size && isspace(p[j]))
                j++;
            if (j >= size || p[j] != ',')
                break;
            j++;
        }
        if (items && kc_buf_append(b, "", 1))
            goto nomem;
        i = j > i ? j - 1 : i;
    }
    return b;
nomem:
    if (b)
        kc_buf_free(b);
    free(b);
    return NULL;
}

int kc_paths_show(const struct kc_result *r, const struct work *w)
{
    kc_buf *strings = artifact_strings(r->pub.data, r->pub.size);
    if (!strings)
        return KC_PATHS_AMBIGUOUS; /* not known: as if shown */
    const char *log = r->pub.log ? r->pub.log : "";
    int shows = KC_PATHS_NONE;
    for (size_t i = 0; i < w->deps.n_deps && shows != KC_PATHS_AMBIGUOUS; i++) {
        const kc_dep *d = &w->deps.deps[i];
        if (d->state != KC_DEP_USER || !d->nvpath)
            continue;
        if (strstr(log, d->nvpath) ||
            memmem(strings->data, strings->size, d->nvpath, strlen(d->nvpath)))
            shows = d->nv_ambiguous ? KC_PATHS_AMBIGUOUS : KC_PATHS_SHOWN;
    }
    kc_buf_free(strings);
    free(strings);
    return shows;
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
        size_t end = decimal_at_most4(data, n, i, &v);
        size_t digits = end - i;
        i = end;
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

/* 1 if data holds text, as bytes, as PTX's byte lists, or made an identifier. */
static int holds_form(const void *data, size_t size, const char *text, size_t n)
{
    /* As EDG names what an anonymous namespace holds: "_INTERNAL_00000000_7_kern_cu_..."
     * (every byte that cannot be in an identifier becomes '_'). */
    char *plain = kc_memdup(text, n), *ident = kc_memdup(text, n);
    int shows = 1;
    if (plain && ident) {
        for (char *p = ident; *p; p++)
            if (!ident_char((unsigned char)*p) || (unsigned char)*p >= 0x80)
                *p = '_';
        shows = holds(data, size, plain) || holds(data, size, ident);
    }
    free(plain);
    free(ident);
    return shows;
}

static int holds_any_form(const struct kc_result *r, const char *text, size_t n)
{
    return holds_form(r->pub.data, r->pub.size, text, n);
}

/*
 * The parts of a name that must not show: its last component (*last), and
 * for a name in a directory the directory (*dir_n bytes of name) and its own
 * last component (*dir_last, *dir_last_n bytes). Returns 0 when the name has
 * no last component, or a directory too short to tell from other bytes.
 */
static int name_parts(const char *name, const char **last, size_t *dir_n, const char **dir_last,
                      size_t *dir_last_n)
{
    const char *slash = strrchr(name, '/');
    *last = slash ? slash + 1 : name;
    *dir_n = *dir_last_n = 0;
    *dir_last = slash ? slash : name;
    if (!**last)
        return 0;
    if (!slash)
        return 1;
    while (*dir_last > name && (*dir_last)[-1] != '/')
        (*dir_last)--;
    *dir_n = (size_t)(slash - name);
    *dir_last_n = (size_t)(slash - *dir_last);
    return *dir_n >= 4 && *dir_last_n >= 4;
}

/* 1 if line[i..n) holds "(DIGITS): ", as a diagnostic's path and line end. */
static int holds_line_mark(const char *line, size_t n, size_t i)
{
    for (; i < n; i++) {
        size_t j = i + 1;
        while (line[i] == '(' && j < n && isdigit((unsigned char)line[j]))
            j++;
        if (j > i + 1 && j + 3 <= n && !memcmp(line + j, "): ", 3))
            return 1;
    }
    return 0;
}

/*
 * The length of the prefix NVRTC starts a diagnostic of the program with,
 * "NAME(LINE): " and a severity, at line (n bytes, no newline), or 0. A
 * header's diagnostic whose path only starts so ("NAME(1).h(2): ", or
 * "NAME(1): y.h(2): ", a header beside a name without a directory) names
 * that header under any name: its line goes on past the prefix to another
 * "(LINE): ", and is never taken for the program's.
 */
static size_t diagnostic_prefix(const char *line, size_t n, const char *name, size_t len)
{
    static const char *const severity[] = {"warning #", "remark #", "note #", "error #"};
    if (n < len + 5 || memcmp(line, name, len) != 0 || line[len] != '(')
        return 0;
    size_t i = len + 1;
    while (i < n && isdigit((unsigned char)line[i]))
        i++;
    if (i == len + 1 || i + 2 >= n || memcmp(line + i, "): ", 3) != 0)
        return 0;
    i += 3;
    int known = 0;
    for (size_t k = 0; k < sizeof(severity) / sizeof(*severity); k++)
        known |= n - i > strlen(severity[k]) && !memcmp(line + i, severity[k], strlen(severity[k]));
    return known && !holds_line_mark(line, n, i) ? len : 0;
}

/*
 * Diagnostics of NVRTC 13.0 whose message quotes no text of the program's
 * but names (identifiers, types, the #warning line as written, escapes not
 * undone), so that it never spans lines: an unused or unset variable,
 * #warning, shifts, conversions, unreachable code, a deprecated entity
 * without a message and its note, an unknown #pragma, ...
 */
static const unsigned one_line_diagnostics[] = {62,  63,  68,  69,  111,  128,  161,  174, 177,
                                                186, 549, 550, 940, 1105, 1215, 2464, 3287};

/* 1 if the " #NUMBER-D: " (or " #NUMBER: ") at line[i] is one of one_line_diagnostics. */
static int one_line_number(const char *line, size_t n, size_t i)
{
    unsigned v = 0;
    size_t j = i + 2;
    while (j < n && isdigit((unsigned char)line[j]) && j < i + 8)
        v = v * 10 + (unsigned)(line[j++] - '0');
    if (j == i + 2)
        return -1; /* not a number: no diagnostic's */
    if (j + 2 < n && !memcmp(line + j, "-D", 2))
        j += 2;
    if (j + 2 > n || memcmp(line + j, ": ", 2) != 0)
        return -1;
    for (size_t k = 0; k < sizeof(one_line_diagnostics) / sizeof(*one_line_diagnostics); k++)
        if (one_line_diagnostics[k] == v)
            return 1;
    return 0;
}

/*
 * 1 if every diagnostic in log is one of one_line_diagnostics. A message
 * that quotes the program's text prints it as it is, newlines included
 * (#pragma message, [[deprecated("...")]], [[nodiscard("...")]]): its lines
 * may read "NAME(LINE): ..." under one name and stay so under any other,
 * which no look at the log can tell from the name's own diagnostics (the
 * text can copy their form whole). Such a diagnostic's first line is
 * NVRTC's, with its number: every number in the log must be on the list, a
 * line that starts with neither a blank nor NVRTC's closing remark must
 * hold one, and a diagnostic without its number (-no-err-no) keeps the name.
 */
static int diagnostics_one_line(const char *log)
{
    static const char remark[] =
        "Remark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"";
    static const char *const unnumbered[] = {"): warning: ", "): remark: ", "): note: ",
                                             "): error: ", "): catastrophic error: "};
    for (const char *p = log; *p;) {
        size_t n = strcspn(p, "\n");
        int numbers = 0;
        for (size_t i = 0; i + 2 < n; i++) {
            int one = p[i] == ' ' && p[i + 1] == '#' ? one_line_number(p, n, i) : -1;
            if (one == 0)
                return 0;
            numbers += one == 1;
            for (size_t k = 0; p[i] == ')' && k < sizeof(unnumbered) / sizeof(*unnumbered); k++)
                if (!strncmp(p + i, unnumbered[k], strlen(unnumbered[k])))
                    return 0;
        }
        if (n && p[0] != ' ' && !numbers && !(n == strlen(remark) && !memcmp(p, remark, n)))
            return 0;
        p += n + (p[n] == '\n');
    }
    return 1;
}

/*
 * log as a template for name (see the head comment), or NULL: the log shows
 * the name in another way, or memory ran out (the name is then keyed).
 */
static char *log_template(const char *log, const char *name)
{
    const char *last, *dir_last;
    size_t dir_n, dir_last_n, len = strlen(name);
    if (!name_parts(name, &last, &dir_n, &dir_last, &dir_last_n) || strchr(name, '\n') ||
        strstr(name, KC_NAME_PLACEHOLDER) || strstr(log, KC_NAME_PLACEHOLDER) ||
        !diagnostics_one_line(log))
        return NULL;
    kc_buf tmpl = {0}, rest = {0}; /* the template, and the log less the prefixes */
    int failed = 0;
    for (const char *p = log; *p && !failed;) {
        size_t n = strcspn(p, "\n"), eol = n + (p[n] == '\n');
        size_t prefix = diagnostic_prefix(p, n, name, len);
        if (prefix)
            failed = kc_buf_append(&tmpl, KC_NAME_PLACEHOLDER, strlen(KC_NAME_PLACEHOLDER));
        failed = failed || kc_buf_append(&tmpl, p + prefix, eol - prefix) ||
                 kc_buf_append(&rest, p + prefix, eol - prefix);
        p += eol;
    }
    failed = failed || kc_buf_append(&tmpl, "", 1);
    if (!failed && rest.size)
        failed = holds_form(rest.data, rest.size, name, len) ||
                 holds_form(rest.data, rest.size, last, strlen(last)) ||
                 (dir_n && (holds_form(rest.data, rest.size, name, dir_n) ||
                            holds_form(rest.data, rest.size, dir_last, dir_last_n)));
    kc_buf_free(&rest);
    if (failed) {
        kc_buf_free(&tmpl);
        return NULL;
    }
    return (char *)tmpl.data;
}

int kc_name_shows(const struct kc_result *r, const char *name, char **tmpl)
{
    *tmpl = NULL;
    const char *last, *dir_last;
    size_t dir_n, dir_last_n;
    int parts = name_parts(name, &last, &dir_n, &dir_last, &dir_last_n);
    /* A name with no last component: nothing to look for, so it is kept. */
    if (!*last)
        return KC_NAME_FULL;
    int log = r->pub.log && r->pub.log[0];
    if (!holds_any_form(r, last, strlen(last))) {
        if (!log)
            return KC_NAME_NONE;
        *tmpl = log_template(r->pub.log, name);
        return *tmpl ? KC_NAME_TEMPLATE : KC_NAME_FULL;
    }
    /*
     * The last component shows (an anonymous namespace's members are named
     * after it; NVRTC 13 gives the same bytes for it in any directory). Its
     * directory must not: neither the whole name, the directory, nor its own
     * last component (a temporary directory's name). A directory too short
     * to tell from other bytes keeps the whole name.
     */
    if (log || !dir_n || !parts || holds_any_form(r, name, strlen(name)) ||
        holds_any_form(r, name, dir_n) || holds_any_form(r, dir_last, dir_last_n))
        return KC_NAME_FULL;
    return KC_NAME_BASE;
}

/* 1 if key material is a log template's (KC_TAG_LOG_TEMPLATE). */
static int is_template(void *ud, int tag, const uint8_t *data, size_t n)
{
    (void)ud, (void)data, (void)n;
    return tag == KC_TAG_LOG_TEMPLATE;
}

int kc_name_fill(struct kc_result *r, const char *name)
{
    const kcache_entry *e = r->entry;
    if (!e || !r->pub.log || !strstr(r->pub.log, KC_NAME_PLACEHOLDER) ||
        kc_key_walk(e->key_material, e->key_material_size, is_template, NULL) != 1)
        return 0;
    /* NVRTC prints an empty name as it prints NULL (measured with 13.0). */
    if (!*name)
        name = "default_program";
    kc_buf b = {0};
    size_t len = strlen(KC_NAME_PLACEHOLDER);
    int failed = 0;
    for (const char *p = r->pub.log; *p && !failed;) {
        const char *at = strstr(p, KC_NAME_PLACEHOLDER);
        size_t n = at ? (size_t)(at - p) : strlen(p);
        failed = kc_buf_append(&b, p, n) || (at && kc_buf_append(&b, name, strlen(name)));
        p += n + (at ? len : 0);
    }
    if (failed || kc_buf_append(&b, "", 1)) {
        kc_buf_free(&b);
        return KCACHE_ENOMEM;
    }
    free(r->log);
    r->log = (char *)b.data;
    r->pub.log = r->log;
    return 0;
}
