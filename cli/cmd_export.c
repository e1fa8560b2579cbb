/* kcache export: a bundle for another machine, or plain files for other tools. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kcache/bundle.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache export OUT.kcache [--arch A] [--kind K] [--namespace NS] [--since AGE]\n"
    "                                [--sign] [--json]\n"
    "       kcache export --dir DIR [--arch A] [--kind K] [--namespace NS] [--since AGE]\n"
    "                               [--json]\n"
    "\n"
    "Writes the selected entries to a bundle, itself a kcache database that\n"
    "'kcache import' checks and merges on another machine (OUT is replaced whole).\n"
    "The bundle is signed whenever remote_secret is set (the shared tier's secret):\n"
    "an import with that secret refuses it if it was changed after signing.\n"
    "With --dir, writes plain files instead: DIR/ARCH/NAME-KEY.cubin|.ptx|.ltoir\n"
    "and DIR/manifest.json describing each.\n"
    "\n"
    "      --arch A     only this architecture\n"
    "      --kind K     only cubin, ptx or ltoir\n"
    "      --namespace NS  only what callers stored under their own keys in NS\n"
    "                   (cuda.core, triton, ...)\n"
    "      --since AGE  only entries created in the last AGE (7d, 12h)\n"
    "      --dir DIR    plain files and a manifest instead of a bundle\n"
    "      --sign       fail unless the bundle can be signed (remote_secret set)\n"
    "      --json       report as JSON\n"
    "  -h, --help       this text\n";


/* A file name from anything: letters, digits, '.', '_' and '-' survive, the rest is '_'. */
static void safe_name(char *out, size_t size, const char *name, int strip_ext)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    size_t n = strlen(base);
    const char *dot = strip_ext ? strrchr(base, '.') : NULL;
    if (dot && dot != base)
        n = (size_t)(dot - base);
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < size; i++) {
        char c = base[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        out[o++] = ok ? c : '_';
    }
    if (o == 0 || out[0] == '.')
        out[o ? 0 : o++] = '_';
    out[o] = '\0';
}

/* A directory to write in, made if need be: refused when another user could change it. */
static int make_dir(const char *path)
{
    char err[512];
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return cli_error("cannot create %s: %s", path, strerror(errno));
    return kcache_dir_check(path, err, sizeof(err)) ? cli_error("%s", err) : CLI_OK;
}

/* Each file whole, never through a link planted at its name (kcache_file_write()). */
static int write_all(const char *path, const void *data, size_t size)
{
    char err[512];
    return kcache_file_write(path, data, size, 0666, 0, err, sizeof(err)) ? cli_error("%s", err)
                                                                           : CLI_OK;
}

/* One entry's file in dir, and its row of the manifest j: CLI_OK, or the status (reported). */
static int export_one(cli_json *j, const kcache_entry *e, const char *dir, char *path,
                      size_t path_size)
{
    int ret;
    char hex[KCACHE_KEY_HEX_SIZE], digest[65], arch[64], name[96], rel[320];
    const char *kind = kcache_kind_name(e->kind);
    kcache_key_hex(hex, &e->key);
    for (int b = 0; b < 32; b++)
        snprintf(digest + 2 * b, 3, "%02x", e->digest[b]);
    safe_name(arch, sizeof(arch), e->arch, 0);
    safe_name(name, sizeof(name), e->name, 1);
    /* The whole key: two keys may share any prefix, and one file would replace the
     * other with the manifest still naming both. */
    snprintf(rel, sizeof(rel), "%s/%s-%s.%s", arch, name, hex, kind ? kind : "bin");
    snprintf(path, path_size, "%s/%s", dir, arch);
    if (!(ret = make_dir(path))) {
        snprintf(path, path_size, "%s/%s", dir, rel);
        ret = write_all(path, e->data, e->size);
    }
    if (!ret) {
        cli_json_object_begin(j, NULL);
        cli_json_string(j, "file", rel);
        cli_json_string(j, "key", hex);
        cli_json_string(j, "kind", kind ? kind : "");
        cli_json_string(j, "arch", e->arch);
        cli_json_string(j, "name", e->name);
        cli_json_uint(j, "size", e->size);
        cli_json_string(j, "blake2b", digest);
        cli_json_int(j, "created_ms", e->created_at);
        cli_json_string(j, "toolchain", e->toolchain);
        cli_json_pairs(j, "names", "expression", e->name_exprs, "lowered", e->lowered_names,
                       e->n_names);
        cli_json_object_end(j);
    }
    return ret;
}

