/* kcache inspect: everything kcache knows about one entry, and what is inside its CUBIN. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <kcache/cubin.h>

#include <kcache/compile.h>

#include "cli.h"

static const char usage_text[] =
    "usage: kcache inspect KEY-PREFIX [--log] [--source] [--ptx] [--json]\n"
    "\n"
    "Shows an entry: kind, architecture, sizes, digest, times, toolchain, the key's\n"
    "components, name expressions and their lowered names, the stored inputs and,\n"
    "for a CUBIN, each kernel's registers, shared, local and constant memory and\n"
    "thread limit, read from the ELF file itself. Does not count as a hit.\n"
    "\n"
    "      --log      also the compiler's log\n"
    "      --source   also the text of the stored inputs (sources and headers)\n"
    "      --ptx      also the PTX text (PTX entries)\n"
    "      --json     machine-readable output (see kcache-json(7))\n"
    "  -h, --help     this text\n";

static const char *role_name(int role)
{
    switch (role) {
    case KCACHE_INPUT_SOURCE: return "source";
    case KCACHE_INPUT_HEADER: return "header";
    case KCACHE_INPUT_LINK: return "link";
    }
    return "?";
}

/*
 * The inputs the key was derived from, one a line. The key's encoding belongs
 * to the compile path; until it is decoded here, this shows its size.
 */
struct components {
    cli_json *j;
};

static int print_component(void *userdata, const char *component, const char *value)
{
    struct components *c = userdata;
    if (c->j) {
        cli_json_object_begin(c->j, NULL);
        cli_json_string(c->j, "component", component);
        cli_json_string(c->j, "value", value);
        cli_json_object_end(c->j);
    } else {
        printf("  %-16s %s\n", component, cli_safe(value));
    }
    return 0;
}

/* What the key was derived from, component by component (kcache_key_describe). */
static void print_key_components(const kcache_entry *e, cli_json *j)
{
    struct components c = {j};
    if (j) {
        cli_json_uint(j, "key_material_size", e->key_material_size);
        cli_json_array_begin(j, "key_components");
    } else {
        printf("Key components:\n");
    }
    if (kcache_key_describe(e->key_material, e->key_material_size, print_component, &c) != 0 &&
        !j)
        printf("  (the key material does not parse)\n");
    if (j)
        cli_json_array_end(j);
}

static void print_cubin_json(cli_json *j, const kcache_cubin_info *info)
{
    cli_json_object_begin(j, "cubin");
    cli_json_uint(j, "sm", info->sm);
    cli_json_string(j, "arch", info->arch);
    cli_json_array_begin(j, "kernels");
    for (size_t i = 0; i < info->n_kernels; i++) {
        const kcache_cubin_kernel *k = &info->kernels[i];
        cli_json_object_begin(j, NULL);
        cli_json_string(j, "name", k->name);
        cli_json_uint(j, "registers", k->registers);
        cli_json_uint(j, "shared_bytes", k->shared_bytes);
        cli_json_uint(j, "local_bytes", k->local_bytes);
        cli_json_uint(j, "spill_bytes", k->spill_bytes);
        cli_json_uint(j, "constant_bytes", k->constant_bytes);
        cli_json_uint(j, "param_bytes", k->param_bytes);
        cli_json_uint(j, "max_threads", k->max_threads);
        cli_json_object_end(j);
    }
    cli_json_array_end(j);
    cli_json_object_end(j);
}

static void print_cubin_human(const kcache_cubin_info *info)
{
    printf("\nCUBIN: %s (ELF header), %zu %s\n", cli_safe(info->arch), info->n_kernels,
           info->n_kernels == 1 ? "kernel" : "kernels");
    if (!info->n_kernels)
        return;
    printf("  %5s %9s %9s %9s %9s %7s %11s  %s\n", "REGS", "SHARED", "LOCAL", "SPILL", "CONST",
           "PARAMS", "MAX THREADS", "KERNEL");
    for (size_t i = 0; i < info->n_kernels; i++) {
        const kcache_cubin_kernel *k = &info->kernels[i];
        char mt[16];
        if (k->max_threads)
            snprintf(mt, sizeof(mt), "%u", k->max_threads);
        else
            snprintf(mt, sizeof(mt), "-");
        printf("  %5u %9u %9u %9u %9u %7u %11s  %s\n", k->registers, k->shared_bytes,
               k->local_bytes, k->spill_bytes, k->constant_bytes, k->param_bytes, mt,
               cli_safe(k->name));
    }
}

