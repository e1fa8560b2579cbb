/* Writes a compile's key material and its digest, the key (key.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/codec.h"
#include "util/strmap.h"
#include "kcache/compile.h"
#include "compile/key.h"
#include "compile/opts.h"

void kc_key_add(kc_keybuf *k, int tag, const void *data, size_t size)
{
    uint8_t t = (uint8_t)tag;
    if (k->failed || size > UINT32_MAX || kc_buf_append(&k->b, &t, 1) ||
        kc_buf_append_u32(&k->b, (uint32_t)size) || kc_buf_append(&k->b, data, size))
        k->failed = 1;
}

void kc_key_add_str(kc_keybuf *k, int tag, const char *s)
{
    kc_key_add(k, tag, s ? s : "", s ? strlen(s) : 0);
}

void kc_key_finish(const kc_keybuf *k, kcache_key *out)
{
    kc_digest(out->bytes, k->b.data, k->b.size);
}

const char *kc_key_tag_name(int tag)
{
    static const char *const names[] = {
        [KC_TAG_FORMAT] = "format",           [KC_TAG_INPUT_KIND] = "input",
        [KC_TAG_OUTPUT_KIND] = "output",      [KC_TAG_ARCH] = "arch",
        [KC_TAG_NVRTC] = "nvrtc",             [KC_TAG_NVJITLINK] = "nvjitlink",
        [KC_TAG_OPTION] = "option",           [KC_TAG_NAME_EXPR] = "name-expression",
        [KC_TAG_SOURCE_NAME] = "source-name", [KC_TAG_SOURCE] = "source",
        [KC_TAG_HEADER] = "header",           [KC_TAG_EXTRA] = "extra-digest",
        [KC_TAG_LINK_INPUT] = "link-input",   [KC_TAG_TOOLKIT] = "toolkit",
        [KC_TAG_NAMESPACE] = "namespace",     [KC_TAG_CALLER_KEY] = "caller-key",
        [KC_TAG_WORKDIR] = "working-directory", [KC_TAG_TOOLKIT_HANDED] = "toolkit-handed",
        [KC_TAG_TOOLKIT_DIR] = "toolkit-include-dir", [KC_TAG_ENVIRONMENT] = "environment",
        [KC_TAG_ANY_NAME] = "any-source-name", [KC_TAG_BASE_NAME] = "source-base-name",
        [KC_TAG_LOG_TEMPLATE] = "any-source-name-log-template",
        [KC_TAG_HEADER_PATH] = "header-path", [KC_TAG_TOOLKIT_DIR_SPELLED] = "toolkit-include-dir-as-given",
    };
    if (tag <= 0 || (size_t)tag >= sizeof(names) / sizeof(names[0]))
        return NULL;
    return names[tag];
}

/* Renders one field as text: NULs separating parts become spaces. */
struct describe {
    kcache_key_component_fn fn;
    void *ud;
    kc_buf text;
};

static int describe_one(void *ud, int tag, const uint8_t *data, size_t n)
{
    struct describe *d = ud;
    const char *name = kc_key_tag_name(tag);
    d->text.size = 0;
    for (size_t i = 0; i < n; i++) {
        char c = data[i] ? (char)data[i] : ' ';
        if (kc_buf_append(&d->text, &c, 1))
            return KCACHE_ENOMEM;
    }
    if (tag == KC_TAG_EXTRA || tag == KC_TAG_SOURCE || tag == KC_TAG_CALLER_KEY ||
        tag == KC_TAG_HEADER_PATH) {
        /* Digests and a caller's keys are bytes: show them as hex. */
        d->text.size = 0;
        for (size_t i = 0; i < n; i++) {
            char hex[3];
            snprintf(hex, sizeof(hex), "%02x", data[i]);
            if (kc_buf_append(&d->text, hex, 2))
                return KCACHE_ENOMEM;
        }
    }
    if (kc_buf_append(&d->text, "", 1))
        return KCACHE_ENOMEM;
    char unknown[16];
    if (!name) {
        snprintf(unknown, sizeof(unknown), "tag-%d", tag);
        name = unknown;
    }
    return d->fn(d->ud, name, (const char *)d->text.data);
}