static int export_dir(kcache_store *store, const kcache_filter *f, const char *dir, int json)
{
    kcache_key *keys = NULL;
    size_t n_keys = 0;
    char *path = NULL;
    FILE *manifest = NULL;
    char *text = NULL;
    size_t text_size = 0;
    int ret = CLI_OK;
    uint64_t written = 0, bytes = 0, left_out = 0;
    size_t path_size = strlen(dir) + 256;
    if (kcache_store_list_keys(&keys, &n_keys, store, f)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
        goto out;
    }
    if (!(path = malloc(path_size))) {
        ret = cli_error("out of memory");
        goto out;
    }
    if ((ret = make_dir(dir)))
        goto out;
    /* Made in memory, written as every file is (write_all()). */
    if (!(manifest = open_memstream(&text, &text_size))) {
        ret = cli_error("out of memory");
        goto out;
    }
    cli_json j;
    cli_json_init(&j, manifest);
    cli_json_object_begin(&j, NULL);
    cli_json_string(&j, "kcache_version", kcache_version());
    cli_json_array_begin(&j, "entries");
    for (size_t i = 0; i < n_keys; i++) {
        cli_progress(NULL, "exporting", i, n_keys);
        kcache_entry *e = NULL;
        int rc = kcache_store_get(&e, store, &keys[i], KCACHE_GET_NO_TOUCH);
        if (rc == KCACHE_ENOTFOUND) {
            /* Deleted since it was listed: by another process (a prune, a clear), or by
             * the store because it was damaged, which the store's own warning says. */
            left_out++;
            continue;
        }
        if (rc) {
            ret = cli_error("%s", kcache_store_errmsg(store));
            break;
        }
        if (!(ret = export_one(&j, e, dir, path, path_size))) {
            written++;
            bytes += e->size;
        }
        kcache_entry_free(e);
        if (ret)
            break;
    }
    cli_progress(NULL, "exporting", n_keys, n_keys);
    cli_json_array_end(&j);
    cli_json_object_end(&j);
    cli_json_finish(&j);
    int closed = fclose(manifest);
    manifest = NULL;
    if (closed != 0 && !ret)
        ret = cli_error("out of memory");
    if (!ret) {
        snprintf(path, path_size, "%s/manifest.json", dir);
        ret = write_all(path, text, text_size);
    }
    if (ret)
        goto out;
    if (left_out)
        cli_warn("%llu %s left out: deleted while exporting (by another process, or as "
                 "damaged: see any warning above)", (unsigned long long)left_out,
                 left_out == 1 ? "entry was" : "entries were");
    if (json) {
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "dir", dir);
        cli_json_uint(&j, "entries", written);
        cli_json_uint(&j, "bytes", bytes);
        cli_json_uint(&j, "left_out", left_out);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char a[32], n[48];
        printf("Exported %s (%s) to %s\n", cli_plural(n, sizeof(n), written, "entry", "entries"),
               kcache_format_size(a, sizeof(a), bytes), dir);
    }
out:
    if (manifest)
        fclose(manifest);
    free(text);
    free(path);
    kcache_keys_free(keys);
    return ret;
}

int cmd_export(int argc, char **argv)
{
    static const struct option options[] = {
        {"arch", required_argument, NULL, 'a'},
        {"kind", required_argument, NULL, 'k'},
        {"namespace", required_argument, NULL, 'N'},
        {"since", required_argument, NULL, 's'},
        {"dir", required_argument, NULL, 'd'},
        {"sign", no_argument, NULL, 'S'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    kcache_filter f = KCACHE_FILTER_INIT;
    const char *dir = NULL, *ns = NULL;
    int json = 0, sign = 0, status, c;
    cli_options opts = CLI_OPTIONS(argc, argv, "export", usage_text, ":h", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'a': f.arch = optarg; break;
        case 'k':
            if (kcache_kind_parse(&f.kind, optarg))
                return cli_usage_error("export", "--kind '%s': use cubin, ptx or ltoir", optarg);
            break;
        case 's':
            if ((status = cli_parse_since(&f, "export", optarg)) >= 0)
                return status;
            break;
        case 'N': ns = optarg; break;
        case 'd': dir = optarg; break;
        case 'S': sign = 1; break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    const char *out_path = optind < argc ? argv[optind] : NULL;
    if (optind + (out_path ? 1 : 0) < argc)
        return cli_usage_error("export", "unexpected argument '%s'",
                               argv[optind + (out_path ? 1 : 0)]);
    if (!out_path == !dir)
        return cli_usage_error("export", "give either OUT.kcache or --dir DIR");
    if (ns && cli_namespace_filter(&f.arch, &f.kind, "export", ns))
        return CLI_USAGE;
    if (sign && dir)
        return cli_usage_error("export", "--sign signs a bundle: plain files (--dir) are not");
    kcache_store *store;
    /* Read-write: a damaged entry found on the way is deleted. Never created. */
    if (cli_open_existing(&store, 0))
        return CLI_FAIL;
    if (!store) {
        cli_no_cache("nothing to export");
        return CLI_FAIL;
    }
    int ret = CLI_OK;
    if (dir) {
        ret = export_dir(store, &f, dir, json);
        goto out;
    }
    kcache_bundle_options o = KCACHE_BUNDLE_OPTIONS_INIT;
    kcache_bundle_result r = KCACHE_BUNDLE_RESULT_INIT;
    o.arch = f.arch;
    o.kind = f.kind;
    o.created_since = f.created_since;
    o.progress = cli_progress;
    o.sign = sign;
    if (kcache_bundle_export(&r, store, out_path, &o)) {
        ret = cli_error("%s", kcache_store_errmsg(store));
        goto out;
    }
    if (r.damaged)
        cli_warn("%llu damaged %s left out (and deleted from the cache)",
                 (unsigned long long)r.damaged, r.damaged == 1 ? "entry was" : "entries were");
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "path", out_path);
        cli_json_uint(&j, "entries", r.entries);
        cli_json_uint(&j, "bytes", r.bytes);
        cli_json_uint(&j, "damaged", r.damaged);
        cli_json_bool(&j, "signed", r.signed_by_secret);
        cli_json_object_end(&j);
        cli_json_finish(&j);
    } else {
        char a[32], n[48];
        printf("Exported %s (%s) to %s%s\n",
               cli_plural(n, sizeof(n), r.entries, "entry", "entries"),
               kcache_format_size(a, sizeof(a), r.bytes), out_path,
               r.signed_by_secret ? ", signed with remote_secret" : "");
    }
out:
    kcache_store_close(store);
    return ret;
}
