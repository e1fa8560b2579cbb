/*
 * The include scanner: finds the directives that decide what a compile reads,
 * without preprocessing (see deps.h).
 */
#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resolve/deps.h"

/* ---- scanner ---------------------------------------------------------- */

struct scanner {
    const char *t;
    size_t n, i;
    size_t dir_start, find_from; /* the directive being parsed, in the original text */
    unsigned line;
    kc_directive *out;
    size_t count, cap;
    int digit_sep_pushed;
    int time_macro_pushed;
    const char *params, *params_end; /* a function-like #define's, while its body is scanned */
};

static int is_ident(int c)
{
    return isalnum(c) || c == '_' || c == '$';
}

/* Skips a backslash-newline splice at i; returns 1 if there was one. */
static int skip_splice(struct scanner *s)
{
    size_t i = s->i;
    if (i < s->n && s->t[i] == '\\') {
        size_t j = i + 1;
        if (j < s->n && s->t[j] == '\r')
            j++;
        if (j < s->n && s->t[j] == '\n') {
            s->i = j + 1;
            s->line++;
            return 1;
        }
    }
    return 0;
}

static int peek_spliced(struct scanner *s)
{
    while (skip_splice(s))
        ;
    return s->i < s->n ? (unsigned char)s->t[s->i] : -1;
}

/*
 * The current character after splices, or -1 at the end. Asked at nearly
 * every byte of every header a resolution scans: a byte that starts no
 * splice is answered inline.
 */
static inline int peek(struct scanner *s)
{
    if (s->i < s->n && s->t[s->i] != '\\')
        return (unsigned char)s->t[s->i];
    return peek_spliced(s);
}

static int peek2(struct scanner *s)
{
    size_t save = s->i;
    unsigned line = s->line;
    if (peek(s) < 0)
        return -1;
    s->i++;
    int c = peek(s);
    s->i = save;
    s->line = line;
    return c;
}

static void advance(struct scanner *s)
{
    if (s->i < s->n) {
        if (s->t[s->i] == '\n')
            s->line++;
        s->i++;
    }
}

/*
 * Skips a block comment whose "/" is at i. Only a "*" can begin its end, so
 * the text up to the next one is stepped over at once, its newlines counted
 * (splices there included, as advance() and skip_splice() count them):
 * CCCL's headers are much comment, and peeking at each of its characters
 * was a tenth of a cold resolution.
 */
static void skip_block_comment(struct scanner *s)
{
    advance(s);
    advance(s);
    while (s->i < s->n) {
        const char *star = memchr(s->t + s->i, '*', s->n - s->i);
        size_t stop = star ? (size_t)(star - s->t) : s->n;
        for (size_t j = s->i; j < stop; j++)
            s->line += s->t[j] == '\n';
        s->i = stop;
        if (!star)
            return;
        if (peek2(s) == '/') {
            advance(s);
            advance(s);
            return;
        }
        advance(s);
    }
}

static void skip_line_comment(struct scanner *s)
{
    while (peek(s) >= 0 && peek(s) != '\n')
        advance(s);
}

/* Skips a "..." or '...' literal whose quote is at i; stops at a newline. */
static void skip_quoted(struct scanner *s)
{
    int q = peek(s);
    advance(s);
    for (int c; (c = peek(s)) >= 0 && c != '\n';) {
        advance(s);
        if (c == '\\') {
            if (peek(s) >= 0 && peek(s) != '\n')
                advance(s);
        } else if (c == q) {
            return;
        }
    }
}

/* Skips R"delim( ... )delim" whose quote is at i (the R was consumed). */
static void skip_raw_string(struct scanner *s)
{
    char delim[20];
    size_t dn = 0;
    advance(s); /* the quote */
    while (s->i < s->n && s->t[s->i] != '(' && dn < 16 && s->t[s->i] != '\n')
        delim[dn++] = s->t[s->i++];
    if (s->i >= s->n || s->t[s->i] != '(')
        return; /* not a raw string after all */
    s->i++;
    for (; s->i < s->n; advance(s)) {
        if (s->t[s->i] == ')' && s->n - s->i > dn + 1 && memcmp(s->t + s->i + 1, delim, dn) == 0 &&
            s->t[s->i + 1 + dn] == '"') {
            s->i += dn + 2;
            return;
        }
    }
}

static int push(struct scanner *s, int kind, int angle, int computed, unsigned line,
                const char *text, size_t text_n, const char *value, size_t value_n);

