/*
 * kcache compile: files x architectures through the cache, in parallel with
 * -j, reporting per item hit or miss, the key, the time and where the output
 * went. This is what CI runs to warm a cache.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kcache/compile.h>

#include "cli.h"
#include "compile_args.h"

#define KC_CLI_MAX(a, b) ((a) > (b) ? (a) : (b))

static const char usage_text[] =
    "usage: kcache compile FILE.cu... --arch sm_90[,sm_80...] [options] [-- NVRTC-OPTIONS]\n"
    "\n"
    "Compiles each file for each architecture through the cache: a hit is served\n"
    "from the cache, a miss is compiled with NVRTC and stored.\n"
    "\n"
    "  -a, --arch LIST         architectures, comma-separated (sm_90, sm_90a, compute_90,\n"
    "                          native)\n"
    "  -I DIR                  add a header directory (repeatable)\n"
    "  -D NAME[=VALUE]         define a macro (repeatable)\n"
    "      --std STD           C++ dialect, e.g. c++17\n"
    "      --cubin | --ptx | --ltoir   what to produce (default: cubin, or ptx for compute_XX)\n"
    "      --name-expr EXPR    a name expression to lower, e.g. 'tiled_gemm<float, 16>'\n"
    "                          (repeatable)\n"
    "      --extra-digest HEX  bytes of anything kcache cannot see that changes the output\n"
    "  -o, --output PATH       write the artifact: a file for one item, else a directory\n"
    "                          (FILE.ARCH.cubin|ptx|ltoir in it)\n"
    "  -j, --jobs N            compile N items at once (default 1)\n"
    "      --no-cache          compile without looking up or storing\n"
    "      --remote URL        share through Redis: redis://[user:password@]host:port[/db]\n"
    "                          (else KCACHE_REMOTE or remote in kcache.conf)\n"
    "      --refresh           compile even on a hit, and replace the entry\n"
    "      --json              one JSON document on stdout (fields in the README)\n"
    "  -q, --quiet             no per-item lines (errors and logs still shown)\n"
    "  -h, --help              this text\n"
    "\n"
    "Options after -- go to NVRTC as they are (e.g. -- -lineinfo --use_fast_math).\n"
    "Exit status: 0 when every item compiled, 1 if any failed, 2 for a usage error.\n";

struct item {
    const char *file;
    const char *arch;
    kcache_result *result;
    int rc;
    char output[4096];
};

struct job {
    kcache_compiler *compiler;
    const struct compile_args *args;
    const char *output;
    int output_is_dir;
    struct item *items;
    size_t n_items;
    size_t next, done;
    pthread_mutex_t lock;
    int progress;
};

static const char *ext_of(kcache_kind kind)
{
    const char *name = kcache_kind_name(kind);
    return name ? name : "bin";
}

static int write_file(const char *path, const void *data, size_t size, char *err, size_t err_size)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wbx");
    if (!f) {
        snprintf(err, err_size, "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    int ok = fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, err_size, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void output_path(const struct job *job, const struct item *it, char *out, size_t size)
{
    if (!job->output) {
        out[0] = '\0';
        return;
    }
    if (!job->output_is_dir) {
        snprintf(out, size, "%s", job->output);
        return;
    }
    const char *base = strrchr(it->file, '/');
    base = base ? base + 1 : it->file;
    size_t stem = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base)
        stem = (size_t)(dot - base);
    snprintf(out, size, "%s/%.*s.%s.%s", job->output, (int)stem, base, it->result->arch,
             ext_of(it->result->kind));
}

static void run_item(struct job *job, struct item *it)
{
    kcache_request req;
    compile_args_request(job->args, &req, it->file, it->arch);
    it->rc = kcache_compile(&it->result, job->compiler, &req);
    if (it->rc || !it->result)
        return;
    output_path(job, it, it->output, sizeof(it->output));
    if (it->output[0]) {
        char err[4400];
        if (write_file(it->output, it->result->data, it->result->size, err, sizeof(err)) != 0) {
            cli_error("%s", err);
            it->rc = KCACHE_EIO;
        }
    }
}

static void *worker(void *arg)
{
    struct job *job = arg;
    for (;;) {
        pthread_mutex_lock(&job->lock);
        size_t i = job->next < job->n_items ? job->next++ : job->n_items;
        pthread_mutex_unlock(&job->lock);
        if (i >= job->n_items)
            break;
        run_item(job, &job->items[i]);
        pthread_mutex_lock(&job->lock);
        job->done++;
        if (job->progress)
            fprintf(stderr, "\r\033[Kkcache: compiled %zu/%zu", job->done, job->n_items);
        pthread_mutex_unlock(&job->lock);
    }
    return NULL;
}

static void print_human(const struct job *job)
{
    char t[64];
    int file_w = 4, arch_w = 5;
    for (size_t i = 0; i < job->n_items; i++) {
        const kcache_result *r = job->items[i].result;
        file_w = KC_CLI_MAX(file_w, (int)strlen(job->items[i].file));
        if (r)
            arch_w = KC_CLI_MAX(arch_w, (int)strlen(r->arch));
    }
    for (size_t i = 0; i < job->n_items; i++) {
        const struct item *it = &job->items[i];
        const kcache_result *r = it->result;
        if (!r || (it->rc && it->rc != KCACHE_EIO))
            continue;
        char hex[KCACHE_KEY_HEX_SIZE];
        kcache_key_hex(hex, &r->key);
        printf("%-4s  %-*s  %-*s  %-12.12s  %10s  %s\n", r->hit ? "hit" : "miss", arch_w, r->arch,
               file_w, it->file, r->keyed ? hex : "(not cached)",
               cli_format_duration(t, sizeof(t), r->elapsed_ns),
               it->output[0]                       ? it->output
               : r->remote_hit                     ? "cache (from the remote)"
               : r->keyed && !r->store_status      ? "cache"
                                                   : "-");
    }
}

static void print_json(const struct job *job, size_t hits, size_t misses, size_t errors)
{
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_object_begin(&j, NULL);
    cli_json_array_begin(&j, "items");
    for (size_t i = 0; i < job->n_items; i++) {
        const struct item *it = &job->items[i];
        const kcache_result *r = it->result;
        cli_json_object_begin(&j, NULL);
        cli_json_string(&j, "source", it->file);
        cli_json_string(&j, "arch", r && r->arch[0] ? r->arch : it->arch);
        cli_json_string(&j, "status", it->rc ? "error" : "ok");
        cli_json_string(&j, "message", r ? r->message : kcache_strerror(it->rc));
        if (r) {
            char hex[KCACHE_KEY_HEX_SIZE];
            kcache_key_hex(hex, &r->key);
            const char *kind = kcache_kind_name(r->kind);
            cli_json_string(&j, "kind", kind ? kind : "");
            cli_json_bool(&j, "hit", r->hit);
            cli_json_bool(&j, "remote_hit", r->remote_hit);
            cli_json_bool(&j, "cached", r->keyed && !r->store_status);
            if (r->keyed)
                cli_json_string(&j, "key", hex);
            else
                cli_json_null(&j, "key");
            cli_json_uint(&j, "size", r->size);
            cli_json_double(&j, "elapsed_ms", (double)r->elapsed_ns / 1e6);
            cli_json_double(&j, "compile_ms", (double)r->compile_ns / 1e6);
            cli_json_string(&j, "store_message", r->store_message);
            if (it->output[0])
                cli_json_string(&j, "output", it->output);
            else
                cli_json_null(&j, "output");
            cli_json_string(&j, "log", r->log);
            cli_json_array_begin(&j, "lowered_names");
            for (size_t k = 0; k < r->n_names; k++) {
                cli_json_object_begin(&j, NULL);
                cli_json_string(&j, "name_expr", r->name_exprs[k]);
                cli_json_string(&j, "lowered", r->lowered_names[k]);
                cli_json_object_end(&j);
            }
            cli_json_array_end(&j);
        }
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_uint(&j, "hits", hits);
    cli_json_uint(&j, "misses", misses);
    cli_json_uint(&j, "errors", errors);
    cli_json_object_end(&j);
    cli_json_finish(&j);
}

int cmd_compile(int argc, char **argv)
{
    struct compile_args a;
    int status = compile_args_parse(&a, "compile", usage_text, argc, argv);
    if (status >= 0) {
        compile_args_free(&a);
        return status;
    }
    struct job job;
    memset(&job, 0, sizeof(job));
    job.args = &a;
    job.output = a.output;
    job.n_items = a.n_files * a.n_archs;
    job.items = calloc(job.n_items, sizeof(*job.items));
    kcache_compiler *compiler = NULL;
    if (!job.items) {
        status = cli_error("out of memory");
        goto out;
    }
    for (size_t f = 0; f < a.n_files; f++)
        for (size_t k = 0; k < a.n_archs; k++) {
            job.items[f * a.n_archs + k].file = a.files[f];
            job.items[f * a.n_archs + k].arch = a.archs[k];
        }
    if (job.output) {
        struct stat st;
        job.output_is_dir = job.n_items > 1 || (stat(job.output, &st) == 0 && S_ISDIR(st.st_mode));
        if (job.n_items > 1 && mkdir(job.output, 0777) != 0 && errno != EEXIST) {
            status = cli_error("cannot create directory %s: %s", job.output, strerror(errno));
            goto out;
        }
    }
    if ((status = compile_args_compiler(&a, &compiler)) != CLI_OK)
        goto out;
    job.compiler = compiler;
    job.progress = !a.json && job.n_items > 1 && isatty(STDERR_FILENO);
    pthread_mutex_init(&job.lock, NULL);
    size_t n_threads = (size_t)a.jobs < job.n_items ? (size_t)a.jobs : job.n_items;
    pthread_t *threads = calloc(n_threads, sizeof(*threads));
    size_t started = 0;
    for (size_t t = 1; threads && t < n_threads; t++)
        if (pthread_create(&threads[started], NULL, worker, &job) == 0)
            started++;
    worker(&job);
    for (size_t t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    free(threads);
    pthread_mutex_destroy(&job.lock);
    if (job.progress)
        fputs("\r\033[K", stderr);

    size_t hits = 0, misses = 0, errors = 0;
    for (size_t i = 0; i < job.n_items; i++) {
        struct item *it = &job.items[i];
        const kcache_result *r = it->result;
        if (r && r->log && *r->log && !a.json)
            fprintf(stderr, "%s", r->log);
        if (it->rc) {
            errors++;
            if (!a.json)
                cli_error("%s (%s): %s", it->file, it->arch,
                          r && r->message[0] ? r->message : kcache_strerror(it->rc));
        } else if (r->hit) {
            hits++;
        } else {
            misses++;
        }
        if (r && r->store_status && r->store_status != KCACHE_EDISABLED && !it->rc && !a.json)
            cli_warn("%s (%s): not cached: %s", it->file, it->arch, r->store_message);
    }
    if (a.json)
        print_json(&job, hits, misses, errors);
    else if (!a.quiet)
        print_human(&job);
    status = errors ? CLI_FAIL : CLI_OK;
out:
    for (size_t i = 0; job.items && i < job.n_items; i++)
        kcache_result_free(job.items[i].result);
    free(job.items);
    kcache_compiler_free(compiler);
    compile_args_free(&a);
    return status;
}