static void print_json(const kcache_entry *e, const kcache_cubin_info *cubin,
                       const char *cubin_error, int with_source, int with_ptx)
{
    char hex[KCACHE_KEY_HEX_SIZE], digest[65];
    const char *kind = kcache_kind_name(e->kind);
    kcache_key_hex(hex, &e->key);
    for (int b = 0; b < 32; b++)
        snprintf(digest + 2 * b, 3, "%02x", e->digest[b]);
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_object_begin(&j, NULL);
    cli_json_string(&j, "key", hex);
    cli_json_string(&j, "kind", kind ? kind : "");
    cli_json_string(&j, "arch", e->arch);
    cli_json_string(&j, "name", e->name);
    cli_json_uint(&j, "size", e->size);
    cli_json_uint(&j, "stored_size", e->stored_size);
    cli_json_string(&j, "blake2b", digest);
    cli_json_int(&j, "created_ms", e->created_at);
    cli_json_int(&j, "accessed_ms", e->accessed_at);
    cli_json_uint(&j, "hits", e->hits);
    cli_json_uint(&j, "compile_ns", e->compile_ns);
    cli_json_string(&j, "toolchain", e->toolchain);
    print_key_components(e, &j);
    cli_json_pairs(&j, "names", "expression", e->name_exprs, "lowered", e->lowered_names,
                   e->n_names);
    cli_json_array_begin(&j, "inputs");
    for (size_t i = 0; i < e->n_inputs; i++) {
        const kcache_input *in = &e->inputs[i];
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "role", role_name(in->role));
        cli_json_string(&j, "name", in->name);
        cli_json_uint(&j, "size", in->size);
        if (with_source) {
            /* Inputs are text; an embedded NUL would end it early, so show what precedes. */
            char *text = malloc(in->size + 1);
            if (text) {
                memcpy(text, in->data, in->size);
                text[in->size] = '\0';
                cli_json_string(&j, "text", text);
                free(text);
            }
        }
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_string(&j, "log", e->log);
    if (with_ptx && e->kind == KCACHE_KIND_PTX)
        cli_json_string(&j, "ptx", (const char *)e->data);
    if (cubin)
        print_cubin_json(&j, cubin);
    else if (cubin_error)
        cli_json_string(&j, "cubin_error", cubin_error);
    cli_json_object_end(&j);
    cli_json_finish(&j);
}

/* A source or PTX text, terminal-safe (an embedded NUL shows as \x00, the rest goes on). */
static void print_text(const void *data, size_t size)
{
    const char *p = data;
    for (size_t done = 0; done < size;) {
        cli_fputs_safe(stdout, p + done, 1);
        done += strlen(p + done);
        if (done < size) {
            fputs("\\x00", stdout);
            done++;
        }
    }
}