/*
 * Skips a pp-number whose first character is at i, the way C++14 and later
 * lex one: digit separators (1'000) are part of it, not a character literal.
 * Before C++14 the same bytes lex otherwise, so a separator is reported once
 * per text (the resolver decides by the compile's -std). Appends the number
 * to b when b is given. Returns 0 or KCACHE_ENOMEM.
 */
static int skip_pp_number(struct scanner *s, kc_buf *b)
{
    for (int c; (c = peek(s)) >= 0;) {
        int take = 0;
        if (is_ident(c) || c == '.') {
            take = 1;
            if ((c == 'e' || c == 'E' || c == 'p' || c == 'P')) {
                int n = peek2(s);
                if (n == '+' || n == '-') {
                    if (b && kc_buf_put(b, (char)c))
                        return KCACHE_ENOMEM;
                    advance(s);
                    c = peek(s);
                }
            }
        } else if (c == '\'' && is_ident(peek2(s))) {
            take = 1;
            if (!s->digit_sep_pushed) {
                s->digit_sep_pushed = 1;
                int rc = push(s, KC_DIR_UNCERTAIN, 0, 0, s->line, "digit separator", 15, NULL, 0);
                if (rc)
                    return rc;
                s->out[s->count - 1].digit_sep = 1;
            }
        }
        if (!take)
            break;
        if (b && kc_buf_put(b, (char)c))
            return KCACHE_ENOMEM;
        advance(s);
    }
    return 0;
}

/*
 * __DATE__ and __TIME__ (and __TIMESTAMP__, which NVRTC 13 does not define)
 * expand to the moment of the compile, which no key holds: a text that
 * names one (in code or a directive, -D values included) is reported once,
 * and the compile runs uncached. Whether the name is ever expanded is not
 * worked out: a miss costs time, a kernel of another moment would be wrong.
 */
static int is_time_macro(const char *id, size_t n)
{
    return (n == 8 && (!memcmp(id, "__DATE__", 8) || !memcmp(id, "__TIME__", 8))) ||
           (n == 13 && !memcmp(id, "__TIMESTAMP__", 13));
}

static int push_time_macro(struct scanner *s, unsigned line, const char *id, size_t n)
{
    if (s->time_macro_pushed)
        return 0;
    s->time_macro_pushed = 1;
    int rc = push(s, KC_DIR_UNCERTAIN, 0, 0, line, id, n, NULL, 0);
    if (!rc)
        s->out[s->count - 1].time_macro = 1;
    return rc;
}

/* push_time_macro() for a directive's logical line (p, end) that names one outside its literals. */
static int directive_time_macro(struct scanner *s, const char *p, const char *end, unsigned line)
{
    for (const char *q = p; !s->time_macro_pushed && q < end;) {
        if (*q == '"' || *q == '\'') {
            char quote = *q++;
            while (q < end && *q != quote)
                q += *q == '\\' && q + 1 < end ? 2 : 1;
            q++;
        } else if (isalpha((unsigned char)*q) || *q == '_') {
            const char *start = q;
            while (q < end && is_ident((unsigned char)*q))
                q++;
            if (is_time_macro(start, (size_t)(q - start)))
                return push_time_macro(s, line, start, (size_t)(q - start));
        } else {
            q++;
        }
    }
    return 0;
}

/* Whether an identifier just read is a prefix that makes the quote after it a literal's. */
static int literal_prefix(const char *id, size_t n, int *raw)
{
    static const char *const plain[] = {"L", "u", "U", "u8"};
    static const char *const rawp[] = {"R", "LR", "uR", "UR", "u8R"};
    *raw = 0;
    for (size_t i = 0; i < sizeof(rawp) / sizeof(*rawp); i++)
        if (strlen(rawp[i]) == n && !memcmp(rawp[i], id, n))
            return *raw = 1;
    for (size_t i = 0; i < sizeof(plain) / sizeof(*plain); i++)
        if (strlen(plain[i]) == n && !memcmp(plain[i], id, n))
            return 1;
    return 0;
}

