/*
 * The options of compile and explain, and the requests they make: from the
 * command line, or from a request list (--from, below).
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "compile_args.h"
#include "json_read.h"

enum { OPT_STD = 256, OPT_CUBIN, OPT_PTX, OPT_LTOIR, OPT_NAME_EXPR, OPT_EXTRA, OPT_NO_CACHE,
       OPT_REFRESH, OPT_JSON, OPT_REMOTE, OPT_FROM, OPT_REQUIRE_HIT, OPT_CACHE_KEY };

/* The CPUs this process may run on (taskset, a container's cpuset), at most 256: -j's default. */
static long cpus(void)
{
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : n;
}

int compile_args_push(const char ***v, size_t *n, const char *s)
{
    const char **grown = realloc(*v, (*n + 1) * sizeof(*grown));
    if (!grown)
        return -1;
    grown[(*n)++] = s;
    *v = grown;
    return 0;
}

/* Keeps a string alive for the life of the arguments. */
const char *compile_args_own(struct compile_args *a, char *s)
{
    char **grown = s ? realloc(a->owned, (a->n_owned + 1) * sizeof(*grown)) : NULL;
    if (!grown) {
        free(s);
        return NULL;
    }
    grown[a->n_owned++] = s;
    a->owned = grown;
    return s;
}

static const char *joined(struct compile_args *a, const char *prefix, const char *value)
{
    size_t n = strlen(prefix) + strlen(value) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", prefix, value);
    return compile_args_own(a, s);
}

static int parse_hex(const char *hex, uint8_t **out, size_t *size)
{
    size_t n = strlen(hex);
    if (n == 0 || n % 2 || n > 1024 || strspn(hex, "0123456789abcdefABCDEF") != n)
        return -1;
    uint8_t *b = malloc(n / 2);
    if (!b)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        b[i] = (uint8_t)v;
    }
    *out = b;
    *size = n / 2;
    return 0;
}

/*
 * NVRTC's and nvcc's own options before "--" (-std=c++14, -lineinfo,
 * --use_fast_math): named, with where they go, before getopt reads
 * "-std=c++14" as -s -t -d... and blames whatever it meets next. nvcc's
 * -arch=sm_90 (and "-arch sm_90") is kcache's --arch, rewritten in place.
 * Returns -1 to go on, else the exit code (reported).
 */
static int foreign_options(struct compile_args *a, const char *verb,
                           const struct option *options, int n_args, char **argv)
{
    for (int i = 1; i < n_args; i++) {
        char *arg = argv[i];
        if (arg[0] != '-' || !arg[1])
            continue;
        if (!strcmp(arg, "-arch")) {
            argv[i++] = (char *)"--arch";
            continue;
        }
        if (!strncmp(arg, "-arch=", 6)) {
            const char *long_form = joined(a, "--arch=", arg + 6);
            if (!long_form)
                return cli_error("out of memory");
            argv[i] = (char *)long_form;
            continue;
        }
        int known = 0, takes_value = 0;
        if (arg[1] == '-') {
            size_t n = strcspn(arg + 2, "=");
            for (const struct option *o = options; o->name && !known; o++)
                if (strlen(o->name) == n && !strncmp(o->name, arg + 2, n)) {
                    known = 1;
                    takes_value = o->has_arg == required_argument && !arg[2 + n];
                }
            if (!arg[2])
                known = 1; /* "--" itself never gets here */
        } else if (strchr("aIDojqh", arg[1])) {
            known = 1;
            takes_value = strchr("aIDoj", arg[1]) && !arg[2];
        }
        if (!known)
            return cli_usage_error(verb, "'%s' is not a kcache option: NVRTC options go after "
                                   "--, e.g. 'kcache %s FILE.cu --arch sm_90 -- %s'", arg, verb,
                                   arg);
        if (takes_value)
            i++;
    }
    return -1;
}

/*
 * The architecture is kcache's to pass (it is part of the key and of the
 * output's name): one given to NVRTC after "--" is a usage error, not a
 * failed compile.
 */
static int arch_in_tail(const char *verb, const char **tail, size_t n_tail)
{
    static const char *const spellings[] = {"-arch", "--gpu-architecture"};
    for (size_t i = 0; i < n_tail; i++)
        for (size_t k = 0; k < 2; k++) {
            size_t n = strlen(spellings[k]);
            if (!strncmp(tail[i], spellings[k], n) && (!tail[i][n] || tail[i][n] == '='))
                return cli_usage_error(verb, "'%s' after --: kcache passes the architecture "
                                       "itself; give it with --arch (e.g. --arch sm_80)",
                                       tail[i]);
        }
    return -1;
}