static void print_human(const kcache_entry *e, const kcache_cubin_info *cubin,
                        const char *cubin_error, int with_log, int with_source, int with_ptx)
{
    char hex[KCACHE_KEY_HEX_SIZE], a[32], b[32];
    const char *kind = kcache_kind_name(e->kind);
    kcache_key_hex(hex, &e->key);
    printf("Key:           %s\n", hex);
    printf("Kind:          %s\n", kind ? kind : "?");
    printf("Architecture:  %s\n", cli_safe(e->arch));
    printf("Source name:   %s\n", cli_safe(e->name));
    printf("Size:          %s (%s stored)\n", kcache_format_size(a, sizeof(a), e->size),
           kcache_format_size(b, sizeof(b), e->stored_size));
    printf("BLAKE2b:       ");
    for (int i = 0; i < 32; i++)
        printf("%02x", e->digest[i]);
    printf("\nCreated:       %s\n", cli_format_time(a, sizeof(a), e->created_at));
    printf("Last used:     %s\n", cli_format_time(a, sizeof(a), e->accessed_at));
    printf("Hits:          %llu\n", (unsigned long long)e->hits);
    printf("Compile time:  %s\n", cli_format_duration(a, sizeof(a), e->compile_ns));
    printf("Toolchain:     %s\n", e->toolchain[0] ? cli_safe(e->toolchain) : "-");
    print_key_components(e, NULL);
    if (e->n_names) {
        printf("\nName expressions:\n");
        for (size_t i = 0; i < e->n_names; i++)
            printf("  %s -> %s\n", cli_safe(e->name_exprs[i]), cli_safe(e->lowered_names[i]));
    }
    if (e->n_inputs) {
        printf("\nInputs:\n");
        for (size_t i = 0; i < e->n_inputs; i++)
            printf("  %-6s %10s  %s\n", role_name(e->inputs[i].role),
                   kcache_format_size(a, sizeof(a), e->inputs[i].size),
                   cli_safe(e->inputs[i].name));
    }
    if (cubin)
        print_cubin_human(cubin);
    else if (cubin_error)
        printf("\nCUBIN: not readable: %s\n", cubin_error);
    if (with_log) {
        fputs("\nLog:\n", stdout);
        cli_fputs_safe(stdout, e->log[0] ? e->log : "(empty)\n", 1);
        if (e->log[0] && e->log[strlen(e->log) - 1] != '\n')
            putchar('\n');
    }
    if (with_source) {
        for (size_t i = 0; i < e->n_inputs; i++) {
            const kcache_input *in = &e->inputs[i];
            printf("\n==> %s (%s) <==\n", cli_safe(in->name), role_name(in->role));
            print_text(in->data, in->size);
            if (in->size && ((const char *)in->data)[in->size - 1] != '\n')
                putchar('\n');
        }
        if (!e->n_inputs)
            printf("\nNo inputs stored with this entry.\n");
    }
    if (with_ptx) {
        if (e->kind == KCACHE_KIND_PTX) {
            printf("\nPTX:\n");
            print_text(e->data, e->size);
        } else {
            printf("\nNo PTX: this entry is a %s.\n", kind ? kind : "?");
        }
    }
}

int cmd_inspect(int argc, char **argv)
{
    static const struct option options[] = {
        {"log", no_argument, NULL, 'l'},
        {"source", no_argument, NULL, 's'},
        {"ptx", no_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},
        CLI_OPTIONS_END,
    };
    int with_log = 0, with_source = 0, with_ptx = 0, json = 0, c;
    cli_options opts = CLI_OPTIONS(argc, argv, "inspect", usage_text, "h", options);
    while ((c = cli_next_option(&opts)) > 0) {
        switch (c) {
        case 'l': with_log = 1; break;
        case 's': with_source = 1; break;
        case 'p': with_ptx = 1; break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0)
        return opts.status;
    if (optind >= argc)
        return cli_usage_error("inspect", "which entry? give a key prefix (see 'kcache ls')");
    if (cli_extra_arg(&opts, 1))
        return CLI_USAGE;
    kcache_store *store;
    kcache_entry *e;
    int found = cli_find_entry(&store, &e, "inspect", argv[optind],
                               KCACHE_GET_NO_TOUCH | KCACHE_GET_INPUTS);
    if (found >= 0)
        return found;
    kcache_cubin_info *cubin = NULL;
    char cubin_error[256] = "";
    if (e->kind == KCACHE_KIND_CUBIN &&
        kcache_cubin_parse(&cubin, e->data, e->size, cubin_error, sizeof(cubin_error)) &&
        !cubin_error[0])
        snprintf(cubin_error, sizeof(cubin_error), "not an ELF file kcache can read");
    if (json)
        print_json(e, cubin, cubin_error[0] ? cubin_error : NULL, with_source, with_ptx);
    else
        print_human(e, cubin, cubin_error[0] ? cubin_error : NULL, with_log, with_source,
                    with_ptx);
    kcache_cubin_free(cubin);
    kcache_entry_free(e);
    kcache_store_close(store);
    return CLI_OK;
}