KCACHE_API int kcache_key_describe(const void *material, size_t size,
                                   kcache_key_component_fn fn, void *userdata)
{
    if (!fn || (!material && size))
        return KCACHE_EINVAL;
    struct describe d = {fn, userdata, {0}};
    int rc = kc_key_walk(material, size, describe_one, &d);
    kc_buf_free(&d.text);
    return rc;
}

/* ---- what a compile and a link are keyed by ------------------------------ */

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int seal(kc_keybuf *k, kc_buf *material, kcache_key *key)
{
    if (k->failed) {
        kc_buf_free(&k->b);
        return KCACHE_ENOMEM;
    }
    kc_key_finish(k, key);
    *material = k->b;
    return 0;
}

/* What a compile's key and its closures' base key share. */
static int add_compile(kc_keybuf *k, const kc_key_compile *in)
{
    kc_key_add_str(k, KC_TAG_INPUT_KIND, "cuda");
    kc_key_add_str(k, KC_TAG_OUTPUT_KIND, in->output_kind);
    kc_key_add_str(k, KC_TAG_ARCH, in->arch);
    kc_key_add_str(k, KC_TAG_NVRTC, in->nvrtc_id);
    kc_key_add_str(k, KC_TAG_TOOLKIT, in->toolkit_id);
    if (in->workdir)
        kc_key_add_str(k, KC_TAG_WORKDIR, in->workdir);
    for (size_t i = 0; i < in->n_env; i++)
        kc_key_add_str(k, KC_TAG_ENVIRONMENT, in->env[i]);
    for (size_t i = 0; i < in->n_options; i++)
        kc_key_add_str(k, KC_TAG_OPTION, in->options[i]);
    if (in->n_name_exprs) {
        const char **exprs = kc_malloc(in->n_name_exprs * sizeof(*exprs));
        if (!exprs)
            return KCACHE_ENOMEM;
        memcpy(exprs, in->name_exprs, in->n_name_exprs * sizeof(*exprs));
        qsort(exprs, in->n_name_exprs, sizeof(*exprs), cmp_cstr);
        for (size_t i = 0; i < in->n_name_exprs; i++) {
            /* Duplicates do not change the output. */
            if (i == 0 || strcmp(exprs[i], exprs[i - 1]) != 0)
                kc_key_add_str(k, KC_TAG_NAME_EXPR, exprs[i]);
        }
        free(exprs);
    }
    if (in->log_template)
        kc_key_add_str(k, KC_TAG_LOG_TEMPLATE, in->log_template);
    else if (in->any_name)
        kc_key_add(k, KC_TAG_ANY_NAME, "", 0);
    else if (in->base_name)
        kc_key_add_str(k, KC_TAG_BASE_NAME, in->base_name);
    else
        kc_key_add_str(k, KC_TAG_SOURCE_NAME, in->source_name);
    uint8_t digest[KC_DIGEST_SIZE];
    kc_digest(digest, in->source, in->source_size);
    kc_key_add(k, KC_TAG_SOURCE, digest, sizeof(digest));
    return 0;
}

/* A digest as lowercase hex, as a key is written: once per header of every key, so no printf. */
_Static_assert(KC_DIGEST_SIZE == KCACHE_KEY_SIZE, "a digest is written as a key");
static void hex_digest(char out[KCACHE_KEY_HEX_SIZE], const uint8_t digest[KC_DIGEST_SIZE])
{
    kcache_key k;
    memcpy(k.bytes, digest, KC_DIGEST_SIZE);
    kcache_key_hex(out, &k);
}

/*
 * The paths user headers are handed under, as one KC_TAG_HEADER_PATH field
 * (keyfmt.h): most are a directory's spelling followed by the header's
 * canonical name, so each such prefix is written once and each header names
 * its own by number (8 bytes). Written out whole, CuPy's elementwise kernel's
 * CLI hit, which reads the key back, took 4.06 M instructions against 3.66 M
 * so (benchmarks/realtrees/callgrind).
 */