/*
 * One option of compile_args_parse(), c as getopt_long() gives it (optarg
 * set). Returns -1 to go on, else the exit status (reported).
 */
static int one_option(struct compile_args *a, const char *verb, const char *usage, int c,
                      const char **std_opt, char **argv)
{
    switch (c) {
    case 'a': {
        /* Given twice, two lists: --arch sm_90 --arch sm_80 is sm_90,sm_80, never
         * the last alone (a silent drop that -o FILE would then hide). */
        size_t had = a->arch_list ? strlen(a->arch_list) : 0;
        char *grown = realloc(a->arch_list, had + strlen(optarg) + 2);
        if (!grown)
            return cli_error("out of memory");
        snprintf(grown + had, strlen(optarg) + 2, "%s%s", had ? "," : "", optarg);
        a->arch_list = grown;
        break;
    }
    case 'I': compile_args_push(&a->nvrtc, &a->n_nvrtc, joined(a, "-I", optarg)); break;
    case 'D': compile_args_push(&a->nvrtc, &a->n_nvrtc, joined(a, "-D", optarg)); break;
    case OPT_STD: *std_opt = joined(a, "--std=", optarg); break;
    case OPT_CUBIN: a->kind = KCACHE_KIND_CUBIN; break;
    case OPT_PTX: a->kind = KCACHE_KIND_PTX; break;
    case OPT_LTOIR: a->kind = KCACHE_KIND_LTOIR; break;
    case OPT_NAME_EXPR: compile_args_push(&a->exprs, &a->n_exprs, optarg); break;
    case OPT_EXTRA:
        free(a->extra);
        a->extra = NULL;
        if (parse_hex(optarg, &a->extra, &a->extra_size) != 0)
            return cli_usage_error(verb, "--extra-digest '%.40s' is not hex bytes", optarg);
        break;
    case 'o': a->output = optarg; break;
    case OPT_REMOTE:
        if (optarg[0] && strcmp(optarg, "none") && !cli_remote_url_ok(optarg))
            return cli_usage_error(verb, "--remote '%s': expected " CLI_REMOTE_URLS ", or none",
                                   optarg);
        a->remote = optarg;
        break;
    case 'j': {
        uint64_t jobs = (uint64_t)cpus();
        if (strcmp(optarg, "auto") && kcache_parse_count(&jobs, optarg, 1, 256))
            return cli_usage_error(verb, "-j '%s': give a number from 1 to 256, or auto "
                                   "(one for each CPU)", optarg);
        a->jobs = (long)jobs;
        break;
    }
    case OPT_NO_CACHE: a->flags |= KCACHE_COMPILE_NO_CACHE; break;
    case OPT_REFRESH: a->flags |= KCACHE_COMPILE_REFRESH; break;
    case OPT_CACHE_KEY: a->cache_key = 1; break;
    /* The flag wins over the environment and kcache.conf, as every flag does. */
    case OPT_REQUIRE_HIT: setenv("KCACHE_REQUIRE_HIT", "1", 1); break;
    case OPT_JSON: a->json = 1; break;
    case OPT_FROM: a->from = optarg; break;
    case 'q': a->quiet = 1; break;
    case 'h': fputs(usage, stdout); return CLI_OK;
    default:
        return cli_usage_error(verb, "unknown option or missing value: '%s'", argv[optind - 1]);
    }
    return -1;
}

static int file_units(struct compile_args *a, const char *verb);

