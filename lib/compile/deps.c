/* The include scanner and resolver (see deps.h for NVRTC's search order). */
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

/* A compile that reads more files than this is not one kcache can key. */
#define KC_MAX_FILES 20000
/* How deep a computed include's macros are followed. */
#define KC_MAX_EXPANSION 8

/* ---- scanner ---------------------------------------------------------- */

struct scanner {
    const char *t;
    size_t n, i;
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

/* ---- resolver --------------------------------------------------------- */

struct file {
    char *dir;       /* directory quoted includes are searched in first; NULL: none */
    char *name;      /* for messages */
    const char *text;
    size_t size;
};

struct pending {
    char *macro;
    char *dir;
    char *where;
};

struct macro {
    char *name;
    char *value;
};

struct resolver {
    const kc_deps_request *req;
    kc_deps *out;
    size_t cap_deps;
    struct file *files;
    size_t n_files, cap_files, next_file;
    char **visited; /* realpaths already scanned */
    size_t n_visited, cap_visited;
    struct pending *pending;
    size_t n_pending, cap_pending;
    struct macro *macros;
    size_t n_macros, cap_macros;
    char *msg;
    size_t msg_size;
};

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    void *q = kc_grow(*p, cap, n, elem, 16);
    if (!q)
        return KCACHE_ENOMEM;
    *p = q;
    return 0;
}

static void not_hermetic(struct resolver *r, const char *fmt, ...) KC_PRINTF(2, 3);

static void not_hermetic(struct resolver *r, const char *fmt, ...)
{
    if (r->out->not_hermetic)
        return;
    r->out->not_hermetic = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->out->problem, sizeof(r->out->problem), fmt, ap);
    va_end(ap);
}

static char *dirname_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return kc_strdup(".");
    if (slash == path)
        return kc_strdup("/");
    return kc_memdup(path, (size_t)(slash - path));
}

static kc_dep *find_dep(struct resolver *r, const char *spelling)
{
    for (size_t i = 0; i < r->out->n_deps; i++)
        if (strcmp(r->out->deps[i].spelling, spelling) == 0)
            return &r->out->deps[i];
    return NULL;
}

static int add_file(struct resolver *r, const char *dir, const char *name, const char *text,
                    size_t size)
{
    if (r->n_files >= KC_MAX_FILES) {
        not_hermetic(r, "the compile reads more than %s files%s", "20000", "");
        return 0;
    }
    if (grow((void **)&r->files, &r->cap_files, r->n_files, sizeof(*r->files)))
        return KCACHE_ENOMEM;
    struct file *f = &r->files[r->n_files];
    f->dir = dir ? kc_strdup(dir) : NULL;
    f->name = kc_strdup(name);
    f->text = text;
    f->size = size;
    if ((dir && !f->dir) || !f->name) {
        free(f->dir);
        free(f->name);
        return KCACHE_ENOMEM;
    }
    r->n_files++;
    return 0;
}

static int seen_before(struct resolver *r, const char *real, int *seen)
{
    *seen = 0;
    for (size_t i = 0; i < r->n_visited; i++)
        if (strcmp(r->visited[i], real) == 0) {
            *seen = 1;
            return 0;
        }
    if (grow((void **)&r->visited, &r->cap_visited, r->n_visited, sizeof(char *)))
        return KCACHE_ENOMEM;
    if (!(r->visited[r->n_visited] = kc_strdup(real)))
        return KCACHE_ENOMEM;
    r->n_visited++;
    return 0;
}

/* Finds spelling on disk in NVRTC's order; *found is a new path or NULL. */
static int search(struct resolver *r, const char *spelling, int angle, const char *dir,
                  char **found)
{
    const kc_deps_request *q = r->req;
    *found = NULL;
    char path[PATH_MAX];
    struct stat st;
    if (spelling[0] == '/') {
        if (stat(spelling, &st) == 0 && S_ISREG(st.st_mode))
            *found = kc_strdup(spelling);
        return 0;
    }
    for (size_t i = 0; i <= q->n_include_dirs; i++) {
        const char *cand;
        if (i == 0) {
            if (angle || !dir)
                continue;
            cand = dir;
        } else {
            cand = q->include_dirs[i - 1];
        }
        int len = snprintf(path, sizeof(path), "%s/%s", cand, spelling);
        if (len < 0 || (size_t)len >= sizeof(path))
            continue;
        /* A loop of symlinks, a directory, a dangling link: not a header here. */
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            *found = kc_strdup(path);
            return *found ? 0 : KCACHE_ENOMEM;
        }
    }
    return 0;
}