static int header_paths(kc_keybuf *k, const kc_key_compile *in)
{
    const kc_dep *deps = in->deps;
    size_t n_deps = in->n_deps;
    kc_smap seen = {0};
    kc_buf prefixes = {0}, entries = {0};
    uint32_t n_prefixes = 0, n_entries = 0;
    int failed = 0;
    for (size_t i = 0; i < n_deps && !failed; i++) {
        const kc_dep *d = &deps[i];
        if (d->state != KC_DEP_USER || !d->nvpath)
            continue;
        size_t pn = strlen(d->nvpath), nn = strlen(d->name);
        uint32_t code = 0;
        if (pn >= nn && !strcmp(d->nvpath + pn - nn, d->name)) {
            char *prefix = kc_memdup(d->nvpath, pn - nn);
            size_t v;
            if (!prefix) {
                failed = 1;
                break;
            }
            if (!kc_smap_find(&seen, prefix, &v)) {
                v = n_prefixes++;
                failed = kc_smap_put(&seen, prefix, v) ||
                         kc_buf_append(&prefixes, prefix, pn - nn + 1);
            }
            free(prefix);
            code = (uint32_t)v + 1;
        }
        failed = failed || kc_buf_append_u32(&entries, (uint32_t)i) ||
                 kc_buf_append_u32(&entries, code) ||
                 (!code && kc_buf_append(&entries, d->nvpath, pn + 1));
        n_entries++;
    }
    kc_buf field = {0};
    /* What the paths are joined of, whole: a header reached by two paths is labelled by
     * one, and NVRTC may say the other (compile.c). */
    failed = failed || kc_buf_append_u32(&field, (uint32_t)in->n_include_dirs);
    for (size_t i = 0; !failed && i < in->n_include_dirs; i++)
        failed = kc_buf_append(&field, in->include_dirs[i], strlen(in->include_dirs[i]) + 1);
    const char *sd = in->source_dir ? in->source_dir : "";
    failed = failed || kc_buf_append(&field, sd, strlen(sd) + 1) ||
             kc_buf_append_u32(&field, n_prefixes) ||
             kc_buf_append(&field, prefixes.data, prefixes.size) ||
             kc_buf_append_u32(&field, n_entries) ||
             kc_buf_append(&field, entries.data, entries.size);
    if (!failed && n_entries)
        kc_key_add(k, KC_TAG_HEADER_PATH, field.data, field.size);
    kc_buf_free(&field);
    kc_buf_free(&prefixes);
    kc_buf_free(&entries);
    kc_smap_free(&seen);
    return failed ? KCACHE_ENOMEM : 0;
}

int kc_key_encode_compile(kc_buf *material, kcache_key *key, const kc_key_compile *in)
{
    kc_keybuf k = {{0}, 0};
    kc_key_add_str(&k, KC_TAG_FORMAT, KC_KEY_FORMAT);
    if (add_compile(&k, in)) {
        kc_buf_free(&k.b);
        return KCACHE_ENOMEM;
    }
    for (size_t i = 0; i < in->n_tk_dirs; i++)
        kc_key_add_str(&k, KC_TAG_TOOLKIT_DIR, in->tk_dirs[i]);
    for (size_t i = 0; in->tk_spelled && i < in->n_tk_dirs; i++)
        kc_key_add_str(&k, KC_TAG_TOOLKIT_DIR_SPELLED, in->tk_spelled[i]);
    /* Not in the closure's base key: found by the resolution, as the headers are. */
    for (size_t i = 0; i + 1 < in->n_handed; i += 2) {
        kc_buf field = {0};
        if (kc_buf_append(&field, in->handed[i], strlen(in->handed[i]) + 1) ||
            kc_buf_append(&field, in->handed[i + 1], strlen(in->handed[i + 1])))
            k.failed = 1;
        else
            kc_key_add(&k, KC_TAG_TOOLKIT_HANDED, field.data, field.size);
        kc_buf_free(&field);
    }
    for (size_t i = 0; i < in->n_deps; i++) {
        const kc_dep *d = &in->deps[i];
        /* "name\0file\0HEX", "name\0toolkit\0REL" or "name\0absent\0": no limit on the name. */
        char hex[KCACHE_KEY_HEX_SIZE];
        hex_digest(hex, d->digest);
        const char *state = d->state == KC_DEP_USER      ? "file"
                            : d->state == KC_DEP_TOOLKIT ? "toolkit"
                                                         : "absent";
        const char *tail = d->state == KC_DEP_USER ? hex
                           : d->state == KC_DEP_TOOLKIT ? d->toolkit_rel : "";
        kc_buf field = {0};
        if (kc_buf_append(&field, d->name, strlen(d->name) + 1) ||
            kc_buf_append(&field, state, strlen(state) + 1) ||
            kc_buf_append(&field, tail, strlen(tail)))
            k.failed = 1;
        else
            kc_key_add(&k, KC_TAG_HEADER, field.data, field.size);
        kc_buf_free(&field);
    }
    if (in->paths && header_paths(&k, in))
        k.failed = 1;
    if (in->extra_size)
        kc_key_add(&k, KC_TAG_EXTRA, in->extra, in->extra_size);
    return seal(&k, material, key);
}