int compile_args_parse(struct compile_args *a, const char *verb, const char *usage, int argc,
                       char **argv)
{
    static const struct option options[] = {
        {"arch", required_argument, NULL, 'a'},
        {"std", required_argument, NULL, OPT_STD},
        {"cubin", no_argument, NULL, OPT_CUBIN},
        {"ptx", no_argument, NULL, OPT_PTX},
        {"ltoir", no_argument, NULL, OPT_LTOIR},
        {"name-expr", required_argument, NULL, OPT_NAME_EXPR},
        {"extra-digest", required_argument, NULL, OPT_EXTRA},
        {"output", required_argument, NULL, 'o'},
        {"jobs", required_argument, NULL, 'j'},
        {"no-cache", no_argument, NULL, OPT_NO_CACHE},
        {"refresh", no_argument, NULL, OPT_REFRESH},
        {"require-hit", no_argument, NULL, OPT_REQUIRE_HIT},
        {"json", no_argument, NULL, OPT_JSON},
        {"remote", required_argument, NULL, OPT_REMOTE},
        {"from", required_argument, NULL, OPT_FROM},
        {"cache-key", no_argument, NULL, OPT_CACHE_KEY},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof(*a));
    a->jobs = cpus();
    /* Everything after "--" goes to NVRTC untouched; before it, GNU getopt
     * permutes, so options may come before or after the files. */
    int n_args = argc;
    const char **tail = NULL;
    size_t n_tail = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            n_args = i;
            for (int k = i + 1; k < argc; k++)
                compile_args_push(&tail, &n_tail, argv[k]);
            break;
        }
    int status = foreign_options(a, verb, options, n_args, argv);
    if (status < 0)
        status = arch_in_tail(verb, tail, n_tail);
    if (status >= 0) {
        free(tail);
        return status;
    }
    const char *std_opt = NULL;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(n_args, argv, "a:I:D:o:j:qh", options, NULL)) != -1) {
        if ((status = one_option(a, verb, usage, c, &std_opt, argv)) >= 0) {
            free(tail);
            return status;
        }
    }
    if (std_opt)
        compile_args_push(&a->nvrtc, &a->n_nvrtc, std_opt);
    for (size_t i = 0; i < n_tail; i++)
        compile_args_push(&a->nvrtc, &a->n_nvrtc, tail[i]);
    free(tail);
    for (int i = optind; i < n_args; i++)
        compile_args_push(&a->files, &a->n_files, argv[i]);
    if (!a->n_files && !a->from)
        return cli_usage_error(verb, "no source file given");
    if (a->arch_list) {
        for (char *save = NULL, *s = strtok_r(a->arch_list, ",", &save); s;
             s = strtok_r(NULL, ",", &save))
            if (*s)
                compile_args_push(&a->archs, &a->n_archs, s);
        if (!a->n_archs)
            return cli_usage_error(verb, "--arch lists no architecture");
    }
    for (size_t i = 0; i < a->n_archs; i++)
        if (compile_args_check_arch(verb, a->archs[i], NULL) >= 0)
            return CLI_USAGE;
    for (size_t i = 0; i < a->n_files; i++) {
        struct stat st;
        if (stat(a->files[i], &st) == 0 && S_ISDIR(st.st_mode))
            return cli_usage_error(verb, "%s is a directory: give the .cu files in it",
                                   a->files[i]);
    }
    status = file_units(a, verb);
    if (status < 0 && a->from)
        status = compile_from_read(a, verb);
    if (status >= 0)
        return status;
    for (size_t u = 0; u < a->n_units; u++)
        if (!a->units[u].n_archs)
            return cli_usage_error(verb, "no architecture for %s: pass --arch (e.g. --arch "
                                   "sm_90)", a->units[u].source);
    return -1;
}

int compile_args_check_arch(const char *verb, const char *arch, const char *where)
{
    char norm[32];
    if (!strcmp(arch, "native") || kcache_arch_normalize(norm, sizeof(norm), arch) == 0)
        return -1;
    return cli_usage_error(verb, "%s%s'%.40s' is not a GPU architecture (use e.g. sm_90, "
                           "sm_90a, compute_90 or native)", where ? where : "",
                           where ? ": " : "", arch);
}

/* Whether two spellings name one file (a/k.cu and ./a/k.cu). */
static int same_file(const char *x, const char *y)
{
    struct stat sx, sy;
    if (!strcmp(x, y))
        return 1;
    return stat(x, &sx) == 0 && stat(y, &sy) == 0 && sx.st_dev == sy.st_dev &&
           sx.st_ino == sy.st_ino;
}

/*
 * A unit per file of the command line. --name-expr FILE=EXPR gives EXPR to
 * FILE alone; a plain --name-expr EXPR goes to every file (and request). The
 * form is told by what precedes the first '=': a file of this command, or
 * something ending in .cu that is not one (a mistake worth a message);
 * anything else is an expression (they may contain '=' only in a default
 * template argument, never before a source's name).
 */