static int new_dep(struct resolver *r, kc_dep **out, const char *spelling, int angle)
{
    if (grow((void **)&r->out->deps, &r->cap_deps, r->out->n_deps, sizeof(kc_dep)))
        return KCACHE_ENOMEM;
    kc_dep *d = &r->out->deps[r->out->n_deps];
    memset(d, 0, sizeof(*d));
    if (!(d->spelling = kc_strdup(spelling)))
        return KCACHE_ENOMEM;
    d->angle = angle;
    d->state = KC_DEP_ABSENT;
    r->out->n_deps++;
    *out = d;
    return 0;
}

/*
 * Resolves one spelling seen from a file in `dir`. NVRTC's in-memory headers
 * form one namespace keyed by spelling, so a spelling must mean one file for
 * the whole compile; when it means two, the compile cannot be hermetic.
 */
static int in_memory(const struct resolver *r, const char *spelling)
{
    for (size_t i = 0; i < r->req->n_mem; i++)
        if (strcmp(r->req->mem_names[i], spelling) == 0)
            return 1;
    return 0;
}

/*
 * Every in-memory header is a dependency, read or not (the key covers them
 * all, by name and content), and is scanned. Its own quoted includes have no
 * directory to be searched first: NVRTC gives an in-memory header none.
 * A name given twice: NVRTC takes the first, and so does kcache.
 */
static int add_memory_headers(struct resolver *r)
{
    for (size_t i = 0; i < r->req->n_mem; i++) {
        const char *name = r->req->mem_names[i];
        if (find_dep(r, name))
            continue;
        kc_dep *d;
        int rc = new_dep(r, &d, name, 0);
        if (rc)
            return rc;
        d->state = KC_DEP_USER;
        d->size = strlen(r->req->mem_contents[i]);
        d->content = kc_memdup(r->req->mem_contents[i], d->size);
        d->path = kc_strdup("(in memory)");
        if (!d->content || !d->path)
            return KCACHE_ENOMEM;
        kc_digest(d->digest, d->content, d->size);
        if ((rc = add_file(r, NULL, name, d->content, d->size)))
            return rc;
    }
    return 0;
}

static int resolve(struct resolver *r, const char *spelling, int angle, const char *dir)
{
    char *path = NULL, *real = NULL, *content = NULL;
    size_t size = 0;
    int rc;
    if (!*spelling || in_memory(r, spelling))
        return 0;
    if ((rc = search(r, spelling, angle, dir, &path)))
        return rc;
    kc_dep *d = find_dep(r, spelling);
    if (!path) {
        if (!d)
            rc = new_dep(r, &d, spelling, angle);
        return rc;
    }
    real = realpath(path, NULL);
    if (!real) {
        rc = errno == ENOMEM ? KCACHE_ENOMEM : 0;
        goto out;
    }
    const char *root = r->req->toolkit_root;
    size_t root_n = root ? strlen(root) : 0;
    if (root_n && strncmp(real, root, root_n) == 0 && real[root_n] == '/') {
        if (d && d->state == KC_DEP_USER) {
            not_hermetic(r, "'%s' names a toolkit header and also %s", spelling, d->path);
        } else if (!d || d->state == KC_DEP_ABSENT) {
            if (!d && (rc = new_dep(r, &d, spelling, angle)))
                goto out;
            d->state = KC_DEP_TOOLKIT;
            if (!(d->toolkit_rel = kc_strdup(real + root_n + 1)) ||
                (!d->path && !(d->path = kc_strdup(path))))
                rc = KCACHE_ENOMEM;
        } else if (strcmp(d->toolkit_rel, real + root_n + 1) != 0) {
            not_hermetic(r, "'%s' names two different toolkit headers (%s)", spelling, path);
        }
        goto out;
    }
    if ((rc = kc_read_file(path, KC_MAX_HEADER_SIZE, &content, &size))) {
        if (rc != KCACHE_ENOMEM) {
            snprintf(r->msg, r->msg_size, "cannot read header %s: %s", path,
                     rc == KCACHE_EIO ? strerror(errno)
                                      : "not a regular file of at most 64 MiB");
            rc = KCACHE_EIO;
        }
        goto out;
    }
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, content, size);
    if (d && d->state == KC_DEP_USER) {
        if (memcmp(d->digest, digest, KC_DIGEST_SIZE) != 0)
            not_hermetic(r, "'%s' names two different files (%s and another)", spelling, path);
    } else if (d && d->state == KC_DEP_TOOLKIT) {
        not_hermetic(r, "'%s' names a user header (%s) and also a toolkit header", spelling,
                     path);
    } else {
        if (!d && (rc = new_dep(r, &d, spelling, angle)))
            goto out;
        d->state = KC_DEP_USER;
        memcpy(d->digest, digest, KC_DIGEST_SIZE);
        if (!(d->path = kc_strdup(path))) {
            rc = KCACHE_ENOMEM;
            goto out;
        }
        d->content = content;
        d->size = size;
        content = NULL;
    }
    int seen;
    if ((rc = seen_before(r, real, &seen)) || seen)
        goto out;
    {
        char *fdir = dirname_of(path);
        if (!fdir) {
            rc = KCACHE_ENOMEM;
            goto out;
        }
        /* Scan the copy the compile will be given (the first one found). */
        rc = add_file(r, fdir, path, d->content ? d->content : "", d->content ? d->size : 0);
        free(fdir);
    }