int kc_key_encode_base(kcache_key *key, const kc_key_compile *in, const char *const *search,
                       const size_t *search_sizes, size_t n_search)
{
    kc_keybuf k = {{0}, 0};
    kc_key_add_str(&k, KC_TAG_FORMAT, KC_KEY_FORMAT " closure-base-1");
    int rc = add_compile(&k, in);
    for (size_t i = 0; !rc && i < n_search; i++)
        kc_key_add(&k, KC_TAG_OPTION, search[i], search_sizes[i]);
    if (!rc && in->extra_size)
        kc_key_add(&k, KC_TAG_EXTRA, in->extra, in->extra_size);
    if (!rc && k.failed)
        rc = KCACHE_ENOMEM;
    if (!rc)
        kc_key_finish(&k, key);
    kc_buf_free(&k.b);
    return rc;
}

int kc_key_encode_link(kc_buf *material, kcache_key *key, const kc_key_link *in)
{
    kc_keybuf k = {{0}, 0};
    kc_key_add_str(&k, KC_TAG_FORMAT, KC_KEY_FORMAT);
    kc_key_add_str(&k, KC_TAG_INPUT_KIND, "link");
    kc_key_add_str(&k, KC_TAG_OUTPUT_KIND, "cubin");
    kc_key_add_str(&k, KC_TAG_ARCH, in->arch);
    kc_key_add_str(&k, KC_TAG_NVJITLINK, in->nvjitlink_id);
    if (in->lto)
        kc_key_add_str(&k, KC_TAG_OPTION, "-lto");
    for (size_t i = 0; i < in->n_options; i++)
        kc_key_add_str(&k, KC_TAG_OPTION, in->options[i] ? in->options[i] : "");
    for (size_t i = 0; i < in->n_inputs; i++) {
        uint8_t d[KC_DIGEST_SIZE];
        char field[16 + 2 * KC_DIGEST_SIZE];
        kc_digest(d, in->data[i], in->sizes[i]);
        int n = snprintf(field, sizeof(field), "%s%c", kcache_kind_name(in->kinds[i]), 0);
        for (int j = 0; j < KC_DIGEST_SIZE; j++)
            n += snprintf(field + n, sizeof(field) - (size_t)n, "%02x", d[j]);
        kc_key_add(&k, KC_TAG_LINK_INPUT, field, (size_t)n);
    }
    return seal(&k, material, key);
}

/* ---- reading key material back ------------------------------------------ */

static void copy_field(char *dst, size_t size, const uint8_t *data, size_t n)
{
    size_t k = n < size - 1 ? n : size - 1;
    memcpy(dst, data, k);
    dst[k] = '\0';
}

/* "spelling\0toolkit\0include/cccl/cub/x.cuh" -> "include/cccl" */
static int toolkit_dir_of(kc_recipe *rc, const uint8_t *data, size_t n)
{
    const char *spelling = (const char *)data;
    size_t sp = strnlen(spelling, n);
    if (sp + 1 >= n)
        return 0;
    const char *state = spelling + sp + 1;
    size_t st = strnlen(state, n - sp - 1);
    if (strncmp(state, "toolkit", st) != 0 || st != 7 || sp + st + 2 >= n)
        return 0;
    const char *rel = state + st + 1;
    size_t rl = n - sp - st - 2;
    if (rl <= sp || memcmp(rel + rl - sp, spelling, sp) != 0 || rel[rl - sp - 1] != '/')
        return 0;
    char dir[4096];
    if (rl - sp - 1 >= sizeof(dir))
        return 0;
    memcpy(dir, rel, rl - sp - 1);
    dir[rl - sp - 1] = '\0';
    for (size_t i = 0; i < rc->n_toolkit_dirs; i++)
        if (!strcmp(rc->toolkit_dirs[i], dir))
            return 0;
    return kc_strv_push(&rc->toolkit_dirs, &rc->n_toolkit_dirs, dir);
}

