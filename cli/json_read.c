/* A recursive-descent JSON reader (RFC 8259) for request files. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_read.h"

/* A request list nests three deep; anything far deeper is not one. */
#define JSON_MAX_DEPTH 64

struct parser {
    const char *p, *end;
    int line;
    char *err;
    size_t err_size;
    int failed;
};

static void fail(struct parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return;
    ps->failed = 1;
    int n = snprintf(ps->err, ps->err_size, "line %d: ", ps->line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < ps->err_size)
        vsnprintf(ps->err + n, ps->err_size - (size_t)n, fmt, ap);
    va_end(ap);
}

static void skip_space(struct parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) {
        if (*ps->p == '\n')
            ps->line++;
        ps->p++;
    }
}

static json_value *new_value(struct parser *ps, json_type type)
{
    json_value *v = calloc(1, sizeof(*v));
    if (!v) {
        fail(ps, "out of memory");
        return NULL;
    }
    v->type = type;
    v->line = ps->line;
    return v;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at ps->p (on the opening quote), decoded; NULL on error. */
static char *parse_string(struct parser *ps)
{
    ps->p++;
    /* The decoded text is never longer than the escaped one. */
    const char *q = ps->p;
    while (q < ps->end && *q != '"') {
        if (*q == '\\' && q + 1 < ps->end)
            q++;
        q++;
    }
    if (q >= ps->end) {
        fail(ps, "a string is not closed");
        return NULL;
    }
    char *s = malloc((size_t)(q - ps->p) + 1), *o = s;
    if (!s) {
        fail(ps, "out of memory");
        return NULL;
    }
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p++;
        if (c < 0x20) {
            fail(ps, "a control character inside a string");
            goto bad;
        }
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        char e = *ps->p++;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (ps->end - ps->p < 4 || hex4(ps->p, &cp)) {
                fail(ps, "\\u wants four hex digits");
                goto bad;
            }
            ps->p += 4;
            if (cp >= 0xd800 && cp <= 0xdbff && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
                ps->p[1] == 'u' && !hex4(ps->p + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                ps->p += 6;
            } else if (cp >= 0xd800 && cp <= 0xdfff) {
                fail(ps, "a lone surrogate in \\u");
                goto bad;
            }
            if (cp == 0) {
                fail(ps, "\\u0000 cannot be part of a name or an option");
                goto bad;
            }
            /* "\uXXXX" is six bytes; its UTF-8 at most four (a pair: twelve). */
            o += put_utf8(o, cp);
            break;
        }
        default:
            fail(ps, "'\\%c' is not a JSON escape", e);
            goto bad;
        }
    }
    ps->p++;
    *o = '\0';
    return s;
bad:
    free(s);
    return NULL;
}

static json_value *parse_value(struct parser *ps, int depth);

static int append(struct parser *ps, json_value *v, char *key, json_value *item)
{
    json_value **items = realloc(v->items, (v->n + 1) * sizeof(*items));
    if (!items) {
        fail(ps, "out of memory");
        return -1;
    }
    v->items = items;
    if (v->type == JSON_OBJECT) {
        char **keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
        if (!keys) {
            fail(ps, "out of memory");
            return -1;
        }
        v->keys = keys;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 0;
}

static json_value *parse_container(struct parser *ps, int depth, json_type type)
{
    char close = type == JSON_ARRAY ? ']' : '}';
    json_value *v = new_value(ps, type);
    if (!v)
        return NULL;
    ps->p++;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        skip_space(ps);
        if (type == JSON_OBJECT) {
            if (ps->p >= ps->end || *ps->p != '"') {
                fail(ps, "expected a quoted name");
                break;
            }
            if (!(key = parse_string(ps)))
                break;
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                fail(ps, "expected ':' after \"%s\"", key);
                free(key);
                break;
            }
            ps->p++;
        }
        json_value *item = parse_value(ps, depth + 1);
        if (!item || append(ps, v, key, item)) {
            free(key);
            json_free(item);
            break;
        }
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return v;
        }
        fail(ps, "expected ',' or '%c'", close);
        break;
    }
    json_free(v);
    return NULL;
}

static json_value *parse_value(struct parser *ps, int depth)
{
    skip_space(ps);
    if (depth > JSON_MAX_DEPTH) {
        fail(ps, "nested too deep");
        return NULL;
    }
    if (ps->p >= ps->end) {
        fail(ps, "the document ends where a value should be");
        return NULL;
    }
    static const struct {
        const char *word;
        json_type type;
        int boolean;
    } words[] = {{"null", JSON_NULL, 0}, {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i].word);
        if ((size_t)(ps->end - ps->p) >= n && !memcmp(ps->p, words[i].word, n)) {
            json_value *v = new_value(ps, words[i].type);
            if (v)
                v->boolean = words[i].boolean;
            ps->p += n;
            return v;
        }
    }
    char c = *ps->p;
    if (c == '{')
        return parse_container(ps, depth, JSON_OBJECT);
    if (c == '[')
        return parse_container(ps, depth, JSON_ARRAY);
    if (c == '"') {
        json_value *v = new_value(ps, JSON_STRING);
        if (v && !(v->string = parse_string(ps))) {
            free(v);
            return NULL;
        }
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t n = 0;
        while (ps->p + n < ps->end && n < sizeof(buf) - 1 && strchr("+-.eE0123456789", ps->p[n]))
            n++;
        memcpy(buf, ps->p, n);
        buf[n] = '\0';
        char *end;
        double d = strtod(buf, &end);
        if (end != buf + n) {
            fail(ps, "'%s' is not a number", buf);
            return NULL;
        }
        json_value *v = new_value(ps, JSON_NUMBER);
        if (v)
            v->number = d;
        ps->p += n;
        return v;
    }
    fail(ps, "unexpected '%c'", c);
    return NULL;
}

json_value *json_parse(const char *text, size_t size, char *err, size_t err_size)
{
    struct parser ps = {text, text + size, 1, err, err_size, 0};
    if (memchr(text, '\0', size)) {
        snprintf(err, err_size, "a NUL byte: not a JSON text");
        return NULL;
    }
    json_value *v = parse_value(&ps, 0);
    if (v) {
        skip_space(&ps);
        if (ps.p < ps.end) {
            fail(&ps, "text after the end of the document");
            json_free(v);
            v = NULL;
        }
    }
    return v;
}

void json_free(json_value *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        if (v->keys)
            free(v->keys[i]);
        json_free(v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->string);
    free(v);
}

const json_value *json_get(const json_value *object, const char *key)
{
    if (!object || object->type != JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < object->n; i++)
        if (!strcmp(object->keys[i], key))
            return object->items[i];
    return NULL;
}

const char *json_type_name(json_type type)
{
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array",
                                        "an object"};
    return type <= JSON_OBJECT ? names[type] : "?";
}
