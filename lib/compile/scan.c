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

#include "compile/deps.h"

/* ---- scanner ---------------------------------------------------------- */

struct scanner {
    const char *t;
    size_t n, i;
    size_t dir_start, find_from; /* the directive being parsed, in the original text */
    unsigned line;
    kc_directive *out;
    size_t count, cap;
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

/* The current character after splices, or -1 at the end. */
static int peek(struct scanner *s)
{
    while (skip_splice(s))
        ;
    return s->i < s->n ? (unsigned char)s->t[s->i] : -1;
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

/* Skips a block comment whose "/" is at i. */
static void skip_block_comment(struct scanner *s)
{
    advance(s);
    advance(s);
    while (peek(s) >= 0) {
        if (peek(s) == '*' && peek2(s) == '/') {
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
    if (kind != KC_DIR_DEFINE && !computed && text_n) {
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
    for (int c; (c = peek(s)) >= 0 && c != '\n';) {
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
        char ch = (char)c;
        if (kc_buf_append(b, &ch, 1))
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
        const char *e = end;
        while (e > p && isspace((unsigned char)e[-1]))
            e--;
        return e > p ? push(s, kind, 0, 1, line, p, (size_t)(e - p), NULL, 0) : 0;
    }
    if (wn == 6 && !memcmp(word, "define", 6)) {
        const char *name = p;
        while (p < end && is_ident((unsigned char)*p))
            p++;
        if (p == name || (p < end && *p == '('))
            return 0; /* function-like: never names a header alone */
        size_t nn = (size_t)(p - name);
        p = skip_ws(p, end);
        const char *e = end;
        while (e > p && isspace((unsigned char)e[-1]))
            e--;
        return push(s, KC_DIR_DEFINE, 0, 0, line, name, nn, p, (size_t)(e - p));
    }
    if ((wn == 2 && !memcmp(word, "if", 2)) || (wn == 4 && !memcmp(word, "elif", 4))) {
        static const char tok[] = "__has_include";
        for (const char *q = p; q + sizeof(tok) - 1 <= end; q++) {
            if (memcmp(q, tok, sizeof(tok) - 1) != 0 || (q > p && is_ident((unsigned char)q[-1])))
                continue;
            const char *r = q + sizeof(tok) - 1;
            if (end - r >= 5 && !memcmp(r, "_next", 5))
                r += 5;
            if (r < end && is_ident((unsigned char)*r))
                continue;
            r = skip_ws(r, end);
            if (r >= end || *r != '(')
                continue;
            r = skip_ws(r + 1, end);
            const char *name;
            size_t n;
            int angle;
            if (header_name(r, end, &name, &n, &angle)) {
                int rc = push(s, KC_DIR_HAS_INCLUDE, angle, 0, line, name, n, NULL, 0);
                if (rc)
                    return rc;
            }
        }
    }
    return 0;
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
            if ((rc = parse_directive(&s, p ? p : "", (p ? p : "") + b.size, line)))
                break;
        } else if (c == '"' || c == '\'') {
            line_start = 0;
            skip_quoted(&s);
        } else if (c == 'R' && peek2(&s) == '"' &&
                   (s.i == 0 || !is_ident((unsigned char)s.t[s.i - 1]) ||
                    (s.t[s.i - 1] == '8' || s.t[s.i - 1] == 'L' || s.t[s.i - 1] == 'u' ||
                     s.t[s.i - 1] == 'U'))) {
            line_start = 0;
            advance(&s);
            skip_raw_string(&s);
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
    }
    free(d);
}