out:
    free(content);
    free(path);
    free(real);
    return rc;
}

static int add_macro(struct resolver *r, const char *name, size_t name_n, const char *value)
{
    if (grow((void **)&r->macros, &r->cap_macros, r->n_macros, sizeof(*r->macros)))
        return KCACHE_ENOMEM;
    struct macro *m = &r->macros[r->n_macros];
    m->name = kc_memdup(name, name_n);
    m->value = kc_strdup(value);
    if (!m->name || !m->value) {
        free(m->name);
        free(m->value);
        return KCACHE_ENOMEM;
    }
    r->n_macros++;
    return 0;
}

static int scan_file(struct resolver *r, size_t index)
{
    kc_directive *d;
    size_t n;
    int rc = kc_scan(&d, &n, r->files[index].text, r->files[index].size);
    if (rc)
        return rc;
    for (size_t i = 0; !rc && i < n; i++) {
        /* r->files may move as resolve() adds files: index it afresh. */
        const char *dir = r->files[index].dir;
        switch (d[i].kind) {
        case KC_DIR_INCLUDE:
        case KC_DIR_HAS_INCLUDE:
            if (!d[i].computed) {
                rc = resolve(r, d[i].text, d[i].angle, dir);
                break;
            }
            if (grow((void **)&r->pending, &r->cap_pending, r->n_pending, sizeof(*r->pending))) {
                rc = KCACHE_ENOMEM;
                break;
            }
            {
                struct pending *p = &r->pending[r->n_pending];
                char where[PATH_MAX + 32];
                snprintf(where, sizeof(where), "%s:%u", r->files[index].name, d[i].line);
                p->macro = kc_strdup(d[i].text);
                p->dir = dir ? kc_strdup(dir) : NULL;
                p->where = kc_strdup(where);
                if (!p->macro || !p->where || (dir && !p->dir)) {
                    free(p->macro);
                    free(p->dir);
                    free(p->where);
                    rc = KCACHE_ENOMEM;
                    break;
                }
                r->n_pending++;
            }
            break;
        case KC_DIR_INCLUDE_NEXT:
            not_hermetic(r, "#include_next <%s> (in %s) cannot be made hermetic", d[i].text,
                         r->files[index].name);
            break;
        case KC_DIR_DEFINE:
            rc = add_macro(r, d[i].text, strlen(d[i].text), d[i].value ? d[i].value : "");
            break;
        }
    }
    kc_directives_free(d, n);
    return rc;
}

/*
 * Works out what a computed include can name: every definition of its macro
 * (from -D or any #define seen, in any branch) followed to a "header" or
 * <header>. Returns 1 with the candidates resolved, 0 if some definition
 * leads nowhere kcache can follow.
 */