/* "spelling\0include/crt/host_defines.h" -> the pair, or nothing when it does not parse. */
static int handed_of(kc_recipe *re, const uint8_t *data, size_t n)
{
    size_t sp = strnlen((const char *)data, n);
    if (sp == 0 || sp + 1 >= n || memchr(data + sp + 1, '\0', n - sp - 1))
        return KCACHE_ECORRUPT;
    char *rel = kc_malloc(n - sp);
    if (!rel)
        return KCACHE_ENOMEM;
    memcpy(rel, data + sp + 1, n - sp - 1);
    rel[n - sp - 1] = '\0';
    int rc = kc_strv_push(&re->handed, &re->n_handed, (const char *)data);
    if (!rc)
        rc = kc_strv_push(&re->handed, &re->n_handed, rel);
    free(rel);
    return rc;
}

static int read_u32(const uint8_t *data, size_t n, size_t *at, uint32_t *v)
{
    if (n - *at < 4)
        return 0;
    *v = kc_read_u32(data + *at);
    *at += 4;
    return 1;
}

/* A NUL-ended string at *at, or NULL where the field ends first. */
static const char *read_str(const uint8_t *data, size_t n, size_t *at)
{
    const uint8_t *end = memchr(data + *at, 0, n - *at);
    if (!end)
        return NULL;
    const char *s = (const char *)data + *at;
    *at = (size_t)(end - data) + 1;
    return s;
}

/*
 * KC_TAG_HEADER_PATH (header_paths()) into pairs of a header's name and its
 * path; the names are the KC_TAG_HEADER fields before it, by number. A field
 * that does not parse gives nothing: the rebuild then differs, and says so.
 */
static int header_paths_of(kc_recipe *rc, const uint8_t *data, size_t n)
{
    size_t at = 0;
    uint32_t n_dirs = 0, n_prefixes = 0, n_entries = 0;
    const char **prefixes = NULL;
    int e = 0;
    if (!read_u32(data, n, &at, &n_dirs) || n_dirs > n)
        return 0;
    for (uint32_t i = 0; i <= n_dirs; i++) /* the -I operands and the source's directory */
        if (!read_str(data, n, &at))
            return 0;
    if (!read_u32(data, n, &at, &n_prefixes) || n_prefixes > n)
        return 0;
    if (!(prefixes = kc_calloc(n_prefixes + 1, sizeof(*prefixes))))
        return KCACHE_ENOMEM;
    for (uint32_t i = 0; i < n_prefixes; i++)
        if (!(prefixes[i] = read_str(data, n, &at)))
            goto out;
    if (!read_u32(data, n, &at, &n_entries))
        goto out;
    for (uint32_t i = 0; i < n_entries && !e; i++) {
        uint32_t dep, code;
        const char *whole = NULL;
        if (!read_u32(data, n, &at, &dep) || !read_u32(data, n, &at, &code) ||
            dep >= rc->n_header_names || code > n_prefixes ||
            (!code && !(whole = read_str(data, n, &at))))
            break;
        const char *name = rc->header_names[dep];
        size_t len = (code ? strlen(prefixes[code - 1]) + strlen(name) : strlen(whole)) + 1;
        char *path = kc_malloc(len);
        if (!path) {
            e = KCACHE_ENOMEM;
            break;
        }
        snprintf(path, len, "%s%s", code ? prefixes[code - 1] : whole, code ? name : "");
        if ((e = kc_strv_push(&rc->header_paths, &rc->n_header_paths, name)) ||
            (e = kc_strv_push_owned(&rc->header_paths, &rc->n_header_paths, path)))
            free(path);
    }
out:
    free(prefixes);
    return e;
}