static int push(struct scanner *s, int kind, int angle, int computed, unsigned line,
                const char *text, size_t text_n, const char *value, size_t value_n)
{
    kc_directive *grown = kc_grow(s->out, &s->cap, s->count, sizeof(*grown), 16);
    if (!grown)
        return KCACHE_ENOMEM;
    s->out = grown;
    kc_directive *d = &s->out[s->count];
    memset(d, 0, sizeof(*d));
    d->kind = kind;
    d->angle = angle;
    d->computed = computed;
    d->line = line;
    d->text = kc_memdup(text, text_n);
    d->value = value ? kc_memdup(value, value_n) : NULL;
    if (kind != KC_DIR_DEFINE && kind != KC_DIR_CONDITION && !computed && text_n) {
        /* The first delimited occurrence after the directive's start is the
         * one parsed: comments inside a directive before its operand do not
         * happen in real code, and if one did, the spelling would not be
         * found delimited here and is not rewritten in place. */
        char open = angle ? '<' : '"', close = angle ? '>' : '"';
        for (size_t j = s->find_from; j + text_n + 2 <= s->i; j++) {
            if (s->t[j] == open && s->t[j + 1 + text_n] == close &&
                memcmp(s->t + j + 1, text, text_n) == 0) {
                d->at = j + 1;
                d->exact = 1;
                s->find_from = j + text_n + 2;
                break;
            }
        }
    }
    if (!d->text || (value && !d->value)) {
        free(d->text);
        free(d->value);
        return KCACHE_ENOMEM;
    }
    s->count++;
    return 0;
}

/*
 * Collects one directive's logical line into b: splices joined, comments
 * replaced by a space (a block comment may carry the line on), literals kept.
 */
static int logical_line(struct scanner *s, kc_buf *b)
{
    b->size = 0;
    int after_ident = 0;
    for (int c; (c = peek(s)) >= 0 && c != '\n';) {
        if (!after_ident && (isdigit(c) || (c == '.' && isdigit(peek2(s))))) {
            int rc = skip_pp_number(s, b);
            if (rc)
                return rc;
            continue;
        }
        after_ident = is_ident(c);
        if (c == '/' && peek2(s) == '*') {
            skip_block_comment(s);
            c = ' ';
        } else if (c == '/' && peek2(s) == '/') {
            skip_line_comment(s);
            break;
        } else if (c == '"' || c == '\'') {
            size_t start = s->i;
            skip_quoted(s);
            if (kc_buf_append(b, s->t + start, s->i - start))
                return KCACHE_ENOMEM;
            continue;
        } else {
            advance(s);
        }
        if (kc_buf_put(b, (char)c))
            return KCACHE_ENOMEM;
    }
    return 0;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\f' || *p == '\v' || *p == '\r'))
        p++;
    return p;
}

/* The end of p..end without its trailing white space. */
static const char *trim_end(const char *p, const char *end)
{
    while (end > p && isspace((unsigned char)end[-1]))
        end--;
    return end;
}

/* Parses "x" or <x> at p. Returns the end, or NULL if there is neither. */
static const char *header_name(const char *p, const char *end, const char **name, size_t *n,
                               int *angle)
{
    if (p >= end || (*p != '"' && *p != '<'))
        return NULL;
    char close = *p == '"' ? '"' : '>';
    const char *q = memchr(p + 1, close, (size_t)(end - p - 1));
    if (!q)
        return NULL;
    *angle = close == '>';
    *name = p + 1;
    *n = (size_t)(q - p - 1);
    return q + 1;
}

/*
 * Looks through an #if/#elif condition or a #define body for what can probe
 * a file: __has_include("x") and __has_include(<x>) are probes; any other
 * operand (a macro, a parameter) is not something kcache can follow, except
 * inside a function-like #define, whose calls are recorded instead: NAME(arg)
 * anywhere in a condition or a body is kept, and the resolver probes arg
 * when NAME turns out to wrap __has_include. __has_include_next is never
 * followed. An operand-less __has_include in a #define (an alias for it) is
 * uncertain; in a condition it can only be defined(__has_include). What a
 * #define's body probes is marked in_macro: it is evaluated where the macro
 * is expanded, not where it is defined.
 */
/* Whether a..a+n is one of the parameters of the function-like #define being scanned. */
static int is_param(const struct scanner *s, const char *a, size_t n)
{
    if (n == 11 && !memcmp(a, "__VA_ARGS__", 11) && s->params &&
        memchr(s->params, '.', (size_t)(s->params_end - s->params)))
        return 1;
    for (const char *q = s->params; n && q && q < s->params_end;) {
        if (!is_ident((unsigned char)*q)) {
            q++;
            continue;
        }
        const char *id = q;
        while (q < s->params_end && is_ident((unsigned char)*q))
            q++;
        if ((size_t)(q - id) == n && !memcmp(id, a, n))
            return 1;
    }
    return 0;
}