static int expand(struct resolver *r, const char *text, const char *dir, int depth, int *rc)
{
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    const char *name;
    size_t n;
    int angle;
    const char *end = p + strlen(p);
    const char *after = header_name(p, end, &name, &n, &angle);
    if (after) {
        if (*skip_ws(after, end))
            return 0;
        char *spelling = kc_memdup(name, n);
        if (!spelling) {
            *rc = KCACHE_ENOMEM;
            return 0;
        }
        *rc = resolve(r, spelling, angle, dir);
        free(spelling);
        return *rc == 0;
    }
    const char *id = p;
    while (is_ident((unsigned char)*p))
        p++;
    size_t id_n = (size_t)(p - id);
    if (!id_n || *skip_ws(p, end) || depth >= KC_MAX_EXPANSION)
        return 0;
    int candidates = 0;
    /* -D on the command line: the last definition of a name is the one in force. */
    for (size_t i = r->req->n_defines; i-- > 0;) {
        const char *def = r->req->defines[i];
        const char *eq = strchr(def, '=');
        size_t dn = eq ? (size_t)(eq - def) : strlen(def);
        if (dn != id_n || memcmp(def, id, id_n) != 0)
            continue;
        if (!expand(r, eq ? eq + 1 : "1", dir, depth + 1, rc))
            return 0;
        candidates++;
        break;
    }
    for (size_t i = 0; i < r->n_macros; i++) {
        if (strlen(r->macros[i].name) != id_n || memcmp(r->macros[i].name, id, id_n) != 0)
            continue;
        char *value = kc_strdup(r->macros[i].value); /* r->macros may grow meanwhile */
        if (!value) {
            *rc = KCACHE_ENOMEM;
            return 0;
        }
        int ok = expand(r, value, dir, depth + 1, rc);
        free(value);
        if (!ok)
            return 0;
        candidates++;
    }
    return candidates > 0;
}

static void resolver_free(struct resolver *r)
{
    for (size_t i = 0; i < r->n_files; i++) {
        free(r->files[i].dir);
        free(r->files[i].name);
    }
    free(r->files);
    for (size_t i = 0; i < r->n_visited; i++)
        free(r->visited[i]);
    free(r->visited);
    for (size_t i = 0; i < r->n_pending; i++) {
        free(r->pending[i].macro);
        free(r->pending[i].dir);
        free(r->pending[i].where);
    }
    free(r->pending);
    for (size_t i = 0; i < r->n_macros; i++) {
        free(r->macros[i].name);
        free(r->macros[i].value);
    }
    free(r->macros);
}

static int cmp_dep(const void *a, const void *b)
{
    const kc_dep *x = a, *y = b;
    return strcmp(x->spelling, y->spelling);
}

int kc_deps_resolve(kc_deps *out, const kc_deps_request *req, char *msg, size_t msg_size)
{
    struct resolver r = {.req = req, .out = out, .msg = msg, .msg_size = msg_size};
    memset(out, 0, sizeof(*out));
    if (msg && msg_size)
        msg[0] = '\0';
    int rc = add_file(&r, req->no_source_include ? NULL : req->source_dir, "the source",
                      req->source, req->source_size);
    if (!rc)
        rc = add_memory_headers(&r);
    /* -include headers are read as if the main source included them first. */
    for (size_t i = 0; !rc && i < req->n_pre_includes; i++)
        rc = resolve(&r, req->pre_includes[i], 0,
                     req->no_source_include ? NULL : req->source_dir);
    size_t done_pending = 0;
    while (!rc) {
        while (!rc && r.next_file < r.n_files)
            rc = scan_file(&r, r.next_file++);
        if (rc || done_pending == r.n_pending)
            break;
        /* Computed includes, once every #define in reach has been seen. */
        size_t upto = r.n_pending;
        for (; !rc && done_pending < upto; done_pending++) {
            struct pending p = r.pending[done_pending];
            if (!expand(&r, p.macro, p.dir, 0, &rc) && !rc)
                not_hermetic(&r,
                             "%s: '#include %s' names a header kcache cannot work out: define "
                             "that macro with -D as a quoted header name, or include the header "
                             "by name",
                             p.where, p.macro);
        }
    }
    resolver_free(&r);
    if (rc) {
        if (rc == KCACHE_ENOMEM && msg && msg_size)
            snprintf(msg, msg_size, "out of memory resolving includes");
        kc_deps_free(out);
        return rc;
    }
    if (out->n_deps)
        qsort(out->deps, out->n_deps, sizeof(*out->deps), cmp_dep);
    return 0;
}

void kc_deps_free(kc_deps *deps)
{
    for (size_t i = 0; i < deps->n_deps; i++) {
        free(deps->deps[i].spelling);
        free(deps->deps[i].content);
        free(deps->deps[i].toolkit_rel);
        free(deps->deps[i].path);
    }
    free(deps->deps);
    deps->deps = NULL;
    deps->n_deps = 0;
}