/* One field of the material; text is it whole, NUL-terminated (an option may be 1 MiB). */
static int read_text_field(kc_recipe *rc, int tag, const uint8_t *data, size_t n,
                           const char *text)
{
    switch (tag) {
    case KC_TAG_FORMAT:
        if (!strncmp(text, KC_KEY_FORMAT_FAMILY, strlen(KC_KEY_FORMAT_FAMILY)))
            rc->format = atoi(text + strlen(KC_KEY_FORMAT_FAMILY));
        return 0;
    case KC_TAG_INPUT_KIND: copy_field(rc->input, sizeof(rc->input), data, n); return 0;
    case KC_TAG_OUTPUT_KIND: copy_field(rc->output, sizeof(rc->output), data, n); return 0;
    case KC_TAG_ARCH: copy_field(rc->arch, sizeof(rc->arch), data, n); return 0;
    case KC_TAG_NVRTC: copy_field(rc->nvrtc, sizeof(rc->nvrtc), data, n); return 0;
    case KC_TAG_NVJITLINK: copy_field(rc->nvjitlink, sizeof(rc->nvjitlink), data, n); return 0;
    case KC_TAG_TOOLKIT: copy_field(rc->toolkit, sizeof(rc->toolkit), data, n); return 0;
    case KC_TAG_WORKDIR: copy_field(rc->workdir, sizeof(rc->workdir), data, n); return 0;
    case KC_TAG_SOURCE_NAME:
    case KC_TAG_BASE_NAME: /* a name with this last component gives the same bytes */
        copy_field(rc->source_name, sizeof(rc->source_name), data, n);
        return 0;
    case KC_TAG_OPTION:
        if (!strcmp(text, "-lto") && !strcmp(rc->input, "link")) {
            rc->lto = 1;
            return 0;
        }
        return kc_strv_push(&rc->options, &rc->n_options, text);
    case KC_TAG_NAME_EXPR: return kc_strv_push(&rc->exprs, &rc->n_exprs, text);
    case KC_TAG_HEADER: {
        /* Every header by number, for KC_TAG_HEADER_PATH. */
        int e = kc_strv_push(&rc->header_names, &rc->n_header_names, text);
        return e ? e : toolkit_dir_of(rc, data, n);
    }
    case KC_TAG_TOOLKIT_HANDED: return handed_of(rc, data, n);
    case KC_TAG_TOOLKIT_DIR: return kc_strv_push(&rc->tk_dirs, &rc->n_tk_dirs, text);
    case KC_TAG_TOOLKIT_DIR_SPELLED:
        return kc_strv_push(&rc->tk_spelled, &rc->n_tk_spelled, text);
    case KC_TAG_HEADER_PATH: return header_paths_of(rc, data, n);
    case KC_TAG_LINK_INPUT: return kc_strv_push(&rc->link_kinds, &rc->n_link, text);
    case KC_TAG_ENVIRONMENT: return kc_strv_push(&rc->env, &rc->n_env, text);
    default: return 0;
    }
}

static int read_field(void *ud, int tag, const uint8_t *data, size_t n)
{
    char *text = kc_malloc(n + 1);
    if (!text)
        return KCACHE_ENOMEM;
    copy_field(text, n + 1, data, n);
    int rc = read_text_field(ud, tag, data, n, text);
    free(text);
    return rc;
}

void kc_recipe_free(kc_recipe *rc)
{
    kc_strv_free(rc->options, rc->n_options);
    kc_strv_free(rc->exprs, rc->n_exprs);
    kc_strv_free(rc->toolkit_dirs, rc->n_toolkit_dirs);
    kc_strv_free(rc->handed, rc->n_handed);
    kc_strv_free(rc->tk_dirs, rc->n_tk_dirs);
    kc_strv_free(rc->tk_spelled, rc->n_tk_spelled);
    kc_strv_free(rc->header_paths, rc->n_header_paths);
    kc_strv_free(rc->header_names, rc->n_header_names);
    kc_strv_free(rc->link_kinds, rc->n_link);
    kc_strv_free(rc->env, rc->n_env);
}

int kc_key_decode(kc_recipe *out, const void *material, size_t size)
{
    memset(out, 0, sizeof(*out));
    return kc_key_walk(material, size, read_field, out);
}