static int scan_condition(struct scanner *s, const char *p, const char *end, unsigned line,
                          int in_define)
{
    static const char tok[] = "__has_include";
    const size_t tn = sizeof(tok) - 1;
    int func_body = in_define && s->count && s->out[s->count - 1].kind == KC_DIR_FUNC_DEFINE &&
                    s->out[s->count - 1].line == line;
    for (const char *q = p; q < end; q++) {
        if (*q == '"' || (*q == '\'' && !(q > p && is_ident((unsigned char)q[-1])))) {
            /* A literal's text probes nothing. */
            for (const char *l = q + 1; l < end; l++) {
                if (*l == '\\' && l + 1 < end) {
                    l++;
                } else if (*l == *q) {
                    q = l;
                    break;
                }
            }
            continue;
        }
        if (!(isalpha((unsigned char)*q) || *q == '_') || (q > p && is_ident((unsigned char)q[-1])))
            continue;
        const char *id = q;
        while (q < end && is_ident((unsigned char)*q))
            q++;
        size_t idn = (size_t)(q - id);
        const char *r = skip_ws(q, end);
        q--;
        int rc = 0;
        if ((idn == tn || idn == tn + 5) && !memcmp(id, tok, tn)) {
            if (idn == tn + 5 && memcmp(id + tn, "_next", 5) != 0)
                continue;
            if (idn == tn + 5) {
                rc = push(s, KC_DIR_UNCERTAIN, 0, 0, line, "__has_include_next", 18, NULL, 0);
            } else if (r >= end || *r != '(') {
                if (in_define)
                    rc = push(s, KC_DIR_UNCERTAIN, 0, 0, line, "__has_include as a macro", 24,
                              NULL, 0);
            } else {
                const char *name;
                size_t n;
                int angle;
                const char *a = skip_ws(r + 1, end);
                const char *after = header_name(a, end, &name, &n, &angle);
                if (after && (after = skip_ws(after, end)) < end && *after == ')') {
                    rc = push(s, KC_DIR_HAS_INCLUDE, angle, 0, line, name, n, NULL, 0);
                    if (!rc)
                        s->out[s->count - 1].in_macro = in_define;
                }
                else if (!func_body)
                    rc = push(s, KC_DIR_UNCERTAIN, 0, 0, line,
                              "__has_include of something other than a literal", 47, NULL, 0);
            }
        } else if (r < end && *r == '(' && !(idn == 7 && !memcmp(id, "defined", 7))) {
            /* NAME(arg): the argument up to the matching parenthesis. */
            int depth = 0;
            const char *a = r + 1, *e = a;
            for (; e < end; e++) {
                if (*e == '(')
                    depth++;
                else if (*e == ')' && depth-- == 0)
                    break;
            }
            if (e < end) {
                const char *as = skip_ws(a, e), *ae = e;
                while (ae > as && isspace((unsigned char)ae[-1]))
                    ae--;
                /* A parameter handed on (#define F(x) W(x)): F wraps W, and F's
                 * own calls are probed where they are made. */
                if (func_body && is_param(s, as, (size_t)(ae - as)))
                    continue;
                rc = push(s, KC_DIR_CALL, 0, 0, line, id, idn, as, (size_t)(ae - as));
                if (!rc)
                    s->out[s->count - 1].in_macro = in_define;
            }
        }
        if (rc)
            return rc;
    }
    return 0;
}

static int parse_directive(struct scanner *s, const char *p, const char *end, unsigned line)
{
    p = skip_ws(p, end);
    const char *word = p;
    while (p < end && is_ident((unsigned char)*p))
        p++;
    size_t wn = (size_t)(p - word);
    p = skip_ws(p, end);
    int kind = 0;
    if ((wn == 7 && !memcmp(word, "include", 7)) || (wn == 6 && !memcmp(word, "import", 6)))
        kind = KC_DIR_INCLUDE;
    else if (wn == 12 && !memcmp(word, "include_next", 12))
        kind = KC_DIR_INCLUDE_NEXT;
    if (kind) {
        const char *name;
        size_t n;
        int angle;
        if (header_name(p, end, &name, &n, &angle))
            return push(s, kind, angle, 0, line, name, n, NULL, 0);
        const char *e = trim_end(p, end);
        return e > p ? push(s, kind, 0, 1, line, p, (size_t)(e - p), NULL, 0) : 0;
    }
    int is_define = wn == 6 && !memcmp(word, "define", 6);
    const char *cond = p; /* where __has_include and calls are looked for */
    if (is_define) {
        const char *name = p;
        while (p < end && is_ident((unsigned char)*p))
            p++;
        if (p == name)
            return 0;
        size_t nn = (size_t)(p - name);
        if (p < end && *p == '(') {
            /* Function-like: never names a header alone, but may wrap __has_include. */
            const char *close = memchr(p, ')', (size_t)(end - p));
            if (!close)
                return 0;
            const char *body = skip_ws(close + 1, end);
            const char *e = trim_end(body, end);
            int rc = push(s, KC_DIR_FUNC_DEFINE, 0, 0, line, name, nn, body, (size_t)(e - body));
            if (rc)
                return rc;
            if (!(s->out[s->count - 1].params = kc_memdup(p + 1, (size_t)(close - p - 1))))
                return KCACHE_ENOMEM;
            s->params = p + 1;
            s->params_end = close;
            rc = scan_condition(s, body, end, line, 1);
            s->params = s->params_end = NULL;
            return rc;
        } else {
            p = skip_ws(p, end);
            const char *e = trim_end(p, end);
            int rc = push(s, KC_DIR_DEFINE, 0, 0, line, name, nn, p, (size_t)(e - p));
            if (rc)
                return rc;
            cond = p;
        }
    } else if (!((wn == 2 && !memcmp(word, "if", 2)) || (wn == 4 && !memcmp(word, "elif", 4)))) {
        return 0;
    } else {
        const char *e = trim_end(p, end);
        int rc = push(s, KC_DIR_CONDITION, 0, 0, line, p, (size_t)(e - p), NULL, 0);
        if (rc)
            return rc;
    }
    return scan_condition(s, cond, end, line, is_define);
}

