/*
 * compile --from FILE: a request list for CI matrices, one JSON document:
 *
 *   {"requests": [
 *     {"source": "kernels/saxpy.cu", "arch": ["sm_80", "sm_90"]},
 *     {"source": "kernels/gemm.cu", "arch": "sm_90", "kind": "cubin",
 *      "name_exprs": ["gemm<float, 16>"], "options": ["-DTILE=16"]}
 *   ]}
 *
 * (a bare array of requests is read the same). A relative source is found
 * beside the request file, as compile_commands.json's entries are found from
 * their "directory": the list works from wherever CI runs it. The command's
 * own options (--arch, -I, -D, --std, --name-expr, -- ...) apply to every
 * request; a request's arch replaces --arch, its options and name
 * expressions come after the command's. Unknown fields are refused: a typo
 * must not silently drop an option from a whole matrix.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compile_args.h"
#include "json_read.h"

/* A request list is small; this bounds what a wrong file can make us read. */
#define FROM_MAX_SIZE (16u << 20)

static char *read_all(const char *path, size_t *size, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(FROM_MAX_SIZE + 1);
    size_t n = text ? fread(text, 1, FROM_MAX_SIZE + 1, f) : 0;
    int bad = !text || ferror(f) || n > FROM_MAX_SIZE;
    if (bad)
        snprintf(err, err_size, "cannot read %s: %s", path,
                 !text ? "out of memory" : n > FROM_MAX_SIZE ? "larger than 16 MiB" : "read error");
    fclose(f);
    if (bad) {
        free(text);
        return NULL;
    }
    *size = n;
    return text;
}

/* A string, or an array of strings, appended to v. 0, or -1 when v is neither. */
static int strings(const json_value *j, const char ***v, size_t *n, int one_allowed)
{
    if (one_allowed && j->type == JSON_STRING)
        return compile_args_push(v, n, j->string);
    if (j->type != JSON_ARRAY)
        return -1;
    for (size_t i = 0; i < j->n; i++)
        if (j->items[i]->type != JSON_STRING || compile_args_push(v, n, j->items[i]->string))
            return -1;
    return 0;
}

static int add_request(struct compile_args *a, const char *verb, const char *dir,
                       const json_value *r, size_t index)
{
    static const char *const known[] = {"source", "arch", "name_exprs", "options", "kind"};
    char where[64];
    snprintf(where, sizeof(where), "request %zu (line %d)", index + 1, r->line);
    if (r->type != JSON_OBJECT)
        return cli_usage_error(verb, "%s: %s: a request is an object, not %s", a->from, where,
                               json_type_name(r->type));
    for (size_t i = 0; i < r->n; i++) {
        size_t k = 0;
        while (k < sizeof(known) / sizeof(known[0]) && strcmp(known[k], r->keys[i]))
            k++;
        if (k == sizeof(known) / sizeof(known[0]))
            return cli_usage_error(verb, "%s: %s: unknown field \"%s\" (fields: source, arch, "
                                   "name_exprs, options, kind)", a->from, where, r->keys[i]);
    }
    const json_value *source = json_get(r, "source");
    if (!source || source->type != JSON_STRING || !source->string[0])
        return cli_usage_error(verb, "%s: %s: give the kernel's file as \"source\"", a->from,
                               where);
    struct compile_unit *grown = realloc(a->units, (a->n_units + 1) * sizeof(*grown));
    if (!grown)
        return cli_error("out of memory");
    a->units = grown;
    struct compile_unit *u = &a->units[a->n_units++];
    memset(u, 0, sizeof(*u));
    u->kind = a->kind;
    if (source->string[0] == '/' || !dir) {
        u->source = source->string;
    } else {
        size_t n = strlen(dir) + strlen(source->string) + 2;
        char *path = malloc(n);
        if (path)
            snprintf(path, n, "%s/%s", dir, source->string);
        if (!(u->source = compile_args_own(a, path)))
            return cli_error("out of memory");
    }
    const json_value *v;
    if ((v = json_get(r, "arch"))) {
        if (strings(v, &u->archs, &u->n_archs, 1) || !u->n_archs)
            return cli_usage_error(verb, "%s: %s: \"arch\" is an architecture or a list of "
                                   "them, e.g. [\"sm_80\", \"sm_90\"]", a->from, where);
        for (size_t i = 0; i < u->n_archs; i++)
            if (compile_args_check_arch(verb, u->archs[i], where) >= 0)
                return CLI_USAGE;
    } else {
        for (size_t k = 0; k < a->n_archs; k++)
            compile_args_push(&u->archs, &u->n_archs, a->archs[k]);
    }
    for (size_t k = 0; k < a->n_nvrtc; k++)
        compile_args_push(&u->options, &u->n_options, a->nvrtc[k]);
    if ((v = json_get(r, "options")) && strings(v, &u->options, &u->n_options, 0))
        return cli_usage_error(verb, "%s: %s: \"options\" is a list of NVRTC options, e.g. "
                               "[\"-DTILE=16\"]", a->from, where);
    for (size_t k = 0; k < a->n_exprs; k++)
        compile_args_push(&u->exprs, &u->n_exprs, a->exprs[k]);
    if ((v = json_get(r, "name_exprs")) && strings(v, &u->exprs, &u->n_exprs, 0))
        return cli_usage_error(verb, "%s: %s: \"name_exprs\" is a list of name expressions, "
                               "e.g. [\"gemm<float, 16>\"]", a->from, where);
    if ((v = json_get(r, "kind")) &&
        (v->type != JSON_STRING || kcache_kind_parse(&u->kind, v->string)))
        return cli_usage_error(verb, "%s: %s: \"kind\" is \"cubin\", \"ptx\" or \"ltoir\"",
                               a->from, where);
    return -1;
}

int compile_from_read(struct compile_args *a, const char *verb)
{
    char err[600];
    size_t size = 0;
    char *text = read_all(a->from, &size, err, sizeof(err));
    if (!text)
        return cli_usage_error(verb, "--from: %s", err);
    json_value *doc = json_parse(text, size, err, sizeof(err));
    free(text);
    if (!doc)
        return cli_usage_error(verb, "%s is not JSON: %s", a->from, err);
    a->request_doc = doc;
    const json_value *list = doc->type == JSON_ARRAY ? doc : json_get(doc, "requests");
    if (!list || list->type != JSON_ARRAY)
        return cli_usage_error(verb, "%s: give the requests as a list, {\"requests\": [...]}",
                               a->from);
    if (list->n == 0)
        return cli_usage_error(verb, "%s lists no request", a->from);
    /* Relative sources are beside the list. */
    char *dir = NULL;
    const char *slash = strrchr(a->from, '/');
    if (slash && !(dir = strndup(a->from, slash == a->from ? 1 : (size_t)(slash - a->from))))
        return cli_error("out of memory");
    compile_args_own(a, dir);
    for (size_t i = 0; i < list->n; i++) {
        int status = add_request(a, verb, dir, list->items[i], i);
        if (status >= 0)
            return status;
    }
    return -1;
}

void compile_from_free(struct compile_args *a)
{
    json_free(a->request_doc);
    a->request_doc = NULL;
}