static int file_units(struct compile_args *a, const char *verb)
{
    const char **global = NULL, **raw = a->exprs;
    size_t n_global = 0, n_raw = a->n_exprs;
    int status = -1;
    a->exprs = NULL;
    a->n_exprs = 0;
    a->units = calloc(a->n_files ? a->n_files : 1, sizeof(*a->units));
    if (!a->units) {
        status = cli_error("out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_raw && status < 0; i++) {
        const char *eq = strchr(raw[i], '=');
        size_t n = eq ? (size_t)(eq - raw[i]) : 0;
        char *file = eq ? strndup(raw[i], n) : NULL;
        int matched = 0;
        for (size_t f = 0; file && f < a->n_files; f++)
            matched |= same_file(file, a->files[f]);
        int looks_like_file = file && n > 3 && !strcmp(file + n - 3, ".cu");
        free(file);
        if (!matched && !looks_like_file) {
            compile_args_push(&global, &n_global, raw[i]);
        } else if (!matched) {
            status = cli_usage_error(verb, "--name-expr '%s': %.*s is not among the files of "
                                     "this command%s", raw[i], (int)n, raw[i],
                                     a->from ? " (a request of --from has its own \"name_exprs\")"
                                             : "");
        }
    }
    for (size_t f = 0; f < a->n_files && status < 0; f++) {
        struct compile_unit *u = &a->units[a->n_units++];
        u->source = a->files[f];
        u->kind = a->kind;
        for (size_t k = 0; k < a->n_archs; k++)
            compile_args_push(&u->archs, &u->n_archs, a->archs[k]);
        for (size_t k = 0; k < a->n_nvrtc; k++)
            compile_args_push(&u->options, &u->n_options, a->nvrtc[k]);
        for (size_t k = 0; k < n_global; k++)
            compile_args_push(&u->exprs, &u->n_exprs, global[k]);
        for (size_t i = 0; i < n_raw; i++) {
            const char *eq = strchr(raw[i], '=');
            char *file = eq ? strndup(raw[i], (size_t)(eq - raw[i])) : NULL;
            if (file && same_file(file, u->source))
                compile_args_push(&u->exprs, &u->n_exprs, eq + 1);
            free(file);
        }
    }
out:
    /* What is left in a->exprs applies to every request of --from too. */
    a->exprs = global;
    a->n_exprs = n_global;
    free(raw);
    return status;
}

void compile_args_free(struct compile_args *a)
{
    for (size_t u = 0; u < a->n_units; u++) {
        free(a->units[u].archs);
        free(a->units[u].options);
        free(a->units[u].exprs);
    }
    free(a->units);
    free(a->files);
    free(a->archs);
    free(a->nvrtc);
    free(a->exprs);
    free(a->extra);
    free(a->arch_list);
    for (size_t i = 0; i < a->n_owned; i++)
        free(a->owned[i]);
    free(a->owned);
    compile_from_free(a);
}

void compile_args_request(const struct compile_args *a, kcache_request *req,
                          const struct compile_unit *unit, const char *arch)
{
    kcache_request r = KCACHE_REQUEST_INIT;
    r.source_path = unit->source;
    r.arch = arch;
    r.output = unit->kind;
    r.options = unit->options;
    r.n_options = unit->n_options;
    r.name_exprs = unit->exprs;
    r.n_name_exprs = unit->n_exprs;
    r.extra_digest = a->extra;
    r.extra_digest_size = a->extra_size;
    r.flags = a->flags | (a->cache_key ? KCACHE_COMPILE_KEY_ONLY : 0);
    *req = r;
}

int compile_args_compiler(const struct compile_args *a, kcache_compiler **compiler)
{
    kcache_compiler_options co = KCACHE_COMPILER_OPTIONS_INIT;
    char err[600];
    co.log = cli_log;
    /* The compiler opens the store the global options and the environment
     * name; failing to open it only means compiling without it (each result
     * says why). */
    /* --cache-key runs before CI restores the cache: it must not create one there. */
    co.no_store = (a->flags & KCACHE_COMPILE_NO_CACHE) != 0 || a->cache_key;
    co.store_path = cli_globals.path;
    co.store_max_size = cli_globals.max_size;
    co.remote = a->remote;
    if (kcache_compiler_new(compiler, &co, err, sizeof(err)) != 0)
        return cli_error("%s", err);
    return CLI_OK;
}

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