int kc_scan(kc_directive **out, size_t *n, const char *text, size_t size)
{
    struct scanner s = {.t = text, .n = size, .line = 1};
    kc_buf b = {0};
    int rc = 0;
    int line_start = 1;
    *out = NULL;
    *n = 0;
    for (int c; (c = peek(&s)) >= 0;) {
        if (c == '\n') {
            advance(&s);
            line_start = 1;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            advance(&s);
        } else if (c == '/' && peek2(&s) == '*') {
            skip_block_comment(&s);
        } else if (c == '/' && peek2(&s) == '/') {
            skip_line_comment(&s);
        } else if (c == '#' && line_start) {
            unsigned line = s.line;
            s.dir_start = s.find_from = s.i;
            advance(&s);
            if ((rc = logical_line(&s, &b)))
                break;
            const char *p = (const char *)b.data;
            if ((rc = parse_directive(&s, p ? p : "", (p ? p : "") + b.size, line)) ||
                (rc = directive_time_macro(&s, p ? p : "", (p ? p : "") + b.size, line)))
                break;
        } else if ((c == '%' && peek2(&s) == ':' && line_start) ||
                   (c == '?' && peek2(&s) == '?' && line_start)) {
            /* %: is #, and ?\?= is # where trigraphs are on: a directive the
             * scanner does not parse, so none of this text is trusted. */
            line_start = 0;
            if ((rc = push(&s, KC_DIR_UNCERTAIN, 0, 0, s.line,
                           c == '%' ? "a %: digraph directive" : "a ?\?= trigraph",
                           c == '%' ? 22 : 14, NULL, 0)))
                break;
            advance(&s);
        } else if (c == '"' || c == '\'') {
            line_start = 0;
            skip_quoted(&s);
        } else if (isdigit(c) || (c == '.' && isdigit(peek2(&s)))) {
            line_start = 0;
            if ((rc = skip_pp_number(&s, NULL)))
                break;
        } else if (is_ident(c)) {
            /* Whole identifiers: a digit inside one starts no number, and a
             * literal's prefix (u8, L, R...) is told from a name ending so. */
            line_start = 0;
            char id[16];
            size_t idn = 0, len = 0;
            for (int d; (d = peek(&s)) >= 0 && is_ident(d); advance(&s), len++)
                if (idn < sizeof(id))
                    id[idn++] = (char)d;
            if (len == idn && is_time_macro(id, idn) &&
                (rc = push_time_macro(&s, s.line, id, idn)))
                break;
            int raw;
            int q = peek(&s);
            if ((q == '"' || q == '\'') && len < 4 && literal_prefix(id, len, &raw)) {
                if (raw && q == '"')
                    skip_raw_string(&s);
                else
                    skip_quoted(&s);
            }
        } else {
            line_start = 0;
            advance(&s);
        }
    }
    kc_buf_free(&b);
    if (rc) {
        kc_directives_free(s.out, s.count);
        return rc;
    }
    *out = s.out;
    *n = s.count;
    return 0;
}

void kc_directives_free(kc_directive *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(d[i].text);
        free(d[i].value);
        free(d[i].params);
    }
    free(d);
}

